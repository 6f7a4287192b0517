"""Every process's running state, brought to the checkpoint that global rank 0 writes.

Each process saves its own running state (its share of the data); Lightning writes the checkpoint
on global rank 0 only. A process whose state belongs to another resume point (``key``) than rank
0's contributes none: its state describes other batches.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["gathered_states"]


def gathered_states(trainer: Any, key: str, state: Any) -> list[Any]:
    """Every process's ``state`` in rank order, None for a process whose ``key`` is not rank 0's."""
    world_size = int(getattr(trainer, "world_size", 1))
    if world_size <= 1 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [state]
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    all_gather_object: Any = getattr(torch.distributed, "all_gather_object")  # torch leaves its parameters untyped
    all_gather_object(gathered, {"key": key, "state": state})
    first = gathered[0]["key"]
    return [other["state"] if other["key"] == first else None for other in gathered]
