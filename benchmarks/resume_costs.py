"""What each of exact resume's per-batch mechanisms costs a training step, in instructions.

The models of ``step_overhead.py`` are fitted with exact resume on and off, and on with one
mechanism switched off at a time (replaced, for that fit only, by a function that does nothing); the
difference to the whole is that mechanism's instructions per batch. All fits run in one process
under callgrind (``fit_instructions.py``), after a few that are not counted, so a figure depends
neither on the machine's load nor on the process. The scenarios: the typed module and
``StepResultAdapter()`` as ``step_overhead.py`` fits them (nothing logged, no metric, no callback),
then the typed module with what brings in the other mechanisms: a value logged each step
(``log_loss=True``), a ``ModelCheckpoint`` (a callback whose batch hooks change its attributes), a
metric updated each step, a ``StatefulDataLoader``.

The record's own share (``run_batch`` reduced to calling Lightning's ``advance``) holds the
mechanisms it calls, indented under it; what the mechanisms do not add up to is the record's own
code (Lightning's counters, the phase, the checks that skip what has nothing to do). The optimizer's
step post-hook and the loop wrappers (every mechanism switched off but the wrappers, which then only
call Lightning's methods) are outside the record. The µs column converts instructions at the plain
step's rate (``--plain-us``: its time on the machine that timed ``step_overhead.py``): an estimate,
since an instruction of the library's is not an average one.

Needs valgrind. Run from the repository root::

    python benchmarks/resume_costs.py                       # about 8 minutes on 2 idle cores
    python benchmarks/resume_costs.py --scenarios typed     # one scenario, about 4 minutes
    python benchmarks/resume_costs.py --keep DIR            # also keep callgrind's files (callgrind_annotate)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torchmetrics import MeanMetric

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_instructions import child, count, marked_loader, steps_of_fit  # noqa: E402 - the benchmarks' own
from step_overhead import Batch, PlainDict, PlainLoss, TypedLogsLoss, TypedLoss, _table  # noqa: E402

from lightning_step_types import TrainStepResult
from lightning_step_types._lightning import fit_loop as fit_loop_access
from lightning_step_types.pytorch_lightning import StepResultAdapter
from lightning_step_types.resume import epoch_state, fit_follower, holders, random_streams, undeclared_state


class TypedWithMetric(TypedLoss):
    """The typed module with a metric of its own, updated at every step (its states copied at each
    batch's start where they changed)."""

    def __init__(self) -> None:
        super().__init__()
        self.mean_loss = MeanMetric()

    def training_step(self, batch: Batch, batch_idx: int) -> TrainStepResult:
        result = super().training_step(batch, batch_idx)
        self.mean_loss.update(result.loss.detach())
        return result


def _nothing(*_: Any, **__: Any) -> None:
    return None


class _Handle:
    def remove(self) -> None:
        pass


def _passthrough_batch(self: Any, original: Callable[[Any], None], data_fetcher: Any) -> None:
    original(data_fetcher)
    self.phase = fit_follower.Phase.TAIL


class _Passthrough:
    """A follower whose wrappers call Lightning's methods and nothing else."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return lambda original, *args: original(*args)


def _wrappers_only(trainer: Any, module: Any, stage: Any) -> None:
    if str.__eq__(stage, "fit") is True:
        fit_loop_access.follow_fit_loop(trainer, _Passthrough())


def _no_streams_read(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Any, trainer: Any) -> None:
        original(self, trainer)
        if hasattr(self, "batch_start"):
            self.batch_start = _nothing
        else:  # before the batch-start read went into buffers, the record kept what `read` returned
            self.read = _nothing

    return init


RECORD, STREAMS, ATTRIBUTES, HOLDERS = "record", "streams", "attributes", "holders"
LOGGED, METRICS, STEP_HOOK, WRAPPERS = "logged", "metrics", "step hook", "wrappers"
# mechanism -> (its row in the table, what switches it off: (object, attribute, replacement) each)
ABLATIONS: dict[str, tuple[str, list[tuple[Any, str, Any]]]] = {
    RECORD: (
        "the batch-start record (all of it: run_batch only calls Lightning's advance)",
        [(fit_follower.FitFollower, "run_batch", _passthrough_batch)],
    ),
    STREAMS: (
        "  the global random streams' read",
        [(random_streams.RandomStreams, "__init__", _no_streams_read(random_streams.RandomStreams.__init__))],
    ),
    ATTRIBUTES: (
        "  the module's attribute marks (ModuleAttributes.batch_start)",
        [(undeclared_state.ModuleAttributes, "batch_start", _nothing)],
    ),
    HOLDERS: ("  the callbacks' marks (Holders.batch_start)", [(holders.Holders, "batch_start", _nothing)]),
    LOGGED: (
        "  the logged values' snapshot (logged_snapshot)",
        [(fit_follower, "logged_snapshot", lambda results: ([], {}))],
    ),
    METRICS: (
        "  the metrics' marks and copies (metric_change_mark)",
        [(fit_follower, "metric_change_mark", lambda metric: ())],
    ),
    STEP_HOOK: (
        "the optimizer's step post-hook (counts steps)",
        [(fit_follower, "_count_steps", lambda *_: _Handle())],
    ),
    WRAPPERS: (
        "the loop wrappers alone (everything else switched off)",
        [(epoch_state, "fit_starts", _wrappers_only)],
    ),
}
FULL = "whole"
PLAIN, PLAIN_DICT = "plain: return loss", "plain: return {'loss', 'logits'} + empty Callback()"


@dataclass(frozen=True)
class Scenario:
    name: str
    make: Callable[[], pl.LightningModule]
    adapter: bool = False  # StepResultAdapter() on the module (a plain one) in place of a typed module
    checkpoint: bool = False  # a ModelCheckpoint among the callbacks
    stateful: bool = False  # trained from a torchdata StatefulDataLoader
    ablations: tuple[str, ...] = (RECORD, STREAMS, ATTRIBUTES, STEP_HOOK, WRAPPERS)


SCENARIOS = (
    Scenario("typed", TypedLoss),
    Scenario("adapter", PlainDict, adapter=True),
    Scenario("typed, log_loss=True", TypedLogsLoss, ablations=(RECORD, LOGGED)),
    Scenario("typed + ModelCheckpoint(save_top_k=0)", TypedLoss, checkpoint=True, ablations=(RECORD, HOLDERS)),
    Scenario("typed, a metric updated each step", TypedWithMetric, ablations=(RECORD, METRICS)),
    Scenario("typed on a StatefulDataLoader", TypedLoss, stateful=True, ablations=(RECORD,)),
)
REFERENCES = {PLAIN: (PlainLoss, False), PLAIN_DICT: (PlainDict, True)}  # name -> (module, empty Callback())
WARM = 4  # fits not counted, first in the process (fit_instructions.py)


@contextlib.contextmanager
def _switched_off(mechanism: str | None) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for owner, name, replacement in ABLATIONS[mechanism][1] if mechanism is not None else []:
            stack.enter_context(_replaced(owner, name, replacement))
        yield


@contextlib.contextmanager
def _replaced(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _trainer(steps: int, callbacks: list[pl.Callback], checkpoints: str | None) -> pl.Trainer:
    """``step_overhead.quiet_trainer``'s Trainer, with checkpointing on where a ModelCheckpoint is given."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        max_steps=steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        default_root_dir=checkpoints,
    )


def fit(entry: dict[str, Any], skip: int, batches: int) -> None:
    """The child process: one fit of a scenario (``entry["on"]``: exact resume on; ``entry["off"]``: the
    mechanism switched off, or None), or of a reference."""
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)
    pl.seed_everything(0, verbose=False)
    steps = steps_of_fit(skip, batches)
    with tempfile.TemporaryDirectory() as directory:
        if entry["scenario"] in REFERENCES:
            make, empty = REFERENCES[entry["scenario"]]
            trainer = _trainer(steps, [pl.Callback()] if empty else [], None)
            trainer.fit(make(), train_dataloaders=marked_loader(skip, batches))
            return
        scenario = next(s for s in SCENARIOS if s.name == entry["scenario"])
        module = scenario.make()
        callbacks: list[pl.Callback] = [StepResultAdapter(exact_resume=entry["on"])] if scenario.adapter else []
        if not scenario.adapter:
            module.exact_resume = entry["on"]  # type: ignore[attr-defined]  # a typed module's switch
        if scenario.checkpoint:
            callbacks.append(ModelCheckpoint(dirpath=directory, save_top_k=0))
        with _switched_off(entry["off"]):
            trainer = _trainer(steps, callbacks, directory if scenario.checkpoint else None)
            trainer.fit(module, train_dataloaders=marked_loader(skip, batches, scenario.stateful))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--skip", type=int, default=20, help="batches run before counting (warm-up)")
    parser.add_argument("--batches", type=int, default=100, help="batches counted per fit")
    parser.add_argument(
        "--scenarios", nargs="*", default=[s.name for s in SCENARIOS], choices=[s.name for s in SCENARIOS]
    )
    parser.add_argument("--plain-us", type=float, default=564.6, help="the plain step's µs, for the µs column")
    parser.add_argument(
        "--caches", action="store_true", help="also simulate the caches and branches: misses per step (slower)"
    )
    parser.add_argument("--keep", type=Path, help="a folder for callgrind's files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, fit)
        return
    torch.set_num_threads(1)
    fits: list[dict[str, Any]] = [{"scenario": name, "on": True, "off": None} for name in REFERENCES]
    for scenario in SCENARIOS:
        if scenario.name in args.scenarios:
            fits += [{"scenario": scenario.name, "on": True, "off": None}]
            fits += [{"scenario": scenario.name, "on": False, "off": None}]
            fits += [{"scenario": scenario.name, "on": True, "off": mechanism} for mechanism in scenario.ablations]
    warm = (fits * WARM)[:WARM]
    counted = count(Path(__file__).resolve(), warm + fits, args.skip, args.batches, args.keep, args.caches)[len(warm) :]
    events = {(entry["scenario"], entry["on"], entry["off"]): value for entry, value in zip(fits, counted)}
    by_fit = {key: value["Ir"] for key, value in events.items()}
    per_us = by_fit[PLAIN, True, None] / args.plain_us
    print(
        f"Instructions per training step (callgrind; {args.batches} batches after {args.skip}, one process);"
        f" µs at the plain step's rate ({args.plain_us} µs: {per_us:,.0f} instructions a µs)\n"
    )
    rows: list[tuple[str, ...]] = [(name, f"{by_fit[name, True, None]:,.0f}", "", "") for name in REFERENCES]
    for scenario in SCENARIOS:
        if scenario.name not in args.scenarios:
            continue
        whole, off = by_fit[scenario.name, True, None], by_fit[scenario.name, False, None]
        rows.append((f"{scenario.name}: exact resume off", f"{off:,.0f}", "", ""))
        rows.append(
            (
                f"{scenario.name}: exact resume on",
                f"{whole:,.0f}",
                f"{whole - off:,.0f}",
                f"{(whole - off) / per_us:.1f}",
            )
        )
        for mechanism in scenario.ablations:
            without = by_fit[scenario.name, True, mechanism]
            share = whole - without if mechanism != WRAPPERS else without - off
            rows.append((f"  {ABLATIONS[mechanism][0]}", f"{without:,.0f}", f"{share:,.0f}", f"{share / per_us:.1f}"))
    print(_table(("fit", "instructions/step", "exact resume's part", "≈ µs"), rows))
    if args.caches:
        print()
        print(_cache_table(events, args.scenarios))


# callgrind's simulated events: first-level data cache misses (reads, writes), last-level misses,
# mispredicted conditional and indirect branches
_MISSES = {"L1 data misses": ("D1mr", "D1mw"), "last-level misses": ("DLmr", "DLmw"), "mispredicted": ("Bcm", "Bim")}


def _cache_table(events: dict[tuple[str, bool, str | None], dict[str, float]], chosen: list[str]) -> str:
    """Per step, exact resume's part (on minus off) and each mechanism's part of the simulated misses."""

    def total(key: tuple[str, bool, str | None], kinds: tuple[str, ...]) -> float:
        return sum(events[key].get(kind, 0.0) for kind in kinds)

    rows: list[tuple[str, ...]] = []
    for scenario in SCENARIOS:
        if scenario.name not in chosen:
            continue
        whole, off = (scenario.name, True, None), (scenario.name, False, None)
        rows.append((scenario.name, *(f"{total(whole, k) - total(off, k):+,.0f}" for k in _MISSES.values())))
        for mechanism in scenario.ablations:
            without = (scenario.name, True, mechanism)
            if mechanism == WRAPPERS:
                shares = [total(without, k) - total(off, k) for k in _MISSES.values()]
            else:
                shares = [total(whole, k) - total(without, k) for k in _MISSES.values()]
            rows.append((f"  {ABLATIONS[mechanism][0]}", *(f"{share:+,.0f}" for share in shares)))
    return _table(("exact resume's part, per step (simulated)", *_MISSES), rows)


if __name__ == "__main__":
    main()
