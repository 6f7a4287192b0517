"""Declared metrics: ``StepMetric`` bindings, and the checks and copies made of them at setup.

A module declares ``{"acc": StepMetric(Accuracy(...), update=lambda result, batch: (...))}`` in
``TypedLightningModule.configure_step_metrics`` (or passes it as ``StepResultAdapter(metrics=...)``).
At setup each entry is checked and deep-copied once per stage it names; a validation or test
stage gets one more copy per extra dataloader when that loader first runs. What happens to the
copies after each step is in ``metric_updates``; the messages of per-step failures are in
``metric_messages``.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, cast

import torch
from torchmetrics import Metric, MetricCollection
from typing_extensions import TypeVar

from lightning_step_types.adapter import STEP_HOOKS, module_state
from lightning_step_types.errors import StepResultError, describe, short_repr
from lightning_step_types.metric_messages import callable_name, describe_callable, short_str
from lightning_step_types.metric_updates import STAGES as STAGES  # the rest of the package imports these from here
from lightning_step_types.metric_updates import CONTAINER_ATTRIBUTE as CONTAINER_ATTRIBUTE
from lightning_step_types.metric_updates import MetricSet as MetricSet
from lightning_step_types.metric_updates import StageCopies
from lightning_step_types.metric_updates import StepMetricCopies as StepMetricCopies
from lightning_step_types.metric_updates import iter_stage_copies as iter_stage_copies
from lightning_step_types.metric_updates import metric_sets_of as metric_sets_of
from lightning_step_types.metric_updates import stage_of as stage_of
from lightning_step_types.metric_updates import step_metric_objects as step_metric_objects
from lightning_step_types.policy import StepPolicy

__all__ = ["StepMetric", "step_metric_objects"]

# Words users write for a stage -> the stage.
_STAGE_ALIASES = {
    "training": "train",
    "fit": "train",
    "validation": "val",
    "valid": "val",
    "validate": "val",
    "testing": "test",
}
DEFAULT_LOG_NAME = "{stage}_{name}"

ResultT = TypeVar("ResultT", contravariant=True, default=Any)  # what `update` reads (see the stubs)


class StepMetric(Generic[ResultT]):
    """A torchmetrics metric fed by each step's checked result: declared once, copied per stage.

    Args:
        metric: a ``torchmetrics.Metric`` or ``MetricCollection``. It is a template: each stage
            (and each extra validation/test dataloader) gets its own deep copy, so no state is
            ever shared between training and validation.
        update: ``update(result, batch)`` gets the step's typed result (for ``StepResultAdapter``
            on a legacy dict return, a read-only view of that dict) and the batch, and returns the
            positional arguments of ``metric.update`` as a tuple, e.g.
            ``lambda result, batch: (result.metadata["logits"], batch[1])``.
        stages: where it runs, any of ``"train"``, ``"val"``, ``"test"``.
        prog_bar: show the epoch value in the progress bar.
        on_step: in training, log the batch value as well (``train_acc_step`` and
            ``train_acc_epoch``, as Lightning names them). It costs one ``self.log`` and one
            ``metric(...)`` per step; epoch values alone cost one ``self.log`` per epoch.
        log_name: the logged name, with ``{stage}`` and ``{name}`` (the entry's key, or a
            ``MetricCollection`` member's name) filled in; default ``"{stage}_{name}"``.
    """

    __slots__ = ("metric", "update", "stages", "prog_bar", "on_step", "log_name")

    def __init__(
        self,
        metric: Metric | MetricCollection,
        update: Callable[[ResultT, Any], tuple[Any, ...]],
        stages: Sequence[str] = STAGES,
        *,
        prog_bar: bool = False,
        on_step: bool = False,
        log_name: str = DEFAULT_LOG_NAME,
    ) -> None:
        self.metric = metric
        self.update = update
        self.stages = tuple(stages) if isinstance(stages, (tuple, list)) else stages
        self.prog_bar = prog_bar
        self.on_step = on_step
        self.log_name = log_name

    def __repr__(self) -> str:
        return (
            f"StepMetric({type(self.metric).__name__}(...), update={callable_name(self.update)},"
            f" stages={self.stages!r})"
        )


def build_metric_set(
    declared_by: str, entries: object, taken_names: Mapping[str, str] | None = None, container: bool = False
) -> MetricSet:
    """Check a declaration and make its per-stage copies; raise ``StepResultError`` naming the entry.

    ``taken_names`` maps log names something else logs already (the loss logging, another set)
    to who logs them.
    """
    metric_set = MetricSet(declared_by)
    if container:
        metric_set.container = StepMetricCopies()
    if not isinstance(entries, Mapping):
        raise StepResultError(
            "the declared metrics",
            describe(entries),
            "a mapping from names to StepMetric, e.g. {'acc': StepMetric(Accuracy(...), update=...)}",
            "return a dict: `return {'acc': StepMetric(...)}`",
            declared_by,
        )
    taken: dict[str, str] = dict(taken_names or {})
    for entry, binding in cast("Mapping[object, object]", entries).items():
        _check_entry(declared_by, entry, binding)
        entry = cast(str, entry)
        binding = cast("StepMetric[Any]", binding)
        for stage in cast("tuple[str, ...]", binding.stages):
            first = copy.deepcopy(binding.metric)
            first.reset()
            stage_copies = StageCopies(metric_set, entry, stage, binding, binding.update, _log_names(entry, stage, binding), first)
            for name in stage_copies.names.values():
                if name in taken:
                    raise StepResultError(
                        f"[{entry!r}]",
                        f"log name {name!r} for stage {stage!r}, which {taken[name]} logs already",
                        "each declared metric logged under its own name",
                        _rename_fix(entry, binding, name),
                        declared_by,
                    )
                taken[name] = f"[{entry!r}]"
            metric_set.add(stage_copies)
            metric_set.register(stage_copies, 0, first)
    return metric_set


def attach_metric_set(module: Any, owner: object, metric_set: MetricSet, device: torch.device | None = None) -> None:
    """Make the adapter's per-step path update ``metric_set`` for ``module`` (replacing ``owner``'s previous set).

    Copies held by the module move with it; others are moved to ``device`` (where the module will run).
    """
    state = module_state(module)
    sets = {key: value for key, value in state.metric_sets.items() if key is not owner}
    sets[owner] = metric_set
    state.metric_sets = sets
    if metric_set.container is not None:
        # A child module: the strategy moves (and the precision plugin converts) it with the module.
        setattr(module, CONTAINER_ATTRIBUTE, metric_set.container)
    elif device is not None:
        for sc in metric_set.stage_copies:
            sc.copies[0].to(device)  # the copies of further dataloaders are made from these


def detach_metric_set(module: Any, owner: object) -> None:
    state = module_state(module)
    if owner in state.metric_sets:
        state.metric_sets = {key: value for key, value in state.metric_sets.items() if key is not owner}


def loss_log_names(policy: StepPolicy) -> dict[str, str]:
    """The names ``log_loss`` logs under, -> "log_loss" (declared metrics may not take them)."""
    names: dict[str, str] = {}
    if policy.log_loss is not None:
        for hook_name in STEP_HOOKS:
            name = policy.log_loss.name_for(hook_name)
            if name is not None:
                names[name] = "log_loss"
    return names


def taken_log_names(module: Any, besides: object) -> dict[str, str]:
    """Log names the module's other metric sets use, -> who declared them."""
    taken: dict[str, str] = {}
    for owner, metric_set in module_state(module).metric_sets.items():
        if owner is not besides and isinstance(metric_set, MetricSet):
            for name, entry in metric_set.log_names().items():
                taken[name] = f"{metric_set.declared_by}[{entry!r}]"
    return taken


def _check_entry(declared_by: str, entry: object, binding: object) -> None:
    if not isinstance(entry, str) or not entry:
        raise StepResultError(
            f"[{short_repr(entry)}]",
            f"key {describe(entry)}",
            "a non-empty str: the name the metric is logged under",
            f"use a string key, e.g. '{short_str(entry)}'",
            declared_by,
        )
    where = f"[{entry!r}]"
    if not isinstance(binding, StepMetric):
        metric_like = isinstance(binding, (Metric, MetricCollection))
        raise StepResultError(
            where,
            describe(binding),
            "a StepMetric: the metric with the `update` that feeds it from each step's result",
            (
                f"wrap it: `{entry!r}: StepMetric({type(binding).__name__}(...), update=lambda result, batch:"
                " (result.metadata['preds'], batch[1]))`"
                if metric_like
                else f"declare `{entry!r}: StepMetric(<a torchmetrics metric>, update=lambda result, batch: (...))`"
            ),
            declared_by,
        )
    typed: StepMetric[Any] = binding  # pyright: ignore[reportUnknownVariableType]  # isinstance leaves the type argument unknown
    if not isinstance(typed.metric, (Metric, MetricCollection)):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise StepResultError(
            f"{where}.metric",
            describe_callable(typed.metric),
            "a torchmetrics.Metric or MetricCollection: Lightning computes, syncs and resets those",
            "use a torchmetrics metric, e.g. `torchmetrics.MeanMetric()`, or write one by subclassing"
            " `torchmetrics.Metric`",
            declared_by,
        )
    if not callable(typed.update):
        raise StepResultError(
            f"{where}.update",
            describe(typed.update),
            "a function update(result, batch) returning the arguments of metric.update as a tuple",
            "pass e.g. `update=lambda result, batch: (result.metadata['preds'], batch[1])`",
            declared_by,
        )
    stages = typed.stages
    if not isinstance(stages, tuple) or not stages:
        raise StepResultError(
            f"{where}.stages",
            describe(stages),
            "a non-empty tuple of stages: 'train', 'val', 'test'",
            f"pass a tuple: `stages=({stages!r},)`" if isinstance(stages, str) else "pass e.g. `stages=('val', 'test')`",
            declared_by,
        )
    for stage in cast("tuple[object, ...]", stages):
        if stage not in STAGES:
            raise StepResultError(
                f"{where}.stages",
                f"{describe(stage)} in {short_repr(stages)}",
                "stages among 'train', 'val' and 'test'",
                _stage_fix(stage, cast("tuple[object, ...]", stages)),
                declared_by,
            )
    if len(set(stages)) != len(stages):
        raise StepResultError(
            f"{where}.stages",
            short_repr(stages),
            "each stage once",
            f"pass `stages={tuple(dict.fromkeys(stages))!r}`",
            declared_by,
        )


def _rename_fix(entry: str, binding: StepMetric[Any], clashing: str) -> str:
    own = "{stage}_" + entry + ("_{name}" if isinstance(binding.metric, MetricCollection) else "")
    if own != binding.log_name and clashing not in _log_names(entry, "train", binding, own).values():
        return f"give {entry!r} a name of its own: `StepMetric(..., log_name={own!r})`, or another key"
    return f"rename the entry, e.g. to '{entry}_metric'"


def _stage_fix(stage: object, stages: tuple[object, ...]) -> str:
    close = _STAGE_ALIASES.get(stage) if isinstance(stage, str) else None
    if close is None and isinstance(stage, str):
        matches = difflib.get_close_matches(stage, STAGES, n=1, cutoff=0.5)
        close = matches[0] if matches else None
    if close is None:
        return "name the stages 'train', 'val' or 'test'"
    fixed = tuple(close if s == stage else s for s in stages)
    return f"write {close!r} for {stage!r}: `stages={fixed!r}`"


def _log_names(entry: str, stage: str, binding: StepMetric[Any], template: str | None = None) -> dict[str | None, str]:
    metric = binding.metric
    template = binding.log_name if template is None else template
    if isinstance(metric, MetricCollection):
        return {
            str(member): template.format(stage=stage, name=member)
            for member in metric.keys(keep_base=False)  # with the collection's own prefix/postfix
        }
    return {None: template.format(stage=stage, name=entry)}
