"""docs/resume.md, "Stopping a run": each way a run is stopped from outside, done for real.

One process runs a tiny fit (``tests/scaling.py`` on one CPU device: ``nn.Linear(8, 2)``, 120 rows in
batches of 4, 30 batches an epoch, 3 epochs, ``ModelCheckpoint(every_n_train_steps=4, save_last=True)``,
a ``CSVLogger``). It waits at the start of epoch 1's batch 6 (global step 36, just after the periodic
checkpoint of step 36) until the test sends it a signal, as a scheduler would: SIGTERM, SIGKILL, or
SLURM's SIGUSR1. The test checks the exit status and the files left, resumes, and compares the resumed
run with the uninterrupted one: weights, ``callback_metrics``, ``logged_metrics`` and the CSV rows.
"""

from __future__ import annotations

import signal
import stat
from pathlib import Path
from typing import Any

import pytest
import scaling
import torch
from launching import Job, launch
from limits import hang_limit
from test_resume import EXACT
from test_scaling import assert_ok

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume"),
]

LIMIT = hang_limit(idle_s=20)  # one process: a fit and its start-up take 5 to 15 s on an idle machine
RUN: dict[str, Any] = {"devices": 1, "strategy": "auto", "sampler": "wrapper", "new_versions": True}
PAUSE = {"epoch": 1, "batch": 6}  # global step 36: after step 36's periodic checkpoint, before step 37's batch


def start(root: Path, signals: list[tuple[str, int]] = (), env: dict[str, str] | None = None, **run: Any) -> Job:
    return launch(
        root,
        [{**RUN, "root": str(root), **run}],
        limit=LIMIT,
        env=env,
        signals=[(root / marker, number) for marker, number in signals],
    )


def assert_same_end(resumed: Path, full: Path, attempt: int = 0) -> None:
    """The resumed run ends as the uninterrupted one, and its rows are the uninterrupted run's from its start on."""
    done, reference = scaling.record(resumed, 0, attempt), scaling.record(full, 0)
    for part in ("params", "callback", "logged"):
        assert sorted(done[part]) == sorted(reference[part]), part
        assert all(torch.equal(done[part][name], reference[part][name]) for name in done[part]), part


def rows(root: Path, version: int) -> list[dict[str, str]]:
    """The CSV rows of ``csv/version_<version>``."""
    return scaling.rows(root, version)


def steps(table: list[dict[str, str]]) -> list[int]:
    return sorted({int(row["step"]) for row in table})


def saved_step(checkpoint: Path) -> int:
    return int(torch.load(checkpoint, weights_only=False)["global_step"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    assert_ok(start(root))
    return root


def test_sigterm_without_on_exception_checkpoint_exits_0_and_saves_nothing(tmp_path: Path, reference: Path) -> None:
    job = start(tmp_path, [("paused", signal.SIGTERM)], pause=PAUSE, ckpt="last")
    assert job.returncode == 0, job.output[-3000:]  # a scheduler sees success
    assert "Received SIGTERM: 15" in job.output
    assert not (tmp_path / "rank0-0.pt").exists()  # the fit stopped: on_fit_end never ran
    # nothing saved at the stop: the newest checkpoint is the periodic one before the signal's batch
    assert saved_step(tmp_path / "ckpt" / "last.ckpt") == 36
    assert not (tmp_path / "ckpt" / "on_exception.ckpt").exists()
    assert steps(rows(tmp_path, 0))[-1] == 36  # batch 6 (step 37) was trained and logged before the stop

    resumed = start(tmp_path, ckpt="last")
    assert_ok(resumed)
    assert_same_end(tmp_path, reference)
    # version_1: from batch 5's end (last.ckpt was saved in its on_train_batch_end, before its row at step 35),
    # then batch 6 trained again
    assert rows(tmp_path, 1)[0]["step"] == "35"
    assert rows(tmp_path, 1) == rows(reference, 0)[-len(rows(tmp_path, 1)) :]


def test_sigterm_with_on_exception_checkpoint_saves_at_the_batch_end_and_fit_resumes_from_it(
    tmp_path: Path, reference: Path
) -> None:
    job = start(tmp_path, [("paused", signal.SIGTERM)], pause=PAUSE, on_exception=True, ckpt="last")
    assert job.returncode == 0, job.output[-3000:]
    assert saved_step(tmp_path / "ckpt" / "on_exception.ckpt") == 37  # batch 6 finished, then saved
    assert saved_step(tmp_path / "ckpt" / "last.ckpt") == 36

    # trainer.fit(model) with no ckpt_path: OnExceptionCheckpoint makes it "last", with Lightning's warning;
    # the newest of on_exception.ckpt and ModelCheckpoint's last.ckpt is taken
    resumed = start(tmp_path, on_exception=True, ckpt=None)
    assert_ok(resumed)
    assert FIT_LAST_WARNING in " ".join(resumed.output.split())
    assert_same_end(tmp_path, reference)
    assert rows(tmp_path, 1)[0]["step"] != "36"  # nothing trained twice
    assert rows(tmp_path, 0) + rows(tmp_path, 1) == rows(reference, 0)
    assert not (tmp_path / "ckpt" / "on_exception.ckpt").exists()  # removed when the resumed fit ended


FIT_LAST_WARNING = (
    "`.fit(ckpt_path=None)` was called without a model. The last model of the previous `fit` call will be used."
    " You can pass `fit(ckpt_path='best')` to use the best model or `fit(ckpt_path='last')` to use the last"
    " model. If you pass a value, this warning will be silenced."
)


def test_kill_9_resumes_from_the_last_periodic_checkpoint_and_trains_what_followed_again(
    tmp_path: Path, reference: Path
) -> None:
    job = start(tmp_path, [("paused", signal.SIGKILL)], pause={"epoch": 1, "batch": 8}, ckpt="last")
    assert job.returncode == -signal.SIGKILL
    assert saved_step(tmp_path / "ckpt" / "last.ckpt") == 36
    # the killed run's version keeps every row it logged (Lightning saves the logger at each logged row),
    # up to batch 7's (step 37), as the uninterrupted run logged them
    killed = rows(tmp_path, 0)
    assert steps(killed)[-1] == 37 and killed == rows(reference, 0)[: len(killed)]

    resumed = start(tmp_path, ckpt="last")
    assert_ok(resumed)
    assert_same_end(tmp_path, reference)
    # version_1 starts again at batch 5's end (its row, step 35, written after ModelCheckpoint's save in its
    # on_train_batch_end): batches 6 and 7 are trained again, and their rows are in both versions, as is batch 5's
    assert steps(rows(tmp_path, 1))[:3] == [35, 36, 37]
    assert rows(tmp_path, 1) == rows(reference, 0)[-len(rows(tmp_path, 1)) :]


def slurm_task(tmp_path: Path, restart: int) -> dict[str, str]:
    """One task as srun starts it, with a fake ``scontrol`` that records the requeue."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "requeued"}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    return {
        "PATH": f"{bin_dir}:{__import__('os').environ['PATH']}",
        "SLURM_NTASKS": "1",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_ID": "4242",
        "SLURM_NODELIST": "localhost",
        "SLURM_LOCALID": "0",
        "SLURM_PROCID": "0",
        "SLURM_NODEID": "0",
        "SLURM_RESTART_COUNT": str(restart),
    }


def test_slurm_s_signal_saves_and_requeues_and_the_requeued_job_resumes_by_itself(
    tmp_path: Path, reference: Path
) -> None:
    # SLURM sends SIGUSR1 (--signal=USR1@90); after the requeue, it ends the job (SIGKILL here)
    job = start(
        tmp_path,
        [("paused", signal.SIGUSR1), ("requeued", signal.SIGKILL)],
        env=slurm_task(tmp_path, 0),
        pause=PAUSE,
        slurm=True,
    )
    assert job.returncode == -signal.SIGKILL, job.output[-3000:]
    assert (tmp_path / "requeued").read_text().split() == ["requeue", "4242"]
    assert saved_step(tmp_path / "hpc_ckpt_1.ckpt") == 36  # inside batch 6, before its step

    requeued = start(tmp_path, env=slurm_task(tmp_path, 1), slurm=True)  # trainer.fit(model), no ckpt_path
    assert_ok(requeued)
    assert_same_end(tmp_path, reference, attempt=1)
    assert steps(rows(tmp_path, 1))[0] == 36
    assert rows(tmp_path, 1) == rows(reference, 0)[-len(rows(tmp_path, 1)) :]
