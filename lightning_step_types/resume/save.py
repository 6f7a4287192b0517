"""Saving: what resumes a checkpoint from the last point whose every effect it holds.

At each save (``on_save_checkpoint``, on every process) this reads where the fit is
(``fit_follower``) and finds the point (``resume_points.point_of``). Lightning's own entries stay as
Lightning wrote them: under ``checkpoint["lightning_step_types"]["epoch_state"]`` go a copy of
Lightning's fit loop state rewritten to that point (``_lightning.fit_loop.fit_loop_at_point``: every
progress counter and the loaders' states), which the library's own load puts in place of
Lightning's (``resume_load``), and each process's running state at that point
(``resume_state.rank_state``), with what no point can hold, for the warning at resume. A plain
Lightning resume of the file is Lightning's own.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, cast

from lightning_step_types._lightning.fit_loop import (
    ResumePoint,
    batch_counters,
    data_exhausted,
    epoch_end_done,
    fetch_position,
    fit_loop_at_point,
    in_epoch_start,
    interrupted,
    logger_step,
    next_zero_grad_index,
    optimizer_step_due,
    scheduler_updates,
    steps_cut_epoch,
    training_batches,
    training_done,
)
from lightning_step_types._lightning.module_state import modules_with_running_stats
from lightning_step_types._lightning.result_collection import epoch_results_mismatch, logged_entries
from lightning_step_types._lightning.trainer import epoch_end_hooks_after_save, pending_training_state
from lightning_step_types.resume.fit_follower import FitFollower, Phase, follower_of
from lightning_step_types.resume.holders import fit_limits
from lightning_step_types.resume.messages import CHECKPOINT_KEY, warn_unavailable
from lightning_step_types.resume.points import Point, Position, point_of
from lightning_step_types.resume.rank_exchange import gathered_states
from lightning_step_types.resume.source import Saving
from lightning_step_types.resume.state import rank_state

__all__ = ["FORMAT", "READ_FORMATS", "STATE", "save_running_state", "saved_as_loaded"]

STATE = "epoch_state"
FORMAT = 4
# Format 2 (earlier versions of this library) rewrote Lightning's loop state in the checkpoint itself
# and carries no fit loop of its own: it resumes from the checkpoint's loops as they are. Format 3 held the
# samplers' and the loaders' generators' states once, rank 0's, beside the running state (``data_order``,
# ``generators``); format 4 holds each process's own in its part, and a release that reads 3 only names a
# format 4 checkpoint rather than resume it without them.
READ_FORMATS = (2, 3, FORMAT)


def save_running_state(trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
    """Add this fit's resume point and running state to ``checkpoint`` under the library's key (every
    process calls this)."""
    ours = checkpoint.setdefault(CHECKPOINT_KEY, {})
    if STATE in ours:  # saved already by this dump: a user's hook that calls super() reaches ours twice
        return
    follower = follower_of(module)
    if follower is None or follower.trainer() is not trainer:
        return  # not in a fit this library follows (validate, test, or a Lightning before 2.5)
    mismatch = epoch_results_mismatch(follower.results)
    if mismatch is not None:
        warn_unavailable(mismatch)
        return
    if saved_as_loaded(trainer, module):
        # nothing has run since the checkpoint this fit resumed from: it resumes from the same point, with
        # every part of the library's entry as that checkpoint held it (BatchSizeFinder's save of its own in
        # on_fit_start, before its trials, which it restores after them)
        resume: Any = follower.resume
        ours.update(resume.loaded_entry)
        # and the training state Lightning restores from it after on_fit_start, not the fresh one
        checkpoint.update(pending_training_state(trainer))
        if follower.loop_runs == 0 and resume.saved.get("before_loop"):
            # its point is the fit's start, saved here in the fit it came from: the streams go back here
            follower.streams.put_back_iterator()
        return
    position = _position(follower, trainer)
    point = point_of(position)
    encoded, fetch = _encoded(follower, trainer, point)
    fit_loop = fit_loop_at_point(checkpoint, encoded)
    if fit_loop is None:
        warn_unavailable("this Lightning's checkpoint does not lay out its loops' progress as read here")
        return
    state = rank_state(follower, point, trainer, module)
    record = follower.record
    entries: Any = checkpoint.get("callbacks")  # each callback's state_dict(), as Lightning called it for this save
    saving = Saving(
        trainer=trainer,
        point=point,
        phase=follower.phase,
        record_epoch=record.epoch,
        record_batch=record.batch,
        runs_again=_runs_again(follower, point, position),
        batches_done=encoded.batches_done,
        last_batch=encoded.is_last_batch or encoded.batches_done >= training_batches(trainer),
        stop=fit_limits(trainer) if getattr(trainer, "should_stop", False) else None,
        unfinished=(
            point.batch
            if point.kind == "batch_end"
            and follower.phase == Phase.BATCH
            and (position.interrupted or position.step_returned)  # an exception stopped them, or a save in them
            and not position.batch_hooks_done
            else None
        ),
        callback_entries=cast("dict[str, Any]", entries) if isinstance(entries, dict) else None,
        passes=follower.pass_states_before(fetch),
    )
    for source in follower.sources:  # each source's entry, side by side
        state[source.key] = source.encode(saving)
    ours[STATE] = {
        "format": FORMAT,
        "point": {**asdict(point), "losses": []},
        "encoded": {**encoded._asdict(), "loader_states": None},  # those are in the rewritten fit loop state
        "fit_loop": fit_loop,  # what Lightning's fit loop resumes from, in place of the checkpoint's own entry
        "losses": _losses(point, follower, trainer, module, state),
        "stopped": interrupted(trainer),
        # saved before the fit loop first ran (a tuner's own save in on_fit_start, before its trials): the
        # resumed fit runs what came between again, from the streams saved here (load.load_running_state)
        "before_loop": follower.loop_runs == 0,
        "ranks": gathered_states(trainer, f"{point.kind} {point.epoch} {point.batch}", state),
        **saving.shared,  # the sources' parts the processes share
    }


def saved_as_loaded(trainer: Any, module: Any) -> bool:
    """Whether a save now holds the library's entry of the checkpoint the fit resumed from, as it was:
    nothing of the resumed fit has run yet."""
    follower = follower_of(module)
    if follower is None or follower.trainer() is not trainer or follower.first_batch_done:
        return False
    resume: Any = follower.resume
    return resume is not None and resume.encoded is not None and resume.loaded_entry is not None


def _runs_again(follower: FitFollower, point: Point, position: Position) -> str | None:
    """Where the part of the fit that runs again after a resume from ``point`` began (None: nothing that ran
    before the save runs again): ``fetch`` (the batch, of which nothing past its fetch ran), ``batch``
    (its on_train_batch_start hooks ran, and what follows them may have), ``validation``, ``epoch_end``,
    ``epoch_start`` (the epoch's on_train_epoch_start hooks, all of which a resume at its start runs again)."""
    if point.kind == "epoch" and position.in_epoch_start:
        return "epoch_start"
    if point.kind == "batch" and follower.phase == Phase.BATCH:
        return "batch" if position.step_started or position.batch_hooks_done else "fetch"
    if point.kind == "epoch_end" and follower.phase == Phase.EPOCH_END:
        return "epoch_end"
    if point.from_validation:
        return "validation"
    return None


def _position(follower: FitFollower, trainer: Any) -> Position:
    counters = batch_counters(trainer)
    batch = follower.batch
    scheduler_ready, scheduler_done = scheduler_updates(trainer)
    inside = follower.phase == Phase.BATCH
    at_start, added, complete, reset = follower.gradients_since_start() if inside else (False, False, False, False)
    return Position(
        epoch=int(trainer.current_epoch) if follower.phase == Phase.OUTSIDE else follower.epoch,
        phase=follower.phase,
        batch=batch,
        in_epoch_start=in_epoch_start(trainer),
        epoch_done=epoch_end_done(trainer),
        interrupted=interrupted(trainer),
        epoch_end_hooks_left=follower.phase == Phase.EPOCH_END
        and (
            (follower.holders is not None and follower.holders.epoch_end_hooks_left())
            or (not interrupted(trainer) and epoch_end_hooks_after_save(trainer))
        ),
        updated=follower.steps[0] > follower.record.steps,
        step_returned=counters.processed > batch,
        step_started=counters.started > batch,
        batch_hooks_done=counters.completed > batch,
        schedulers_updated=counters.processed > batch and scheduler_ready == scheduler_done,
        validated=follower.validated,
        logger_stepped=logger_step(trainer) > follower.logger_step_at_end,
        training_done=training_done(trainer),
        steps_cut_epoch=steps_cut_epoch(trainer),
        batches_completed=counters.completed,
        manual=follower.manual,
        window=follower.window,
        next_zero_index=next_zero_grad_index(trainer),
        step_due=optimizer_step_due(trainer),
        holds_gradients=any(parameter.grad is not None for parameter in follower.parameters),
        gradients_at_start=at_start,
        gradients_added=added,
        gradients_complete=complete,
        gradients_reset=reset,
    )


def _encoded(follower: FitFollower, trainer: Any, point: Point) -> tuple[ResumePoint, int | None]:
    """The loop state that makes Lightning's resumed run start at ``point``, and the fetch its next
    batch comes from (None: from a new iterator, or no loader with a state)."""
    counters = batch_counters(trainer)
    # a save inside the epoch's logging, where `FitLoop.on_advance_end` holds the logger step one lower (a
    # logger's write that raised): the step as the epoch's end began, which that end, run again, lowers and
    # raises itself, and which a point after it finds
    lowered = follower.phase == Phase.EPOCH_END and logger_step(trainer) != follower.logger_step_at_end
    step = follower.logger_step_at_end if lowered else None
    if point.kind == "epoch":
        return ResumePoint(point.epoch, False, 0, None, True, False, logger_step=step), None
    if point.kind == "epoch_end":
        return ResumePoint(point.epoch, True, counters.completed, None, True, True, logger_step=step), None
    fetched, prefetched = fetch_position(trainer)
    if point.kind == "batch":
        record = follower.record
        inside = follower.phase == Phase.BATCH and record.batch == point.batch
        first_fetch = record.fetched - record.prefetched if inside else fetched - prefetched
        fetch = first_fetch if follower.stateful and point.batch > 0 else None  # batch 0: a new iterator
        loaders, cycled = follower.loader_states_before(fetch, trainer) if fetch is not None else (None, None)
        return ResumePoint(point.epoch, True, point.batch, loaders, False, False, cycled, logger_step=step), fetch
    # batch_end: the next batch is fetched after the one whose end runs
    is_last_batch = counters.is_last_batch or data_exhausted(trainer)
    last = is_last_batch or point.batch + 1 >= training_batches(trainer)
    fetch = fetched - prefetched if follower.stateful and not last else None
    loaders, cycled = follower.loader_states_before(fetch, trainer) if fetch is not None else (None, None)
    encoded = ResumePoint(
        point.epoch, True, point.batch + 1, loaders, True, is_last_batch, cycled, point.from_validation
    )
    return encoded, fetch


def _losses(
    point: Point, follower: FitFollower, trainer: Any, module: Any, state: dict[str, Any]
) -> list[dict[str, Any]]:
    """What the resumed run cannot reproduce, with what the warning names."""
    found: list[dict[str, Any]] = []
    for loss in point.losses:
        entry: dict[str, Any] = {"kind": loss.kind, "batch": loss.batch}
        if loss.kind == "running_stats":  # the statistics the batch's forward changed before the save
            record = follower.record
            recorded = (record.epoch, record.batch) == (point.epoch, loss.batch) and len(record.stats_versions) == len(
                follower.stats
            )
            since = (follower.stats, record.stats_versions) if recorded and follower.stats else None
            entry["names"] = modules_with_running_stats(module, since)
        elif loss.kind == "batch_end_hooks":  # values the batch-end hooks log, not logged yet for this batch
            at_start = {key: value for key, _, value, *_ in follower.record.logged}
            entry["names"] = [
                entry.shown
                for entry in logged_entries(follower.results)
                if entry.meta["fx"] == "on_train_batch_end"
                and entry.meta["on_epoch"]
                and entry.tensors.get("value") is at_start.get(entry.key)
            ]
        elif loss.kind == "gradients":
            entry["window"], entry["manual"] = follower.window, follower.manual
        if entry.get("names", True):  # nothing to name: nothing lost
            found.append(entry)
    return found
