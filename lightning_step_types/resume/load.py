"""Loading: a checkpoint's running state put back, and the resumed run started at its point.

A ``Resume`` lives from the module's ``on_load_checkpoint`` until the resumed fit's first epoch
ends. There, before Lightning restores its loops, it hands Lightning the fit loop state saved for
the point under the library's key, in place of the checkpoint's own entry (the file keeps
Lightning's). Then it acts at three moments the ``FitFollower`` calls it at:

- the fit's start, after the ``on_train_start`` hooks (a metric reset there would otherwise undo
  the restore): every metric's states, the logger's views and the saved gradients go back; each
  logged value goes into the entry Lightning creates for it, before its first update, so that the
  sums run in the uninterrupted order;
- the first batch: Lightning's own restart handling of the batches ends (the loops were restored
  for the point), and the run starts at the point: it trains the point's batch, or runs a batch's end
  (its validation, the logger's step) first, or the epoch's end; one warning names what differs;
- the first epoch's end: each value not logged again since the resume (logged only in some
  batches, or in on_train_epoch_start) goes in before Lightning computes the epoch's values.

A resumed fit with nothing left to train (a relaunch from a finished job's checkpoint) reaches none of
these: Lightning's fit loop returns before its start. The state goes back there all the same (the
attributes, the metrics, the logger's views), as the uninterrupted run ended with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, cast

import torch

from lightning_step_types._lightning.data import (
    combined_train_loader,
    continue_loader_iterator,
    first_iterator_fetches_nothing,
    load_dataset_states,
    loaded_dataset_states,
    loaded_loader_states,
    make_train_loaders_again,
)
from lightning_step_types._lightning.fit_loop import (
    ResumePoint,
    batch_counters,
    clear_logger_views,
    log_step_row,
    plateau_epoch_schedulers,
    resume_from_fit_loop,
    skip_next_validation,
    take_over_restart,
    update_plateau_schedulers_of_epoch,
    update_schedulers_after_step,
)
from lightning_step_types._lightning.result_collection import (
    before_batch_logging,
    call_before_updates,
    create_logged_entry,
    guard_logged_keys,
    logged_entries,
    stop_calling_before_updates,
    unguard_logged_keys,
    write_logged_tensors,
)
from lightning_step_types.resume.data_order import also_before_train_iterator
from lightning_step_types.resume.fit_follower import FitFollower, follower_of
from lightning_step_types.resume.holders import attributes_named, saved_stop_holds
from lightning_step_types.resume.messages import (
    CHECKPOINT_KEY,
    Problem,
    batch_end_hooks_problem,
    changed_module_problem,
    format_problem_of,
    gradients_problem,
    manual_rest_problem,
    plain_checkpoint_problem,
    ranks_problem,
    rounded_weights_problem,
    running_stats_problem,
    unended_epoch_problem,
    warn,
    world_size_problem,
)
from lightning_step_types.resume.points import Point
from lightning_step_types.resume.save import FORMAT, READ_FORMATS, STATE
from lightning_step_types.resume.source import Loading
from lightning_step_types.resume.state import restore_gradients, restore_metrics, restore_views
from lightning_step_types.resume.undeclared_state import ATTRIBUTES

__all__ = ["Resume", "load_running_state"]


def load_running_state(trainer: Any, module: Any, checkpoint: Mapping[str, Any]) -> None:
    """Keep a checkpoint's running state for the fit that resumes from it (``on_load_checkpoint``).

    ``load_from_checkpoint`` calls the module's ``on_load_checkpoint`` with no Trainer attached:
    weights only, nothing kept. ``validate``/``test`` from a checkpoint train nothing either.
    """
    follower = follower_of(module)
    # TrainerFn is a str enum in both flavours; str.__eq__ skips its case-folding __eq__.
    if trainer is None or follower is None or str.__eq__(trainer.state.fn, "fit") is not True:
        return
    ours: Any = checkpoint.get(CHECKPOINT_KEY)
    saved: Any = cast(Any, ours).get(STATE) if isinstance(ours, Mapping) else None
    follower.checkpoints_loaded += 1
    resume = follower.resume = Resume(trainer, module, cast(Any, saved) if isinstance(saved, Mapping) else None)
    if resume.saved is not None:  # every part of the library's entry, for a save before anything runs
        resume.loaded_entry = dict(cast("Mapping[str, Any]", ours))
    rounded = _rounded_weights(trainer, module, checkpoint)
    if rounded:
        resume.problems.append(rounded_weights_problem(type(module).__qualname__, rounded))
    # a checkpoint loaded again inside the fit (BatchSizeFinder's or LearningRateFinder's own, restored
    # after their trials ran batches): the fit starts at its point from its first batch; and in a fit
    # resumed from a checkpoint of its own, with loaders made again (their iterators were the trials'),
    # so that the point's loader states and random streams go in before its first iterator is made.
    # Not where the point is the fit's start, saved before the fit loop first ran (the tuner's own save, which
    # an exception in its trials left as the point): the uninterrupted fit's tuner loaded it as its first
    # checkpoint, after trials that drew from the streams saved there, and went on from their draws, as the
    # resumed fit's trials (from those streams put back) do.
    follower.first_batch_done = False
    before_loop = resume.saved is not None and bool(resume.saved.get("before_loop"))
    follower.loaded_again = follower.checkpoints_loaded > 1 and not before_loop
    if follower.loaded_again and combined_train_loader(trainer) is not None:
        make_train_loaders_again(trainer)
    if follower.loaded_again:
        # what the tuner's trials logged: the uninterrupted fit's sanity check emptied the views after its
        # trials (a resumed one runs none), or they held the uninterrupted trials' values, which the
        # checkpoint's views hold; the resumed trials' values (from the point's weights) are neither
        clear_logger_views(trainer)
    fit_loop: Any = resume.saved.get("fit_loop") if resume.saved is not None else None
    if isinstance(fit_loop, Mapping) and isinstance(checkpoint, dict):  # Lightning's own dict: its loops load next
        # not at an epoch's first batch, run again from its fetch: the state at the save is past that fetch
        between = resume.point is not None and resume.point.kind != "batch"
        if between and "combined_loader" not in (cast("Mapping[str, Any]", fit_loop).get("state_dict") or {}):
            # the point carries no loader position (an epoch's start, or after its last batch): the loaders start
            # a new iterator, but a main-process StatefulDataLoader's dataset goes on from its saved state, as
            # Lightning's own load of the file's loader states gives it
            _load_dataset_states_before_iterator(trainer, loaded_dataset_states(loaded_loader_states(checkpoint)))
        resume_from_fit_loop(checkpoint, cast("Mapping[str, Any]", fit_loop))
        if resume.encoded is not None and resume.encoded.is_last_batch:
            _fetch_nothing_from_first_iterator(trainer)
    for source in follower.sources:  # each source keeps its entry for the moments it puts its state back at
        source.load(resume.state.get(source.key) if resume.state is not None else None, resume.loading, checkpoint)
    if before_loop and follower.loop_runs > 0:
        # the tuner's own save at the fit's start, loaded after its trials (as the fit that saved it loaded
        # it): the fit goes on from the trials' draws, and nothing of the streams saved there goes back (the
        # first iterator the fit made after this load, at a later epoch's reload, drew from them again)
        follower.streams.loaded = None
    follower.loaded_loaders = loaded_loader_states(checkpoint)
    if resume.encoded is not None:  # the point's loaders are the ones Lightning's loop state holds
        resume.encoded = resume.encoded._replace(loader_states=follower.loaded_loaders)
    follower.loaded_cycled = resume.encoded.cycled if resume.encoded is not None else None


def _load_dataset_states_before_iterator(trainer: Any, states: list[Any] | None) -> None:
    """``states`` (`loaded_dataset_states`) into the datasets right before the resumed fit's first training
    iterator is made, once."""
    if states is None:
        return
    pending = [states]

    def load() -> None:
        if pending:
            load_dataset_states(trainer, pending.pop())

    also_before_train_iterator(trainer, load)


def _fetch_nothing_from_first_iterator(trainer: Any) -> None:
    """Resumed after its epoch's last batch, the fit trains nothing from the iterator `FitLoop.setup_data`
    makes (the next epoch makes its own), as the uninterrupted epoch fetched nothing more from its own: that
    iterator ends at once, once (`first_iterator_fetches_nothing`), where its fetch ahead would have run the data
    (an IterableDataset that keeps its position would start the next epoch after the batch fetched)."""
    pending = [True]

    def end() -> None:
        if pending:
            pending.pop()
            first_iterator_fetches_nothing(trainer)

    also_before_train_iterator(trainer, end, last=True)


class Resume:
    """What one resumed fit restores into one module (see the module docstring)."""

    def __init__(self, trainer: Any, module: Any, saved: Mapping[str, Any] | None) -> None:
        self.module: weakref.ReferenceType[Any] = weakref.ref(module)
        self.saved = saved
        self.point: Point | None = None
        self.encoded: ResumePoint | None = None
        self.state: Mapping[str, Any] | None = None  # this process's running state
        self.problems: list[Problem] = []  # warned at the first batch, in one warning each
        self.losses: list[Problem] = []  # what a run from the point cannot reproduce, warned there too
        self.pending: dict[str, Any] = {}  # collection key -> saved value, until Lightning creates its entry
        self.armed: bool = False
        self.not_restored: list[str] = []  # named in one warning at the first epoch's end
        self.where: str = ""
        self.results: Any = None
        self.loaded_entry: dict[str, Any] | None = None  # the checkpoint's whole entry under CHECKPOINT_KEY
        # what the sources are told of this resume (resume/source.py)
        self.loading: Loading = Loading(weakref.ref(trainer), weakref.ref(module), None, "", None, -1)
        # the run that saved had been asked to stop inside the epoch it resumes in: the stop goes back at the
        # first batch or the epoch's end (at the fit's start, Lightning's fit loop would end before the epoch)
        self.stop_inside_epoch: bool = False
        if saved is None:
            return
        if saved.get("format") not in READ_FORMATS:
            self.problems.append(format_problem_of(saved.get("format"), FORMAT))
            self.saved = None
            return
        point: dict[str, Any] = {**saved["point"], "losses": ()}
        self.point = Point(**point)
        self.encoded = ResumePoint(**saved["encoded"])
        ranks = saved["ranks"]
        world_size, rank = int(getattr(trainer, "world_size", 1)), int(getattr(trainer, "global_rank", 0))
        # each process's sources resume from its own part (none where the world size differs)
        self.loading = Loading(
            self.loading.trainer,
            self.loading.module,
            self.point,
            _where(self.point),
            saved,
            rank if len(ranks) == world_size else -1,
            self.encoded.cycled,
        )
        owner = type(module).__qualname__
        classes = {
            callback.state_key: type(callback).__name__
            for callback in getattr(trainer, "callbacks", [])
            if isinstance(getattr(callback, "state_key", None), str)
        }
        if len(ranks) != world_size:
            self.problems.append(world_size_problem(len(ranks), world_size, _everything(ranks, owner, classes)))
        elif ranks[rank] is None:
            where = _where(self.point)
            lost = [index for index, state in enumerate(ranks) if state is None]
            if rank == min(lost):  # one warning for the ranks that start fresh
                present = [state for state in ranks if state is not None]
                self.problems.append(ranks_problem(lost, where, _everything(present, owner, classes)))
        else:
            state: Mapping[str, Any] = ranks[rank]
            self.state = state
            self.pending = dict(state.get("logged") or {})
        self.losses = [_loss_problem(loss) for loss in saved["losses"]]

    # --- the follower's three moments ----------------------------------------------------------------

    def fit_started(self, follower: FitFollower) -> None:
        trainer, state = follower.trainer(), self.state
        encoded = self.encoded
        if trainer is not None and encoded is not None and encoded.loader_states is not None:
            continue_loader_iterator(trainer, encoded.cycled, encoded.batches_done)
        elif trainer is not None and follower.plain_loaders.positioned is not None:
            continue_loader_iterator(trainer, *follower.plain_loaders.positioned)
        self._put_back(follower, False)
        if trainer is None or state is None:
            return
        if self.pending:
            self.armed, self.results = True, follower.results
            call_before_updates(follower.results, self._before_update)
            before_batch_logging(trainer, lambda: self._create_pending(trainer, follower))

    def validation_loaders_made_later(self, follower: FitFollower) -> bool:
        """Whether the run that saved had no validation loaders at its point, saved after its fit loop's start
        (where Lightning makes them for a first epoch that validates): it made them at a validation after the
        point, where the resumed fit's would make them at its start, for an epoch that validates."""
        saved = self.saved
        if saved is None or saved.get("before_loop"):
            return False
        return follower.streams.validation_loaders_saved() == 0

    def nothing_to_train(self, follower: FitFollower) -> None:
        """A resumed fit with nothing left to train (a relaunch from a finished job's checkpoint, with the
        same limits): Lightning's fit loop returns before its start, and no batch runs. What the checkpoint
        holds goes back all the same, as the uninterrupted run ended with it; what a resumed run could not
        reproduce of what runs again is not named (nothing runs again)."""
        trainer = follower.trainer()
        if trainer is None:
            return
        where = _where(self.point) if self.point is not None else f"resuming epoch {int(trainer.current_epoch)}"
        point = self.point
        if point is not None and point.kind != "epoch":  # saved inside an epoch that the run that saved then ended
            self.problems.append(unended_epoch_problem(point.epoch))
        for problem in self.problems:
            warn(self.module(), where, problem)
        self._put_back(follower, True)
        if self.not_restored:
            warn(self.module(), where, changed_module_problem(self.not_restored))

    def _put_back(self, follower: FitFollower, nothing_runs: bool) -> None:
        """The running state at the point, after the on_train_start hooks (where they run: ``nothing_runs``,
        a fit with nothing left to train, runs none): the callbacks', the module's attributes, the metrics, the
        logger's views, the gradients, the plateau schedulers' update of the epoch that ended."""
        trainer, module, state = follower.trainer(), follower.module(), self.state
        if trainer is not None:  # warned now: a restart at an epoch's end reaches no first batch
            where = _where(self.point) if self.point is not None else f"resuming epoch {int(trainer.current_epoch)}"
            inside = not nothing_runs and self.point is not None and self.point.kind != "epoch"
            self.stop_inside_epoch = inside and saved_stop_holds(trainer, follower.callbacks.loaded)
            for source in follower.sources:
                for problem in source.restore(self.loading, nothing_runs):
                    warn(module, where, problem)
        if trainer is None or state is None:
            return
        self.not_restored += restore_metrics(follower.metrics, state["metrics"])
        restore_views(trainer, state["views"], replace=nothing_runs)
        if "gradients" in state:
            self.not_restored += restore_gradients(module, state["gradients"])
        point = self.point
        if point is not None and point.update_plateau and plateau_epoch_schedulers(trainer):
            update_plateau_schedulers_of_epoch(trainer, point.epoch - 1)

    def first_batch(self, follower: FitFollower) -> bool:
        """Start the resumed run at the point; False where no batch runs now (a batch's or the epoch's end)."""
        trainer: Any = follower.trainer()  # alive: its loop calls this
        module = self.module()
        point = self.point
        counters = batch_counters(trainer)
        epoch = int(trainer.current_epoch)
        self.where = _where(point) if point is not None else f"resuming epoch {epoch} at batch {counters.completed}"
        if self.saved is None and not self.problems and counters.completed > 0:
            self.problems.append(plain_checkpoint_problem(epoch, counters.completed))
        for problem in self.problems + self.losses:
            warn(module, self.where, problem)
        if point is None:  # Lightning's own checkpoint: its own resume
            return True
        take_over_restart(trainer)
        if point.kind != "batch":
            self._stop_again(trainer)
        inside_epoch = self.encoded is not None and self.encoded.loader_states is not None
        for source in follower.sources:
            source.reach_point(self.loading, True, inside_epoch)
        if point.kind == "batch_end":
            if self.state is not None and "step_row" in self.state:
                log_step_row(trainer, self.state["step_row"])
            if point.update_schedulers:
                update_schedulers_after_step(trainer)
            if point.skip_validation:
                skip_next_validation(trainer)
            follower.epoch, follower.batch = epoch, point.batch  # the follower goes on at its end
            return False
        if point.kind == "epoch_end" or self.stopped_before(trainer):
            follower.epoch = epoch
            raise StopIteration  # the epoch loop ends: `FitLoop.on_advance_end` runs the epoch's end
        return True

    def epoch_ending(self, follower: FitFollower) -> None:
        """At the first epoch's end: name, in one warning, what could not be restored."""
        trainer = follower.trainer()
        self._stop_again(trainer)
        for source in follower.sources:  # where no batch ran (the point was the epoch's end)
            source.reach_point(self.loading, False, False)
        self._create_pending(trainer, follower)  # no batch ran (the point was the epoch's end)
        if self.results is not None:
            unguard_logged_keys(self.results)
        if self.not_restored:
            warn(self.module(), self.where, changed_module_problem(self.not_restored))

    def _stop_again(self, trainer: Any) -> None:
        """The saved stop, where the resumed run goes on inside the epoch: Lightning's epoch loop reads it after
        the point's batch end (or at the epoch's end), as in the run that saved, and the epoch's end runs before
        the fit ends."""
        if self.stop_inside_epoch and trainer is not None:
            self.stop_inside_epoch = False
            trainer.should_stop = True

    def stopped_before(self, trainer: Any) -> bool:
        """The saved stop at a point before a batch: Lightning's epoch loop reads a stop before each batch, so
        the epoch ends there (no batch trains) and its end runs, then the fit ends."""
        stop = self.stop_inside_epoch
        self._stop_again(trainer)
        return stop

    def _create_pending(self, trainer: Any, follower: FitFollower) -> None:
        """After the first batch's hooks logged (or at the epoch's end, without a batch): each saved value
        not logged again yet goes into an entry created as it was logged, with its running state and its
        last on_step value (Lightning logs it again in every step's row until it is logged anew)."""
        if not self.armed:
            return
        self.armed = False
        stop_calling_before_updates(self.results)
        created: dict[str, Any] = {}
        for key, saved in list(self.pending.items()):
            value = self._logged_metric(follower, saved["metric_attribute"])
            if saved["tensors"]:
                value = saved["tensors"]["value"].to(trainer.strategy.root_device)
            if value is None:
                self.not_restored.append(f"{saved['shown']}, not found since the checkpoint")
                continue
            item = create_logged_entry(self.results, trainer, saved, value)
            if saved["tensors"]:
                write_logged_tensors(item, saved["tensors"])
            created[key] = saved["meta"]
        self.pending = {}
        guard_logged_keys(self.results, created, self._logged_differently)

    def _logged_metric(self, follower: FitFollower, attribute: str | None) -> Any:
        """The metric object logged under ``attribute`` (its path in the module's ``named_modules()``, as
        Lightning records it), or None. A declared metric's copy is among the follower's metrics under its
        declared name, so its path is looked up in the module."""
        if not attribute:
            return None
        found = follower.metrics.get(attribute)
        module = self.module()
        if found is None and module is not None:
            found = dict(module.named_modules()).get(attribute)
        return found

    def _logged_differently(self, key: str) -> None:
        self.not_restored.append(f"{key.split('.', 1)[1]!r} ({key.split('.', 1)[0]}), now logged differently")

    def pending_logged(self) -> dict[str, Any]:
        """The saved values not yet back in Lightning's entries (all of them before the fit's start)."""
        return dict(self.pending)

    def _before_update(self, key: str, result_metric: Any) -> None:
        saved = self.pending.pop(key, None)
        if saved is not None:
            (entry,) = logged_entries({key: result_metric})
            if list(entry.fingerprint) == list(saved["fingerprint"]):
                if saved["tensors"]:
                    write_logged_tensors(result_metric, saved["tensors"])
            else:
                self.not_restored.append(f"{saved['shown']}, now logged differently")
        if not self.pending:
            stop_calling_before_updates(self.results)


def _rounded_weights(trainer: Any, module: Any, checkpoint: Mapping[str, Any]) -> list[str]:
    """The parameters a float64 checkpoint loads into float32 under ``precision="64-true"``, with values float32
    cannot hold: Lightning restores the module's state before its precision plugin converts the module
    (``module.double()``), so a module built in float32 gets them rounded (plain Lightning does the same)."""
    if not str(getattr(trainer, "precision", "")).startswith("64"):
        return []
    weights: Any = checkpoint.get("state_dict")
    if not isinstance(weights, Mapping):
        return []
    saved = cast("Mapping[str, Any]", weights)
    found: list[str] = []
    for name, parameter in module.named_parameters():
        weight: Any = saved.get(name)
        if parameter.dtype == torch.float64 or not isinstance(weight, torch.Tensor) or weight.dtype != torch.float64:
            continue
        if not torch.equal(weight.to(parameter.dtype).to(torch.float64), weight):  # values float32 cannot hold
            found.append(name)
    return found


def _where(point: Point) -> str:
    if point.kind == "batch":
        return f"resuming epoch {point.epoch} at batch {point.batch}"
    if point.kind == "batch_end":
        return f"resuming epoch {point.epoch} at the end of batch {point.batch}"
    if point.kind == "epoch_end":
        return f"resuming epoch {point.epoch} at its end"
    return f"resuming epoch {point.epoch} at its start"


def _everything(ranks: list[Any], owner: str, classes: Mapping[str, str]) -> list[str]:
    """Everything the saved states hold, as the warnings name it: the logged values, the metrics, the
    attributes of the module (of class ``owner``) and of the resuming fit's callbacks (``classes``:
    state_key -> class name)."""
    names: dict[str, None] = {}
    for state in ranks:
        logged: Mapping[str, Any] = state.get("logged") or {}
        names.update((str(saved["shown"]), None) for saved in logged.values())
        names.update((f"metric {name!r}", None) for name in state.get("metrics", {}))
    for state in ranks:
        attributes: Any = state.get(ATTRIBUTES) or {}
        values: Mapping[str, Any] = attributes.get("values") or {}
        names.update((f"{owner}.{name}", None) for name in values)
    for state in ranks:
        names.update((name, None) for name in attributes_named(state, classes))
    return list(names)


def _loss_problem(loss: Mapping[str, Any]) -> Problem:
    kind, batch = loss["kind"], loss["batch"]
    if kind == "gradients":
        return gradients_problem(batch, loss["window"], loss["manual"])
    if kind == "batch_end_hooks":
        return batch_end_hooks_problem(batch, loss["names"])
    if kind == "manual_rest":
        return manual_rest_problem(batch)
    return running_stats_problem(batch, loss["names"])
