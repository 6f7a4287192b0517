"""``benchmarks/step_instructions.py``: it runs as a user starts it, under valgrind, and its table says what it should.

A plain step's instructions are counted from two short fits (the counts' difference over the
steps' difference), and the row's figures are checked against each other and against the size a
training step of this model has, so the tool cannot rot between the runs that quote it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import REPO_ROOT, run_benchmark
from limits import hang_limit

PLAIN = "plain: return loss"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_step_instructions_counts_a_plain_step_and_its_simulated_cache_misses() -> None:
    output = run_benchmark(
        "step_instructions.py", "--only", PLAIN, "--short", "3", "--long", "11", "--caches", idle_s=600
    )
    lines = output.splitlines()
    assert lines[0] == "Instructions per training step (cachegrind; fits of 11 and 3 steps, one thread)"
    assert re.fullmatch(r"variant\s+instructions/step\s+over baseline\s+ratio", lines[2])
    row = re.fullmatch(rf"{re.escape(PLAIN)}\s+(?P<count>[\d,]+)", lines[4])
    assert row is not None, lines
    # a Linear(32, 2) training step through Lightning: interpreter, hooks, autograd and SGD, no more
    assert 300_000 < int(row["count"].replace(",", "")) < 30_000_000
    # no baseline asked for, so no target to report; then the simulated caches' table
    assert lines[5] == ""
    assert re.fullmatch(
        r"variant \(simulated, per step\)\s+L1 data misses\s+over baseline\s+mispredicted branches\s+over baseline",
        lines[6],
    )
    cache_row = re.fullmatch(rf"{re.escape(PLAIN)}\s+(?P<misses>[\d,]+)\s+(?P<mispredicted>[\d,]+)", lines[8])
    assert cache_row is not None, lines
    misses, mispredicted = (int(cache_row[name].replace(",", "")) for name in ("misses", "mispredicted"))
    # some of the step's data reads and writes and of its branches: never none, never a tenth of its instructions
    assert 100 < misses < int(row["count"].replace(",", "")) // 10
    assert 100 < mispredicted < int(row["count"].replace(",", "")) // 10
    assert len(lines) == 9


@pytest.mark.parametrize("name", ["step_instructions.py", "instruction_budget.py"])
def test_step_instructions_names_the_missing_tool(name: str, tmp_path: Path) -> None:
    """Both scripts that count under valgrind (``instruction_budget.py``: CI's budget check)."""
    script = REPO_ROOT / "benchmarks" / name
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={"PATH": str(tmp_path)},  # no valgrind on it
        timeout=hang_limit(idle_s=120),
    )
    assert completed.returncode == 2
    assert "valgrind is not installed (apt-get install valgrind)" in completed.stderr
