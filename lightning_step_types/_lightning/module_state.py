"""What torch and torchmetrics keep privately in a module: running statistics, gradients, metric states.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
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
    "running_stats_buffers",
    "running_stats_versions",
    "set_update_bookkeeping",
    "tensor_version",
    "update_bookkeeping",
]


_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")
_VERSION = attrgetter("_version")
RunningStatsMark = tuple[tuple[torch.Tensor, ...], tuple[int, ...]]


def _keeps_running_stats(sub: Any, norm_base: Any) -> bool:
    if not getattr(sub, "track_running_stats", False):
        return False
    return isinstance(sub, norm_base) or dict(sub.named_buffers(recurse=False)).get("running_mean") is not None


def _statistics(sub: Any) -> list[torch.Tensor]:
    buffers = dict(sub.named_buffers(recurse=False))
    return [buffers[name] for name in _STATISTICS if isinstance(buffers.get(name), torch.Tensor)]


def modules_with_running_stats(module: Any, since: RunningStatsMark | None = None) -> list[str]:
    """The submodules, named ``self.bn (BatchNorm1d)``, that update running statistics in their forward.

    Batch, instance and sync-batch norm derive from `torch.nn.modules.batchnorm._NormBase` (torch,
    private) and update `running_mean`/`running_var`/`num_batches_tracked` in place in training mode
    with `track_running_stats`; other modules that follow that convention are found by those names.
    ``since``: `running_stats_buffers` with their `running_stats_versions` at the batch's start; a module
    whose statistics are those same tensors, none changed in place since (`Tensor._version`, torch-private:
    its forward in training mode moves each), is left out: they are the batch start's. Read when a
    checkpoint is saved inside a batch, never per batch.
    """
    norm_base: Any = getattr(torch.nn.modules.batchnorm, "_NormBase", ())
    at_start: dict[int, tuple[torch.Tensor, int]] = {}
    if since is not None:
        at_start = {id(tensor): (tensor, version) for tensor, version in zip(*since)}
    found: list[str] = []
    for path, sub in module.named_modules():
        if not (getattr(sub, "training", False) and _keeps_running_stats(sub, norm_base)):
            continue
        statistics = _statistics(sub)
        if statistics and all(
            id(tensor) in at_start
            and at_start[id(tensor)][0] is tensor
            and int(_VERSION(tensor)) == at_start[id(tensor)][1]
            for tensor in statistics
        ):
            continue
        found.append(f"{'self.' + path if path else 'self'} ({type(sub).__name__})")
    return found


def running_stats_buffers(module: Any) -> tuple[torch.Tensor, ...]:
    """The running statistics of every submodule that keeps them (`modules_with_running_stats`' modules, in
    either mode), read at the fit's start: empty for a module without any, which then costs nothing per batch."""
    norm_base: Any = getattr(torch.nn.modules.batchnorm, "_NormBase", ())
    found: list[torch.Tensor] = []
    for sub in module.modules():
        if _keeps_running_stats(sub, norm_base):
            found += _statistics(sub)
    return tuple(found)


def running_stats_versions(buffers: tuple[torch.Tensor, ...]) -> tuple[int, ...]:
    """Each statistic's in-place version (`Tensor._version`, torch-private), read in C: at each batch's start."""
    return tuple(map(_VERSION, buffers))


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
