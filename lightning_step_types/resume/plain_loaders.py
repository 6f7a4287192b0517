"""Plain ``DataLoader``s resumed inside an epoch: the same batches as the uninterrupted run, from the next one.

Lightning resumes a training loader inside an epoch only where the loader has a ``state_dict()``
(torchdata's ``StatefulDataLoader``); a plain ``torch.utils.data.DataLoader`` starts the epoch's
iterator again from its first batch, so the resumed epoch trains its first batches twice and never
its last ones. Here such a loader resumes as Hugging Face's ``Trainer`` resumes one
(``accelerate.skip_first_batches``), at the index level:

- **the same order.** A loader's order is drawn from its samplers' ``torch.Generator``s, its own
  ``generator=`` and the global random streams (torch's, numpy's, Python's): some of it when the
  epoch's iterator is made (its workers' base seed; a sampler whose ``__iter__`` draws at once), the
  rest at its first index draw (torch's ``RandomSampler``, ``WeightedRandomSampler``,
  ``SubsetRandomSampler``, Lightning's ``DistributedSamplerWrapper``), which a single-process loader
  makes at the epoch's first fetch. A followed fit reads those states at both moments, once per
  iterator (per epoch, and per pass ``CombinedLoader(mode="max_size_cycle")`` starts); a checkpoint
  carries the ones of the pass its point is in. The resumed fit makes that pass's iterator again with
  them in place, so it draws the same order;
- **no work for a skipped batch.** Before its first index batch, the resumed iterator draws the
  index batches the saving run consumed and drops them: no ``__getitem__``, no collate. The next
  index batch goes to the worker that loaded it in the uninterrupted run (batch ``n`` to worker
  ``n % num_workers``), and the workers' base seed is the uninterrupted run's (drawn from the same
  state). An ``IterableDataset`` has no index: with a state of its own (``state_dict()`` on the dataset
  or on the iterator ``iter(dataset)`` returns, in the main process), that state, read before each
  fetch, is loaded back; without one, the epoch is replayed, its consumed batches loaded again and
  dropped, as torchdata does (``benchmarks/README.md`` measures both).

The count of consumed batches is Lightning's own progress counter at the save (the point's batch);
each loader's share of it follows from the combined mode and the loaders' lengths. Nothing runs per
batch, except before each fetch of a single-process ``IterableDataset`` with a state of its own.

What stays inexact is named in one ``StepResultWarning`` at resume: worker processes that drew from
their random streams while loading the consumed batches (each worker's streams start again where
torch seeds them; a watch in each worker tells whether they moved), a single-process
``IterableDataset`` that draws from the global streams while it is iterated (the replay draws
without the training steps between its batches), and a training loader that is neither a plain
``DataLoader`` nor one with a ``state_dict()`` (a list of batches, a ``DataLoader`` subclass that makes
its own iterators), which Lightning starts again from its first batch. Lightning's own "not
resumable" warning is kept from the resumed epoch where every training loader resumes exactly.

The checkpoint entry is per process (``resume/rank_exchange.py`` brings each one to the checkpoint),
under ``"plain_loaders"`` in the process's running state.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from lightning_step_types._lightning.data import epoch_iterator_made_again, epoch_of_iterator, train_loaders
from lightning_step_types._lightning.plain_loader import (
    WorkerDraws,
    base_seed_source,
    before_each_fetch,
    combined_mode,
    dataset_state,
    follow_loader_iterators,
    iterable_loader,
    load_dataset_state,
    loader_length,
    persistent_iterator,
    plain_loader,
    quiet_not_resumable,
    replay_batches,
    rotate_workers,
    set_yielded,
    skip_index_batches,
    stop_following_loader_iterators,
    stop_quieting,
    streams_moved,
)
from lightning_step_types._lightning.random_state import (
    GlobalStreams,
    StreamsState,
    lightning_states,
    set_global_states,
)
from lightning_step_types.resume.data_order import also_before_train_iterator
from lightning_step_types.resume.data_randomness import loader_generators, watch_epoch_iterators
from lightning_step_types.resume.messages import (
    Problem,
    replayed_stream_problem,
    unpositioned_loader_problem,
    warn,
    worker_draws_problem,
)
from lightning_step_types.resume.saved_streams import loaded_streams, saved_streams
from lightning_step_types.resume.source import Loading, Saving
from lightning_step_types.resume.source import Moment as FitMoment

__all__ = ["PLAIN_LOADERS", "PlainLoaders"]

PLAIN_LOADERS = "plain_loaders"

# the global streams and the loader's generators' states at one moment, as a checkpoint holds them:
# {"streams": ``saved_streams``' layout, "generators": {path: state}}
Moment = dict[str, Any]


@dataclass
class _Pass:
    """One pass of a followed loader's iterator (a new iterator, or a persistent one run again)."""

    iterator: weakref.ReferenceType[Any]
    marker: int  # the followed fit's count of epoch iterators when it was made
    number: int  # the pass's number within them (max_size_cycle starts passes inside an epoch)
    runs_before: int  # passes this (persistent) iterator ran before this one
    making: Moment
    base_seed_from: torch.Tensor | None  # a persistent iterator: the state its workers' base seed was drawn from
    first: Moment | None = None  # set at its first index draw
    draws: WorkerDraws | None = None
    drew_before: bool = False  # a resumed pass: its workers drew in the batches the saving run loaded before it
    fetch_states: dict[int, tuple[str, Any]] = field(default_factory=dict[int, tuple[str, Any]])


@dataclass
class _Plan:
    """What a resumed fit does to a loader's first iterator: the saved pass made again, positioned."""

    skip: int
    making: Moment | None
    first: Moment | None
    dataset: tuple[str, Any] | None  # an IterableDataset's own state before the point's fetch
    drew: bool
    runs_before: int
    base_seed_from: torch.Tensor | None  # a persistent iterator's (its pass is made by a fresh one here)


class _Followed:
    """One plain training loader of a followed fit: its passes, and a resumed fit's plan for it."""

    def __init__(self, owner: PlainLoaders, loader: Any) -> None:
        self.owner = owner
        self.loader = loader
        self.passes: list[_Pass] = []  # the latest few
        self.marker = -1
        self.number = -1
        self.runs: dict[int, int] = {}  # id(persistent iterator) -> its passes so far
        self.plan: _Plan | None = None
        self.first_streams: StreamsState | None = None  # a replayed pass's streams at its first draw
        follow_loader_iterators(loader, self)

    # --- IteratorEvents --------------------------------------------------------------------------

    def making(self, loader: Any, iterator: Any, fresh: bool) -> torch.Generator | None:
        owner = self.owner
        plan = self.plan
        if plan is not None and plan.making is not None:
            owner.set_moment(loader, plan.making)
        if plan is not None and plan.dataset is not None:
            load_dataset_state(loader, None, *plan.dataset)
        number = self.number + 1 if self.marker == owner.marker else 0
        self.marker, self.number = owner.marker, number
        runs = self.runs.get(id(iterator), 0)
        if fresh and plan is not None:  # the saved pass's: the uninterrupted run's persistent iterator ran these
            runs = max(runs, plan.runs_before)
        persistent = bool(int(loader.num_workers) and loader.persistent_workers)
        earlier = self._pass_of(iterator) if not fresh else None
        base_seed_from = earlier.base_seed_from if earlier is not None else None
        if fresh and persistent:
            base_seed_from = base_seed_source(loader)
        making = plan.making if plan is not None and plan.making is not None else owner.moment(loader)
        self.passes.append(_Pass(weakref.ref(iterator), owner.marker, number, runs, making, base_seed_from))
        if earlier is not None:  # the same workers as its earlier passes
            self.passes[-1].draws = earlier.draws
        del self.passes[:-3]
        if persistent:
            self.runs[id(iterator)] = runs + 1
        if fresh and plan is not None and plan.base_seed_from is not None:
            # the uninterrupted run ran its persistent iterator again here: no base seed drawn, workers
            # seeded from the first one's
            self.passes[-1].base_seed_from = plan.base_seed_from
            seeded = torch.Generator()
            seeded.set_state(plan.base_seed_from)
            return seeded
        return None

    def first_draw(self, loader: Any, iterator: Any, draw: Callable[[], Any]) -> Any:
        found = self._pass_of(iterator)
        plan = self.plan
        if plan is None:
            if found is not None:
                found.first = self.owner.moment(loader)
            return draw()
        if found is not None:  # a later save in this pass resumes from the same states
            # (none where the saving run's pass had not drawn: a point between passes, this is its first draw)
            found.first = plan.first if plan.first is not None else self.owner.moment(loader)
            found.drew_before = plan.drew
            found.runs_before = max(found.runs_before, plan.runs_before)
        owner = self.owner
        now = owner.reader.read()
        if plan.first is not None:
            owner.set_moment(loader, plan.first)
        if iterable_loader(loader):  # replayed once made, from these states (`made`)
            self.first_streams = owner.reader.read()
            return draw()
        self.plan = None
        skipped = skip_index_batches(iterator, plan.skip)  # drawn from the pass's states, and dropped
        rotate_workers(iterator, plan.skip)
        if int(loader.num_workers):
            # drawn as the iterator is made, where the uninterrupted run drew them too: what is made
            # after it (the next loader's iterator) draws from the streams as they are now
            return draw()
        # a single-process loader draws at the point's fetch, after its streams were put back (the
        # resumed run's first batch): where batches were skipped, the point's index batch is drawn from
        # those streams, as in the uninterrupted run; else this is the pass's first draw itself
        if skipped:
            owner.set_streams(now)
        return draw()

    def made(self, loader: Any, iterator: Any, draws: WorkerDraws | None) -> None:
        found = self._pass_of(iterator)
        if found is not None:
            found.draws = draws
        plan = self.plan
        if plan is not None and iterable_loader(loader):
            self._replay(loader, iterator, plan)
            self.plan = None
        if found is not None and dataset_state(loader, iterator) is not None:
            pass_states = found.fetch_states

            def keep(fetched: int) -> None:
                held = dataset_state(loader, iterator)
                if held is not None:
                    pass_states[fetched] = held
                    for old in [number for number in pass_states if number < fetched - 2]:
                        del pass_states[old]

            before_each_fetch(iterator, keep)

    def _replay(self, loader: Any, iterator: Any, plan: _Plan) -> None:
        if plan.dataset is not None:  # resumed from the dataset's own state: nothing to replay
            load_dataset_state(loader, iterator, *plan.dataset)
            set_yielded(iterator, plan.skip)
            return
        if plan.skip == 0:
            return
        if int(loader.num_workers):
            replay_batches(iterator, plan.skip)
            return
        reader = self.owner.reader
        replay_batches(iterator, 1)  # its first draw puts the pass's states back (`first_draw`)
        after_first = reader.read()
        replay_batches(iterator, plan.skip - 1)
        after = reader.read()
        # draws at the first fetch alone (a shuffle buffer seeded from the streams) are drawn again exactly;
        # draws at later fetches were made between training steps in the uninterrupted run
        first = self.first_streams if self.first_streams is not None else after_first
        moved = streams_moved(after_first, after) if plan.skip > 1 else streams_moved(first, after_first)
        if moved:
            self.owner.problems.append(replayed_stream_problem(self.owner.name(loader)))

    def _pass_of(self, iterator: Any) -> _Pass | None:
        for found in reversed(self.passes):
            if found.iterator() is iterator:
                return found
        return None

    def _base_seed_from(self, iterator: Any) -> torch.Tensor | None:
        found = self._pass_of(iterator)
        return found.base_seed_from if found is not None else None

    def _earlier_draws(self, iterator: Any) -> WorkerDraws | None:
        for found in self.passes:
            if found.iterator() is iterator and found.draws is not None:
                return found.draws
        return None

    # --- saving --------------------------------------------------------------------------------------

    def saved(
        self, share: tuple[int, int] | None, epoch_start: bool, ending: int | None, made: bool = False
    ) -> dict[str, Any] | None:
        """The entry for a point whose pass and batches consumed in it are ``share`` (None: the point is
        at an epoch's start, where only a persistent iterator's next pass needs one, or at the end of epoch
        ``ending``, every batch of its pass consumed); ``made``: an epoch's start whose iterator, the one the
        epoch trains from, was made already (the fit's first epoch: `FitLoop.setup_data` made it before the
        on_train_epoch_start hooks)."""
        loader = self.loader
        if share is None:
            kept = persistent_iterator(loader)
            current = self._pass_of(kept) if kept is not None and ending is not None else None
            if current is not None:
                # the resumed fit's first iterator stands for this pass (it trains none of it): its next pass
                # (the next epoch's) is the persistent iterator's next run, its workers seeded as this one's
                return {
                    "skip": 0,
                    "making": None,
                    "first": None,
                    "dataset": None,
                    "drew": worker_drew(self._earlier_draws(kept)),
                    "runs_before": current.runs_before,
                    "base_seed_from": current.base_seed_from,
                    "ending": ending,
                }
            if not epoch_start or kept is None or self.runs.get(id(kept), 0) == 0:
                # between passes: the generators a map-style dataset holds as they are now, or an IterableDataset's
                # own state (a position an epoch cut short by limit_train_batches leaves for the next pass), none
                # of the next pass's fetches made (main process only: `dataset_state`); not the state of the
                # iterator iter(dataset) returned, which the next pass makes anew
                held = dataset_state(loader, None)
                if held is None or held[0] == "iterator":
                    return None
                return {
                    "skip": 0,
                    "making": None,
                    "first": None,
                    "dataset": list(held),
                    "drew": False,
                    "runs_before": 0,
                    "base_seed_from": None,
                }
            # its next pass draws no base seed in the uninterrupted run; a new iterator would. Where the epoch's
            # pass was made already, that pass is the next one: the passes before it are its own count, and a
            # loader with workers drew its first index batch as it was made (the streams then, not now)
            made_pass = self._pass_of(kept) if made else None
            first = made_pass.first if made_pass is not None else None
            return {
                "skip": 0,
                "making": None,
                "first": first if first is not None else self.owner.moment(loader),
                "dataset": None,
                "drew": worker_drew(self._earlier_draws(kept)),
                "runs_before": made_pass.runs_before if made_pass is not None else self.runs.get(id(kept), 0),
                "base_seed_from": self._base_seed_from(kept),
            }
        number, skip = share
        found = next((p for p in reversed(self.passes) if p.marker == self.owner.marker and p.number == number), None)
        if found is None:
            return {"missing": f"pass {number} of the epoch was not followed"}
        held = found.fetch_states.get(skip) if found.fetch_states else None
        current = found.iterator()
        if held is None and found.fetch_states and max(found.fetch_states) == skip - 1 and current is not None:
            held = dataset_state(loader, current)  # its fetch not begun (a sized loader is not fetched ahead): as now
        if found.fetch_states and held is None:
            return {"missing": f"its dataset's state before batch {skip} was not read"}
        return {
            "skip": skip,
            "making": found.making,
            "first": found.first,
            "dataset": list(held) if held is not None else None,
            "drew": found.drew_before or worker_drew(found.draws),
            "runs_before": found.runs_before,
            "base_seed_from": found.base_seed_from if found.runs_before else None,
        }

    def stop(self) -> None:
        stop_following_loader_iterators(self.loader)


def _last_epoch(trainer: Any, epoch: int) -> bool:
    max_epochs: Any = trainer.max_epochs
    return max_epochs is not None and int(max_epochs) >= 0 and epoch + 1 >= int(max_epochs)


def worker_drew(draws: WorkerDraws | None) -> bool:
    return draws is not None and draws.drew()


class PlainLoaders:
    """One followed fit's plain training loaders: a source of state for exact resume (see the module
    docstring; ``resume/source.py``). ``follow`` at the fit's setup; ``encode`` at a save; ``load`` at a load,
    which acts when the resumed fit makes its training iterators. Per batch: nothing (the states are read as
    each iterator is made and at its first index draw)."""

    key = PLAIN_LOADERS
    reads_each_batch = False

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.reader: GlobalStreams = GlobalStreams()
        self.marker: int = 0  # epoch iterators made so far
        self.followed: dict[int, _Followed] = {}  # id(loader) -> its follower
        self.loaded: Mapping[str, Any] | None = None  # a resumed fit's entry, until its loaders exist
        self.module: Any = None
        self.where: str = ""
        self.positioned: tuple[list[bool] | None, int] | None = None  # which cycled, batches before
        self.iterator_epoch: int | None = None  # the epoch that trains from the last iterator made (None: not known)
        self.problems: list[Problem] = []

    # --- the source protocol (resume/source.py), beside following, saving and resuming below ------------

    def mark(self, moment: FitMoment) -> None:
        pass

    def batch_start(self) -> None:
        pass

    def encode(self, saving: Saving) -> dict[str, Any] | None:
        return self.saved(saving.point.kind, saving.batches_done, saving.last_batch, saving.point.epoch)

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        return []

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        if batch:
            self.first_batch()

    # --- following ---------------------------------------------------------------------------------

    def follow(self, trainer: Any) -> None:
        """At the fit's setup, after ``RandomStreams.follow`` (a resumed fit's streams are back first)."""
        also_before_train_iterator(trainer, self._before_train_iterator)
        watch_epoch_iterators(trainer, self._before_epoch_loop)

    def _before_train_iterator(self) -> None:
        """In `FitLoop.setup_data`, right before it makes the training iterator (its loaders may be new)."""
        trainer = self.trainer()
        if trainer is None:
            return
        self.marker += 1
        # the epoch trains from this iterator unless its loop makes one of its own (loaders made anew)
        self.iterator_epoch = None if epoch_iterator_made_again(trainer) else epoch_of_iterator(trainer)
        loaders = train_loaders(trainer)
        current = {id(loader) for loader in loaders}
        for key in [key for key in self.followed if key not in current]:
            self.followed.pop(key).stop()
        for loader in loaders:
            if plain_loader(loader) and id(loader) not in self.followed:
                self.followed[id(loader)] = _Followed(self, loader)
        if self.loaded is not None:
            self._position(trainer, loaders, self.loaded)
            self.loaded = None

    def _before_epoch_loop(self, made_again: bool) -> Any:
        if made_again:
            self.marker += 1

        def made(epoch: int) -> None:
            self.iterator_epoch = epoch

        return made

    def moment(self, loader: Any) -> Moment:
        generators = {path: generator.get_state() for path, generator in loader_generators(loader)}
        return {"streams": saved_streams(self.reader.read()), "generators": generators}

    def set_moment(self, loader: Any, moment: Moment) -> None:
        trainer = self.trainer()
        if trainer is not None:
            set_global_states(trainer, loaded_streams(moment["streams"]))
        generators: Mapping[str, torch.Tensor] = moment["generators"]
        for path, generator in loader_generators(loader):
            state = generators.get(path)
            if state is not None:
                generator.set_state(state)

    def set_streams(self, streams: StreamsState) -> None:
        trainer = self.trainer()
        if trainer is not None:
            set_global_states(trainer, lightning_states(streams))

    def name(self, loader: Any) -> str:
        loaders = train_loaders(self.trainer())
        index = next((i for i, found in enumerate(loaders) if found is loader), 0)
        kind: Any = type(cast(object, loader))
        workers = int(getattr(loader, "num_workers", 0) or 0)
        persistent = ", persistent_workers=True" if getattr(loader, "persistent_workers", False) and workers else ""
        shown = f", num_workers={workers}{persistent}" if workers else ""
        return f"loader {index} ({kind.__module__}.{kind.__qualname__}{shown})"

    # --- saving --------------------------------------------------------------------------------------

    def saved(self, kind: str, batches: int, last: bool, epoch: int) -> dict[str, Any] | None:
        """This process's entry for a point of ``kind`` in ``epoch`` with ``batches`` of its epoch's batches
        consumed before its next one (``last``: none comes after them)."""
        trainer = self.trainer()
        if trainer is None or not self.followed and not _unpositioned(train_loaders(trainer)):
            return None
        loaders = train_loaders(trainer)
        inside = kind in ("batch", "batch_end") and not last
        shares = _shares(combined_mode(trainer), [loader_length(loader) for loader in loaders], batches)
        entries: list[dict[str, Any] | None] = []
        for index, loader in enumerate(loaders):
            followed = self.followed.get(id(loader))
            if followed is None:
                entries.append({"unpositioned": True} if inside and not _stateful(loader) else None)
                continue
            share = shares[index] if inside else None
            if inside and share is None:
                entries.append({"missing": "it started a pass of unknown length inside the epoch"})
                continue
            ending = int(trainer.current_epoch) if kind in ("batch_end", "epoch_end") and not inside else None
            made = kind == "epoch" and self.iterator_epoch == epoch
            entries.append(followed.saved(share, kind == "epoch", ending, made))
        if not any(entry is not None for entry in entries):
            return None
        cycled = [share is not None and share[0] > 0 for share in shares] if inside else None
        return {"batches": batches if inside else 0, "cycled": cycled, "loaders": entries}

    # --- resuming ----------------------------------------------------------------------------------

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        """Keep a checkpoint's entry for the resumed fit's loaders (made next, in ``setup_data``)."""
        self.loaded = cast("Mapping[str, Any]", entry) if isinstance(entry, Mapping) else None
        self.module, self.where = loading.module(), loading.where

    def _position(self, trainer: Any, loaders: list[Any], entry: Mapping[str, Any]) -> None:
        saved: list[Any] = list(entry.get("loaders") or [])
        if len(saved) != len(loaders):
            return
        names: list[str] = []
        unpositioned: list[str] = []
        exact = True
        for loader, found in zip(loaders, saved):
            if found is None:
                continue
            part = cast("Mapping[str, Any]", found)
            followed = self.followed.get(id(loader))
            if "unpositioned" in part or "missing" in part or followed is None:
                unpositioned.append(self.name(loader) + (f": {part['missing']}" if "missing" in part else ""))
                exact = False
                continue
            followed.plan = _Plan(
                skip=int(part["skip"]),
                making=part["making"],
                first=part["first"],
                dataset=cast("tuple[str, Any]", tuple(part["dataset"])) if part.get("dataset") else None,
                drew=bool(part["drew"]),
                runs_before=int(part["runs_before"]),
                base_seed_from=part.get("base_seed_from"),
            )
            restarted = followed.plan.skip > 0 and not iterable_loader(loader) or followed.plan.runs_before > 0
            # at the end of the fit's last epoch no pass follows: the workers' streams draw nothing more
            ending: Any = part.get("ending")
            restarted = restarted and (ending is None or not _last_epoch(trainer, int(ending)))
            if followed.plan.drew and int(loader.num_workers) and restarted:
                names.append(self.name(loader))
        batches = int(entry.get("batches") or 0)
        if batches:
            cycled: Any = entry.get("cycled")
            listed: list[Any] = cast(Any, cycled) if isinstance(cycled, list) else []
            flags = [bool(flag) for flag in listed] if isinstance(cycled, list) else None
            self.positioned = (flags, batches)
            if exact:
                quiet_not_resumable(trainer)
        if int(getattr(trainer, "global_rank", 0)) != 0:
            return
        if names:
            warn(self.module, self.where, worker_draws_problem(names))
        if unpositioned:
            warn(self.module, self.where, unpositioned_loader_problem(unpositioned))

    def first_batch(self) -> None:
        """At the resumed fit's first batch: name what its loaders' making found inexact."""
        trainer = self.trainer()
        if self.problems and trainer is not None and int(getattr(trainer, "global_rank", 0)) == 0:
            for problem in self.problems:
                warn(self.module, self.where, problem)
        self.problems = []

    def stop(self) -> None:
        trainer = self.trainer()
        if trainer is not None:
            stop_quieting(trainer)
        for followed in self.followed.values():
            followed.stop()
        self.followed = {}


def _stateful(loader: Any) -> bool:
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _unpositioned(loaders: list[Any]) -> bool:
    return any(not plain_loader(loader) and not _stateful(loader) for loader in loaders)


def _shares(mode: str, lengths: list[int | None], batches: int) -> list[tuple[int, int] | None]:
    """Each loader's pass and the batches consumed in it once ``batches`` combined batches were fetched:
    ``min_size`` (each loader one batch per batch), ``max_size`` (a loader that ran out stays out),
    ``max_size_cycle`` (one that ran out starts a new pass at the next fetch). None where a loader
    without a length would have to have started a new pass."""
    shares: list[tuple[int, int] | None] = []
    for length in lengths:
        if length is None or length <= 0:
            shares.append((0, batches) if mode != "max_size_cycle" or len(lengths) == 1 else None)
        elif mode == "max_size":
            shares.append((0, min(batches, length)))
        elif mode == "max_size_cycle" and batches > length:
            number = (batches - 1) // length
            shares.append((number, batches - number * length))
        else:
            shares.append((0, min(batches, length)))
    return shares
