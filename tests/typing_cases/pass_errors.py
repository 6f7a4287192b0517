"""Catching the library's error and warning, and reading what they say."""

import warnings

import torch

from lightning_step_types import StepResultError, StepResultWarning, TrainStepResult


def describe_failure() -> str:
    try:
        TrainStepResult(loss=torch.ones(3))
    except StepResultError as error:
        hook: str | None = error.hook
        return f"{error.where}: got {error.got}, expected {error.expected}; fix: {error.fix} ({hook})"
    return "ok"


def strict_warnings() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepResultWarning)
        try:
            return describe_failure()
        except TypeError as error:  # StepResultError is a TypeError: `except TypeError` keeps catching it
            return str(error)
