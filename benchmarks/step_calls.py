"""How many Python-level calls each training batch makes, per variant: a count, not a timing.

The same ``Linear(32, 2)`` model and variants as ``step_overhead.py``, each fitted alone. Between the
first sample fetched for batch ``--skip`` and the first fetched for batch ``--skip + --batches``
(whole batches: fetch, hooks, step, backward, optimizer step, batch end), ``sys.setprofile`` counts
every ``call`` (a Python function) and ``c_call`` (a builtin) event, with the garbage collector off.
The counts do not depend on machine load, so two versions of the library can be compared on a busy
machine; they say where the calls are, not what each costs.

For each variant the table gives the calls per batch, the difference to its plain baseline, and the
library's share: calls into ``lightning_step_types`` code plus the calls that code makes (the rest of
the difference is Lightning's, torch's or Python's work done because of the library, e.g. on a dict
instead of a tensor). ``--by-caller NAME`` lists, for one variant, the calls per batch it makes more
(or fewer) than its baseline, by the function that makes them.

Run from the repository root::

    python benchmarks/step_calls.py                       # every variant, about a minute
    python benchmarks/step_calls.py --by-caller "typed: TrainStepResult(loss)"
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import lightning_step_types
from lightning_step_types.pytorch_lightning import StepResultAdapter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_overhead import (  # noqa: E402 - the benchmark's own models, beside this file
    BATCH_SIZE,
    IN_FEATURES,
    OUT_FEATURES,
    PlainDict,
    PlainLoss,
    TypedLoss,
    TypedLossNoExactResume,
    TypedMetadata,
    Variant,
    quiet_trainer,
)

LIBRARY = str(Path(lightning_step_types.__file__).resolve().parent) + os.sep
Site = tuple[str, str]  # (file, qualified name) of a Python function, or ("", name) of a builtin


class TypedLossNoFeatures(TypedLoss):
    exact_resume = False
    nonfinite_loss = None  # with exact_resume=False: the step's check-and-convert path alone


PLAIN, PLAIN_DICT = "plain: return loss", "plain: return {'loss', 'logits'}"
VARIANTS = (
    Variant(PLAIN, PlainLoss),
    Variant("plain + empty Callback()", PlainLoss, lambda: [pl.Callback()], PLAIN),
    Variant("typed: TrainStepResult(loss)", TypedLoss, baseline=PLAIN),
    Variant("typed: exact_resume=False", TypedLossNoExactResume, baseline=PLAIN),
    Variant("typed: exact_resume=False, nonfinite_loss=None", TypedLossNoFeatures, baseline=PLAIN),
    Variant("typed: TrainStepResult(loss, metadata)", TypedMetadata, baseline=PLAIN_DICT),
    Variant(PLAIN_DICT, PlainDict),
    Variant("dict + empty Callback()", PlainDict, lambda: [pl.Callback()], PLAIN_DICT),
    Variant("dict + StepResultAdapter()", PlainDict, lambda: [StepResultAdapter()], PLAIN_DICT),
    Variant(
        "dict + StepResultAdapter(exact_resume=False)",
        PlainDict,
        lambda: [StepResultAdapter(exact_resume=False)],
        PLAIN_DICT,
    ),
    Variant(
        "dict + StepResultAdapter(exact_resume=False, nonfinite_loss=None)",
        PlainDict,
        lambda: [StepResultAdapter(exact_resume=False, nonfinite_loss=None)],
        PLAIN_DICT,
    ),
)


class Tally:
    """Counts call events by (who calls, who is called) while switched on."""

    def __init__(self) -> None:
        self.pairs: Counter[tuple[Site, Site]] = Counter()

    def _event(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            caller = frame.f_back
            self.pairs[(_site(caller.f_code) if caller is not None else ("", "?"), _site(frame.f_code))] += 1
        elif event == "c_call":
            self.pairs[(_site(frame.f_code), ("", _builtin_name(arg)))] += 1

    def start(self) -> None:
        gc.disable()
        sys.setprofile(self._event)

    def stop(self) -> None:
        sys.setprofile(None)
        gc.enable()


_REAL_PATHS: dict[str, str] = {}


def _site(code: Any) -> Site:
    file = code.co_filename
    real = _REAL_PATHS.get(file)
    if real is None:  # an editable install imports the package through links to the checkout
        real = _REAL_PATHS[file] = os.path.realpath(file)
    return real, code.co_qualname


def _builtin_name(function: Any) -> str:
    owner = getattr(function, "__self__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    if owner is not None and not isinstance(owner, type) and "." not in name:
        name = f"{type(owner).__name__}.{name}"
    return name


class _CountedSamples(TensorDataset):
    """The training data; fetching one sample switches the tally on, a later one switches it off."""

    def __init__(self, tally: Tally, on_at: int, off_at: int, *tensors: torch.Tensor) -> None:
        super().__init__(*tensors)
        self.tally, self.on_at, self.off_at = tally, on_at, off_at

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        if index == self.on_at:
            self.tally.start()
        elif index == self.off_at:
            self.tally.stop()
        return super().__getitem__(index)


def count_calls(variant: Variant, skip: int, batches: int) -> Counter[tuple[Site, Site]]:
    """The call events of ``batches`` whole batches of one fit of ``variant``, after ``skip`` batches."""
    steps = skip + batches + 2
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH_SIZE, IN_FEATURES, generator=generator)
    y = torch.randint(0, OUT_FEATURES, (steps * BATCH_SIZE,), generator=generator)
    tally = Tally()
    data = _CountedSamples(tally, skip * BATCH_SIZE, (skip + batches) * BATCH_SIZE, x, y)
    trainer = quiet_trainer(steps, variant.callbacks())
    try:
        trainer.fit(variant.make(), train_dataloaders=DataLoader(data, batch_size=BATCH_SIZE))
    finally:
        tally.stop()
    return tally.pairs


def in_library(site: Site) -> bool:
    return site[0].startswith(LIBRARY)


def library_calls(pairs: Counter[tuple[Site, Site]]) -> int:
    """Calls into the library's functions, and the calls its functions make."""
    return sum(count for (caller, callee), count in pairs.items() if in_library(caller) or in_library(callee))


def _shown(site: Site) -> str:
    file, name = site
    if not file:
        return f"{name} (builtin)"
    for marker, short in (
        (LIBRARY, "lightning_step_types/"),
        ("site-packages/", ""),
        ("/lib/python", "python"),
        ("benchmarks/", "benchmarks/"),
    ):
        if marker in file:
            file = short + file.split(marker, 1)[1]
            break
    return f"{file}:{name}"


def by_caller(variant: Counter[tuple[Site, Site]], baseline: Counter[tuple[Site, Site]], batches: int) -> list[str]:
    """Lines: per calling function, the calls per batch it makes more (+) or fewer (-) than in the baseline."""
    difference: Counter[tuple[Site, Site]] = Counter(variant)
    difference.subtract(baseline)
    callers: dict[Site, Counter[Site]] = {}
    for (caller, callee), count in difference.items():
        if count:
            callers.setdefault(caller, Counter())[callee] += count
    lines = []
    for caller, callees in sorted(callers.items(), key=lambda item: -abs(sum(item[1].values()))):
        total = sum(callees.values())
        lines.append(f"{total / batches:+8.2f}  {_shown(caller)}")
        for callee, count in sorted(callees.items(), key=lambda item: -abs(item[1])):
            lines.append(f"{count / batches:+14.2f}  -> {_shown(callee)}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--skip", type=int, default=30, help="batches run before counting (warm-up)")
    parser.add_argument("--batches", type=int, default=50, help="batches counted")
    parser.add_argument("--only", action="append", help="a variant's name (repeatable); default: all")
    parser.add_argument(
        "--by-caller", metavar="NAME", help="list one variant's extra calls by the function making them"
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    names = {v.name: v for v in VARIANTS}
    wanted = set(args.only or names) | ({args.by_caller} if args.by_caller else set())
    unknown = wanted - set(names)
    if unknown:
        parser.error(f"unknown variant(s) {sorted(unknown)}; known: {list(names)}")
    wanted |= {names[name].baseline for name in wanted if names[name].baseline is not None}  # type: ignore[misc]
    counts = {v.name: count_calls(v, args.skip, args.batches) for v in VARIANTS if v.name in wanted}
    n = args.batches
    print(f"Python-level calls per batch (call + c_call events, {n} batches after {args.skip}; gc off)\n")
    rows = [("variant", "calls/batch", "over baseline", "library's")]
    for variant in VARIANTS:
        if variant.name not in counts:
            continue
        pairs = counts[variant.name]
        total = sum(pairs.values()) / n
        over = "" if variant.baseline is None else f"{total - sum(counts[variant.baseline].values()) / n:+.1f}"
        rows.append((variant.name, f"{total:.1f}", over, f"{library_calls(pairs) / n:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if index == 0:
            print("  ".join("-" * w for w in widths))
    if args.by_caller:
        baseline = names[args.by_caller].baseline
        print(f"\n{args.by_caller}: calls per batch over {baseline}, by the function making them\n")
        reference: Counter[tuple[Site, Site]] = counts[baseline] if baseline is not None else Counter()
        print("\n".join(by_caller(counts[args.by_caller], reference, n)))


if __name__ == "__main__":
    main()
