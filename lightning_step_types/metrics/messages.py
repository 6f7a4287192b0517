"""Declared metrics: the messages of their per-step failures (where, got, expected, fix).

Each builds the ``StepResultError`` for one kind of mistake in a binding's ``update`` or in the
metric's own ``update``, from what the step returned, the batch and the metric's signature.
"""

from __future__ import annotations

import difflib
import inspect
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch
from torchmetrics import Metric, MetricCollection

from lightning_step_types.errors import (
    StepResultError,
    StepResultWarning,
    describe,
    describe_tensor,
    format_problem,
    short_repr,
)
from lightning_step_types.metrics.copies import StageCopies
from lightning_step_types.results import StepResult
from lightning_step_types.step.checks import StepCall


def update_method(metric: Metric | MetricCollection) -> Callable[..., Any]:
    # torchmetrics wraps `update` per instance (typed as a bare Callable); its signature stays visible.
    update: Callable[..., Any] = metric.update  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return update


def where_of(stage_copies: StageCopies) -> str:
    return f"{stage_copies.owner.declared_by}[{stage_copies.entry!r}] in stage {stage_copies.stage!r}"


def arguments_error(
    stage_copies: StageCopies, call: StepCall, arguments: object, metric: Metric | MetricCollection
) -> StepResultError:
    return StepResultError(
        where_of(stage_copies),
        f"update(result, batch) returned {describe(arguments)}",
        f"a tuple of the positional arguments of {signature_of(metric)}",
        "return a tuple, e.g. `lambda result, batch: (result.metadata['preds'], batch[1])`; one argument is `(value,)`",
        call.hook,
    )


def clash_error(stage_copies: StageCopies, name: str, call: StepCall) -> StepResultError:
    return StepResultError(
        where_of(stage_copies),
        f"the step also logs {name!r} itself with `self.log`",
        f"one value per log name: the declared metric {stage_copies.entry!r} logs {name!r}",
        f"drop the step's `self.log({name!r}, ...)`, or log the metric under another name"
        f" (`StepMetric(..., log_name='{{stage}}_{stage_copies.entry}_declared')`)",
        call.hook,
    )


def binding_error(
    stage_copies: StageCopies, call: StepCall, result: Any, batch: Any, error: Exception
) -> StepResultError:
    where = f"{where_of(stage_copies)}: update(result, batch)"
    holds = describe_result(result)
    if isinstance(error, KeyError) and error.args:
        key = error.args[0]
        keys = _result_keys(result)
        if key not in keys:
            batch_keys = _batch_keys(batch)
            close = _closest(key, keys)
            if batch_keys is not None and key not in batch_keys:
                close_in_batch = _closest(key, batch_keys)
                if close_in_batch is not None and (close is None or close_in_batch[1] > close[1]):
                    return StepResultError(
                        where,
                        f"KeyError {short_repr(key)}: the batch holds {_describe_items(batch)}",
                        f"a key the batch holds: {batch_keys}",
                        f"read {close_in_batch[0]!r}: `batch[{close_in_batch[0]!r}]` (keys are case-sensitive)",
                        call.hook,
                    )
                if close is None:  # in neither: show both
                    return StepResultError(
                        where,
                        f"KeyError {short_repr(key)}: the result holds {holds}, the batch holds {_describe_items(batch)}",
                        f"a key the step's result holds: {keys}, or one the batch holds: {batch_keys}",
                        f"read one of those keys, or put {short_repr(key)} in the step's metadata"
                        f" (`metadata={{{short_repr(key)}: ...}}`)",
                        call.hook,
                    )
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


def update_error(
    stage_copies: StageCopies,
    call: StepCall,
    result: Any,
    metric: Metric | MetricCollection,
    arguments: tuple[Any, ...],
    error: Exception,
) -> StepResultError:
    where = f"{where_of(stage_copies)}: {type(metric).__name__}.update"
    signature = signature_of(metric)
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
        parameters = inspect.signature(update_method(metric)).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return None
    positional = [
        p for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
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


def signature_of(metric: Metric | MetricCollection) -> str:
    name = type(metric).__name__
    try:
        parameters = inspect.signature(update_method(metric)).parameters.values()
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


def _closest(key: object, keys: list[Any]) -> tuple[str, float] | None:
    """The key most like ``key`` (a str) among ``keys``, and how alike they are (difflib's ratio)."""
    if not isinstance(key, str):
        return None
    candidates = [str(k) for k in keys if isinstance(k, str)]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    return (close[0], difflib.SequenceMatcher(None, key, close[0]).ratio()) if close else None


def _batch_keys(batch: object) -> list[Any] | None:
    """The keys of a dict-like batch; None for other batches."""
    if not isinstance(batch, Mapping):
        return None
    try:
        return list(cast("Mapping[object, Any]", batch))
    except Exception:  # a hostile mapping must not hide the real error
        return None


def _describe_items(mapping: object) -> str:
    items = ", ".join(f"{short_repr(k)}: {describe(v)}" for k, v in cast("Mapping[object, Any]", mapping).items())
    return f"{{{items}}}"


def describe_callable(value: object) -> str:
    """Like ``describe``, without the memory address a function's repr shows."""
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return f"function {callable_name(value)}"
    return describe(value)


def callable_name(function: object) -> str:
    return getattr(function, "__qualname__", None) or type(function).__name__


def short_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return "name"


def many_values_error(
    stage_copies: StageCopies, member: str | None, value: object, hook: str, how: str
) -> StepResultError:
    """A copy whose first value (its batch value, or its epoch's compute()) is not one number."""
    metric = stage_copies.copies[0]
    shown = type(metric).__name__ + (f"[{member!r}]" if member is not None else "")
    return StepResultError(
        f"{where_of(stage_copies)}: {shown}.{how}",
        f"{how}() gave {describe(value)}",
        "one number: Lightning logs one value per name",
        "make it compute one value (e.g. `average='macro'` for a per-class metric), or keep it out of the"
        " declared metrics: update it in the step and read its compute() in on_validation_epoch_end",
        hook,
    )


def warn_unfed(stage_copies: StageCopies, call: StepCall, output: object) -> None:
    """A stage ran, and its steps fed this copy nothing: say so, naming what they returned."""
    returned = "returned None" if output is None else "was skipped (a non-finite loss, nonfinite_loss='skip')"
    others = tuple(s for s in stage_copies.binding.stages if s != stage_copies.stage)
    drop = f"drop {stage_copies.stage!r} from its stages: `stages={others!r}`" if others else "drop the entry"
    if call.policy.strict:
        feed = "return a `ValStepResult(loss=..., metadata={...})` holding what its update reads"
        if stage_copies.stage == "train":
            feed = "return a `TrainStepResult(loss=..., metadata={...})` holding what its update reads"
    else:
        feed = "return what its update reads, e.g. `return {'loss': loss, 'logits': logits}` for `result['logits']`"
    warning = StepResultWarning(
        format_problem(
            where_of(stage_copies),
            f"no update in an epoch of this stage: every step {returned}, so {stage_copies.entry!r} logs nothing",
            f"a step result each step, which update(result, batch) reads to feed {stage_copies.entry!r}",
            f"{feed}; or {drop}",
            call.hook,
        )
    )
    if call.source is None:
        warnings.warn(warning, stacklevel=3)
    else:  # no frame of the user's is on the stack: point at the step's definition
        warnings.warn_explicit(warning, StepResultWarning, *call.source)
