"""Declared metrics: ``StepMetric`` bindings, their per-stage copies, their update and logging.

A module declares ``{"acc": StepMetric(Accuracy(...), update=lambda result, batch: (...))}`` in
``TypedLightningModule.configure_step_metrics`` (or passes it as ``StepResultAdapter(metrics=...)``).
At setup each entry is checked and deep-copied once per stage it names; a validation or test
stage gets one more copy per extra dataloader when that loader first runs. After every step,
``adapter.run_step`` hands the checked result to ``MetricSet.update``: the binding's ``update``
picks the arguments, the stage's copy is updated with them, and the copy is logged with
Lightning's own ``self.log(name, metric)``. Lightning then computes, syncs and resets it at the
epoch's end, as for the hand-written pattern.

Cost: Lightning keeps a reference to a logged metric object and calls ``compute()`` on it at the
epoch's end, so an epoch value needs one ``self.log`` per (stage, dataloader, epoch), not one per
step: a copy is logged at its first update in an epoch (in this process: after a mid-epoch resume
too), found by looking for it in Lightning's active result collection. Step values in training
(``on_step=True``) need the batch value, hence ``metric(...)`` (forward) and ``self.log`` each step.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, Literal, cast

import torch
from torchmetrics import Metric, MetricCollection
from typing_extensions import TypeVar

from lightning_step_types.adapter import STEP_HOOKS, module_state
from lightning_step_types.checks import StepCall
from lightning_step_types.errors import StepResultError, describe, describe_tensor, short_repr
from lightning_step_types.lightning_internals import (
    LoggingContext,
    log_clash_name,
    logged_in_current_hook,
    logged_metric,
    logging_context,
    set_update_bookkeeping,
    update_bookkeeping,
)
from lightning_step_types.policy import StepPolicy
from lightning_step_types.results import StepResult

__all__ = ["StepMetric", "step_metric_objects"]

STAGES: tuple[Literal["train"], Literal["val"], Literal["test"]] = ("train", "val", "test")
_STAGE_OF_HOOK: dict[str, str] = dict(zip(STEP_HOOKS, STAGES))  # training_step -> train, ...
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
            f"StepMetric({type(self.metric).__name__}(...), update={_callable_name(self.update)},"
            f" stages={self.stages!r})"
        )


# --- setup: checking the declaration, making the copies ----------------------------------------


class StepMetricCopies(torch.nn.ModuleDict):
    """The copies of a ``TypedLightningModule``'s declared metrics: a child module, so that
    ``.to(device)`` and precision plugins move them with the module, but with nothing in the
    module's ``state_dict`` (a checkpoint loads strictly with or without declared metrics;
    their running state is saved by the exact-resume machinery instead)."""

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        destination: Any = kwargs.get("destination", args[0] if args else None)
        return destination if destination is not None else OrderedDict[str, Any]()

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        pass  # nothing was saved


class _StageCopies:
    """One entry in one stage: its copy per dataloader, and the names they are logged under."""

    __slots__ = ("entry", "stage", "binding", "names", "first_name", "copies", "logged_first", "owner", "step_values")

    def __init__(self, owner: MetricSet, entry: str, stage: str, binding: StepMetric[Any], first: Metric | MetricCollection) -> None:
        self.owner = owner
        self.entry = entry
        self.stage = stage
        self.binding = binding
        self.step_values = bool(binding.on_step) and stage == "train"  # `on_step` applies to training
        self.names = _log_names(entry, stage, binding)  # member key (or None) -> log name
        self.first_name = next(iter(self.names.values()))
        self.copies: dict[int, Metric | MetricCollection] = {0: first}  # dataloader index -> copy
        # dataloader index -> the object logged under first_name (the copy, or a collection's first member)
        self.logged_first: dict[int, Metric] = {0: _first_logged(first)}

    def copy_for(self, dataloader_idx: int) -> Metric | MetricCollection:
        found = self.copies.get(dataloader_idx)
        if found is None:
            # Another loader of this stage: a fresh copy made like the first (device, dtype included).
            found = copy.deepcopy(self.copies[0])
            found.reset()
            # Made mid-run, it is not among the modules whose train/eval mode Lightning records and
            # restores around validation: give it the mode of those made at setup.
            found.train()
            self.copies[dataloader_idx] = found
            self.logged_first[dataloader_idx] = _first_logged(found)
            self.owner.register(self, dataloader_idx, found)
        return found


class MetricSet:
    """The declared metrics of one module for one run (from the module, or from a ``StepResultAdapter``)."""

    def __init__(self, declared_by: str) -> None:
        self.declared_by = declared_by  # "MyModel.configure_step_metrics" or "StepResultAdapter(metrics=...)"
        self.by_hook: dict[str, list[_StageCopies]] = {}
        self.stage_copies: list[_StageCopies] = []
        self.container: StepMetricCopies | None = None  # set for modules that hold their copies

    def add(self, stage_copies: _StageCopies) -> None:
        hook = STEP_HOOKS[STAGES.index(stage_copies.stage)]
        self.by_hook.setdefault(hook, []).append(stage_copies)
        self.stage_copies.append(stage_copies)

    def register(self, stage_copies: _StageCopies, dataloader_idx: int, metric: Metric | MetricCollection) -> None:
        if self.container is not None:
            self.container[_container_key(stage_copies, dataloader_idx)] = metric

    def log_names(self) -> dict[str, str]:
        """log name -> the entry that logs it."""
        return {name: sc.entry for sc in self.stage_copies for name in sc.names.values()}

    def objects(self) -> dict[str, Metric]:
        found: dict[str, Metric] = {}
        for sc in self.stage_copies:
            for idx, metric in sc.copies.items():
                key = f"{sc.stage}/{sc.entry}" + (f"/dataloader_idx_{idx}" if idx else "")
                if isinstance(metric, MetricCollection):
                    for member, member_metric in metric.items(keep_base=True, copy_state=False):
                        found[f"{key}/{member}"] = member_metric
                else:
                    found[key] = metric
        return found

    # --- per step: called by adapter.run_step after the checks ----------------------------------

    def update(self, module: Any, call: StepCall, result: Any, batch: Any) -> None:
        """Update (and, at its first update in an epoch, log) each copy declared for this step."""
        declared = self.by_hook.get(call.hook_name)
        if not declared:
            return
        context: LoggingContext | None = None
        for stage_copies in declared:
            if stage_copies.step_values:  # training: one loader; the batch value is logged every step
                metric = stage_copies.copies[0]
                _update_atomically(stage_copies, call, result, metric, _arguments(stage_copies, call, result, batch, metric), True)
                _log(module, stage_copies, metric, on_step=True)
                continue
            if context is None:
                context = logging_context(module)
            idx = context[2] or 0
            metric = stage_copies.copy_for(idx)
            _update_atomically(stage_copies, call, result, metric, _arguments(stage_copies, call, result, batch, metric), False)
            if logged_metric(context, stage_copies.first_name) is not stage_copies.logged_first[idx]:
                # The copy's first update in this epoch (in this process): Lightning does not hold it yet.
                _check_no_clash(module, stage_copies, call)
                _log(module, stage_copies, metric, on_step=False)

    def explain(self, error: BaseException, call: StepCall) -> StepResultError | None:
        """Lightning's raw error when the step itself logs a declared name: the clear version."""
        name = log_clash_name(error)
        if name is None:
            return None
        for stage_copies in self.by_hook.get(call.hook_name, ()):
            if name in stage_copies.names.values():
                return _clash_error(stage_copies, name, call)
        return None


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
            stage_copies = _StageCopies(metric_set, entry, stage, binding, first)
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


CONTAINER_ATTRIBUTE = "_step_metric_copies"


def metric_sets_of(module: Any) -> list[MetricSet]:
    return [s for s in module_state(module).metric_sets.values() if isinstance(s, MetricSet)]


def step_metric_objects(module: Any) -> dict[str, Metric]:
    """The live copies of a module's declared metrics, by stable name.

    Keys are ``"{stage}/{entry}"`` (``"train/acc"``, ``"val/acc"``), with
    ``"/dataloader_idx_{N}"`` for the copies of validation/test dataloaders after the first
    (made when that loader first runs), and for a ``MetricCollection`` one key per member:
    ``"train/scores/MulticlassAccuracy"`` (the members are what Lightning computes and resets).
    Works for metrics declared by a ``TypedLightningModule`` or a ``StepResultAdapter``, from
    setup on; the training copies exist from setup, so their state can be restored before the
    first step.
    """
    found: dict[str, Metric] = {}
    for metric_set in metric_sets_of(module):
        found.update(metric_set.objects())
    return found


def _check_entry(declared_by: str, entry: object, binding: object) -> None:
    if not isinstance(entry, str) or not entry:
        raise StepResultError(
            f"[{short_repr(entry)}]",
            f"key {describe(entry)}",
            "a non-empty str: the name the metric is logged under",
            f"use a string key, e.g. '{_short_str(entry)}'",
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
            _describe_callable(typed.metric),
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


def _first_logged(metric: Metric | MetricCollection) -> Metric:
    if isinstance(metric, MetricCollection):
        first: Metric = next(iter(metric.values(copy_state=False)))
        return first
    return metric


def _container_key(stage_copies: _StageCopies, dataloader_idx: int) -> str:
    # ModuleDict keys may not contain "."; these are unique per (stage, entry, loader).
    key = f"{stage_copies.stage}__{stage_copies.entry}" + (f"__dataloader_idx_{dataloader_idx}" if dataloader_idx else "")
    return key.replace(".", "_")


# --- per step: arguments, atomic update, logging --------------------------------------------------


def _arguments(
    stage_copies: _StageCopies, call: StepCall, result: Any, batch: Any, metric: Metric | MetricCollection
) -> tuple[Any, ...]:
    """What the binding's ``update`` returns: checked to be the positional arguments of ``metric.update``."""
    try:
        arguments = stage_copies.binding.update(result, batch)
    except StepResultError:
        raise
    except Exception as error:
        raise _binding_error(stage_copies, call, result, batch, error) from error
    if type(arguments) is tuple:
        return arguments
    if isinstance(arguments, list):
        return tuple(cast("list[Any]", arguments))
    raise StepResultError(
        _where(stage_copies),
        f"update(result, batch) returned {describe(arguments)}",
        f"a tuple of the positional arguments of {_signature(metric)}",
        "return a tuple, e.g. `lambda result, batch: (result.metadata['preds'], batch[1])`; one argument is `(value,)`",
        call.hook,
    )


def _update_atomically(
    stage_copies: _StageCopies,
    call: StepCall,
    result: Any,
    metric: Metric | MetricCollection,
    arguments: tuple[Any, ...],
    on_step: bool,
) -> None:
    """Update the copy; if its update raises, put its state back as it was and say what went wrong."""
    members = _members(metric)
    saved = [_snapshot(member, forward=on_step) for member in members]
    try:
        if on_step:
            metric(*arguments)  # forward: the batch value too, which Lightning logs for the step
        else:
            _update_method(metric)(*arguments)
    except Exception as error:
        for member, state in zip(members, saved):
            _restore(member, state)
        raise _update_error(stage_copies, call, result, metric, arguments, error) from error


def _update_method(metric: Metric | MetricCollection) -> Callable[..., Any]:
    # torchmetrics wraps `update` per instance (typed as a bare Callable); its signature stays visible.
    update: Callable[..., Any] = metric.update  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return update


def _members(metric: Metric | MetricCollection) -> list[Metric]:
    if isinstance(metric, MetricCollection):
        return list(metric.values(copy_state=False))
    return [metric]


_Snapshot = tuple[int, Any, dict[str, Any]]


def _forward_resets_first(metric: Metric) -> bool:
    # torchmetrics' Metric.forward: this is the condition under which it takes `_forward_reduce_state_update`.
    return metric.full_state_update is False and not metric.dist_sync_on_step


class _ListLength:
    """A list state as it was: ``update`` only appends to list states, so its length suffices."""

    __slots__ = ("items", "length")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.length = len(items)


def _snapshot(metric: Metric, forward: bool) -> _Snapshot:
    """The metric's states, to put back if an update fails.

    ``update`` changes tensor states in place (``self.tp += tp``) as well as by assignment, so
    they are cloned; it only appends to list states, so their lengths do (no copy that grows with
    the epoch). ``forward`` resets the metric in between, which clears list states in place, so
    they are copied; and for a metric without ``full_state_update`` it resets before it updates,
    onto fresh tensors, so the current tensors stay untouched and references do.
    """
    clone = not (forward and _forward_resets_first(metric))
    states: dict[str, Any] = {}
    for name, value in metric.metric_state.items():
        if isinstance(value, torch.Tensor):
            states[name] = value.clone() if clone else value
        else:
            states[name] = list(value) if forward else _ListLength(value)
    return (*update_bookkeeping(metric), states)


def _restore(metric: Metric, saved: _Snapshot) -> None:
    update_count, computed, states = saved
    for name, value in states.items():
        if isinstance(value, _ListLength):
            del value.items[value.length :]
            value = value.items
        setattr(metric, name, value)
    set_update_bookkeeping(metric, update_count, computed)


def _log(module: Any, stage_copies: _StageCopies, metric: Metric | MetricCollection, on_step: bool) -> None:
    binding = stage_copies.binding
    attribute = f"{CONTAINER_ATTRIBUTE}.{stage_copies.stage}__{stage_copies.entry}"
    if isinstance(metric, MetricCollection):
        # copy_state=False also re-links the states that compute groups share, as log_dict does.
        for member, member_metric in metric.items(keep_base=False, copy_state=False):
            module.log(
                stage_copies.names[str(member)],
                member_metric,
                on_step=on_step,
                on_epoch=True,
                prog_bar=binding.prog_bar,
                metric_attribute=f"{attribute}.{member}",
            )
    else:
        module.log(
            stage_copies.names[None],
            metric,
            on_step=on_step,
            on_epoch=True,
            prog_bar=binding.prog_bar,
            metric_attribute=attribute,
        )


def _check_no_clash(module: Any, stage_copies: _StageCopies, call: StepCall) -> None:
    for name in stage_copies.names.values():
        if logged_in_current_hook(module, name):
            raise _clash_error(stage_copies, name, call)


# --- messages ----------------------------------------------------------------------------------


def _where(stage_copies: _StageCopies) -> str:
    return f"{stage_copies.owner.declared_by}[{stage_copies.entry!r}] in stage {stage_copies.stage!r}"


def _clash_error(stage_copies: _StageCopies, name: str, call: StepCall) -> StepResultError:
    return StepResultError(
        _where(stage_copies),
        f"the step also logs {name!r} itself with `self.log`",
        f"one value per log name: the declared metric {stage_copies.entry!r} logs {name!r}",
        f"drop the step's `self.log({name!r}, ...)`, or log the metric under another name"
        f" (`StepMetric(..., log_name='{{stage}}_{stage_copies.entry}_declared')`)",
        call.hook,
    )


def _binding_error(
    stage_copies: _StageCopies, call: StepCall, result: Any, batch: Any, error: Exception
) -> StepResultError:
    where = f"{_where(stage_copies)}: update(result, batch)"
    holds = describe_result(result)
    if isinstance(error, KeyError) and error.args:
        key = error.args[0]
        keys = _result_keys(result)
        if key not in keys:
            close = difflib.get_close_matches(str(key), [str(k) for k in keys], n=1, cutoff=0.6) if isinstance(key, str) else []
            fix = (
                f"read {close[0]!r}: `result.metadata[{close[0]!r}]` (keys are case-sensitive)"
                if close
                else f"put {short_repr(key)} in the step's metadata (`metadata={{{short_repr(key)}: ...}}`), or read one of {keys}"
            )
            return StepResultError(
                where,
                f"KeyError {short_repr(key)}: the result holds {holds}",
                f"a key the step's result holds: {keys}",
                fix,
                call.hook,
            )
    fix = "read only what the result and the batch hold (shown above)"
    name = getattr(error, "name", None)
    if isinstance(error, AttributeError) and isinstance(name, str) and name in _result_keys(result):
        fix = f"read metadata by key: `result.metadata[{name!r}]`"
    return StepResultError(
        where,
        f"{type(error).__name__}: {error}; the result holds {holds}, the batch is {describe(batch)}",
        "a function of the result and the batch that returns the arguments of metric.update",
        fix,
        call.hook,
    )


def _update_error(
    stage_copies: _StageCopies,
    call: StepCall,
    result: Any,
    metric: Metric | MetricCollection,
    arguments: tuple[Any, ...],
    error: Exception,
) -> StepResultError:
    where = f"{_where(stage_copies)}: {type(metric).__name__}.update"
    signature = _signature(metric)
    got = f"update(result, batch) returned {describe_arguments(arguments)}"
    arity = _arity_problem(metric, arguments)
    if arity is not None:
        return StepResultError(
            where,
            got,
            f"the {arity} positional arguments of {signature}",
            f"return a tuple of {arity}, e.g. `lambda result, batch: (result.metadata['preds'], batch[1])`",
            call.hook,
        )
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return StepResultError(
        where,
        f"{got}, which {type(metric).__name__}.update refused: {type(error).__name__}: {message}",
        f"the arguments of {signature}, as that message says",
        _shape_fix(arguments) or "make `update` return what the metric's update takes, as the message above says",
        call.hook,
    )


def _arity_problem(metric: Metric | MetricCollection, arguments: tuple[Any, ...]) -> int | None:
    """The number of positional arguments ``metric.update`` takes, when ``arguments`` has another count."""
    try:
        parameters = inspect.signature(_update_method(metric)).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return None
    positional = [p for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    if len(required) <= len(arguments) <= len(positional):
        return None
    return len(required)


def _shape_fix(arguments: tuple[Any, ...]) -> str | None:
    """For two tensors that differ by a trailing dimension of size 1: the reshape that fixes it."""
    tensors = [a for a in arguments if isinstance(a, torch.Tensor)]
    if len(tensors) != 2:
        return None
    first, second = tensors
    if first.shape[:-1] == second.shape and first.shape[-1:] == (1,):
        return "squeeze the first argument's last dimension: `(preds.squeeze(-1), target)`"
    if second.shape[:-1] == first.shape and second.shape[-1:] == (1,):
        return "squeeze the second argument's last dimension: `(preds, target.squeeze(-1))`"
    return None


def _signature(metric: Metric | MetricCollection) -> str:
    name = type(metric).__name__
    try:
        parameters = inspect.signature(_update_method(metric)).parameters.values()
    except (TypeError, ValueError):
        return f"{name}.update"
    shown: list[str] = []
    for p in parameters:
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            shown.append(f"*{p.name}")
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            shown.append(f"**{p.name}")
        else:
            shown.append(p.name)
    return f"{name}.update({', '.join(shown)})"


def describe_arguments(arguments: tuple[Any, ...]) -> str:
    return f"a tuple of {len(arguments)}: ({', '.join(describe(a) for a in arguments)})"


def describe_result(result: object) -> str:
    """What a step's result holds, for messages: its class, and each value (tensors with shape and dtype)."""
    if isinstance(result, StepResult):
        typed = cast("StepResult[Mapping[str, Any]]", result)  # isinstance leaves the type argument unknown
        items = ", ".join(f"{k!r}: {describe(v)}" for k, v in typed.metadata.items())
        return f"{type(typed).__name__}(loss {describe_tensor(typed.loss)}, metadata {{{items}}})"
    if isinstance(result, Mapping):
        mapping = cast("Mapping[object, Any]", result)
        items = ", ".join(f"{short_repr(k)}: {describe(v)}" for k, v in mapping.items())
        return f"the returned dict {{{items}}}"
    return describe(result)


def _result_keys(result: Any) -> list[Any]:
    if isinstance(result, StepResult):
        return list(cast("StepResult[Mapping[str, Any]]", result).metadata)
    if isinstance(result, Mapping):
        return list(cast("Mapping[object, Any]", result))
    return []


def _describe_callable(value: object) -> str:
    """Like ``describe``, without the memory address a function's repr shows."""
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return f"function {_callable_name(value)}"
    return describe(value)


def _callable_name(function: object) -> str:
    return getattr(function, "__qualname__", None) or type(function).__name__


def _short_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return "name"


def stage_of(hook_name: str) -> str:
    return _STAGE_OF_HOOK[hook_name]


def iter_stage_copies(module: Any) -> Iterator[tuple[str, str, int, Metric | MetricCollection]]:
    """(stage, entry, dataloader index, copy) for each copy of the module's declared metrics."""
    for metric_set in metric_sets_of(module):
        for sc in metric_set.stage_copies:
            for idx, metric in sc.copies.items():
                yield sc.stage, sc.entry, idx, metric

