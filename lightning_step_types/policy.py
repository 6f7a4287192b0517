"""How the adapter treats what a step returns: strictness, non-finite losses, loss logging."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal, cast

__all__ = ["LossLogging", "NonFiniteLoss", "StepPolicy", "steps_aside_for_lightning"]

NonFiniteLoss = Literal["raise", "warn", "skip"] | None
"""What to do when a step's loss is NaN or infinite.

- ``"raise"`` (``TypedLightningModule``'s default): ``StepResultError`` before backward, so no
  optimizer step spreads the NaN into the weights and the last checkpoint stays good.
- ``"warn"`` (``StepResultAdapter``'s default): one ``StepResultWarning`` per run, naming the step,
  the batch and the value of the first non-finite loss, then train on as Lightning would: an
  existing module runs under the adapter as it runs without it.
- ``"skip"``: a warning, and the training batch is skipped as if the step returned None (one
  device only: under distributed training every process must step, so it raises instead).
  Evaluation steps cannot be skipped without biasing epoch means: there it warns.
- ``None``: no check. Checking reads the loss on the host: one device-to-host sync per step
  (about a microsecond on CPU; on a GPU it waits for the step's kernels to finish).

``"warn"``, and the typed module's default (``"raise"`` left unset), step aside where Lightning's
own non-finite handling is on: a ``SpikeDetection`` callback in the Trainer's callbacks, or
``Trainer(detect_anomaly=True)``. The steps then run unchecked, as with ``None``, and Lightning's
handling is what the user gets. ``"raise"`` set explicitly, and ``"skip"``, apply whatever the
Trainer holds.
"""


class _DefaultRaise(str):
    """The default ``nonfinite_loss``: ``"raise"``, told apart from a ``"raise"`` the user set."""

    __slots__ = ()


DEFAULT_NONFINITE_LOSS: NonFiniteLoss = cast(Any, _DefaultRaise("raise"))


def is_default_nonfinite_loss(value: object) -> bool:
    """Whether ``value`` is the default, not set by the user (then it steps aside for Lightning's handling)."""
    return type(value) is _DefaultRaise


def steps_aside_for_lightning(value: object) -> bool:
    """Whether this setting leaves a non-finite loss to Lightning's own handling where that is on:
    ``"warn"`` (it changes nothing in the run) and the typed module's default."""
    return is_default_nonfinite_loss(value) or (type(value) is str and value == "warn")


_NONFINITE_CHOICES = ("raise", "warn", "skip", None)


@dataclass(frozen=True)
class LossLogging:
    """Log each stage's loss through Lightning's own ``self.log``, weighted by batch size.

    The adapter makes, inside the step, the call a user would write, e.g. for training
    ``self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=n)``
    and for validation/test ``self.log("val_loss", loss, on_step=False, on_epoch=True,
    prog_bar=True, batch_size=n)``; ``n`` is the result's ``batch_size`` when it states one,
    otherwise Lightning infers it from the batch as usual. A name of ``None`` turns that stage off.
    Under ``StepResultAdapter``, a step's own return is logged too: a loss tensor, or a dict's
    ``"loss"``, where it holds one real floating value (in training/validation/test alike).
    """

    train: str | None = "train_loss"
    val: str | None = "val_loss"
    test: str | None = "test_loss"
    prog_bar: bool = True
    sync_dist: bool = False

    def name_for(self, hook_name: str) -> str | None:
        if hook_name == "training_step":
            return self.train
        return self.val if hook_name == "validation_step" else self.test


@dataclass(frozen=True)
class StepPolicy:
    """The adapter's settings for one module: ``strict`` accepts only typed results."""

    strict: bool
    nonfinite_loss: NonFiniteLoss = "raise"
    log_loss: LossLogging | None = None

    def __post_init__(self) -> None:
        if self.nonfinite_loss not in _NONFINITE_CHOICES:
            raise ValueError(f"nonfinite_loss={self.nonfinite_loss!r}: expected one of 'raise', 'warn', 'skip' or None")

    @staticmethod
    @functools.cache
    def of(strict: bool, nonfinite_loss: NonFiniteLoss, log_loss: bool | LossLogging = False) -> StepPolicy:
        """A shared instance per setting: the adapter reads the policy on every step."""
        if log_loss is True:
            logging: LossLogging | None = LossLogging()
        # Checks what the caller passed, whatever its annotation said (None and bad values happen).
        elif log_loss is False or log_loss is None:  # pyright: ignore[reportUnnecessaryComparison]
            logging = None
        elif isinstance(log_loss, LossLogging):  # pyright: ignore[reportUnnecessaryIsInstance]
            logging = log_loss
        else:
            raise ValueError(f"log_loss={log_loss!r}: expected True, False or a LossLogging(...)")
        return StepPolicy(strict, nonfinite_loss, logging)
