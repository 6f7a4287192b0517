"""The one exception users catch, its warning twin, and how offending values are described.

Messages follow one layout (location, got, expected, fix), in the spirit of pydantic's
errors: the reader sees where it happened, what came back, what was wanted, and one
concrete change that makes it right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch

__all__ = ["StepResultError", "StepResultWarning", "describe", "describe_tensor", "format_problem", "short_repr"]

_MAX_REPR = 60


class StepResultError(TypeError):
    """A step result was built wrongly, or a step returned something it must not.

    Attributes:
        where: the place that was wrong, e.g. ``"TrainStepResult.loss"`` or ``"return value"``.
        got: a description of the offending value.
        expected: what would have been accepted.
        fix: one concrete change that makes it right.
        hook: ``"MyModel.training_step"`` once the error is known to come from a step
            (set by the adapter when a result built inside a step fails its checks).
    """

    def __init__(self, where: str, got: str, expected: str, fix: str, hook: str | None = None) -> None:
        super().__init__(where, got, expected, fix, hook)
        self.where = where
        self.got = got
        self.expected = expected
        self.fix = fix
        self.hook = hook

    def __str__(self) -> str:
        return format_problem(self.where, self.got, self.expected, self.fix, self.hook)


class StepResultWarning(UserWarning):
    """A step returned something Lightning accepts but silently ignores or misreads."""


def format_problem(where: str, got: str, expected: str, fix: str, hook: str | None = None) -> str:
    """The shared layout of errors and warnings: location, then got / expected / fix."""
    location = f"{hook}: {where}" if hook else where
    return f"{location}\n  got:      {got}\n  expected: {expected}\n  fix:      {fix}"


def describe(value: object) -> str:
    """A short description of ``value``: its type and, for tensors, shape, dtype and requires_grad."""
    if isinstance(value, torch.Tensor):
        return describe_tensor(value)
    if value is None:
        return "None"
    kind = _type_name(value)
    try:
        return _describe_container(value, kind)
    except Exception:  # a hostile __len__/__iter__ must not hide the real problem
        return f"{kind} {short_repr(value)}"


def _describe_container(value: object, kind: str) -> str:
    if isinstance(value, Mapping):
        mapping = cast("Mapping[object, object]", value)  # isinstance leaves the type arguments unknown
        keys = [short_repr(k) for k in list(mapping.keys())[:8]]
        more = ", ..." if len(mapping) > 8 else ""
        return f"{kind} with keys [{', '.join(keys)}{more}]"
    if isinstance(value, (tuple, list)):
        sequence = cast("Sequence[object]", value)
        items = ", ".join(describe(v) for v in list(sequence)[:3])
        more = ", ..." if len(sequence) > 3 else ""
        return f"{kind} of {len(sequence)}: ({items}{more})"
    return f"{kind} {short_repr(value)}"


def describe_tensor(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"Tensor(shape={tuple(tensor.shape)}, dtype={dtype}, requires_grad={tensor.requires_grad})"


def _type_name(value: object) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{_type_name(value)} object>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."
