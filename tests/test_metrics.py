"""Declared metrics (``StepMetric``): every logged value equals the hand-written pattern exactly.

The hand-written reference (``metric_models.Hand*``) keeps one torchmetrics object per stage and
per validation loader, calls ``metric.update`` in each step and ``self.log(name, metric)`` on
every step. The declared versions (``configure_step_metrics``, ``StepResultAdapter(metrics=...)``)
must give the same ``callback_metrics``, ``logged_metrics``, progress bar values, ``validate``/``test``
results and CSV file, value for value, over ``fit`` (2 epochs, ``val_check_interval=0.5``, 2
validation loaders, uneven last batches, the sanity check), ``validate`` and ``test``.
"""

from __future__ import annotations

import copy
import pickle
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch
import lightning.pytorch.cli
import pytest
import pytorch_lightning as pl
import pytorch_lightning.cli
import torch
import torch.nn.functional as F
from metric_models import (
    CLASSES_BY_FLAVOUR,
    declared,
    final_loader,
    metric_arguments,
    train_loader,
    val_loaders,
)
from models import TypedRegressor, make_loader, make_trainer, spawn_with_teardown_retry
from torchmetrics import MeanSquaredError, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import LossLogging, StepMetric, StepResultError, TrainStepResult, ValStepResult
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning
from lightning_step_types.metrics import step_metric_objects
from lightning_step_types.step.adapter import module_state

FLAVOUR_PACKAGES = {
    "pytorch_lightning": (pl, lst_pytorch_lightning),
    "lightning.pytorch": (lightning.pytorch, lst_lightning_pytorch),
}


def trainer_for(flavour: str, root: Path, callbacks: list[Any] = (), **overrides: Any) -> Any:  # type: ignore[assignment]
    package = FLAVOUR_PACKAGES[flavour][0]
    logger = package.loggers.CSVLogger(root, name="", version="")
    kwargs: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        val_check_interval=0.5,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )
    kwargs.update(overrides)
    return package.Trainer(**kwargs)


def floats(metrics: Any) -> dict[str, float]:
    return {name: float(value) for name, value in sorted(metrics.items())}


def bar(trainer: Any) -> dict[str, float]:
    """What the progress bar shows (its own entries like the version number aside)."""
    shown = trainer.progress_bar_callback.get_metrics(trainer, trainer.lightning_module)
    return {name: float(value) for name, value in sorted(shown.items()) if name != "v_num"}


def run_everything(flavour: str, model: Any, root: Path, callbacks: list[Any] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """fit (2 epochs, validation twice per epoch on 2 loaders), then validate, then test: what each logged."""
    trainer = trainer_for(flavour, root, callbacks)
    trainer.fit(model, train_loader(), val_loaders())
    seen: dict[str, Any] = {
        "fit callback_metrics": floats(trainer.callback_metrics),
        "fit logged_metrics": floats(trainer.logged_metrics),
        "fit progress_bar_metrics": floats(trainer.progress_bar_metrics),
        "fit progress bar": bar(trainer),
    }
    seen["validate"] = trainer.validate(model, val_loaders(), verbose=False)
    seen["validate callback_metrics"] = floats(trainer.callback_metrics)
    seen["validate progress bar"] = bar(trainer)
    seen["test"] = trainer.test(model, final_loader(), verbose=False)
    seen["test logged_metrics"] = floats(trainer.logged_metrics)
    seen["test progress bar"] = bar(trainer)
    seen["csv"] = (Path(trainer.logger.log_dir) / "metrics.csv").read_text()
    seen["params"] = [p.detach().clone() for p in model.net.parameters()]
    return seen


def assert_same_run(declared_run: dict[str, Any], hand_run: dict[str, Any]) -> None:
    declared_params, hand_params = declared_run.pop("params"), hand_run.pop("params")
    assert all(torch.equal(a, b) for a, b in zip(declared_params, hand_params, strict=True))
    for key in hand_run:
        assert declared_run[key] == hand_run[key], f"{key}:\n declared {declared_run[key]}\n hand     {hand_run[key]}"


_HAND_RUNS: dict[tuple[str, str, bool], dict[str, Any]] = {}


def hand_run(flavour: str, kind: str, on_step: bool, root: Path) -> dict[str, Any]:
    key = (flavour, kind, on_step)
    if key not in _HAND_RUNS:
        hand = CLASSES_BY_FLAVOUR[flavour][_name(flavour, "Hand")](kind=kind, on_step=on_step)
        _HAND_RUNS[key] = run_everything(flavour, hand, root / "hand")
    return copy.deepcopy(_HAND_RUNS[key])


def _name(flavour: str, role: str) -> str:
    return ("" if flavour == "pytorch_lightning" else "Lightning") + role


CASES = [
    ("pytorch_lightning", "acc", False),
    ("pytorch_lightning", "mse", False),
    ("pytorch_lightning", "scores", False),
    ("pytorch_lightning", "acc", True),
    ("pytorch_lightning", "scores", True),
    ("lightning.pytorch", "acc", False),
    ("lightning.pytorch", "mse", True),
]


@pytest.mark.parametrize(("flavour", "kind", "on_step"), CASES)
def test_declared_metrics_equal_the_hand_written_pattern(
    flavour: str, kind: str, on_step: bool, tmp_path: Path
) -> None:
    typed = CLASSES_BY_FLAVOUR[flavour][_name(flavour, "Typed")](kind=kind, on_step=on_step)
    declared_run = run_everything(flavour, typed, tmp_path / "typed")
    expected = hand_run(flavour, kind, on_step, tmp_path)
    stage_names = {"acc": ["acc"], "mse": ["mse"], "scores": ["MulticlassAccuracy", "MulticlassF1Score"]}[kind]
    # The run logged what it should: epoch values per stage, per loader, per collection member.
    fit_names = {f"val_{n}/dataloader_idx_{i}" for n in stage_names for i in (0, 1)}
    fit_names |= {
        f"train_{n}" + suffix for n in stage_names for suffix in (("_epoch", "_step", "") if on_step else ("",))
    }
    assert set(expected["fit callback_metrics"]) == fit_names
    assert set(expected["test logged_metrics"]) == {f"test_{n}" for n in stage_names}
    assert_same_run(declared_run, expected)


@pytest.mark.parametrize("kind", ["acc", "mse"])
def test_adapter_metrics_on_an_existing_module_equal_the_hand_written_pattern(kind: str, tmp_path: Path) -> None:
    plain = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Plain"](kind=kind)
    adapter = lst_pytorch_lightning.StepResultAdapter(metrics=declared(kind, on_step=False))
    declared_run = run_everything("pytorch_lightning", plain, tmp_path / "plain", [adapter])
    assert_same_run(declared_run, hand_run("pytorch_lightning", kind, False, tmp_path))
    # The module is as it was: no copies on it, nothing left in its per-module state.
    assert "_step_metric_copies" not in plain._modules
    assert module_state(plain).metric_sets == {}
    assert type(pickle.loads(pickle.dumps(plain))) is type(plain)


def test_update_receives_a_read_only_view_of_a_legacy_dict(tmp_path: Path) -> None:
    seen: list[Any] = []

    def update(result: Any, batch: Any) -> tuple[Any, ...]:
        seen.append(result)
        return (result["logits"], batch[1])

    plain = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Plain"]()
    adapter = lst_pytorch_lightning.StepResultAdapter(
        metrics={"acc": StepMetric(MulticlassAccuracy(3), update=update, stages=("train",))}
    )
    make_trainer(tmp_path, max_epochs=1, callbacks=[adapter]).fit(plain, train_loader())
    assert len(seen) == 6
    assert all(isinstance(view, types.MappingProxyType) and set(view) == {"loss", "logits"} for view in seen)
    with pytest.raises(TypeError):
        seen[0]["loss"] = torch.tensor(0.0)


# --- where the copies live ---------------------------------------------------------------------


def test_copies_are_per_stage_and_loader_and_named_stably(tmp_path: Path) -> None:
    typed = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Typed"]()
    trainer = trainer_for("pytorch_lightning", tmp_path, enable_progress_bar=False, max_epochs=1)
    trainer.fit(typed, train_loader(), val_loaders())
    objects = step_metric_objects(typed)
    assert sorted(objects) == ["test/acc", "train/acc", "val/acc", "val/acc/dataloader_idx_1"]
    assert len({id(metric) for metric in objects.values()}) == 4  # no state shared between any two
    assert all(type(metric) is MulticlassAccuracy for metric in objects.values())
    # Lightning computed and reset them at each epoch's end (the test copy never ran).
    assert {key: metric.update_count for key, metric in objects.items()} == dict.fromkeys(objects, 0)
    assert float(trainer.callback_metrics["val_acc/dataloader_idx_1"]) > 0


def test_collection_members_are_named_under_the_stage(tmp_path: Path) -> None:
    typed = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Typed"](kind="scores")
    make_trainer(tmp_path, max_epochs=1).fit(typed, train_loader())
    assert sorted(step_metric_objects(typed)) == [
        f"{stage}/scores/{member}"
        for stage in ("test", "train", "val")
        for member in ("MulticlassAccuracy", "MulticlassF1Score")
    ]


def test_copies_move_with_the_module_and_add_no_state_dict_keys(tmp_path: Path) -> None:
    typed_class = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Typed"]
    typed = typed_class(kind="mse")
    plain_keys = set(typed.state_dict())
    make_trainer(tmp_path, max_epochs=1).fit(typed, train_loader())
    assert isinstance(typed._modules["_step_metric_copies"], torch.nn.Module)  # a child module ...
    assert set(typed.state_dict()) == plain_keys == {"net.weight", "net.bias"}  # ... with no state_dict keys
    typed.to(torch.float64)
    copies = step_metric_objects(typed)
    assert {metric.metric_state["sum_squared_error"].dtype for metric in copies.values()} == {torch.float64}
    # Like a metric the user keeps as an attribute: `.to(dtype)` converts it the same way.
    hand = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Hand"](kind="mse").to(torch.float64)
    assert hand.train_metric.metric_state["sum_squared_error"].dtype == torch.float64


def test_checkpoints_load_strictly_with_and_without_declared_metrics(tmp_path: Path) -> None:
    classes = CLASSES_BY_FLAVOUR["pytorch_lightning"]
    with_metrics = classes["Typed"]()
    trainer = make_trainer(tmp_path, max_epochs=1, enable_checkpointing=True)
    trainer.fit(with_metrics, train_loader())
    path = tmp_path / "with.ckpt"
    trainer.save_checkpoint(path)
    without = classes["Plain"].load_from_checkpoint(path, strict=True)  # the same network, no metrics
    assert all(torch.equal(a, b) for a, b in zip(without.net.parameters(), with_metrics.net.parameters()))

    plain_trainer = make_trainer(tmp_path / "plain", max_epochs=1, enable_checkpointing=True)
    plain_trainer.fit(classes["Plain"](), train_loader())
    plain_path = tmp_path / "without.ckpt"
    plain_trainer.save_checkpoint(plain_path)
    again = classes["Typed"].load_from_checkpoint(plain_path, strict=True)
    make_trainer(tmp_path / "again", max_epochs=1).fit(again, train_loader())  # and trains, with its metrics
    again.load_state_dict(torch.load(plain_path, weights_only=False)["state_dict"], strict=True)


def test_a_module_without_declared_metrics_has_none(tmp_path: Path) -> None:
    model = TypedRegressor()
    make_trainer(tmp_path).fit(model, make_loader())
    assert module_state(model).metric_sets == {}
    assert "_step_metric_copies" not in model._modules
    assert step_metric_objects(model) == {}


# --- once per epoch, also after a mid-epoch resume ---------------------------------------------


class RestoreTrainAccuracy(pl.Callback):
    """Stands in for exact resume: the training copy holds state before the epoch's first step."""

    def __init__(self, target: Callable[[Any], Metric]) -> None:
        self.target = target

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
        self.target(pl_module).update(logits, torch.tensor([0, 0]))


def test_a_copy_with_restored_state_is_still_logged_in_that_epoch(tmp_path: Path) -> None:
    classes = CLASSES_BY_FLAVOUR["pytorch_lightning"]
    typed, hand = classes["Typed"](), classes["Hand"]()
    typed_trainer = make_trainer(
        tmp_path / "t", max_epochs=2, callbacks=[RestoreTrainAccuracy(lambda m: step_metric_objects(m)["train/acc"])]
    )
    typed_trainer.fit(typed, train_loader())
    hand_trainer = make_trainer(
        tmp_path / "h", max_epochs=2, callbacks=[RestoreTrainAccuracy(lambda m: m.train_metric)]
    )
    hand_trainer.fit(hand, train_loader())
    assert float(typed_trainer.callback_metrics["train_acc"]) == float(hand_trainer.callback_metrics["train_acc"])
    assert list(typed_trainer.callback_metrics) == ["train_acc"]


# --- bad input: each a StepResultError naming the hook, the metric and the stage -----------------


class MyModel(lst_pytorch_lightning.TypedLightningModule):
    """A small classifier whose ``configure_step_metrics`` returns what ``configure()`` gives."""

    def __init__(self, configure: Callable[[], Any], **settings: Any) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)
        self.configure = configure
        for name, value in settings.items():
            setattr(self, name, value)

    def configure_step_metrics(self) -> Any:
        return self.configure()

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.net(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_typed(configure: Callable[[], Any], tmp_path: Path, **settings: Any) -> MyModel:
    model = MyModel(configure, **settings)
    make_trainer(tmp_path, max_epochs=1).fit(model, train_loader())
    return model


def accuracy(
    update: Callable[[Any, Any], Any] = lambda r, b: (r.metadata["logits"], b[1]), **options: Any
) -> StepMetric[Any]:
    return StepMetric(MulticlassAccuracy(3), update=update, **options)


class StateBeforeBatch(pl.Callback):
    """Keeps a clone of the training copies' states before a given batch."""

    def __init__(self, batch_idx: int) -> None:
        self.batch_idx = batch_idx
        self.saved: dict[str, dict[str, Any]] = {}

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == self.batch_idx:
            self.saved = {
                k: clone_state(m) for k, m in step_metric_objects(pl_module).items() if k.startswith("train/")
            }


def clone_state(metric: Metric) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else list(v) for k, v in metric.metric_state.items()} | {
        "update_count": metric.update_count
    }


def assert_states_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key


def fit_failing_at_batch_2(model: pl.LightningModule, tmp_path: Path) -> tuple[StepResultError, StateBeforeBatch]:
    keeper = StateBeforeBatch(2)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1, callbacks=[keeper]).fit(model, train_loader())
    return info.value, keeper


class FailsOnItsThirdUpdate(Metric):
    """A metric that refuses its third update (after its sibling in a collection took it)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.calls = 0

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.calls += 1
        if self.calls == 3:
            raise ValueError("refused on purpose")
        self.total += preds.sum()

    def compute(self) -> torch.Tensor:
        return self.total


class AppendsThenRefuses(Metric):
    """A list state and a tensor state, changed in place before its third update raises: the worst case."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("seen", [], dist_reduce_fx="cat")
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.calls = 0

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.calls += 1
        self.seen.append(preds)
        self.total += preds.sum()
        if self.calls == 3:
            raise ValueError("refused after changing its state")

    def compute(self) -> torch.Tensor:
        return self.total


@pytest.mark.parametrize("on_step", [False, True])
def test_a_metric_that_changes_its_state_before_failing_is_put_back(on_step: bool, tmp_path: Path) -> None:
    update = lambda r, b: (r.metadata["logits"][:, 0], b[1].float())  # noqa: E731
    binding = StepMetric(AppendsThenRefuses(), update=update, stages=("train",), on_step=on_step)
    model = MetricsModel({"odd": binding}, lambda logits, i: {"logits": logits})
    failing_batch = 1 if on_step else 2  # a full-state forward calls update twice
    keeper = StateBeforeBatch(failing_batch)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1, callbacks=[keeper]).fit(model, train_loader())
    assert info.value.got.endswith(
        "which AppendsThenRefuses.update refused: ValueError: refused after changing its state"
    )
    restored = step_metric_objects(model)["train/odd"]
    saved = keeper.saved["train/odd"]
    assert len(restored.seen) == len(saved["seen"]) == failing_batch
    assert all(torch.equal(a, b) for a, b in zip(restored.seen, saved["seen"], strict=True))
    assert torch.equal(restored.total, saved["total"]) and restored.update_count == saved["update_count"]


class MetricsModel(lst_pytorch_lightning.TypedLightningModule):
    def __init__(self, metrics: dict[str, Any], metadata: Callable[[torch.Tensor, int], dict[str, Any]]) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)
        self.metrics, self.metadata = metrics, metadata

    def configure_step_metrics(self) -> Any:
        return self.metrics

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.net(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata=self.metadata(logits.detach(), batch_idx))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_missing_metadata_key_names_the_closest_and_leaves_the_state_unchanged(tmp_path: Path) -> None:
    model = MetricsModel(
        {"acc": accuracy()},
        lambda logits, i: {"logits": logits} if i < 2 else {"logit": logits, "target_probs": logits},
    )
    error, keeper = fit_failing_at_batch_2(model, tmp_path)
    assert error.hook == "MetricsModel.training_step"
    assert error.where == "MetricsModel.configure_step_metrics['acc'] in stage 'train': update(result, batch)"
    assert error.got == (
        "KeyError 'logits': the result holds TrainStepResult(loss Tensor(shape=(), dtype=float32, requires_grad=True),"
        " metadata {'logit': Tensor(shape=(4, 3), dtype=float32, requires_grad=False),"
        " 'target_probs': Tensor(shape=(4, 3), dtype=float32, requires_grad=False)})"
    )
    assert error.fix == "read 'logit': `result.metadata['logit']` (keys are case-sensitive)"
    assert_states_equal(clone_state(step_metric_objects(model)["train/acc"]), keeper.saved["train/acc"])
    assert keeper.saved["train/acc"]["update_count"] == 2


def test_a_wrong_shape_inside_metric_update_says_what_it_wanted(tmp_path: Path) -> None:
    mse = StepMetric(
        MeanSquaredError(), update=lambda r, b: (r.metadata["logits"][:, :1], b[1].float()), stages=("train",)
    )
    model = MetricsModel({"mse": mse}, lambda logits, i: {"logits": logits})
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1).fit(model, train_loader())
    error = info.value
    assert error.where == "MetricsModel.configure_step_metrics['mse'] in stage 'train': MeanSquaredError.update"
    assert error.got.startswith(
        "update(result, batch) returned a tuple of 2: (Tensor(shape=(4, 1), dtype=float32, requires_grad=False),"
        " Tensor(shape=(4,), dtype=float32, requires_grad=False)), which MeanSquaredError.update refused: RuntimeError: "
    )
    assert "torch.Size([4, 1]) and torch.Size([4])" in error.got
    assert error.expected == "the arguments of MeanSquaredError.update(preds, target), as that message says"
    assert error.fix == "squeeze the first argument's last dimension: `(preds.squeeze(-1), target)`"
    assert step_metric_objects(model)["train/mse"].update_count == 0


def test_a_wrong_arity_names_the_metric_updates_arguments(tmp_path: Path) -> None:
    model = MetricsModel({"acc": accuracy(lambda r, b: (r.metadata["logits"],))}, lambda logits, i: {"logits": logits})
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1).fit(model, train_loader())
    assert info.value.expected == "the 2 positional arguments of MulticlassAccuracy.update(preds, target)"
    assert info.value.fix.startswith("return a tuple of 2")


def test_an_update_that_returns_a_tensor_is_refused(tmp_path: Path) -> None:
    model = MetricsModel({"acc": accuracy(lambda r, b: r.metadata["logits"])}, lambda logits, i: {"logits": logits})
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1).fit(model, train_loader())
    assert info.value.got == "update(result, batch) returned Tensor(shape=(4, 3), dtype=float32, requires_grad=False)"
    assert info.value.expected == "a tuple of the positional arguments of MulticlassAccuracy.update(preds, target)"


@pytest.mark.parametrize("on_step", [False, True])
def test_a_collection_member_failing_leaves_every_member_unchanged(on_step: bool, tmp_path: Path) -> None:
    """The mean squared error takes the update, its sibling refuses it: both are as before the step.

    With step values the collection's forward runs: MeanSquaredError's resets before it updates,
    the other's (``full_state_update`` unset) updates its own state first.
    """
    collection = MetricCollection({"mse": MeanSquaredError(), "refuses": FailsOnItsThirdUpdate()})
    update = lambda r, b: (r.metadata["logits"][:, 0], b[1].float())  # noqa: E731
    model = MetricsModel(
        {"reg": StepMetric(collection, update=update, stages=("train",), on_step=on_step)},
        lambda logits, i: {"logits": logits},
    )
    failing_batch = 1 if on_step else 2  # a full-state forward calls update twice
    keeper = StateBeforeBatch(failing_batch)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1, callbacks=[keeper]).fit(model, train_loader())
    assert info.value.got.endswith("which MetricCollection.update refused: ValueError: refused on purpose")
    objects = step_metric_objects(model)
    assert sorted(keeper.saved) == ["train/reg/mse", "train/reg/refuses"]
    for key, saved in keeper.saved.items():
        assert_states_equal(clone_state(objects[key]), saved)
    assert keeper.saved["train/reg/mse"]["update_count"] == failing_batch


SETUP_ERRORS: dict[str, tuple[Callable[[], Any], str, str]] = {
    # name -> (the declaration, error.where, the start of error.got)
    "not a StepMetric": (
        lambda: {"acc": MulticlassAccuracy(3)},
        "['acc']",
        "torchmetrics.classification.accuracy.MulticlassAccuracy",
    ),
    "not a torchmetrics metric": (
        lambda: {"acc": StepMetric(lambda p, t: (p == t).float().mean(), update=lambda r, b: (r, b))},  # type: ignore[arg-type]
        "['acc'].metric",
        "function",
    ),
    "unknown stage": (
        lambda: {"acc": accuracy(stages=("train", "validation"))},
        "['acc'].stages",
        "str 'validation' in ('train', 'validation')",
    ),
    "same log name twice": (
        lambda: {"acc": accuracy(log_name="{stage}_accuracy"), "accuracy": accuracy()},
        "['accuracy']",
        "log name 'train_accuracy' for stage 'train', which ['acc'] logs already",
    ),
    "not a mapping": (lambda: [accuracy()], "the declared metrics", "list of 1"),
}


@pytest.mark.parametrize("name", list(SETUP_ERRORS))
def test_setup_errors_name_the_entry(name: str, tmp_path: Path) -> None:
    configure, where, got = SETUP_ERRORS[name]
    with pytest.raises(StepResultError) as info:
        fit_typed(configure, tmp_path)
    assert info.value.hook == "MyModel.configure_step_metrics"
    assert info.value.where == where
    assert info.value.got.startswith(got), info.value.got


def test_unknown_stage_suggests_the_stage(tmp_path: Path) -> None:
    with pytest.raises(StepResultError) as info:
        fit_typed(lambda: {"acc": accuracy(stages=("train", "validation"))}, tmp_path)
    assert info.value.fix == "write 'val' for 'validation': `stages=('train', 'val')`"


def test_a_single_stage_given_as_a_string_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StepResultError) as info:
        fit_typed(lambda: {"acc": accuracy(stages="val")}, tmp_path)
    assert (info.value.where, info.value.got) == ("['acc'].stages", "str 'val'")
    assert info.value.fix == "pass a tuple: `stages=('val',)`"


def test_a_declared_name_taken_by_loss_logging_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StepResultError) as info:
        fit_typed(lambda: {"loss": accuracy()}, tmp_path, log_loss=True)
    assert info.value.got == "log name 'train_loss' for stage 'train', which log_loss logs already"


def test_adapter_checks_its_declaration_when_built() -> None:
    with pytest.raises(StepResultError) as info:
        lst_pytorch_lightning.StepResultAdapter(metrics={"acc": accuracy(stages=("tain",))})
    assert info.value.hook == "StepResultAdapter(metrics=...)"
    assert info.value.fix == "write 'train' for 'tain': `stages=('train',)`"


class Logs(MetricsModel):
    """Logs the declared metric's name itself, from batch ``first_logged_at`` on."""

    first_logged_at = 0

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        if batch_idx >= self.first_logged_at:
            self.log("train_acc", torch.tensor(1.0))
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("first_logged_at", [0, 1])
def test_a_step_logging_a_declared_name_itself_is_a_clear_error(first_logged_at: int, tmp_path: Path) -> None:
    """Logged in the first step, before the declared metric; or later, when Lightning itself would raise."""
    model = Logs({"acc": accuracy()}, lambda logits, i: {"logits": logits})
    model.first_logged_at = first_logged_at
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1).fit(model, train_loader())
    assert info.value.hook == "Logs.training_step"
    assert info.value.where == "Logs.configure_step_metrics['acc'] in stage 'train'"
    assert info.value.got == "the step also logs 'train_acc' itself with `self.log`"
    assert (type(info.value.__cause__).__name__ == "MisconfigurationException") is (first_logged_at == 1)


def test_metrics_declared_by_the_adapter_and_the_module_must_not_clash(tmp_path: Path) -> None:
    model = MetricsModel({"acc": accuracy()}, lambda logits, i: {"logits": logits})
    adapter = lst_pytorch_lightning.StepResultAdapter(metrics={"acc": accuracy()})
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, max_epochs=1, callbacks=[adapter]).fit(model, train_loader())
    assert (
        info.value.got
        == "log name 'train_acc' for stage 'train', which StepResultAdapter(metrics=...)['acc'] logs already"
    )


def test_typed_module_with_adapter_metrics_logs_both(tmp_path: Path) -> None:
    model = MetricsModel({"acc": accuracy()}, lambda logits, i: {"logits": logits})
    mse = StepMetric(MeanSquaredError(), update=lambda r, b: (r.metadata["logits"][:, 0], b[1].float()))
    trainer = make_trainer(
        tmp_path, max_epochs=1, callbacks=[lst_pytorch_lightning.StepResultAdapter(metrics={"mse": mse})]
    )
    trainer.fit(model, train_loader())
    assert sorted(trainer.callback_metrics) == ["train_acc", "train_mse"]


def test_user_setup_runs_before_the_metrics_are_declared(tmp_path: Path) -> None:
    class Setup(MetricsModel):
        num_classes = 0

        def setup(self, stage: str) -> None:
            super().setup(stage)
            self.num_classes = 3

        def configure_step_metrics(self) -> Any:
            self.calls = getattr(self, "calls", 0) + 1
            return {"acc": accuracy(stages=("train",)) if self.num_classes == 3 else None}

    model = Setup({}, lambda logits, i: {"logits": logits})
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, train_loader())
    assert model.calls == 1 and sorted(trainer.callback_metrics) == ["train_acc"]


def test_metrics_for_one_stage_only(tmp_path: Path) -> None:
    model = MetricsModel({"acc": accuracy(stages=("val",))}, lambda logits, i: {"logits": logits})
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, train_loader())
    assert sorted(step_metric_objects(model)) == ["val/acc"]
    assert dict(trainer.callback_metrics) == {}


def test_loss_logging_and_metrics_together(tmp_path: Path) -> None:
    model = MetricsModel({"acc": accuracy(stages=("train",))}, lambda logits, i: {"logits": logits})
    model.log_loss = LossLogging(val=None, test=None)
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, train_loader())
    assert sorted(trainer.callback_metrics) == ["train_acc", "train_loss", "train_loss_epoch", "train_loss_step"]


def test_val_only_binding_types_its_result_as_val_result(tmp_path: Path) -> None:
    seen: list[type] = []

    def update(result: ValStepResult, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(type(result))
        return result.metadata["logits"], batch[1]

    typed = CLASSES_BY_FLAVOUR["pytorch_lightning"]["Typed"]()
    typed.configure_step_metrics = lambda: {
        "acc": StepMetric(MulticlassAccuracy(3), update=update, stages=("val", "test"))
    }  # type: ignore[method-assign]
    make_trainer(tmp_path, max_epochs=1, limit_val_batches=2).fit(typed, train_loader(), val_loaders()[0])
    assert seen == [ValStepResult, ValStepResult]


def test_metric_arguments_helper_matches_declared() -> None:
    # The hand-written and declared models feed the metric the same arguments.
    logits, target = torch.randn(2, 3), torch.tensor([0, 2])
    result = ValStepResult(loss=torch.tensor(0.0), metadata={"logits": logits})
    for kind in ("acc", "mse"):
        ours = declared(kind, False)[kind].update(result, (None, target))
        theirs = metric_arguments(kind, logits, target)
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


# --- the docs page's example, LightningCLI, DDP --------------------------------------------------


def test_metrics_page_example_logs_train_and_val_accuracy(tmp_path: Path) -> None:
    from test_docs import DOCS, fenced_blocks

    example = next(block for block in fenced_blocks(DOCS / "metrics.md") if block.runnable)
    namespace: dict[str, Any] = {"__name__": "metrics_page"}
    exec(compile(example.code, str(DOCS / "metrics.md"), "exec"), namespace)
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(namespace["Classifier"](), train_loader(), val_loaders()[0])
    assert sorted(trainer.callback_metrics) == ["train_acc", "val_acc"]
    assert sorted(trainer.progress_bar_metrics) == ["train_acc", "val_acc"]


CLI_CONFIG = """\
model:
  class_path: metric_models.{model}
  init_args:
    kind: mse
trainer:
  max_epochs: 1
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
"""


@pytest.mark.parametrize("flavour", list(FLAVOUR_PACKAGES))
def test_lightning_cli_with_a_module_that_declares_metrics(
    flavour: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_class = pl.cli.LightningCLI if flavour == "pytorch_lightning" else lightning.pytorch.cli.LightningCLI
    config = tmp_path / "metrics.yaml"
    config.write_text(CLI_CONFIG.format(model=_name(flavour, "Typed")))
    monkeypatch.setattr("sys.argv", ["train.py"])
    cli = cli_class(
        args=["--config", str(config), "--seed_everything=0", f"--trainer.default_root_dir={tmp_path / 'run'}"],
        run=False,
        subclass_mode_model=True,
    )
    assert type(cli.model).__name__ == _name(flavour, "Typed") and cli.model.kind == "mse"
    cli.trainer.fit(cli.model, train_loader(), val_loaders())
    assert sorted(cli.trainer.callback_metrics) == ["train_mse", "val_mse/dataloader_idx_0", "val_mse/dataloader_idx_1"]


class RecordMetrics(pl.Callback):
    """Every rank writes what it logged (synced epoch values are the same on every rank)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.save(floats(trainer.callback_metrics), self.root / f"rank{trainer.global_rank}.pt")


def fit_under_ddp(model: pl.LightningModule, root: Path) -> list[dict[str, float]]:
    def fit(run_root: Path) -> None:
        trainer = make_trainer(
            run_root, devices=2, strategy="ddp_spawn", max_epochs=2, callbacks=[RecordMetrics(run_root)]
        )
        trainer.fit(model, train_loader(), val_loaders())

    run_root = spawn_with_teardown_retry(fit, root, lambda r: all((r / f"rank{rank}.pt").exists() for rank in (0, 1)))
    return [torch.load(run_root / f"rank{rank}.pt") for rank in (0, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["acc", "scores"])
def test_synced_values_under_ddp_equal_the_hand_written_ddp_run(kind: str, tmp_path: Path) -> None:
    classes = CLASSES_BY_FLAVOUR["pytorch_lightning"]
    declared_ranks = fit_under_ddp(classes["Typed"](kind=kind), tmp_path / "typed")
    hand_ranks = fit_under_ddp(classes["Hand"](kind=kind), tmp_path / "hand")
    assert declared_ranks == hand_ranks
    assert declared_ranks[0] == declared_ranks[1]  # synced: every rank logged the value over all samples
    assert len(declared_ranks[0]) == (3 if kind == "acc" else 6)


def test_a_precision_plugin_converts_the_copies_as_it_converts_a_metric_attribute(tmp_path: Path) -> None:
    classes = CLASSES_BY_FLAVOUR["pytorch_lightning"]
    typed, hand = classes["Typed"](kind="mse"), classes["Hand"](kind="mse")
    logged = []
    for model in (typed, hand):
        trainer = make_trainer(tmp_path, precision="bf16-true")
        trainer.fit(model, train_loader(), val_loaders())
        logged.append(floats(trainer.callback_metrics))
    assert logged[0] == logged[1] and len(logged[0]) == 3
    dtypes = {key: metric.metric_state["sum_squared_error"].dtype for key, metric in step_metric_objects(typed).items()}
    assert dtypes == dict.fromkeys(["train/mse", "val/mse", "val/mse/dataloader_idx_1", "test/mse"], torch.bfloat16)
    assert hand.train_metric.metric_state["sum_squared_error"].dtype == torch.bfloat16
