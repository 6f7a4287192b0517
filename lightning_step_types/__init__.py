"""Typed step results for PyTorch Lightning.

``training_step`` returns ``TrainStepResult``, ``validation_step``/``test_step`` return
``ValStepResult``; a runtime adapter (``TypedLightningModule`` or the ``StepResultAdapter``
callback) checks every return and converts it to what Lightning's loops already handle.
"""

from lightning_step_types.callback import StepResultAdapter
from lightning_step_types.errors import StepResultError, StepResultWarning
from lightning_step_types.module import TypedLightningModule
from lightning_step_types.results import StepResult, TrainStepResult, ValStepResult
from lightning_step_types.typed_callback import TypedCallback

__all__ = [
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
