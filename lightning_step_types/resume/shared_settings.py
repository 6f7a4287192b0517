"""What every process of a distributed fit must hold alike: its optimizers' settings and its LR schedulers' states.

Under DDP the processes train one model: each applies the same averaged gradients with the same learning
rate, so their weights stay equal, and a checkpoint holds rank 0's weights, optimizers and schedulers, which
every process loads. Where a process's scheduler steps on a value only that process logged (a
``ReduceLROnPlateau`` monitoring ``self.log("train_loss", loss)`` without ``sync_dist=True``), its state parts
from rank 0's, then its learning rate, and from its next step its weights:

- a scheduler's state (a plateau's best value and wait count): each process's own goes back to it at the
  resumed fit's start, after Lightning's load gave it rank 0's, so it decides as it would have;
- an optimizer's settings (its learning rate): from then on the weights part too, and the file holds one copy
  of them, so nothing can put a process's own back; named in one warning at resume (global rank 0).

A source of state (``resume/source.py``): at a save under several processes, its entry is this process's
optimizers' settings (each parameter group's, but its parameters) and its schedulers' ``state_dict()``, their
numbers and strings; at the load, each process's entry is compared with rank 0's. Nothing per batch.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch

from lightning_step_types.resume.messages import Problem, diverged_processes_problem
from lightning_step_types.resume.source import Loading, Moment, Saving

__all__ = ["SETTINGS", "SharedSettings"]

SETTINGS = "settings"

_PLAIN = (bool, int, float, str, type(None))


class SharedSettings:
    """The optimizers' settings and the schedulers' states of each process (see the module docstring)."""

    key = SETTINGS
    reads_each_batch = False

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.differing: dict[int, list[str]] = {}  # rank -> which of its optimizers' settings differ from rank 0's
        self.own: Mapping[str, Any] | None = None  # this process's entry, where it differs from rank 0's

    def mark(self, moment: Moment) -> None:
        pass

    def batch_start(self) -> None:
        pass

    def encode(self, saving: Saving) -> dict[str, Any] | None:
        trainer = saving.trainer
        if int(getattr(trainer, "world_size", 1)) < 2:
            return None
        return settings_of(trainer)

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        self.differing, self.own = {}, None
        saved = loading.saved
        ranks: Any = saved.get("ranks") if saved is not None else None
        if loading.rank < 0 or not isinstance(ranks, list):
            return
        states = cast("Sequence[Any]", ranks)
        first = _settings_in(states[0]) if len(states) > 1 else None
        if first is None:
            return
        for rank, state in enumerate(states[1:], 1):
            own = _settings_in(state)
            if own is None:
                continue
            names = differences(first, own)
            if rank == loading.rank and names:
                self.own = own
            optimizers = [name for name in names if name.startswith("optimizer")]
            if optimizers:
                self.differing[rank] = optimizers

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        trainer = self.trainer()
        if trainer is None:
            return []
        own = self.own
        if own is not None:  # Lightning's load gave this process rank 0's scheduler states: its own go back
            for config, state in zip(trainer.lr_scheduler_configs, own.get("schedulers", [])):
                scheduler = config.scheduler
                saved = {name: value for name, value in state.items() if name != "type"}
                scheduler.load_state_dict({**scheduler.state_dict(), **saved})
        if not self.differing or int(getattr(trainer, "global_rank", 0)) != 0:
            return []
        return [diverged_processes_problem(self.differing)]

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        pass

    def stop(self) -> None:
        pass


def settings_of(trainer: Any) -> dict[str, Any]:
    """The optimizers' parameter groups (but their parameters) and the LR schedulers' states, as plain data: each
    value a number, a string, a bool or None (a one-value tensor as its number; anything else left out)."""
    optimizers = [
        [{name: _plain(value) for name, value in group.items() if name != "params"} for group in optimizer.param_groups]
        for optimizer in trainer.optimizers
    ]
    schedulers = [
        {
            "type": type(config.scheduler).__name__,
            **{name: _plain(value) for name, value in config.scheduler.state_dict().items()},
        }
        for config in trainer.lr_scheduler_configs
    ]
    return {"optimizers": _kept(optimizers), "schedulers": _kept(schedulers)}


def differences(first: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """What of ``other`` (a process's `settings_of`) differs from ``first`` (rank 0's), named for a user."""
    names: list[str] = []
    for index, (groups, own_groups) in enumerate(zip(first.get("optimizers", []), other.get("optimizers", []))):
        for number, (group, own) in enumerate(zip(groups, own_groups)):
            names += [
                f"optimizer {index} group {number} {name}"
                for name in sorted({*group, *own})
                if not _equal(group.get(name), own.get(name))
            ]
    for index, (state, own) in enumerate(zip(first.get("schedulers", []), other.get("schedulers", []))):
        names += [
            f"scheduler {index} ({state.get('type')}) {name}"
            for name in sorted({*state, *own})
            if not _equal(state.get(name), own.get(name))
        ]
    return names


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if type(value) in _PLAIN:
        return value
    if type(value) in (list, tuple):
        items = [_plain(item) for item in value]
        return items if all(item is not _LEFT_OUT for item in items) else _LEFT_OUT
    return _LEFT_OUT


_LEFT_OUT: Any = object()  # a value that is not plain data: not compared


def _kept(value: Any) -> Any:
    """``value`` without what `_plain` left out."""
    if isinstance(value, dict):
        items = cast("Mapping[str, Any]", value)
        return {name: _kept(item) for name, item in items.items() if item is not _LEFT_OUT}
    if isinstance(value, list):
        return [_kept(item) for item in cast("Sequence[Any]", value)]
    return value


def _settings_in(state: Any) -> Mapping[str, Any] | None:
    """A process's entry in a saved running state (None where it holds none)."""
    entry: Any = cast("Mapping[str, Any]", state).get(SETTINGS) if isinstance(state, Mapping) else None
    return cast("Mapping[str, Any]", entry) if isinstance(entry, Mapping) else None


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        first, second = cast("Sequence[Any]", a), cast("Sequence[Any]", b)
        return len(first) == len(second) and all(_equal(x, y) for x, y in zip(first, second))
    return bool(a == b)
