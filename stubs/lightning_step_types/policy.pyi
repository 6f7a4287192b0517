"""How the adapter treats what a step returns: strictness, non-finite losses, loss logging."""

from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = ["LossLogging", "NonFiniteLoss", "StepPolicy", "steps_aside_for_lightning"]

NonFiniteLoss: TypeAlias = Literal["raise", "warn", "skip"] | None

DEFAULT_NONFINITE_LOSS: NonFiniteLoss
"""``TypedLightningModule``'s default ``nonfinite_loss`` (``"raise"``, told apart from one the user set)."""

def is_default_nonfinite_loss(value: object) -> bool: ...
def steps_aside_for_lightning(value: object) -> bool: ...

@dataclass(frozen=True)
class LossLogging:
    """Log each stage's loss through Lightning's own ``self.log``, weighted by batch size."""

    train: str | None = "train_loss"
    val: str | None = "val_loss"
    test: str | None = "test_loss"
    prog_bar: bool = True
    sync_dist: bool = False
    def name_for(self, hook_name: str) -> str | None: ...

@dataclass(frozen=True)
class StepPolicy:
    """The adapter's settings for one module (internal; build it with ``StepPolicy.of``)."""

    strict: bool
    nonfinite_loss: NonFiniteLoss = "raise"
    log_loss: LossLogging | None = None
    def __post_init__(self) -> None: ...
    @staticmethod
    def of(strict: bool, nonfinite_loss: NonFiniteLoss, log_loss: bool | LossLogging = False) -> StepPolicy: ...
