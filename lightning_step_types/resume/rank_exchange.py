"""Every process's running state, brought to the checkpoint that global rank 0 writes.

Each process saves its own running state (its share of the data); Lightning writes the checkpoint
on global rank 0 only. A process whose state belongs to another resume point (``key``) than rank
0's contributes none: its state describes other batches.

A save can come on some processes only: ``OnExceptionCheckpoint`` after an exception on one of them,
a signal delivered to one, ``trainer.save_checkpoint`` from one rank's hook. A collective entered
there would wait for processes that never come, until the process group's timeout. So nothing here
is a collective: the states travel through the process group's store (``set`` / ``check`` / ``add``,
``_lightning.saves.process_group_store``), and every wait is bounded:

- each process posts its state under the save's key: the fit's token (agreed at the fit's start),
  the resume point, and how many saves this process made at that point before (so that the n-th
  save at a point pairs with the other processes' n-th save there);
- global rank 0 waits up to ``SAVE_WAIT_S`` for the others' states at that key, less for a process
  that has stopped (it saved inside ``on_exception``, and will reach no other save), and writes
  what arrived: a missing process is None, named in one warning at resume;
- ``Trainer.save_checkpoint``'s closing barrier becomes a wait on the same store: as long as a
  collective barrier would wait when every process reached the save, ``SAVE_WAIT_S`` from the
  save's start when some did not; a save inside ``on_exception`` waits only for processes that
  reached it, and no wait goes on once another process has stopped.
"""

from __future__ import annotations

import os
import pickle
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from lightning_step_types._lightning.fit_loop import interrupted
from lightning_step_types._lightning.saves import (
    process_group_backend,
    process_group_store,
    replace_save_barrier,
    restore_save_barrier,
)
from lightning_step_types.resume.messages import gloo_restarts_problem, warn

__all__ = [
    "BARRIER_WAIT_S",
    "SAVE_WAIT_S",
    "fit_ends",
    "fit_starts",
    "gathered_states",
    "settle_save",
    "warn_if_restarts_cannot_connect",
]

SAVE_WAIT_S = 10.0  # how long a save waits for the other processes to reach it
BARRIER_WAIT_S = 1800.0  # after a save every process reached: torch's default process-group timeout
_PREFIX = "lightning_step_types"


class _Save:
    """One save on this process: its key in the store, and when this process reached it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.started = time.monotonic()


class _Fit:
    """One distributed fit's exchange: its token, and this process's saves per resume point."""

    def __init__(self, token: str, rank: int, world_size: int) -> None:
        self.token, self.rank, self.world_size = token, rank, world_size
        self.counts: dict[str, int] = {}
        self.current: _Save | None = None  # begun by gathered_states in the save in progress
        self.done: list[str] = []  # rank 0: the keys of earlier saves, whose counters it clears
        self.stopping = False  # this process saved inside on_exception

    def begin(self, store: Any, point: str, stopping: bool) -> _Save:
        count = self.counts[point] = self.counts.get(point, 0) + 1
        save = self.current = _Save(f"{_PREFIX}/{self.token}/{point.replace(' ', '-')}/{count}")
        if stopping and not self.stopping:  # inside on_exception: this process reaches no other save in this fit
            self.stopping = True
            _call(store.set, f"{_PREFIX}/{self.token}/stopped/{self.rank}", b"1")
            _call(store.add, f"{_PREFIX}/{self.token}/stopped", 1)
        _call(store.add, f"{save.key}/arrived", 1)
        if self.rank == 0:
            self.done.append(save.key)
            for old in self.done[:-2]:  # every process has left those saves' barriers
                for name in ("arrived", "passed"):
                    _call(store.delete_key, f"{old}/{name}")
            del self.done[:-2]
        return save

    def stopped(self, store: Any, rank: int) -> bool:
        return bool(_call(store.check, [f"{_PREFIX}/{self.token}/stopped/{rank}"], default=True))

    def others_stopped(self, store: Any) -> bool:
        stopped = _call(store.add, f"{_PREFIX}/{self.token}/stopped", 0, default=self.world_size)
        return bool(stopped > int(self.stopping))


_FITS: weakref.WeakKeyDictionary[Any, _Fit] = weakref.WeakKeyDictionary()


def fit_starts(trainer: Any) -> None:
    """At a followed fit's setup, on every process: agree on the fit's token (rank 0's, broadcast).

    Setup runs on every process, between Lightning's own barriers, so this one collective is entered
    by all of them. The token keeps this fit's keys apart from an earlier fit's in the same store
    (a second ``fit`` in the same processes, or the attempt before a torchrun restart).
    """
    _FITS.pop(trainer, None)
    world_size = int(getattr(trainer, "world_size", 1))
    if world_size <= 1 or process_group_store() is None:
        return
    token = str(trainer.strategy.broadcast(uuid.uuid4().hex))
    _FITS[trainer] = _Fit(token, int(trainer.global_rank), world_size)


def warn_if_restarts_cannot_connect(trainer: Any, module: Any) -> None:
    """On global rank 0 of a torchrun job's first attempt: name the setting gloo needs for its restarts.

    torchrun's workers rendezvous through its agent's store by default; on gloo a restarted attempt's
    ranks then fail to connect or hang (pytorch/pytorch issue 135712), so no resume happens at all.
    torchrun tells its workers what it does in their environment (``TORCHELASTIC_*``).
    """
    if _FITS.get(trainer) is None or int(trainer.global_rank) != 0:
        return
    environ = os.environ
    restarts = int(environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0)
    if restarts <= 0 or environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or process_group_backend() != "gloo":
        return
    warn(module, "torchrun's restarts", gloo_restarts_problem(restarts))


def fit_ends(trainer: Any) -> None:
    if _FITS.pop(trainer, None) is not None:
        restore_save_barrier(trainer.strategy)


def gathered_states(trainer: Any, key: str, state: Any) -> list[Any]:
    """Every process's ``state`` in rank order on global rank 0, None for a process whose state at
    ``key`` did not arrive in time (another point, or no save at all); elsewhere this process's own."""
    fit = _FITS.get(trainer)
    store = process_group_store()
    if fit is None or store is None:
        return [state]
    save = fit.begin(store, key, interrupted(trainer))
    states: list[Any] = [None] * fit.world_size
    states[fit.rank] = state
    if fit.rank != 0:
        _call(store.set, f"{save.key}/state/{fit.rank}", pickle.dumps(state))
        return states
    waiting = set(range(1, fit.world_size))
    deadline = save.started + SAVE_WAIT_S
    pause = _Pause()
    while waiting:
        for rank in sorted(waiting):
            name = f"{save.key}/state/{rank}"
            stopped = fit.stopped(store, rank)  # read first: a process posts its state before it stops
            if _call(store.check, [name], default=False):
                states[rank] = pickle.loads(_call(store.get, name, default=pickle.dumps(None)))
                _call(store.delete_key, name)
                waiting.discard(rank)
            elif stopped:
                waiting.discard(rank)
        if not waiting or time.monotonic() > deadline:
            break
        pause()
    return states


def settle_save(trainer: Any, saved_point: dict[str, Any] | None) -> None:
    """After this process's part of a save (``saved_point``: the point its checkpoint resumes from, or
    None where it saved no running state): ``Trainer.save_checkpoint``'s closing barrier becomes a
    bounded wait for the processes that reached the same save."""
    fit = _FITS.get(trainer)
    store = process_group_store()
    if fit is None or store is None:
        return
    save, fit.current = fit.current, None
    if save is None:
        if saved_point is None:  # nothing of ours in this checkpoint: Lightning's barrier as it is
            return
        # resumed and saved again before any batch: no state to exchange, the same barrier
        save = fit.begin(
            store, f"{saved_point['kind']} {saved_point['epoch']} {saved_point['batch']}", interrupted(trainer)
        )
    replace_save_barrier(trainer.strategy, lambda: _wait_for_others(fit, store, save))


def _wait_for_others(fit: _Fit, store: Any, save: _Save) -> None:
    passed = f"{save.key}/passed"
    if _call(store.add, passed, 1, default=None) is None:
        return
    # inside on_exception no process waits for the others to come: only for those that came already
    deadline = save.started + (0.0 if fit.stopping else SAVE_WAIT_S)
    everyone = False
    pause = _Pause()
    while True:
        if _call(store.add, passed, 0, default=fit.world_size) >= fit.world_size:
            return
        if not everyone and _call(store.add, f"{save.key}/arrived", 0, default=0) >= fit.world_size:
            everyone, deadline = True, time.monotonic() + BARRIER_WAIT_S  # every process reached it
        if time.monotonic() > deadline or fit.others_stopped(store):
            return
        pause()


class _Pause:
    """Sleeps between two looks at the store: 1 ms at first, doubling up to 50 ms, so that a save every
    process reaches costs little and a long wait does not flood the store's host."""

    def __init__(self) -> None:
        self.seconds = 0.001

    def __call__(self) -> None:
        time.sleep(self.seconds)
        self.seconds = min(0.05, self.seconds * 2)


def _call(operation: Callable[..., Any], *args: Any, default: Any = None) -> Any:
    """A store operation; ``default`` where the store cannot be reached (its host process has ended)."""
    try:
        return operation(*args)
    except Exception:  # noqa: BLE001 - a lost store raises RuntimeError or DistStoreError, by torch version
        return default
