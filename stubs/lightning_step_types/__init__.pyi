"""Typed step results for PyTorch Lightning: the package's public static contract.

``TypedLightningModule``, ``TypedCallback`` and ``StepResultAdapter`` imported from here are the
``pytorch_lightning`` flavour (the package depends on ``pytorch-lightning``); users of
``lightning.pytorch`` import them from ``lightning_step_types.lightning_pytorch``.
"""

from lightning_step_types.compiling import compiled as compiled
from lightning_step_types.errors import StepResultError as StepResultError
from lightning_step_types.errors import StepResultWarning as StepResultWarning
from lightning_step_types.metrics import StepMetric as StepMetric
from lightning_step_types.metrics import declared_metric as declared_metric
from lightning_step_types.policy import LossLogging as LossLogging
from lightning_step_types.policy import NonFiniteLoss as NonFiniteLoss
from lightning_step_types.pytorch_lightning import StepResultAdapter as StepResultAdapter
from lightning_step_types.pytorch_lightning import TypedCallback as TypedCallback
from lightning_step_types.pytorch_lightning import TypedLightningModule as TypedLightningModule
from lightning_step_types.results import FrozenMetadata as FrozenMetadata
from lightning_step_types.results import StepResult as StepResult
from lightning_step_types.results import TrainStepResult as TrainStepResult
from lightning_step_types.results import ValStepResult as ValStepResult
from lightning_step_types.resume_options import not_resumed as not_resumed

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
__version__: str
