"""Two CPU ranks (gloo, the default 30-minute process-group timeout), started by Lightning's own launcher:
a fault on one rank ends the job in seconds, a save on one rank alone never blocks, and the data order
Lightning injects resumes exactly (lightning_step_types/resume/rank_exchange.py, resume/data_order.py).

Each job runs ``tests/scaling.py`` in a session of its own with an outer time limit (``launching.py``);
the uninterrupted runs are the reference every resumed run is compared with, bit for bit: the sample
ids of every batch on each rank, the weights, ``callback_metrics``, ``logged_metrics`` and rank 0's CSV
rows. Plain Lightning runs beside them, and its figures are asserted too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import scaling
import torch
from launching import Job, launch, same_tensors
from limits import hang_limit
from test_resume import EXACT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume"),
]

# A job of a fit or two on two processes, a restart included, takes 10 to 30 s on an idle machine (a fault
# on one rank ends it in about 10 s; the uninterrupted fit takes 12 s); a hang is killed at the limit.
LIMIT = hang_limit(idle_s=30)
FIT_S = 12  # one fit of a job of several, on an idle machine
# Plain Lightning hangs in the process group's barrier (30 minutes by default): still running this long
# after its fault, it is taken to hang.
HANG_SHOWN_S = 30
FAULT = {"kind": "raise", "ranks": [1], "epoch": 1, "batch": 5}
# the checkpoints the runs resume from: ModelCheckpoint's step 20 (epoch 1, after batch 4), an epoch's end
MID_EPOCH, EPOCH_END = "step=20.ckpt", "end-epoch=0.ckpt"


def assert_ok(job: Job) -> None:
    assert job.returncode == 0, job.output[-6000:]


def assert_resumed_exactly(resumed: Path, full: Path, attempt: int = 0) -> None:
    """The resumed run's batches, weights, epoch values and rows are the uninterrupted run's."""
    for rank in (0, 1):
        done, reference = scaling.record(resumed, rank, attempt), scaling.record(full, rank)
        assert done["seen"] == reference["seen"][-len(done["seen"]) :], rank
        assert same_tensors(done["params"], reference["params"]), rank
        assert same_tensors(done["callback"], reference["callback"]), rank
        assert same_tensors(done["logged"], reference["logged"]), rank
    rows, reference_rows = scaling.rows(resumed, attempt), scaling.rows(full)
    assert rows and rows == reference_rows[-len(rows) :]


def same_batches(resumed: Path, full: Path, rank: int) -> tuple[int, int]:
    done, reference = scaling.record(resumed, rank), scaling.record(full, rank)
    tail = reference["seen"][-len(done["seen"]) :]
    return sum(a == b for a, b in zip(done["seen"], tail)), len(done["seen"])


def largest_weight_difference(resumed: Path, full: Path, rank: int) -> float:
    done, reference = scaling.record(resumed, rank)["params"], scaling.record(full, rank)["params"]
    return max(float((done[name] - reference[name]).abs().max()) for name in done)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Uninterrupted runs, typed and plain, saving mid-epoch and at each epoch's end."""
    root = tmp_path_factory.mktemp("reference")
    runs = [
        {
            "root": str(root / f"{module}-{sampler}-{workers}"),
            "module": module,
            "sampler": sampler,
            "workers": workers,
            "epoch_checkpoints": True,
        }
        for module, sampler, workers in [*CASES, ("typed", "weighted", 0)]
    ]
    assert_ok(launch(root, runs, limit=hang_limit(idle_s=FIT_S * len(runs))))
    return root


# (module, sampler, workers) of the uninterrupted runs
CASES = [
    (module, sampler, workers)
    for sampler, workers in [
        ("injected", 0),
        ("wrapper", 0),
        ("user", 0),
        ("stateful", 0),
        ("injected", 2),
        ("wrapper", 2),
        ("user", 2),
        ("stateful", 2),
        ("plain-injected", 2),
    ]
    for module in ("typed", "plain")
]


# --- 1. a fault on one rank never hangs -----------------------------------------------------------------


def test_an_exception_on_one_rank_ends_the_job_in_seconds_and_its_checkpoint_resumes_exactly(
    tmp_path: Path, reference: Path
) -> None:
    faulty = {"root": str(tmp_path / "faulty"), "sampler": "injected", "on_exception": True, "fault": FAULT}
    job = launch(tmp_path / "faulty", [faulty], limit=LIMIT)
    assert job.returncode not in (0, None), job.output[-6000:]
    assert "RuntimeError: simulated fault on rank 1" in job.output
    # rank 0 is told by gloo that rank 1 is gone, saves its own on_exception checkpoint and exits
    assert "Connection closed by peer" in job.output
    # in seconds, not at the process group's timeout (30 minutes): measured about 10 s on an idle machine
    assert job.seconds < hang_limit(idle_s=10), job.seconds
    checkpoint = tmp_path / "faulty" / "ckpt" / "on_exception.ckpt"
    saved = torch.load(checkpoint, weights_only=False)["lightning_step_types"]["epoch_state"]
    assert (saved["point"]["kind"], saved["point"]["epoch"], saved["point"]["batch"]) == ("batch", 1, 5)
    assert all(state is not None for state in saved["ranks"])  # both ranks saved at batch 5, before its step

    resumed = {"root": str(tmp_path / "resumed"), "sampler": "injected", "ckpt": str(checkpoint)}
    assert_ok(launch(tmp_path / "resumed", [resumed], limit=LIMIT))
    assert_resumed_exactly(tmp_path / "resumed", reference / "typed-injected-0")


def test_plain_lightning_hangs_on_the_same_fault(tmp_path: Path) -> None:
    """Rank 1 waits in save_checkpoint's barrier, rank 0 in the next gradient all-reduce: until the
    process group's timeout (30 minutes). Killed here once it has run on for HANG_SHOWN_S after the fault."""
    faulty = {
        "root": str(tmp_path / "plain"),
        "module": "plain",
        "sampler": "injected",
        "on_exception": True,
        "fault": FAULT,
    }
    job = launch(tmp_path / "plain", [faulty], limit=LIMIT, hung_after=(tmp_path / "plain" / "faulted-1", HANG_SHOWN_S))
    assert job.timed_out, job.output[-6000:]
    assert (tmp_path / "plain" / "faulted-1").exists()  # the fault happened; the traceback is never printed


def test_a_save_or_a_signal_on_one_rank_alone_never_blocks_and_the_resume_names_the_missing_rank(
    tmp_path: Path, reference: Path
) -> None:
    """``trainer.save_checkpoint`` from rank 0's hook alone waits ``rank_exchange.SAVE_WAIT_S`` (10 s) for
    rank 1, writes what it knows, and the fit goes on (SLURM's signal to one rank: test_scaling_recipes)."""
    root = tmp_path / "alone"
    runs = [{"root": str(root / "save"), "sampler": "injected", "fault": {**FAULT, "kind": "save", "ranks": [0]}}]
    job = launch(root, runs, limit=LIMIT)
    assert_ok(job)
    assert job.seconds < hang_limit(idle_s=15), job.seconds  # one wait of 10 s, not the process group's 30 minutes
    # the run itself went on unchanged
    for rank in (0, 1):
        assert same_tensors(
            scaling.record(root / "save", rank)["params"],
            scaling.record(reference / "typed-injected-0", rank)["params"],
        )
    saved = torch.load(root / "save" / "alone.ckpt", weights_only=False)["lightning_step_types"]["epoch_state"]
    assert saved["ranks"][0] is not None and saved["ranks"][1] is None

    resumed = {"root": str(root / "resumed"), "sampler": "injected", "ckpt": str(root / "save" / "alone.ckpt")}
    assert_ok(launch(root / "resumed", [resumed], limit=LIMIT))
    (warning,) = scaling.record(root / "resumed", 0)["warnings"] + scaling.record(root / "resumed", 1)["warnings"]
    assert warning == RANKS_WARNING
    # both ranks trained the uninterrupted run's batches on; rank 0's epoch values are the uninterrupted
    # run's (rank 1's epoch 1 started fresh, as the warning says)
    # each rank's batches since the resume are the uninterrupted run's; rank 0's record of the batches it
    # saw (a list the module appends to) comes back with its state, rank 1's starts fresh with its own
    assert same_batches(root / "resumed", reference / "typed-injected-0", 0) == (45, 45)
    assert same_batches(root / "resumed", reference / "typed-injected-0", 1) == (25, 25)
    assert same_tensors(
        scaling.record(root / "resumed", 0)["callback"], scaling.record(reference / "typed-injected-0", 0)["callback"]
    )


RANKS_WARNING = (
    "MyModel: resuming epoch 1 at batch 5\n"
    "  got:      a checkpoint whose processes were not at one point when it was saved: rank 0 at epoch 1"
    " at batch 5, rank 1 elsewhere or at no save (a signal, an exception or a save_checkpoint call that reached"
    " some processes only, or at different moments); the running state of rank 1 starts fresh: 'train_loss'"
    " (training_step), 'train_max' (training_step), MyModel.seen, ModelCheckpoint._last_global_step_saved,"
    " ModelCheckpoint._last_checkpoint_saved\n"
    "  expected: every process saving at the same point (ModelCheckpoint, or a save every process reaches)\n"
    "  fix:      nothing to do for this run; checkpoints that ModelCheckpoint saves resume exactly"
)


# --- 2. the data order resumes exactly under DDP ------------------------------------------------------


def test_each_process_keeps_its_samplers_states_and_an_earlier_releases_entry_still_loads(
    tmp_path: Path, reference: Path
) -> None:
    """The wrapped sampler's states are in each process's part of the running state; a checkpoint of an earlier
    release held rank 0's at the top of the library's entry, and resumes exactly from there too."""
    name = "typed-wrapper-0"
    checkpoint = torch.load(reference / name / "ckpt" / MID_EPOCH, weights_only=False)
    ours = checkpoint["lightning_step_types"]
    assert "data_order" not in ours
    entries = [rank.pop("data_order") for rank in ours["epoch_state"]["ranks"]]
    assert [[(item["loader"], item["epoch"]) for item in entry] for entry in entries] == [[(0, 1)], [(0, 1)]]
    assert all(same_tensors(a["state"], b["state"]) for a, b in zip(entries[0], entries[1]))  # one sampler, alike
    ours["data_order"] = entries[0]  # where an earlier release wrote it
    legacy = tmp_path / "legacy.ckpt"
    torch.save(checkpoint, legacy)
    run = {"root": str(tmp_path / "legacy"), "module": "typed", "sampler": "wrapper", "workers": 0, "ckpt": str(legacy)}
    assert_ok(launch(tmp_path, [run], limit=hang_limit(idle_s=FIT_S)))
    assert_resumed_exactly(tmp_path / "legacy", reference / name)


def test_the_data_order_resumes_exactly_where_plain_lightning_draws_other_batches(
    tmp_path: Path, reference: Path
) -> None:
    """Each sampler Lightning's DDP finds, resumed mid-epoch (no workers) and from an epoch's end (2
    workers), typed against plain Lightning from the same kind of checkpoint."""
    runs = []
    for module, sampler, workers in CASES:
        name = f"{module}-{sampler}-{workers}"
        checkpoint = reference / name / "ckpt" / (MID_EPOCH if workers == 0 else EPOCH_END)
        runs.append(
            {
                "root": str(tmp_path / name),
                "module": module,
                "sampler": sampler,
                "workers": workers,
                "ckpt": str(checkpoint),
            }
        )
    runs.append(
        {
            "root": str(tmp_path / "weighted"),
            "sampler": "weighted",
            "ckpt": str(reference / "typed-weighted-0" / "ckpt" / MID_EPOCH),
        }
    )
    assert_ok(launch(tmp_path, runs, limit=hang_limit(idle_s=FIT_S * len(runs))))

    plain: dict[str, Any] = {}
    for module, sampler, workers in CASES:
        name = f"{module}-{sampler}-{workers}"
        if module == "typed":
            assert_resumed_exactly(tmp_path / name, reference / name)
            warned = scaling.record(tmp_path / name, 0)["warnings"]
            # a loader's workers are watched (a plain DataLoader's and a StatefulDataLoader's): these drew nothing,
            # and nothing is named
            assert warned == []
        else:
            difference = largest_weight_difference(tmp_path / name, reference / name, 0)
            plain[f"{sampler}-{workers}"] = (
                same_batches(tmp_path / name, reference / name, 0),
                "equal" if difference == 0.0 else "off" if difference > 0.01 else difference,
            )
    # plain Lightning: (batches equal to the uninterrupted run's, of those trained; its final weights).
    # "off": more than 0.01 from the uninterrupted run's (0.013-0.04 measured, by machine), no float noise.
    assert plain == {
        "injected-0": ((15, 25), "off"),
        "wrapper-0": ((0, 25), "off"),
        "user-0": ((15, 25), "off"),
        "stateful-0": ((25, 25), "equal"),  # torchdata's StatefulDistributedSampler: the one exact data order
        "injected-2": ((15, 30), "off"),
        "wrapper-2": ((0, 30), "off"),
        "user-2": ((15, 30), "off"),
        "stateful-2": ((15, 30), "off"),
        "plain-injected-2": ((15, 30), "off"),
    }
    (warning,) = scaling.record(tmp_path / "weighted", 0)["warnings"]
    assert warning == SAMPLER_WARNING


SAMPLER_WARNING = (
    "MyModel: resuming epoch 1 at the end of batch 4\n"
    "  got:      a training loader whose order no checkpoint holds: DistributedSamplerWrapper around"
    " torch.utils.data.sampler.WeightedRandomSampler, which Lightning puts around a sampler that is not a"
    " DistributedSampler under DDP; that sampler has no torch.Generator and no state_dict(), so its order comes"
    " from torch's global random state, and the resumed run's batches are not the uninterrupted run's\n"
    "  expected: a sampler whose order a checkpoint can hold: a DistributedSampler, torchdata's"
    " StatefulDistributedSampler, or a sampler with a torch.Generator (generator=...) or"
    " state_dict() / load_state_dict()\n"
    "  fix:      give the sampler generator=torch.Generator().manual_seed(seed), or the loader"
    " sampler=StatefulDistributedSampler(dataset, shuffle=True) (torchdata.stateful_dataloader.sampler)"
)


def test_scaling_quotes_its_warnings_in_the_catalogue() -> None:
    """The warnings the tests above assert are docs/errors.md's, word for word (test_docs checks the rest)."""
    from test_docs import catalogue_blocks

    blocks = catalogue_blocks()
    assert RANKS_WARNING in blocks and SAMPLER_WARNING in blocks
