"""Attributes of the kinds ``plain_data`` writes by a marker, kept by a module and by a callback, across a resume.

A module and a callback each keep, in plain attributes changed at every batch: a ``str`` enum's member, an
``int`` enum's, a plain ``Enum``'s, NumPy scalars (``np.float64``, ``np.int64``, ``np.float32``,
``np.bool_``), a dict keyed by tuples, an ``OrderedDict`` and a bounded ``deque``. A fit interrupted by an
exception in epoch 1 (``OnExceptionCheckpoint``) and resumed into a fresh module ends with every attribute of
the uninterrupted fit's value and type, without a warning, and its checkpoint loads with
``torch.load(weights_only=True)`` (a ``str`` enum's member, or a NumPy scalar, pickled as itself would not).
Both sides of the library save these attributes through one definition of plain data: the module's follower
and the callbacks' wrote a ``str`` enum's member differently before (the module's pickled it as itself).
"""

from __future__ import annotations

import enum
import warnings
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from models import assert_same_params, trainer_kwargs
from pytorch_lightning.callbacks import Callback, OnExceptionCheckpoint
from test_resume import TypedResume, dataset
from torch.utils.data import DataLoader

from lightning_step_types import StepResultWarning, TrainStepResult


class Stage(str, enum.Enum):
    WARMUP = "warmup"
    MAIN = "main"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mode(enum.Enum):
    EVEN = "even"
    ODD = "odd"


class Fault(Exception):
    pass


class Kinds:
    """Attributes of every kind, changed at each batch from its index and the loss."""

    def start_kinds(self) -> None:
        self.stage = Stage.WARMUP
        self.level = Level.LOW
        self.mode = Mode.EVEN
        self.best = np.float64(np.inf)
        self.seen = np.int64(0)
        self.last = np.float32(0.0)
        self.improved = np.bool_(False)
        self.by_pair: dict[tuple[int, int], float] = {}
        self.ordered: OrderedDict[str, float] = OrderedDict()
        self.window: deque[float] = deque(maxlen=3)

    def note(self, epoch: int, batch_idx: int, loss: float) -> None:
        self.stage = Stage.MAIN if batch_idx >= 2 else Stage.WARMUP
        self.level = Level.HIGH if batch_idx % 2 else Level.LOW
        self.mode = Mode.ODD if batch_idx % 2 else Mode.EVEN
        self.improved = np.bool_(loss < self.best)
        self.best = np.float64(min(float(self.best), loss))
        self.seen = np.int64(self.seen + 1)
        self.last = np.float32(loss)
        self.by_pair[(epoch, batch_idx)] = loss
        self.ordered[f"{epoch}.{batch_idx}"] = loss
        self.ordered.move_to_end(next(iter(self.ordered)))  # the order is state too
        self.window.append(loss)

    def kinds(self) -> dict[str, Any]:
        names = ("stage", "level", "mode", "best", "seen", "last", "improved", "by_pair", "ordered", "window")
        return {name: getattr(self, name) for name in names}


class KindsModule(Kinds, TypedResume):
    def __init__(self, fault_at: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.fault_at = fault_at
        self.start_kinds()

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        if (self.current_epoch, batch_idx) == self.fault_at:
            raise Fault("planned")
        result = super().training_step(batch, batch_idx)
        self.note(self.current_epoch, batch_idx, float(result.loss))
        return result

    def train_dataloader(self) -> Any:
        return DataLoader(dataset(0), batch_size=2)


class KindsCallback(Kinds, Callback):
    def __init__(self) -> None:
        self.start_kinds()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        outputs, _, batch_idx = args
        self.note(trainer.current_epoch, batch_idx, float(outputs["loss"]))


def _fit(root: Path, fault_at: tuple[int, int] | None = None, ckpt_path: Path | None = None) -> Any:
    pl.seed_everything(0)
    callback = KindsCallback()
    trainer = pl.Trainer(
        **trainer_kwargs(root, max_epochs=2, enable_checkpointing=True),
        callbacks=[callback, OnExceptionCheckpoint(root, filename="on_exception")],
    )
    module = KindsModule(fault_at)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if fault_at is not None:
            with pytest.raises(Fault):
                trainer.fit(module, ckpt_path=ckpt_path)
        else:
            trainer.fit(module, ckpt_path=ckpt_path)
    return module, callback, [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b or (isinstance(a, float) and a != a and b != b))


def test_every_kind_resumes_exactly_and_the_checkpoint_loads_weights_only(tmp_path: Path) -> None:
    full, full_callback, _ = _fit(tmp_path / "full")
    _fit(tmp_path / "broken", fault_at=(1, 2))
    checkpoint = tmp_path / "broken" / "on_exception.ckpt"
    loaded = torch.load(checkpoint, weights_only=True)  # nothing pickled as itself
    assert loaded["epoch"] == 1
    resumed, resumed_callback, warned = _fit(tmp_path / "resumed", ckpt_path=checkpoint)
    assert warned == []
    for owner, reference in ((resumed, full), (resumed_callback, full_callback)):
        got, expected = owner.kinds(), reference.kinds()
        assert got.keys() == expected.keys()
        for name in expected:
            assert _same(got[name], expected[name]), (type(owner).__name__, name, got[name], expected[name])
    assert list(resumed.ordered) == list(full.ordered)  # the order, not only the items
    assert resumed.window.maxlen == 3 and resumed_callback.window.maxlen == 3
    assert resumed.stage is Stage.MAIN and resumed.seen == np.int64(22)
    assert_same_params(resumed, full)
