"""State a user keeps in containers and generators of other libraries, across a resume inside an epoch.

1. A callback's ``collections.deque`` (a bounded window of recent losses, of batches started): plain data
   like a list, kept with its ``maxlen``; a bounded deque drops its oldest items as it appends, so it is
   copied at each batch's start (the resumed batch starts from the window it started from).
2. A random generator the module holds (numpy's ``Generator`` with its default PCG64 or with MT19937, its
   legacy ``RandomState``, ``torch.Generator``, ``random.Random``), drawn from in ``training_step`` before
   the fault: set back in place to where it was at the batch's start; the weights and every draw are the
   uninterrupted run's. A resumed module that holds no such generator there is named.
3. The same generators held by a callback, drawn from in its ``on_train_batch_start``: set back in place too.
"""

from __future__ import annotations

import collections
import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pytorch_lightning.callbacks import Callback
from test_resume_regressions import WAYS, PlainPlanned, TypedPlanned, assert_same_fit, chain, fit

from lightning_step_types.resume.held_generators import from_record, record
from lightning_step_types.resume.plain_data import decoded, encoded, is_plain, same

# --- 1. a callback's deque -------------------------------------------------------------------------------


class RecentWindows(Callback):
    """A user's callback keeping bounded windows in deques: the batches started (appended before the step, so
    the window at the save holds the batch that failed) and the recent losses; each batch's end records both."""

    def __init__(self) -> None:
        self.started: collections.deque[int] = collections.deque(maxlen=3)
        self.losses: collections.deque[float] = collections.deque(maxlen=4)
        self.seen: list[tuple[tuple[int, ...], tuple[float, ...]]] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.started.append(batch_idx)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(round(float(outputs["loss"]), 6))
        self.seen.append((tuple(self.started), tuple(self.losses)))


@pytest.mark.parametrize("way", WAYS)
def test_a_callbacks_deques_come_back_at_the_point_with_their_bounds(way: str, tmp_path: Path) -> None:
    """A fault in epoch 1's batch 5: the windows at that batch's start come back (the started one without
    batch 5, which it appended before the fault), as deques with the same maxlen; no warning."""
    full, interrupted, resumed = chain(way, tmp_path, lambda: [RecentWindows()], (1, 5))
    (mine,) = [callback for callback in resumed.trainer.callbacks if isinstance(callback, RecentWindows)]
    (theirs,) = [callback for callback in full.trainer.callbacks if isinstance(callback, RecentWindows)]
    (stopped,) = [callback for callback in interrupted.trainer.callbacks if isinstance(callback, RecentWindows)]
    assert list(stopped.started) == [3, 4, 5]  # batch 5 had started: the point's window is [2, 3, 4]
    assert resumed.warned == []
    assert len(mine.seen) == len(theirs.seen) == 24
    assert mine.seen == theirs.seen  # each batch's windows after the resume too
    assert mine.seen[12 + 5] == ((3, 4, 5), theirs.seen[17][1])
    assert (type(mine.started), mine.started.maxlen, type(mine.losses), mine.losses.maxlen) == (
        collections.deque,
        3,
        collections.deque,
        4,
    )


def test_a_deque_of_plain_data_is_written_as_plain_data_and_read_back_with_its_bound() -> None:
    """What the checkpoint holds loads with torch.load(weights_only=True); a deque of an object is not plain."""
    window = collections.deque([1.5, torch.tensor([2.0]), {"step": 3}], maxlen=5)
    buffer = io.BytesIO()
    torch.save({"window": encoded(window), "unbounded": encoded(collections.deque([[1, 2]]))}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    back = decoded(loaded["window"])
    assert type(back) is collections.deque and back.maxlen == 5 and same(back, window)
    assert decoded(loaded["unbounded"]) == collections.deque([[1, 2]]) and decoded(loaded["unbounded"]).maxlen is None
    assert not same(back, collections.deque(window, maxlen=6)) and not same(back, list(window))
    assert not is_plain(window)  # a checkpoint holds it only as encoded


# --- 2. a generator the module holds ---------------------------------------------------------------------

GENERATORS: dict[str, Any] = {
    "numpy": lambda: np.random.default_rng(11),
    "numpy_mt19937": lambda: np.random.Generator(np.random.MT19937(11)),
    "numpy_legacy": lambda: np.random.RandomState(11),
    "torch": lambda: torch.Generator().manual_seed(11),
    "random": lambda: random.Random(11),
}


def _draw(rng: Any) -> float:
    if isinstance(rng, torch.Generator):
        return float(torch.randn((), generator=rng))
    if isinstance(rng, random.Random):
        return rng.gauss(0.0, 1.0)  # keeps its second normal for the next draw: part of its state
    return float(rng.standard_normal())


class _Noisy:
    """Scales each step's loss by noise drawn from a generator set in __init__, before the step's fault."""

    def hold(self, kind: str) -> None:
        self.rng = GENERATORS[kind]()
        self.draws: list[float] = []

    def loss(self, batch: Any, batch_idx: int) -> torch.Tensor:
        noise = _draw(self.rng)
        self.draws.append(noise)
        return super().loss(batch, batch_idx) * (1 + 0.1 * noise)  # type: ignore[misc]


class TypedNoisy(_Noisy, TypedPlanned):
    def __init__(self, kind: str, plan: dict[str, Any] | None = None) -> None:
        super().__init__(plan)
        self.hold(kind)


class PlainNoisy(_Noisy, PlainPlanned):
    def __init__(self, kind: str, plan: dict[str, Any] | None = None) -> None:
        super().__init__(plan)
        self.hold(kind)


def _noisy(way: str, kind: str, plan: dict[str, Any] | None = None) -> Any:
    return TypedNoisy(kind, plan) if way == "typed" else PlainNoisy(kind, plan)


CASES = [(way, kind) for kind in GENERATORS for way in WAYS if way == "typed" or kind == "numpy"]


@pytest.mark.parametrize(("way", "kind"), CASES)
def test_a_generator_the_module_holds_draws_on_from_the_point(way: str, kind: str, tmp_path: Path) -> None:
    """A fault in epoch 1's batch 5, after that batch's draw: the resumed module's generator is set back to
    batch 5's start, so it draws batch 5's noise again; the weights are the uninterrupted run's, no warning."""
    full = fit(way, tmp_path / "full", _noisy(way, kind), [])
    interrupted = fit(way, tmp_path / "run", _noisy(way, kind, {"fault": (1, 5)}), [])
    assert interrupted.error is not None and len(interrupted.module.draws) == 12 + 6
    saved = tmp_path / "saved.ckpt"
    (tmp_path / "run" / "on_exception.ckpt").rename(saved)
    torch.load(saved, weights_only=True)  # what the checkpoint holds of the generator is plain data
    resumed = fit(way, tmp_path / "run", _noisy(way, kind), [], ckpt_path=saved)
    assert resumed.warned == []
    assert_same_fit(resumed, full)
    assert len(full.module.draws) == 24 and resumed.module.draws == full.module.draws
    assert _draw(resumed.module.rng) == _draw(full.module.rng)  # both where the fit left them


@pytest.mark.parametrize("way", WAYS)
def test_a_generator_the_resumed_module_does_not_hold_is_named(way: str, tmp_path: Path) -> None:
    """Saved with a numpy Generator, resumed by a module holding a random.Random there: named, with what it was."""
    interrupted = fit(way, tmp_path / "run", _noisy(way, "numpy", {"fault": (1, 5)}), [])
    assert interrupted.error is not None
    resumed = fit(way, tmp_path / "run", _noisy(way, "random"), [], ckpt_path=tmp_path / "run" / "on_exception.ckpt")
    (message,) = resumed.warned
    owner = "TypedNoisy" if way == "typed" else "PlainNoisy"
    assert message.splitlines()[1] == (
        "  got:      module attributes that changed during the fit before the save and that no checkpoint holds:"
        f" {owner}.rng (random.Random, a numpy.random.Generator at the save, which it does not hold now);"
        " the resumed run starts them as the new module's __init__ and setup left them"
    )


# --- 3. a generator a callback holds ---------------------------------------------------------------------


class NoisyCallback(Callback):
    """A user's callback drawing from a generator of its own at each batch's start, before the step's fault."""

    def __init__(self, kind: str) -> None:
        self.rng = GENERATORS[kind]()
        self.draws: list[float] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.draws.append(_draw(self.rng))


def _noisy_callback(fit: Any) -> NoisyCallback:
    (callback,) = [callback for callback in fit.trainer.callbacks if isinstance(callback, NoisyCallback)]
    return callback


@pytest.mark.parametrize("kind", list(GENERATORS))
def test_a_generator_a_callback_holds_draws_on_from_the_point(kind: str, tmp_path: Path) -> None:
    """A fault in epoch 1's batch 5, after the callback drew for it: its generator is set back to batch 5's start."""
    full, interrupted, resumed = chain("typed", tmp_path, lambda: [NoisyCallback(kind)], (1, 5))
    assert len(_noisy_callback(interrupted).draws) == 12 + 6
    assert resumed.warned == []
    assert len(_noisy_callback(full).draws) == 24 and _noisy_callback(resumed).draws == _noisy_callback(full).draws
    assert _draw(_noisy_callback(resumed).rng) == _draw(_noisy_callback(full).rng)


def test_a_generator_the_resumed_callback_does_not_hold_is_named(tmp_path: Path) -> None:
    interrupted = fit("typed", tmp_path / "run", TypedPlanned({"fault": (1, 5)}), [NoisyCallback("numpy")])
    assert interrupted.error is not None
    saved = tmp_path / "run" / "on_exception.ckpt"
    resumed = fit("typed", tmp_path / "run", TypedPlanned(), [NoisyCallback("torch")], ckpt_path=saved)
    (message,) = resumed.warned
    assert message.splitlines()[1].endswith(" NoisyCallback.rng (Generator, a numpy.random.Generator at the save)"), (
        message
    )


def test_a_users_dict_shaped_as_a_generators_record_stays_a_dict() -> None:
    """A callback's dict whose one key is the record's marker is written as items: read back as that dict."""
    lookalike = {"lightning_step_types.generator": ["numpy", {"state": 1}]}
    assert from_record(encoded(lookalike)) is None and decoded(encoded(lookalike)) == lookalike
    assert from_record(record("torch", torch.Generator().get_state())) is not None
