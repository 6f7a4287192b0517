"""Under ``StepResultAdapter`` the module pickles, ``torch.save``s and deep-copies at any point of a run.

Each copy is the plain module: its instance ``__dict__`` has the keys a copy taken at the same
point of the same run without the adapter has (no wrappers), and trained later under a plain
Trainer it ends at exactly the parameters that copy ends at.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import PlainRegressor, assert_same_params, make_loader, make_trainer, params_of

from lightning_step_types import StepResultAdapter

HOOKS = ["on_train_start", "on_train_batch_end", "on_validation_end", "on_train_end", "on_fit_end"]
ADAPTER_NAMES = {"training_step", "validation_step", "test_step", "__getstate__"}


def pickled(module: pl.LightningModule) -> pl.LightningModule:
    restored: pl.LightningModule = pickle.loads(pickle.dumps(module))
    return restored


def torch_saved(module: pl.LightningModule) -> pl.LightningModule:
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    restored: pl.LightningModule = torch.load(buffer, weights_only=False)
    return restored


COPIES: dict[str, Callable[[pl.LightningModule], pl.LightningModule]] = {
    "pickle": pickled,
    "torch.save": torch_saved,
    "deepcopy": copy.deepcopy,
}


class CopyAt(pl.Callback):
    """Copies the module, each way, the first time each hook runs."""

    def __init__(self) -> None:
        self.copies: dict[tuple[str, str], pl.LightningModule] = {}
        self.params: dict[str, dict[str, torch.Tensor]] = {}

    def _copy(self, hook: str, pl_module: pl.LightningModule) -> None:
        if hook in self.params:
            return
        self.params[hook] = params_of(pl_module)
        for how, make_copy in COPIES.items():
            self.copies[hook, how] = make_copy(pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._copy("on_train_start", pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._copy("on_train_batch_end", pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._copy("on_validation_end", pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._copy("on_train_end", pl_module)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._copy("on_fit_end", pl_module)


def fit_copying(root: Path, *callbacks: pl.Callback) -> tuple[PlainRegressor, CopyAt]:
    model, copier = PlainRegressor(), CopyAt()
    make_trainer(root, max_epochs=2, callbacks=[*callbacks, copier]).fit(model, make_loader(), make_loader(seed=1))
    return model, copier


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[PlainRegressor, CopyAt]]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "plain": fit_copying(root / "plain"),
        "adapted": fit_copying(root / "adapted", StepResultAdapter()),
    }


def test_the_run_itself_is_unchanged(runs: dict[str, tuple[PlainRegressor, CopyAt]]) -> None:
    (plain, plain_copies), (adapted, adapted_copies) = runs["plain"], runs["adapted"]
    assert_same_params(adapted, plain)
    assert sorted(adapted_copies.params) == sorted(HOOKS)
    for hook in HOOKS:
        assert_same_params(adapted_copies.params[hook], plain_copies.params[hook])


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("hook", HOOKS)
def test_a_copy_is_the_plain_module(
    runs: dict[str, tuple[PlainRegressor, CopyAt]], tmp_path: Path, hook: str, how: str
) -> None:
    reference = runs["plain"][1].copies[hook, how]
    duplicate = runs["adapted"][1].copies[hook, how]
    assert type(duplicate) is PlainRegressor
    assert ADAPTER_NAMES & set(duplicate.__dict__) == set()
    assert list(duplicate.__dict__) == list(reference.__dict__)
    assert duplicate.training_step.__func__ is PlainRegressor.training_step  # type: ignore[attr-defined]
    assert_same_params(duplicate, runs["adapted"][1].params[hook])
    # Trained later, without the adapter, it ends where the plain run's copy ends.
    make_trainer(tmp_path / "reference").fit(reference, make_loader(seed=2))
    make_trainer(tmp_path / "duplicate").fit(duplicate, make_loader(seed=2))
    assert_same_params(duplicate, reference)


def test_copies_during_the_run_leave_the_module_adapted(tmp_path: Path) -> None:
    """The wrappers stay on the module itself until teardown, and the module is plain afterwards."""
    seen: list[bool] = []

    class Check(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
            copy.deepcopy(pl_module)
            pickle.dumps(pl_module)
            seen.append(ADAPTER_NAMES <= set(pl_module.__dict__))

    model = PlainRegressor()
    make_trainer(tmp_path, callbacks=[StepResultAdapter(), Check()]).fit(model, make_loader())
    assert seen == [True] * 4
    assert ADAPTER_NAMES & set(model.__dict__) == set()


def test_an_instance_getstate_of_the_users_is_kept(tmp_path: Path) -> None:
    """A module whose instance carries its own ``__getstate__`` is copied through it, without the wrappers."""
    model = PlainRegressor()
    calls: list[str] = []

    def own_getstate() -> dict[str, Any]:
        calls.append("own")
        state = dict(model.__dict__)
        state["_trainer"] = None
        state.pop("__getstate__")
        state["marker"] = "from own __getstate__"
        return state

    model.__dict__["__getstate__"] = own_getstate
    copies: list[Any] = []

    class Copy(pl.Callback):
        def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            copies.append(copy.deepcopy(pl_module))

    make_trainer(tmp_path, callbacks=[StepResultAdapter(), Copy()]).fit(model, make_loader())
    (duplicate,) = copies
    assert calls == ["own"]
    assert duplicate.marker == "from own __getstate__"
    assert {"training_step", "validation_step", "test_step"} & set(duplicate.__dict__) == set()
    assert model.__dict__["__getstate__"] is own_getstate
