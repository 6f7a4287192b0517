"""The ``pytorch_lightning`` flavour of the typed module and callbacks: the static contract.

At runtime ``TypedLightningModule`` and ``TypedCallback`` wrap their subclasses' hooks in
``__init_subclass__``; this stub states what the wrapped hooks give and take:

- ``training_step`` returns ``TrainStepResult`` (or ``None`` to skip the batch on one device);
  ``validation_step`` and ``test_step`` return ``ValStepResult`` (or ``None``).
- ``on_train_batch_result`` receives the step's ``TrainStepResult`` (loss detached, as Lightning
  gives it), ``on_validation_batch_result`` and ``on_test_batch_result`` its ``ValStepResult``;
  ``None`` when the step returned ``None``. Lightning does not declare these hooks, so both mypy
  and pyright check an override against these declarations alone: overrides may narrow the
  metadata type (``TrainStepResult[MyMeta] | None``) but must accept ``None``.
- ``on_train_batch_end`` / ``on_validation_batch_end`` / ``on_test_batch_end`` receive the same
  typed results (and call the result hooks: an override calls ``super()`` to keep them).

Lightning declares the batch-end hooks' ``outputs`` as ``STEP_OUTPUT`` (a Tensor, any Mapping or
None); the typed batch-end hooks narrow it, which is sound only because the runtime wrapper
converts what Lightning passes before the user's hook runs. That is the one override checkers
cannot verify, hence the ignores below. mypy checks a user's override against every base class,
Lightning's included, so it still reports a narrowed ``outputs`` there; the result hooks are the
way to typed results in both checkers.
"""

from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl

from lightning_step_types.metrics import StepMetric
from lightning_step_types.policy import LossLogging, NonFiniteLoss
from lightning_step_types.results import TrainStepResult, ValStepResult

__all__ = ["StepResultAdapter", "TypedCallback", "TypedLightningModule"]

class TypedLightningModule(pl.LightningModule):
    """A ``LightningModule`` whose steps return typed results, checked at runtime before any backward."""

    nonfinite_loss: NonFiniteLoss
    log_loss: bool | LossLogging
    exact_resume: bool
    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        """Declare metrics fed by each step's result; called once per run at setup. Default: none."""
    def setup(self, stage: str) -> None: ...
    def training_step(self, *args: Any, **kwargs: Any) -> TrainStepResult[Any] | None: ...
    def validation_step(self, *args: Any, **kwargs: Any) -> ValStepResult[Any] | None: ...
    def test_step(self, *args: Any, **kwargs: Any) -> ValStepResult[Any] | None: ...
    def on_train_batch_end(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self, outputs: TrainStepResult[Any] | None, batch: Any, batch_idx: int
    ) -> None: ...
    def on_validation_batch_end(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self, outputs: ValStepResult[Any] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_test_batch_end(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self, outputs: ValStepResult[Any] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_train_batch_result(self, result: TrainStepResult[Any] | None, batch: Any, batch_idx: int) -> None:
        """Called after each training step with its ``TrainStepResult`` (loss detached), or None."""
    def on_validation_batch_result(
        self, result: ValStepResult[Any] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each validation step with its ``ValStepResult``, or None."""
    def on_test_batch_result(
        self, result: ValStepResult[Any] | None, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Called after each test step with its ``ValStepResult``, or None."""

class TypedCallback(pl.Callback):
    """A callback whose result hooks (and batch-end hooks) receive the step's typed result (or ``None``).

    The types hold for steps adapted by ``TypedLightningModule`` or ``StepResultAdapter(strict=True)``;
    with a lenient adapter, a step that returned a legacy Tensor or dict passes that through.
    """

    def on_train_batch_end(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: TrainStepResult[Any] | None,
        batch: Any,
        batch_idx: int,
    ) -> None: ...
    def on_validation_batch_end(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: ValStepResult[Any] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...
    def on_test_batch_end(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: ValStepResult[Any] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...
    def on_train_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: TrainStepResult[Any] | None,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Called after each training step with its ``TrainStepResult`` (loss detached), or None."""
    def on_validation_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult[Any] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Called after each validation step with its ``ValStepResult``, or None."""
    def on_test_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult[Any] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        """Called after each test step with its ``ValStepResult``, or None."""

class StepResultAdapter(pl.Callback):
    """``Trainer(callbacks=[StepResultAdapter()])`` checks every step return of any LightningModule."""

    exact_resume: bool
    metrics: Mapping[str, StepMetric[Any]] | None
    def __init__(
        self,
        strict: bool = False,
        nonfinite_loss: NonFiniteLoss = "warn",
        log_loss: bool | LossLogging = False,
        exact_resume: bool = True,
        metrics: Mapping[str, StepMetric[Any]] | None = None,
    ) -> None: ...
    @property
    def strict(self) -> bool: ...
    @property
    def state_key(self) -> str: ...
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None: ...
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None: ...
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None: ...
