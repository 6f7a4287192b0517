"""What each of exact resume's per-batch mechanisms costs a training step, in instructions.

The models of ``step_overhead.py`` are fitted with exact resume on and off, and on with one
mechanism switched off (replaced, for that fit only, by a function that does nothing) or repeated
at a time; the difference to the whole gives that mechanism's instructions per batch. All fits run in one process
under callgrind (``fit_instructions.py``), after a few that are not counted, so a figure depends
neither on the machine's load nor on the process. The scenarios: the typed module and
``StepResultAdapter()`` as ``step_overhead.py`` fits them (nothing logged, no metric, no callback),
then the typed module with what brings in the other mechanisms: a value logged each step
(``log_loss=True``), a ``ModelCheckpoint`` (a callback whose batch hooks change its attributes), a
metric updated each step, a ``StatefulDataLoader``.

A mechanism that does the same work when run again (the streams' read, the attribute marks, the
logged values' snapshot) is measured by running it 11 times a batch instead: the difference to the
whole, over 10, is its cost, free of the few thousand instructions a step by which two fits of
different setups in one process differ (the order of objects in memory, and so the hash probes,
differ between them). Switched off are the record as a whole, the metrics' marks and copies (a
repeat would copy nothing), the step post-hook and the loop wrappers; each scenario's whole and
"exact resume off" are fitted ``--rounds`` times and averaged. The record's own share (``run_batch``
reduced to calling Lightning's ``advance``) holds the mechanisms it calls, indented under it; what the mechanisms do not add up to is the record's own
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
import statistics
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
from step_overhead import Batch, PlainDict, PlainLoss, TypedLogsLoss, TypedLoss, _table, quiet_trainer  # noqa: E402

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


REPEATS = 11  # a repeated mechanism runs this many times a batch: its cost is (count - whole) / (REPEATS - 1)


def _repeated(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original``, run ``REPEATS`` times a call; what the last run returns."""

    @functools.wraps(original)
    def repeated(*args: Any) -> Any:
        for _ in range(REPEATS - 1):
            original(*args)
        return original(*args)

    return repeated


def _no_streams_read(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Any, trainer: Any) -> None:
        original(self, trainer)
        if hasattr(self, "batch_start"):
            self.batch_start = _nothing
        else:  # before the batch-start read went into buffers, the record kept what `read` returned
            self.read = _nothing

    return init


def _streams_repeated(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Any, trainer: Any) -> None:
        original(self, trainer)
        if hasattr(self, "batch_start"):
            self.batch_start = _repeated(self.batch_start)
        else:  # before the batch-start read went into buffers, the record kept what `read` returned
            self.read = _repeated(self.read)

    return init


RECORD, STREAMS, STREAMS_OFF, ATTRIBUTES, HOLDERS = "record", "streams", "streams off", "attributes", "holders"
LOGGED, METRICS, STEP_HOOK, WRAPPERS = "logged", "metrics", "step hook", "wrappers"
SWITCHED_OFF, REPEATED = "switched off", "repeated"
# mechanism -> (its row in the table, how it is measured, the patches: (object, attribute, replacement) each).
# Switched off: its share is the whole fit's count minus this one's. Repeated (where running it again does the
# same work): its share is this fit's count minus the whole's, over REPEATS - 1; unlike a count with the
# mechanism switched off, that difference is ten times the mechanism's and not a difference of two fits' noise.
ABLATIONS: dict[str, tuple[str, str, list[tuple[Any, str, Any]]]] = {
    RECORD: (
        "the batch-start record (all of it: run_batch only calls Lightning's advance)",
        SWITCHED_OFF,
        [(fit_follower.FitFollower, "run_batch", _passthrough_batch)],
    ),
    STREAMS: (
        "  the global random streams' read",
        REPEATED,
        [(random_streams.RandomStreams, "__init__", _streams_repeated(random_streams.RandomStreams.__init__))],
    ),
    STREAMS_OFF: (
        "  the same, switched off (its misses: a repeat finds its buffers in the caches)",
        SWITCHED_OFF,
        [(random_streams.RandomStreams, "__init__", _no_streams_read(random_streams.RandomStreams.__init__))],
    ),
    ATTRIBUTES: (
        "  the module's attribute marks (ModuleAttributes.batch_start)",
        REPEATED,
        [(undeclared_state.ModuleAttributes, "batch_start", _repeated(undeclared_state.ModuleAttributes.batch_start))],
    ),
    HOLDERS: (
        "  the callbacks' marks (Holders.batch_start)",
        REPEATED,
        [(holders.Holders, "batch_start", _repeated(holders.Holders.batch_start))],
    ),
    LOGGED: (
        "  the logged values' snapshot (logged_snapshot)",
        REPEATED,
        [(fit_follower, "logged_snapshot", _repeated(fit_follower.logged_snapshot))],
    ),
    METRICS: (
        "  the metrics' marks and copies (switched off: a repeat would copy nothing)",
        SWITCHED_OFF,
        [(fit_follower, "metric_change_mark", lambda metric: ())],
    ),
    STEP_HOOK: (
        "the optimizer's step post-hook (counts steps)",
        SWITCHED_OFF,
        [(fit_follower, "_count_steps", lambda *_: _Handle())],
    ),
    WRAPPERS: (
        "the loop wrappers alone (everything else switched off)",
        SWITCHED_OFF,
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
    Scenario("typed", TypedLoss, ablations=(RECORD, STREAMS, STREAMS_OFF, ATTRIBUTES, STEP_HOOK, WRAPPERS)),
    Scenario("adapter", PlainDict, adapter=True),
    Scenario("typed, log_loss=True", TypedLogsLoss, ablations=(RECORD, LOGGED)),
    Scenario("typed + ModelCheckpoint(save_top_k=0)", TypedLoss, checkpoint=True, ablations=(RECORD, HOLDERS)),
    Scenario("typed, a metric updated each step", TypedWithMetric, ablations=(RECORD, METRICS)),
    Scenario("typed on a StatefulDataLoader", TypedLoss, stateful=True, ablations=(RECORD,)),
)
REFERENCES = {PLAIN: (PlainLoss, False), PLAIN_DICT: (PlainDict, True)}  # name -> (module, empty Callback())
WARM = 4  # fits not counted, first in the process (fit_instructions.py)


def _switched_off_class(cls: Any) -> Any:
    """A typed module's class with ``exact_resume = False``: set on the class, as a user does, since an
    attribute set on the instance would be one more attribute for the module's attribute marks to follow."""
    return type(cls.__name__, (cls,), {"exact_resume": False})


@contextlib.contextmanager
def _switched_off(mechanism: str | None) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for owner, name, replacement in ABLATIONS[mechanism][2] if mechanism is not None else []:
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
            trainer = quiet_trainer(steps, [pl.Callback()] if empty else [])
            trainer.fit(make(), train_dataloaders=marked_loader(skip, batches))
            return
        scenario = next(s for s in SCENARIOS if s.name == entry["scenario"])
        callbacks: list[pl.Callback] = [StepResultAdapter(exact_resume=entry["on"])] if scenario.adapter else []
        module = scenario.make() if scenario.adapter or entry["on"] else _switched_off_class(scenario.make)()
        if scenario.checkpoint:
            callbacks.append(ModelCheckpoint(dirpath=directory, save_top_k=0))
        with _switched_off(entry["off"]):
            trainer = quiet_trainer(steps, callbacks, directory if scenario.checkpoint else None)
            trainer.fit(module, train_dataloaders=marked_loader(skip, batches, scenario.stateful))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--skip", type=int, default=20, help="batches run before counting (warm-up)")
    parser.add_argument("--batches", type=int, default=100, help="batches counted per fit")
    parser.add_argument(
        "--scenarios", nargs="*", default=[s.name for s in SCENARIOS], choices=[s.name for s in SCENARIOS]
    )
    parser.add_argument("--rounds", type=int, default=2, help="fits of each scenario's whole and off (averaged)")
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
            for _ in range(args.rounds - 1):  # the whole and exact resume off again, after the others
                fits += [{"scenario": scenario.name, "on": on, "off": None} for on in (True, False)]
    warm = (fits * WARM)[:WARM]
    counted = count(Path(__file__).resolve(), warm + fits, args.skip, args.batches, args.keep, args.caches)[len(warm) :]
    runs: dict[tuple[str, bool, str | None], list[dict[str, float]]] = {}
    for entry, value in zip(fits, counted):
        runs.setdefault((entry["scenario"], entry["on"], entry["off"]), []).append(value)
    events = {
        key: {event: statistics.fmean(run[event] for run in values) for event in values[0]}
        for key, values in runs.items()
    }
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
            share = _share(mechanism, whole, without, off)
            rows.append((f"  {ABLATIONS[mechanism][0]}", f"{without:,.0f}", f"{share:,.0f}", f"{share / per_us:.1f}"))
    print(_table(("fit", "instructions/step", "exact resume's part", "≈ µs"), rows))
    if args.caches:
        print()
        print(_cache_table(events, args.scenarios))


def _share(mechanism: str, whole: float, measured: float, off: float) -> float:
    """A mechanism's part of a figure, from the fit with it switched off or repeated (``measured``)."""
    if mechanism == WRAPPERS:
        return measured - off
    if ABLATIONS[mechanism][1] == REPEATED:
        return (measured - whole) / (REPEATS - 1)
    return whole - measured


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
            shares = [_share(mechanism, total(whole, k), total(without, k), total(off, k)) for k in _MISSES.values()]
            rows.append((f"  {ABLATIONS[mechanism][0]}", *(f"{share:+,.0f}" for share in shares)))
    return _table(("exact resume's part, per step (simulated)", *_MISSES), rows)


if __name__ == "__main__":
    main()
