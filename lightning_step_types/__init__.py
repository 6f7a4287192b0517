"""Typed step results for PyTorch Lightning.

``training_step`` returns ``TrainStepResult``, ``validation_step``/``test_step`` return
``ValStepResult``; a runtime adapter (``TypedLightningModule`` or the ``StepResultAdapter``
callback) checks every return and converts it to what Lightning's loops already handle.

The Lightning classes come in one flavour per Lightning package, sharing one implementation:
``lightning_step_types.pytorch_lightning`` (for ``import pytorch_lightning``) and
``lightning_step_types.lightning_pytorch`` (for ``import lightning.pytorch`` / ``lightning as L``).
Imported from here, they are the ``pytorch_lightning`` flavour, or the ``lightning.pytorch``
one when only the ``lightning`` package is installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lightning_step_types.compiling import compiled
from lightning_step_types.errors import StepResultError, StepResultWarning
from lightning_step_types.policy import LossLogging, NonFiniteLoss
from lightning_step_types.results import FrozenMetadata, StepResult, TrainStepResult, ValStepResult

if TYPE_CHECKING:  # checkers see the lazily imported names (as the stubs declare them)
    from lightning_step_types.metrics import StepMetric, declared_metric
    from lightning_step_types.pytorch_lightning import StepResultAdapter, TypedCallback, TypedLightningModule
    from lightning_step_types.resume_options import not_resumed

__all__ = [
    "FrozenMetadata",
    "LossLogging",
    "NonFiniteLoss",
    "StepMetric",
    "StepResult",
    "StepResultAdapter",
    "StepResultError",
    "StepResultWarning",
    "TrainStepResult",
    "TypedCallback",
    "TypedLightningModule",
    "ValStepResult",
    "compiled",
    "declared_metric",
    "not_resumed",
]
__version__ = "0.1.0"

_FLAVOURED = ("StepResultAdapter", "TypedCallback", "TypedLightningModule")


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the results does not require a particular Lightning package (or torchmetrics).
    if name in ("StepMetric", "declared_metric", "not_resumed"):
        module = "lightning_step_types.resume_options" if name == "not_resumed" else "lightning_step_types.metrics"
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    if name not in _FLAVOURED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_flavour(name), name)
    globals()[name] = value
    return value


def _flavour(name: str) -> Any:
    """The ``pytorch_lightning`` flavour, else the ``lightning.pytorch`` one: whichever package imports."""
    for package, flavour in (("pytorch_lightning", "pytorch_lightning"), ("lightning", "lightning_pytorch")):
        try:
            return importlib.import_module(f"lightning_step_types.{flavour}")
        except ModuleNotFoundError as error:
            if error.name is None or error.name.partition(".")[0] != package:
                raise  # the package is there but something it needs is missing: say so
    raise ImportError(f"lightning_step_types.{name} needs Lightning: `pip install pytorch-lightning` (or `lightning`)")
