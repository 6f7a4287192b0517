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
import importlib.util
from typing import Any

from lightning_step_types.errors import StepResultError, StepResultWarning
from lightning_step_types.policy import LossLogging, NonFiniteLoss
from lightning_step_types.results import FrozenMetadata, StepResult, TrainStepResult, ValStepResult

__all__ = [
    "FrozenMetadata",
    "LossLogging",
    "NonFiniteLoss",
    "StepResult",
    "StepResultAdapter",
    "StepResultError",
    "StepResultWarning",
    "TrainStepResult",
    "TypedCallback",
    "TypedLightningModule",
    "ValStepResult",
]
__version__ = "0.1.0"

_FLAVOURED = ("StepResultAdapter", "TypedCallback", "TypedLightningModule")


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the results does not require a particular Lightning package.
    if name not in _FLAVOURED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec("pytorch_lightning") is not None:
        flavour = importlib.import_module("lightning_step_types.pytorch_lightning")
    elif importlib.util.find_spec("lightning") is not None:
        flavour = importlib.import_module("lightning_step_types.lightning_pytorch")
    else:
        raise ImportError(
            f"lightning_step_types.{name} needs Lightning: `pip install pytorch-lightning` (or `lightning`)"
        )
    value = getattr(flavour, name)
    globals()[name] = value
    return value
