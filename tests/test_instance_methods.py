"""Methods the library puts on Lightning's objects for a fit, and takes off again.

Exact resume routes the fit loop's methods through the library by setting instance attributes on
Lightning's loops and logger connector. On CPython 3.11, reading an object's ``__dict__`` turns its
attributes into a dict for good, and every attribute read and method call on it then takes the
interpreter's unspecialized path: on the three objects Lightning touches most per step, that cost
more than the rest of exact resume (``benchmarks/README.md``). These tests hold the library to
never reading those objects' ``__dict__``, while keeping what the methods do: a user's own
replacement survives, and a ``Mock`` is left as it was.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import pytorch_lightning as pl
from models import PlainRegressor, TypedRegressor, make_loader, make_trainer

from lightning_step_types import StepResultAdapter
from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance


class _Attributes:
    """A plain class: its ``__dict__`` descriptor is the interpreter's own."""


_REAL_DICT: Any = vars(_Attributes)["__dict__"]


class Loop(_Attributes):
    """Python's own attribute machinery, with every read of ``__dict__`` (or ``vars()``) counted."""

    dict_reads = 0

    def __init__(self) -> None:
        self.count = 0

    def advance(self) -> str:
        return "own"

    @property  # type: ignore[override]  # the interpreter's descriptor, counted
    def __dict__(self) -> dict[str, Any]:  # pyright: ignore[reportIncompatibleVariableOverride]
        type(self).dict_reads += 1
        return _REAL_DICT.__get__(self)  # type: ignore[no-any-return]


def ours(result: str) -> Any:
    def method() -> str:
        return result

    return method


def test_a_plain_object_is_read_and_written_without_its_dict() -> None:
    loop = Loop()
    put_on_instance(loop, "advance", ours("first"))
    assert loop.advance() == "first"
    put_on_instance(loop, "advance", ours("second"))  # ours replaced, never remembered
    assert loop.advance() == "second"
    take_off_instance(loop, "advance")
    assert loop.advance() == "own"
    assert "advance" not in _REAL_DICT.__get__(loop)
    loop.advance = ours("the user's")  # type: ignore[method-assign]
    put_on_instance(loop, "advance", ours("the library's"))
    assert loop.advance() == "the library's"
    take_off_instance(loop, "advance")
    assert loop.advance() == "the user's"  # what the instance had before goes back
    take_off_instance(loop, "advance")  # not ours: left alone
    assert loop.advance() == "the user's"
    assert Loop.dict_reads == 0


def test_a_mock_is_written_through_its_dict_and_left_as_it_was() -> None:
    logger = mock.Mock()
    recorded = logger.log_metrics
    put_on_instance(logger, "log_metrics", ours("recorder"))
    assert logger.log_metrics() == "recorder"
    take_off_instance(logger, "log_metrics")
    assert logger.log_metrics is recorded  # the Mock's own child, not a deleted attribute
    fresh = mock.Mock()
    put_on_instance(fresh, "log_metrics", ours("recorder"))
    take_off_instance(fresh, "log_metrics")
    fresh.log_metrics(metrics={"a": 1.0}, step=0)  # no deletion recorded: the attribute is still there
    fresh.log_metrics.assert_called_once_with(metrics={"a": 1.0}, step=0)


def _holds_a_dict(obj: object) -> bool:
    """CPython 3.11: whether the object's attributes were turned into a dict (its managed dict pointer,
    ``_PyObject_ManagedDictPointer``, three words before the object)."""
    return bool(ctypes.c_void_p.from_address(id(obj) - 3 * ctypes.sizeof(ctypes.c_void_p)).value)


class LoopLayout(pl.Callback):
    """Notes, inside the fit, whether the loops and the logger connector still keep inline attributes."""

    def __init__(self) -> None:
        self.seen: dict[str, bool] = {}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 1:
            fit_loop = trainer.fit_loop
            for name, obj in (
                ("fit_loop", fit_loop),
                ("epoch_loop", fit_loop.epoch_loop),
                ("logger_connector", trainer._logger_connector),
            ):
                self.seen[name] = _holds_a_dict(obj)


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11),
    reason="reads CPython 3.11's object layout",
)
@pytest.mark.parametrize("way_in", ["typed module", "StepResultAdapter"])
def test_exact_resume_leaves_the_hot_loop_objects_as_lightning_has_them(tmp_path: Path, way_in: str) -> None:
    reference = LoopLayout()
    make_trainer(tmp_path / "plain", callbacks=[reference], max_steps=3).fit(PlainRegressor(), make_loader())
    # plain Lightning keeps them inline: the comparison below would mean nothing otherwise
    assert reference.seen == {"fit_loop": False, "epoch_loop": False, "logger_connector": False}
    layout = LoopLayout()
    if way_in == "typed module":
        model: pl.LightningModule = TypedRegressor()
        callbacks: list[pl.Callback] = [layout]
    else:
        model, callbacks = PlainRegressor(), [StepResultAdapter(), layout]
    make_trainer(tmp_path / "adapted", callbacks=callbacks, max_steps=3).fit(model, make_loader())
    assert layout.seen == reference.seen
