"""The fault-injection matrix, grown by who holds state, a failed checkpoint write, and where the checkpoint came from.

The harness is ``fault_matrix``'s (one uninterrupted fit against an interrupted, resumed chain);
each cell adds one holder of state to the fit:

- Lightning's stateful callbacks: ``EarlyStopping``, ``ModelCheckpoint`` (``monitor``, top-2,
  ``save_last``; at validation ends, at epoch ends, every few steps), ``LearningRateMonitor``,
  ``StochasticWeightAveraging``, ``GradientAccumulationScheduler``, ``Timer``, ``BackboneFinetuning``;
- a user's callback with ``state_dict``/``load_state_dict``, one that sets itself up in
  ``on_train_epoch_start``, one that writes rows to the logger itself;
- the module's own ``on_save_checkpoint``/``on_load_checkpoint`` data (a counter of rows seen).

How it stops, one more: ``write_fails``, the checkpoint ``ModelCheckpoint`` writes raises ``OSError``
(a full disk) once, at a batch's end, a validation's end or an epoch's end; ``OnExceptionCheckpoint``
saves, and the run resumes from that. Where the checkpoint came from: ``library`` (the way in under
test saved it) or ``plain`` (plain Lightning saved it: a user adopting the library mid-project).

Compared on top of ``fault_matrix.differences``: every callback's ``state_dict()`` (``Timer``'s
elapsed time by its keys only), the module's ``on_save_checkpoint`` data, the files in
``ModelCheckpoint``'s directory, and every logger row, including rows a callback wrote directly; a
failed segment's rows count up to where it failed (a run that went on after a save: up to the save).
The outcome rule is the matrix's: ``exact``, ``warned`` (one ``StepResultWarning`` at resume names
what differs), ``silent`` or ``crash``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from fault_matrix import (
    FEATURES,
    Fault,
    Faults,
    Loop,
    Outcome,
    PlainMatrixModel,
    Segment,
    TypedMatrixModel,
    counts,
    differences,
    fit_segment,
    named_cells_table,
    normalized,
)
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from models import BATCH_SIZE, PlainRegressor, TypedRegressor, assert_same_params, make_dataset, trainer_kwargs
from pytorch_lightning import Trainer
from pytorch_lightning.callbacks import (
    BackboneFinetuning,
    Callback,
    EarlyStopping,
    GradientAccumulationScheduler,
    LearningRateMonitor,
    ModelCheckpoint,
    StochasticWeightAveraging,
    Timer,
)
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types.pytorch_lightning import StepResultAdapter

HALF = Loop(validation="half")  # a validation after batches 4 and 9 of each epoch
PLAIN_LOOP = Loop()  # no validation: ModelCheckpoint and EarlyStopping act at the epoch's end

# --- the holders ------------------------------------------------------------------------------------


class CountingCallback(Callback):
    """A user's callback with state: it counts batch starts, batch ends and validation ends."""

    def __init__(self) -> None:
        self.counts = {"batch_start": 0, "batch_end": 0, "validation_end": 0}

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.counts["batch_start"] += 1

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.counts["batch_end"] += 1

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self.counts["validation_end"] += 1

    def state_dict(self) -> dict[str, Any]:
        return {"counts": dict(self.counts)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.counts = dict(state_dict["counts"])


class EpochSetupCallback(Callback):
    """A user's callback that sets itself up in ``on_train_epoch_start`` (a weight per epoch) and sums with it."""

    def __init__(self) -> None:
        self.weight = 0.0
        self.total = 0.0

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.weight = 1.0 + trainer.current_epoch

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.total += self.weight

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.total = state_dict["total"]


class LoggerWriter(Callback):
    """A user's callback that writes rows to the logger itself, at each batch's start and each validation's end."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        trainer.logger.log_metrics({"seen_batch": float(batch_idx)}, step=trainer.global_step)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            trainer.logger.log_metrics({"validations": float(trainer.global_step)}, step=trainer.global_step)


class RowsSeen:
    """The module's own checkpoint data: a counter of rows ``training_step`` saw, saved in ``on_save_checkpoint``."""

    rows_seen: int

    def train_on(self, *args: Any) -> torch.Tensor:
        self.rows_seen = getattr(self, "rows_seen", 0) + len(args[0][1])
        return super().train_on(*args)  # type: ignore[misc]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)  # type: ignore[misc]
        checkpoint["rows_seen"] = getattr(self, "rows_seen", 0)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)  # type: ignore[misc]
        self.rows_seen = checkpoint.get("rows_seen", 0)


class WithBackbone:
    """A backbone ``Linear(8, 8)`` before the head, which BackboneFinetuning freezes and then unfreezes."""

    net: nn.Module

    def build(self, loop: Loop, faults: Faults) -> None:
        super().build(loop, faults)  # type: ignore[misc]
        backbone = nn.Linear(FEATURES, FEATURES)
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            backbone.weight.copy_(torch.eye(FEATURES) + 0.1 * torch.randn(FEATURES, FEATURES, generator=generator))
            backbone.bias.zero_()
        self.backbone = backbone
        self.net = nn.Sequential(backbone, self.net)

    def configure_optimizers(self) -> Any:
        trainable = [parameter for parameter in self.net.parameters() if parameter.requires_grad]
        return torch.optim.SGD(trainable, lr=0.05, momentum=0.9)


def _module_classes() -> dict[tuple[str, str], type]:
    classes: dict[tuple[str, str], type] = {}
    for way, base in (("plain", PlainMatrixModel), ("typed", TypedMatrixModel)):
        classes[(way, "module_state")] = type(f"RowsSeen{base.__name__}", (RowsSeen, base), {})
        classes[(way, "backbone")] = type(f"Backbone{base.__name__}", (WithBackbone, base), {})
    return classes


_MODULES = _module_classes()


class FailingWrites(TorchCheckpointIO):
    """Checkpoint writes to ``ModelCheckpoint``'s directory raise ``OSError`` once, from the fault's batch on
    (a full disk); every other write goes through."""

    def __init__(self, faults: Faults, directory: Path) -> None:
        super().__init__()
        self.faults, self.directory = faults, directory

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        faults, fault = self.faults, self.faults.fault
        if (
            fault is not None
            and fault.how == "write_fails"
            and not faults.fired
            and Path(path).parent == self.directory
        ):
            trainer = faults.trainer
            done = int(trainer.fit_loop.epoch_loop.batch_progress.current.completed)
            if (int(trainer.current_epoch), done) >= (fault.epoch, fault.batch):
                faults.fire()
                raise OSError(28, "No space left on device", str(path))
        super().save_checkpoint(checkpoint, path, storage_options)


# where Lightning writes a checkpoint: the ModelCheckpoint that writes there, and the loop it needs
WRITE_PLACES = ("write_batch_end", "write_validation_end", "write_epoch_end")


def _checkpointing(where: str, directory: Path) -> ModelCheckpoint:
    if where == "write_batch_end":
        return ModelCheckpoint(
            dirpath=directory,
            monitor="train_loss_step",
            save_top_k=2,
            save_last=True,
            every_n_train_steps=4,
            save_on_train_epoch_end=False,
            filename="{epoch}-{step}",
        )
    monitor = "val_loss" if where == "write_validation_end" else "train_loss_epoch"
    return ModelCheckpoint(dirpath=directory, monitor=monitor, save_top_k=2, save_last=True, filename="{epoch}-{step}")


HOLDERS = (
    "early_stopping",
    "checkpoint",  # ModelCheckpoint(monitor, save_top_k=2, save_last=True) at validation or epoch ends
    "checkpoint_steps",  # ModelCheckpoint(every_n_train_steps=4, monitor="train_loss_step", save_top_k=2)
    "early_stopping_checkpoint",
    "lr_monitor",
    "swa",
    "accumulation_scheduler",
    "timer",
    "backbone",
    "user_callback",
    "epoch_setup_callback",
    "logger_callback",
    "module_state",
)


def holder_callbacks(holder: str, loop: Loop, directory: Path, place: str | None = None) -> list[Callback]:
    """The holder's callbacks; ``place``: where its ModelCheckpoint writes (by default, where its loop validates)."""
    monitor = "val_loss" if loop.validation != "none" else "train_loss_epoch"
    place = place or ("write_validation_end" if loop.validation != "none" else "write_epoch_end")
    found: dict[str, Any] = {
        "early_stopping": lambda: [EarlyStopping(monitor=monitor, mode="max", patience=5)],
        "checkpoint": lambda: [_checkpointing(place, directory)],
        "checkpoint_steps": lambda: [_checkpointing("write_batch_end", directory)],
        "early_stopping_checkpoint": lambda: [
            EarlyStopping(monitor=monitor, mode="max", patience=5),
            _checkpointing(place, directory),
        ],
        "lr_monitor": lambda: [LearningRateMonitor(logging_interval="step")],
        "swa": lambda: [StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=1)],
        "accumulation_scheduler": lambda: [GradientAccumulationScheduler({1: 2})],
        "timer": lambda: [Timer(duration="00:01:00:00")],
        "backbone": lambda: [BackboneFinetuning(unfreeze_backbone_at_epoch=1)],
        "user_callback": lambda: [CountingCallback()],
        "epoch_setup_callback": lambda: [EpochSetupCallback()],
        "logger_callback": lambda: [LoggerWriter()],
        "module_state": lambda: [],
        # stops after epoch 1 of 4 (the epoch loss rises); last.ckpt holds the stop
        "early_stop_last": lambda: [
            EarlyStopping(monitor="train_loss_epoch", mode="min", patience=0),
            ModelCheckpoint(dirpath=directory, save_last=True, save_top_k=0),
        ],
    }
    return list(found[holder]())


@dataclass(frozen=True)
class HolderSetup:
    """What a segment of a holder cell adds to the fit (``fault_matrix.SegmentExtras``)."""

    holder: str
    loop: Loop
    directory: Path  # ModelCheckpoint's, shared by a chain's segments as by a user's relaunches
    plain: bool = False  # plain Lightning saves this segment's checkpoint (no adapter, a LightningModule)
    write_fault: str | None = None  # the place a ModelCheckpoint write fails (one is added if the holder has none)

    def callbacks(self, faults: Faults, root: Path) -> list[Callback]:
        callbacks = holder_callbacks(self.holder, self.loop, self.directory, self.write_fault)
        if self.write_fault is not None and not any(isinstance(c, ModelCheckpoint) for c in callbacks):
            callbacks.append(_checkpointing(self.write_fault, self.directory))
        return callbacks

    def trainer_kwargs(self, faults: Faults, root: Path) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"plugins": [FailingWrites(faults, self.directory)]}
        if self.holder == "early_stop_last":
            kwargs["max_epochs"] = 4
        return kwargs

    def module_class(self, way: str, loop: Loop) -> type:
        kind = "plain" if self.plain or way == "adapter" else "typed"
        if self.holder in ("module_state", "backbone"):
            return _MODULES[(kind, self.holder)]
        return PlainMatrixModel if kind == "plain" else TypedMatrixModel

    def adapter(self, way: str) -> bool:
        return way == "adapter" and not self.plain


@dataclass(frozen=True)
class HolderCell:
    way: str  # typed | adapter
    holder: str
    loop: Loop
    fault: Fault
    origin: str = "library"  # library | plain: who saved the checkpoint the run resumes from

    @property
    def write_fault(self) -> str | None:
        return self.fault.where if self.fault.how == "write_fails" else None

    @property
    def id(self) -> str:
        return f"{self.way} {self.holder} [{self.loop.shown()}] {self.fault.shown()} from {self.origin}"


# --- running and comparing ----------------------------------------------------------------------------

_REFERENCES: dict[tuple[str, str, Loop, str | None], tuple[Segment, Path]] = {}


def _reference(cell: HolderCell, root: Path) -> tuple[Segment, Path]:
    key = (cell.way, cell.holder, cell.loop, cell.write_fault)
    if key not in _REFERENCES:
        base = root.parent / f"reference-{cell.way}-{cell.holder}-{abs(hash(key))}"
        setup = HolderSetup(cell.holder, cell.loop, base / "checkpoints", write_fault=cell.write_fault)
        segment = fit_segment(cell.way, cell.loop, base, None, None, setup)
        if segment.error is not None:
            raise segment.error
        _REFERENCES[key] = (segment, base / "checkpoints")
    return _REFERENCES[key]


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) != set(b) or any(_differs(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if a is None or b is None:
            return True
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        return a.shape != b.shape or not torch.equal(a, b)
    return bool(a != b)


def _keys_only(state: Any) -> Any:
    return {k: _keys_only(v) for k, v in state.items()} if isinstance(state, dict) else None


def holder_differences(reference: Segment, ref_dir: Path, chain: list[Segment], directory: Path) -> list[str]:
    found = differences(reference, chain, rows_to_fault=True)
    last = chain[-1]
    ours = {callback.state_key: callback for callback in last.trainer.callbacks}
    for callback in reference.trainer.callbacks:
        other = ours.get(callback.state_key)
        if other is None:
            found.append(f"callback {callback.state_key} missing")
            continue
        a, b = normalized(callback.state_dict(), ref_dir), normalized(other.state_dict(), directory)
        if isinstance(callback, Timer):  # elapsed time differs from run to run: its layout only
            a, b = _keys_only(a), _keys_only(b)
        if _differs(a, b):
            found.append(f"callback state {type(callback).__name__}")
    if getattr(reference.module, "rows_seen", None) != getattr(last.module, "rows_seen", None):
        found.append(f"module rows_seen {getattr(last.module, 'rows_seen', None)} (not {reference.module.rows_seen})")
    kept = sorted(path.name for path in directory.glob("*.ckpt")) if directory.exists() else []
    ref_kept = sorted(path.name for path in ref_dir.glob("*.ckpt")) if ref_dir.exists() else []
    if kept != ref_kept:
        found.append(f"checkpoint files {kept} (not {ref_kept})")
    return found


def run_holder_cell(cell: HolderCell, root: Path) -> Outcome:
    reference, ref_dir = _reference(cell, root)
    directory = root / "checkpoints"
    first_setup = HolderSetup(cell.holder, cell.loop, directory, cell.origin == "plain", cell.write_fault)
    first = fit_segment(cell.way, cell.loop, root / "first", cell.fault, None, first_setup)
    if not first.fired:
        raise AssertionError(f"the fault never came: {cell.fault.shown()}")
    if first.checkpoint is None:
        return Outcome("no checkpoint", [repr(first.error)] if first.error else [])
    setup = HolderSetup(cell.holder, cell.loop, directory, write_fault=cell.write_fault)
    resumed = fit_segment(cell.way, cell.loop, root / "resumed", None, first.checkpoint, setup)
    chain = [first, resumed]
    messages = [message for segment in chain for message in segment.warnings]
    if resumed.error is not None:
        text = str(resumed.error).splitlines()[0] if str(resumed.error) else ""
        return Outcome("crash", [f"{type(resumed.error).__name__}: {text}"], messages)
    found = holder_differences(reference, ref_dir, chain, directory)
    if not found and not messages:
        return Outcome("exact")
    return Outcome("warned" if messages else "silent", found, messages)


# --- the cells ------------------------------------------------------------------------------------------

_ISSUE = {
    "LearningRateMonitor(logging_interval='step'), an exception in training_step of batch 5": (
        "lr_monitor",
        PLAIN_LOOP,
        Fault("training_step", "exception", 0, 5),
    ),
    "a module counter saved in on_save_checkpoint, an exception in training_step": (
        "module_state",
        PLAIN_LOOP,
        Fault("training_step", "exception", 0, 5),
    ),
    "EarlyStopping + top-2 ModelCheckpoint, the write fails in epoch 1's end hooks": (
        "early_stopping_checkpoint",
        PLAIN_LOOP,
        Fault("write_epoch_end", "write_fails", 1, 0),
    ),
    "StochasticWeightAveraging(swa_epoch_start=1), a fault in epoch 1": (
        "swa",
        PLAIN_LOOP,
        Fault("training_step", "exception", 1, 5),
    ),
}
ISSUE_CELLS = [
    (name, HolderCell(way, holder, loop, fault))
    for name, (holder, loop, fault) in _ISSUE.items()
    for way in ("typed", "adapter")
]

# the faults each holder meets: inside a batch's step (epoch 0 and 1), in the module's on_train_batch_start
# (after the callbacks'), in a callback's on_train_batch_end, in an epoch's end hooks and in a validation's
# end hooks, SIGTERM, and each failed write
FAULTS: tuple[tuple[Loop, Fault], ...] = (
    (HALF, Fault("training_step", "exception", 0, 6)),
    (HALF, Fault("training_step", "exception", 1, 6)),
    (HALF, Fault("module_batch_start", "exception", 0, 6)),
    (HALF, Fault("callback_batch_end", "exception", 0, 6)),
    (PLAIN_LOOP, Fault("on_train_epoch_end", "exception", 0, 10)),
    (HALF, Fault("on_validation_end", "exception", 0, 4)),
    (HALF, Fault("training_step", "sigterm", 0, 6)),
    (HALF, Fault("write_batch_end", "write_fails", 0, 5)),
    (HALF, Fault("write_validation_end", "write_fails", 1, 0)),
    (PLAIN_LOOP, Fault("write_epoch_end", "write_fails", 0, 0)),
)


def design() -> list[HolderCell]:
    """Every holder meets every fault once (a ModelCheckpoint that writes every few steps: its own place
    only); the way in and the checkpoint's origin take turns so that every pair of (holder, way,
    origin, fault) values comes up. Then each holder set up at an epoch's start meets a fault inside
    epoch 1, both ways in, from the library's checkpoint."""
    cells: list[HolderCell] = []
    turns = list(itertools.product(("typed", "adapter"), ("library", "plain")))
    for number, holder in enumerate(HOLDERS):
        for index, (loop, fault) in enumerate(FAULTS):
            if holder == "checkpoint_steps" and fault.where in ("write_validation_end", "write_epoch_end"):
                continue
            way, origin = turns[(number + index) % len(turns)]  # each holder and each fault meets every turn
            cells.append(HolderCell(way, holder, loop, fault, origin))
    for holder in ("swa", "accumulation_scheduler", "backbone", "epoch_setup_callback"):
        for way in ("typed", "adapter"):
            cell = HolderCell(way, holder, HALF, Fault("training_step", "exception", 1, 6))
            if cell not in cells:
                cells.append(cell)
    return cells


# --- the rule -------------------------------------------------------------------------------------------

# the callbacks whose on_train_epoch_start Lightning skips on a restart inside an epoch, and the library
# neither runs again nor can (BackboneFinetuning's would add the backbone's parameter group twice); named
# where the hook changed what no resume carries (BackboneFinetuning's from epoch 1, when it unfreezes the
# backbone: requires_grad and a parameter group), or where the checkpoint cannot tell (plain Lightning's).
# EpochSetupCallback's sets a plain attribute only, which comes back at the point: exact.
_EPOCH_START_NAMED = {"epoch_setup_callback": "EpochSetupCallback", "backbone": "BackboneFinetuning"}
# the callbacks whose on_train_batch_end can change what a resume starts from, named when an exception in an
# earlier callback's hook (the fault's BatchHooks comes before them) stops theirs: a state_dict() of their own.
# A ModelCheckpoint is named only where its hook would save at that step: the fault's batch 6 ends step 7, which
# neither the one saving at validations or epochs' ends nor the one saving every 4 steps saves at (exact).
_BATCH_END_HOLDERS = {
    "user_callback",
    "epoch_setup_callback",
    "timer",
}


def expected(cell: HolderCell) -> set[str]:
    """What one StepResultWarning at resume names (empty: exact)."""
    fault, holder = cell.fault, cell.holder
    kinds: set[str] = set()
    if cell.origin == "plain":
        kinds.add("plain")  # every fault here lands inside an epoch: plain Lightning's checkpoint starts fresh
    elif holder == "module_state" and fault.where == "training_step" and fault.how == "exception":
        # the batch's step runs again after it counted its rows, and the module's on_load_checkpoint puts the
        # count back as it was at the save (a validation, an epoch's end or a batch's start count nothing)
        kinds.add("module_checkpoint")
    plain_epoch_end = cell.origin == "plain" and fault.where in ("on_train_epoch_end", "write_epoch_end")
    unknown = cell.origin == "plain" and not plain_epoch_end  # a restart inside an epoch, the hooks not watched
    unfrozen = cell.origin == "library" and holder == "backbone" and fault.epoch >= 1
    if holder in _EPOCH_START_NAMED and (unknown or unfrozen):
        kinds.add("epoch_start")
    stopped_batch_end = fault.where == "write_batch_end" or (
        fault.where == "callback_batch_end" and holder in _BATCH_END_HOLDERS
    )
    if cell.origin == "library" and stopped_batch_end:
        kinds.add("batch_end_callbacks")
    return kinds


_WARNING_TEXT = {
    "plain": ("a checkpoint without the running epoch state", "a checkpoint of plain Lightning saved inside"),
    "module_checkpoint": (".on_save_checkpoint saved the module's own data",),
    "epoch_start": ("Lightning does not run the on_train_epoch_start hooks again",),
    "batch_end_callbacks": ("on_train_batch_end hooks, before these callbacks' hooks returned",),
}


def _covered(kinds: set[str], difference: str, holder: str) -> bool:
    if "plain" in kinds:
        return True  # the running state starts fresh: every value from then on may differ
    if "module_checkpoint" in kinds and difference.startswith("module rows_seen"):
        return True
    if "epoch_start" in kinds and difference.startswith("callback state EpochSetupCallback"):
        return True
    if "epoch_start" in kinds and holder == "backbone":
        return True  # the backbone stays frozen through the resumed epoch: the weights differ from then on
    return "batch_end_callbacks" in kinds and difference.startswith(("checkpoint files", "callback state"))


def check(cell: HolderCell, outcome: Outcome) -> None:
    kinds = expected(cell)
    detail = f"{cell.id}: {outcome.shown()} (expected {sorted(kinds) or 'exact'})\n" + "\n".join(outcome.warnings)
    if not kinds:
        assert outcome.kind == "exact", detail
        return
    assert outcome.kind == "warned", detail
    text = "\n".join(outcome.warnings)
    for kind in kinds:
        assert any(part in text for part in _WARNING_TEXT[kind]), detail
    if "epoch_start" in kinds:
        assert f"{_EPOCH_START_NAMED[cell.holder]}.on_train_epoch_start" in text, detail
    if "epoch_start" in kinds and cell.origin == "library":  # what the hook changed, as watched in the run that saved
        changed = "(it changed requires_grad of 2 parameters, the optimizers' parameter groups)"
        assert f"BackboneFinetuning.on_train_epoch_start {changed}" in text, detail
    if "module_checkpoint" in kinds:
        assert "RowsSeen" in text and "counts that part twice" in text, detail
        assert ".rows_seen (from checkpoint['rows_seen'])" in text, detail
    assert len(outcome.warnings) == len(kinds), detail  # one warning each, at the one resume
    uncovered = [difference for difference in outcome.differences if not _covered(kinds, difference, cell.holder)]
    assert not uncovered, detail


DESIGN = design()


def _id(cell: HolderCell) -> str:
    return cell.id.replace(" ", "_").replace(",", "").replace("[", "").replace("]", "")


@pytest.mark.parametrize("name,cell", ISSUE_CELLS, ids=[f"{cell.way}: {name}" for name, cell in ISSUE_CELLS])
def test_issue_cell(name: str, cell: HolderCell, tmp_path: Path) -> None:
    check(cell, run_holder_cell(cell, tmp_path))


def test_the_design_covers_every_pair_of_values() -> None:
    values = {
        "holder": lambda cell: cell.holder,
        "way": lambda cell: cell.way,
        "origin": lambda cell: cell.origin,
        "fault": lambda cell: (cell.fault.where, cell.fault.how, cell.fault.epoch),
    }
    faults = {(fault.where, fault.how, fault.epoch) for _, fault in FAULTS}
    domains = {"holder": set(HOLDERS), "way": {"typed", "adapter"}, "origin": {"library", "plain"}, "fault": faults}
    for a, b in itertools.combinations(values, 2):
        covered = {(values[a](cell), values[b](cell)) for cell in DESIGN}
        missing = set(itertools.product(domains[a], domains[b])) - covered
        if {a, b} == {"holder", "fault"}:  # the ModelCheckpoint that writes every few steps writes at batch ends only
            missing = {pair for pair in missing if "checkpoint_steps" not in pair}
        assert not missing, (a, b, sorted(missing, key=repr))


@pytest.mark.slow
@pytest.mark.parametrize("cell", DESIGN, ids=[_id(cell) for cell in DESIGN])
def test_holder_cell(cell: HolderCell, tmp_path: Path) -> None:
    outcome = run_holder_cell(cell, tmp_path)
    print(f"\nOUTCOME {cell.id}: {outcome.shown()}")
    check(cell, outcome)


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_a_relaunch_from_last_ckpt_keeps_the_stop_early_stopping_requested(way: str, tmp_path: Path) -> None:
    """EarlyStopping stops the run after epoch 1 of 4; a relaunch from last.ckpt (a requeued job) stops
    at once, as the run that saved it did, rather than training epochs 2 and 3."""
    directory = tmp_path / "checkpoints"
    setup = HolderSetup("early_stop_last", PLAIN_LOOP, directory)
    stopped = fit_segment(way, PLAIN_LOOP, tmp_path / "first", None, None, setup)
    assert stopped.error is None and stopped.trainer.should_stop
    assert (stopped.trainer.current_epoch, stopped.trainer.global_step) == (2, 22)
    relaunched = fit_segment(way, PLAIN_LOOP, tmp_path / "relaunched", None, directory / "last.ckpt", setup)
    assert relaunched.error is None and relaunched.warnings == []
    assert (relaunched.trainer.current_epoch, relaunched.trainer.global_step) == (2, 22)
    assert relaunched.rows == []
    assert holder_differences(stopped, directory, [stopped, relaunched], directory) == []


class _StopsAtBatch4:
    """Sets ``trainer.should_stop`` in batch 4 and raises there (as Lightning's own
    ``test_restarting_mid_epoch_raises_warning`` does): the module's own stop, not a callback's, in a
    fit that an exception ends. ``stop_at = -1``: neither."""

    stop_at = 4

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if batch_idx == self.stop_at:
            self.trainer.should_stop = True  # type: ignore[attr-defined]
            raise RuntimeError("stopped in batch 4")
        return super().training_step(batch, batch_idx)  # type: ignore[misc]


class _PlainStops(_StopsAtBatch4, PlainRegressor):
    pass


class _TypedStops(_StopsAtBatch4, TypedRegressor):
    pass


def _fit_that_stops(way: str, root: Path, max_epochs: int, ckpt: Path | None, stop_at: int) -> Any:
    module: Any = _TypedStops() if way == "typed" else _PlainStops()
    module.stop_at = stop_at
    callbacks = [StepResultAdapter()] if way == "adapter" else []
    trainer = Trainer(**trainer_kwargs(root, max_epochs=max_epochs), callbacks=callbacks)
    # a stateful loader: plain Lightning then goes on at the next batch too (the library does with any DataLoader)
    loader = StatefulDataLoader(make_dataset(n_batches=8), batch_size=BATCH_SIZE)
    if stop_at < 0:
        trainer.fit(module, loader, ckpt_path=ckpt)
        return trainer, module
    with pytest.raises(RuntimeError, match="stopped in batch 4"):
        trainer.fit(module, loader, ckpt_path=ckpt)
    saved = root / "stopped.ckpt"
    trainer.save_checkpoint(saved)
    return saved


@pytest.mark.parametrize("way", ["typed", "adapter"])
@pytest.mark.parametrize("max_epochs", [1, 2])
def test_a_stop_holds_for_a_relaunch_with_the_same_limits_and_trains_on_with_more(
    way: str, max_epochs: int, tmp_path: Path
) -> None:
    """The module requests a stop in batch 4 of a 1-epoch fit, which an exception ends there; the checkpoint is
    saved after it. A fit from it with ``max_epochs=1`` (a relaunch) stops at once, as the run that saved
    it was to (plain Lightning trains batches 4 to 7); with ``max_epochs=2`` it trains on as plain Lightning
    does from plain Lightning's checkpoint: the same steps, the same weights."""
    saved = _fit_that_stops(way, tmp_path / way, 1, None, stop_at=4)
    resumed, module = _fit_that_stops(way, tmp_path / way, max_epochs, saved, stop_at=-1)
    plain_saved = _fit_that_stops("plain", tmp_path / "plain", 1, None, stop_at=4)
    plain, plain_module = _fit_that_stops("plain", tmp_path / "plain", max_epochs, plain_saved, stop_at=-1)
    if max_epochs == 1:
        assert (resumed.global_step, plain.global_step) == (4, 8)
        return
    assert resumed.global_step == plain.global_step == 16
    assert_same_params(module, plain_module)


# --- the table docs/resume.md holds ---------------------------------------------------------------------

_BEGIN = (
    "<!-- holders table: generated by `python tests/test_fault_matrix_holders.py --table`;"
    " tests/test_fault_matrix_holders.py checks it -->"
)
_END = "<!-- end of the holders table -->"
_DOCS = Path(__file__).resolve().parent.parent / "docs" / "resume.md"


def _outcome(cell: HolderCell) -> str:
    kinds = expected(cell)
    return "warned: " + ", ".join(sorted(kinds)) if kinds else "exact"


def table() -> str:
    issue = [_outcome(cell) for _, cell in ISSUE_CELLS]
    lines = [
        *named_cells_table(
            "The cases of who holds state that once differed silently, both ways in", ISSUE_CELLS, issue
        ),
        "",
        f"Every holder against every fault ({counts([_outcome(cell) for cell in DESIGN])}):",
        "",
        "| # | holder | way in | loop | fault | checkpoint from | outcome |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, cell in enumerate(DESIGN, 1):
        lines.append(
            f"| {number} | {cell.holder} | {cell.way} | {cell.loop.shown()} | {cell.fault.shown()} | {cell.origin}"
            f" | {_outcome(cell)} |"
        )
    return "\n".join(lines)


def test_docs_hold_the_holders_table_and_its_counts() -> None:
    docs = _DOCS.read_text()
    assert _BEGIN in docs and _END in docs, "docs/resume.md lost the holders table's markers"
    shown = docs.split(_BEGIN, 1)[1].split(_END, 1)[0].strip()
    assert shown == table(), (
        "docs/resume.md: regenerate the table with `python tests/test_fault_matrix_holders.py --table`"
    )
    prose = " ".join(docs.split())
    shown_counts = counts([_outcome(cell) for cell in DESIGN]).replace(" cells:", " cells,")
    assert f"the holders matrix has {shown_counts}" in prose


if __name__ == "__main__":  # python tests/test_fault_matrix_holders.py --table: rewrites the table in docs/resume.md
    import sys

    if sys.argv[1:] == ["--table"]:
        docs = _DOCS.read_text()
        head, rest = docs.split(_BEGIN, 1)
        tail = rest.split(_END, 1)[1]
        _DOCS.write_text(f"{head}{_BEGIN}\n{table()}\n{_END}{tail}")
        print(f"wrote {_DOCS}")
