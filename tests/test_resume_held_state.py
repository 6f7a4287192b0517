"""State a user keeps in containers and generators of other libraries, across a resume inside an epoch.

1. A callback's ``collections.deque`` (a bounded window of recent losses, of batches started): plain data
   like a list, kept with its ``maxlen``; a bounded deque drops its oldest items as it appends, so it is
   copied at each batch's start (the resumed batch starts from the window it started from).
"""

from __future__ import annotations

import collections
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from pytorch_lightning.callbacks import Callback
from test_resume_regressions import WAYS, chain

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
