"""How many machine instructions each training step executes, per variant: a count, not a timing.

The same ``Linear(32, 2)`` model and variants as ``step_calls.py``, and ``step_overhead.py``'s loss logging. Each variant is fitted in a
process of its own under valgrind's cachegrind (``--cache-sim=no``: it counts the instructions
executed, all of them, the interpreter's and torch's included), twice: for ``--short`` and for
``--long`` training steps, on the same data. The difference of the two processes' counts divided by
the difference of their steps is the instructions per step, with the imports and the Trainer's
set-up cancelled out. With one thread and ``PYTHONHASHSEED=0`` the count does not depend on the
machine's load (repeated runs agree to within about 12,000 instructions a step, 0.5% of a plain
step, where the timed benchmark's rounds move by several percent), so it can tell apart costs that
the timed benchmark's noise hides. It also sees what ``step_calls.py`` cannot: work done inside the calls, in C, such as an
attribute lookup that the interpreter can no longer specialize.

The table gives each variant's instructions per step, the difference to its plain baseline, and
the ratio; then the targets of ``step_overhead.py`` in instructions (the typed step at most 1.02 of
plain; ``StepResultAdapter()`` at most 0.02 of the plain step above an empty ``Callback()``;
``log_loss=True`` at most 0.01 of the plain step above the hand-written call it replaces). An
instruction is not a fixed time: a count says where the work is, the timed benchmark what it costs.
``--caches`` also simulates the first-level caches and a branch predictor (cachegrind's model, with
this machine's cache sizes) and prints each step's data cache misses and mispredicted branches:
what a count of instructions does not show, and why a few thousand of them, run between Lightning's
with the code and data they touch, can take more time than their number says.

Needs valgrind (``apt-get install valgrind``). Run from the repository root::

    python benchmarks/step_instructions.py                  # every variant, about 18 minutes on 2 cores
    python benchmarks/step_instructions.py --only "typed: TrainStepResult(loss)"
    python benchmarks/step_instructions.py --caches --only "typed: exact_resume=False"   # about 8 minutes
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_calls import PLAIN, PLAIN_DICT  # noqa: E402 - the benchmarks' own variants, beside this file
from step_calls import VARIANTS as CALL_VARIANTS  # noqa: E402
from step_overhead import (  # noqa: E402
    PlainLogsToBar,
    TypedLogsLoss,
    Variant,
    _shuffled_variants,
    _table,
    quiet_trainer,
    variant_loader,
)

TYPED, EMPTY, ADAPTER = "typed: TrainStepResult(loss)", "dict + empty Callback()", "dict + StepResultAdapter()"
HAND_LOG, LOG_LOSS = "plain: self.log('train_loss', loss, ..., prog_bar=True)", "typed: log_loss=True"
# step_calls.py's variants, and the loss logging of step_overhead.py's
VARIANTS = (
    *CALL_VARIANTS,
    Variant(HAND_LOG, PlainLogsToBar, baseline=PLAIN),
    Variant(LOG_LOSS, TypedLogsLoss, baseline=PLAIN),
    # a plain DataLoader(shuffle=True), which exact resume starts inside an epoch at the index level
    *_shuffled_variants(0),
)
VARIANT_NAMES = [v.name for v in VARIANTS]
# The targets, as fractions of the plain step's instructions (step_overhead.py states them as time).
TYPED_TARGET, ADAPTER_TARGET, LOG_LOSS_TARGET = 0.02, 0.02, 0.01
# One thread, and the same string hashes in every process: otherwise thread pools and dict probe
# sequences differ from run to run and move the count.
_QUIET_ENVIRONMENT = {
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}


def fit(name: str, steps: int, data_steps: int) -> None:
    """The child process: one fit of ``steps`` training steps of a variant (run under valgrind)."""
    variant = next(v for v in VARIANTS if v.name == name)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(steps, variant.callbacks())
    trainer.fit(variant.make(), train_dataloaders=variant_loader(variant, data_steps))


def events(name: str, steps: int, data_steps: int, workdir: Path, caches: bool) -> dict[str, int]:
    """What one process executes to import everything and fit ``steps`` steps of a variant: its
    instructions (``Ir``) and, with ``caches``, the simulated cache misses and mispredicted branches."""
    out = workdir / f"{VARIANT_NAMES.index(name)}-{steps}.cachegrind"
    simulate = "yes" if caches else "no"
    command = [
        "valgrind",
        "--tool=cachegrind",
        f"--cache-sim={simulate}",
        f"--branch-sim={simulate}",
        f"--cachegrind-out-file={out}",
        sys.executable,
        str(Path(__file__).resolve()),
        "--fit",
        name,
        str(steps),
        str(data_steps),
    ]
    environment = {**os.environ, **_QUIET_ENVIRONMENT}
    completed = subprocess.run(command, capture_output=True, text=True, env=environment)
    if completed.returncode != 0:
        raise RuntimeError(f"{name!r}, {steps} steps, failed under valgrind:\n{completed.stderr[-3000:]}")
    names: list[str] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        if line.startswith("summary:"):
            return dict(zip(names, map(int, line.split()[1:])))
    raise RuntimeError(f"{out}: no summary line")


def per_step(names: Sequence[str], short: int, long: int, jobs: int, caches: bool) -> dict[str, dict[str, float]]:
    """Each variant's events per training step: (long run - short run) / (long - short)."""
    with tempfile.TemporaryDirectory() as directory, concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        runs = {
            (name, steps): pool.submit(events, name, steps, long, Path(directory), caches)
            for name in names
            for steps in (short, long)
        }
        return {
            name: {
                event: (count - runs[name, short].result()[event]) / (long - short)
                for event, count in runs[name, long].result().items()
            }
            for name in names
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--only", action="append", help="a variant's name (repeatable); default: all")
    parser.add_argument("--short", type=int, default=50, help="training steps of the first fit")
    parser.add_argument("--long", type=int, default=450, help="training steps of the second fit")
    parser.add_argument("--jobs", type=int, default=2, help="processes under valgrind at once")
    parser.add_argument(
        "--caches",
        action="store_true",
        help="also simulate the caches and the branch predictor (2 to 3 times as long): a table of misses",
    )
    parser.add_argument("--fit", nargs=3, metavar=("NAME", "STEPS", "DATA_STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fit:
        fit(args.fit[0], int(args.fit[1]), int(args.fit[2]))
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    names = {v.name: v for v in VARIANTS}
    wanted = set(args.only or names)
    unknown = wanted - set(names)
    if unknown:
        parser.error(f"unknown variant(s) {sorted(unknown)}; known: {list(names)}")
    wanted |= {v.baseline for v in VARIANTS if v.name in wanted and v.baseline is not None}
    if wanted & {ADAPTER, EMPTY}:
        wanted |= {ADAPTER, EMPTY}
    if wanted & {LOG_LOSS, HAND_LOG}:
        wanted |= {LOG_LOSS, HAND_LOG, TYPED}
    measured = per_step([v.name for v in VARIANTS if v.name in wanted], args.short, args.long, args.jobs, args.caches)
    counts = {name: per_variant["Ir"] for name, per_variant in measured.items()}

    print(f"Instructions per training step (cachegrind; fits of {args.long} and {args.short} steps, one thread)\n")
    rows: list[tuple[str, ...]] = []
    for variant in VARIANTS:
        if variant.name not in counts:
            continue
        count = counts[variant.name]
        if variant.baseline is None:
            rows.append((variant.name, f"{count:,.0f}", "", ""))
        else:
            base = counts[variant.baseline]
            rows.append((variant.name, f"{count:,.0f}", f"{count - base:+,.0f}", f"{count / base:.4f}"))
    print(_table(("variant", "instructions/step", "over baseline", "ratio"), rows))

    targets: list[tuple[str, str, str, str]] = []
    if TYPED in counts:
        targets.append(_target(f"{TYPED}, over plain", counts[TYPED] / counts[PLAIN] - 1, TYPED_TARGET))
    if ADAPTER in counts:
        value = (counts[ADAPTER] - counts[EMPTY]) / counts[PLAIN_DICT]
        targets.append(_target(f"{ADAPTER}, over {EMPTY}", value, ADAPTER_TARGET))
    if LOG_LOSS in counts:
        value = ((counts[LOG_LOSS] - counts[TYPED]) - (counts[HAND_LOG] - counts[PLAIN])) / counts[PLAIN]
        targets.append(_target("log_loss=True's cost, over the hand-written call's", value, LOG_LOSS_TARGET))
    if targets:
        print()
        print(_table(("target (a fraction of the plain step's instructions)", "value", "limit", ""), targets))
    if args.caches:
        print()
        print(_cache_table(measured))


# cachegrind's events: first-level data cache misses on reads and writes, mispredicted conditional and
# indirect branches
_DATA_MISSES, _MISPREDICTED = ("D1mr", "D1mw"), ("Bcm", "Bim")


def _cache_table(measured: dict[str, dict[str, float]]) -> str:
    """Per step: the first-level data cache misses and the mispredicted branches of cachegrind's model of
    this machine's caches and of a simple branch predictor, each with its difference to the baseline."""
    rows: list[tuple[str, ...]] = []
    for variant in VARIANTS:
        if variant.name not in measured:
            continue
        row = [variant.name]
        for kinds in (_DATA_MISSES, _MISPREDICTED):
            value = sum(measured[variant.name][kind] for kind in kinds)
            row.append(f"{value:,.0f}")
            if variant.baseline is None:
                row.append("")
            else:
                row.append(f"{value - sum(measured[variant.baseline][kind] for kind in kinds):+,.0f}")
        rows.append(tuple(row))
    header = (
        "variant (simulated, per step)",
        "L1 data misses",
        "over baseline",
        "mispredicted branches",
        "over baseline",
    )
    return _table(header, rows)


def _target(label: str, value: float, limit: float) -> tuple[str, str, str, str]:
    return label, f"{value:+.4f}", f"{limit:+.2f}", "ok" if value <= limit else "ABOVE"


if __name__ == "__main__":
    main()
