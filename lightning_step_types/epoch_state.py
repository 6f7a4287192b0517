"""Exact epoch aggregates across a mid-epoch resume: the running epoch state saved with a checkpoint.

Lightning saves the weights, optimizers, loops and (with ``StatefulDataLoader``) the data order,
but not the running aggregates of the epoch in flight (2.0 removed that, PR #16516): after a
mid-epoch resume every ``on_epoch=True`` value covers only the batches since the restart.

A running mean is a weighted sum plus the batch size behind it, both exact to store. So a
checkpoint saved mid-epoch carries, per process, the training epoch's ``self.log`` state (per key
and dataloader; mean, sum, max, min), the torchmetrics objects logged with ``self.log`` and the
declared step metrics. On resume it goes back in before the first step of the resumed epoch:
tensors into the ``_ResultMetric`` Lightning builds for the key, before its first update (so the
sums run in the uninterrupted order, bit for bit); metric objects before the first step.

A checkpoint saved inside a training batch (``OnExceptionCheckpoint``, SLURM's requeue signal,
``trainer.save_checkpoint`` from a step or hook) is rewritten to resume as if saved just before
that batch: the epoch state and the loaders' state noted at the batch's start go in, so the
resumed run trains the batch once and counts it once.

One code path for ``TypedLightningModule`` (its checkpoint and batch hooks, wrapped in
``wrapping.py``) and ``StepResultAdapter`` (its callback hooks). Every private Lightning name is
read in ``lightning_internals.py``. Whatever cannot be restored is named in one
``StepResultWarning``; nothing here raises.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Mapping
from typing import Any, cast

import torch

from lightning_step_types.errors import StepResultWarning, format_problem
from lightning_step_types.metrics import step_metric_objects
from lightning_step_types.lightning_internals import (
    LoggedEntry,
    LoggedSnapshot,
    batch_in_flight,
    batch_position,
    call_before_updates,
    epoch_results_mismatch,
    load_metric_states,
    loaded_loader_states,
    logged_entries,
    logged_entries_at,
    logged_snapshot,
    metric_states,
    metric_states_on_cpu,
    metric_states_on_device,
    modules_with_running_stats,
    rewrite_in_flight_batch,
    schedulers_stepped_after,
    stateful_loader_states,
    stop_calling_before_updates,
    training_epoch_results,
    write_logged_tensors,
)

__all__ = [
    "CHECKPOINT_KEY",
    "exact_resume_enabled",
    "finish_resumed_epoch",
    "load_epoch_state",
    "note_batch_start",
    "restore_before_first_batch",
    "resuming",
    "save_epoch_state",
]

# checkpoint[CHECKPOINT_KEY][_STATE] holds the state; a top-level key, beside Lightning's own.
CHECKPOINT_KEY = "lightning_step_types"
_STATE = "epoch_state"
_FORMAT = 1


def exact_resume_enabled(owner: Any) -> bool:
    """The switch: ``exact_resume = False`` on a typed module, ``StepResultAdapter(exact_resume=False)``."""
    return bool(getattr(owner, "exact_resume", True))


def _declared_metrics(module: Any) -> dict[str, Any]:
    """The declared training metrics' live copies, keyed like ``"train/acc"``.

    Only the training stage is in flight mid-epoch: a checkpoint is saved between training batches,
    and validation/test copies are computed and reset at the end of their own loops.
    """
    return {name: metric for name, metric in step_metric_objects(module).items() if name.startswith("train/")}


def _logged_metric_objects(module: Any, entries: list[LoggedEntry]) -> dict[str, Any]:
    """The torchmetrics objects logged with ``self.log`` this epoch, by their ``named_modules()`` path."""
    paths = {entry.metric_attribute for entry in entries if entry.in_flight and entry.metric_attribute is not None}
    return {path: metric for path, metric in module.named_modules() if path in paths}


# --- saving ---------------------------------------------------------------------------------------


def save_epoch_state(trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
    """Add this run's running epoch state to ``checkpoint`` (every process calls this; rank 0 writes)."""
    ours = checkpoint.setdefault(CHECKPOINT_KEY, {})
    if _STATE in ours:  # saved already by this dump: a user's hook that calls super() reaches ours twice
        return
    results = training_epoch_results(trainer)
    if results is None:
        return
    mismatch = epoch_results_mismatch(results)
    if mismatch is not None:
        _warn_unavailable(mismatch)
        return
    epoch, processed, epoch_ended = batch_position(trainer)
    rank_state: dict[str, Any] | None = None
    after_update: int | None = None  # the batch whose optimizer step is in the weights, saved before its end
    lost_scheduler_steps: list[str] = []  # the step-interval LR schedulers that step after that save
    lost_gradients: tuple[int, int] | None = None  # (first batch of the accumulation window, its length)
    running_stats: list[str] = []  # modules whose running statistics may already count the batch in flight
    unnoted: int | None = None  # the batch in flight, left as Lightning saved it: it is skipped on resume
    if not epoch_ended and batch_in_flight(trainer):
        start = _BATCH_STARTS.get(module)
        window = int(getattr(trainer, "accumulate_grad_batches", 1))
        usable = start is not None and start.usable and start.trainer() is trainer
        if start is not None and usable and start.where == (epoch, processed):
            if start.steps_done[0] == start.steps_at_start:  # no update yet: the resumed run trains it
                if rewrite_in_flight_batch(trainer, checkpoint, start.loader_before, redo=True):
                    rank_state = start.rank_state(module)
                    running_stats = modules_with_running_stats(module)
                    if processed % window:  # gradients of the window's earlier batches live only in .grad
                        lost_gradients = (processed - processed % window, window)
            elif rewrite_in_flight_batch(trainer, checkpoint, None, redo=False):  # the update is in the weights
                after_update = processed
                lost_scheduler_steps = schedulers_stepped_after(trainer, processed)
                processed += 1
        elif start is not None and usable and processed > 0 and start.where == (epoch, processed - 1):
            # an earlier on_train_batch_start hook stopped (or a signal came) before the library noted batch N:
            # nothing of its step has run, and the loaders' state noted at batch N - 1's start is from before
            # batch N's fetch
            loaders = start.loader_after if start.stateful else None
            if rewrite_in_flight_batch(trainer, checkpoint, loaders, redo=True):
                rank_state = _rank_state(module, results)
                if processed % window:
                    lost_gradients = (processed - processed % window, window)
        elif processed == 0:  # the epoch's first batch, not noted: the resumed run makes a new iterator
            rewrite_in_flight_batch(trainer, checkpoint, None, redo=True)
        else:
            unnoted = processed
    in_flight = not epoch_ended and processed > 0
    if in_flight and rank_state is None:
        rank_state = _rank_state(module, results)
    # Every rank gathers, whatever it found: a signal can reach the ranks at different points of a batch
    # (one before its optimizer step, one after), and a collective entered by only some ranks would hang.
    # Each state holds the epoch up to `position`; states for different positions make no one checkpoint.
    position = [epoch, processed] if in_flight else None
    gathered = _gathered({"position": position, "state": rank_state}, trainer)
    if any(other["position"] != position for other in gathered):
        in_flight, gathered = False, []
    ranks = [other["state"] for other in gathered] if in_flight else []
    ours[_STATE] = {"format": _FORMAT, "epoch": epoch, "next_batch": processed, "in_flight": in_flight, "ranks": ranks}
    if after_update is not None:
        ours[_STATE]["after_update"] = after_update
    if lost_scheduler_steps:
        ours[_STATE]["lost_scheduler_steps"] = lost_scheduler_steps
    if lost_gradients is not None:
        ours[_STATE]["lost_gradients"] = list(lost_gradients)
    if running_stats:
        ours[_STATE]["running_stats"] = running_stats
    if unnoted is not None:
        ours[_STATE]["unnoted_batch"] = unnoted


def _rank_state(module: Any, results: Any) -> dict[str, Any]:
    entries = logged_entries(results)
    return {
        "logged": _saved_logged(entries),
        "logged_metrics": _saved_metrics(_logged_metric_objects(module, entries)),
        "declared_metrics": _saved_metrics(_declared_metrics(module)),
    }


def _saved_logged(entries: list[LoggedEntry]) -> dict[str, Any]:
    return {
        entry.key: {"shown": entry.shown, "fingerprint": entry.fingerprint, "tensors": _on_cpu(entry.tensors)}
        for entry in entries
        if entry.in_flight and entry.tensors
    }


def _saved_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    return {name: {"type": _type_name(metric), **metric_states(metric)} for name, metric in metrics.items()}


def _on_cpu(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu().clone() for name, tensor in tensors.items()}


def _gathered(rank_state: dict[str, Any], trainer: Any) -> list[dict[str, Any]]:
    """Every process's state, in rank order (collective: every rank saves the same checkpoint)."""
    world_size = int(getattr(trainer, "world_size", 1))
    if world_size <= 1 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [rank_state]
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    all_gather_object: Any = getattr(torch.distributed, "all_gather_object")  # torch leaves its parameters untyped
    all_gather_object(gathered, rank_state)
    return gathered


# --- the state at each training batch's start, for a checkpoint saved inside it ---


class _BatchStart:
    """One module's state at the start of the training batch in flight (updated every batch).

    A checkpoint saved inside a batch (an exception caught by ``OnExceptionCheckpoint``, SLURM's
    requeue signal, ``trainer.save_checkpoint`` from a step or hook) is rewritten to resume as if
    saved just before it: this holds what that needs. The logged tensors are held by reference
    (Lightning rebinds them on update); the metric objects' states are copied, since their owners
    update them in place; the loaders' state is the one taken at the previous batch's start, which
    is their state before this batch was fetched.
    """

    __slots__ = (
        "trainer", "prepared", "results", "usable", "where", "steps_done", "steps_at_start", "hooked",
        "logged", "logged_metrics", "declared", "declared_metrics", "stateful", "loader_before", "loader_after",
    )

    def __init__(self, trainer: Any, loaded: list[dict[str, Any]] | None) -> None:
        self.trainer = weakref.ref(trainer)
        self.prepared = False  # whether what stays the same for the fit has been found (first batch)
        self.results: Any = None  # the training epoch's `_ResultCollection` (one per Trainer)
        self.usable = True  # False where this Lightning's logging internals are not the ones read here
        self.where: tuple[int, int] = (-1, -1)  # (epoch, batch index) of the batch these belong to
        self.steps_done = [0]  # optimizer steps done in this fit, counted by a step post-hook
        self.steps_at_start = 0
        self.hooked: list[Any] = []  # the hooks' handles: one per optimizer of this fit
        self.logged: LoggedSnapshot = []
        self.logged_metrics: dict[str, Any] = {}
        self.declared: dict[str, Any] = {}  # the declared training metrics (found once per fit)
        self.declared_metrics: dict[str, Any] = {}
        self.stateful = False  # whether a training loader has a state_dict (asked once per fit)
        self.loader_before: list[dict[str, Any]] | None = None
        self.loader_after = loaded  # from a checkpoint: the state before the resumed run's first fetch

    def rank_state(self, module: Any) -> dict[str, Any]:
        # as `_logged_metric_objects`: only metrics at a path in the module (the adapter's declared
        # copies are logged from the callback, and saved with the declared metrics)
        paths = {path for path, _ in module.named_modules()}
        return {
            "logged": _saved_logged(logged_entries_at(self.logged)),
            "logged_metrics": _typed_copies({path: copy for path, copy in self.logged_metrics.items() if path in paths}),
            "declared_metrics": _typed_copies(self.declared_metrics),
        }


def _copied_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Each metric with a copy of its states (every batch: the type names wait for a save)."""
    return {name: (metric, metric_states_on_device(metric)) for name, metric in metrics.items()}


def _typed_copies(copies: Mapping[str, Any]) -> dict[str, Any]:
    """``_copied_metrics`` in the form ``_saved_metrics`` gives."""
    return {name: {"type": _type_name(metric), **metric_states_on_cpu(states)} for name, (metric, states) in copies.items()}


_BATCH_STARTS: weakref.WeakKeyDictionary[Any, _BatchStart] = weakref.WeakKeyDictionary()


def _new_batch_start(module: Any, trainer: Any, loaded: list[dict[str, Any]] | None) -> _BatchStart:
    """A fit's first batch-start state for ``module``; the previous fit's step hooks come off its optimizers."""
    previous = _BATCH_STARTS.get(module)
    for handle in previous.hooked if previous is not None else []:
        handle.remove()
    start = _BATCH_STARTS[module] = _BatchStart(trainer, loaded)
    return start


def _count_steps(optimizer: Any, counter: list[int]) -> Any:
    """Count ``optimizer.step()`` calls as they return (torch's public step post-hook).

    Lightning counts an optimizer step only after its ``optimizer_step`` hook returns, so a save from
    inside that hook, or from manual optimization after ``opt.step()``, would look like before it.
    A post-hook: in automatic optimization the step, its closure and backward run inside ``step()``.
    """

    def done(*_: Any) -> None:
        counter[0] += 1

    return optimizer.register_step_post_hook(done)


def note_batch_start(trainer: Any, module: Any, batch_idx: int) -> None:
    """At each training batch's start (``on_train_batch_start``): restore a resumed epoch, note the state.

    Runs on every batch, so what stays the same for a whole fit is found once, in ``_prepared``.
    """
    if _RESUMES:
        restore_before_first_batch(trainer, module, batch_idx)
    if trainer is None:
        return
    start = _BATCH_STARTS.get(module)
    where = (int(trainer.current_epoch), batch_idx)
    # batches only move on within a fit: one at or before the last noted is another fit's
    if start is None or start.trainer() is not trainer or not start.prepared or where <= start.where:
        start = _prepared(module, trainer, start)
    if not start.usable:
        return
    try:
        start.logged, logged_metrics = logged_snapshot(start.results)
    except AttributeError:  # another Lightning's `_ResultMetric`: save_epoch_state says so once
        start.usable = False
        return
    if logged_metrics:
        if start.declared:  # declared copies are copied once, below
            declared_ids = {id(metric) for metric in start.declared.values()}
            logged_metrics = {path: metric for path, metric in logged_metrics.items() if id(metric) not in declared_ids}
        start.logged_metrics = _copied_metrics(logged_metrics)
    elif start.logged_metrics:
        start.logged_metrics = {}
    if start.declared:
        start.declared_metrics = _copied_metrics(start.declared)
    start.steps_at_start = start.steps_done[0]
    if start.stateful:
        if batch_idx == 0:  # the epoch's iterator is new: a resumed run makes its own
            start.loader_before = None
        elif start.where in ((where[0], batch_idx - 1), (-1, -1)):
            start.loader_before = start.loader_after
        else:
            start.loader_before = None
        start.loader_after = stateful_loader_states(trainer)
    start.where = where


def _prepared(module: Any, trainer: Any, start: _BatchStart | None) -> _BatchStart:
    """The batch-start state of this fit, with what stays the same for the whole fit found."""
    if start is None or start.trainer() is not trainer or start.prepared:
        start = _new_batch_start(module, trainer, None)  # the last fit's step hooks come off
    start.prepared = True
    start.results = training_epoch_results(trainer)
    start.usable = start.results is not None
    start.declared = _declared_metrics(module)  # the training copies exist from setup on
    start.hooked = [_count_steps(optimizer, start.steps_done) for optimizer in trainer.optimizers]
    start.stateful = stateful_loader_states(trainer) is not None
    return start


# --- loading --------------------------------------------------------------------------------------


class _Resume:
    """What one resumed fit restores into one module, from its ``on_load_checkpoint`` until the epoch ends."""

    def __init__(self, trainer: Any, saved: Mapping[str, Any] | None) -> None:
        self.trainer = weakref.ref(trainer)
        self.saved = saved  # the checkpoint's epoch state, or None (a plain Lightning checkpoint)
        self.pending: dict[str, Any] = {}  # collection key -> saved entry, until Lightning creates it
        self.not_restored: list[str] = []  # named in the one warning at the end of the resumed epoch
        self.where = ""  # "resuming epoch 0 at batch 5"
        self.results: Any = None


_RESUMES: weakref.WeakKeyDictionary[Any, _Resume] = weakref.WeakKeyDictionary()


def resuming() -> bool:
    """Whether any module has a checkpoint's epoch state to restore or to report on (read every batch)."""
    return bool(_RESUMES)


def load_epoch_state(trainer: Any, module: Any, checkpoint: Mapping[str, Any]) -> None:
    """Keep a checkpoint's epoch state for the fit that resumes from it (``on_load_checkpoint``).

    ``load_from_checkpoint`` calls the module's ``on_load_checkpoint`` with no Trainer attached:
    weights only, nothing kept. ``validate``/``test`` from a checkpoint train nothing either.
    """
    # TrainerFn is a str enum in both flavours; str.__eq__ skips its case-folding __eq__.
    if trainer is None or str.__eq__(trainer.state.fn, "fit") is not True:
        return
    ours: Any = checkpoint.get(CHECKPOINT_KEY)
    saved: Any = cast(Any, ours).get(_STATE) if isinstance(ours, Mapping) else None
    _RESUMES[module] = _Resume(trainer, cast(Any, saved) if isinstance(saved, Mapping) else None)
    _new_batch_start(module, trainer, loaded_loader_states(checkpoint))


def restore_before_first_batch(trainer: Any, module: Any, batch_idx: int) -> None:
    """On the resumed run's first training batch, before its step: restore, or say what starts fresh."""
    resume = _RESUMES.get(module)
    if resume is None or resume.where:
        return
    if trainer is None or resume.trainer() is not trainer:
        del _RESUMES[module]
        return
    live_trainer: Any = trainer
    epoch = int(live_trainer.current_epoch)
    resume.where = f"resuming epoch {epoch} at batch {batch_idx}"
    saved = resume.saved
    if saved is None:
        if batch_idx > 0:  # a plain Lightning checkpoint from mid-epoch: the aggregates restart here
            _warn(module, resume.where, *_plain_checkpoint_problem(epoch, batch_idx))
        del _RESUMES[module]
        return
    if saved.get("format") != _FORMAT:
        _warn(module, resume.where, *_format_problem(saved.get("format")))
        del _RESUMES[module]
        return
    if saved["in_flight"] and saved["epoch"] == epoch and batch_idx < saved["next_batch"]:
        # Lightning before 2.5 resumes a checkpoint saved in on_train_batch_end at that same batch again
        _warn_unavailable(
            f"Lightning {_version_of(trainer)} resumed epoch {epoch} at batch {batch_idx}, before the checkpoint's"
            f" batch {saved['next_batch']}: it trains batches {batch_idx} to {saved['next_batch'] - 1} again"
        )
        del _RESUMES[module]
        return
    if not saved["in_flight"] or (saved["epoch"], saved["next_batch"]) != (epoch, batch_idx):
        lost = saved["in_flight"] and (epoch, batch_idx) > (saved["epoch"], saved["next_batch"])
        if lost:  # Lightning resumed past the epoch it was in (a checkpoint at its last batch)
            _warn(module, resume.where, *_skipped_epoch_problem(saved, _everything(saved["ranks"])))
        del _RESUMES[module]
        return
    ranks = saved["ranks"]
    world_size, rank = int(getattr(trainer, "world_size", 1)), int(getattr(trainer, "global_rank", 0))
    if len(ranks) != world_size:
        _warn(module, resume.where, *_world_size_problem(len(ranks), world_size, _everything(ranks)))
        del _RESUMES[module]
        return
    results = training_epoch_results(trainer)
    mismatch = epoch_results_mismatch(results)
    if mismatch is not None:
        _warn_unavailable(mismatch)
        del _RESUMES[module]
        return
    rank_state = ranks[rank]
    resume.not_restored += _restore_metrics(_named_modules(module), rank_state["logged_metrics"])
    resume.not_restored += _restore_metrics(_declared_metrics(module), rank_state["declared_metrics"])
    resume.pending = dict(rank_state["logged"])
    resume.results = results
    if resume.pending:
        call_before_updates(results, _restorer(resume))
    if saved.get("after_update") is not None:
        _warn(module, resume.where, *_after_update_problem(saved["after_update"], saved.get("lost_scheduler_steps", [])))
    if saved.get("lost_gradients") is not None:
        _warn(module, resume.where, *_lost_gradients_problem(batch_idx, *saved["lost_gradients"]))
    if saved.get("running_stats"):
        _warn(module, resume.where, *_running_stats_problem(batch_idx, saved["running_stats"]))
    if saved.get("unnoted_batch") is not None:
        _warn(module, resume.where, *_unnoted_batch_problem(saved["unnoted_batch"]))


def _named_modules(module: Any) -> dict[str, Any]:
    return dict(module.named_modules())


def _restore_metrics(live: Mapping[str, Any], saved: Mapping[str, Any]) -> list[str]:
    """Load each saved metric state into the live object of that name; the names that could not be."""
    missing: list[str] = []
    for name, state in saved.items():
        metric = live.get(name)
        if metric is None or _type_name(metric) != state["type"]:
            missing.append(f"metric {name!r} ({state['type']})")
            continue
        load_metric_states(metric, state)
    return missing


def _restorer(resume: _Resume) -> Any:
    def before_update(key: str, result_metric: Any) -> None:
        saved = resume.pending.pop(key, None)
        if saved is not None:
            (entry,) = logged_entries({key: result_metric})
            if entry.fingerprint == tuple(saved["fingerprint"]):
                write_logged_tensors(result_metric, saved["tensors"])
            else:
                resume.not_restored.append(f"{saved['shown']}, now logged differently")
        if not resume.pending:
            stop_calling_before_updates(resume.results)

    return before_update


def finish_resumed_epoch(trainer: Any, module: Any) -> None:
    """At the resumed epoch's end (``on_train_epoch_end``): name in one warning what was not restored."""
    resume = _RESUMES.pop(module, None)
    if resume is None or not resume.where:
        if resume is not None:
            _RESUMES[module] = resume  # loaded, but its first batch is still to come
        return
    if resume.results is not None:
        stop_calling_before_updates(resume.results)
    never_logged = [f"{saved['shown']}, not logged since the checkpoint" for saved in resume.pending.values()]
    not_restored = resume.not_restored + never_logged
    if not_restored:
        _warn(module, resume.where, *_changed_module_problem(not_restored))


def _everything(ranks: list[Any]) -> list[str]:
    """Everything a checkpoint's epoch state holds, as the warnings name it."""
    names: dict[str, None] = {}
    for rank_state in ranks:
        names.update((saved["shown"], None) for saved in rank_state["logged"].values())
        names.update((f"metric {name!r}", None) for name in rank_state["logged_metrics"])
        names.update((f"metric {name!r}", None) for name in rank_state["declared_metrics"])
    return list(names)


# --- what the warnings say ------------------------------------------------------------------------

_FIX_FRESH = (
    "nothing to do for this run; to resume exactly, resume from a checkpoint saved by TypedLightningModule"
    " or under StepResultAdapter() with the same module"
)


def _plain_checkpoint_problem(epoch: int, batch_idx: int) -> tuple[str, str, str]:
    return (
        "a checkpoint without the running epoch state of lightning_step_types (saved by plain Lightning, or with"
        f" exact_resume=False): every value logged with on_epoch=True in training, and every logged metric,"
        f" starts fresh, so epoch {epoch}'s aggregates cover batch {batch_idx} onwards only",
        f"checkpoint[{CHECKPOINT_KEY!r}], which TypedLightningModule and StepResultAdapter() save mid-epoch",
        "nothing to do for this run: checkpoints saved from now on resume exactly",
    )


def _format_problem(found: Any) -> tuple[str, str, str]:
    return (
        f"epoch state of format {found!r} (from another version of lightning_step_types): it starts fresh",
        f"format {_FORMAT}",
        _FIX_FRESH,
    )


def _skipped_epoch_problem(saved: Mapping[str, Any], names: list[str]) -> tuple[str, str, str]:
    return (
        f"a checkpoint from the last batch of epoch {saved['epoch']}: Lightning resumes at the next epoch without"
        f" ending epoch {saved['epoch']}, so its aggregates are not logged: {', '.join(names) or 'none'}",
        f"a checkpoint from before the last batch of an epoch, or from its end (on_train_epoch_end)",
        "save checkpoints at the end of the epoch (ModelCheckpoint's default) or at an every_n_train_steps"
        " that is not a multiple of the epoch's length",
    )


def _world_size_problem(saved: int, now: int, names: list[str]) -> tuple[str, str, str]:
    return (
        f"epoch state saved by {saved} processes, resumed on {now}: each process's running state belongs to its"
        f" own data, so these start fresh: {', '.join(names) or 'none'}",
        f"the world size the checkpoint was saved with ({saved})",
        f"resume on {saved} processes to continue the epoch exactly",
    )


def _after_update_problem(batch: int, schedulers: list[str]) -> tuple[str, str, str]:
    lost = (
        f"; the step-interval LR scheduler step of batch {batch} ({', '.join(schedulers)}) comes after the save, so"
        " the resumed run's learning rate is one scheduler step behind the uninterrupted run's from then on"
        if schedulers
        else ""
    )
    return (
        f"a checkpoint saved inside batch {batch} after its optimizer step: the weights hold batch {batch}'s"
        f" update, so the resumed run goes on at batch {batch + 1}; what batch {batch} logged before the save is"
        f" counted, anything it would have logged after the save (in on_train_batch_end, for example) is not{lost}",
        "a checkpoint saved before a batch's optimizer step (an exception or signal in training_step, backward or"
        " the hooks before the step), which resumes by training that batch, or between batches",
        "save from on_train_batch_end or with ModelCheckpoint(every_n_train_steps=...) rather than after"
        " optimizer.step() inside the batch",
    )


def _lost_gradients_problem(batch: int, window_start: int, window: int) -> tuple[str, str, str]:
    earlier = f"batch {window_start}" if batch - 1 == window_start else f"batches {window_start} to {batch - 1}"
    return (
        f"a checkpoint saved inside batch {batch}, in a window of accumulate_grad_batches={window} that began at"
        f" batch {window_start}: the gradients of {earlier} are in no checkpoint, so the window's optimizer step"
        " misses them and the weights differ from the uninterrupted run's from then on",
        "a checkpoint saved inside the first batch of an accumulation window, or accumulate_grad_batches=1",
        "nothing restores the lost gradients; for an exact resume save between windows (ModelCheckpoint("
        "every_n_train_steps=...) counts optimizer steps) or train without gradient accumulation",
    )


def _running_stats_problem(batch: int, names: list[str]) -> tuple[str, str, str]:
    return (
        f"a checkpoint saved inside batch {batch}, with modules in training mode that keep running statistics:"
        f" {', '.join(names)}; their running_mean, running_var and num_batches_tracked already count batch"
        f" {batch}'s forward if it ran before the save, and the resumed run forwards batch {batch} again, so they"
        " count it twice",
        "a checkpoint saved between batches, or a module without running statistics in training mode",
        "nothing to do for the weights and the epoch values, which are exact; the running statistics count one"
        " batch twice (num_batches_tracked is one higher); to avoid it save between batches (ModelCheckpoint("
        "every_n_train_steps=...)), or recompute the statistics after training with"
        " torch.optim.swa_utils.update_bn(loader, model)",
    )


def _unnoted_batch_problem(batch: int) -> tuple[str, str, str]:
    return (
        f"a checkpoint saved inside batch {batch} before lightning_step_types noted that batch's start (an"
        " exception or signal in an on_train_batch_start hook that runs before the library's, in the first batch"
        f" of a resumed run): it is Lightning's own, with the loaders' state already past batch {batch}, so the"
        f" resumed run does not train batch {batch} and its epoch values are not exact",
        "a checkpoint saved between batches, or inside a batch once its on_train_batch_start hooks have run",
        "resume from the checkpoint this run was resumed from, or from one saved with ModelCheckpoint("
        "every_n_train_steps=...)",
    )


def _changed_module_problem(names: list[str]) -> tuple[str, str, str]:
    return (
        f"a checkpoint from before the module changed what it logs or declares; these start fresh: {', '.join(names)}",
        "the values and metrics the module logged when the checkpoint was saved, logged the same way",
        _FIX_FRESH,
    )


def _warn(module: Any, where: str, got: str, expected: str, fix: str) -> None:
    warnings.warn(StepResultWarning(format_problem(where, got, expected, fix, type(module).__qualname__)), stacklevel=2)


_unavailable_warned = False


def _warn_unavailable(reason: str) -> None:
    """Once per process: this Lightning's logging internals are not the ones exact resume reads."""
    global _unavailable_warned
    if _unavailable_warned:
        return
    _unavailable_warned = True
    warnings.warn(
        StepResultWarning(
            format_problem(
                "exact resume",
                f"{reason}: the running epoch aggregates cannot be restored exactly, so they start fresh",
                "pytorch-lightning or lightning 2.5 to 2.6, which continue a mid-epoch resume at the next batch"
                " and keep their logging state where lightning_step_types reads it",
                "upgrade Lightning for exact epoch aggregates; until then runs resume as in plain Lightning",
            )
        ),
        stacklevel=2,
    )


def _version_of(trainer: Any) -> str:
    """The version of the Lightning package the Trainer comes from (either flavour)."""
    package = sys.modules.get(type(trainer).__module__.split(".")[0])
    return str(getattr(package, "__version__", "?"))


def _type_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
