"""``StepResultAdapter``: adapts an existing LightningModule's steps for one run, then puts them back."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from lightning_step_types.adapter import STEP_HOOKS, adapted_bound_step
from lightning_step_types.module import TypedLightningModule
from lightning_step_types.policy import NonFiniteLoss, StepPolicy

__all__ = ["StepResultAdapter"]

_MISSING = object()


class StepResultAdapter(pl.Callback):
    """``Trainer(callbacks=[StepResultAdapter()])`` checks every step return of any LightningModule.

    By default it accepts what Lightning accepts (a loss Tensor, a dict with ``"loss"``, None,
    or the typed results), turns the returns that would crash deep inside torch into a
    ``StepResultError``, and warns (``StepResultWarning``) about returns Lightning silently
    ignores. ``strict=True`` accepts only typed results, like ``TypedLightningModule``.
    ``nonfinite_loss`` says what a NaN or infinite loss does (see ``TypedLightningModule``).

    The module's step methods are wrapped on the instance from ``setup`` until ``teardown``
    (or an exception); afterwards the module is exactly as it was.
    """

    def __init__(self, strict: bool = False, nonfinite_loss: NonFiniteLoss = "raise") -> None:
        self.policy = StepPolicy.of(strict, nonfinite_loss)
        # module id -> {hook name: the instance attribute it had before, or _MISSING}
        self._replaced: dict[int, dict[str, Any]] = {}

    @property
    def strict(self) -> bool:
        return self.policy.strict

    @property
    def state_key(self) -> str:
        return self._generate_state_key(strict=self.policy.strict, nonfinite_loss=self.policy.nonfinite_loss)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if isinstance(pl_module, TypedLightningModule) or id(pl_module) in self._replaced:
            return  # a typed module adapts itself
        replaced: dict[str, Any] = {}
        for hook_name in STEP_HOOKS:
            if _defines(pl_module, hook_name):
                replaced[hook_name] = pl_module.__dict__.get(hook_name, _MISSING)
                pl_module.__dict__[hook_name] = adapted_bound_step(pl_module, hook_name, self.policy)
        self._replaced[id(pl_module)] = replaced

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore(pl_module)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore(pl_module)

    def _restore(self, pl_module: pl.LightningModule) -> None:
        for hook_name, previous in self._replaced.pop(id(pl_module), {}).items():
            if previous is _MISSING:
                del pl_module.__dict__[hook_name]
            else:
                pl_module.__dict__[hook_name] = previous


def _defines(module: pl.LightningModule, hook_name: str) -> bool:
    """Whether the user wrote this step (Lightning's own default only warns or raises)."""
    if hook_name in module.__dict__:
        return True
    return getattr(type(module), hook_name) is not getattr(pl.LightningModule, hook_name)
