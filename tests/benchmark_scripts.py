"""Running a script of ``benchmarks/`` as a user starts it, from the repository root, for its tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from limits import hang_limit

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *arguments: str, idle_s: float) -> str:
    """What ``python benchmarks/<script> <arguments>`` prints, once it has exited with 0; ``idle_s``:
    how long it takes on an idle machine (the limit against a hang is a multiple of it)."""
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / script), *arguments],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=idle_s),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout
