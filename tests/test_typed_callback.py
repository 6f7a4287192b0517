"""TypedCallback: its batch-end hooks receive the typed results of adapted steps, and Lightning's own
values for legacy returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import (
    PlainRegressor,
    PlainTypedRegressor,
    Recorder,
    TypedRecorder,
    TypedRegressor,
    make_loader,
    make_trainer,
)
from pytorch_lightning.loops.optimization.automatic import Closure

from lightning_step_types import StepResultAdapter, TrainStepResult, ValStepResult


def run_all_loops(model: pl.LightningModule, root: Path, *callbacks: pl.Callback, **overrides: Any) -> None:
    trainer = make_trainer(root, callbacks=list(callbacks), num_sanity_val_steps=1, limit_val_batches=2, **overrides)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    trainer.test(model, make_loader(seed=2), verbose=False)


def assert_typed_view_of_lightning_outputs(typed: TypedRecorder, plain: Recorder) -> None:
    """The typed callback saw, hook for hook, a typed result holding exactly what Lightning gave the plain one."""
    assert [hook for hook, _ in typed.seen] == [hook for hook, _ in plain.seen]
    assert [hook for hook, _ in typed.seen] == ["validation"] + ["train"] * 4 + ["validation"] * 2 + ["test"] * 4
    for (hook, result), (_, lightning_dict) in zip(typed.seen, plain.seen, strict=True):
        assert type(result) is (TrainStepResult if hook == "train" else ValStepResult)
        assert type(lightning_dict) is dict
        assert result.loss is lightning_dict["loss"]  # for training: Lightning's detached, normalized loss
        assert not result.loss.requires_grad
        assert list(result.metadata) == ["preds"]
        assert result.metadata["preds"] is lightning_dict["preds"]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_typed_callback_with_a_typed_module(tmp_path: Path, accumulate: int) -> None:
    typed, plain = TypedRecorder(), Recorder()
    run_all_loops(TypedRegressor(), tmp_path, typed, plain, accumulate_grad_batches=accumulate)
    assert_typed_view_of_lightning_outputs(typed, plain)


def test_typed_callback_with_a_plain_module_under_the_adapter(tmp_path: Path) -> None:
    typed, plain = TypedRecorder(), Recorder()
    run_all_loops(PlainTypedRegressor(), tmp_path, StepResultAdapter(), typed, plain)
    assert_typed_view_of_lightning_outputs(typed, plain)


@pytest.mark.parametrize("adapter", [[], [StepResultAdapter()]], ids=["no-adapter", "adapter"])
def test_typed_callback_gets_lightnings_dict_for_legacy_returns(tmp_path: Path, adapter: list[pl.Callback]) -> None:
    typed, plain = TypedRecorder(), Recorder()
    run_all_loops(PlainRegressor(), tmp_path, *adapter, typed, plain)
    assert len(typed.seen) == 11
    for (hook, typed_outputs), (plain_hook, plain_outputs) in zip(typed.seen, plain.seen, strict=True):
        assert hook == plain_hook
        assert typed_outputs is plain_outputs  # the very object Lightning handed to every callback
        assert type(typed_outputs) is dict and list(typed_outputs) == ["loss", "preds"]


class TypedSkippingOddBatches(TypedRegressor):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult | None:
        return None if batch_idx % 2 else super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult | None:
        return None if batch_idx % 2 else super().validation_step(batch, batch_idx)


@pytest.mark.filterwarnings("ignore:`training_step` returned `None`")
def test_typed_callback_gets_none_for_a_skipped_step(tmp_path: Path) -> None:
    Closure.warning_cache.clear()
    typed = TypedRecorder()
    trainer = make_trainer(tmp_path, callbacks=[typed])
    trainer.fit(TypedSkippingOddBatches(), make_loader(), make_loader(seed=1))
    kinds = [(hook, type(outputs)) for hook, outputs in typed.seen]
    assert kinds == [
        ("train", TrainStepResult),
        ("train", type(None)),
        ("train", TrainStepResult),
        ("train", type(None)),
        ("validation", ValStepResult),
        ("validation", type(None)),
        ("validation", ValStepResult),
        ("validation", type(None)),
    ]


class PlainTensorValidation(PlainRegressor):
    """A legacy validation_step returning a tensor: per-sample losses, or the loss itself."""

    def __init__(self, per_sample: bool) -> None:
        super().__init__()
        self.per_sample = per_sample

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        return (preds - batch[1]).pow(2).flatten() if self.per_sample else loss * 0


@pytest.mark.parametrize("adapter", [[], [StepResultAdapter()]], ids=["no-adapter", "adapter"])
def test_typed_callback_gets_a_legacy_per_sample_tensor(tmp_path: Path, adapter: list[pl.Callback]) -> None:
    typed, plain = TypedRecorder(), Recorder()
    make_trainer(tmp_path, callbacks=[*adapter, typed, plain]).validate(
        PlainTensorValidation(per_sample=True), make_loader(), verbose=False
    )
    assert [out.shape for _, out in typed.seen] == [torch.Size([2])] * 4
    assert all(t is p for (_, t), (_, p) in zip(typed.seen, plain.seen, strict=True))


@pytest.mark.parametrize("adapter", [[], [StepResultAdapter()]], ids=["no-adapter", "adapter"])
def test_typed_callback_gets_a_legacy_zero_loss_tensor(tmp_path: Path, adapter: list[pl.Callback]) -> None:
    typed, plain = TypedRecorder(), Recorder()
    make_trainer(tmp_path, callbacks=[*adapter, typed, plain]).validate(
        PlainTensorValidation(per_sample=False), make_loader(), verbose=False
    )
    assert all(t is p for (_, t), (_, p) in zip(typed.seen, plain.seen, strict=True))
    assert [type(out) for _, out in typed.seen] == [torch.Tensor] * 4
