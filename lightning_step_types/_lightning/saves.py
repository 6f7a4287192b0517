"""Saves that some processes may not reach: the process group's store and the save barrier.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance

__all__ = ["process_group_backend", "process_group_store", "replace_save_barrier", "restore_save_barrier"]


# A checkpoint can be saved on one process alone: `OnExceptionCheckpoint` after an exception on that
# process, a signal (SLURM's requeue) delivered to it, `trainer.save_checkpoint` from one rank's hook.
# A collective entered there waits for processes that never come: until the process group's timeout
# (30 minutes by default). Every process's running state therefore travels through the process
# group's store, with bounded waits, and `Trainer.save_checkpoint`'s closing barrier is replaced for
# the save by a bounded wait on the same store.


def process_group_store() -> Any:
    """The default process group's c10d store, or None (no process group, or a torch without it).

    `torch.distributed.distributed_c10d._get_default_store` (torch-private, since 1.x): the store the
    default group was rendezvoused through (a `PrefixStore` over the `TCPStore` that global rank 0,
    torchrun's agent or the launcher hosts); it supports `set`, `get`, `check`, `add`, `delete_key`.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    default_store: Any = getattr(torch.distributed.distributed_c10d, "_get_default_store", None)
    if default_store is None:
        return None
    try:
        return default_store()
    except (RuntimeError, ValueError):
        return None


def process_group_backend() -> str | None:
    """The default process group's backend (public: `torch.distributed.get_backend`), or None without one."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    return str(torch.distributed.get_backend())


def replace_save_barrier(strategy: Any, wait: Callable[[], None]) -> None:
    """Run ``wait()`` in place of the next ``strategy.barrier("Trainer.save_checkpoint")``.

    `Trainer.save_checkpoint` ends with ``self.strategy.barrier("Trainer.save_checkpoint")`` after the
    strategy wrote the checkpoint (pytorch-lightning 2.1 to 2.6); `barrier` is looked up on the
    instance, so an instance attribute runs first. It removes itself at that call; any other barrier
    goes to the strategy's own.
    """
    kind: Any = strategy.__class__
    own: Callable[..., None] = kind.barrier

    def barrier(name: str | None = None, *args: Any, **kwargs: Any) -> None:
        if name != "Trainer.save_checkpoint":
            own(strategy, name, *args, **kwargs)
            return
        take_off_instance(strategy, "barrier")
        wait()

    put_on_instance(strategy, "barrier", barrier)


def restore_save_barrier(strategy: Any) -> None:
    take_off_instance(strategy, "barrier")
