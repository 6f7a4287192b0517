"""The adapter callback: adapts an existing LightningModule's steps for one run, then puts them back.

Mixed into each Lightning flavour's ``Callback`` as ``StepResultAdapter``.
"""

from __future__ import annotations

import operator
import types
import warnings
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import lightning_step_types.metrics.stage_isolation as stage_isolation
import lightning_step_types.resume.epoch_state as epoch_state
from lightning_step_types.errors import StepResultWarning
from lightning_step_types.metrics import (
    MetricSet,
    StepMetric,
    attach_metric_set,
    build_metric_set,
    detach_metric_set,
    loss_log_names,
)
from lightning_step_types.metrics.updates import end_of_stage
from lightning_step_types.module import TypedModuleMixin, module_policy
from lightning_step_types.policy import LossLogging, NonFiniteLoss, StepPolicy, steps_aside_for_lightning
from lightning_step_types.step.adapter import STEP_HOOKS, set_nonfinite_deferral
from lightning_step_types.step.compiled_logging import log_after_compiled_step
from lightning_step_types.step.wrapping import (
    adapted_bound_step,
    compiles_its_steps,
    defining_class,
    is_lightning_default,
)

__all__ = ["StepResultAdapterMixin"]

_MISSING = object()


class StepResultAdapterMixin:
    """``Trainer(callbacks=[StepResultAdapter()])`` checks every step return of any LightningModule.

    By default it accepts what Lightning accepts (a loss Tensor, a dict with ``"loss"``, None,
    or the typed results), turns the returns that would crash deep inside torch into a
    ``StepResultError``, and warns (``StepResultWarning``) about returns Lightning silently
    ignores. ``strict=True`` accepts only typed results, like ``TypedLightningModule``.
    ``nonfinite_loss``, ``log_loss`` and ``exact_resume`` work as on ``TypedLightningModule``, but a
    non-finite loss only warns by default (``"warn"``: one ``StepResultWarning`` per run, and
    training goes on as without the adapter); ``nonfinite_loss="raise"`` stops the run before backward.

    ``metrics={"acc": StepMetric(...)}`` declares metrics fed by each step's result, as
    ``TypedLightningModule.configure_step_metrics`` does; for a legacy dict return, ``update``
    gets a read-only view of that dict. Their copies live on the callback, not the module.

    The module's step methods are wrapped on the instance from ``setup`` until ``teardown``
    (or an exception); afterwards the module is exactly as it was. Pickled, saved with
    ``torch.save`` or deep-copied during the run, the module is copied without the wrappers: the
    copy is the plain module. A ``TypedLightningModule`` adapts itself with its own settings, and
    the callback leaves it alone (its ``metrics`` still apply).
    """

    def __init__(
        self,
        strict: bool = False,
        nonfinite_loss: NonFiniteLoss = "warn",
        log_loss: bool | LossLogging = False,
        exact_resume: bool = True,
        metrics: Mapping[str, StepMetric[Any]] | None = None,
    ) -> None:
        super().__init__()
        self.policy: StepPolicy = StepPolicy.of(strict, nonfinite_loss, log_loss)
        # Lightning reads `state_key` on every call of every callback hook (it names the profiler
        # action), six times per training step: built once, and read with no Python call (below).
        settings = f"{{'strict': {self.policy.strict}, 'nonfinite_loss': {self.policy.nonfinite_loss!r}}}"
        self._state_key = type(self).__qualname__ + settings
        self.exact_resume = exact_resume
        # "warn" (the default) steps aside for Lightning's own non-finite handling (set_nonfinite_deferral)
        self._steps_aside = steps_aside_for_lightning(nonfinite_loss)
        # module id -> {hook name: the instance attribute it had before, or _MISSING}
        self._replaced: dict[int, dict[str, Any]] = {}
        self.metrics = metrics
        if metrics is not None:  # a wrong declaration fails here, not at the first step
            self._metric_set(self.policy)

    def _metric_set(self, policy: StepPolicy) -> MetricSet:
        return build_metric_set(f"{type(self).__name__}(metrics=...)", self.metrics, loss_log_names(policy))

    @property
    def strict(self) -> bool:
        return self.policy.strict

    if TYPE_CHECKING:

        @property
        def state_key(self) -> str: ...

    else:
        # A read-only property like Callback's, whose getter is C code (`attrgetter`): Lightning's read
        # of it runs no Python function, where Callback's own property runs one.
        state_key = property(operator.attrgetter("_state_key"), doc="The callback's key in a checkpoint.")

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.metrics is not None and stage != "predict":  # predict_step's outputs feed no metric
            self._attach_metrics(trainer, pl_module)
        if self._keeps_epoch_state(pl_module):
            epoch_state.fit_starts(trainer, pl_module, stage)
        if isinstance(pl_module, TypedModuleMixin):
            self._warn_if_overridden(pl_module)
            return
        if id(pl_module) in self._replaced:
            return
        set_nonfinite_deferral(trainer, pl_module, self._steps_aside)
        replaced: dict[str, Any] = {}
        for hook_name in STEP_HOOKS:
            if _user_defines(pl_module, hook_name):
                replaced[hook_name] = pl_module.__dict__.get(hook_name, _MISSING)
                pl_module.__dict__[hook_name] = adapted_bound_step(pl_module, hook_name, self.policy)
        if replaced and compiles_its_steps(pl_module):  # the compiled steps' self.log calls are made after them
            replaced["log"] = pl_module.__dict__.get("log", _MISSING)
            pl_module.__dict__["log"] = types.MethodType(log_after_compiled_step, pl_module)
        if replaced:
            replaced["__getstate__"] = pl_module.__dict__.get("__getstate__", _MISSING)
            pl_module.__dict__["__getstate__"] = _StateWithoutWrappers(pl_module, replaced)
        self._replaced[id(pl_module)] = replaced

    def _warn_if_overridden(self, pl_module: TypedModuleMixin) -> None:
        """A typed module keeps its own settings: say so when this callback was given other ones."""
        own = module_policy(pl_module)
        mine = self.policy
        # the callback's own default ("warn") is no setting given for the typed module
        nonfinite_given = mine.nonfinite_loss not in ("warn", own.nonfinite_loss)
        if not nonfinite_given and mine.log_loss == own.log_loss:
            return
        warnings.warn(
            StepResultWarning(
                f"{type(self).__name__}(nonfinite_loss={mine.nonfinite_loss!r}, log_loss={_shown(mine.log_loss)}) is"
                f" ignored for {type(pl_module).__qualname__}: a TypedLightningModule adapts its own steps with"
                f" its own settings (nonfinite_loss={own.nonfinite_loss!r}, log_loss={_shown(own.log_loss)});"
                " set `nonfinite_loss` / `log_loss` on the module class instead"
            ),
            stacklevel=2,
        )

    def _attach_metrics(self, trainer: Any, pl_module: Any) -> None:
        """Fresh copies for this run, kept off the module (it pickles as it was), on the device it will run on."""
        policy = module_policy(pl_module) if isinstance(pl_module, TypedModuleMixin) else self.policy
        # A typed module's own declared metrics are checked against these when it attaches them.
        attach_metric_set(pl_module, self, self._metric_set(policy), device=trainer.strategy.root_device)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._keeps_epoch_state(pl_module):
            epoch_state.fit_ends(trainer, pl_module)
        self._restore(pl_module)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._restore(pl_module)

    # Exact resume (resume/epoch_state.py), for modules this callback adapts; a typed module keeps its own
    # through its own hooks.
    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self._keeps_epoch_state(pl_module):
            epoch_state.save_epoch_state(trainer, pl_module, checkpoint)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        if self._keeps_epoch_state(pl_module):
            epoch_state.load_epoch_state(trainer, pl_module, checkpoint)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        end_of_stage(pl_module, self, "train", f"{type(self).__name__}.on_train_epoch_end")

    # The declared metrics check what each stage's epoch fed them (metric_updates.end_of_stage).
    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        end_of_stage(pl_module, self, "val", f"{type(self).__name__}.on_validation_epoch_end")

    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        end_of_stage(pl_module, self, "test", f"{type(self).__name__}.on_test_epoch_end")

    # Stage isolation (metrics/stage_isolation.py), for modules this callback adapts; a typed module checks itself.
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if not isinstance(pl_module, TypedModuleMixin):
            stage_isolation.training_epoch_started(trainer, pl_module)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not isinstance(pl_module, TypedModuleMixin):
            stage_isolation.validation_started(trainer, pl_module)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not isinstance(pl_module, TypedModuleMixin):
            stage_isolation.validation_ended(trainer, pl_module)

    def _keeps_epoch_state(self, pl_module: Any) -> bool:
        return self.exact_resume and not isinstance(pl_module, TypedModuleMixin)

    def _restore(self, pl_module: Any) -> None:
        detach_metric_set(pl_module, self)
        if id(pl_module) in self._replaced:
            set_nonfinite_deferral(None, pl_module, False)
        for hook_name, previous in self._replaced.pop(id(pl_module), {}).items():
            if previous is _MISSING:
                del pl_module.__dict__[hook_name]
            else:
                pl_module.__dict__[hook_name] = previous


class _StateWithoutWrappers:
    """An adapted module's ``__getstate__`` for the run: its state as it would be without the adapter.

    ``pickle``, ``torch.save`` and ``copy.deepcopy`` (and ``copy.copy``) all take an object's state
    from ``obj.__getstate__()``, looked up on the instance first. Set in the instance ``__dict__``
    beside the wrappers, this one calls the class's own ``__getstate__`` (``LightningModule``'s drops
    the Trainer) and puts back what the wrappers replaced, so the copy is the plain module: the
    wrappers, closures over this module, would otherwise fail to pickle and would tie a deep copy to
    the original. The copy is never adapted; a later run with the adapter adapts it afresh.
    """

    __slots__ = ("_module", "_replaced")

    def __init__(self, module: Any, replaced: dict[str, Any]) -> None:
        self._module = weakref.ref(module)  # the module holds this object: no cycle to wait for the GC
        self._replaced = replaced  # name -> what the instance __dict__ had before the adapter, or _MISSING

    def __call__(self) -> object:
        module: Any = self._module()
        previous: Any = self._replaced["__getstate__"]
        if isinstance(previous, _StateWithoutWrappers):  # a second adapter: the first one knows the originals
            return previous()
        if previous is not _MISSING:
            state: object = previous()
        else:  # the class's (Python 3.10's object has none: its default state is the __dict__)
            class_getstate: Any = getattr(module.__class__, "__getstate__", None)
            state = class_getstate(module) if class_getstate is not None else module.__dict__
        if not isinstance(state, dict):  # a class with its own kind of state keeps it
            return state
        # A copy: a __getstate__ may return the live __dict__, and the module keeps its wrappers.
        plain: dict[str, Any] = dict(cast("dict[str, Any]", state))
        for name, before in self._replaced.items():
            if before is _MISSING:
                plain.pop(name, None)
            else:
                plain[name] = before
        return plain


def _shown(log_loss: LossLogging | None) -> str:
    """A ``log_loss`` setting as the user writes it."""
    if log_loss is None:
        return "False"
    return "True" if log_loss == LossLogging() else repr(log_loss)


def _user_defines(module: Any, hook_name: str) -> bool:
    """Whether the user wrote this step (Lightning's own default only warns or raises)."""
    if hook_name in module.__dict__:
        return True
    owner = defining_class(type(module).__mro__, hook_name)
    return owner is not None and not is_lightning_default(owner)
