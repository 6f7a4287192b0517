"""The data's randomness under DDP: two CPU ranks (gloo, Lightning's own launcher), samplers with a generator.

The fault-injection cells on one process are ``test_fault_matrix_data.py``. Here, under DDP, Lightning
wraps a sampler that is not torch's ``RandomSampler`` in its ``DistributedSamplerWrapper``, which
draws the sampler's whole order at each epoch's start: ``StatefulDataLoader(shuffle=True,
generator=g)`` (torchdata's ``RandomSampler``, sharing ``g`` with the loader, which draws its workers'
base seed from it after the permutation) and a ``SubsetRandomSampler(generator=g)``. One job runs the
uninterrupted fits and then the fits resumed from their checkpoints, inside epoch 0 and inside epoch
1 (``tests/scaling.py``: 120 rows, 15 batches per rank and epoch, 3 epochs); each resumed run's
batches on each rank, weights, epoch values and rows are the uninterrupted run's, with no warning.

A plain ``DataLoader`` resumes the same way: with the ``DistributedSampler`` Lightning puts in
(``DataLoader(shuffle=True)``) and with a ``WeightedRandomSampler`` without a generator, which Lightning
wraps (its order from torch's global random state), without workers and with 2, inside epoch 0 and
inside epoch 1; plain Lightning's resume of the same checkpoint trains other batches.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import scaling
from launching import launch
from limits import hang_limit
from test_resume import EXACT
from test_scaling import FIT_S, MID_EPOCH, assert_ok, assert_resumed_exactly, same_batches

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume"),
]

EPOCH_0 = "step=8.ckpt"  # ModelCheckpoint(every_n_train_steps=4): epoch 0, after batch 7
# (sampler, checkpoint the resumed run starts from)
RESUMES = [("shuffle-generator", EPOCH_0), ("shuffle-generator", MID_EPOCH), ("subset-generator", MID_EPOCH)]


def test_samplers_with_a_generator_resume_exactly_on_two_ranks(tmp_path: Path) -> None:
    samplers = sorted({sampler for sampler, _ in RESUMES})
    runs = [{"root": str(tmp_path / f"full-{sampler}"), "sampler": sampler} for sampler in samplers]
    runs += [
        {
            "root": str(tmp_path / f"resumed-{sampler}-{checkpoint}"),
            "sampler": sampler,
            "ckpt": str(tmp_path / f"full-{sampler}" / "ckpt" / checkpoint),
        }
        for sampler, checkpoint in RESUMES
    ]
    assert_ok(launch(tmp_path, runs, limit=hang_limit(idle_s=FIT_S * len(runs))))
    for sampler, checkpoint in RESUMES:
        resumed = tmp_path / f"resumed-{sampler}-{checkpoint}"
        assert_resumed_exactly(resumed, tmp_path / f"full-{sampler}")
        assert scaling.record(resumed, 0)["warnings"] == []


PLAIN = [(sampler, workers) for sampler in ("plain-injected", "plain-wrapper") for workers in (0, 2)]


def test_a_plain_dataloader_resumes_exactly_on_two_ranks(tmp_path: Path) -> None:
    def name(sampler: str, workers: int) -> str:
        return f"{sampler}-{workers}"

    runs = [{"root": str(tmp_path / f"full-{name(*case)}"), "sampler": case[0], "workers": case[1]} for case in PLAIN]
    runs += [
        {
            "root": str(tmp_path / f"resumed-{name(*case)}-{checkpoint}"),
            "sampler": case[0],
            "workers": case[1],
            "ckpt": str(tmp_path / f"full-{name(*case)}" / "ckpt" / checkpoint),
        }
        for case in PLAIN
        for checkpoint in (EPOCH_0, MID_EPOCH)
    ]
    plain = tmp_path / "plain-lightning"  # plain Lightning's resume of the injected sampler's checkpoint
    runs.append(
        {
            "root": str(plain),
            "module": "plain",
            "sampler": "plain-injected",
            "ckpt": str(tmp_path / "full-plain-injected-0" / "ckpt" / MID_EPOCH),
        }
    )
    assert_ok(launch(tmp_path, runs, limit=hang_limit(idle_s=FIT_S * len(runs))))
    for case in PLAIN:
        for checkpoint in (EPOCH_0, MID_EPOCH):
            resumed = tmp_path / f"resumed-{name(*case)}-{checkpoint}"
            assert_resumed_exactly(resumed, tmp_path / f"full-{name(*case)}")
            assert scaling.record(resumed, 0)["warnings"] == [], (case, checkpoint)
    # plain Lightning starts the epoch's iterator again: 15 of its 25 batches are the uninterrupted run's
    assert same_batches(plain, tmp_path / "full-plain-injected-0", 0) == (15, 25)
