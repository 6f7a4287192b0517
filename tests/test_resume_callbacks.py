"""Every callback Lightning ships, and a user's, across a mid-epoch resume: the same counts and state.

Each case runs the matrix's chain (``fault_matrix.fit_segment``: a model of 11 batches an epoch, a
validation after batches 4 and 9, two epochs) with one callback (or a small set) added, interrupted
inside epoch 1 in one of two ways and resumed:

- ``exception``: ``training_step`` of batch 6 raises, ``OnExceptionCheckpoint`` saves, the run stops;
- ``kill``: ``ModelCheckpoint(every_n_train_steps=...)`` saves at batch 3's end, the job dies two batches later.

Compared with the uninterrupted run: ``fault_matrix.differences`` (weights, optimizer, logged values,
every logger row) and each callback's attributes that are plain data (paths relative to the run's
directory; the ones that hold the time or a display left out) and its ``state_dict()``. The outcome is
``exact`` (nothing differs, no warning), or ``warned`` with the names the warning gives; ``TABLE``
says which each callback is, and why.

Then the library's own promises about callbacks, both ways in: a user's counter outside its
``state_dict()`` comes back at the point; an attribute that is not plain data is named in one warning;
``state_dict()`` is called at saves only, as in plain Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from fault_matrix import (
    Fault,
    Faults,
    Loop,
    Outcome,
    Row,
    Segment,
    _rows_differ,
    differences,
    fit_segment,
    module_class,
    normalized,
)
from pytorch_lightning.callbacks import (
    Callback,
    DeviceStatsMonitor,
    EarlyStopping,
    EMAWeightAveraging,
    GradientAccumulationScheduler,
    LambdaCallback,
    LearningRateMonitor,
    ModelCheckpoint,
    ModelPruning,
    ModelSummary,
    SpikeDetection,
    StochasticWeightAveraging,
    ThroughputMonitor,
    Timer,
    TQDMProgressBar,
)

from lightning_step_types.resume.plain_data import is_plain

HALF = Loop(validation="half")
FAULTS = {
    "exception": Fault("training_step", "exception", 1, 6),
    "kill": Fault("between_batches", "checkpoint_kill", 1, 3),
}

# attributes that hold the time, a path to a log file, or a display: never equal from run to run
_NOT_COMPARED = {"_last_time_checked", "_start_time", "_end_time", "_offset", "_t0s", "_time", "exclude_batches_path"}


class UserCounter(Callback):
    """A user's callback: a counter and a list it keeps outside its (empty) state_dict()."""

    def __init__(self) -> None:
        self.batches = 0
        self.losses: list[float] = []
        self.validations = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1
        self.losses.append(round(float(outputs["loss"]), 6))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.validations += 0 if trainer.sanity_checking else 1


class Opaque:
    """An object of the user's own class: not plain data."""

    def __init__(self, seen: int) -> None:
        self.seen = seen


class UserUnrestorable(Callback):
    """A user's callback that keeps an object of its own class, replaced at each batch's end."""

    def __init__(self) -> None:
        self.last = Opaque(0)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.last = Opaque(self.last.seen + 1)


class CountedStateDict(Callback):
    """A user's callback whose state_dict() has an effect: it counts its calls (as one that flushes or syncs)."""

    calls: ClassVar[dict[str, int]] = {}  # run directory -> state_dict() calls (outside the instance: not restored)

    def __init__(self) -> None:
        self.total = 0
        self.where = ""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.where = str(trainer.default_root_dir)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.total += 1

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self.total += 100

    def state_dict(self) -> dict[str, Any]:
        CountedStateDict.calls[self.where] = CountedStateDict.calls.get(self.where, 0) + 1
        return {"total": self.total}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.total = state_dict["total"]


def _lambda_counter() -> list[Callback]:
    counts: dict[str, int] = {"batches": 0}

    def count(*args: Any) -> None:
        counts["batches"] += 1

    callback = LambdaCallback(on_train_batch_end=count)
    callback.counts = counts  # type: ignore[attr-defined]  # the closure's state, compared below
    return [callback]


def _batch_size(batch: Any) -> int:
    return int(batch[0].shape[0])


# name -> the callbacks (given the run's checkpoint directory)
CALLBACKS: dict[str, Any] = {
    "ModelCheckpoint": lambda d: [ModelCheckpoint(dirpath=d, monitor="val_loss", save_top_k=2, save_last=True)],
    "EarlyStopping": lambda d: [EarlyStopping(monitor="val_loss", mode="max", patience=3)],
    "LearningRateMonitor": lambda d: [LearningRateMonitor(logging_interval="step")],
    "StochasticWeightAveraging": lambda d: [StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)],
    "GradientAccumulationScheduler": lambda d: [GradientAccumulationScheduler({1: 2})],
    "Timer": lambda d: [Timer(duration="00:01:00:00")],
    "ModelSummary": lambda d: [ModelSummary(max_depth=2)],
    "TQDMProgressBar": lambda d: [TQDMProgressBar(refresh_rate=1)],
    "DeviceStatsMonitor": lambda d: [DeviceStatsMonitor(cpu_stats=False)],
    "ModelPruning": lambda d: [ModelPruning("l1_unstructured", amount=0.2)],
    "LambdaCallback": lambda d: _lambda_counter(),
    "ThroughputMonitor": lambda d: [ThroughputMonitor(batch_size_fn=_batch_size)],
    "SpikeDetection": lambda d: [SpikeDetection(window=4, rtol=50.0, exclude_batches_path=str(d / "skip.json"))],
    "EMAWeightAveraging": lambda d: [EMAWeightAveraging(decay=0.9)],
    "UserCounter": lambda d: [UserCounter()],
    "UserUnrestorable": lambda d: [UserUnrestorable()],
    "CountedStateDict": lambda d: [CountedStateDict()],
}

# name -> (outcome, what the warning names, why): the table docs/resume.md gives
TABLE: dict[str, tuple[str, tuple[str, ...], str]] = {
    "ModelCheckpoint": ("exact", (), "its state_dict() and its plain attributes, at the point"),
    "EarlyStopping": ("exact", (), "its state_dict(), at the point"),
    "LearningRateMonitor": ("exact", (), "its rows (not written twice) and its `lrs` lists, restored"),
    "StochasticWeightAveraging": ("exact", (), "its on_train_epoch_start runs again at the resumed start"),
    "GradientAccumulationScheduler": ("exact", (), "its on_train_epoch_start runs again at the resumed start"),
    "Timer": ("exact", (), "the time elapsed is the save's (compared by its keys)"),
    "ModelSummary": ("exact", (), "nothing kept"),
    "TQDMProgressBar": ("exact", (), "a display: nothing kept"),
    "DeviceStatsMonitor": ("exact", (), "nothing kept"),
    "ModelPruning": ("warned", ("ModelPruning with a checkpoint saved in epoch 1",), "its checkpoint drops the masks"),
    "LambdaCallback": ("silent", (), "what its functions count lives in the user's closures, outside any holder"),
    "ThroughputMonitor": ("exact", (), "its counts restored (the times it measures are not compared)"),
    "SpikeDetection": (
        "crash",
        ("'SpikeDetection' object has no attribute 'running'",),
        "Lightning's own SpikeDetection.load_state_dict reads `self.running` (the attribute is `running_mean`):"
        " every resume with it fails, plain Lightning's too",
    ),
    "EMAWeightAveraging": ("exact", (), "the average lives in the checkpoint (on_save_checkpoint)"),
    "UserCounter": ("exact", (), "plain attributes outside state_dict(), restored"),
    "UserUnrestorable": ("warned", ("UserUnrestorable.last (Opaque)",), "not plain data: named"),
    "CountedStateDict": ("exact", (), "state_dict() called at saves only"),
}


@dataclass(frozen=True)
class CallbackSetup:
    """What a segment adds to the matrix's fit (``fault_matrix.SegmentExtras``): one case's callbacks."""

    name: str
    directory: Path

    def callbacks(self, faults: Faults, root: Path) -> list[Callback]:
        return list(CALLBACKS[self.name](self.directory))

    def trainer_kwargs(self, faults: Faults, root: Path) -> dict[str, Any]:
        return {"enable_progress_bar": True} if self.name == "TQDMProgressBar" else {}

    def module_class(self, way: str, loop: Loop) -> type:
        return module_class(way, loop)

    def adapter(self, way: str) -> bool:
        return way == "adapter"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.shape == b.shape and bool(torch.equal(a, b))
    return bool(a == b)


def observed(callback: Any, directory: Path) -> dict[str, Any]:
    """A callback's plain attributes and state_dict(), as compared (called after the fit, outside any save)."""
    seen = {
        name: normalized(value, directory)
        for name, value in vars(callback).items()
        if is_plain(value) and name not in _NOT_COMPARED and name != "where"
    }
    if isinstance(callback, StochasticWeightAveraging):  # set by its load_state_dict only, for its own restore
        seen.pop("_init_n_averaged", None)
        seen.pop("_scheduler_state", None)
    if isinstance(callback, Timer):
        seen["state_dict"] = sorted(callback.state_dict()["time_elapsed"])
    elif not isinstance(callback, CountedStateDict):
        seen["state_dict"] = normalized(callback.state_dict(), directory)
    if isinstance(callback, LambdaCallback):
        seen["counts"] = dict(callback.counts)  # type: ignore[attr-defined]
    if isinstance(callback, SpikeDetection):
        seen["running_mean"] = callback.running_mean.compute()
    if isinstance(callback, EMAWeightAveraging) and callback._average_model is not None:
        seen["average"] = {k: v.clone() for k, v in callback._average_model.state_dict().items()}
    return seen


def _ours(segment: Segment, name: str) -> list[Any]:
    kinds = tuple(type(callback) for callback in CALLBACKS[name](Path("unused")))
    return [callback for callback in segment.trainer.callbacks if type(callback) in kinds]


def _killed_chain(killed: Segment, resumed: Segment) -> dict[tuple[int, int, int, int], Row]:
    """The rows a logger holds after a killed job and its resumed run: the killed job's up to the point the
    resumed run starts from (at its first row's place, the rows of an earlier step), then the resumed run's."""
    first = resumed.rows[0] if resumed.rows else None
    kept: list[Row] = []
    for row in killed.rows:
        if first is None or row.position[:3] < first.position[:3]:
            kept.append(row)
        elif row.position[:3] == first.position[:3] and row.step < first.step:
            kept.append(row)
    chain: dict[tuple[int, int, int, int], Row] = {}
    for row in kept + resumed.rows:
        place = row.position[:3]
        number = sum(1 for position in chain if position[:3] == place)
        chain[(*place, number)] = row
    return chain


def _without_times(difference: str) -> str:
    """A difference with the names of measured times left out (empty: nothing else)."""
    if "[" in difference:
        return "" if difference.endswith("/time]") else difference
    where, _, names = difference.partition(": ")
    kept = [name for name in names.split(", ") if not name.endswith("/time")] if names else []
    return f"{where}: {', '.join(kept)}" if kept else ("" if names else difference)


_REFERENCES: dict[tuple[str, str], tuple[Segment, Path]] = {}


def run(way: str, name: str, how: str, root: Path) -> Outcome:
    key = (way, name)
    if key not in _REFERENCES:
        base = root.parent / f"reference-{way}-{name}"
        segment = fit_segment(way, HALF, base, None, None, CallbackSetup(name, base / "checkpoints"))
        if segment.error is not None:
            raise segment.error
        _REFERENCES[key] = (segment, base / "checkpoints")
    reference, ref_dir = _REFERENCES[key]
    directory = root / "checkpoints"
    setup = CallbackSetup(name, directory)
    fault = FAULTS[how]
    if name == "GradientAccumulationScheduler" and how == "kill":
        # every_n_train_steps counts steps without its accumulation: a save at epoch 0's last batch
        fault = Fault("between_batches", "checkpoint_kill", 0, 10)
    first = fit_segment(way, HALF, root / "first", fault, None, setup)
    assert first.fired and first.checkpoint is not None, (first.error, first.checkpoint)
    resumed = fit_segment(way, HALF, root / "resumed", None, first.checkpoint, setup)
    messages = first.warnings + resumed.warnings
    if resumed.error is not None:
        return Outcome("crash", [repr(resumed.error)], messages)
    found = differences(reference, [first, resumed], rows_to_fault=True)
    if how == "kill":  # a killed job's rows after its save: the resumed run's take their place
        found = [difference for difference in found if not difference.startswith("row at")]
        found += _rows_differ({row.position: row for row in reference.rows}, _killed_chain(first, resumed))
    if name == "ThroughputMonitor":  # the time it measures differs from run to run: the counts only
        found = [kept for kept in map(_without_times, found) if kept]
    for ref, got in zip(_ours(reference, name), _ours(resumed, name), strict=True):
        a, b = observed(ref, ref_dir), observed(got, directory)
        found += [
            f"{type(got).__name__}.{attr}" for attr in sorted(set(a) | set(b)) if not _same(a.get(attr), b.get(attr))
        ]
    if not found and not messages:
        return Outcome("exact")
    return Outcome("warned" if messages else "silent", found, messages)


CASES = [(name, how, way) for name in TABLE for how in FAULTS for way in ("typed", "adapter")]


@pytest.mark.parametrize("name,how,way", CASES, ids=[f"{n}-{h}-{w}" for n, h, w in CASES])
def test_callback_across_a_mid_epoch_resume(name: str, how: str, way: str, tmp_path: Path) -> None:
    outcome = run(way, name, how, tmp_path)
    kind, named, _ = TABLE[name]
    detail = f"{name} {how} {way}: {outcome.shown()}\n" + "\n".join(outcome.warnings)
    print(f"\nOUTCOME {name} {how} {way}: {outcome.shown()}")
    assert outcome.kind == kind, detail
    for part in named:  # in the warning (a crash: in its error)
        assert any(part in message for message in outcome.warnings + outcome.differences), detail


# --- the library's promises about a user's callback, both ways in -----------------------------------------


def _saves(segment: Segment) -> int:
    """How many checkpoints the fit wrote (each calls every callback's state_dict() once)."""
    return sum(1 for _ in Path(segment.trainer.default_root_dir).rglob("*.ckpt"))


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_state_dict_is_called_at_saves_only_as_in_plain_lightning(way: str, tmp_path: Path) -> None:
    """A callback whose state_dict() counts its calls: called once per checkpoint, as plain Lightning calls it,
    in the run that saves (with a validation and an epoch's end inside it, where the library reads the
    callbacks' state) and in the resumed run."""
    setup = CallbackSetup("CountedStateDict", tmp_path / "unused")
    fault = Fault("between_batches", "checkpoint_kill", 1, 3)
    plain = fit_segment("plain", HALF, tmp_path / "plain", fault, None, setup)
    ours = fit_segment(way, HALF, tmp_path / way, fault, None, setup)
    calls = CountedStateDict.calls
    for segment in (plain, ours):
        assert calls[str(segment.trainer.default_root_dir)] == _saves(segment) == 1, (way, calls, _saves(segment))
    resumed = fit_segment(way, HALF, tmp_path / "resumed", None, ours.checkpoint, setup)
    assert resumed.error is None and str(tmp_path / "resumed") not in calls  # it saves nothing: no call


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_a_counter_outside_state_dict_comes_back_at_the_point(way: str, tmp_path: Path) -> None:
    outcome = run(way, "UserCounter", "exception", tmp_path)
    assert outcome.kind == "exact", outcome.shown()
    reference, _ = _REFERENCES[(way, "UserCounter")]
    (callback,) = _ours(reference, "UserCounter")
    assert (callback.batches, callback.validations, len(callback.losses)) == (22, 4, 22)


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_an_attribute_that_is_not_plain_data_is_named_once(way: str, tmp_path: Path) -> None:
    outcome = run(way, "UserUnrestorable", "exception", tmp_path)
    assert outcome.kind == "warned" and len(outcome.warnings) == 1, outcome.warnings
    (message,) = outcome.warnings
    assert "resuming epoch 1 at batch 6" in message
    assert "UserUnrestorable.last (Opaque)" in message
    assert "that the callback's state_dict() does not hold, and that are not plain data" in message
    assert "expected: what a callback changes during a fit held in plain-data attributes" in message
    assert "return what UserUnrestorable.last must keep from UserUnrestorable.state_dict()" in message
