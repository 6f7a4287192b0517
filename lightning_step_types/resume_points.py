"""The rule: a checkpoint resumes from the last point whose every effect it holds.

A point sits between two things Lightning does. The kinds, in the order a fit reaches them:

- ``epoch``: epoch *e* from its start (its on_train_epoch_start hooks run again);
- ``batch``: batch *N* of epoch *e* from its fetch;
- ``batch_end``: batch *N*'s training done; its end (the validation due after it, the plateau LR
  schedulers, the logger's step) comes first, then batch *N + 1*;
- ``epoch_end``: every batch of epoch *e* done; its end (on_train_epoch_end, the epoch's logging)
  comes first;
- ``next_epoch``: epoch *e*'s end done as far as its hooks; Lightning goes on at epoch *e + 1*.

``point_of`` maps where a save came (a ``Position``) to the point, and to what no point can hold
(``Loss``): each is named in the one warning at resume. It reads no Lightning object: the saving
side (``resume_save.py``) fills the ``Position`` from the follower and Lightning's counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["Loss", "Point", "Position", "point_of"]


@dataclass(frozen=True)
class Position:
    """Where the fit is at a save (``FitFollower`` and Lightning's progress counters)."""

    epoch: int
    phase: str  # a fit_follower.Phase
    batch: int  # the batch in flight, or whose end runs
    in_epoch_start: bool  # inside on_train_epoch_start
    epoch_done: bool  # the epoch's end is done (only the SIGTERM check follows)
    interrupted: bool  # an exception stopped the fit (OnExceptionCheckpoint, a callback's on_exception)
    updated: bool  # an optimizer step of this batch has landed
    step_returned: bool  # the batch's step (forward, backward, optimizer step) has returned
    step_started: bool  # its on_train_batch_start hooks are done: the forward may have run
    batch_hooks_done: bool  # its on_train_batch_end hooks are done
    backward_started: bool
    schedulers_updated: bool  # Lightning's LR scheduler update after the batch's step has run
    validated: bool  # the validation due after the batch has run
    logger_stepped: bool  # the batch's end is done (the logger's step counted)
    training_done: bool  # no batch follows in this epoch (Lightning's own test)
    manual: bool
    window: int  # accumulate_grad_batches
    gradients_at_start: bool  # manual optimization: gradients held over into the batch


@dataclass(frozen=True)
class Loss:
    """Something a resumed run cannot reproduce; the warning names it."""

    kind: str  # gradients | batch_end_hooks | manual_rest | row | running_stats
    batch: int


@dataclass(frozen=True)
class Point:
    kind: str  # epoch | batch | batch_end | epoch_end | next_epoch
    epoch: int
    batch: int = 0  # batch: the batch to train; batch_end: the batch whose end runs
    skip_validation: bool = False  # batch_end: the validation after the batch ran to its on_validation_end
    update_schedulers: bool = False  # batch_end: Lightning's LR scheduler update after the batch's step is due
    update_plateau: bool = False  # next_epoch: the plateau schedulers' update of the epoch's end is due
    keep_gradients: bool = False  # the parameters' .grad belong to the point (an accumulation window)
    from_validation: bool = False  # saved inside the validation it runs again: its views as at its start
    losses: tuple[Loss, ...] = field(default=())


def point_of(position: Position) -> Point | None:
    """The point a checkpoint saved at ``position`` resumes from; None: Lightning's own is exact."""
    p = position
    if p.phase in ("outside",):
        return Point("epoch", p.epoch) if p.in_epoch_start else None
    if p.phase == "epoch_end":
        if p.epoch_done:
            return None
        return Point("epoch_end", p.epoch) if p.interrupted else Point("next_epoch", p.epoch + 1, update_plateau=True)
    if p.phase == "batch":
        return _inside_batch(p)
    end = Point("batch_end", p.epoch, p.batch, keep_gradients=_window_open(p, p.batch))
    if p.phase == "batch_done" or (p.phase == "tail" and not p.validated):
        return end
    if p.phase == "validation":
        return replace(end, from_validation=True)
    if p.phase == "validation_end":
        return replace(end, from_validation=True) if p.interrupted else replace(end, skip_validation=True)
    # the tail: after the validation
    if not p.logger_stepped:
        return replace(end, skip_validation=True)
    if p.training_done:
        return Point("epoch_end", p.epoch)
    return Point("batch", p.epoch, p.batch + 1, keep_gradients=_window_open(p, p.batch))


def _window_open(p: Position, batch: int) -> bool:
    """Whether batches up to ``batch`` left gradients in .grad for a later optimizer step."""
    if p.manual:
        return p.gradients_at_start
    return p.window > 1 and (batch + 1) % p.window != 0 and not p.training_done


def _inside_batch(p: Position) -> Point:
    n = p.batch
    row = (Loss("row", n),) if p.interrupted else ()
    if p.updated:  # the weights hold batch n: its end comes first, without what follows the save in it
        if p.manual:
            return Point("batch_end", p.epoch, n, losses=(Loss("manual_rest", n), *row), keep_gradients=p.gradients_at_start)
        hooks = () if p.batch_hooks_done else (Loss("batch_end_hooks", n),)
        return Point("batch_end", p.epoch, n, update_schedulers=not p.schedulers_updated, losses=(*hooks, *row))
    earlier_in_window = (not p.manual and p.window > 1 and n % p.window != 0) or (p.manual and p.gradients_at_start)
    if p.step_returned:  # a batch inside an accumulation window: no step; its gradients are in .grad
        hooks = () if p.batch_hooks_done else (Loss("batch_end_hooks", n),)
        return Point("batch_end", p.epoch, n, keep_gradients=True, losses=(*hooks, *row))
    stats = (Loss("running_stats", n),) if p.step_started else ()
    if p.backward_started and earlier_in_window:
        return Point("batch", p.epoch, n, losses=(Loss("gradients", n), *stats))
    return Point("batch", p.epoch, n, keep_gradients=earlier_in_window, losses=stats)
