"""The one exception users catch, its warning twin, and how offending values are described."""

__all__ = ["StepResultError", "StepResultWarning", "describe", "describe_tensor", "format_problem", "short_repr"]

import torch

class StepResultError(TypeError):
    """A step result was built wrongly, or a step returned something it must not."""

    where: str
    got: str
    expected: str
    fix: str
    hook: str | None
    def __init__(self, where: str, got: str, expected: str, fix: str, hook: str | None = None) -> None: ...

class StepResultWarning(UserWarning):
    """A step returned something Lightning accepts but silently ignores or misreads."""

def format_problem(where: str, got: str, expected: str, fix: str, hook: str | None = None) -> str: ...
def describe(value: object) -> str: ...
def describe_tensor(tensor: torch.Tensor) -> str: ...
def short_repr(value: object) -> str: ...
