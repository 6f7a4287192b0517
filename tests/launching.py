"""Starting the scaling tests' jobs (tests/scaling.py) as a user's launcher would, with a time limit.

A job runs in a session of its own, so that its time limit ends every process it started (the
launcher's ranks, torchrun's workers): a job that hangs is killed at the limit and reported as such.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import scaling

SCRIPT = Path(scaling.__file__).resolve()
TESTS = SCRIPT.parent


@dataclass
class Job:
    returncode: int | None  # None: killed at its time limit
    seconds: float
    output: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def launch(folder: Path, runs: list[dict[str, Any]], *, limit: float, launcher: list[str] | None = None,
           env: dict[str, str] | None = None) -> Job:
    """Run the fits ``runs`` with ``launcher`` (default: ``python``, Lightning starts rank 1 itself)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / f"runs-{len(list(folder.glob('runs-*.json')))}.json"
    config.write_text(json.dumps(runs))
    command = [*(launcher or [sys.executable]), str(SCRIPT), str(config)]
    started = time.monotonic()
    with open(folder / "output.txt", "ab") as output:
        process = subprocess.Popen(
            command, cwd=folder, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
                 **(env or {})},
        )
        try:
            returncode: int | None = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _end_session(process)
    seconds = time.monotonic() - started
    return Job(returncode, seconds, (folder / "output.txt").read_text(errors="replace"))


def _end_session(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL whatever of the job is left (SIGTERM alone does not stop a rank inside a collective)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def torchrun(*options: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *options]


def same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return sorted(a) == sorted(b) and all(torch.equal(a[name], b[name]) for name in a)
