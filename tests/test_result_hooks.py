"""The result hooks: ``on_{train,validation,test}_batch_result`` of a TypedLightningModule and of a
TypedCallback receive each step's typed result (or None), holding exactly what Lightning hands its
batch-end hooks.

Every run carries a plain ``Recorder`` next to the typed hooks: what it receives from Lightning is
the reference each typed result is compared against, object for object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as lightning_pytorch
import pytest
import pytorch_lightning as pl
import torch
from models import (
    PlainRegressor,
    PlainTypedRegressor,
    Recorder,
    RegressorParts,
    TypedRegressor,
    make_loader,
    make_trainer,
    trainer_kwargs,
)
from pytorch_lightning.loops.optimization.automatic import Closure

import lightning_step_types.module
from lightning_step_types import StepResultAdapter, TrainStepResult, TypedCallback, TypedLightningModule, ValStepResult
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch

# --- recording hooks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One result hook call: the stage, what it received, and where the trainer was."""

    stage: str  # "train", "validation" or "test"
    result: Any
    batch_idx: int
    dataloader_idx: int | None  # None for training, which has no dataloader_idx
    sanity_checking: bool


class ResultHookRegressor(TypedRegressor):
    """``TypedRegressor`` recording its result hooks, and the loss each training step returned."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Seen] = []
        self.step_losses: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult | None:
        result = super().training_step(batch, batch_idx)  # a nested call: the step's own value
        self.step_losses.append(result.loss.detach().clone())
        return result

    def on_train_batch_result(self, result: TrainStepResult | None, batch: Any, batch_idx: int) -> None:
        self.seen.append(Seen("train", result, batch_idx, None, self.trainer.sanity_checking))

    def on_validation_batch_result(
        self, result: ValStepResult | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.seen.append(Seen("validation", result, batch_idx, dataloader_idx, self.trainer.sanity_checking))

    def on_test_batch_result(
        self, result: ValStepResult | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.seen.append(Seen("test", result, batch_idx, dataloader_idx, self.trainer.sanity_checking))


class ResultRecorder(TypedCallback):
    """A TypedCallback recording its result hooks."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []

    def on_train_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: TrainStepResult | None,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.seen.append(Seen("train", result, batch_idx, None, trainer.sanity_checking))

    def on_validation_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(Seen("validation", result, batch_idx, dataloader_idx, trainer.sanity_checking))

    def on_test_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(Seen("test", result, batch_idx, dataloader_idx, trainer.sanity_checking))


def stages(seen: list[Seen]) -> list[tuple[str, int, int | None, bool]]:
    return [(s.stage, s.batch_idx, s.dataloader_idx, s.sanity_checking) for s in seen]


def assert_typed_view_of(seen: list[Seen], plain: Recorder) -> None:
    """Each result holds, object for object, the loss and metadata Lightning gave the plain callback."""
    assert [s.stage for s in seen] == [hook for hook, _ in plain.seen]
    for s, (_, lightning_dict) in zip(seen, plain.seen, strict=True):
        assert type(s.result) is (TrainStepResult if s.stage == "train" else ValStepResult)
        assert type(lightning_dict) is dict and list(lightning_dict) == ["loss", "preds"]
        assert s.result.loss is lightning_dict["loss"]  # training: Lightning's detached, normalized loss
        assert list(s.result.metadata) == ["preds"]
        assert s.result.metadata["preds"] is lightning_dict["preds"]
        assert s.result.batch_size is None
        if s.stage == "train":
            assert not s.result.loss.requires_grad


# One sanity-check batch, four training batches, two validation batches at the end of the epoch.
FIT = (
    [("validation", 0, 0, True)]
    + [("train", i, None, False) for i in range(4)]
    + [("validation", i, 0, False) for i in range(2)]
)
VALIDATE = [("validation", i, 0, False) for i in range(2)]
TEST = [("test", i, 0, False) for i in range(4)]


def run_fit_validate_test(model: pl.LightningModule, root: Path, *callbacks: pl.Callback, **overrides: Any) -> None:
    trainer = make_trainer(root, callbacks=list(callbacks), num_sanity_val_steps=1, limit_val_batches=2, **overrides)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    trainer.validate(model, make_loader(seed=1), verbose=False)
    trainer.test(model, make_loader(seed=2), verbose=False)


# --- fit (with its sanity check), validate and test ---------------------------------------------------


@pytest.mark.parametrize("accumulate", [1, 2])
def test_result_hooks_receive_lightnings_values_in_every_loop(tmp_path: Path, accumulate: int) -> None:
    model, callback, plain = ResultHookRegressor(), ResultRecorder(), Recorder()
    run_fit_validate_test(model, tmp_path, callback, plain, accumulate_grad_batches=accumulate)

    assert stages(model.seen) == stages(callback.seen) == FIT + VALIDATE + TEST
    assert_typed_view_of(model.seen, plain)
    assert_typed_view_of(callback.seen, plain)
    # Lightning divides the training loss by accumulate_grad_batches before the batch-end hooks.
    train_losses = [s.result.loss for s in model.seen if s.stage == "train"]
    assert len(model.step_losses) == 4
    for hook_loss, step_loss in zip(train_losses, model.step_losses, strict=True):
        assert torch.equal(hook_loss, step_loss / accumulate)
        if accumulate == 1:
            assert torch.equal(hook_loss, step_loss)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_result_hook_losses_equal_a_plain_lightning_run(tmp_path: Path, accumulate: int) -> None:
    """Same seed, same batches: the result hooks see bit for bit the losses a plain-Lightning run's hooks see."""
    typed_model, typed = ResultHookRegressor(), ResultRecorder()
    run_fit_validate_test(typed_model, tmp_path / "typed", typed, accumulate_grad_batches=accumulate)
    plain = Recorder()
    run_fit_validate_test(PlainRegressor(), tmp_path / "plain", plain, accumulate_grad_batches=accumulate)

    assert [s.stage for s in typed.seen] == [hook for hook, _ in plain.seen]
    for s, (_, lightning_dict) in zip(typed.seen, plain.seen, strict=True):
        assert torch.equal(s.result.loss, lightning_dict["loss"]), (s, lightning_dict)
        assert torch.equal(s.result.metadata["preds"], lightning_dict["preds"])


# --- None when the step returned None -----------------------------------------------------------------


class SkipsOddBatches(ResultHookRegressor):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult | None:
        return None if batch_idx % 2 else super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult | None:
        return None if batch_idx % 2 else super().validation_step(batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> ValStepResult | None:
        return None if batch_idx % 2 else super().test_step(batch, batch_idx)


@pytest.mark.filterwarnings("ignore:`training_step` returned `None`")
def test_result_hooks_receive_none_when_the_step_returned_none(tmp_path: Path) -> None:
    Closure.warning_cache.clear()
    model, callback, plain = SkipsOddBatches(), ResultRecorder(), Recorder()
    trainer = make_trainer(tmp_path, callbacks=[callback, plain])
    trainer.fit(model, make_loader(), make_loader(seed=1))
    trainer.test(model, make_loader(seed=2), verbose=False)

    expected = [
        (stage, batch_idx, result_type if batch_idx % 2 == 0 else type(None))
        for stage, result_type in [("train", TrainStepResult), ("validation", ValStepResult), ("test", ValStepResult)]
        for batch_idx in range(4)
    ]
    for seen in (model.seen, callback.seen):
        assert [(s.stage, s.batch_idx, type(s.result)) for s in seen] == expected
    # What Lightning handed the plain callback for those batches: {} for training, None for evaluation.
    assert [outputs for hook, outputs in plain.seen if hook == "train"][1::2] == [{}, {}]
    assert [outputs for hook, outputs in plain.seen if hook != "train"][1::2] == [None] * 4
    for s, (_, outputs) in zip(callback.seen, plain.seen, strict=True):
        if s.result is not None:
            assert s.result.loss is outputs["loss"]


# --- dataloader_idx ----------------------------------------------------------------------------------


class TwoLoaderRegressor(ResultHookRegressor):
    """Evaluation steps that take ``dataloader_idx``, as Lightning requires with several loaders."""

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        return ValStepResult(loss=loss, metadata={"preds": preds})

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> ValStepResult:
        return self.validation_step(batch, batch_idx, dataloader_idx)


def test_result_hooks_receive_the_dataloader_idx_of_each_loader(tmp_path: Path) -> None:
    model, callback, plain = TwoLoaderRegressor(), ResultRecorder(), Recorder()
    trainer = make_trainer(tmp_path, callbacks=[callback, plain])
    loaders = [make_loader(seed=1, n_batches=2), make_loader(seed=2, n_batches=3)]
    trainer.validate(model, loaders, verbose=False)
    trainer.test(model, loaders, verbose=False)

    per_loader = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    expected = [(stage, b, d, False) for stage in ("validation", "test") for d, b in per_loader]
    assert stages(model.seen) == stages(callback.seen) == expected
    assert_typed_view_of(model.seen, plain)
    assert_typed_view_of(callback.seen, plain)


# --- a subclass overriding the batch-end hook ------------------------------------------------------


class BatchEndCallsSuper(ResultHookRegressor):
    def __init__(self) -> None:
        super().__init__()
        self.batch_end_outputs: list[Any] = []

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_end_outputs.append(outputs)
        super().on_train_batch_end(outputs, batch, batch_idx)


class BatchEndWithoutSuper(BatchEndCallsSuper):
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch_end_outputs.append(outputs)


def test_an_overridden_batch_end_that_calls_super_keeps_the_result_hook(tmp_path: Path) -> None:
    model, plain = BatchEndCallsSuper(), Recorder()
    make_trainer(tmp_path, callbacks=[plain]).fit(model, make_loader())

    assert [type(outputs) for outputs in model.batch_end_outputs] == [TrainStepResult] * 4
    assert stages(model.seen) == [("train", i, None, False) for i in range(4)]
    # The very result the override received, passed on by the mixin's on_train_batch_end.
    assert all(s.result is outputs for s, outputs in zip(model.seen, model.batch_end_outputs, strict=True))
    assert_typed_view_of(model.seen, plain)


def test_an_overridden_batch_end_without_super_skips_the_result_hook(tmp_path: Path) -> None:
    model = BatchEndWithoutSuper()
    make_trainer(tmp_path).fit(model, make_loader(), make_loader(seed=1))

    assert [type(outputs) for outputs in model.batch_end_outputs] == [TrainStepResult] * 4
    # Only the hooks whose batch-end hook was left alone still run.
    assert stages(model.seen) == [("validation", i, 0, False) for i in range(4)]


# --- a TypedCallback on a plain module, under StepResultAdapter -------------------------------------


def test_typed_callback_result_hooks_on_a_plain_module_with_typed_returns(tmp_path: Path) -> None:
    callback, plain = ResultRecorder(), Recorder()
    run_fit_validate_test(PlainTypedRegressor(), tmp_path, StepResultAdapter(), callback, plain)

    assert stages(callback.seen) == FIT + VALIDATE + TEST
    assert_typed_view_of(callback.seen, plain)


@pytest.mark.parametrize("adapter", [[], [StepResultAdapter()]], ids=["no-adapter", "adapter"])
def test_typed_callback_result_hooks_get_lightnings_value_for_legacy_returns(
    tmp_path: Path, adapter: list[pl.Callback]
) -> None:
    callback, plain = ResultRecorder(), Recorder()
    run_fit_validate_test(PlainRegressor(), tmp_path, *adapter, callback, plain)

    assert stages(callback.seen) == FIT + VALIDATE + TEST
    for s, (hook, outputs) in zip(callback.seen, plain.seen, strict=True):
        assert s.stage == hook
        assert s.result is outputs  # the very dict Lightning handed every callback
        assert type(outputs) is dict and list(outputs) == ["loss", "preds"]


# --- no per-step work unless a result hook is overridden --------------------------------------------


class OnlyTrainResultHook(TypedRegressor):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[Any] = []

    def on_train_batch_result(self, result: TrainStepResult | None, batch: Any, batch_idx: int) -> None:
        self.results.append(result)


@pytest.fixture
def typed_outputs_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The step hook of every ``typed_outputs`` call made by the module mixin's batch-end hooks."""
    calls: list[str] = []
    original = lightning_step_types.module.typed_outputs

    def counting_typed_outputs(module: Any, step_hook: str, outputs: Any) -> Any:
        calls.append(step_hook)
        return original(module, step_hook, outputs)

    monkeypatch.setattr(lightning_step_types.module, "typed_outputs", counting_typed_outputs)
    return calls


def test_no_per_step_work_without_a_result_hook(tmp_path: Path, typed_outputs_calls: list[str]) -> None:
    run_fit_validate_test(TypedRegressor(), tmp_path)
    assert typed_outputs_calls == []


def test_only_the_overridden_result_hook_costs_a_conversion(tmp_path: Path, typed_outputs_calls: list[str]) -> None:
    model = OnlyTrainResultHook()
    run_fit_validate_test(model, tmp_path)
    assert typed_outputs_calls == ["training_step"] * 4
    assert [type(result) for result in model.results] == [TrainStepResult] * 4


# --- the lightning.pytorch flavour ------------------------------------------------------------------


class FlavourRegressor(RegressorParts, lst_lightning_pytorch.TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.seen: list[tuple[str, Any]] = []

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        return ValStepResult(loss=loss, metadata={"preds": preds})

    def on_train_batch_result(self, result: TrainStepResult | None, batch: Any, batch_idx: int) -> None:
        self.seen.append(("train", result))

    def on_validation_batch_result(
        self, result: ValStepResult | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.seen.append(("validation", result))


class FlavourResultRecorder(lst_lightning_pytorch.TypedCallback):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_train_batch_result(
        self, trainer: Any, pl_module: Any, result: TrainStepResult | None, batch: Any, batch_idx: int
    ) -> None:
        self.seen.append(("train", result))

    def on_validation_batch_result(
        self,
        trainer: Any,
        pl_module: Any,
        result: ValStepResult | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(("validation", result))


class FlavourPlainRecorder(lightning_pytorch.Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(("train", outputs))

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.seen.append(("validation", outputs))


def test_result_hooks_in_the_lightning_pytorch_flavour(tmp_path: Path) -> None:
    model, callback, plain = FlavourRegressor(), FlavourResultRecorder(), FlavourPlainRecorder()
    trainer = lightning_pytorch.Trainer(**trainer_kwargs(tmp_path, callbacks=[callback, plain], limit_val_batches=2))
    trainer.fit(model, make_loader(), make_loader(seed=1))

    expected = ["train"] * 4 + ["validation"] * 2
    for seen in (model.seen, callback.seen):
        assert [stage for stage, _ in seen] == expected
        for (stage, result), (_, lightning_dict) in zip(seen, plain.seen, strict=True):
            assert type(result) is (TrainStepResult if stage == "train" else ValStepResult)
            assert result.loss is lightning_dict["loss"]
            assert result.metadata["preds"] is lightning_dict["preds"]


# --- an existing class's batch-end hooks keep running after the typed base is mixed in ----------


class ExistingModule(PlainTypedRegressor):
    """A module that already reads its outputs in on_train_batch_end / on_validation_batch_end."""

    def __init__(self) -> None:
        super().__init__()
        self.train_outputs: list[Any] = []
        self.val_outputs: list[Any] = []

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_outputs.append(outputs)

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.val_outputs.append(outputs)


class MigratedModule(TypedLightningModule, ExistingModule):
    """The migration pattern: the typed base first, the existing module's code unchanged."""


class ExistingCallback(pl.Callback):
    def __init__(self) -> None:
        self.train_outputs: list[Any] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_outputs.append(outputs)


class MigratedCallback(TypedCallback, ExistingCallback):
    pass


def test_an_existing_modules_batch_end_hooks_still_run_and_get_typed_results(tmp_path: Path) -> None:
    model = MigratedModule()
    trainer = make_trainer(tmp_path, num_sanity_val_steps=0)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    assert trainer.global_step > 0
    assert len(model.train_outputs) == trainer.global_step
    assert all(type(outputs) is TrainStepResult for outputs in model.train_outputs)
    assert all(
        not outputs.loss.requires_grad and list(outputs.metadata) == ["preds"] for outputs in model.train_outputs
    )
    assert len(model.val_outputs) == len(make_loader(seed=1)) * trainer.max_epochs
    assert all(type(outputs) is ValStepResult for outputs in model.val_outputs)


def test_an_existing_callbacks_batch_end_hook_still_runs_and_gets_typed_results(tmp_path: Path) -> None:
    callback = MigratedCallback()
    trainer = make_trainer(tmp_path, callbacks=[callback])
    trainer.fit(TypedRegressor(), make_loader())
    assert len(callback.train_outputs) == trainer.global_step > 0
    assert all(type(outputs) is TrainStepResult for outputs in callback.train_outputs)
