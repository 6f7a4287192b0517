"""``benchmarks/skip_cost.py``: it runs as a user starts it, and its table has a row per count and a figure per way.

The figures are times (they move with the machine's load): only the table's shape is asserted here; the
skip itself, that no skipped batch is loaded, is ``test_plain_loaders.py``'s.
"""

from __future__ import annotations

import re

from benchmark_scripts import run_benchmark

FIGURE = r"\d+(?:\.\d+)? (?:µs|ms|s)"


def test_skip_cost_prints_a_row_per_count_with_the_four_ways() -> None:
    output = run_benchmark("skip_cost.py", "--counts", "3,30", idle_s=60)
    lines = output.splitlines()
    assert lines[3] == (
        "| batches skipped | index skip, no workers | index skip, 2 workers | replay (loading them), no workers"
        " | replay, 2 workers |"
    )
    rows = [line for line in lines[5:] if line.startswith("|")]
    assert [row.split(" | ")[0] for row in rows] == ["| 3", "| 30"]
    for row in rows:
        assert re.fullmatch(rf"\| \d+ \| {FIGURE} \| {FIGURE} \| {FIGURE} \| {FIGURE} \|", row), row
