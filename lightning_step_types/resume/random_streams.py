"""The global random streams, and the validation loaders' generators, as they were at the resume point.

Neither Lightning nor torch saves torch's global generator (CPU and CUDA), numpy's global state or
Python's ``random`` in a checkpoint: a model with ``nn.Dropout``, a ``Dataset.__getitem__`` that
augments in the main process, a step that draws from numpy or ``random``, resumes on other draws
than the uninterrupted run. A followed fit reads the streams (``_lightning.random_state``) at the
moments a resume point can be at:

- at every batch's start, before its fetch (``FitFollower.run_batch``): a point inside the batch
  trains it again from its fetch, so the fetch's augmentation and the step's dropout draw again.
  Only bytes are copied there, into the reader's buffers, and converted at a save;
- before each epoch's training iterator is made (``FitLoop.setup_data``, or the epoch loop's start):
  making it draws the loader's workers' base seed, and a sampler without a generator its seed,
  from torch's stream;
- at each validation's start, with the validation loaders' generators (a validation loader with
  ``shuffle=True`` or ``generator=`` draws its order from them): a point inside the validation runs
  it again;
- at the epoch's end, before its hooks, and after it: where the next epoch's on_train_epoch_start
  hooks start from.

Past the fit's first epoch Lightning makes an epoch's iterator after its on_train_epoch_start hooks,
but a fit resumed at the epoch's start makes its first one in ``FitLoop.setup_data``, before them
(and before the on_train_start hooks). Such a checkpoint also carries the streams the hooks start
from (``"hooks"``, as they were before the first hook where the save came inside them), put back
after the on_train_start hooks; at the epoch loop's start, where the hooks drew nothing, the streams
go back to where the iterator made before them left them (the uninterrupted run's iterator drew the
same), and where they drew (or where a tuner made that iterator between the fit loop's runs: LearningRateFinder
does inside ``isolate_rng``, which then puts back the streams from before it), the iterator is made again
there (``data_randomness`` makes it), from the streams they left, the training loaders' generators and an
``IterableDataset``'s own state (Lightning fetches a batch ahead of a loader without a length as it makes the
iterator) as they were before the first one.

Each process's streams at its point go into its running state (``resume/rank_exchange.py`` brings
them to the checkpoint under DDP), under ``"random_streams"``: the streams to put back right before
the resumed run makes its first training iterator (``"iterator"``), those to put back right before it
asks for its training loaders (``"loaders"``: where the uninterrupted run asked for the point's epoch's
loaders anew, with ``reload_dataloaders_every_n_epochs``, a ``train_dataloader()`` that draws from the
streams draws there; saved before that request, ``"iterator_again"`` says the iterator then draws from what
the request left, made twice as in the uninterrupted epoch), and those to put back where it
reaches the point, at its first batch, or at the epoch's end where no batch runs (``"point"``, with
the validation loaders' generators). The training loaders' own generators are ``data_randomness``'s.

A loader's worker processes seed their streams from the loader's base seed when they start; torchdata
gives a resumed iterator the saved base seed, so resumed inside an epoch (or with
``persistent_workers=True``) the workers draw from the start of their streams again. No checkpoint
holds a worker's global streams: where a ``StatefulDataLoader``'s iterator is made, its workers get a watch
(``WorkerDraws``, as a plain loader's do in ``plain_loaders``) that says whether they drew from their streams,
or from a generator their dataset holds; the checkpoint records it (``"workers"``), and one
``StepResultWarning`` at resume names each loader whose workers drew from their streams before the point,
or from such a generator where the dataset's state does not go back into them (torchdata loads it only with
the loader's state, inside an epoch). A checkpoint without that record names each such loader whose dataset
keeps no state of its own.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from lightning_step_types._lightning.data import (
    around_next_validation_setup,
    before_train_loaders_request,
    epoch_iterator_made_again,
    epoch_of_iterator,
    loaders_made_at,
    loaders_reload_every,
    make_epoch_iterator_again_at_loop_start,
    set_validation_loaders_made_at,
    stop_around_next_validation_setup,
    stop_before_train_loaders_request,
    train_loaders,
    train_loaders_requested_again_at,
    validation_loaders_made_again,
    validation_loaders_made_at,
)
from lightning_step_types._lightning.plain_loader import (
    WorkerDraws,
    iterable_loader,
    lend_worker_draws,
    persistent_iterator,
    plain_loader,
    streams_moved,
)
from lightning_step_types._lightning.random_state import (
    GlobalStreams,
    StreamsState,
    lightning_states,
    set_global_states,
)
from lightning_step_types.resume.data_order import also_before_train_iterator
from lightning_step_types.resume.data_randomness import (
    loader_generators,
    remake_epoch_iterator_when,
    watch_epoch_iterators,
)
from lightning_step_types.resume.messages import Problem, warn, worker_draws_problem, worker_streams_problem
from lightning_step_types.resume.points import Point
from lightning_step_types.resume.saved_streams import loaded_streams, saved_streams
from lightning_step_types.resume.source import Loading, Moment, Saving

__all__ = ["RANDOM_STREAMS", "RandomStreams"]

RANDOM_STREAMS = "random_streams"

Generators = list[dict[str, torch.Tensor]]  # per validation loader: a generator's first path -> its state


class RandomStreams:
    """One followed fit's streams at the moments a point can be at, and a resumed fit's to put back: a source of
    state (``resume/source.py``). Per batch: the three streams' states copied into preallocated buffers
    (`GlobalStreams.batch_start`), no Python object built."""

    key = RANDOM_STREAMS
    reads_each_batch = True

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.reader: GlobalStreams = GlobalStreams()
        self.read: Callable[[], StreamsState] = self.reader.read
        # at each batch's start (`FitFollower.run_batch`): into the reader's buffers, read back at a save
        self.batch_start: Callable[[], None] = self.reader.batch_start
        self.before_iterator: dict[int, StreamsState] = {}  # epoch -> the streams before its iterator was made
        # epoch -> the streams its on_train_epoch_start hooks start from (read where the epoch before ended,
        # or put back at a resumed fit's start)
        self.hooks_start: dict[int, StreamsState] = {}
        # a fit resumed at an epoch's start whose iterator the uninterrupted run made after the hooks: the
        # streams the hooks start from, put back; right after its first iterator was made; the training
        # loaders' generators right before that
        self.hooks_from: StreamsState | None = None
        self.first_made: StreamsState | None = None
        self.loader_states: list[dict[str, torch.Tensor]] | None = None
        # whether the training iterator was made in this run of the fit loop (`FitLoop.setup_data`): a tuner that
        # loads its own checkpoint after its trials makes it between runs (its own `setup_data` call), and
        # LearningRateFinder then puts the streams back as they were before it (`isolate_rng`): what the making
        # left is not read, and the iterator is made again at the epoch loop's start (`_remake_iterator`)
        self.made_in_run: bool = False
        self.made_before_run: bool = False
        self.dataset_states: list[Any] | None = None  # their IterableDatasets' own states (None: none) before it
        # at the last validation's start: the streams, the validation loaders' generators, and the epoch those loaders
        # were made at (`validation_loaders_made_at`)
        self.validation: tuple[StreamsState, Generators, int | None] | None = None
        self.epoch_end: StreamsState | None = None  # at the last epoch end's start
        self.sanity_start: StreamsState | None = None  # at the sanity check's start (`isolate_rng` puts them back)
        self.loaded: Mapping[str, Any] | None = None  # a resumed fit's saved entry, until put back
        # a resumed fit's saved validation loaders' generators: what it records for them until its first
        # validation starts. Only a validation draws from them, but which loaders exist before it differs: the
        # uninterrupted run's sanity check made them (a resumed fit runs none), or a fit resumed in an epoch that
        # validates made them at its start (Lightning's `FitLoop.on_run_start`), where the uninterrupted run makes
        # them at that validation
        self.validation_loaded: Generators | None = None
        self.iterator_done: bool = False
        self.loaders_done: bool = False
        # (epoch, the streams) before the last request of the training loaders, at that epoch's start
        self.before_request: tuple[int, StreamsState] | None = None
        self.point_done: bool = False
        self.loaded_before_loop: bool = False
        # per training loader that makes its own iterators (torchdata's StatefulDataLoader) with worker processes:
        # the watch its workers got where their iterator was made (None: none), with what the workers of a resumed
        # fit's first iterator drew before the point (from the checkpoint), and what puts the loaders' own
        # worker_init_fn and collate_fn back after the making
        self.worker_watches: list[WorkerDraws | None] = []
        self.worker_drew_before: list[tuple[bool, bool]] = []
        self.worker_lent: list[Callable[[], None]] = []

    # --- the source protocol (resume/source.py) ----------------------------------------------------------

    def mark(self, moment: Moment) -> None:
        if moment is Moment.LOOP_START:
            self.loop_starts()
        elif moment is Moment.SANITY_CHECK:
            self.sanity_start = self.read()
        elif moment is Moment.FIT_START:
            self.fit_starts()
        elif moment is Moment.VALIDATION:
            self.validation_starts()
        elif moment is Moment.EPOCH_END:
            self.epoch_end_starts()
        elif moment is Moment.EPOCH_ENDED:
            self.epoch_ended()

    def encode(self, saving: Saving) -> dict[str, Any]:
        entry = self.saved(saving.point, saving.phase, saving.record_batch, saving.record_epoch)
        if any(watch is not None for watch in self.worker_watches):
            entry["workers"] = self._workers_drew()
        return entry

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        self.loaded = cast("Mapping[str, Any]", entry) if isinstance(entry, Mapping) else None
        # saved before the fit loop first ran (a tuner's own save): the resumed fit's trials run again as the
        # uninterrupted fit's did, each making of the iterator from the streams the one before left
        self.loaded_before_loop = loading.saved is not None and bool(loading.saved.get("before_loop"))
        self.iterator_done = self.point_done = self.loaders_done = False  # this checkpoint's, not put back yet
        self.validation_loaded = None  # an earlier load's (a tuner's trial reached its point before this load)

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        if not nothing_runs:  # where the on_train_start hooks ran: the streams the epoch-start hooks start from
            self.put_back_hooks_start()
        return []

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        trainer, point = self.trainer(), loading.point
        # at the end of the fit's last epoch (no batch of it to run) no pass follows: its workers load nothing more
        ending = (
            trainer is not None
            and point is not None
            and (not batch or point.kind == "epoch_end")
            and _last_epoch(trainer, point.epoch)
        )
        self.put_back(loading.module(), loading.where, inside_epoch, not ending)

    def stop(self) -> None:
        self._return_worker_functions()
        trainer = self.trainer()
        if trainer is not None:
            stop_before_train_loaders_request(trainer)
            stop_around_next_validation_setup(trainer)

    # --- following ---------------------------------------------------------------------------------

    def follow(self, trainer: Any) -> None:
        """At the fit's setup, after ``data_randomness.follow_randomness``."""
        also_before_train_iterator(trainer, self._before_first_iterator)
        watch_epoch_iterators(trainer, self._before_epoch_iterator)
        remake_epoch_iterator_when(trainer, self._remake_iterator)
        before_train_loaders_request(trainer, self._before_loaders_request)

    def _before_loaders_request(self) -> None:
        """Before `FitLoop.setup_data` asks for the training loaders: a resumed fit's streams, where the
        uninterrupted run asked for them anew at the point's epoch's start, after the save (its iterators then
        draw after them) or before it (the streams then, and those before its iterator later); and the
        streams now, for a save in this epoch."""
        trainer = self.trainer()
        if trainer is None:
            return
        loaded = self.loaded
        if loaded is not None and not self.loaders_done and loaded.get("loaders") is not None:
            self.loaders_done = True
            set_global_states(trainer, loaded_streams(loaded["loaders"]))
            if loaded.get("iterator_again"):
                self.iterator_done = True  # the iterator draws from what the request left
                make_epoch_iterator_again_at_loop_start(
                    trainer
                )  # the uninterrupted epoch trained from its second iterator
        self.before_request = (int(trainer.current_epoch), self.read())

    def _before_first_iterator(self) -> None:
        """In `FitLoop.setup_data`, before it makes the training iterator: a resumed fit's streams first."""
        trainer = self.trainer()
        if trainer is None:
            return
        loaded = self.loaded
        self.made_in_run = True
        put_back = False
        self._watch_workers(trainer, loaded.get("workers") if loaded is not None and not self.iterator_done else None)
        if loaded is not None and not self.iterator_done:
            self.iterator_done = True
            if loaded.get("iterator") is not None:
                set_global_states(trainer, loaded_streams(loaded["iterator"]))
                put_back = True
            if loaded.get("hooks") is not None:
                loaders = train_loaders(trainer)
                self.loader_states = [
                    {path: generator.get_state() for path, generator in loader_generators(loader)} for loader in loaders
                ]
                # an IterableDataset that keeps its position: Lightning fetches one batch ahead of a loader
                # without a length as it makes the iterator, which moves it
                self.dataset_states = [copy.deepcopy(_iterable_state(loader)) for loader in loaders]
        if not epoch_iterator_made_again(trainer):
            # the iterator made here is the one the epoch trains from; where the loaders were made anew at an
            # epoch's start (reload_dataloaders_every_n_epochs), the epoch loop's start makes it (`made`)
            epoch = epoch_of_iterator(trainer)
            if put_back or not self._iterator_put_back(epoch):
                self.before_iterator = {epoch: self.read()}

    def _iterator_put_back(self, epoch: int) -> bool:
        """Whether the streams before ``epoch``'s iterator are a resumed fit's checkpoint's, put back at an earlier
        making of it: a tuner's own load makes the point's iterator again (LearningRateFinder's `setup_data` after
        its trials, then the fit loop's), each time from what the streams are by then, and the uninterrupted run's
        record is of the streams before the first."""
        loaded = self.loaded
        if loaded is None or loaded.get("iterator") is None or self.loaded_before_loop:
            return False
        return epoch in self.before_iterator

    def loop_starts(self) -> None:
        """At a run of the fit loop's start: where a tuner's trials ran it before (BatchSizeFinder's,
        LearningRateFinder's), the streams their epoch's end read for the next epoch's hooks are not this run's
        (a save at this run's first epoch's end would record them for the next epoch's start), nor the validation
        loaders' generators a trial's point put back (the record until a validation: this run's point puts back its
        own, where it has one; a tuner's fit-start save, loaded after its trials, puts back none)."""
        self.hooks_start = {}
        self.made_in_run = False
        self.validation_loaded = None

    def fit_starts(self) -> None:
        """Before the on_train_start hooks: a fit resumed at an epoch's start made its first iterator (in this run
        of the fit loop, from the streams now; or before it, in a tuner's `setup_data`, where they were not read)."""
        self._return_worker_functions()
        if self.loader_states is not None and self.first_made is None and not self.made_before_run:
            if self.made_in_run:
                self.first_made = self.read()
            else:
                self.made_before_run = True

    def put_back_hooks_start(self) -> None:
        """After the on_train_start hooks of a fit resumed at an epoch's start whose uninterrupted run made the
        epoch's iterator after its on_train_epoch_start hooks: the streams those hooks started from, in place
        of what the iterator `FitLoop.setup_data` made before them drew (`_remake_iterator` sees to it)."""
        trainer, loaded = self.trainer(), self.loaded
        made = self.first_made is not None or self.made_before_run
        if trainer is None or loaded is None or loaded.get("hooks") is None or not made:
            return
        set_global_states(trainer, loaded_streams(loaded["hooks"]))
        self.hooks_from = self.read()
        self.hooks_start = {epoch_of_iterator(trainer): self.hooks_from}

    def _remake_iterator(self) -> bool:
        """At the epoch loop's start after `put_back_hooks_start`: where the hooks drew nothing, the streams as
        the iterator made before them left them (the uninterrupted run's made now draws the same); else the
        iterator is to be made again now, from the streams the hooks left and the loaders' generators as they
        were before the first one's making; and where the first one was made before this run of the fit loop
        (`made_before_run`), whose streams after it are unknown."""
        trainer, start, first_made, before_run = self.trainer(), self.hooks_from, self.first_made, self.made_before_run
        self.hooks_from = self.first_made = None
        self.made_before_run = False
        states, self.loader_states = self.loader_states, None
        datasets, self.dataset_states = self.dataset_states, None
        if trainer is None or start is None or (first_made is None and not before_run):
            return False
        if first_made is not None and not streams_moved(start, self.read()):
            set_global_states(trainer, lightning_states(first_made))
            return False
        loaders = train_loaders(trainer)
        if states is not None and len(states) == len(loaders):
            for loader, saved in zip(loaders, states):
                for path, generator in loader_generators(loader):
                    state = saved.get(path)
                    if state is not None:
                        generator.set_state(state)
        if datasets is not None and len(datasets) == len(loaders):
            for loader, held in zip(loaders, datasets):
                if held is not None:
                    loader.dataset.load_state_dict(copy.deepcopy(held))
        return True

    def epoch_ended(self) -> None:
        """After an epoch's end: the streams the next epoch's on_train_epoch_start hooks start from."""
        trainer = self.trainer()
        if trainer is not None:
            self.hooks_start = {int(trainer.current_epoch): self.read()}

    def _before_epoch_iterator(self, made_again: bool) -> Any:
        """Before the epoch loop's start, which makes a new iterator from the fit's second epoch on;
        returns what to keep for the epoch where it did."""
        state = self.read()
        trainer = self.trainer()
        if made_again and trainer is not None:
            self._watch_workers(trainer, None)

        def made(epoch: int) -> None:
            self._return_worker_functions()
            self.before_iterator = {e: s for e, s in self.before_iterator.items() if e >= epoch - 1} | {epoch: state}

        return made

    # --- the workers of loaders that make their own iterators -----------------------------------------------

    def _watch_workers(self, trainer: Any, drew_before: Any) -> None:
        """Right before the training iterator is made: a watch for the workers of each loader that makes its own
        iterators (plain ones: ``plain_loaders``) and starts workers there (not persistent ones already started);
        ``drew_before``: a resumed fit's checkpoint's record of what its workers drew before the point."""
        self._return_worker_functions()
        loaders = train_loaders(trainer)
        if len(self.worker_watches) != len(loaders):
            self.worker_watches = [None] * len(loaders)
            self.worker_drew_before = [(False, False)] * len(loaders)
        listed: list[Any] = cast(Any, drew_before) if isinstance(drew_before, list) else []
        for index, loader in enumerate(loaders):
            if plain_loader(loader) or int(getattr(loader, "num_workers", 0) or 0) <= 0:
                continue
            if bool(getattr(loader, "persistent_workers", False)) and persistent_iterator(loader) is not None:
                continue  # its workers go on
            watch = self.worker_watches[index] = WorkerDraws(loader)
            self.worker_lent.append(lend_worker_draws(loader, watch))
            before: Any = listed[index] if index < len(listed) else None
            flags: list[Any] = cast(Any, before) if isinstance(before, list) else [False, False]
            self.worker_drew_before[index] = (bool(flags[0]), bool(flags[1]))

    def _return_worker_functions(self) -> None:
        lent, self.worker_lent = self.worker_lent, []
        for put_back in lent:
            put_back()

    def _workers_drew(self) -> list[list[bool] | None]:
        """Per training loader: whether its workers drew from their global streams, and whether they drew at all
        (or a generator their dataset holds), since their iterator was made (None: not watched)."""
        drew: list[list[bool] | None] = []
        for watch, (streams, any_draw) in zip(self.worker_watches, self.worker_drew_before):
            if watch is None:
                drew.append(None)
            else:
                drew.append([streams or watch.drew_from_streams(), any_draw or watch.drew()])
        return drew

    def validation_starts(self) -> None:
        self.validation = (self.read(), self._validation_generators(), self._validation_made())
        self.validation_loaded = None

    def epoch_end_starts(self) -> None:
        self.epoch_end = self.read()

    # --- saving ------------------------------------------------------------------------------------

    def saved(self, point: Point, phase: str, record_batch: int, record_epoch: int) -> dict[str, Any]:
        """This process's entry for ``point``; ``phase`` is the follower's (fit_follower.Phase), whose
        record is of batch ``record_batch`` of ``record_epoch``: ``batch_start`` read the streams there."""
        now = self.read()
        generators = self._validation_generators()
        # the epoch those validation loaders were made at: a resumed fit whose validation loaders are made only at its
        # first validation puts their generators back there, unless that validation makes them anew
        made = self._validation_made()
        if point.kind == "epoch":  # the epoch from its start
            epoch, trainer = point.epoch, self.trainer()
            if (
                epoch > 0
                and trainer is not None
                and epoch not in self.before_iterator
                and train_loaders_requested_again_at(trainer, epoch)
            ):
                # saved before the epoch's loaders are asked for anew (reload_dataloaders_every_n_epochs):
                # `train_dataloader()` draws from the streams now, the iterator `FitLoop.setup_data` makes from
                # what it left, and the epoch trains from the second one its loop makes after the hooks
                return {
                    "loaders": saved_streams(now),
                    "iterator_again": True,
                    "iterator": None,
                    "point": None,
                    "validation": generators,
                    "validation_made": made,
                    "hooks": None,
                }
            if epoch > 0 and trainer is not None and loaders_made_at(trainer, epoch):
                # loaders made anew at the epoch's start, before this save (in its hooks): the uninterrupted
                # epoch trains from the iterator its loop makes after the hooks, the resumed one from the first
                # it makes; its request draws as the uninterrupted one did
                return {
                    "loaders": self._before_request(epoch),
                    "iterator": saved_streams(now),
                    "point": None,
                    "validation": generators,
                    "validation_made": made,
                    "hooks": None,
                }
            start = self.hooks_start.get(epoch, now)  # a save inside the hooks: where they started
            # the fit's first epoch: its iterator was made before the hooks, from the streams before it; past
            # it, the epoch's iterator is made after the hooks, which start from ``start``
            made_first = self.before_iterator.get(epoch)
            if epoch == 0 and made_first is None:
                # saved before the fit loop asked for its training loaders (in on_fit_start, in the sanity
                # check): a `train_dataloader()` that draws draws from the streams now (those the sanity check
                # started from, which Lightning puts back after it), the iterator from what that request left
                if trainer is not None and trainer.sanity_checking and self.sanity_start is not None:
                    start = self.sanity_start
                return {
                    "loaders": saved_streams(start),
                    "iterator": None,
                    "point": None,
                    "validation": generators,
                    "validation_made": made,
                    "hooks": None,
                }
            return {
                "loaders": None,
                "iterator": saved_streams(made_first if made_first is not None else start),
                "point": None,
                "validation": generators,
                "validation_made": made,
                "hooks": saved_streams(start) if epoch > 0 else None,
            }
        if point.kind == "epoch_end":
            at_end = self.epoch_end if phase == "epoch_end" and self.epoch_end is not None else now
            return {
                "loaders": self._before_request(point.epoch),
                "iterator": None,
                "point": saved_streams(at_end),
                "validation": generators,
                "validation_made": made,
            }
        at_point = now
        inside = phase == "batch" and record_batch == point.batch and record_epoch == point.epoch
        if point.kind == "batch" and inside:
            at_point = self.reader.at_batch_start()
        elif point.from_validation and self.validation is not None:
            at_point, generators, made = self.validation
        before = self.before_iterator.get(point.epoch)
        return {
            "loaders": self._before_request(point.epoch),
            "iterator": saved_streams(before) if before is not None else None,
            "point": saved_streams(at_point),
            "validation": generators,
            "validation_made": made,
        }

    def _before_request(self, epoch: int) -> dict[str, Any] | None:
        """The streams before the request of ``epoch``'s loaders, where Lightning asked for them anew at its start
        (``reload_dataloaders_every_n_epochs``): a resumed fit asks for them again, and a ``train_dataloader()``
        that draws draws as they did. In the fit's first epoch, the last request before the save: a tuner's
        trials (``BatchSizeFinder``'s) asked for them again after its trials, and the resumed fit's tuner, whose
        checkpoint loads the streams again (``resume/load.py``), asks for the loaders again after its own."""
        trainer = self.trainer()
        request = self.before_request
        if trainer is None or request is None or request[0] != epoch:
            return None
        if loaders_reload_every(trainer) <= 0:
            return None
        return saved_streams(request[1])

    # --- resuming ----------------------------------------------------------------------------------

    def put_back_iterator(self) -> None:
        """A resumed fit's streams to put back before its first iterator, put back now: at a save, before
        the fit loop first ran, of a checkpoint saved there (a tuner's own, in ``on_fit_start``, before its
        trials: the loaders its trials request, and the trials, draw after it, as they did in the fit
        that saved it)."""
        trainer = self.trainer()
        loaded = self.loaded
        if trainer is None or loaded is None or self.iterator_done:
            return
        self.iterator_done = True
        if loaded.get("iterator") is not None:
            set_global_states(trainer, loaded_streams(loaded["iterator"]))
        elif loaded.get("loaders") is not None and not self.loaders_done:  # saved before the loaders' request
            self.loaders_done = True
            set_global_states(trainer, loaded_streams(loaded["loaders"]))

    def put_back(self, module: Any, where: str, inside_epoch: bool, workers_load: bool = True) -> None:
        """Where the resumed fit reaches its point (its first batch, or the epoch's end where none runs):
        the streams and the validation loaders' generators as they were there; warn (global rank 0) for
        training loaders whose workers draw from the start of their streams again."""
        trainer = self.trainer()
        loaded = self.loaded
        if trainer is None or loaded is None or self.point_done:
            return
        self.point_done = True
        if loaded.get("point") is not None:
            set_global_states(trainer, loaded_streams(loaded["point"]))
        generators: Generators = loaded.get("validation") or []
        self.validation_loaded = generators
        if generators and (loaders_reload_every(trainer) > 0 or not _validation_loaders(trainer)):
            # none made yet (the uninterrupted run's sanity check made them, and a resumed fit runs none), or made
            # anew at some epochs: their generators go back where the fit's next validation sets up its loaders
            around_next_validation_setup(trainer, self._validation_setup)
        else:
            _set_generator_states(trainer, generators)
        if int(getattr(trainer, "global_rank", 0)) == 0 and workers_load:
            streams, held = _restarting_workers(trainer, inside_epoch, loaded.get("workers"))
            if streams:
                warn(module, where, worker_streams_problem(streams))
            if held:
                warn(module, where, worker_draws_problem(held))

    def _validation_setup(self, setup: Callable[[], None]) -> None:
        """The resumed fit's next validation sets up its loaders (``setup``): where the uninterrupted run's validation
        made them anew there (``reload_dataloaders_every_n_epochs``, counted from the epoch the saved ones were
        made at), they are made anew (a resumed fit's own count starts at its first making, its sanity check's
        included); else their generators go back as saved, and the count as the uninterrupted run's."""
        trainer, loaded = self.trainer(), self.loaded
        if trainer is None or loaded is None:
            setup()
            return
        saved_made: Any = loaded.get("validation_made")
        made = saved_made if isinstance(saved_made, int) else None
        if validation_loaders_made_again(trainer, made):
            set_validation_loaders_made_at(trainer, None)  # Lightning's own set-up makes them now
            setup()
            return
        setup()
        _set_generator_states(trainer, loaded.get("validation") or [])
        if loaders_reload_every(trainer) > 0:
            set_validation_loaders_made_at(trainer, made)

    def _validation_made(self) -> int | None:
        """The epoch the validation loaders `_validation_generators` records were made at, where they are made anew
        every few epochs (None otherwise)."""
        trainer = self.trainer()
        if trainer is None or loaders_reload_every(trainer) <= 0:
            return None
        if self.validation_loaded is not None:
            made: Any = (self.loaded or {}).get("validation_made")
            return made if isinstance(made, int) else None
        return validation_loaders_made_at(trainer)

    def validation_loaders_saved(self) -> int | None:
        """A resumed fit's: how many validation loaders the run that saved had at its point (None: not known)."""
        loaded = self.loaded
        saved: Any = loaded.get("validation") if loaded is not None else None
        return len(cast("Generators", saved)) if isinstance(saved, list) else None

    def _validation_generators(self) -> Generators:
        """The validation loaders' generators now; before a resumed fit's first validation, its checkpoint's."""
        if self.validation_loaded is not None:
            return [dict(states) for states in self.validation_loaded]
        return _generator_states(self.trainer())


def _iterable_state(loader: Any) -> Any:
    """The ``state_dict()`` of the loader's ``IterableDataset`` where it has one (with ``load_state_dict()``), else None."""
    if not iterable_loader(loader):
        return None
    dataset: Any = loader.dataset
    state_dict, load_state_dict = getattr(dataset, "state_dict", None), getattr(dataset, "load_state_dict", None)
    return state_dict() if callable(state_dict) and callable(load_state_dict) else None


def _validation_loaders(trainer: Any) -> list[Any]:
    """The fit's validation loaders, flattened (``trainer.val_dataloaders``: one, a list or a dict)."""
    loaders: Any = getattr(trainer, "val_dataloaders", None) if trainer is not None else None
    if loaders is None:
        return []
    if isinstance(loaders, Mapping):
        return list(cast("Mapping[str, Any]", loaders).values())
    if isinstance(loaders, (list, tuple)):
        return list(cast("list[Any]", loaders))
    return [loaders]


def _generator_states(trainer: Any) -> Generators:
    return [
        {path: generator.get_state() for path, generator in loader_generators(loader)}
        for loader in _validation_loaders(trainer)
    ]


def _set_generator_states(trainer: Any, saved: Generators) -> None:
    loaders = _validation_loaders(trainer)
    if len(loaders) != len(saved):
        return
    for loader, states in zip(loaders, saved):
        for path, generator in loader_generators(loader):
            state = states.get(path)
            if state is not None:
                generator.set_state(state)


def _last_epoch(trainer: Any, epoch: int) -> bool:
    max_epochs: Any = trainer.max_epochs
    return max_epochs is not None and int(max_epochs) >= 0 and epoch + 1 >= int(max_epochs)


def _restarting_workers(trainer: Any, inside_epoch: bool, watched: Any) -> tuple[list[str], list[str]]:
    """The training loaders whose worker processes start their streams again where the uninterrupted
    run's went on: resumed inside an epoch, or with persistent workers; not a plain ``DataLoader``, whose
    workers ``plain_loaders`` watches and names where they drew. Returns those whose workers drew from their
    global streams before the point, as their watch saw (``watched``, the checkpoint's record), and those whose
    workers drew only from a generator their dataset holds where its state does not go back into them (it does
    with the loader's state, inside an epoch). Without a record, one whose dataset has no state of its own
    (taken to hold its streams: ``StatefulDataLoader`` saves it per worker) is in the first."""
    listed: list[Any] = cast(Any, watched) if isinstance(watched, list) else []
    streams: list[str] = []
    held: list[str] = []
    for index, loader in enumerate(train_loaders(trainer)):
        if plain_loader(loader):
            continue
        workers = int(getattr(loader, "num_workers", 0) or 0)
        persistent = bool(getattr(loader, "persistent_workers", False))
        dataset = getattr(loader, "dataset", None)
        if workers <= 0 or not (inside_epoch or persistent):
            continue
        own_state = callable(getattr(dataset, "state_dict", None)) and callable(
            getattr(dataset, "load_state_dict", None)
        )
        kind = f"{type(loader).__module__}.{type(loader).__qualname__}"
        name = f"loader {index} ({kind}, num_workers={workers}{', persistent_workers=True' if persistent else ''})"
        flags: Any = listed[index] if index < len(listed) else None
        if isinstance(flags, list):
            if flags[0]:
                streams.append(name)
            elif flags[1] and not (own_state and inside_epoch):
                held.append(name)
        elif not own_state:
            streams.append(name)
    return streams, held
