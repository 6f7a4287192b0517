"""The module's own attributes across a resume: what no checkpoint holds, saved at the point or named.

The harness is ``fault_matrix``'s (one uninterrupted fit against an interrupted, resumed chain, value
by value), with a module that keeps one kind of state in plain attributes:

- ``step_outputs``: ``self.training_step_outputs.append(loss)`` in ``training_step``, consumed and
  cleared in ``on_train_epoch_end`` (the pattern Lightning's 2.0 migration guide recommends); the
  same list made in ``setup`` (``outputs_from_setup``) or in ``on_fit_start`` (``outputs_from_fit_start``);
- ``counter``: ``self.rows_seen += len(batch)``, logged at the epoch's end;
- ``cached_tensor``: ``self.last_pred`` rebound to each step's mean prediction, read by the next step;
- ``running_tensor``: ``self.loss_sum += loss``, in place, logged and zeroed at the epoch's end;
- ``dict``: ``self.stats["rows"]``, ``self.stats["loss"]`` summed per step, logged and reset at the epoch's end;
- ``defaultdict``: ``self.by_parity[key].append(loss)`` into a ``defaultdict(list)``, alternating
  keys, summed and cleared at the epoch's end (put back into the defaultdict, which makes missing keys after);
- ``val_outputs``: ``self.validation_step_outputs.append(loss)`` in ``validation_step``, consumed in
  ``on_validation_epoch_end`` (a validation after batches 4 and 9 of each epoch);
- ``val_outputs_epoch``: the same list consumed in ``on_train_epoch_end``, over the epoch's validations.

Each pattern's attribute is compared too at the end. Each pattern is run against the faults that
find it (an exception inside ``training_step`` with ``OnExceptionCheckpoint``, or inside
``validation_step``; ``ModelCheckpoint(every_n_train_steps)`` at a batch's end, then killed two
batches later), both ways in; and with ``exact_resume=False`` (plain Lightning's resume), where each
cell but the ``val_outputs`` ones differs silently, so the test can fail.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from fault_matrix import (
    Fault,
    Faults,
    Loop,
    Outcome,
    PlainMatrixModel,
    Segment,
    SimulatedFault,
    TypedMatrixModel,
    differences,
    fit_segment,
)
from pytorch_lightning.callbacks import Callback

from lightning_step_types.pytorch_lightning import StepResultAdapter

NO_VALIDATION = Loop()
HALF = Loop(validation="half")  # a validation after batches 4 and 9 of each epoch


class Patterns:
    """The attribute patterns, mixed into the matrix's modules (both ways in)."""

    pattern: str

    def attach(self) -> None:
        self.training_step_outputs: list[torch.Tensor] = []
        self.validation_step_outputs: list[torch.Tensor] = []
        self.rows_seen = 0
        self.last_pred = torch.zeros(())
        self.loss_sum = torch.zeros(())
        self.stats: dict[str, Any] = {"rows": 0, "loss": 0.0}
        self.by_parity: defaultdict[str, list[torch.Tensor]] = defaultdict(list)

    def noted(self) -> Any:
        """The pattern's attribute, as compared with the uninterrupted run's at the end."""
        return {
            "step_outputs": self.training_step_outputs,
            "outputs_from_setup": self.training_step_outputs,
            "outputs_from_fit_start": self.training_step_outputs,
            "counter": self.rows_seen,
            "cached_tensor": self.last_pred,
            "running_tensor": self.loss_sum,
            "dict": self.stats,
            "defaultdict": self.by_parity,
            "val_outputs": self.validation_step_outputs,
            "val_outputs_epoch": self.validation_step_outputs,
        }[self.pattern]

    def note_step(self, batch: Any, loss: torch.Tensor, pred: torch.Tensor) -> None:
        log: Any = getattr(self, "log")
        pattern = self.pattern
        if pattern in ("step_outputs", "outputs_from_setup", "outputs_from_fit_start"):
            self.training_step_outputs.append(loss.detach())
        elif pattern == "counter":
            self.rows_seen += len(batch[1])
        elif pattern == "cached_tensor":
            log("drift", (pred.detach().mean() - self.last_pred).abs(), on_step=True, on_epoch=True)
            self.last_pred = pred.detach().mean()
        elif pattern == "running_tensor":
            self.loss_sum += loss.detach()
        elif pattern == "dict":
            self.stats["rows"] += len(batch[1])
            self.stats["loss"] += float(loss)
        elif pattern == "defaultdict":
            self.by_parity["odd" if len(self.by_parity["even"]) > len(self.by_parity["odd"]) else "even"].append(
                loss.detach()
            )

    def note_epoch_end(self) -> None:
        log: Any = getattr(self, "log")
        pattern = self.pattern
        if pattern in ("step_outputs", "outputs_from_setup", "outputs_from_fit_start"):
            outputs = torch.stack(self.training_step_outputs)
            log("epoch_count", float(len(outputs)))
            log("epoch_mean", outputs.mean())
            self.training_step_outputs.clear()
        elif pattern == "counter":
            log("rows_seen", float(self.rows_seen))
        elif pattern == "running_tensor":
            log("loss_sum", self.loss_sum.clone())
            self.loss_sum.zero_()
        elif pattern == "dict":
            log("stats_rows", float(self.stats["rows"]))
            log("stats_loss", self.stats["loss"])
            self.stats = {"rows": 0, "loss": 0.0}
        elif pattern == "defaultdict":
            log("odd_sum", torch.stack(self.by_parity["odd"]).sum())
            log("even_count", float(len(self.by_parity["even"])))
            self.by_parity.clear()
        elif pattern == "val_outputs_epoch":
            log("val_count", float(len(self.validation_step_outputs)))
            self.validation_step_outputs.clear()


def _module_classes(pattern: str) -> dict[str, type]:
    def build(base: type) -> type:
        def __init__(self: Any, loop: Loop, faults: Faults) -> None:
            base.__init__(self, loop, faults)
            self.pattern = pattern
            self.attach()

        def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
            loss, pred = self.loss_of(batch, self.net)
            self.note_step(batch, loss, pred)
            return base.training_step(self, batch, batch_idx)

        def validation_step(self: Any, batch: Any, batch_idx: int) -> Any:
            loss, _ = self.loss_of(batch, self.net)
            self.validation_step_outputs.append(loss.detach())
            return base.validation_step(self, batch, batch_idx)

        def on_validation_epoch_end(self: Any) -> None:
            if self.pattern == "val_outputs" and self.validation_step_outputs:
                getattr(self, "log")("val_mean", torch.stack(self.validation_step_outputs).mean())
                self.validation_step_outputs.clear()

        def on_train_epoch_end(self: Any) -> None:
            self.note_epoch_end()
            base.on_train_epoch_end(self)

        def setup(self: Any, stage: str) -> None:
            if self.pattern == "outputs_from_setup":
                self.training_step_outputs = []

        def on_fit_start(self: Any) -> None:
            if self.pattern == "outputs_from_fit_start":
                self.training_step_outputs = []

        methods = dict(
            __init__=__init__,
            training_step=training_step,
            validation_step=validation_step,
            on_validation_epoch_end=on_validation_epoch_end,
            on_train_epoch_end=on_train_epoch_end,
            setup=setup,
            on_fit_start=on_fit_start,
        )
        return type(f"Attribute{base.__name__}", (Patterns, base), methods)

    return {"typed": build(TypedMatrixModel), "plain": build(PlainMatrixModel)}


_CLASSES: dict[str, dict[str, type]] = {}


@dataclass(frozen=True)
class AttributeSetup:
    """What an attribute cell's segment adds to the fit (``fault_matrix.SegmentExtras``)."""

    pattern: str
    exact_resume: bool = True

    def callbacks(self, faults: Faults, root: Path) -> list[Callback]:
        return [] if self.exact_resume else [StepResultAdapter(exact_resume=False)]

    def trainer_kwargs(self, faults: Faults, root: Path) -> dict[str, Any]:
        return {}

    def module_class(self, way: str, loop: Loop) -> type:
        if self.pattern not in _CLASSES:
            _CLASSES[self.pattern] = _module_classes(self.pattern)
        cls = _CLASSES[self.pattern]["typed" if way == "typed" else "plain"]
        if way == "typed" and not self.exact_resume:
            return type(cls.__name__, (cls,), {"exact_resume": False})
        return cls

    def adapter(self, way: str) -> bool:
        return way == "adapter" and self.exact_resume


@dataclass(frozen=True)
class AttributeCell:
    way: str  # typed | adapter
    pattern: str
    fault: Fault
    exact_resume: bool = True

    @property
    def loop(self) -> Loop:
        return HALF if self.pattern.startswith("val_") else NO_VALIDATION

    @property
    def id(self) -> str:
        plain = "" if self.exact_resume else " exact_resume=False"
        return f"{self.way} {self.pattern} {self.fault.shown()}{plain}"


_REFERENCES: dict[tuple[str, str], Segment] = {}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return bool(a == b)


def run_attribute_cell(cell: AttributeCell, root: Path) -> Outcome:
    key = (cell.way, cell.pattern)
    if key not in _REFERENCES:
        _REFERENCES[key] = fit_segment(
            cell.way,
            cell.loop,
            root.parent / f"reference-{cell.way}-{cell.pattern}",
            None,
            None,
            AttributeSetup(cell.pattern),
        )
        assert _REFERENCES[key].error is None, _REFERENCES[key].error
    reference = _REFERENCES[key]
    setup = AttributeSetup(cell.pattern, cell.exact_resume)
    first = fit_segment(cell.way, cell.loop, root / "first", cell.fault, None, setup)
    assert first.fired and isinstance(first.error, SimulatedFault), first.error
    assert first.checkpoint is not None
    resumed = fit_segment(cell.way, cell.loop, root / "resumed", None, first.checkpoint, setup)
    chain = [first, resumed]
    messages = [message for segment in chain for message in segment.warnings]
    if resumed.error is not None:
        return Outcome("crash", [f"{type(resumed.error).__name__}: {resumed.error}"], messages)
    found = differences(reference, chain)
    if not _same(reference.module.noted(), resumed.module.noted()):
        found.append(f"the module's {cell.pattern} attribute")
    if not found and not messages:
        return Outcome("exact")
    return Outcome("warned" if messages else "silent", found, messages)


# --- the cells ------------------------------------------------------------------------------------------

IN_STEP = Fault("training_step", "exception", 0, 5)  # after the step's own note (the list holds batch 5)
KILLED = Fault("between_batches", "checkpoint_kill", 0, 5)  # ModelCheckpoint after batch 5, killed at batch 7
IN_VALIDATION = Fault("validation_step", "exception", 0, 9)  # the validation after batch 9, its first batch

FAULTS: dict[str, tuple[Fault, ...]] = {
    "step_outputs": (IN_STEP, KILLED),
    "outputs_from_setup": (IN_STEP, KILLED),
    "outputs_from_fit_start": (IN_STEP, KILLED),
    "counter": (IN_STEP, KILLED),
    "cached_tensor": (IN_STEP, KILLED),
    "running_tensor": (IN_STEP, KILLED),
    "dict": (IN_STEP, KILLED),
    "defaultdict": (IN_STEP, KILLED),
    "val_outputs": (IN_VALIDATION, IN_STEP, KILLED),
    "val_outputs_epoch": (IN_VALIDATION, IN_STEP, KILLED),
}
CELLS = [
    AttributeCell(way, pattern, fault)
    for pattern, faults in FAULTS.items()
    for fault, way in itertools.product(faults, ("typed", "adapter"))
]
# plain Lightning's resume (exact_resume=False) of each cell: the list, the counter, the tensors and the
# dict start again as the new module holds them, and what the pattern logs differs. After an exception
# Lightning also goes on after the batch that failed, and plain Lightning's running epoch aggregates
# start fresh, so more differs. The val_outputs list is empty at a batch's end (each validation
# consumes it): nothing of it is lost there.
LOGGED = {
    "outputs_from_setup": "epoch_count",
    "outputs_from_fit_start": "epoch_count",
    "val_outputs": "val_mean",
    "step_outputs": "epoch_count",
    "counter": "rows_seen",
    "cached_tensor": "drift",
    "running_tensor": "loss_sum",
    "dict": "stats_rows",
    "defaultdict": "odd_sum",
    "val_outputs_epoch": "val_count",
}


@pytest.mark.parametrize("cell", CELLS, ids=lambda cell: cell.id)
def test_attribute_resumes_exactly(cell: AttributeCell, tmp_path: Path) -> None:
    outcome = run_attribute_cell(cell, tmp_path)
    assert outcome.shown() == "exact", outcome.warnings or outcome.differences


@pytest.mark.parametrize(
    "cell",
    [AttributeCell(cell.way, cell.pattern, cell.fault, exact_resume=False) for cell in CELLS],
    ids=lambda cell: cell.id,
)
def test_plain_lightning_loses_the_attribute(cell: AttributeCell, tmp_path: Path) -> None:
    outcome = run_attribute_cell(cell, tmp_path)
    if cell.fault.how == "exception":  # plain Lightning goes on after the batch it failed in: more differs
        assert outcome.kind == "silent", outcome.shown()
    else:  # from ModelCheckpoint's checkpoint: what the pattern logs differs (val_outputs: nothing to lose)
        assert outcome.kind == "silent", outcome.shown()
        logged = LOGGED[cell.pattern]
        differs = any(logged in difference for difference in outcome.differences)
        assert differs is (cell.pattern != "val_outputs"), outcome.differences


# --- what cannot be saved: named, attribute by attribute ---------------------------------------------


class Tally:
    """A user's helper object: its count changes with every step."""

    def __init__(self) -> None:
        self.count = 0


def _unsaved_classes() -> dict[str, type]:
    def build(base: type) -> type:
        def __init__(self: Any, loop: Loop, faults: Faults) -> None:
            base.__init__(self, loop, faults)
            self.tally = Tally()
            self.stream = (index for index in range(1000))
            self.history: list[Any] = []
            self.training_step_outputs: list[torch.Tensor] = []

        def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
            self.tally.count += 1
            next(self.stream)
            self.history.append(Tally())
            loss, _ = self.loss_of(batch, self.net)
            self.training_step_outputs.append(loss.detach())
            return base.training_step(self, batch, batch_idx)

        return type("MyModel", (base,), {"__init__": __init__, "training_step": training_step})

    return {"typed": build(TypedMatrixModel), "plain": build(PlainMatrixModel)}


def _resetting_classes() -> dict[str, type]:
    """The module saves its own count and, on load, deliberately starts its list again."""

    def build(base: type) -> type:
        def __init__(self: Any, loop: Loop, faults: Faults) -> None:
            base.__init__(self, loop, faults)
            self.rows_seen = 0
            self.training_step_outputs: list[torch.Tensor] = []

        def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
            self.rows_seen += len(batch[1])
            loss, _ = self.loss_of(batch, self.net)
            self.training_step_outputs.append(loss.detach())
            return base.training_step(self, batch, batch_idx)

        def on_save_checkpoint(self: Any, checkpoint: dict[str, Any]) -> None:
            checkpoint["rows_seen"] = self.rows_seen + 1000

        def on_load_checkpoint(self: Any, checkpoint: dict[str, Any]) -> None:
            self.rows_seen = checkpoint["rows_seen"]
            self.training_step_outputs = []

        methods = dict(
            __init__=__init__,
            training_step=training_step,
            on_save_checkpoint=on_save_checkpoint,
            on_load_checkpoint=on_load_checkpoint,
        )
        return type("MyModel", (base,), methods)

    return {"typed": build(TypedMatrixModel), "plain": build(PlainMatrixModel)}


_UNSAVED = _unsaved_classes()
_RESETTING = _resetting_classes()


@dataclass(frozen=True)
class ModuleSetup:
    classes: str  # unsaved | resetting

    def callbacks(self, faults: Faults, root: Path) -> list[Callback]:
        return []

    def trainer_kwargs(self, faults: Faults, root: Path) -> dict[str, Any]:
        return {}

    def module_class(self, way: str, loop: Loop) -> type:
        return (_UNSAVED if self.classes == "unsaved" else _RESETTING)["typed" if way == "typed" else "plain"]

    def adapter(self, way: str) -> bool:
        return way == "adapter"


def _chain(way: str, setup: ModuleSetup, root: Path) -> tuple[Segment, Segment]:
    first = fit_segment(way, NO_VALIDATION, root / "first", IN_STEP, None, setup)
    assert isinstance(first.error, SimulatedFault) and first.checkpoint is not None
    resumed = fit_segment(way, NO_VALIDATION, root / "resumed", None, first.checkpoint, setup)
    assert resumed.error is None, resumed.error
    return first, resumed


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_what_no_checkpoint_holds_is_named(way: str, tmp_path: Path) -> None:
    first, resumed = _chain(way, ModuleSetup("unsaved"), tmp_path)
    assert first.warnings == []
    (message,) = resumed.warnings
    lines = message.splitlines()
    assert lines[0] == "MyModel: resuming epoch 0 at batch 5"
    assert lines[1] == (
        "  got:      module attributes that changed during the fit before the save and that no checkpoint holds:"
        " MyModel.history (list, it holds a test_undeclared_state.Tally, which no checkpoint holds);"
        " MyModel.stream (generator, not data a checkpoint holds);"
        " MyModel.tally (test_undeclared_state.Tally, not data a checkpoint holds);"
        " the resumed run starts them as the new module's __init__ and setup left them"
    )
    assert lines[2] == (
        "  expected: attributes a checkpoint can hold (tensors, numbers, strings, None, and lists, tuples and"
        " dicts of those: the library saves them at the resume point), or state the module saves in"
        " on_save_checkpoint"
    )
    assert lines[3] == (
        "  fix:      save it in MyModel.on_save_checkpoint (checkpoint['history'] = ...) and put it back in"
        " on_load_checkpoint (self.history = ...), or keep it in a buffer (self.register_buffer) or a"
        " torchmetrics Metric"
    )
    # what a checkpoint can hold is put back all the same: batches 0-4 at batch 5's start, then the rest
    assert len(resumed.module.training_step_outputs) == 22
    assert resumed.module.tally.count == 22 - 5  # the new object counts from the resumed batch only


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_what_the_module_loads_itself_is_left_to_it(way: str, tmp_path: Path) -> None:
    """Its own on_load_checkpoint sets the count and starts the list again: neither is put back, nor named."""
    _, resumed = _chain(way, ModuleSetup("resetting"), tmp_path)
    assert not any("module attributes" in message for message in resumed.warnings), resumed.warnings
    # the count saved at the exception (batches 0-5, 4 rows each) plus 1000, then batches 5-10 and epoch 1
    assert resumed.module.rows_seen == 1000 + 6 * 4 + (5 * 4 + 2) + (10 * 4 + 2)
    assert len(resumed.module.training_step_outputs) == 6 + 11  # started again at batch 5, never cleared
