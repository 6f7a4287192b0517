"""The data's randomness under DDP: two CPU ranks (gloo, Lightning's own launcher), samplers with a generator.

The fault-injection cells on one process are ``test_fault_matrix_data.py``. Here, under DDP, Lightning
wraps a sampler that is not torch's ``RandomSampler`` in its ``DistributedSamplerWrapper``, which
draws the sampler's whole order at each epoch's start: ``StatefulDataLoader(shuffle=True,
generator=g)`` (torchdata's ``RandomSampler``, sharing ``g`` with the loader, which draws its workers'
base seed from it after the permutation) and a ``SubsetRandomSampler(generator=g)``. One job runs the
uninterrupted fits and then the fits resumed from their checkpoints, inside epoch 0 and inside epoch
1 (``tests/scaling.py``: 120 rows, 15 batches per rank and epoch, 3 epochs); each resumed run's
batches on each rank, weights, epoch values and rows are the uninterrupted run's, with no warning.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import scaling
from launching import launch
from limits import hang_limit
from test_resume import EXACT
from test_scaling import FIT_S, MID_EPOCH, assert_ok, assert_resumed_exactly

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
