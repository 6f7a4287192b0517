"""The torchmetrics objects a checkpoint carries: every one a module holds, and the declared copies.

torchmetrics keeps a metric's states out of ``state_dict()`` by default, so Lightning's checkpoint
does not hold them: a ``MaxMetric`` that tracks the best validation accuracy, or a metric updated in
the steps and computed by hand at the epoch's end, would start again on resume. Every checkpoint of
a ``TypedLightningModule``, or under ``StepResultAdapter()``, carries each metric's states:

- each ``Metric`` among the module's submodules (attributes, ``ModuleList`` / ``ModuleDict`` items,
  ``MetricCollection`` members), named by its path (``"val_acc_best"``, ``"scores.MulticlassAccuracy"``);
- each ``Metric`` in a plain ``dict``, ``list`` or ``tuple`` attribute, nested up to three deep
  (``"metrics['train']"``, ``"metrics['train']['acc']"``), or an attribute of a plain object the
  module holds (``"scores.best"``: a namespace of metrics);
- the declared metrics' copies (``"declared train/acc"``).

``not_resumed(metric)`` (``resume_options.py``) leaves one out.
"""

from __future__ import annotations

import types
from typing import Any, cast

import torch
from torchmetrics import Metric

from lightning_step_types.metrics.values import step_metric_objects

__all__ = ["NOT_RESUMED", "resumed_metrics"]

# the attribute `resume_options.not_resumed` sets on a metric: `resumed_metrics` passes over it
NOT_RESUMED = "_lightning_step_types_not_resumed"


def resumed_metrics(module: Any) -> dict[str, Metric]:
    """The metrics a checkpoint of ``module`` carries, by the name they are saved under (once each)."""
    found: dict[str, Metric] = {}
    seen: set[int] = set()

    def add(name: str, metric: Metric) -> None:
        if id(metric) not in seen:
            seen.add(id(metric))
            found[name] = metric

    for name, metric in step_metric_objects(module).items():
        add(f"declared {name}", metric)
    skipped: list[str] = []
    for path, sub in module.named_modules():
        if getattr(sub, NOT_RESUMED, False):
            skipped.append(path + ".")
        elif isinstance(sub, Metric) and not any((path + ".").startswith(prefix) for prefix in skipped):
            add(path, sub)
    attributes: dict[str, Any] = cast("dict[str, Any]", vars(module))
    for attribute, value in attributes.items():
        if isinstance(value, (dict, list, tuple)):
            for name, metric in _held_in(attribute, cast("dict[Any, Any] | list[Any]", value), _CONTAINER_DEPTH):
                add(name, metric)
        elif not attribute.startswith("_") and _is_plain_object(value):
            # a helper object's own attributes, one level (a namespace of metrics); not Lightning's
            # private attributes (`_trainer`), which lead to other modules' objects
            for name, item in cast("dict[str, Any]", vars(value)).items():
                if isinstance(item, Metric) and not getattr(item, NOT_RESUMED, False):
                    add(f"{attribute}.{name}", item)
    return found


_CONTAINER_DEPTH = 3  # dicts and lists of metrics nest this deep at most ({"train": {"acc": ...}})


def _held_in(path: str, value: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> list[tuple[str, Metric]]:
    """The metrics in a plain ``dict`` / ``list`` / ``tuple`` (nested ``depth`` deep), by path."""
    items: list[tuple[Any, Any]] = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
    found: list[tuple[str, Metric]] = []
    for key, item in items:
        if isinstance(item, Metric):
            if not getattr(item, NOT_RESUMED, False):
                found.append((f"{path}[{key!r}]", item))
        elif depth > 1 and isinstance(item, (dict, list, tuple)):
            found += _held_in(f"{path}[{key!r}]", cast("dict[Any, Any] | list[Any]", item), depth - 1)
    return found


def _is_plain_object(value: Any) -> bool:
    """An instance of a user's class with a ``__dict__``: not a module, tensor, class or function."""
    return hasattr(value, "__dict__") and not isinstance(
        value, (torch.nn.Module, torch.Tensor, type, types.FunctionType, types.MethodType, types.ModuleType)
    )
