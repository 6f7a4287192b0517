"""How the adapter treats what a step returns: strictness and non-finite losses."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

__all__ = ["NonFiniteLoss", "StepPolicy"]

NonFiniteLoss = Literal["raise", "warn", "skip"] | None
"""What to do when a step's loss is NaN or infinite.

- ``"raise"`` (default): ``StepResultError`` before backward, so no optimizer step spreads the NaN
  into the weights and the last checkpoint stays good.
- ``"warn"``: a ``StepResultWarning`` (once per hook), then train on as Lightning would.
- ``"skip"``: a warning, and the training batch is skipped as if the step returned None (one
  device only: under distributed training every process must step, so it raises instead).
  Evaluation steps cannot be skipped without biasing epoch means: there it warns.
- ``None``: no check. Checking reads the loss on the host: one device-to-host sync per step
  (about a microsecond on CPU; on a GPU it waits for the step's kernels to finish).
"""

_NONFINITE_CHOICES = ("raise", "warn", "skip", None)


@dataclass(frozen=True)
class StepPolicy:
    """The adapter's settings for one module: ``strict`` accepts only typed results."""

    strict: bool
    nonfinite_loss: NonFiniteLoss = "raise"

    def __post_init__(self) -> None:
        if self.nonfinite_loss not in _NONFINITE_CHOICES:
            raise ValueError(
                f"nonfinite_loss={self.nonfinite_loss!r}: expected one of 'raise', 'warn', 'skip' or None"
            )

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def of(strict: bool, nonfinite_loss: NonFiniteLoss) -> StepPolicy:
        """A shared instance per setting: policies are compared and hashed on every step."""
        return StepPolicy(strict, nonfinite_loss)
