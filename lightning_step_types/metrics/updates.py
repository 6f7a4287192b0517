"""Declared metrics at run time: the per-stage copies, their update after each step, their logging.

After every step, ``adapter.run_step`` hands the checked result to ``MetricSet.update``: the
binding's ``update`` picks the arguments, the stage's copy is updated with them, and the copy is
logged with Lightning's own ``self.log(name, metric)``. Lightning then computes, syncs and resets
it at the epoch's end, as for the hand-written pattern.

Cost: Lightning keeps a reference to a logged metric object and calls ``compute()`` on it at the
epoch's end, so an epoch value needs one ``self.log`` per (stage, dataloader, epoch), not one per
step: a copy is logged at its first update in an epoch (in this process: after a mid-epoch resume
too), found by looking for it in Lightning's active result collection. Step values in training
(``on_step=True``) need the batch value, hence ``metric(...)`` (forward) and ``self.log`` each step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal, cast

import torch
from torchmetrics import Metric, MetricCollection

from lightning_step_types._lightning.module_state import set_update_bookkeeping, update_bookkeeping
from lightning_step_types._lightning.result_collection import (
    LoggingContext,
    log_clash_name,
    logged_in_current_hook,
    logged_metric,
    logging_context,
)
from lightning_step_types.errors import StepResultError
from lightning_step_types.metrics.copies import StageCopies
from lightning_step_types.metrics.messages import (
    arguments_error,
    binding_error,
    clash_error,
    many_values_error,
    update_error,
    update_method,
    warn_unfed,
)
from lightning_step_types.step.adapter import STEP_HOOKS, module_state
from lightning_step_types.step.checks import StepCall

STAGES: tuple[Literal["train"], Literal["val"], Literal["test"]] = ("train", "val", "test")
_STAGE_OF_HOOK: dict[str, str] = dict(zip(STEP_HOOKS, STAGES))  # training_step -> train, ...
CONTAINER_ATTRIBUTE = "_step_metric_copies"


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


class MetricSet:
    """The declared metrics of one module for one run (from the module, or from a ``StepResultAdapter``)."""

    def __init__(self, declared_by: str) -> None:
        self.declared_by = declared_by  # "MyModel.configure_step_metrics" or "StepResultAdapter(metrics=...)"
        self.by_hook: dict[str, list[StageCopies]] = {}
        self.stage_copies: list[StageCopies] = []
        self.container: StepMetricCopies | None = None  # set for modules that hold their copies
        # hook -> (the first step this epoch whose result fed nothing, what it returned)
        self.skipped_steps: dict[str, tuple[StepCall, object]] = {}

    def add(self, stage_copies: StageCopies) -> None:
        hook = STEP_HOOKS[STAGES.index(stage_copies.stage)]
        self.by_hook.setdefault(hook, []).append(stage_copies)
        self.stage_copies.append(stage_copies)

    def register(self, stage_copies: StageCopies, dataloader_idx: int, metric: Metric | MetricCollection) -> None:
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
                value = _update_atomically(
                    stage_copies, call, result, metric, _arguments(stage_copies, call, result, batch, metric), True
                )
                if not stage_copies.checked_one_value:
                    stage_copies.checked_one_value = True
                    _check_one_value(stage_copies, value, call.hook, "forward")
                stage_copies.fed = True
                _log(module, stage_copies, metric, on_step=True)
                continue
            if context is None:
                context = logging_context(module)
            idx = context[2] or 0
            metric = stage_copies.copy_for(idx)
            _update_atomically(
                stage_copies, call, result, metric, _arguments(stage_copies, call, result, batch, metric), False
            )
            if logged_metric(context, stage_copies.first_name) is not stage_copies.logged_first[idx]:
                # The copy's first update in this epoch (in this process): Lightning does not hold it yet.
                _check_no_clash(module, stage_copies, call)
                stage_copies.fed = True
                _log(module, stage_copies, metric, on_step=False)

    def skipped(self, call: StepCall, output: object) -> None:
        """A step whose result updates no metric (it returned None, or its batch was skipped)."""
        if call.hook_name in self.by_hook and call.hook_name not in self.skipped_steps:
            self.skipped_steps[call.hook_name] = (call, output)

    # --- at the end of each stage's epoch ---------------------------------------------------------

    def end_of_stage(self, stage: str, hook: str) -> None:
        """Warn about copies the stage's steps never fed; check each copy's first epoch value.

        ``hook`` names the epoch-end hook this runs in. Idempotent within one epoch end.
        """
        step_hook = STEP_HOOKS[STAGES.index(stage)]
        declared = self.by_hook.get(step_hook)
        if not declared:
            return
        skipped = self.skipped_steps.pop(step_hook, None)
        for stage_copies in declared:
            if stage_copies.fed:
                stage_copies.fed = False
                if not stage_copies.checked_one_value:
                    stage_copies.checked_one_value = True
                    for metric in stage_copies.copies.values():
                        if update_count(metric):
                            # Cached by torchmetrics: Lightning's own compute() of this epoch gets this value.
                            _check_one_value(stage_copies, _compute(metric), hook, "compute")
            elif skipped is not None and not stage_copies.warned_unfed:
                stage_copies.warned_unfed = True
                call, output = skipped
                warn_unfed(stage_copies, call, output)

    def explain(self, error: BaseException, call: StepCall) -> StepResultError | None:
        """Lightning's raw error when the step itself logs a declared name: the clear version."""
        name = log_clash_name(error)
        if name is None:
            return None
        for stage_copies in self.by_hook.get(call.hook_name, ()):
            if name in stage_copies.names.values():
                return clash_error(stage_copies, name, call)
        return None


def _container_key(stage_copies: StageCopies, dataloader_idx: int) -> str:
    # ModuleDict keys may not contain "."; these are unique per (stage, entry, loader).
    key = f"{stage_copies.stage}__{stage_copies.entry}" + (
        f"__dataloader_idx_{dataloader_idx}" if dataloader_idx else ""
    )
    return key.replace(".", "_")


def _arguments(
    stage_copies: StageCopies, call: StepCall, result: Any, batch: Any, metric: Metric | MetricCollection
) -> tuple[Any, ...]:
    """What the binding's ``update`` returns: checked to be the positional arguments of ``metric.update``."""
    try:
        arguments = stage_copies.read(result, batch)
    except StepResultError:
        raise
    except Exception as error:
        raise binding_error(stage_copies, call, result, batch, error) from error
    if type(arguments) is tuple:
        return arguments
    if isinstance(arguments, list):
        return tuple(cast("list[Any]", arguments))
    raise arguments_error(stage_copies, call, arguments, metric)


def _update_atomically(
    stage_copies: StageCopies,
    call: StepCall,
    result: Any,
    metric: Metric | MetricCollection,
    arguments: tuple[Any, ...],
    on_step: bool,
) -> Any:
    """Update the copy; if its update raises, put its state back as it was and say what went wrong.

    With ``on_step``, the batch value (what forward returns), else None.
    """
    parts = members(metric)
    saved = [_snapshot(member, forward=on_step) for member in parts]
    try:
        if on_step:
            return metric(*arguments)  # forward: the batch value too, which Lightning logs for the step
        update_method(metric)(*arguments)
        return None
    except Exception as error:
        for member, state in zip(parts, saved):
            _restore(member, state)
        raise update_error(stage_copies, call, result, metric, arguments, error) from error


def members(metric: Metric | MetricCollection) -> list[Metric]:
    """A collection's member metrics, or the metric itself."""
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


def _log(module: Any, stage_copies: StageCopies, metric: Metric | MetricCollection, on_step: bool) -> None:
    binding = stage_copies.binding
    attribute = f"{CONTAINER_ATTRIBUTE}.{stage_copies.stage}__{stage_copies.entry}"
    if isinstance(metric, MetricCollection):
        # copy_state=False also re-links the states that compute groups share, as log_dict does.
        for member, member_metric in metric.items(keep_base=False, copy_state=False):
            module.log(
                stage_copies.names[str(member)],
                member_metric,
                on_step=on_step,
                on_epoch=stage_copies.epoch_values,
                prog_bar=binding.prog_bar,
                metric_attribute=f"{attribute}.{member}",
            )
    else:
        module.log(
            stage_copies.names[None],
            metric,
            on_step=on_step,
            on_epoch=stage_copies.epoch_values,
            prog_bar=binding.prog_bar,
            metric_attribute=attribute,
        )


def _compute(metric: Metric | MetricCollection) -> object:
    # torchmetrics wraps `compute` per instance (typed as a bare Callable).
    compute: Callable[[], object] = metric.compute  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return compute()


def update_count(metric: Metric | MetricCollection) -> int:
    """A metric's ``update_count``; a collection's is its members' sum (the public count of each,
    whether or not torchmetrics' compute groups moved it)."""
    return sum(member.update_count for member in members(metric))


def _check_one_value(stage_copies: StageCopies, value: object, hook: str, how: str) -> None:
    """What Lightning will log for the copy must be one number per name (a collection: per member)."""
    values = cast("dict[str, object]", value) if isinstance(value, dict) else {None: value}
    for member, member_value in values.items():
        if not _one_number(member_value):
            raise many_values_error(stage_copies, member, member_value, hook, how)


def _one_number(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def end_of_stage(module: Any, owner: object, stage: str, hook: str) -> None:
    """At a stage's epoch end (``hook``): ``owner``'s declared metrics check what that epoch fed them."""
    metric_set = module_state(module).metric_sets.get(owner)
    if isinstance(metric_set, MetricSet):
        metric_set.end_of_stage(stage, hook)


def _check_no_clash(module: Any, stage_copies: StageCopies, call: StepCall) -> None:
    for name in stage_copies.names.values():
        if logged_in_current_hook(module, name):
            raise clash_error(stage_copies, name, call)


def stage_of(hook_name: str) -> str:
    return _STAGE_OF_HOOK[hook_name]
