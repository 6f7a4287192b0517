"""What torch and torchmetrics keep privately in a module: running statistics, gradients, metric states.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch

__all__ = [
    "grad_version",
    "gradient_marks",
    "load_metric_states",
    "metric_change_mark",
    "metric_states",
    "metric_states_on_cpu",
    "metric_states_on_device",
    "modules_with_running_stats",
    "set_update_bookkeeping",
    "tensor_version",
    "update_bookkeeping",
]


def modules_with_running_stats(module: Any) -> list[str]:
    """The submodules, named ``self.bn (BatchNorm1d)``, that update running statistics in their forward.

    Batch, instance and sync-batch norm derive from `torch.nn.modules.batchnorm._NormBase` (torch,
    private) and update `running_mean`/`running_var`/`num_batches_tracked` in place in training mode
    with `track_running_stats`; other modules that follow that convention are found by those names.
    Read when a checkpoint is saved inside a batch, never per batch.
    """
    norm_base: Any = getattr(torch.nn.modules.batchnorm, "_NormBase", ())
    found: list[str] = []
    for path, sub in module.named_modules():
        tracks = bool(getattr(sub, "track_running_stats", False)) and bool(getattr(sub, "training", False))
        buffers = dict(sub.named_buffers(recurse=False))
        if tracks and (isinstance(sub, norm_base) or buffers.get("running_mean") is not None):
            found.append(f"{'self.' + path if path else 'self'} ({type(sub).__name__})")
    return found


def gradient_marks(parameters: list[Any]) -> list[tuple[int, int] | None]:
    """Each parameter's ``.grad`` identity and in-place version (`Tensor._version`, torch-private: autograd
    adds a new gradient into an existing ``.grad`` in place; ``zero_grad()`` sets it to None), or None."""
    return [None if p.grad is None else (id(p.grad), p.grad._version) for p in parameters]


def grad_version(grad: torch.Tensor) -> int:
    return int(grad._version)


def tensor_version(tensor: torch.Tensor) -> int:
    """A tensor's in-place version (`Tensor._version`, torch-private: every in-place change adds one)."""
    return int(tensor._version)


def metric_change_mark(metric: Any) -> tuple[Any, ...]:
    """What changes when a torchmetrics object's states do: its update count (`Metric._update_count`,
    private), and each state's identity and in-place version (`Tensor._version`; ``reset()`` rebinds
    every state, an update changes one in place or appends to a list state)."""
    marks: list[Any] = [int(metric._update_count)]
    for value in metric.metric_state.values():
        marks += [id(value), value._version if isinstance(value, torch.Tensor) else len(value)]
    return tuple(marks)


def metric_states(metric: Any) -> dict[str, Any]:
    """A torchmetrics object's running state, copied: its states and how many updates made them.

    `Metric.metric_state` is public; `Metric._update_count` (torchmetrics, private) feeds
    `update_called`, which `compute()` checks.
    """
    states = {name: _copied(value) for name, value in metric.metric_state.items()}
    return {"states": states, "update_count": update_bookkeeping(metric)[0]}


def metric_states_on_device(metric: Any) -> dict[str, Any]:
    """`metric_states`, copied where they are (every batch: `metric_states_on_cpu` when saving)."""
    # torchmetrics (private): `Metric._update_count`, as in `update_bookkeeping`
    return {
        "states": {name: _cloned(value) for name, value in metric.metric_state.items()},
        "update_count": int(metric._update_count),
    }


def metric_states_on_cpu(copied: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "states": {name: _copied(value) for name, value in copied["states"].items()},
        "update_count": copied["update_count"],
    }


def load_metric_states(metric: Any, saved: Mapping[str, Any]) -> None:
    """Put states saved by `metric_states` back into the same kind of metric, device kept."""
    device = getattr(metric, "device", None)
    for name, value in saved["states"].items():
        setattr(metric, name, _copied(value, device))
    set_update_bookkeeping(metric, saved["update_count"], None)  # the states changed: no cached compute()


def update_bookkeeping(metric: Any) -> tuple[int, Any]:
    """A torchmetrics object's ``(_update_count, _computed)``.

    torchmetrics (private): ``Metric._update_count`` backs the public ``update_count`` and
    ``update_called``, which ``compute()`` checks; ``Metric._computed`` caches ``compute()``'s
    result until the next update.
    """
    return int(metric._update_count), metric._computed


def set_update_bookkeeping(metric: Any, update_count: int, computed: Any) -> None:
    """Put back what ``update_bookkeeping`` read (after restoring the metric's states)."""
    metric._update_count = update_count
    metric._computed = computed


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()  # a metric state: no graph to detach from
    if isinstance(value, list):
        items: list[Any] = cast(Any, value)
        return [_cloned(item) for item in items]
    return value


def _copied(value: Any, device: Any = None) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device).clone() if device is not None else value.detach().cpu().clone()
    if isinstance(value, list):
        items: list[Any] = cast(Any, value)  # isinstance leaves the item type unknown
        return [_copied(item, device) for item in items]
    return value
