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
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, cast

import torch
from torchmetrics import Metric, MetricCollection
from typing_extensions import TypeVar

from lightning_step_types.errors import StepResultError, describe, short_repr
from lightning_step_types.metrics.copies import StageCopies
from lightning_step_types.metrics.messages import callable_name, describe_callable, short_str
from lightning_step_types.metrics.updates import CONTAINER_ATTRIBUTE as CONTAINER_ATTRIBUTE
from lightning_step_types.metrics.updates import STAGES as STAGES  # the rest of the package imports these from here
from lightning_step_types.metrics.updates import MetricSet as MetricSet
from lightning_step_types.metrics.updates import StepMetricCopies as StepMetricCopies
from lightning_step_types.metrics.updates import stage_of as stage_of
from lightning_step_types.metrics.values import declared_metric as declared_metric
from lightning_step_types.metrics.values import iter_stage_copies as iter_stage_copies
from lightning_step_types.metrics.values import metric_sets_of as metric_sets_of
from lightning_step_types.metrics.values import step_metric_objects as step_metric_objects
from lightning_step_types.policy import StepPolicy
from lightning_step_types.step.adapter import STEP_HOOKS, module_state

__all__ = ["StepMetric", "declared_metric", "step_metric_objects"]

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
        on_epoch: with ``on_step=True``, ``False`` logs the training batch values only, under
            the bare name (``train_acc``), as ``self.log_dict(metrics)`` in a training step does.
            Validation and test always log epoch values.
        log_name: the logged name, with ``{stage}`` and ``{name}`` (the entry's key, or a
            ``MetricCollection`` member's name) filled in; default ``"{stage}_{name}"``.
    """

    __slots__ = ("metric", "update", "stages", "prog_bar", "on_step", "on_epoch", "log_name")

    def __init__(
        self,
        metric: Metric | MetricCollection,
        update: Callable[[ResultT, Any], tuple[Any, ...]],
        stages: Sequence[str] = STAGES,
        *,
        prog_bar: bool = False,
        on_step: bool = False,
        on_epoch: bool = True,
        log_name: str = DEFAULT_LOG_NAME,
    ) -> None:
        self.metric = metric
        self.update = update
        # Any sequence of names (a list, a config's ListConfig) is kept as a tuple; a str is refused at setup.
        self.stages = _as_tuple(stages)
        self.prog_bar = prog_bar
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.log_name = log_name

    def __repr__(self) -> str:
        return (
            f"StepMetric({type(self.metric).__name__}(...), update={callable_name(self.update)},"
            f" stages={self.stages!r})"
        )


def _as_tuple(stages: Sequence[str]) -> Sequence[str]:
    """Any sequence of names (a list, a config's list) as a tuple; a str, or what is no sequence, as
    given (refused at setup, with its fix)."""
    if isinstance(stages, str) or not isinstance(stages, Sequence):  # pyright: ignore[reportUnnecessaryIsInstance]
        return stages
    return tuple(stages)


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
            names = _checked_log_names(declared_by, entry, stage, binding)
            stage_copies = StageCopies(metric_set, entry, stage, binding, binding.update, names, first)
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
            f"pass a tuple: `stages=({stages!r},)`"
            if isinstance(stages, str)
            else "pass e.g. `stages=('val', 'test')`",
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
    _check_training_options(declared_by, where, typed)
    _check_log_name(declared_by, where, typed.log_name)
    _check_one_value(declared_by, where, typed.metric)


def _check_training_options(declared_by: str, where: str, binding: StepMetric[Any]) -> None:
    """``on_step`` and ``on_epoch`` choose what training logs: refused where they would do nothing."""
    stages = cast("tuple[str, ...]", binding.stages)
    with_training = ("train", *stages)
    if binding.on_step and "train" not in stages:
        raise StepResultError(
            f"{where}.on_step",
            f"on_step=True with stages={stages!r}",
            "on_step=True in an entry that runs in 'train': validation and test log one value per epoch",
            f"drop `on_step=True`, or add the training stage: `stages={with_training!r}`",
            declared_by,
        )
    if not binding.on_epoch and not binding.on_step:
        raise StepResultError(
            f"{where}.on_epoch",
            "on_epoch=False with on_step=False: nothing would be logged in training",
            "on_epoch=False together with on_step=True: the training batch values only",
            "log the batch values only with `on_step=True, on_epoch=False`, or drop `on_epoch=False`",
            declared_by,
        )
    if not binding.on_epoch and "train" not in stages:
        raise StepResultError(
            f"{where}.on_epoch",
            f"on_epoch=False with stages={stages!r}",
            "on_epoch=False in an entry that runs in 'train': validation and test log one value per epoch",
            f"drop `on_epoch=False`, or add the training stage: `stages={with_training!r}`",
            declared_by,
        )


_LOG_NAME_FIELDS = ("stage", "name")


def _check_log_name(declared_by: str, where: str, template: object) -> None:
    """A ``log_name`` template whose fields are ``{stage}`` and ``{name}`` (each optional)."""
    example = f"`log_name={DEFAULT_LOG_NAME!r}`"
    if not isinstance(template, str):
        raise StepResultError(
            f"{where}.log_name",
            describe(template),
            "a str template with the fields {stage} and {name}",
            f"pass e.g. {example}",
            declared_by,
        )
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as error:
        raise StepResultError(
            f"{where}.log_name",
            f"{short_repr(template)}: ValueError: {error}",
            "a template with the fields {stage} and {name}; a literal brace is written twice ('{{' or '}}')",
            f"balance the braces, e.g. {example}",
            declared_by,
        ) from None
    for field in fields:
        base = field.partition(".")[0].partition("[")[0]
        if base in _LOG_NAME_FIELDS:
            continue
        close = difflib.get_close_matches(base, _LOG_NAME_FIELDS, n=1, cutoff=0.5) if base else []
        if close:
            fixed = template.replace("{" + field, "{" + close[0])
            fix = f"write {{{close[0]}}} for {{{field}}}: `log_name={fixed!r}`"
        else:
            fix = f"use only {{stage}} and {{name}}, e.g. {example}"
        raise StepResultError(
            f"{where}.log_name",
            f"{short_repr(template)}: unknown field {{{field}}}",
            "a template whose fields are {stage} (the stage: 'train', 'val', 'test') and {name} (the entry's key)",
            fix,
            declared_by,
        )


def _checked_log_names(declared_by: str, entry: str, stage: str, binding: StepMetric[Any]) -> dict[str | None, str]:
    try:
        return _log_names(entry, stage, binding)
    except (
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
    ) as error:  # a format spec or an attribute of a field
        raise StepResultError(
            f"[{entry!r}].log_name",
            f"{short_repr(binding.log_name)}: {type(error).__name__}: {error}",
            "a template with the fields {stage} and {name}, both str",
            f"pass e.g. `log_name={DEFAULT_LOG_NAME!r}`",
            declared_by,
        ) from None


def _check_one_value(declared_by: str, where: str, metric: Metric | MetricCollection) -> None:
    """Lightning logs one number per name: metrics whose kind gives more are refused here.

    Others that turn out to give more are refused at their first compute (``metric_updates``).
    """
    members = (
        list(metric.items(keep_base=True, copy_state=False))
        if isinstance(metric, MetricCollection)
        else [(None, metric)]
    )
    for member, member_metric in members:
        problem = many_values(member_metric)
        if problem is None:
            continue
        kind, fix = problem
        shown = f"{type(member_metric).__name__} ({kind})"
        raise StepResultError(
            f"{where}.metric" + (f"[{member!r}]" if member is not None else ""),
            f"{shown}: its compute() gives more than one value",
            "a metric whose compute() gives one value: Lightning logs one number per name",
            fix,
            declared_by,
        )


_OWN_EPOCH_END = (
    "keep it out of the declared metrics: update it in the step and read its compute()"
    " in on_validation_epoch_end (e.g. to plot it)"
)


def many_values(metric: Metric) -> tuple[str, str] | None:
    """(what it gives, the fix) for a metric whose kind says its compute() gives more than one value."""
    names = [cls.__name__ for cls in type(metric).__mro__]
    if any(name.endswith("ConfusionMatrix") for name in names):
        return "a confusion matrix", _OWN_EPOCH_END
    if any(name.endswith(("ROC", "PrecisionRecallCurve")) for name in names):
        return "a curve", _OWN_EPOCH_END
    average = getattr(metric, "average", "")
    if average is None or average == "none":
        return (
            f"average={average!r}: one value per class",
            "pass `average='macro'` (or 'micro', 'weighted') for one value",
        )
    if getattr(metric, "multidim_average", None) == "samplewise":
        return "multidim_average='samplewise': one value per sample", "pass `multidim_average='global'` for one value"
    return None


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
