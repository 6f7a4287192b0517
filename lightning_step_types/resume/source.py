"""A source of state for exact resume, and the one protocol every source answers.

A followed fit (``resume/fit_follower.py``, the coordinator) holds its sources side by side: the global
random streams (``random_streams``), the plain training loaders' passes (``plain_loaders``), the module's
own attributes (``undeclared_state``), the callbacks' attributes and the loggers' rows (``holders``), the
samplers Lightning wraps under DDP (``data_order``), the training loaders' generators (``data_randomness``),
the optimizers' settings and the schedulers' states each process holds (``shared_settings``). The module's
attributes and the callbacks' are read by one reader (``marks``, and from batch to batch
``followed_attributes``). The coordinator knows where the fit is; each source knows one kind of state, and
is asked the same questions:

- `Source.mark`: at the fit's moments a point can start at (the fit's start, an epoch's start, a
  validation's start, an epoch's end's start, an epoch's end), what it needs of its state there; and at each
  run of the fit loop's start (a tuner's trials run it before the fit's own run), what of a run before is stale;
- `Source.batch_start`: at each batch's start, what it reads, where it reads anything
  (`Source.reads_each_batch`): the least that can change, since most batches are never the one a resume
  starts from; its docstring states the cost (``docs/resume.md``, "Cost", gives each source's figure);
- `Source.encode`: at a save, its entry in the process's running state, as plain data (``plain_data``),
  from a `Saving` that tells every source the same facts about the save;
- `Source.load`: at a resumed fit's load (``on_load_checkpoint``), its entry, kept for the moments it
  puts its state back at (from a `Loading` that tells every source the same facts about the resume);
- `Source.restore`: at the resumed fit's start (after the ``on_train_start`` hooks, or where nothing is left
  to train), what goes back there, and what it cannot put back, named (`messages.Problem`);
- `Source.reach_point`: where the resumed fit reaches its point (its first batch, or its first epoch's end,
  where no batch ran before it), what goes back there;
- `Source.stop`: at the fit's teardown, what it put on Lightning's or torch's objects taken off.

A source never calls another, and reads Lightning's private names only through ``_lightning/``. A new kind
of state is a new source beside these, with nothing else to change but the coordinator's list.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lightning_step_types.resume.messages import Problem
from lightning_step_types.resume.points import Point

__all__ = ["Loading", "Moment", "Saving", "Source"]


class Moment(str, enum.Enum):
    """The fit's moments a source is told of (`Source.mark`)."""

    # the fit loop's run starts, before `FitLoop.setup_data` (a tuner's trials run it before the fit's own run)
    LOOP_START = "loop_start"
    # the sanity check's validation starts, before it makes its loaders (inside `isolate_rng`: the fit loop's run
    # starts from the streams as they are here)
    SANITY_CHECK = "sanity_check"
    FIT_START = "fit_start"  # before the on_train_start hooks
    TRAIN_STARTED = "train_started"  # after them
    EPOCH_START = "epoch_start"  # before an epoch's on_train_epoch_start hooks (which a resume there runs again)
    VALIDATION = "validation"  # a validation's start, inside a batch's end
    EPOCH_END = "epoch_end"  # an epoch's end's start: its on_train_epoch_end hooks and logging
    EPOCH_ENDED = "epoch_ended"  # after the epoch's end


@dataclass(frozen=True)
class Saving:
    """What every source is told of one save (``resume/save.py`` builds it once)."""

    trainer: Any
    point: Point
    phase: str  # the coordinator's (fit_follower.Phase)
    record_epoch: int  # the batch whose start the coordinator last recorded
    record_batch: int
    # where what runs again after a resume from the point began (None: nothing that ran before the save
    # runs again): "fetch", "batch", "validation", "epoch_end", "epoch_start"
    runs_again: str | None
    batches_done: int  # of the point's epoch, before its next batch
    last_batch: bool  # none comes after them
    stop: list[int | None] | None  # the fit's limits, where it is stopping (`trainer.should_stop`)
    # a batch whose on_train_batch_end hooks had not all returned, where the point is its end: an exception stopped
    # them, or the save is made from inside them
    unfinished: int | None
    callback_entries: Mapping[str, Any] | None  # each callback's state_dict(), as Lightning called it for this save
    # each training loader's generators' states around the pass ``max_size_cycle`` started it in at the point, or
    # None where none did (`data_randomness.LoaderPasses.at`); None: no loader's pass is told apart
    passes: list[Any] | None
    # entries the processes share (not per rank): a source writes its shared part here
    shared: dict[str, Any] = field(default_factory=lambda: {})


@dataclass(frozen=True)
class Loading:
    """What every source is told of the resumed fit (``resume/load.py`` builds it at the load, and keeps it
    until the resumed fit's first epoch ends: the Trainer and the module by weak reference)."""

    trainer: weakref.ReferenceType[Any]
    module: weakref.ReferenceType[Any]
    point: Point | None  # where the resumed fit starts (None: a checkpoint without the library's state)
    where: str  # "resuming epoch 1 at batch 3": for the warnings
    saved: Mapping[str, Any] | None  # the library's whole entry (None: a plain Lightning checkpoint)
    rank: int  # this process's index into the saved ranks (-1: the world size differs)
    cycled: list[bool] | None = None  # which training loaders had started a new pass at the point (None: not known)


class Source(Protocol):
    """One kind of state a checkpoint carries for exact resume (see the module docstring)."""

    @property
    def key(self) -> str:
        """Its entry in each process's running state."""
        ...

    @property
    def reads_each_batch(self) -> bool:
        """Whether `batch_start` reads anything (the coordinator calls it at each batch's start only then)."""
        ...

    def mark(self, moment: Moment) -> None: ...

    def batch_start(self) -> None: ...

    def encode(self, saving: Saving) -> Any: ...

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        """``entry``: its own (None where the checkpoint holds none); ``checkpoint``: Lightning's, as loaded (the
        callbacks' entries not loaded yet), only for the time of the call."""
        ...

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]: ...

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        """``batch``: at the first batch (else at the first epoch's end); ``inside_epoch``: the point's loaders
        resume inside the epoch from a state Lightning's loop holds."""
        ...

    def stop(self) -> None: ...
