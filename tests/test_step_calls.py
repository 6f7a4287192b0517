"""``benchmarks/step_calls.py``: it runs as a user starts it, and its counts say what they should.

The script counts Python-level calls per training batch (not time), so its figures do not move
with machine load: here a few batches of four variants, and the table's structure and the
relations between its rows are asserted, so the tool cannot rot between the runs that quote it.
"""

from __future__ import annotations

import re

from benchmark_scripts import run_benchmark

TYPED, ADAPTER = "typed: TrainStepResult(loss)", "dict + StepResultAdapter()"
PLAIN, PLAIN_DICT = "plain: return loss", "plain: return {'loss', 'logits'}"
ROW = re.compile(r"^(?P<name>\S.*?)\s{2,}(?P<calls>\d+\.\d)(?:\s+(?P<over>[+-]\d+\.\d))?\s+(?P<library>\d+\.\d)$")


def test_step_calls_counts_each_variant_and_the_library_share() -> None:
    output = run_benchmark(
        "step_calls.py", "--skip", "3", "--batches", "4", "--only", ADAPTER, "--by-caller", TYPED, idle_s=60
    )
    lines = output.splitlines()
    assert lines[0] == "Python-level calls per batch (call + c_call events, 4 batches after 3; gc off)"
    rows = {match["name"]: match for match in map(ROW.match, lines) if match is not None}
    # the variants asked for and their baselines, in the script's order
    assert list(rows) == [PLAIN, TYPED, PLAIN_DICT, ADAPTER]
    calls = {name: float(row["calls"]) for name, row in rows.items()}
    library = {name: float(row["library"]) for name, row in rows.items()}
    assert rows[PLAIN]["over"] is None and rows[PLAIN_DICT]["over"] is None
    assert float(rows[TYPED]["over"]) == round(calls[TYPED] - calls[PLAIN], 1)
    assert float(rows[ADAPTER]["over"]) == round(calls[ADAPTER] - calls[PLAIN_DICT], 1)
    # plain Lightning runs none of the library; the typed step and the adapter run some, and cost calls
    assert library[PLAIN] == library[PLAIN_DICT] == 0.0
    assert library[TYPED] > 0 and library[ADAPTER] > 0
    assert calls[TYPED] > calls[PLAIN] and calls[ADAPTER] > calls[PLAIN_DICT]
    # the breakdown names the functions that make the typed step's extra calls: the adapter's own first
    breakdown = lines[lines.index(f"{TYPED}: calls per batch over {PLAIN}, by the function making them") :]
    assert any(line.strip().endswith("step/adapter.py:run_step") for line in breakdown)
    assert any("-> lightning_step_types/step/adapter.py:run_step" in line for line in breakdown)
