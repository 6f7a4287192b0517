"""Starting the scaling tests' jobs (tests/scaling.py) as a user's launcher would, with a time limit.

A job runs in a session of its own, so that its time limit ends every process it started (the
launcher's ranks, torchrun's workers): a job that hangs is killed at the limit and reported as such.
"""

from __future__ import annotations

import json
import os
import signal
import socket
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
           env: dict[str, str] | None = None, script: Path = SCRIPT) -> Job:
    """Run the fits ``runs`` with ``launcher`` (default: ``python``, Lightning starts rank 1 itself)."""
    return launch_together(folder, runs, limit=limit, launchers=[launcher or [sys.executable]], envs=[env or {}],
                           script=script)


def launch_together(folder: Path, runs: list[dict[str, Any]], *, limit: float, launchers: list[list[str]],
                    envs: list[dict[str, str]], script: Path = SCRIPT) -> Job:
    """The same fits started by several commands at once (one per "node" or SLURM task); the job ends
    when they all have, its return code the first non-zero one."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / f"runs-{len(list(folder.glob('runs-*.json')))}.json"
    config.write_text(json.dumps(runs))
    started = time.monotonic()
    processes: list[subprocess.Popen[bytes]] = []
    with open(folder / "output.txt", "ab") as output:
        for launcher, env in zip(launchers, envs):
            processes.append(subprocess.Popen(
                [*launcher, str(script), str(config)], cwd=folder, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
                     **env},
            ))
        codes: list[int | None] = []
        try:
            for process in processes:
                codes.append(process.wait(timeout=max(0.1, limit - (time.monotonic() - started))))
        except subprocess.TimeoutExpired:
            codes.append(None)
        finally:
            for process in processes:
                _end_session(process)
    seconds = time.monotonic() - started
    returncode = None if None in codes else next((code for code in codes if code), 0)
    return Job(returncode, seconds, (folder / "output.txt").read_text(errors="replace"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
