"""The save exchange's protocol (lightning_step_types/resume/rank_exchange.py), on one in-memory store shared
by two threads that stand for two ranks: what rank 0 writes, and how long each side waits.

The real thing runs on two processes in tests/test_scaling.py; here each case takes a second at most.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist
from limits import hang_limit

import lightning_step_types.resume.rank_exchange as rank_exchange

# What an exchange on the in-memory store may take without waiting, on a loaded machine; SAVE_WAIT_S for
# these cases is longer, so that a wait and none are told apart.
SLACK = hang_limit(idle_s=0.2)
WAIT = SLACK + 0.5


class Strategy:
    def __init__(self) -> None:
        self.barriers: list[str] = []

    def broadcast(self, obj: Any) -> Any:
        return "token"  # rank 0's, as DDPStrategy.broadcast gives every rank

    def barrier(self, name: str | None = None) -> None:
        self.barriers.append(str(name))


class Trainer:
    """What the exchange reads of a Trainer."""

    def __init__(self, rank: int, status: str) -> None:
        self.world_size, self.global_rank, self.strategy = 2, rank, Strategy()
        self.state = SimpleNamespace(status=SimpleNamespace(_value_=status))  # TrainerStatus's value


def trainer(rank: int, status: str = "running") -> Any:
    return Trainer(rank, status)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Any:
    shared = dist.HashStore()
    monkeypatch.setattr(rank_exchange, "process_group_store", lambda: shared)
    monkeypatch.setattr(rank_exchange, "SAVE_WAIT_S", WAIT)
    return shared


def save(fit_trainer: Any, key: str, out: dict[str, Any]) -> None:
    """One rank's part of a save, then Lightning's closing barrier call, timed."""
    started = time.monotonic()
    out["states"] = rank_exchange.gathered_states(fit_trainer, key, {"rank": fit_trainer.global_rank})
    rank_exchange.settle_save(fit_trainer, None)
    fit_trainer.strategy.barrier("Trainer.save_checkpoint")
    out["seconds"] = time.monotonic() - started


def both(first: tuple[Any, str], second: tuple[Any, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    outs: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    threads = [threading.Thread(target=save, args=(t, key, out)) for (t, key), out in zip((first, second), outs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(hang_limit(idle_s=WAIT))
    return outs


def started(*trainers: Any) -> None:
    for fit_trainer in trainers:
        rank_exchange.fit_starts(fit_trainer)


def test_a_save_every_rank_reaches_gathers_every_state_at_once(store: Any) -> None:
    zero, one = trainer(0), trainer(1)
    started(zero, one)
    at_zero, at_one = both((zero, "batch_end 0 3"), (one, "batch_end 0 3"))
    assert at_zero["states"] == [{"rank": 0}, {"rank": 1}]
    assert at_zero["seconds"] < WAIT and at_one["seconds"] < WAIT
    # the closing barrier waited on the store: Lightning's collective one was not entered
    assert zero.strategy.barriers == one.strategy.barriers == []
    # the next save at the same point pairs with the other rank's next one there
    at_zero, _ = both((zero, "batch_end 0 3"), (one, "batch_end 0 3"))
    assert at_zero["states"] == [{"rank": 0}, {"rank": 1}]


def test_a_rank_at_another_point_contributes_none_and_neither_waits_long(store: Any) -> None:
    zero, one = trainer(0), trainer(1)
    started(zero, one)
    at_zero, at_one = both((zero, "batch 1 5"), (one, "batch_end 1 5"))
    assert at_zero["states"] == [{"rank": 0}, None]
    assert WAIT <= at_zero["seconds"] < WAIT + SLACK and WAIT <= at_one["seconds"] < WAIT + SLACK


def test_a_save_on_one_rank_alone_waits_a_bounded_time(store: Any) -> None:
    zero = trainer(0)
    started(zero, trainer(1))
    out: dict[str, Any] = {}
    save(zero, "batch 1 5", out)
    assert out["states"] == [{"rank": 0}, None]
    assert WAIT <= out["seconds"] < WAIT + SLACK


def test_a_rank_that_stopped_is_not_waited_for(store: Any) -> None:
    """Rank 1 saved inside on_exception (status interrupted) and left at once; rank 0's later save at
    another point does not wait for it."""
    zero, one = trainer(0), trainer(1, "interrupted")
    started(zero, one)
    at_one: dict[str, Any] = {}
    save(one, "batch 1 5", at_one)
    assert at_one["seconds"] < SLACK  # inside on_exception: no wait for ranks that did not come
    at_zero: dict[str, Any] = {}
    save(zero, "batch 1 6", at_zero)
    assert at_zero["states"] == [{"rank": 0}, None] and at_zero["seconds"] < SLACK
    # at the same point, its state is there
    again: dict[str, Any] = {}
    save(zero, "batch 1 5", again)
    assert again["states"] == [{"rank": 0}, {"rank": 1}] and again["seconds"] < SLACK


def test_a_lost_store_ends_every_wait(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's host (rank 0's process, or torchrun's agent) has gone: nothing waits on it."""
    one = trainer(1)
    started(trainer(0), one)

    class Lost:
        def __getattr__(self, name: str) -> Any:
            def fail(*args: Any) -> Any:
                raise RuntimeError("Connection reset by peer")

            return fail

    monkeypatch.setattr(rank_exchange, "process_group_store", lambda: Lost())
    out: dict[str, Any] = {}
    save(one, "batch 1 5", out)
    assert out["seconds"] < SLACK
