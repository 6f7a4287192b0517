"""Stage isolation: a torchmetrics object that training and validation share in one fit is named, once.

Validation can run in the middle of a training epoch (``val_check_interval``), and at the end of
one before the training epoch's values are computed. A metric object that both stages update or
log is then updated with validation batches and reset by Lightning at the end of validation, so
the training epoch's value is wrong (Lightning #11601). Validation and test may share an object:
each loop resets it, and test never runs inside a fit.

Nothing here runs per step. The checks run at stage boundaries, from each metric's public
``update_count`` and Lightning's result collections (``lightning_internals.py``):

- at the start of each training epoch, every metric's ``update_count`` is noted;
- at the start of each validation run of a fit, a metric is *training-used* when its
  ``update_count`` moved since then, or training logged it this epoch (``self.log(name, metric)``);
  ``metric(preds, target)`` counts as an update, since ``forward`` calls ``update``;
- at the end of that validation run, a training-used metric whose ``update_count`` moved, or that
  validation logged, is shared: one ``StepResultWarning`` per object. The counts expected when
  training goes on are noted: Lightning resets every metric its validation results hold right
  after the ``on_validation_end`` hooks, the others keep theirs.

``TypedLightningModule`` calls these from its own hooks, ``StepResultAdapter`` from its callback
hooks (for the modules it adapts): one implementation for both ways in.
"""

from __future__ import annotations

import inspect
import sys
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch

from lightning_step_types.errors import StepResultWarning, format_problem
from lightning_step_types.lightning_internals import (
    evaluation_results,
    logged_metric_objects,
    training_epoch_results,
)

__all__ = ["BOUNDARY_HOOKS", "training_epoch_started", "validation_ended", "validation_started"]


class _Isolation:
    """What one module's checks remember between two stage boundaries of a fit.

    Metrics are keyed by ``id``: a torchmetrics ``Metric`` hashes its current states, so its hash
    changes with every update. The module holds them, so no id is reused while it is noted here.
    """

    __slots__ = ("trainer", "expected", "trained", "warned")

    def __init__(self) -> None:
        self.trainer: weakref.ref[Any] | None = None  # the fit whose training epoch is running
        # id(metric) -> its update_count when training goes on (at the epoch's start, after each validation run)
        self.expected: dict[int, int] = {}
        # training-used metrics during a validation run: id(metric) -> (path, metric, update_count at the run's start)
        self.trained: dict[int, tuple[str, Any, int]] = {}
        # id(metric) -> the metric, for one warning per object (weakly: a warned metric may be dropped)
        self.warned: dict[int, weakref.ref[Any]] = {}

    def was_warned(self, metric: Any) -> bool:
        ref = self.warned.get(id(metric))
        return ref is not None and ref() is metric


_STATES: weakref.WeakKeyDictionary[torch.nn.Module, _Isolation] = weakref.WeakKeyDictionary()


def training_epoch_started(trainer: Any, module: torch.nn.Module) -> None:
    """Note every metric's ``update_count`` (Lightning has reset the last epoch's logged metrics)."""
    metrics = _metrics_of(module)
    if not metrics and module not in _STATES:
        return
    state = _STATES.setdefault(module, _Isolation())
    state.trainer = weakref.ref(trainer)
    state.expected = {id(metric): metric.update_count for metric in metrics.values()}
    state.trained = {}


def validation_started(trainer: Any, module: torch.nn.Module) -> None:
    """Note the metrics training has used since its epoch started, with their ``update_count`` now."""
    state = _fit_state(trainer, module)
    if state is None:
        return
    logged = {id(metric) for metric, _ in logged_metric_objects(training_epoch_results(trainer), since_reset=True)}
    state.trained = {
        id(metric): (path, metric, metric.update_count)
        for path, metric in _metrics_of(module).items()
        if not state.was_warned(metric)
        and (metric.update_count != state.expected.get(id(metric), 0) or id(metric) in logged)
    }


def validation_ended(trainer: Any, module: torch.nn.Module) -> None:
    """Warn about each training-used metric that validation updated or logged; note the counts training resumes with."""
    state = _fit_state(trainer, module)
    if state is None:
        return
    results = evaluation_results(trainer)
    logged_now = {id(metric) for metric, _ in logged_metric_objects(results, since_reset=True)}
    for key, (path, metric, count) in state.trained.items():
        if metric.update_count != count or key in logged_now:
            state.warned[key] = weakref.ref(metric)
            _warn(module, path, metric)
    state.trained = {}
    reset_next = {id(metric) for metric, _ in logged_metric_objects(results, since_reset=False)}
    state.expected = {
        id(metric): 0 if id(metric) in reset_next else metric.update_count for metric in _metrics_of(module).values()
    }


def _fit_state(trainer: Any, module: torch.nn.Module) -> _Isolation | None:
    """The module's state during a validation run inside the training epoch of a fit, else None
    (the sanity check, ``validate``, or a fit whose training epoch has not started)."""
    if trainer.sanity_checking or trainer.state.fn != "fit":  # TrainerFn is a str enum
        return None
    state = _STATES.get(module)
    if state is None or state.trainer is None or state.trainer() is not trainer:
        return None
    return state


def _metrics_of(module: torch.nn.Module) -> dict[str, Any]:
    """The module's torchmetrics objects by attribute path (``self.acc``, ``self.metrics[0]``,
    ``self.collection['acc']``); a ``MetricCollection`` contributes its members."""
    torchmetrics = sys.modules.get("torchmetrics")
    if torchmetrics is None:  # no metric object can exist
        return {}
    metric_type: type = torchmetrics.Metric
    found: dict[str, Any] = {}
    children = cast("Iterator[tuple[str, torch.nn.Module]]", module.named_modules())
    for name, child in children:
        if name and isinstance(child, metric_type):
            found[_attribute_path(module, name)] = child
    return found


def _attribute_path(module: torch.nn.Module, dotted: str) -> str:
    """``metrics.0`` -> ``self.metrics[0]``, ``collection.acc`` -> ``self.collection['acc']``."""
    path, parent = "self", module
    for part in dotted.split("."):
        if isinstance(parent, (torch.nn.ModuleList, torch.nn.Sequential)) and part.isdigit():
            path += f"[{part}]"
        elif isinstance(parent, torch.nn.ModuleDict):  # MetricCollection is a ModuleDict
            path += f"[{part!r}]"
        else:
            path += f".{part}"
        parent = parent.get_submodule(part)
    return path


def _warn(module: torch.nn.Module, path: str, metric: object) -> None:
    owner = type(module).__qualname__
    training, validation = f"{owner}.training_step", f"{owner}.validation_step"
    kind: type[object] = type(metric)
    warning = StepResultWarning(
        format_problem(
            path,
            f"one {kind.__module__}.{kind.__qualname__} object updated or logged in both training and validation:"
            " validation updates and resets it in the middle of the training epoch, so the training value is wrong"
            " and the validation value counts training batches",
            "one metric object per stage (validation and test may share one)",
            f"give validation its own object, {_clone_hint(module, path)}, and use it in {validation};"
            f" or declare the metric once {_declaration_hint(module)}, which keeps one copy per stage",
            f"{training} and {validation}",
        )
    )
    source = _source_of(type(module), "validation_step")
    if source is None:
        warnings.warn(warning, stacklevel=3)
    else:  # no frame of the user's is on the stack at a stage boundary: point at the validation step
        warnings.warn_explicit(warning, StepResultWarning, *source)


def _clone_hint(module: torch.nn.Module, path: str) -> str:
    attribute = path.removeprefix("self.")
    if attribute.isidentifier():  # a plain attribute: suggest the validation one's name
        if attribute.startswith("train_"):
            name = "val_" + attribute.removeprefix("train_")
        elif attribute.endswith("_train"):
            name = attribute.removesuffix("_train") + "_val"
        else:
            name = "val_" + attribute
        if name not in vars(module) and name not in dict(module.named_children()):  # the name is free
            return f"`self.{name} = {path}.clone()` in `__init__`"
    return f"a `{path}.clone()` made in `__init__`"


def _declaration_hint(module: torch.nn.Module) -> str:
    from lightning_step_types.module import TypedModuleMixin

    if isinstance(module, TypedModuleMixin):
        return "in `configure_step_metrics`"
    return "with `StepResultAdapter(metrics=...)`"


def _source_of(cls: type, hook_name: str) -> tuple[str, int] | None:
    """Where the class's step is defined (its original, under the typed module's wrapper)."""
    step = getattr(cls, hook_name, None)
    code = getattr(inspect.unwrap(step), "__code__", None) if callable(step) else None
    return (code.co_filename, code.co_firstlineno) if code is not None else None


# Lightning hook -> what it checks; ``(trainer, module)`` each.
BOUNDARY_HOOKS: dict[str, Callable[[Any, torch.nn.Module], None]] = {
    "on_train_epoch_start": training_epoch_started,
    "on_validation_start": validation_started,
    "on_validation_end": validation_ended,
}
