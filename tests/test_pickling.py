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


# --- the callbacks and loggers pickle too ---------------------------------------------------------


class KeepsItsCallbacks(PlainRegressor):
    """As neuralforecast 3.3.0's models do (``BaseModel.__init__`` takes the Trainer's keyword arguments,
    ``callbacks=[...]`` among them, and calls ``save_hyperparameters()``): the callbacks are hyperparameters,
    pickled into every checkpoint while the fit runs."""

    def __init__(self, callbacks: list[pl.Callback]) -> None:
        super().__init__()
        self.save_hyperparameters()


def fit_keeping_callbacks(root: Path, ckpt_path: Path | None = None) -> None:
    callbacks: list[pl.Callback] = [
        StepResultAdapter(),
        # wrapped for the fit: its `_save_checkpoint`, its epoch's-end and validation's-end hooks
        pl.callbacks.ModelCheckpoint(dirpath=root / "ckpts", every_n_train_steps=3, save_top_k=-1),
        pl.callbacks.LearningRateMonitor(),  # wrapped for the fit: its `on_train_epoch_start`
    ]
    # the logger's `log_metrics` is wrapped for the fit
    logger = pl.loggers.CSVLogger(root / "logs", name="", version="")
    trainer = make_trainer(root, max_epochs=2, callbacks=callbacks, logger=logger, enable_checkpointing=True)
    # the callbacks in the hyperparameters: torch's weights_only load refuses them
    trainer.fit(KeepsItsCallbacks(callbacks), train_dataloaders=make_loader(), ckpt_path=ckpt_path, weights_only=False)
    assert trainer.global_step == 8


def library_attributes(obj: object) -> list[str]:
    return [name for name, value in vars(obj).items() if type(value).__module__.startswith("lightning_step_types")]


def test_callbacks_kept_as_hyperparameters_pickle_into_each_checkpoint(tmp_path: Path) -> None:
    fit_keeping_callbacks(tmp_path)  # it saved (pickled its callbacks) after steps 3 and 6
    assert sorted(path.name for path in (tmp_path / "ckpts").iterdir()) == [
        "epoch=0-step=3.ckpt",
        "epoch=1-step=6.ckpt",
    ]
    fit_keeping_callbacks(tmp_path / "resumed", ckpt_path=tmp_path / "ckpts" / "epoch=0-step=3.ckpt")
    assert sorted(path.name for path in (tmp_path / "resumed" / "ckpts").iterdir()) == ["epoch=1-step=6.ckpt"]
    for saved in (tmp_path / "ckpts" / "epoch=1-step=6.ckpt", tmp_path / "resumed" / "ckpts" / "epoch=1-step=6.ckpt"):
        adapter, checkpoint, monitor = torch.load(saved, weights_only=False)["hyper_parameters"]["callbacks"]
        assert (type(adapter), type(checkpoint), type(monitor)) == (
            StepResultAdapter,
            pl.callbacks.ModelCheckpoint,
            pl.callbacks.LearningRateMonitor,
        )
        # the copies hold no wrapper of the library's: the callback's own methods, bound to the copy
        assert library_attributes(checkpoint) == library_attributes(monitor) == []
        assert checkpoint._save_checkpoint.__func__ is pl.callbacks.ModelCheckpoint._save_checkpoint
        assert monitor.on_train_epoch_start.__func__ is pl.callbacks.LearningRateMonitor.on_train_epoch_start


class CopiesCallbacksAndLoggers(pl.Callback):
    """Pickles and deep-copies every callback and logger of the fit after each batch."""

    def __init__(self) -> None:
        self.copied: list[str] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        for obj in [*trainer.callbacks, *trainer.loggers]:
            if type(obj).__module__.startswith("lightning_step_types"):
                continue
            for copied in (pickle.loads(pickle.dumps(obj)), copy.deepcopy(obj)):
                assert library_attributes(copied) == [], type(obj).__name__
            self.copied.append(f"{type(obj).__name__}: {', '.join(sorted(library_attributes(obj)))}")


def test_callbacks_and_loggers_copy_during_a_fit_without_the_library_s_wrappers(tmp_path: Path) -> None:
    copier = CopiesCallbacksAndLoggers()
    logger = pl.loggers.CSVLogger(tmp_path / "logs", name="", version="")
    callbacks = [
        StepResultAdapter(),
        pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpts"),
        pl.callbacks.LearningRateMonitor(),
    ]
    trainer = make_trainer(tmp_path, callbacks=[*callbacks, copier], logger=logger, enable_checkpointing=True)
    trainer.fit(PlainRegressor(), train_dataloaders=make_loader())
    # what the library wraps for the fit, on each of them: none of it in a copy
    assert (
        copier.copied
        == [  # Lightning runs the checkpoint callbacks last
            "LearningRateMonitor: on_train_epoch_start",
            "CopiesCallbacksAndLoggers: ",
            "ModelCheckpoint: __getstate__, on_train_epoch_end, on_validation_end",
            "CSVLogger: log_metrics",
        ]
        * 4
    )
