"""Where a fit is, followed through Lightning's loops: what a checkpoint saved right now would hold.

A checkpoint can be saved anywhere in the fit loop: by ``ModelCheckpoint`` at a batch's end, by
``OnExceptionCheckpoint`` after an exception in any hook, by SLURM's requeue signal at any bytecode,
by ``trainer.save_checkpoint`` from any hook. To write one that resumes exactly, the saving side
(``resume/save.py``) needs to know where the fit was, and what the state was at the last point
whose every effect the checkpoint holds. A ``FitFollower`` keeps both, for one fit of one module:

- the phase of the fit (an epoch's start, a batch, its end with validation, the epoch's end);
- at each batch's start, before its fetch: the running epoch state (Lightning's logged tensors by
  reference, the metrics' states copied when they changed), the optimizer steps done so far, the
  global random streams (their bytes copied: ``RandomStreams.batch_start``), and where the data
  fetcher was;
- the state a resumed run must load to fetch a batch again: where the training data comes from one
  torchdata ``StatefulDataLoader`` loading in this process, read back at the save
  (``_lightning.data.rewound_loader_states``: its counters as they were before the batch's fetch), with
  its dataset's own state, where it has one, read before each fetch (``_lightning.data.dataset_states``);
  where several such loaders are combined, read back at the save from each one's count of batches
  taken after each fetch (``_lightning.data.counted_loader_states``); from any other training loader
  with a ``state_dict()`` (worker processes, a dataset's own state among several loaders), that state
  read before each fetch;
- at each validation's start, the views the validation updates (``callback_metrics``) and the
  metrics' states, for a checkpoint saved inside the validation.

It wraps Lightning's loop methods (``_lightning.fit_loop.follow_fit_loop``) from the fit's setup
to its teardown, for both ways in. A resumed fit's ``Resume`` (``resume/load.py``) is called from
here at the fit's start, at its first batch and at its first epoch's end.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

from lightning_step_types._lightning.data import (
    DatasetStates,
    combined_train_loader,
    counted_loader_states,
    counted_loaders,
    cycled_loaders,
    dataset_states,
    holds_dataset_state,
    loader_count_offset,
    loader_counts,
    rewindable_loader,
    rewound_loader_states,
    stateful_loader_states,
)
from lightning_step_types._lightning.fit_loop import (
    batch_start_counters,
    fetch_position,
    follow_fetches,
    follow_fit_loop,
    logger_metric_dicts,
    logger_step,
    next_zero_grad_index,
    restart_as_loaded,
    run_without_validation_loaders,
    unfollow_fetches,
    unfollow_fit_loop,
)
from lightning_step_types._lightning.module_state import (
    grad_version,
    gradient_marks,
    metric_change_mark,
    metric_states_on_device,
    running_stats_buffers,
    running_stats_versions,
)
from lightning_step_types._lightning.result_collection import LoggedSnapshot, logged_snapshot, training_epoch_results
from lightning_step_types._lightning.trainer import running
from lightning_step_types.resume.data_order import DataOrder
from lightning_step_types.resume.data_randomness import DataRandomness, LoaderPasses, PassStates
from lightning_step_types.resume.holders import CallbackState, Holders
from lightning_step_types.resume.metric_state import resumed_metrics
from lightning_step_types.resume.plain_loaders import PlainLoaders
from lightning_step_types.resume.random_streams import RandomStreams
from lightning_step_types.resume.shared_settings import SharedSettings
from lightning_step_types.resume.source import Moment, Source
from lightning_step_types.resume.undeclared_state import ModuleAttributes

__all__ = ["FitFollower", "Phase", "ResumeHooks", "any_resuming", "follower_of", "start_following", "stop_following"]


class Phase:
    """Where the fit is, as the follower's wrappers see it."""

    OUTSIDE = "outside"  # before the first epoch, after the last, between epochs (or in on_train_epoch_start)
    BATCH = "batch"  # inside `_TrainingEpochLoop.advance`: fetch, hooks, step, on_train_batch_end
    # the batch's advance returned: its end (`_TrainingEpochLoop.on_advance_end`: validation, plateau LR
    # schedulers, the logger's step), and once that is done, until the next batch or the epoch's end
    TAIL = "tail"
    VALIDATION = "validation"  # a validation run inside the batch's end
    VALIDATION_END = "validation_end"  # its on_validation_end hooks (ModelCheckpoint(monitor=...) saves here)
    EPOCH_END = "epoch_end"  # `FitLoop.on_advance_end`: on_train_epoch_end hooks and the epoch's logging


class ResumeHooks(Protocol):
    """What a resumed fit's ``Resume`` does at the moments the follower calls it."""

    def validation_loaders_made_later(self, follower: FitFollower) -> bool: ...

    def fit_started(self, follower: FitFollower) -> None: ...

    def nothing_to_train(self, follower: FitFollower) -> None: ...

    def pending_logged(self) -> dict[str, Any]: ...

    def first_batch(self, follower: FitFollower) -> bool: ...

    def epoch_ending(self, follower: FitFollower) -> None: ...


class BatchRecord:
    """The state at the start of the batch in flight (before its fetch), updated every batch.

    The logged tensors are held by reference (Lightning rebinds them on update); each metric's
    states are copied, at the first batch start after they changed (its update count or a state's
    identity moved), since their owners update them in place.
    """

    __slots__ = (
        "epoch",
        "batch",
        "logged",
        "pending",
        "metrics",
        "marks",
        "steps",
        "fetched",
        "prefetched",
        "stats_versions",
    )

    def __init__(self) -> None:
        self.epoch: int = -1
        self.batch: int = -1
        self.logged: LoggedSnapshot = []
        self.pending: dict[str, Any] = {}  # a resumed run's saved values not yet back in Lightning's entries
        self.metrics: dict[str, Any] = {}  # name -> states copied by metric_states_on_device
        self.marks: dict[str, tuple[Any, ...]] = {}  # name -> metric_change_mark when copied
        self.steps: int = 0  # optimizer steps done in this fit
        self.fetched: int = 0  # the fetcher's count of fetches at the batch's start
        self.prefetched: int = 0  # of which not yet handed to a step: the batch's fetch is number fetched - prefetched
        self.stats_versions: tuple[int, ...] = ()  # the running statistics' in-place versions (`FitFollower.stats`)


class FitFollower:
    """One fit of one module, followed through the fit loop (see the module docstring)."""

    def __init__(self, trainer: Any, module: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.module: weakref.ReferenceType[Any] = weakref.ref(module)
        self.phase: str = Phase.OUTSIDE
        self.epoch: int = -1
        self.batch: int = -1  # the batch in flight, or whose end runs
        self.results: Any = training_epoch_results(trainer)
        self.metrics: dict[str, Any] = {}  # the metrics a checkpoint carries, found at the fit's start
        self.record: BatchRecord = BatchRecord()
        self.steps: list[int] = [0]  # optimizer.step() calls returned in this fit (a step post-hook per optimizer)
        self._step_hooks: list[Any] = []
        self.stateful: bool | None = None  # whether a training loader has a state_dict (found at the first fetch)
        # the one training loader whose state is read back at a save (`rewindable_loader`), or None
        self.rewinding: Any = None
        # whether its dataset holds a state of its own, read before each fetch (`dataset_states`)
        self.dataset_holds_state: bool = False
        # several such loaders combined (`counted_loaders`): their states are read back from counts, or None
        self.counted: list[Any] | None = None
        # their generators' states around the passes `max_size_cycle` starts inside an epoch, or None
        self.passes: LoaderPasses | None = None
        self.loaders: Any = None  # the training `CombinedLoader` the layout above was found on
        # its iterator's count of yielded batches minus the fetcher's count of fetches (read at each epoch's first batch)
        self.fetch_offset: int = 0
        self.offset_epoch: int = -1
        # fetch number -> the loaders' states before it, and which of them had cycled
        self.before_fetch: dict[int, tuple[list[dict[str, Any]], list[bool] | None]] = {}
        # fetch number -> the rewound loader's dataset's part of its state before it
        self.dataset_before_fetch: dict[int, DatasetStates | None] = {}
        # fetch number -> the counted loaders' iterators and counts before it (`loader_counts`), and which had cycled
        self.counts_before_fetch: dict[int, tuple[tuple[tuple[Any, int, bool], ...], list[bool] | None]] = {}
        self.last_fetch: int = -1
        self.loaded_loaders: list[dict[str, Any]] | None = None  # what a resumed fit's loaders started from
        self.loaded_cycled: list[bool] | None = None
        # `_batches_that_stepped` when the batch's end began (its start's), or the epoch's end
        self.logger_step_at_end: int = 0
        self.validated: bool = False  # a validation ran in this batch's end
        self.validation_views: dict[str, dict[str, Any]] | None = None  # logger views at validation's start
        self.validation_metrics: dict[str, Any] | None = None  # metric states at validation's start
        self.manual: bool = False  # manual optimization (found at the fit's start)
        self.window: int = 1  # accumulate_grad_batches
        self.parameters: list[Any] = []
        # the module's running statistics (BatchNorm's buffers), found at the fit's start: a save inside a batch
        # names those changed since the batch's start (its forward ran before the save); empty: no cost per batch
        self.stats: tuple[Any, ...] = ()
        # where gradients of earlier batches were held over into the batch: each parameter's .grad
        # identity and in-place version at the batch's start (None: nothing held over)
        self.gradient_marks: list[tuple[int, int] | None] | None = None
        self.resume: ResumeHooks | None = None  # a resumed fit's plan, until its first epoch ends
        self.first_batch_done: bool = False
        self.loop_started: bool = False  # the fit loop's run got past its start (there was something to train)
        self.checkpoints_loaded: int = 0  # in this fit: its own, then a tuner's of its own (BatchSizeFinder's)
        # the last checkpoint loaded is a tuner's own, loaded again in a fit resumed from another of a point
        # the fit loop had run to (load.load_running_state)
        self.loaded_again: bool = False
        self.loop_runs: int = 0  # the fit loop's runs in this fit so far (a tuner's trials' and the fit's own)
        # the sources of state (resume/source.py), side by side: each is told the fit's moments, read at each
        # batch's start where it reads anything, asked for its entry at a save and given it back at a load
        self.callbacks: CallbackState = CallbackState(trainer)  # the callbacks' attributes and loggers' rows
        self.attributes: ModuleAttributes = ModuleAttributes(trainer, module)  # the module's own attributes
        self.streams: RandomStreams = RandomStreams(trainer)  # the global random streams
        self.plain_loaders: PlainLoaders = PlainLoaders(trainer)  # plain DataLoaders' passes, at each iterator's making
        self.data_order: DataOrder = DataOrder(trainer)  # the samplers Lightning wraps under DDP
        self.randomness: DataRandomness = DataRandomness(trainer)  # the training loaders' generators
        self.settings: SharedSettings = SharedSettings(trainer)  # what every process must hold alike
        self.sources: tuple[Source, ...] = (
            self.callbacks,
            self.attributes,
            self.plain_loaders,
            self.streams,
            self.data_order,
            self.randomness,
            self.settings,
        )
        self.batch_reads: tuple[Callable[[], None], ...] = tuple(
            source.batch_start for source in self.sources if source.reads_each_batch
        )

    @property
    def holders(self) -> Holders | None:
        """The callbacks' and loggers' holder of this run of the fit loop (made at its start), or None before."""
        return self.callbacks.holders

    def mark(self, moment: Moment) -> None:
        """Tell every source of a moment of the fit."""
        for source in self.sources:
            source.mark(moment)

    # --- the wrappers (_lightning.fit_loop.follow_fit_loop) --------------------------------------------

    def run_fit(self, original: Callable[[], None]) -> None:
        """The fit loop's whole run. Where it returns before its start (nothing left to train: a relaunch
        from a finished job's checkpoint), a resumed fit's state still goes back: the uninterrupted run
        ended with it."""
        self.loop_started = False
        self.loop_runs += 1
        trainer = self.trainer()
        if self.loaded_again and self.resume is not None and trainer is not None:
            # a tuner's own checkpoint loaded again in a fit resumed from a checkpoint (LearningRateFinder's):
            # the fit restarts at the point it holds, whatever the tuner did to the loops' flags after
            restart_as_loaded(trainer)
        self.mark(Moment.LOOP_START)
        original()
        if not self.loop_started and self.resume is not None:
            self.attributes.mark(Moment.FIT_START)  # no on_train_start hook ran: the module's as its __init__ left it
            self.metrics = resumed_metrics(self.module())
            resume, self.resume = self.resume, None
            resume.nothing_to_train(self)

    def run_fit_start(self, original: Callable[[], None]) -> None:
        self.loop_started = True
        trainer = self.trainer()
        self.mark(Moment.FIT_START)
        if self.resume is not None and trainer is not None and self.resume.validation_loaders_made_later(self):
            # the run that saved made its validation loaders after the point, at a validation: not here (a
            # ModelCheckpoint defers a save at the epoch's last batch past the validation where they exist)
            run_without_validation_loaders(trainer, original)
        else:
            original()  # the on_train_start hooks: a user's reset of a metric there comes before a restore
        self.mark(Moment.TRAIN_STARTED)
        if trainer is not None:
            optimizers = trainer.optimizers
            self._step_hooks = [_count_steps(optimizer, self.steps) for optimizer in optimizers]
            self.metrics = resumed_metrics(self.module())
            self.find_loaders(trainer)  # the training loaders exist from `FitLoop.setup_data`, before this
            self.manual = not trainer.lightning_module.automatic_optimization
            self.window = int(trainer.accumulate_grad_batches)
            self.parameters = list(trainer.lightning_module.parameters())
            self.stats = running_stats_buffers(trainer.lightning_module)
        if self.resume is not None:
            self.resume.fit_started(self)
        self._epoch_starts()

    def _epoch_starts(self) -> None:
        """Before an epoch's on_train_epoch_start hooks, which a resume at the epoch's start runs again (all of
        them, the callbacks' first): the callbacks' and the module's attributes as they were there, for a save
        inside the hooks (a fault there), so that the hooks run again from where they first ran."""
        self.mark(Moment.EPOCH_START)

    def run_batch(self, original: Callable[[Any], None], data_fetcher: Any) -> None:
        trainer: Any = self.trainer()  # alive: its loop calls this
        if self.resume is not None and not self.first_batch_done:
            self.first_batch_done = True
            if not self.resume.first_batch(self):  # the point is a batch's end: it runs before any batch
                self.phase, self.validated, self.logger_step_at_end = Phase.TAIL, False, logger_step(trainer)
                return
        # --- the batch-start record: written here rather than in a method of its own, since every call
        # per batch counts; one read of Lightning's counters, and nothing that has nothing to record
        epoch, completed, self.logger_step_at_end = batch_start_counters(trainer)
        if epoch != self.epoch:
            # the epoch's window (GradientAccumulationScheduler sets it in on_train_epoch_start, or at a resumed
            # fit's start)
            self.window = int(trainer.accumulate_grad_batches)
            if self.epoch >= 0:  # past the epoch a resumed fit's loaders started in
                self.loaded_loaders = self.loaded_cycled = None
                if combined_train_loader(trainer) is not self.loaders:  # reload_dataloaders_every_n_epochs
                    self.find_loaders(trainer)
        if epoch != self.offset_epoch and self.rewinding is not None:  # the epoch's iterator exists, no fetch under way
            self.fetch_offset = loader_count_offset(self.rewinding, fetch_position(trainer)[0])
            self.offset_epoch = epoch
        self.epoch, self.batch = epoch, completed
        self.phase = Phase.BATCH
        for read in self.batch_reads:  # what each source reads at a batch's start (its stated cost)
            read()
        # gradients may be held over into this batch: Lightning zeroes them only where this index is a
        # multiple of accumulate_grad_batches (manual optimization: wherever the user does)
        if self.manual or (self.window > 1 and next_zero_grad_index(trainer) % self.window):
            self.gradient_marks = gradient_marks(self.parameters)
        elif self.gradient_marks is not None:
            self.gradient_marks = None
        record = self.record
        record.epoch, record.batch = epoch, completed
        results = self.results
        if results:
            record.logged, _ = logged_snapshot(results)
        elif record.logged:
            record.logged = []
        resume: Any = self.resume
        if resume is not None or record.pending:
            record.pending = resume.pending_logged() if resume is not None else {}
        if self.metrics:
            for name, metric in self.metrics.items():
                mark = metric_change_mark(metric)
                if record.marks.get(name) != mark:
                    record.marks[name] = mark
                    record.metrics[name] = metric_states_on_device(metric)
        record.steps = self.steps[0]
        if self.stats:
            record.stats_versions = running_stats_versions(self.stats)
        if self.stateful:
            record.fetched, record.prefetched = fetch_position(trainer)
            first = record.fetched - record.prefetched  # this batch's fetch: a resume point needs none before it
            for before_fetch in (self.before_fetch, self.dataset_before_fetch, self.counts_before_fetch):
                if before_fetch:
                    for number in [number for number in before_fetch if number < first]:
                        del before_fetch[number]
        # --- the batch
        original(data_fetcher)
        # `_TrainingEpochLoop.run` calls `on_advance_end` right after: the batch's end. Not wrapped (it
        # would cost a call per batch): the phase stays TAIL after it too, and the logger step tells the
        # two apart (`logger_step_at_end`, read at the batch's start).
        self.phase, self.validated = Phase.TAIL, False

    def run_validation(self, original: Callable[[], Any]) -> Any:
        trainer = self.trainer()
        if trainer is not None and trainer.sanity_checking:
            self.mark(Moment.SANITY_CHECK)
        if trainer is None or trainer.sanity_checking or self.phase != Phase.TAIL:
            return original()
        self.phase = Phase.VALIDATION
        self.validated = True
        self.validation_views = {name: dict(view) for name, view in logger_metric_dicts(trainer).items()}
        self.validation_metrics = {name: metric_states_on_device(metric) for name, metric in self.metrics.items()}
        self.mark(Moment.VALIDATION)
        outputs = original()  # an exception leaves the phase where it came: a save in on_exception reads it
        self.phase = Phase.TAIL
        return outputs

    def run_validation_end(self, original: Callable[[], None]) -> None:
        if self.phase == Phase.VALIDATION:
            self.phase = Phase.VALIDATION_END
        original()

    def run_epoch_end(self, original: Callable[[], None]) -> None:
        self.phase = Phase.EPOCH_END
        trainer = self.trainer()
        if trainer is not None:
            self.epoch = int(trainer.current_epoch)  # the epoch ending (counted completed at the end)
            # `FitLoop.on_advance_end` lowers the logger step by one around the epoch's logging: a save there (a
            # logger's write that raised) encodes this value, which the epoch's end, run again, lowers itself
            self.logger_step_at_end = logger_step(trainer)
        if self.resume is not None:
            self.resume.epoch_ending(self)
            self.resume = None
        self.mark(Moment.EPOCH_END)
        original()
        self.mark(Moment.EPOCH_ENDED)
        self._epoch_starts()
        self.phase = Phase.OUTSIDE

    def find_loaders(self, trainer: Any) -> None:
        """How the training loaders' states are read for a save: at the fit's start, and again at the
        first batch of an epoch whose loaders Lightning made anew (``reload_dataloaders_every_n_epochs``),
        since the layout (and the loader objects read back at a save) may differ from the last epoch's."""
        self.loaders = combined_train_loader(trainer)
        self.stateful = stateful_loader_states(trainer) is not None
        self.rewinding = rewindable_loader(trainer) if self.stateful else None
        self.dataset_holds_state = self.rewinding is not None and holds_dataset_state(self.rewinding)
        self.counted = counted_loaders(trainer) if self.stateful and self.rewinding is None else None
        if self.passes is not None:
            self.passes.stop()
        self.passes = LoaderPasses(self.counted) if self.counted is not None else None
        self.fetch_offset, self.offset_epoch = 0, -1
        self.before_fetch.clear()
        self.dataset_before_fetch.clear()
        self.counts_before_fetch.clear()
        if not self.stateful or (self.rewinding is not None and not self.dataset_holds_state):
            unfollow_fetches(trainer)  # nothing to read before each fetch
        else:
            follow_fetches(trainer, self)

    def run_fetch(self, original: Callable[[], None]) -> None:
        original()
        trainer = self.trainer()
        if self.stateful is None:
            self.stateful = stateful_loader_states(trainer) is not None
            if not self.stateful:  # nothing to read before each fetch: Lightning's own method again
                unfollow_fetches(trainer)
        if self.stateful:
            fetched, _ = fetch_position(trainer)
            if fetched < self.last_fetch:  # the fetcher was reset: a new epoch's iterator
                self.before_fetch.clear()
                self.dataset_before_fetch.clear()
                self.counts_before_fetch.clear()
            self.last_fetch = fetched
            if self.dataset_holds_state:  # the rest of the loader's state is read back at a save
                self.dataset_before_fetch[fetched] = dataset_states(self.rewinding)
            elif self.counted is not None:  # the states are read back at a save, from these counts
                self.counts_before_fetch[fetched] = (loader_counts(self.counted), cycled_loaders(trainer))
            else:
                self.before_fetch[fetched] = (stateful_loader_states(trainer) or [], cycled_loaders(trainer))

    def gradients_since_start(self) -> tuple[bool, bool, bool, bool]:
        """Compared with the batch's start: ``(gradients were held over into it, its backward added to
        some of them, to every one of them (it finished), they were zeroed)``."""
        marks = self.gradient_marks
        if marks is None or all(mark is None for mark in marks):
            return False, False, False, False
        added, every, reset = False, True, False
        for parameter, mark in zip(self.parameters, marks):
            grad = parameter.grad
            if mark is None:
                continue
            if grad is None or id(grad) != mark[0]:
                reset = True
            elif grad_version(grad) != mark[1]:
                added = True
            else:
                every = False
        return True, added, added and every, reset

    def loader_states_before(self, fetch: int, trainer: Any) -> tuple[list[dict[str, Any]] | None, list[bool] | None]:
        """The loaders' states from which fetch number ``fetch`` of this epoch comes (None: a new iterator),
        and which of them had cycled."""
        if self.rewinding is not None and (not self.dataset_holds_state or fetch in self.dataset_before_fetch):
            dataset = self.dataset_before_fetch.get(fetch)
            states = rewound_loader_states(trainer, self.rewinding, fetch + self.fetch_offset, dataset)
            if states is not None:
                return states, cycled_loaders(trainer)
        if self.counted is not None and fetch in self.counts_before_fetch:
            counts, cycled = self.counts_before_fetch[fetch]
            counted = counted_loader_states(self.counted, counts)
            if counted is not None:
                return counted, cycled
        if fetch in self.before_fetch:
            return self.before_fetch[fetch]
        fetched, _ = fetch_position(trainer)
        if fetch == fetched:  # not fetched yet: the state now
            return stateful_loader_states(trainer), cycled_loaders(trainer)
        # fetched by Lightning's first `iter()`: from what the fit started with
        return self.loaded_loaders, self.loaded_cycled

    def pass_states_before(self, fetch: int | None) -> list[PassStates | None] | None:
        """For a point whose next batch is fetch number ``fetch`` (None: from a new iterator): each
        loader's generators' states around the pass ``max_size_cycle`` started it in, or None where none did."""
        if fetch is None or self.passes is None or fetch not in self.counts_before_fetch:
            return None
        counts, cycled = self.counts_before_fetch[fetch]
        return self.passes.at(counts, cycled) if cycled is not None else None

    def stop(self, trainer: Any) -> None:
        unfollow_fit_loop(trainer)
        if self.passes is not None:
            self.passes.stop()
        for source in self.sources:
            source.stop()
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks = []


def _count_steps(optimizer: Any, counter: list[int]) -> Any:
    """Count ``optimizer.step()`` calls as they return (torch's public step post-hook).

    Lightning counts an optimizer step only after its ``optimizer_step`` hook returns, so a save from
    inside that hook, or from manual optimization after ``opt.step()``, would look like before it.
    A post-hook: in automatic optimization the step, its closure and backward run inside ``step()``.
    """

    def done(*_: Any) -> None:
        counter[0] += 1

    return optimizer.register_step_post_hook(done)


_FOLLOWERS: weakref.WeakKeyDictionary[Any, FitFollower] = weakref.WeakKeyDictionary()


def start_following(trainer: Any, module: Any) -> FitFollower | None:
    """Follow ``module``'s fit on ``trainer`` (at its setup); None where this Lightning cannot be followed."""
    stop_following(trainer, module)
    follower = FitFollower(trainer, module)
    if not follow_fit_loop(trainer, follower):
        return None
    _FOLLOWERS[module] = follower
    return follower


def stop_following(trainer: Any, module: Any) -> None:
    follower = _FOLLOWERS.pop(module, None)
    if follower is not None and trainer is not None:
        follower.stop(trainer)


def follower_of(module: Any) -> FitFollower | None:
    return _FOLLOWERS.get(module)


def any_resuming() -> bool:
    """Whether a running fit still has a checkpoint's state to put back (a fit an exception ended
    keeps its follower until the module's next fit)."""
    return any(follower.resume is not None and running(follower.trainer()) for follower in list(_FOLLOWERS.values()))
