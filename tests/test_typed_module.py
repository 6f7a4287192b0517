"""TypedLightningModule under a real Trainer: same training as plain Lightning, strict errors raised
before any backward, Lightning's None semantics, typed batch-end hooks, and pass-through outside a run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import (
    PlainRegressor,
    Recorder,
    RegressorParts,
    TypedRegressor,
    assert_same_metrics,
    assert_same_params,
    make_loader,
    make_trainer,
    params_of,
)
from pytorch_lightning.loops.optimization.automatic import Closure

from lightning_step_types import StepResultError, TrainStepResult, TypedLightningModule, ValStepResult

Return = Callable[[Any, Any], Any]  # (model, batch) -> what the step returns


def typed_train_return(model: Any, batch: Any) -> Any:
    loss, preds = model.loss_and_preds(batch)
    return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})


def typed_eval_return(model: Any, batch: Any) -> Any:
    loss, preds = model.loss_and_preds(batch)
    return ValStepResult(loss=loss, metadata={"preds": preds})


class MyModel(RegressorParts, TypedLightningModule):
    """A typed module whose steps return whatever the test passes in (errors must name `MyModel`)."""

    def __init__(self, train_return: Return = typed_train_return, eval_return: Return = typed_eval_return) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.train_return = train_return
        self.eval_return = eval_return
        self.sanity_checking_at_step: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return self.train_return(self, batch)

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        self.sanity_checking_at_step.append(self.trainer.sanity_checking)
        return self.eval_return(self, batch)

    def test_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        return self.eval_return(self, batch)


def first_batch() -> Any:
    return next(iter(make_loader()))


def assert_error(error: StepResultError, hook: str, where: str, got: str, expected: str, fix: str) -> None:
    """The message's layout and every part of it; ``fix`` may be a prefix of the full fix text."""
    text = str(error)
    assert text.startswith(f"{hook}: {where}\n  got:      {got}\n  expected: {expected}\n  fix:      {fix}")
    assert text.count(hook) == 1
    assert (error.hook, error.where, error.got, error.expected) == (hook, where, got, expected)
    assert error.fix.startswith(fix)


def assert_untouched(model: pl.LightningModule, before: dict[str, torch.Tensor]) -> None:
    """No optimizer step (same parameters) and no backward (no gradient was ever written)."""
    assert_same_params(model, before)
    assert [p.grad for p in model.parameters()] == [None, None]


# --- same training as plain Lightning ---------------------------------------------------------


def fit_validate_test(
    model: pl.LightningModule, root: Path, **overrides: Any
) -> tuple[pl.Trainer, list[dict[str, Any]]]:
    trainer = make_trainer(root, **{"num_sanity_val_steps": 2, "max_epochs": 2, **overrides})
    trainer.fit(model, make_loader(), make_loader(seed=1))
    metrics = [dict(trainer.callback_metrics), dict(trainer.logged_metrics)]
    metrics += trainer.validate(model, make_loader(seed=1), verbose=False)
    metrics += trainer.test(model, make_loader(seed=2), verbose=False)
    return trainer, metrics


def test_fit_validate_test_match_plain_lightning(tmp_path: Path) -> None:
    plain, typed = PlainRegressor(), TypedRegressor()
    initial = params_of(typed)
    assert_same_params(plain, initial)

    plain_trainer, plain_metrics = fit_validate_test(plain, tmp_path / "plain")
    typed_trainer, typed_metrics = fit_validate_test(typed, tmp_path / "typed")

    assert typed_trainer.global_step == plain_trainer.global_step == 8
    assert not torch.equal(params_of(typed)["net.weight"], initial["net.weight"])  # it did train
    assert_same_params(typed, plain)
    assert sorted(typed_metrics[0]) == ["train_loss", "val_loss"]
    assert sorted(typed_metrics[3]) == ["test_loss"]
    for typed_values, plain_values in zip(typed_metrics, plain_metrics, strict=True):
        assert_same_metrics(typed_values, plain_values)


class PlainManual(RegressorParts, pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss, _ = self.loss_and_preds(batch)
        self.manual_backward(loss * 2)  # a different objective than the returned loss: nothing else reads it
        optimizer.step()
        self.log("train_loss", loss)
        return {"loss": loss.detach()}


class TypedManual(RegressorParts, TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.automatic_optimization = False
        self.received: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss, _ = self.loss_and_preds(batch)
        self.manual_backward(loss * 2)
        optimizer.step()
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss.detach())  # detached is fine: Lightning never calls backward on it

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.received.append(outputs)


def test_manual_optimization_matches_plain_lightning(tmp_path: Path) -> None:
    plain, typed = PlainManual(), TypedManual()
    recorder = Recorder()
    make_trainer(tmp_path / "plain").fit(plain, make_loader())
    trainer = make_trainer(tmp_path / "typed", callbacks=[recorder])
    trainer.fit(typed, make_loader())

    assert trainer.global_step == 4
    assert_same_params(typed, plain)
    assert_same_metrics(trainer.callback_metrics, {"train_loss": typed.received[-1].loss})
    assert [type(r) for r in typed.received] == [TrainStepResult] * 4
    lightning_dicts = recorder.outputs("train")
    assert [list(d) for d in lightning_dicts] == [["loss"]] * 4
    for result, plain_dict in zip(typed.received, lightning_dicts, strict=True):
        assert result.loss is plain_dict["loss"]
        assert not result.loss.requires_grad


class RecordingTyped(TypedRegressor):
    """``TypedRegressor`` whose own batch-end hooks record what they receive."""

    def __init__(self) -> None:
        super().__init__()
        self.raw_losses: list[torch.Tensor] = []
        self.step_preds: list[torch.Tensor] = []
        self.received: dict[str, list[Any]] = {"train": [], "validation": [], "test": []}

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        result = super().training_step(batch, batch_idx)
        self.raw_losses.append(result.loss.detach().clone())
        self.step_preds.append(result.metadata["preds"])
        return result

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.received["train"].append(outputs)

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.received["validation"].append(outputs)

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.received["test"].append(outputs)


def test_gradient_accumulation_matches_plain_lightning(tmp_path: Path) -> None:
    plain, typed = PlainRegressor(), RecordingTyped()
    recorder = Recorder()
    make_trainer(tmp_path / "plain", accumulate_grad_batches=2).fit(plain, make_loader())
    trainer = make_trainer(tmp_path / "typed", accumulate_grad_batches=2, callbacks=[recorder])
    trainer.fit(typed, make_loader())

    assert trainer.global_step == 2  # 4 batches, 2 optimizer steps
    assert_same_params(typed, plain)

    # The module's typed hook sees Lightning's loss: detached and divided by accumulate_grad_batches.
    received = typed.received["train"]
    assert [type(r) for r in received] == [TrainStepResult] * 4
    for result, raw, lightning_dict, preds in zip(
        received, typed.raw_losses, recorder.outputs("train"), typed.step_preds, strict=True
    ):
        assert result.loss is lightning_dict["loss"]
        assert not result.loss.requires_grad
        assert torch.equal(result.loss, raw / 2)
        assert list(result.metadata) == ["preds"]
        assert result.metadata["preds"] is preds
        assert type(lightning_dict) is dict and list(lightning_dict) == ["loss", "preds"]
        assert lightning_dict["preds"] is preds


def test_evaluation_batch_end_hooks_receive_the_typed_result(tmp_path: Path) -> None:
    model, recorder = RecordingTyped(), Recorder()
    trainer = make_trainer(tmp_path, callbacks=[recorder], num_sanity_val_steps=1, limit_val_batches=2)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    trainer.test(model, make_loader(seed=2), verbose=False)

    for hook, count in (("validation", 3), ("test", 4)):  # validation: 1 sanity batch + 2
        received = model.received[hook]
        assert [type(r) for r in received] == [ValStepResult] * count
        lightning_dicts = recorder.outputs(hook)
        for result, lightning_dict in zip(received, lightning_dicts, strict=True):
            assert type(lightning_dict) is dict
            assert lightning_dict == {"loss": result.loss, "preds": result.metadata["preds"]}
            assert list(result.metadata) == ["preds"]
            assert result.loss.shape == () and not result.loss.requires_grad


class PlainTwoValLoaders(PlainRegressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, int]] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        self.seen.append((dataloader_idx, batch_idx))
        loss, preds = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return {"loss": loss, "preds": preds}


class TypedTwoValLoaders(TypedRegressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, int]] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        self.seen.append((dataloader_idx, batch_idx))
        loss, preds = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return ValStepResult(loss=loss, metadata={"preds": preds})


def test_several_validation_dataloaders_get_dataloader_idx(tmp_path: Path) -> None:
    plain, typed = PlainTwoValLoaders(), TypedTwoValLoaders()
    val_loaders = [make_loader(seed=1, n_batches=2), make_loader(seed=2, n_batches=3)]
    make_trainer(tmp_path / "plain").fit(plain, make_loader(), val_loaders)
    trainer = make_trainer(tmp_path / "typed")
    trainer.fit(typed, make_loader(), val_loaders)

    assert typed.seen == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert typed.seen == plain.seen
    assert sorted(trainer.callback_metrics) == ["train_loss", "val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"]
    assert_same_metrics(trainer.callback_metrics, plain.trainer.callback_metrics)
    assert_same_params(typed, plain)


class PredictingTyped(TypedRegressor):
    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        return {"preds": self(batch[0]), "index": batch_idx}  # plain Lightning: anything goes


def test_predict_step_stays_plain_lightning(tmp_path: Path) -> None:
    model = PredictingTyped()
    predictions = make_trainer(tmp_path).predict(model, make_loader())
    assert predictions is not None and len(predictions) == 4
    with torch.no_grad():
        for batch_idx, (prediction, (x, _)) in enumerate(zip(predictions, make_loader(), strict=True)):
            assert list(prediction) == ["preds", "index"]
            assert prediction["index"] == batch_idx
            assert torch.equal(prediction["preds"], model(x))


# --- strict errors, raised before any backward or optimizer step ---------------------------------


def dict_return(model: Any, batch: Any) -> Any:
    loss, preds = model.loss_and_preds(batch)
    return {"loss": loss, "acc": (preds > 0).float().mean()}


def tensor_return(model: Any, batch: Any) -> Any:
    return model.loss_and_preds(batch)[0]


def val_result_return(model: Any, batch: Any) -> Any:
    return ValStepResult(loss=model.loss_and_preds(batch)[0])


def item_return(model: Any, batch: Any) -> Any:
    return TrainStepResult(loss=model.loss_and_preds(batch)[0].item())


def detached_return(model: Any, batch: Any) -> Any:
    return TrainStepResult(loss=model.loss_and_preds(batch)[0].detach())


def no_grad_return(model: Any, batch: Any) -> Any:
    with torch.no_grad():
        loss = model.loss_and_preds(batch)[0]
    return TrainStepResult(loss=loss)


def leaf_return(model: Any, batch: Any) -> Any:
    model.loss_and_preds(batch)
    return TrainStepResult(loss=torch.tensor(1.0, requires_grad=True))


CUT_FROM_GRAPH = (
    "Tensor(shape=(), dtype=float32, requires_grad=False): it was cut from the graph, e.g. by"
    " `.item()`, `.detach()`, `torch.tensor(...)` or `torch.no_grad()`"
)
NEEDS_GRAPH = (
    "a loss computed from the model's parameters (requires_grad=True): automatic optimization calls backward on it"
)
KEEP_GRAPH_FIX = (
    "return the loss tensor as computed from `self(...)`, without `.detach()`, `.item()` or `torch.no_grad()`;"
    " to step optimizers yourself, set `self.automatic_optimization = False`"
)
NOT_A_RESULT = "TrainStepResult (or None to skip the batch)"

STRICT_TRAINING_ERRORS = [
    pytest.param(
        dict_return,
        "return value",
        "dict with keys ['loss', 'acc']",
        NOT_A_RESULT,
        "return `TrainStepResult(loss=..., metadata={'acc': ...})`",
        id="dict",
    ),
    pytest.param(
        tensor_return,
        "return value",
        "Tensor(shape=(), dtype=float32, requires_grad=True)",
        NOT_A_RESULT,
        "wrap the loss: `return TrainStepResult(loss=loss)`",
        id="tensor",
    ),
    pytest.param(
        val_result_return,
        "return value",
        "ValStepResult (loss Tensor(shape=(), dtype=float32, requires_grad=True), metadata keys [])",
        "TrainStepResult from training_step (ValStepResult is for the other loop)",
        "return `TrainStepResult(loss=..., metadata=...)`",
        id="val-result",
    ),
    pytest.param(detached_return, "return value.loss", CUT_FROM_GRAPH, NEEDS_GRAPH, KEEP_GRAPH_FIX, id="detached"),
    pytest.param(no_grad_return, "return value.loss", CUT_FROM_GRAPH, NEEDS_GRAPH, KEEP_GRAPH_FIX, id="no-grad"),
    pytest.param(
        leaf_return,
        "return value.loss",
        "Tensor(shape=(), dtype=float32, requires_grad=True): a leaf tensor, not computed from any parameter",
        "a loss computed from the model's parameters: backward on a leaf leaves every gradient empty",
        "compute the loss from the model's output, e.g. `loss = F.mse_loss(self(x), y)`, instead of creating it"
        " with `torch.tensor(..., requires_grad=True)` or `.requires_grad_()`",
        id="leaf",
    ),
]


@pytest.mark.parametrize(("train_return", "where", "got", "expected", "fix"), STRICT_TRAINING_ERRORS)
def test_strict_training_errors_come_before_backward(
    tmp_path: Path, train_return: Return, where: str, got: str, expected: str, fix: str
) -> None:
    model = MyModel(train_return=train_return)
    before = params_of(model)
    trainer = make_trainer(tmp_path)
    with pytest.raises(StepResultError) as info:
        trainer.fit(model, make_loader())
    assert type(info.value) is StepResultError
    assert_error(info.value, "MyModel.training_step", where, got, expected, fix)
    assert trainer.global_step == 0
    assert_untouched(model, before)


def test_item_built_result_is_relabelled_with_the_step(tmp_path: Path) -> None:
    model = MyModel(train_return=item_return)
    with torch.no_grad():
        first_loss = model.loss_and_preds(first_batch())[0].item()
    before = params_of(model)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path).fit(model, make_loader())
    assert_error(
        info.value,
        "MyModel.training_step",
        "TrainStepResult.loss",
        f"float {first_loss!r}",
        "a torch.Tensor of dtype float16, bfloat16, float32 or float64 holding one value (shape () or (1,))",
        "return the tensor itself: `loss`, not `loss.item()` or `float(loss)`",
    )
    assert_untouched(model, before)


def test_train_result_from_validation_step(tmp_path: Path) -> None:
    def train_result(model: Any, batch: Any) -> Any:
        return TrainStepResult(loss=model.loss_and_preds(batch)[0])

    model = MyModel(eval_return=train_result)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path).validate(model, make_loader(), verbose=False)
    assert_error(
        info.value,
        "MyModel.validation_step",
        "return value",
        # validation runs under inference mode, so the loss has no graph
        "TrainStepResult (loss Tensor(shape=(), dtype=float32, requires_grad=False), metadata keys [])",
        "ValStepResult from validation_step (TrainStepResult is for the other loop)",
        "return `ValStepResult(loss=..., metadata=...)`; ValStepResult is the result type of validation_step and test_step",
    )


def test_dict_from_test_step(tmp_path: Path) -> None:
    def dict_eval(model: Any, batch: Any) -> Any:
        loss, preds = model.loss_and_preds(batch)
        return {"loss": loss, "preds": preds}

    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path).test(MyModel(eval_return=dict_eval), make_loader(), verbose=False)
    assert_error(
        info.value,
        "MyModel.test_step",
        "return value",
        "dict with keys ['loss', 'preds']",
        "ValStepResult (or None to skip the batch)",
        "return `ValStepResult(loss=..., metadata={'preds': ...})`",
    )


def test_sanity_check_goes_through_the_adapter(tmp_path: Path) -> None:
    def tensor_eval(model: Any, batch: Any) -> Any:
        return model.loss_and_preds(batch)[0]

    model = MyModel(eval_return=tensor_eval)
    before = params_of(model)
    trainer = make_trainer(tmp_path, num_sanity_val_steps=1)
    with pytest.raises(StepResultError) as info:
        trainer.fit(model, make_loader(), make_loader(seed=1))
    assert_error(
        info.value,
        "MyModel.validation_step",
        "return value",
        "Tensor(shape=(), dtype=float32, requires_grad=False)",
        "ValStepResult (or None to skip the batch)",
        "wrap the loss: `return ValStepResult(loss=loss)`",
    )
    assert model.sanity_checking_at_step == [True]  # raised by the sanity check, before any training
    assert_untouched(model, before)


# --- None from training_step -------------------------------------------------------------------


def none_on_batch_1(inner: Callable[[Any, Any, int], Any]) -> Any:
    """A training_step that returns None for batch 1 and otherwise whatever ``inner`` returns."""

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        return None if batch_idx == 1 else inner(self, batch, batch_idx)

    return training_step


class PlainSkipping(PlainRegressor):
    training_step = none_on_batch_1(PlainRegressor.training_step)


class TypedSkipping(RecordingTyped):
    training_step = none_on_batch_1(RecordingTyped.training_step)


NONE_WARNING = r"`training_step` returned `None`. If this was on purpose, ignore this warning"


@pytest.fixture
def fresh_none_warning() -> None:
    """Lightning warns about a None return once per process (a class-level WarningCache): forget it."""
    Closure.warning_cache.clear()


@pytest.mark.usefixtures("fresh_none_warning")
def test_none_skips_the_batch_as_in_plain_lightning(tmp_path: Path) -> None:
    plain, typed = PlainSkipping(), TypedSkipping()
    with pytest.warns(UserWarning, match=NONE_WARNING):
        make_trainer(tmp_path / "plain").fit(plain, make_loader())
    Closure.warning_cache.clear()
    with pytest.warns(UserWarning, match=NONE_WARNING):
        make_trainer(tmp_path / "typed").fit(typed, make_loader())

    assert_same_params(typed, plain)
    assert_same_metrics(typed.trainer.callback_metrics, plain.trainer.callback_metrics)
    received = typed.received["train"]
    assert [type(r) for r in received] == [TrainStepResult, type(None), TrainStepResult, TrainStepResult]


@pytest.mark.usefixtures("fresh_none_warning")
def test_none_on_every_batch_leaves_the_model_untouched(tmp_path: Path) -> None:
    model = MyModel(train_return=lambda model, batch: None)
    before = params_of(model)
    with pytest.warns(UserWarning, match=NONE_WARNING):
        make_trainer(tmp_path).fit(model, make_loader())
    assert_untouched(model, before)


# --- outside a Trainer, and nested steps ----------------------------------------------------------


class RememberingModel(MyModel):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        self.built = super().training_step(batch, batch_idx)
        return self.built


def test_direct_call_outside_a_trainer_returns_the_result_itself(tmp_path: Path) -> None:
    model = RememberingModel()
    returned = model.training_step(first_batch(), 0)
    assert returned is model.built
    assert type(returned) is TrainStepResult
    assert returned.loss.requires_grad

    # Nothing is checked outside a run: a unit test can look at what the step really returns.
    odd = MyModel(train_return=dict_return)
    assert list(odd.training_step(first_batch(), 0)) == ["loss", "acc"]
    assert type(odd.training_step(first_batch(), 0)) is dict

    # After a run the module is attached to a finished Trainer: still a pass-through.
    make_trainer(tmp_path).fit(model, make_loader())
    again = model.training_step(first_batch(), 0)
    assert again is model.built
    val = model.validation_step(first_batch(), 0)
    assert type(val) is ValStepResult


class ExtendingChild(RecordingTyped):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        parent = super().training_step(batch, batch_idx)
        assert type(parent) is TrainStepResult  # the parent's adapted step passes through when nested
        return TrainStepResult(loss=parent.loss, metadata={**parent.metadata, "batch_idx": batch_idx})


class BreakingChild(TypedRegressor):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return dict(super().training_step(batch, batch_idx))  # type: ignore[return-value]


def test_super_training_step_nests(tmp_path: Path) -> None:
    child, plain = ExtendingChild(), PlainRegressor()
    make_trainer(tmp_path / "child").fit(child, make_loader())
    make_trainer(tmp_path / "plain").fit(plain, make_loader())
    assert_same_params(child, plain)
    received = child.received["train"]
    assert [list(r.metadata.items())[1] for r in received] == [("batch_idx", i) for i in range(4)]

    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path / "breaking").fit(BreakingChild(), make_loader())
    assert_error(
        info.value,
        "BreakingChild.training_step",
        "return value",
        "dict with keys ['loss', 'preds']",
        NOT_A_RESULT,
        "return `TrainStepResult(loss=..., metadata={'preds': ...})`",
    )


# --- steps inherited from a non-typed class ---------------------------------------------------------


class SharedSteps:
    """Steps shared by several modules through a mixin; this one returns a legacy dict."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.loss_and_preds(batch)[0]}  # type: ignore[attr-defined]


class StepsFromMixin(RegressorParts, SharedSteps, TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)


class MigratedModel(TypedLightningModule, PlainRegressor):
    """Migrating an existing module by adding the typed base in front of it."""


@pytest.mark.parametrize("model_class", [StepsFromMixin, MigratedModel])
def test_inherited_steps_are_checked_too(tmp_path: Path, model_class: type[pl.LightningModule]) -> None:
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path).fit(model_class(), make_loader())
    assert str(info.value).startswith(f"{model_class.__name__}.training_step: return value\n")
