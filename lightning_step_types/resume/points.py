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
side (``resume/save.py``) fills the ``Position`` from the follower and Lightning's counters.
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
    # a save from inside the epoch-end hooks with something of them left to run after it: a stateful callback's
    # on_train_epoch_end (EarlyStopping's check after the module's own save; not a ModelCheckpoint writing this
    # file), or, read from the call stack, the rest of the saving hook, the callbacks and hooks Lightning calls after
    # it (a user's save in the module's on_train_epoch_end, before ModelCheckpoint's): they run again at a resume
    epoch_end_hooks_left: bool
    updated: bool  # an optimizer step of this batch has landed
    step_returned: bool  # the batch's step (forward, backward, optimizer step) has returned
    step_started: bool  # its on_train_batch_start hooks are done: the forward may have run
    batch_hooks_done: bool  # its on_train_batch_end hooks are done
    schedulers_updated: bool  # Lightning's LR scheduler update after the batch's step has run
    validated: bool  # the validation due after the batch has run
    logger_stepped: bool  # the batch's end is done (the logger's step counted)
    training_done: bool  # no batch follows in this epoch (Lightning's own test)
    steps_cut_epoch: bool  # max_steps ended the epoch before its last batch
    batches_completed: int  # the epoch's batches whose on_train_batch_end hooks are done
    manual: bool
    window: int  # accumulate_grad_batches
    next_zero_index: int  # the index Lightning's next zero_grad decision is made with
    step_due: bool  # an optimizer step ends this batch (automatic optimization: Lightning's own test)
    holds_gradients: bool  # a parameter has a .grad now
    gradients_at_start: bool  # the batch began with gradients of earlier batches still to be stepped
    gradients_added: bool  # since, this batch's backward added to them (the same tensors, changed)
    gradients_complete: bool  # to every one of them: its backward finished
    gradients_reset: bool  # since, they were zeroed (set to None or replaced)


@dataclass(frozen=True)
class Loss:
    """Something a resumed run cannot reproduce; the warning names it."""

    kind: str  # gradients | batch_end_hooks | manual_rest | running_stats
    batch: int


@dataclass(frozen=True)
class Point:
    kind: str  # epoch | batch | batch_end | epoch_end
    epoch: int
    batch: int = 0  # batch: the batch to train; batch_end: the batch whose end runs
    skip_validation: bool = False  # batch_end: the validation after the batch ran to its on_validation_end
    update_schedulers: bool = False  # batch_end: Lightning's LR scheduler update after the batch's step is due
    update_plateau: bool = False  # epoch: the plateau schedulers' update of the previous epoch's end is due
    after_epoch_end: bool = False  # epoch: saved in the previous epoch's on_train_epoch_end hooks
    keep_gradients: bool = False  # the parameters' .grad belong to the point (Lightning's window or the user's)
    from_validation: bool = False  # saved inside the validation it runs again: its views as at its start
    losses: tuple[Loss, ...] = field(default=())


def point_of(position: Position) -> Point:
    """The point a checkpoint saved at ``position`` resumes from."""
    p = position
    # manual optimization between batches: the gradients the user's own window leaves in .grad (an epoch of an
    # odd number of batches, stepped every two) are the next batch's to add to (Lightning zeroes none)
    held = p.manual and p.holds_gradients
    if p.phase == "outside":  # before an epoch, or in its on_train_epoch_start: the epoch from its start
        return Point("epoch", p.epoch, keep_gradients=held)
    if p.phase == "epoch_end":
        # the epoch-end hooks did not finish (an exception, or a save with hooks after it): they run again, but
        # those that returned
        if (p.interrupted or p.epoch_end_hooks_left) and not p.epoch_done:
            return Point("epoch_end", p.epoch, keep_gradients=held)
        if p.steps_cut_epoch:  # max_steps ended the fit inside the epoch: a fit with more steps goes on in it
            return Point("batch", p.epoch, p.batches_completed, keep_gradients=held)
        if p.epoch_done:
            return Point("epoch", p.epoch + 1, keep_gradients=held)
        # a save from the hooks (ModelCheckpoint's, last): what follows them is Lightning's own bookkeeping
        return Point("epoch", p.epoch + 1, update_plateau=True, after_epoch_end=True, keep_gradients=held)
    if p.phase == "batch":
        return _inside_batch(p)
    end = Point("batch_end", p.epoch, p.batch, keep_gradients=_window_open(p))
    if p.phase == "validation":
        return replace(end, from_validation=True)
    if p.phase == "validation_end":
        return replace(end, from_validation=True) if p.interrupted else replace(end, skip_validation=True)
    if p.phase == "tail" and p.logger_stepped:  # the batch's end is done (SIGTERM stops the fit here)
        if p.training_done:
            return Point("epoch_end", p.epoch)
        return Point("batch", p.epoch, p.batch + 1, keep_gradients=_window_open(p))
    if p.phase == "tail" and p.validated:  # after the validation: the plateau schedulers, the logger's step
        return replace(end, skip_validation=True)
    return end  # before the batch's end


def _window_open(p: Position) -> bool:
    """Whether the gradients in .grad after the batch are still to be stepped (an accumulation window)."""
    if p.manual:
        return p.holds_gradients
    return p.holds_gradients and p.window > 1 and p.next_zero_index % p.window != 0 and not p.training_done


def _inside_batch(p: Position) -> Point:
    n = p.batch
    if p.updated:  # the weights hold batch n: its end comes first, without what follows the save in it
        hooks = () if p.batch_hooks_done else (Loss("batch_end_hooks", n),)
        if p.manual:
            rest = hooks if p.step_returned else (Loss("manual_rest", n),)  # saved in training_step, after opt.step()
            return Point("batch_end", p.epoch, n, losses=rest, keep_gradients=p.holds_gradients)
        return Point("batch_end", p.epoch, n, update_schedulers=not p.schedulers_updated, losses=hooks)
    if p.step_returned:  # no step (inside an accumulation window): the batch's training is in .grad
        hooks = () if p.batch_hooks_done else (Loss("batch_end_hooks", n),)
        return Point("batch_end", p.epoch, n, keep_gradients=_window_open(p), losses=hooks)
    stats = (Loss("running_stats", n),) if p.step_started else ()
    held = p.gradients_at_start and p.gradients_added and not p.gradients_reset
    if held and p.gradients_complete and not p.manual and not p.step_due:
        # inside an accumulation window no step follows the backward: the batch's training is done
        hooks = () if p.batch_hooks_done else (Loss("batch_end_hooks", n),)
        return Point("batch_end", p.epoch, n, keep_gradients=True, losses=hooks)
    if held:
        return Point("batch", p.epoch, n, losses=(Loss("gradients", n), *stats))
    keep = p.gradients_at_start and not p.gradients_added and not p.gradients_reset
    return Point("batch", p.epoch, n, keep_gradients=keep, losses=stats)
