"""Stage isolation: a torchmetrics object that training and validation share in one fit, where that makes a
value wrong, is named, once.

Validation can run in the middle of a training epoch (``val_check_interval``), and at the end of
one before the training epoch's values are computed. A metric object that both stages update or
log is then updated with validation batches and reset by Lightning at the end of validation, so
the training epoch's value is wrong (Lightning #11601). Validation and test may share an object:
each loop resets it, and test never runs inside a fit.

Nothing here runs per step. The checks run at stage boundaries, from each metric's public
``update_count`` and Lightning's result collections (``_lightning/``):

- at the start of each training epoch, every metric's ``update_count`` is noted;
- at the start of each validation run of a fit, a metric is *training-used* when its
  ``update_count`` moved since then, or training logged it this epoch (``self.log(name, metric)``);
  ``metric(preds, target)`` counts as an update, since ``forward`` calls ``update``;
- at the end of that validation run, a training-used metric whose ``update_count`` moved, or that
  validation logged, is shared. Sharing makes a value wrong only where a stage reads the object's
  accumulated state: where training (this epoch) or validation logged the object itself
  (``self.log(name, metric)``: Lightning computes it at the epoch's end and resets it), or where
  validation reset it (its ``update_count`` fell: a ``compute()`` and ``reset()`` written by hand).
  Such a shared object gets one ``StepResultWarning``. An object both stages use only through the
  batch values its ``forward`` returns (``self.log(name, metric(preds, target))``, as
  pytorch-forecasting's ``BaseModel`` uses its ``loss`` and ``logging_metrics``) logs right values
  whatever it accumulates, and is left alone. The counts expected when training goes on are
  noted: Lightning resets every metric its validation results hold right after the
  ``on_validation_end`` hooks, the others keep theirs.

A ``MetricCollection`` is one object: its count is its members' sum (with compute groups,
torchmetrics updates only a group's first member and copies its count to the others), and a
logged member counts as the collection logged. So a shared collection gets one warning, and the
members of a collection that is not shared are not looked at one by one.

The warning is issued on global rank 0 only (as Lightning's ``rank_zero_warn``); every rank keeps
the same bookkeeping.

``TypedLightningModule`` calls these from its own hooks, ``StepResultAdapter`` from its callback
hooks (for the modules it adapts): one implementation for both ways in.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
from torchmetrics import Metric, MetricCollection

from lightning_step_types._lightning.result_collection import (
    evaluation_results,
    logged_metric_objects,
    training_epoch_results,
)
from lightning_step_types.errors import StepResultWarning, format_problem
from lightning_step_types.metrics.updates import members, update_count
from lightning_step_types.step.adapter import source_of

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
        # training-used metrics during a validation run:
        # id(metric) -> (path, metric, update_count at the run's start, whether training logged the object)
        self.trained: dict[int, tuple[str, Any, int, bool]] = {}
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
    state.expected = {id(metric): update_count(metric) for metric in metrics.values()}
    state.trained = {}


def validation_started(trainer: Any, module: torch.nn.Module) -> None:
    """Note the metrics training has used since its epoch started, with their ``update_count`` now."""
    state = _fit_state(trainer, module)
    if state is None:
        return
    logged = _logged(training_epoch_results(trainer), since_reset=True)
    state.trained = {
        id(metric): (path, metric, update_count(metric), _any_member_in(metric, logged))
        for path, metric in _metrics_of(module).items()
        if not state.was_warned(metric)
        and (update_count(metric) != state.expected.get(id(metric), 0) or _any_member_in(metric, logged))
    }


def validation_ended(trainer: Any, module: torch.nn.Module) -> None:
    """Warn about each training-used metric that validation updated or logged; note the counts training resumes with."""
    state = _fit_state(trainer, module)
    if state is None:
        return
    results = evaluation_results(trainer)
    logged_now = _logged(results, since_reset=True)
    for key, (path, metric, count, logged_by_training) in state.trained.items():
        logged_by_validation = _any_member_in(metric, logged_now)
        shared = update_count(metric) != count or logged_by_validation
        # its accumulated state read: logged as an object by either stage, or reset by validation
        read = logged_by_training or logged_by_validation or update_count(metric) < count
        if shared and read:
            state.warned[key] = weakref.ref(metric)  # on every rank, so that each rank warns at most once
            if trainer.is_global_zero:
                _warn(module, path, metric)
    state.trained = {}
    reset_next = _logged(results, since_reset=False)
    state.expected = {
        id(metric): sum(0 if id(member) in reset_next else member.update_count for member in members(metric))
        for metric in _metrics_of(module).values()
    }


def _logged(results: Any, since_reset: bool) -> set[int]:
    """The ids of the metric objects logged into Lightning's results (collections log their members)."""
    return {id(metric) for metric, _ in logged_metric_objects(results, since_reset=since_reset)}


def _any_member_in(metric: Metric | MetricCollection, ids: set[int]) -> bool:
    return any(id(member) in ids for member in members(metric))


def _fit_state(trainer: Any, module: torch.nn.Module) -> _Isolation | None:
    """The module's state during a validation run inside the training epoch of a fit, else None
    (the sanity check, ``validate``, or a fit whose training epoch has not started)."""
    if trainer.sanity_checking or trainer.state.fn != "fit":  # TrainerFn is a str enum
        return None
    state = _STATES.get(module)
    if state is None or state.trainer is None or state.trainer() is not trainer:
        return None
    return state


def _metrics_of(module: torch.nn.Module) -> dict[str, Metric | MetricCollection]:
    """The module's torchmetrics objects by attribute path (``self.acc``, ``self.metrics[0]``,
    ``self.collection``); a ``MetricCollection`` is one object, its members are not listed."""
    found: dict[str, Metric | MetricCollection] = {}
    inside: tuple[str, ...] = ()  # the dotted names of the collections found, as prefixes of their members'
    children = cast("Iterator[tuple[str, torch.nn.Module]]", module.named_modules())
    for name, child in children:
        if not name or name.startswith(inside):
            continue
        if isinstance(child, MetricCollection):
            inside += (name + ".",)
            found[_attribute_path(module, name)] = child
        elif isinstance(child, Metric):
            found[_attribute_path(module, name)] = child
    return found


def _attribute_path(module: torch.nn.Module, dotted: str) -> str:
    """``metrics.0`` -> ``self.metrics[0]``, ``metrics.acc`` -> ``self.metrics['acc']``."""
    path, parent = "self", module
    for part in dotted.split("."):
        if isinstance(parent, (torch.nn.ModuleList, torch.nn.Sequential)) and part.isdigit():
            path += f"[{part}]"
        elif isinstance(parent, torch.nn.ModuleDict):
            path += f"[{part!r}]"
        else:
            path += f".{part}"
        parent = parent.get_submodule(part)
    return path


def _warn(module: torch.nn.Module, path: str, metric: Metric | MetricCollection) -> None:
    owner = type(module).__qualname__
    training, validation = f"{owner}.training_step", f"{owner}.validation_step"
    if isinstance(metric, MetricCollection):  # its public name, not torchmetrics.collections'
        kind_name, what = "torchmetrics.MetricCollection", "collection"
        consequence = "the training values are wrong and the validation values count training batches"
    else:
        kind: type[object] = type(metric)
        kind_name, what = f"{kind.__module__}.{kind.__qualname__}", "metric"
        consequence = "the training value is wrong and the validation value counts training batches"
    warning = StepResultWarning(
        format_problem(
            path,
            f"one {kind_name} object updated or logged in both training and validation:"
            f" validation updates and resets it in the middle of the training epoch, so {consequence}",
            "one metric object per stage (validation and test may share one)",
            f"give validation its own object, {_clone_hint(module, path, metric)}, and use it in {validation};"
            f" or declare the {what} once {_declaration_hint(module)}, which keeps one copy per stage",
            f"{training} and {validation}",
        )
    )
    step = getattr(type(module), "validation_step", None)
    source = source_of(step) if callable(step) else None
    if source is None:
        warnings.warn(warning, stacklevel=3)
    else:  # no frame of the user's is on the stack at a stage boundary: point at the validation step
        warnings.warn_explicit(warning, StepResultWarning, *source)


def _clone_hint(module: torch.nn.Module, path: str, metric: Metric | MetricCollection) -> str:
    # A collection's clone gets the validation prefix, for the names `self.log_dict(collection)` logs.
    clone = f'{path}.clone(prefix="val_")' if isinstance(metric, MetricCollection) else f"{path}.clone()"
    attribute = path.removeprefix("self.")
    if attribute.isidentifier():  # a plain attribute: suggest the validation one's name
        if attribute.startswith("train_"):
            name = "val_" + attribute.removeprefix("train_")
        elif attribute.endswith("_train"):
            name = attribute.removesuffix("_train") + "_val"
        else:
            name = "val_" + attribute
        if name not in vars(module) and name not in dict(module.named_children()):  # the name is free
            return f"`self.{name} = {clone}` in `__init__`"
    return f"a `{clone}` made in `__init__`"


def _declaration_hint(module: torch.nn.Module) -> str:
    # `configure_step_metrics` is the typed module's hook for declared metrics (a plain module has none).
    if callable(getattr(type(module), "configure_step_metrics", None)):
        return "in `configure_step_metrics`"
    return "with `StepResultAdapter(metrics=...)`"


# Lightning hook -> what it checks; ``(trainer, module)`` each.
BOUNDARY_HOOKS: dict[str, Callable[[Any, torch.nn.Module], None]] = {
    "on_train_epoch_start": training_epoch_started,
    "on_validation_start": validation_started,
    "on_validation_end": validation_ended,
}
