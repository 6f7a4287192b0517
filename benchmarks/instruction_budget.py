"""The per-step instruction budget: fails when a change makes a typed step or the adapter cost more.

``instruction_budget.json`` beside this file holds, for the typed step and ``StepResultAdapter()``,
each with exact resume on and off, the instructions a training step executes over its reference
(plain Lightning returning the loss; the dict module with an empty ``Callback()``), as measured on
the code that set it, and the margin a change may add before the check fails. The references'
own figures are kept too (plain Lightning, with and without an empty ``Callback()``), for the
record only: they move with torch, Lightning and Python, which the budget is not about.

The figures are instructions, counted by valgrind (``fit_instructions.py``: the variants of
``step_calls.py`` fitted one after another in two processes under callgrind, 60 batches each
counted after 10), so the check does not depend on the machine's load, and a run on a busy machine
gives the figures an idle one does. Repeated runs agree to within a few thousand instructions a
step; the margin is set well above that.

Needs valgrind. Run from the repository root::

    python benchmarks/instruction_budget.py            # the check (about 3 minutes on 2 cores)
    python benchmarks/instruction_budget.py --update   # measure, and write the budget anew

Exits with 1 and names each variant above its budget (its figure, its budget, the margin), 2 where
valgrind is missing. After a change that has to cost more, ``--update`` writes what it costs now:
the commit that does so says why.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import platform
import shutil
import sys
import warnings
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_instructions import child, count, marked_loader, steps_of_fit  # noqa: E402 - the benchmarks' own
from step_calls import PLAIN, PLAIN_DICT  # noqa: E402
from step_calls import VARIANTS as CALL_VARIANTS  # noqa: E402
from step_overhead import _table, quiet_trainer  # noqa: E402

BUDGET_FILE = Path(__file__).resolve().parent / "instruction_budget.json"
TYPED, TYPED_OFF = "typed: TrainStepResult(loss)", "typed: exact_resume=False"
EMPTY, ADAPTER = "dict + empty Callback()", "dict + StepResultAdapter()"
ADAPTER_OFF = "dict + StepResultAdapter(exact_resume=False)"
PLAIN_EMPTY = "plain + empty Callback()"
# each guarded variant -> the reference it is measured over (fitted in the same process)
GUARDED = {TYPED: PLAIN, TYPED_OFF: PLAIN, ADAPTER: EMPTY, ADAPTER_OFF: EMPTY}
# the fits of each process, each fitted twice: first not counted (the first fits of a process count
# a few thousand instructions a step more than later ones, fit_instructions.py), then counted
PROCESSES = ((PLAIN, PLAIN_EMPTY, TYPED, TYPED_OFF), (PLAIN_DICT, EMPTY, ADAPTER, ADAPTER_OFF))
SKIP, BATCHES = 10, 60
# what a change may add to a guarded variant's instructions per step before the check fails: about
# 0.4% of a plain step of the benchmarks' model (about 2.5 µs), several times the runs' spread
MARGIN = 10_000


def fit(entry: dict[str, Any], skip: int, batches: int) -> None:
    """The child process: one fit of a variant of ``step_calls.py``, its batches marked."""
    variant = next(v for v in CALL_VARIANTS if v.name == entry["variant"])
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(steps_of_fit(skip, batches), variant.callbacks())
    trainer.fit(variant.make(), train_dataloaders=marked_loader(skip, batches))


def measure(skip: int = SKIP, batches: int = BATCHES) -> dict[str, float]:
    """Each variant's instructions per step (the processes run side by side)."""
    script = Path(__file__).resolve()
    with concurrent.futures.ThreadPoolExecutor(len(PROCESSES)) as pool:
        runs = [
            (names, pool.submit(count, script, [{"variant": name} for name in names * 2], skip, batches))
            for names in PROCESSES
        ]
        return {name: counted["Ir"] for names, run in runs for name, counted in zip(names, run.result()[len(names) :])}


def over_references(steps: Mapping[str, float]) -> dict[str, float]:
    """Each guarded variant's instructions per step over its reference."""
    return {variant: steps[variant] - steps[reference] for variant, reference in GUARDED.items()}


def check(steps: Mapping[str, float], budget: Mapping[str, Any]) -> list[str]:
    """What is above budget in ``steps`` (instructions per step by variant): one line per variant whose
    cost over its reference exceeds the budget's by more than the budget's margin."""
    margin = float(budget["margin"])
    problems: list[str] = []
    for variant, over in over_references(steps).items():
        allowed = float(budget["over_reference"][variant])
        if over > allowed + margin:
            problems.append(
                f"{variant}: {over:,.0f} instructions a step over {GUARDED[variant]!r}, above its budget of"
                f" {allowed:,.0f} by {over - allowed:,.0f} (the margin is {margin:,.0f}; {BUDGET_FILE.name})"
            )
    return problems


def report(steps: Mapping[str, float], budget: Mapping[str, Any]) -> str:
    rows: list[tuple[str, ...]] = []
    margin = float(budget["margin"])
    for variant, over in over_references(steps).items():
        allowed = float(budget["over_reference"][variant])
        verdict = "ok" if over <= allowed + margin else "ABOVE"
        rows.append((variant, GUARDED[variant], f"{over:,.0f}", f"{allowed:,.0f}", f"{over - allowed:+,.0f}", verdict))
    header = ("variant", "over", "instructions/step over it", "budget", "change", f"margin {margin:,.0f}")
    return _table(header, rows)


def budget_of(
    steps: Mapping[str, float], skip: int = SKIP, batches: int = BATCHES, margin: float = MARGIN
) -> dict[str, Any]:
    """The budget file's content for a measurement."""
    return {
        "about": (
            "Instructions per training step (benchmarks/instruction_budget.py): over_reference is checked,"
            " steps is the record of the measurement that set it"
        ),
        "measured_with": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "pytorch_lightning": metadata.version("pytorch-lightning"),
            "batches": batches,
            "skip": skip,
        },
        "margin": margin,
        "over_reference": {variant: round(over) for variant, over in over_references(steps).items()},
        "steps": {name: round(value) for name, value in steps.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="measure, and write the budget file anew")
    parser.add_argument("--budget-file", type=Path, default=BUDGET_FILE, help=f"default: {BUDGET_FILE.name} here")
    parser.add_argument("--skip", type=int, default=SKIP, help="batches of each fit run before counting")
    parser.add_argument("--batches", type=int, default=BATCHES, help="batches counted in each fit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, fit)
        return 0
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    steps = measure(args.skip, args.batches)
    if args.update:
        args.budget_file.write_text(json.dumps(budget_of(steps, args.skip, args.batches), indent=2) + "\n")
        print(f"{args.budget_file} written")
    budget = json.loads(args.budget_file.read_text())
    print(f"Instructions per training step over its reference (callgrind; {args.batches} batches after {args.skip})\n")
    print(report(steps, budget))
    problems = check(steps, budget)
    for problem in problems:
        print(f"ABOVE BUDGET: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
