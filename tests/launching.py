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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scaling
import torch

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


def launch(
    folder: Path,
    runs: list[dict[str, Any]],
    *,
    limit: float,
    launcher: list[str] | None = None,
    env: dict[str, str] | None = None,
    script: Path = SCRIPT,
    hung_after: tuple[Path, float] | None = None,
    signals: Sequence[tuple[Path, int]] = (),
    arguments: Sequence[str] | None = None,
) -> Job:
    """Run the fits ``runs`` with ``launcher`` (default: ``python``, Lightning starts rank 1 itself)."""
    return launch_together(
        folder,
        runs,
        limit=limit,
        launchers=[launcher or [sys.executable]],
        envs=[env or {}],
        script=script,
        hung_after=hung_after,
        signals=signals,
        arguments=arguments,
    )


def launch_together(
    folder: Path,
    runs: list[dict[str, Any]],
    *,
    limit: float,
    launchers: list[list[str]],
    envs: list[dict[str, str]],
    script: Path = SCRIPT,
    hung_after: tuple[Path, float] | None = None,
    signals: Sequence[tuple[Path, int]] = (),
    arguments: Sequence[str] | None = None,
) -> Job:
    """The same fits started by several commands at once (one per "node" or SLURM task); the job ends
    when they all have, its return code the first non-zero one. ``hung_after=(marker, seconds)``: a job
    still running ``seconds`` after ``marker`` appeared is killed as hung (a test that expects a hang
    waits that long, not ``limit``). ``signals=[(marker, signal), ...]``: each signal is sent to the
    launched processes once its marker exists, in turn (a scheduler's SIGTERM, SIGUSR1 or SIGKILL).
    ``arguments``: the script's own command line (an example script), in place of the fits' file."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / f"runs-{len(list(folder.glob('runs-*.json')))}.json"
    config.write_text(json.dumps(runs))
    started = time.monotonic()
    processes: list[subprocess.Popen[bytes]] = []
    with open(folder / "output.txt", "ab") as output:
        for launcher, env in zip(launchers, envs):
            processes.append(
                subprocess.Popen(
                    [*launcher, str(script), *(arguments if arguments is not None else [str(config)])],
                    cwd=folder,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={
                        **os.environ,
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
                        **env,
                    },
                )
            )
        codes: list[int | None] = []
        try:
            for process in processes:
                codes.append(_wait(process, started + limit, hung_after, signals))
        except subprocess.TimeoutExpired:
            codes.append(None)
        finally:
            for process in processes:
                _end_session(process)
    seconds = time.monotonic() - started
    returncode = None if None in codes else next((code for code in codes if code), 0)
    return Job(returncode, seconds, (folder / "output.txt").read_text(errors="replace"))


def _wait(
    process: subprocess.Popen[bytes],
    deadline: float,
    hung_after: tuple[Path, float] | None,
    signals: Sequence[tuple[Path, int]],
) -> int:
    """The process's exit code; TimeoutExpired past ``deadline`` or, with ``hung_after``, once it says the job hangs."""
    marked: float | None = None
    pending = list(signals)
    while True:
        try:
            return process.wait(timeout=max(0.1, min(0.2, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            while pending and pending[0][0].exists():
                os.kill(process.pid, pending.pop(0)[1])
            now = time.monotonic()
            if hung_after is not None and marked is None and hung_after[0].exists():
                marked = now
            if now >= deadline or (hung_after is not None and marked is not None and now - marked >= hung_after[1]):
                raise


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
