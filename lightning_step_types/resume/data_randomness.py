"""The training loaders' random generators, resumed as the uninterrupted run drew from them.

A training loader draws its order from ``torch.Generator``s: its sampler's (``RandomSampler``,
``SubsetRandomSampler``, ``WeightedRandomSampler``, torchdata's ``RandomSampler``, a batch sampler's
own) and its own ``generator=`` (a ``DataLoader`` iterator draws its workers' base seed from it as
it is made). No checkpoint of Lightning's holds them: a run resumed in epoch 1 finds them where the
script seeded them, and draws epoch 0's order again. And torchdata's ``RandomSampler``, resumed
mid-epoch, puts its generator back to where it was before its permutation: the loader's own draw
after it (``StatefulDataLoader(shuffle=True, generator=g)`` shares ``g``) is undone, and the next
epoch's order differs.

A followed fit keeps each generator's state from before and after each epoch's iterator is made, at
the epoch's start only (nothing per batch). A checkpoint carries those of the epoch it resumes in, each
process's own in its part of the running state (`DataRandomness` is a source of state, ``resume/source.py``;
a checkpoint of an earlier release holds rank 0's under ``checkpoint["lightning_step_types"]["generators"]``,
which every process reads). The resumed fit puts the states from
before back right before its first iterator is made, and once it is made (at its first epoch's
``on_run_start``), the states from after into the generators of torchdata's ``RandomSampler``, which
draws its whole permutation there. A plain ``DataLoader``'s passes are ``plain_loaders``': it is left
out here.

A sampler that draws from torch's global random state (no ``generator=``) draws at the epoch's first
fetch; torchdata's restore inside an epoch draws it again, as it makes the iterator or at its first
index draw. Where a ``StatefulDataLoader`` is the only training loader and loads in the main process,
a followed fit reads the global streams right before each epoch's first fetch (once per epoch), a
checkpoint carries them (``"first_fetch"``), and the restore draws from them: the uninterrupted order.
Any other restore is watched: where it drew from the global streams other than the uninterrupted run
did (a sampler that draws as its iterator is made, which torchdata makes twice; one of several
loaders in the main process), one ``StepResultWarning`` names it (under DDP, ``data_order`` names the
samplers Lightning wraps). So does a resume inside an epoch where torchdata's
``RandomSampler(replacement=True)`` shares the loader's ``generator=``: torchdata's restore redraws
its samples without the loader's draw that came between them.

The loaders Lightning combines: in ``CombinedLoader(mode="max_size")`` a loader that ran out before
the save is loaded as ended, not started over (``_lightning.data.load_finished_loaders_as_ended``).
In ``mode="max_size_cycle"`` a loader that ran out starts a new pass inside the epoch, and a sampler
drawing from a generator draws that pass's order then. Where the loaders' states are read back from
their counts (``_lightning.data.counted_loaders``), ``LoaderPasses`` keeps each generator's state from
right before and right after each loader's latest iterators were made, and a checkpoint inside such a
pass carries those in place of the epoch's start's: the resumed run draws the pass's order again as
the uninterrupted one drew it. Elsewhere (a loader's state read before each fetch, a checkpoint of an
earlier release), a resume inside such a pass is named in one ``StepResultWarning`` (a loader without
a random order resumes exactly).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

import torch

from lightning_step_types._lightning.data import (
    around_epoch_iterator,
    around_loader_iterator,
    epoch_iterator_made_again,
    epoch_of_iterator,
    load_finished_loaders_as_ended,
    loader_states_to_load,
    make_epoch_iterator_again,
    stop_around_epoch_iterator,
    stop_around_loader_iterator,
    torchdata_loader,
    train_iterator,
    train_loaders,
    train_loaders_requested_again_at,
    wrapped_sampler,
)
from lightning_step_types._lightning.fit_loop import batch_counters, training_batches
from lightning_step_types._lightning.plain_loader import around_first_index_draw, plain_loader, streams_moved
from lightning_step_types._lightning.random_state import (
    GlobalStreams,
    StreamsState,
    lightning_states,
    set_global_states,
    torch_state,
)
from lightning_step_types.resume.data_order import also_before_train_iterator, order_named, saved_part, where_resumed
from lightning_step_types.resume.messages import (
    CHECKPOINT_KEY,
    Problem,
    cycled_order_problem,
    restored_order_problem,
    shared_generator_problem,
    warn,
)
from lightning_step_types.resume.saved_streams import loaded_streams, saved_streams
from lightning_step_types.resume.source import Loading, Moment, Saving

__all__ = [
    "GENERATORS",
    "DataRandomness",
    "LoaderPasses",
    "PassStates",
    "loader_generators",
    "remake_epoch_iterator_when",
    "watch_epoch_iterators",
]

GENERATORS = "generators"

# where a loader keeps a generator, as attribute paths from the loader ("wrapped": the sampler inside
# Lightning's DistributedSamplerWrapper, under DDP)
_OWNERS = ("", "sampler", "sampler.wrapped", "batch_sampler", "batch_sampler.sampler", "batch_sampler.sampler.wrapped")

States = list[dict[str, torch.Tensor]]  # per training loader: a generator's first path -> its state


class _Generator(NamedTuple):
    path: str  # the first path it is found at
    generator: torch.Generator
    drawn_with_iterator: bool  # torchdata's RandomSampler's: its permutation is drawn as the iterator is made


def _owner(loader: Any, path: str) -> Any:
    owner = loader
    for name in path.split(".") if path else ():
        owner = wrapped_sampler(owner) if name == "wrapped" else getattr(owner, name, None)
        if owner is None:
            return None
    return owner


def _draws_with_iterator(owner: Any) -> bool:
    kind: Any = owner.__class__
    return (
        kind.__module__.startswith("torchdata.stateful_dataloader")
        and kind.__name__ == "RandomSampler"
        and not getattr(owner, "replacement", True)
    )


def _generators(loader: Any) -> list[_Generator]:
    found: dict[int, _Generator] = {}
    for path in _OWNERS:
        owner = _owner(loader, path)
        generator = getattr(owner, "generator", None)
        if not isinstance(generator, torch.Generator):
            continue
        known = found.get(id(generator))
        eager = _draws_with_iterator(owner) or (known is not None and known.drawn_with_iterator)
        found[id(generator)] = _Generator(known.path if known else path, generator, eager)
    return list(found.values())


def loader_generators(loader: Any) -> list[tuple[str, torch.Generator]]:
    """Each ``torch.Generator`` the loader draws from (its own ``generator=``, its samplers'), with the first path it is at."""
    return [(entry.path, entry.generator) for entry in _generators(loader)]


def _global_samplers(loader: Any) -> list[str]:
    """The loader's samplers that draw from torch's global random state: ``generator`` None, no state_dict()."""
    names: list[str] = []
    for path in ("sampler", "batch_sampler", "batch_sampler.sampler"):
        owner = _owner(loader, path)
        if owner is None or getattr(owner, "generator", False) is not None:
            continue
        if callable(getattr(owner, "state_dict", None)) and callable(getattr(owner, "load_state_dict", None)):
            continue
        name = f"{type(owner).__module__}.{type(owner).__qualname__}"
        if name not in names:
            names.append(name)
    return names


def _sharing_samplers(loader: Any) -> list[str]:
    """torchdata's ``RandomSampler(replacement=True)`` drawing from the loader's own ``generator=``.

    Resumed inside an epoch, torchdata's restore redraws its samples from the shared generator without
    the loader's draw that came between them in the run that saved: the rest of the epoch differs.
    """
    own = getattr(loader, "generator", None)
    if not isinstance(own, torch.Generator):
        return []
    names: list[str] = []
    seen: set[int] = set()  # a loader's sampler is its batch sampler's too
    for path in ("sampler", "batch_sampler.sampler"):
        owner = _owner(loader, path)
        kind: Any = owner.__class__
        if (
            id(owner) not in seen
            and kind.__module__.startswith("torchdata.stateful_dataloader")
            and kind.__name__ == "RandomSampler"
            and getattr(owner, "replacement", False)
            and getattr(owner, "generator", None) is own
        ):
            seen.add(id(owner))
            names.append(f"{kind.__module__}.{kind.__qualname__}(replacement=True)")
    return names


def _random_order(loader: Any) -> list[str]:
    """The loader's samplers that draw their order from a generator (their own, or torch's global one)."""
    names: list[str] = []
    for path in _OWNERS[1:]:  # not the loader's own generator=: alone, it draws its workers' seeds only
        owner = _owner(loader, path)
        name = f"{type(owner).__module__}.{type(owner).__qualname__}"
        if isinstance(getattr(owner, "generator", None), torch.Generator) and name not in names:
            names.append(name)
    return names + [name for name in _global_samplers(loader) if name not in names]


def _drawn_at_making(loader: Any) -> bool:
    """Whether the loader's order may be drawn as its iterator is made, not at its first ``next()``: a
    sampler whose ``__iter__`` is not a generator function runs (and draws) at ``iter()``, which torch's
    and torchdata's ``BatchSampler`` call on their sampler as their own iteration starts (torchdata's as its
    iterator is made); a batch sampler of the user's own is read the same way."""
    batch_sampler: Any = getattr(loader, "batch_sampler", None)
    kind: Any = type(cast(object, batch_sampler))
    known = batch_sampler is None or kind.__module__.split(".")[0] in ("torch", "torchdata")
    owner: Any = getattr(loader, "sampler", None) if known else batch_sampler
    iterate: Any = getattr(type(cast(object, owner)), "__iter__", None)
    return owner is not None and not inspect.isgeneratorfunction(iterate)


def _first_fetch_loader(trainer: Any) -> Any:
    """The training loader whose order a restore draws again from the streams of the epoch's first fetch, or
    None: the only training loader, a stateful one (torchdata's ``StatefulDataLoader``) loading in the main
    process, whose samplers draw at their first ``next()``. It draws its order at the epoch's first fetch;
    torchdata's restore inside the epoch draws it as the iterator is made, when it fast-forwards."""
    loaders = train_loaders(trainer)
    if len(loaders) != 1:
        return None
    loader = loaders[0]
    if not torchdata_loader(loader) or int(getattr(loader, "num_workers", 0) or 0) or _drawn_at_making(loader):
        return None
    return loader


def _drawn_at_first_fetch(
    randomness: DataRandomness, trainer: Any, loader: Any, first_fetch: Mapping[str, Any], make: Callable[[], Any]
) -> Any:
    """Make a restored stateful loader's iterator with its order drawn again from the streams of the epoch's
    first fetch, as the uninterrupted run drew it: torchdata's restore draws it as it makes the iterator (a
    stateful batch sampler's iterator made again) or at its first index draw (an index sampler it
    fast-forwards with ``itertools.islice``), the resumed run's first fetch. The workers' base seed is drawn
    aside (a restored iterator takes the saved one). Once."""
    stop_around_loader_iterator(loader)
    own = loader.generator
    streams = loaded_streams(first_fetch)
    set_global_states(trainer, streams)
    reader = randomness.reader = randomness.reader or GlobalStreams()
    before = reader.read()
    loader.generator = torch.Generator()
    try:
        iterator = make()
    finally:
        loader.generator = own
    if not streams_moved(before, reader.read()):  # nothing drawn yet: at the first index draw

        def first_draw(draw: Callable[[], Any]) -> Any:
            now = reader.read()
            set_global_states(trainer, streams)
            try:
                return draw()
            finally:
                set_global_states(trainer, lightning_states(now))  # the point's, put back at the first batch

        around_first_index_draw(iterator, first_draw)
    return iterator


def _watched_restore(randomness: DataRandomness, loader: Any, index: int, make: Callable[[], Any]) -> Any:
    """Make a restored stateful loader's iterator, and name it where its order was drawn again from the global
    streams in a way the uninterrupted run did not draw it: as its iterator was made (the streams moved
    beyond its workers' base seed, `_moved_beyond_base_seed`) by a sampler that draws there (torchdata's
    restore makes its iterator twice), or, for one of several loaders loading in the main process, at all
    (they draw at the epoch's first fetch, one after another). Once."""
    stop_around_loader_iterator(loader)
    reader = randomness.reader = randomness.reader or GlobalStreams()
    before = reader.read()
    iterator = make()
    kind: Any = type(cast(object, loader))
    name = f"loader {index} ({kind.__module__}.{kind.__qualname__})"
    in_main = not int(getattr(loader, "num_workers", 0) or 0)
    if _moved_beyond_base_seed(before, reader.read(), loader):
        if _drawn_at_making(loader) or in_main:
            randomness.restored_again.append(name)
    elif in_main:

        def first_draw(draw: Callable[[], Any]) -> Any:
            drawn_from = reader.read()
            try:
                return draw()
            finally:
                if streams_moved(drawn_from, reader.read()):
                    randomness.restored_again.append(name)
                randomness.awaited_draws -= 1
                if not randomness.awaited_draws:  # the fetch's last loader: one warning for all of them
                    randomness.name_restored()

        randomness.awaited_draws += 1
        around_first_index_draw(iterator, first_draw)
    return iterator


def _moved_beyond_base_seed(before: StreamsState, after: StreamsState, loader: Any) -> bool:
    """Whether the global streams moved between two reads by more than an iterator's making draws: its
    workers' base seed (``torch.empty((), dtype=torch.int64).random_(generator=loader.generator)``, from
    torch's global generator without one)."""
    expected = before
    if not isinstance(getattr(loader, "generator", None), torch.Generator):
        seeded = torch.Generator()
        seeded.set_state(torch_state(before[0]))
        torch.empty((), dtype=torch.int64).random_(generator=seeded)
        expected = (seeded.get_state(), *before[1:])
    return streams_moved(expected, after)


def _loader_states(loader: Any) -> dict[str, torch.Tensor]:
    return {entry.path: entry.generator.get_state() for entry in _generators(loader)}


def _states(trainer: Any) -> States:
    return [_loader_states(loader) for loader in train_loaders(trainer)]


class PassStates(NamedTuple):
    """A loader's generators' states right before a pass's iterator was made, and right after."""

    before: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]


class LoaderPasses:
    """The passes ``CombinedLoader(mode="max_size_cycle")`` starts inside an epoch for loaders that ran out.

    Each new iterator of the followed loaders is made through ``_made``, which takes the loader's
    generators' states right before and right after: a sampler draws its order as its iterator is
    made (torchdata's ``RandomSampler``) or at its first sample (torch's), and torch's ``RandomSampler``
    draws once more as a pass runs out, before the next pass's iterator is made. Nothing runs per
    batch. The latest two iterators per loader are kept: a resume point is at most one fetch behind.
    """

    def __init__(self, loaders: list[Any]) -> None:
        self.loaders = loaders
        self.made: list[list[tuple[Any, PassStates]]] = [[] for _ in loaders]
        self.followed: list[Any] = []
        for index, loader in enumerate(loaders):
            if _generators(loader):  # a loader without generators draws no order: its passes resume exactly
                around_loader_iterator(loader, functools.partial(self._made, index))
                self.followed.append(loader)

    def _made(self, index: int, make: Callable[[], Any]) -> Any:
        loader = self.loaders[index]
        before = _loader_states(loader)
        iterator = make()
        made = self.made[index]
        made.append((iterator, PassStates(before, _loader_states(loader))))
        del made[:-2]
        return iterator

    def at(self, counts: tuple[tuple[Any, int, bool], ...], cycled: list[bool]) -> list[PassStates | None]:
        """For a resume point's iterators (``loader_counts`` before its fetch) and which loaders had started
        a new pass there (``cycled_loaders``): each such loader's pass states, else None (the epoch's hold)."""
        return [
            next((states for made, states in self.made[index] if made is iterator), None) if again else None
            for index, ((iterator, _, _), again) in enumerate(zip(counts, cycled))
        ]

    def stop(self) -> None:
        for loader in self.followed:
            stop_around_loader_iterator(loader)


class DataRandomness:
    """A followed fit's training generators, and what a resumed fit puts back: a source of state."""

    key = GENERATORS
    reads_each_batch = False

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.before: dict[int, States] = {}  # epoch -> the states before its iterator was made
        self.after: dict[int, States] = {}  # epoch -> the states once it was made
        self.first_epoch: int | None = None  # the epoch of the iterator `setup_data` made, until its on_run_start
        self.loaded: Mapping[str, Any] | None = None  # a resumed fit's saved entry
        # a resumed fit's module, point and which loaders had started a new pass there, to name at its setup
        self.cycled: tuple[Any, str, list[bool]] | None = None
        # the epoch a resumed fit started in, and which of its loaders were put back to a pass's states
        self.resumed_epoch: int | None = None
        self.loaded_passes: list[bool] = []
        # called before each epoch loop's start (with whether an iterator is made there); what each returns is
        # called with the epoch where it made one
        self.watchers: list[Callable[[bool], Callable[[int], None]]] = []
        # called before each epoch loop's start: whether the epoch's iterator is to be made again there
        self.remakers: list[Callable[[], bool]] = []
        # epoch -> the global streams at its first fetch, where a stateful loader draws its order from them there
        self.first_fetch: dict[int, dict[str, Any]] = {}
        self.reader: GlobalStreams | None = None
        # a resumed fit's stateful loaders whose restore drew their order again from the global streams
        self.restored_again: list[str] = []
        self.awaited_draws: int = 0  # of those, the ones whose first index draw is still to come
        self.named: tuple[Any, str] | None = None  # a resumed fit's module and point, as its warnings name them

    def before_first_iterator(self) -> None:
        """In `setup_data`, before the fit's first iterator is made and the loaders' saved states load."""
        trainer = self.trainer()
        if trainer is None:
            return
        epoch = epoch_of_iterator(trainer)
        load_finished_loaders_as_ended(trainer)
        if self.cycled is not None:
            self._name_cycled(trainer, *self.cycled)
            self.cycled = None
        if self.loaded is not None and int(self.loaded["epoch"]) == epoch:
            self._put_back(trainer, "before", eager_only=False)
            first_fetch: Any = self.loaded.get("first_fetch")
            if isinstance(first_fetch, Mapping):
                self.first_fetch = {epoch: cast("dict[str, Any]", first_fetch)}
        if self.named is not None and loader_states_to_load(trainer):  # a restore inside the epoch
            only = _first_fetch_loader(trainer)
            for index, loader in enumerate(train_loaders(trainer)):
                if loader is only and epoch in self.first_fetch:
                    restore = functools.partial(_drawn_at_first_fetch, self, trainer, loader, self.first_fetch[epoch])
                elif torchdata_loader(loader):
                    restore = functools.partial(_watched_restore, self, loader, index)
                else:
                    continue
                around_loader_iterator(loader, restore)
        if epoch_iterator_made_again(trainer):
            # loaders made anew at an epoch's start (reload_dataloaders_every_n_epochs): the epoch trains from
            # the iterator its loop makes next, which `epoch_starts` records; a save before that (in the
            # on_train_epoch_start hooks) takes the generators as they are then
            return
        self.before = {epoch: _states(trainer)}
        self.after = {}
        self.first_epoch = epoch

    def name_restored(self) -> None:
        """One warning (global rank 0) for the stateful loaders whose restore drew their order again from
        other global streams than the uninterrupted run's (`_watched_restore`)."""
        trainer = self.trainer()
        if (
            self.restored_again
            and self.named is not None
            and int(getattr(trainer, "global_rank", 0)) == 0
            and not order_named(trainer)  # the same order, named already by the sampler's warning
        ):
            warn(self.named[0], self.named[1], restored_order_problem(self.restored_again))
        self.restored_again = []

    def _name_cycled(self, trainer: Any, module: Any, where: str, cycled: list[bool]) -> None:
        loaders = train_loaders(trainer)
        if len(cycled) != len(loaders):
            return
        drawn = [
            f"loader {index} ({', '.join(names)})"
            for index, (loader, again) in enumerate(zip(loaders, cycled))
            if again and (names := _random_order(loader))
        ]
        if drawn:
            warn(module, where, cycled_order_problem(drawn))

    def epoch_starts(self, run: Callable[[], None]) -> None:
        """An epoch loop's ``on_run_start``: it makes the epoch's iterator (the fit's first epoch has one already)."""
        trainer = self.trainer()
        if trainer is None:
            run()
            return
        if not self.awaited_draws or self.first_epoch is None:  # past the resumed epoch: whatever drew
            self.name_restored()
            self.awaited_draws = 0
        if self.first_epoch is not None:  # the iterator `setup_data` made is the one this epoch trains from
            if self.loaded is not None and int(self.loaded["epoch"]) == self.first_epoch:
                if batch_counters(trainer).completed >= training_batches(trainer):
                    # resumed at the epoch's end: its iterator yields nothing, the next epoch's draws
                    # start where the saving run's generators were
                    self._put_back(trainer, "saved", eager_only=False)
                else:
                    self._put_back(trainer, "after", eager_only=True)
                # the epoch's record is the saving run's: a generator its sampler draws from lazily has drawn
                # already where the restore fast-forwarded the iterator
                self.after[self.first_epoch] = self._loaded_states(trainer, "after")
            else:
                self.after[self.first_epoch] = _states(trainer)
            self.first_epoch, self.loaded = None, None
        again = [remake() for remake in self.remakers]  # each one asked: each puts back what it keeps
        epoch, iterator, before = epoch_of_iterator(trainer), train_iterator(trainer), _states(trainer)
        made = [watch(any(again) or epoch_iterator_made_again(trainer)) for watch in self.watchers]
        if any(again):
            make_epoch_iterator_again(trainer)
        run()
        # the first fetch comes next (`_TrainingEpochLoop.run` calls `advance` right after): a resumed
        # epoch's first fetch is not its first (its streams came with the checkpoint)
        if epoch not in self.first_fetch and _first_fetch_loader(trainer) is not None:
            reader = self.reader = self.reader or GlobalStreams()
            self.first_fetch = {e: f for e, f in self.first_fetch.items() if e >= epoch - 1} | {
                epoch: saved_streams(reader.read())
            }
        if train_iterator(trainer) is not iterator:
            for call in made:
                call(epoch)
            self.before = {e: s for e, s in self.before.items() if e >= epoch - 1} | {epoch: before}
            self.after = {e: s for e, s in self.after.items() if e >= epoch - 1} | {epoch: _states(trainer)}

    def _loaded_states(self, trainer: Any, moment: str) -> States:
        """The generators' states now, with the loaded entry's from ``moment`` in place of those it holds."""
        loaded = cast("Mapping[str, Any]", self.loaded)
        states = _states(trainer)
        for now, saved in zip(states, loaded["loaders"]):
            for path, entry in cast("Mapping[str, Mapping[str, Any]]", saved).items():
                state = entry.get(moment)
                if path in now and state is not None:
                    now[path] = state
        return states

    def _put_back(self, trainer: Any, moment: str, eager_only: bool) -> None:
        loaded = cast("Mapping[str, Any]", self.loaded)
        for loader, saved in zip(train_loaders(trainer), loaded["loaders"]):
            generators = {entry.path: entry for entry in _generators(loader)}
            for path, states in cast("Mapping[str, Mapping[str, Any]]", saved).items():
                entry, state = generators.get(path), states.get(moment)
                if entry is not None and state is not None and (entry.drawn_with_iterator or not eager_only):
                    entry.generator.set_state(state)

    def saved(self, epoch: int, passes: list[PassStates | None] | None) -> dict[str, Any] | None:
        """The generators' entry for a point in ``epoch``; ``passes``: the point's loaders' pass states
        where a loader is in a pass ``max_size_cycle`` started inside the epoch (``LoaderPasses.at``)."""
        trainer = self.trainer()
        if trainer is None:
            return None
        if epoch not in self.before and train_loaders_requested_again_at(trainer, epoch):
            # saved before the epoch's loaders are asked for anew (reload_dataloaders_every_n_epochs): their
            # generators are the ones `train_dataloader()` makes then, not these
            return None
        now = _states(trainer)  # before the epoch's iterator, where it is not made yet
        before, after = self.before.get(epoch, now), self.after.get(epoch, [])
        # a resumed fit's epoch: the states put back for its loaders were a pass's where the checkpoint said so
        kept = self.loaded_passes if epoch == self.resumed_epoch else []
        in_pass: list[bool] = []
        loaders: list[dict[str, Any]] = []
        for index, states in enumerate(now):
            before_states = before[index] if index < len(before) else {}
            after_states = after[index] if index < len(after) else {}
            pass_states = passes[index] if passes is not None and index < len(passes) else None
            if pass_states is not None:
                before_states, after_states = pass_states
            in_pass.append(pass_states is not None or (index < len(kept) and kept[index]))
            loaders.append(
                {
                    path: {"before": before_states.get(path, state), "after": after_states.get(path), "saved": state}
                    for path, state in states.items()
                }
            )
        # a plain DataLoader draws its order again from the states `plain_loaders` saves for its pass; a
        # restored stateful one from the streams of the epoch's first fetch, or is named where it draws
        # again from other ones (`_watched_restore`)
        first_fetch = self.first_fetch.get(epoch) if _first_fetch_loader(trainer) is not None else None
        if not any(now) and first_fetch is None:
            return None
        sharing = [
            name for loader in train_loaders(trainer) if not plain_loader(loader) for name in _sharing_samplers(loader)
        ]
        return {
            "epoch": epoch,
            "loaders": loaders,
            "sharing": sharing,
            "passes": in_pass,
            "first_fetch": first_fetch,
        }

    def follow(self, trainer: Any) -> None:
        """At a followed fit's setup (after ``DataOrder.follow``)."""
        previous = _FITS.pop(trainer, None)
        if previous is not None:
            previous.stop()
        _FITS[trainer] = self
        also_before_train_iterator(trainer, self.before_first_iterator)
        around_epoch_iterator(trainer, self.epoch_starts)

    # --- the protocol (resume/source.py) -----------------------------------------------------------------

    def mark(self, moment: Moment) -> None:
        pass

    def batch_start(self) -> None:
        pass

    def encode(self, saving: Saving) -> dict[str, Any] | None:
        """The training generators' states for the epoch the checkpoint resumes in, with the states of the passes
        its loaders are in, where ``max_size_cycle`` started them (``saving.passes``)."""
        return self.saved(saving.point.epoch, saving.passes)

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        """Keep the generator states for the resumed fit (this process's own, or an earlier release's rank 0's);
        warn (global rank 0) for a sampler that shares the loader's generator, and keep the loaders with a random
        order that had started a new pass (``loading.cycled``) to name once they exist."""
        trainer, module = self.trainer(), loading.module()
        if trainer is None:
            return
        ours = saved_part(checkpoint, CHECKPOINT_KEY)
        saved = cast("Mapping[str, Any]", entry) if isinstance(entry, Mapping) else saved_part(ours, GENERATORS)
        point = saved_part(saved_part(ours, "epoch_state"), "point")
        self.named = (module, where_resumed(point))
        if "loaders" not in saved:
            return
        self.loaded = saved
        # which loaders' states are a pass's (a checkpoint of an earlier release has none: each is named below)
        flags: list[Any] = list(saved.get("passes") or [])
        in_pass = [bool(flag) for flag in flags]
        self.resumed_epoch, self.loaded_passes = int(saved["epoch"]), in_pass
        if int(getattr(trainer, "global_rank", 0)) != 0:
            return
        sharing: list[str] = list(saved.get("sharing") or [])
        if sharing and point.get("kind") in ("batch", "batch_end"):  # torchdata restores a sampler inside an epoch only
            warn(module, where_resumed(point), shared_generator_problem(sharing))
        # a loader in a pass the checkpoint holds no states of (named once the loaders exist, at `setup_data`)
        cycled = loading.cycled
        unsaved = [again and not (index < len(in_pass) and in_pass[index]) for index, again in enumerate(cycled or [])]
        if any(unsaved):
            self.cycled = (module, where_resumed(point), unsaved)

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        return []  # the states go back as the point's epoch makes its iterator (`before_first_iterator`)

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        pass

    def stop(self) -> None:
        trainer = self.trainer()
        if trainer is not None:
            if _FITS.get(trainer) is self:
                del _FITS[trainer]
            stop_around_epoch_iterator(trainer)


# the followed fit's DataRandomness of each Trainer: for the sources that watch its epochs' iterators too
_FITS: weakref.WeakKeyDictionary[Any, DataRandomness] = weakref.WeakKeyDictionary()


def watch_epoch_iterators(trainer: Any, watch: Callable[[bool], Callable[[int], None]]) -> None:
    """In a followed fit, call ``watch(made)`` before each epoch loop's start (``made``: whether an iterator
    is made there), and what it returns with the epoch where that start made the epoch's training iterator."""
    randomness = _FITS.get(trainer)
    if randomness is not None:
        randomness.watchers.append(watch)


def remake_epoch_iterator_when(trainer: Any, remake: Callable[[], bool]) -> None:
    """In a followed fit, ask ``remake()`` before each epoch loop's start whether the epoch's training iterator
    is to be made again there (a fit resumed at an epoch's start, whose iterator was made before the
    on_train_epoch_start hooks drew from the streams it draws from)."""
    randomness = _FITS.get(trainer)
    if randomness is not None:
        randomness.remakers.append(remake)
