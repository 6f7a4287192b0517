"""Typed results under Lightning's precision settings on CPU: fit, validate and test.

The typed hooks see the loss and metadata dtypes the precision gives (autocast keeps
``mse_loss`` in float32 under ``bf16-mixed``; the ``-true`` settings cast the module and its
inputs), training runs, and the typed module ends exactly where the plain-Lightning module does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from models import (
    N_BATCHES,
    PlainRegressor,
    TypedRegressor,
    assert_same_metrics,
    assert_same_params,
    make_loader,
    make_trainer,
)

from lightning_step_types import TrainStepResult, ValStepResult

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16

# precision -> (loss dtype in training, preds dtype, loss dtype in evaluation, parameter dtype)
EXPECTED_DTYPES = {
    "32-true": (F32, F32, F32, F32),
    "64-true": (F64, F64, F64, F64),
    "bf16-mixed": (F32, BF16, F32, F32),
    "bf16-true": (BF16, BF16, BF16, BF16),
    "16-true": (F16, F16, F16, F16),
}


class DtypeRecordingTyped(TypedRegressor):
    """Records what its typed batch-end hooks receive."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, type, torch.dtype, torch.dtype]] = []

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(("train", type(outputs), outputs.loss.dtype, outputs.metadata["preds"].dtype))

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("validate", type(outputs), outputs.loss.dtype, outputs.metadata["preds"].dtype))

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("test", type(outputs), outputs.loss.dtype, outputs.metadata["preds"].dtype))


def fit_validate_test(model: Any, root: Path, precision: str) -> tuple[int, dict[str, Any], list[dict[str, float]]]:
    trainer = make_trainer(root, precision=precision)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    fit_metrics = dict(trainer.callback_metrics)
    global_step = trainer.global_step
    evaluation = trainer.validate(model, make_loader(seed=1), verbose=False)
    evaluation += trainer.test(model, make_loader(seed=2), verbose=False)
    return global_step, fit_metrics, evaluation


@pytest.mark.filterwarnings("ignore:.*precision.*:UserWarning")
@pytest.mark.parametrize("precision", sorted(EXPECTED_DTYPES))
def test_typed_results_under_precision(precision: str, tmp_path: Path) -> None:
    train_loss, preds, eval_loss, parameter = EXPECTED_DTYPES[precision]
    typed = DtypeRecordingTyped()
    global_step, fit_metrics, evaluation = fit_validate_test(typed, tmp_path / "typed", precision)

    assert global_step == N_BATCHES
    assert all(p.dtype == parameter for p in typed.parameters())
    # one epoch of validation during fit, then validate and test
    assert typed.seen == (
        [("train", TrainStepResult, train_loss, preds)] * N_BATCHES
        + [("validate", ValStepResult, eval_loss, preds)] * (2 * N_BATCHES)
        + [("test", ValStepResult, eval_loss, preds)] * N_BATCHES
    )
    assert sorted(fit_metrics) == ["train_loss", "val_loss"]
    assert all(math.isfinite(float(v)) for v in fit_metrics.values())
    assert [sorted(m) for m in evaluation] == [["val_loss"], ["test_loss"]]
    assert all(math.isfinite(v) for m in evaluation for v in m.values())

    # exactly the plain-Lightning run
    plain = PlainRegressor()
    plain_step, plain_fit_metrics, plain_evaluation = fit_validate_test(plain, tmp_path / "plain", precision)
    assert plain_step == global_step
    assert_same_params(typed, plain)
    assert_same_metrics(fit_metrics, plain_fit_metrics)
    assert evaluation == plain_evaluation
