"""Plain torch ``DataLoader``s: their iterators made to start inside an epoch, and what their making drew from.

Part of the one place where the library reads names torch (or Lightning) keeps private; each function
says which it reads and what it relies on. Checked on torch 2.13.0 and pytorch-lightning 2.6.6.

A ``DataLoader`` makes an iterator for each pass over its data: ``DataLoader.__iter__`` calls
``self._get_iterator()`` (looked up on the instance), which makes a ``_SingleProcessDataLoaderIter``
(``num_workers=0``) or a ``_MultiProcessingDataLoaderIter``; with ``persistent_workers=True`` it makes
one the first time, keeps it in ``DataLoader._iterator`` and calls its ``_reset(loader)`` (looked up
on the instance) for each pass after. Either way the iterator draws its index batches through
``self._next_index()`` (looked up on the instance: ``next(self._sampler_iter)``, where
``_BaseDataLoaderIter._reset`` put ``iter(self._index_sampler)``): a single-process iterator at each
fetch, a multi-process one ahead of the fetches, from ``_reset``'s ``_try_put_index`` calls on, each
index batch going to the next worker of ``_worker_queue_idx_cycle`` (worker 0 first). Making an
iterator also draws its workers' base seed from ``loader.generator`` or torch's global generator
(``_BaseDataLoaderIter.__init__``); a persistent iterator's ``_reset`` draws none.

``follow_loader_iterators`` makes the loader's iterators here, as ``DataLoader._get_iterator`` does,
with the library's calls around the making and before each pass's first index draw
(``IteratorEvents``), and, with worker processes, a watch on whether the workers draw at random
(``WorkerDraws``). What the loader object holds is left as the user made it: its ``collate_fn`` and
``worker_init_fn`` are the watch's only while torch's iterator reads them, and ``trainer.train_dataloader``
is the user's loader.
"""

from __future__ import annotations

import importlib
import pickle
import random
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import torch
from torch.utils.data import DataLoader, IterableDataset

from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance
from lightning_step_types._lightning.random_state import GlobalStreams, StreamsState, torch_state

__all__ = [
    "IteratorEvents",
    "around_first_index_draw",
    "base_seed_source",
    "WorkerDraws",
    "combined_mode",
    "dataset_state",
    "follow_loader_iterators",
    "held_generators",
    "iterable_loader",
    "lend_worker_draws",
    "load_dataset_state",
    "loader_length",
    "persistent_iterator",
    "plain_loader",
    "quiet_not_resumable",
    "before_each_fetch",
    "replay_batches",
    "rotate_workers",
    "set_yielded",
    "skip_index_batches",
    "stop_following_loader_iterators",
    "stop_quieting",
    "streams_moved",
    "worker_draws",
]


# torch's iterator classes (private to `torch.utils.data.dataloader`), as `DataLoader._get_iterator` makes them
_torch_dataloader: Any = importlib.import_module("torch.utils.data.dataloader")
_SINGLE_PROCESS: Any = _torch_dataloader._SingleProcessDataLoaderIter
_MULTI_PROCESS: Any = _torch_dataloader._MultiProcessingDataLoaderIter
_DATALOADER: Any = DataLoader


def plain_loader(loader: Any) -> bool:
    """A torch ``DataLoader`` whose iterators torch's own ``DataLoader._get_iterator`` makes (not a
    subclass that makes its own, as torchdata's ``StatefulDataLoader`` does), without a
    ``state_dict()`` / ``load_state_dict()`` of its own (Lightning saves and loads such a loader itself:
    ``_Stateful``)."""
    if not isinstance(loader, DataLoader):
        return False
    kind: Any = type(cast(object, loader))
    if kind._get_iterator is not _DATALOADER._get_iterator:
        return False
    found: Any = cast(Any, loader)
    return not (callable(getattr(found, "state_dict", None)) and callable(getattr(found, "load_state_dict", None)))


def iterable_loader(loader: Any) -> bool:
    """Whether the loader reads an ``IterableDataset`` (no index order: it is replayed, not skipped)."""
    return isinstance(getattr(loader, "dataset", None), IterableDataset)


def loader_length(loader: Any) -> int | None:
    """The loader's number of batches (``len(loader)``), None without one (an ``IterableDataset``'s)."""
    if iterable_loader(loader):
        return None
    try:
        return len(loader)
    except TypeError:
        return None


class IteratorEvents(Protocol):
    """What the library does around a followed loader's iterators (``follow_loader_iterators``)."""

    def making(self, loader: Any, iterator: Any, fresh: bool) -> torch.Generator | None:
        """Right before ``iterator`` is made (``fresh``), or run over the data again (persistent workers'
        ``_reset``, with the same workers): nothing of the pass has drawn yet. Returns the generator a fresh
        iterator draws its workers' base seed from in place of ``loader.generator`` (or torch's global
        one), or None."""

    def first_draw(self, loader: Any, iterator: Any, draw: Callable[[], Any]) -> Any:
        """The pass's first index draw (``_next_index``): calls ``draw()`` (what torch draws) and returns
        what it returns (``StopIteration`` goes through)."""

    def made(self, loader: Any, iterator: Any, draws: WorkerDraws | None) -> None:
        """Right after a fresh iterator was made; ``draws``: its workers' watch (None in the main process)."""


def follow_loader_iterators(loader: Any, events: IteratorEvents) -> None:
    """Make each of the loader's iterators through ``events`` (see the module docstring), from now until
    `stop_following_loader_iterators`. A persistent iterator made before is followed from its next pass.

    Torch's iterator reads what it needs of the loader as it is made (``_BaseDataLoaderIter.__init__``,
    ``_MultiProcessingDataLoaderIter.__init__``): here it reads it from `_MadeFrom`, the loader's own
    attributes but for its index sampler (a `_PassSampler`, whose passes go through ``events``), and with
    workers the watch's ``collate_fn`` and ``worker_init_fn``. The loader object is left as it is, and
    no attribute is added to the iterator (CPython specializes the attribute reads of its ``__next__``
    on the attributes its class's instances have)."""

    def get_iterator() -> Any:
        kind: Any = _SINGLE_PROCESS if loader.num_workers == 0 else _MULTI_PROCESS
        if loader.num_workers:
            loader.check_worker_number_rationality()
        iterator = kind.__new__(kind)
        passes = _PassSampler(loader, iterator, events)
        base_seed_from = events.making(loader, iterator, True)
        draws = WorkerDraws(loader) if loader.num_workers else None
        own: dict[str, Any] = {"_index_sampler": passes}
        if draws is not None:  # handed to each worker by `_MultiProcessingDataLoaderIter.__init__`
            own.update(collate_fn=draws.collate, worker_init_fn=draws.init)
        if base_seed_from is not None:  # `_BaseDataLoaderIter.__init__` draws the base seed from it
            own["generator"] = base_seed_from
        kind.__init__(iterator, _MadeFrom(loader, own))
        persistent = bool(loader.persistent_workers and loader.num_workers)
        passes.made = True
        if not persistent:  # its only pass: torch's own index sampler from now on
            iterator._index_sampler = passes.sampler
        events.made(loader, iterator, draws)
        return iterator

    put_on_instance(loader, "_get_iterator", get_iterator)
    kept = persistent_iterator(loader)
    if kept is not None and not isinstance(kept._index_sampler, _PassSampler):  # made before: followed from now
        passes = _PassSampler(loader, kept, events)
        passes.made = True
        kept._index_sampler = passes


def stop_following_loader_iterators(loader: Any) -> None:
    take_off_instance(loader, "_get_iterator")
    kept = persistent_iterator(loader)
    passes = getattr(kept, "_index_sampler", None)
    if isinstance(passes, _PassSampler):
        kept._index_sampler = passes.sampler


def persistent_iterator(loader: Any) -> Any:
    """The iterator a loader with persistent workers keeps between passes (``DataLoader._iterator``), or None."""
    return getattr(loader, "_iterator", None)


class _MadeFrom:
    """What a torch iterator reads of its loader as it is made: the loader's attributes, but ``own``'s."""

    def __init__(self, loader: Any, own: dict[str, Any]) -> None:
        self.__dict__.update(own)
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PassSampler:
    """The loader's index sampler (``DataLoader._index_sampler``) as one of its iterators sees it: each
    ``iter()`` of it starts a pass over the data (``_BaseDataLoaderIter.__init__`` and ``_reset`` call it,
    the latter for each pass of a persistent iterator), whose first index draw goes through the events."""

    def __init__(self, loader: Any, iterator: Any, events: IteratorEvents) -> None:
        self.loader, self.iterator, self.events = loader, iterator, events
        self.sampler: Any = loader._index_sampler
        self.made = False  # the iterator exists: an iter() now is a persistent iterator's next pass

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Any:
        loader, iterator, events = self.loader, self.iterator, self.events
        if self.made:  # `_reset`, right before it sends the pass's first index batches
            events.making(loader, iterator, False)
        return _FirstIndexDraw(iterator, iter(self.sampler), lambda draw: events.first_draw(loader, iterator, draw))


class _FirstIndexDraw:
    """A loader iterator's sampler iterator (``_BaseDataLoaderIter._sampler_iter``) for its first draw only:
    it puts the real one in its place and draws through ``around(draw)``; from then on torch's (or
    torchdata's) ``_next_index`` draws from the real one directly (nothing per batch)."""

    def __init__(self, iterator: Any, real: Iterator[Any], around: Callable[[Callable[[], Any]], Any]) -> None:
        self.iterator, self.real, self.around = iterator, real, around

    def __iter__(self) -> _FirstIndexDraw:
        return self

    def __next__(self) -> Any:
        self.iterator._sampler_iter = self.real
        return self.around(self._draw)

    def _draw(self) -> Any:
        return next(self.real)

    def __getattr__(self, name: str) -> Any:
        # what torchdata reads of a sampler iterator for its state (`state_dict`, `load_state_dict`: its
        # `Stateful` protocol) is the real one's, while this one stands in for it
        return getattr(self.real, name)


def around_first_index_draw(iterator: Any, around: Callable[[Callable[[], Any]], Any]) -> None:
    """A made loader iterator's next index draw (from ``_BaseDataLoaderIter._sampler_iter``, torch's or
    torchdata's) as ``around(draw)``, once."""
    iterator._sampler_iter = _FirstIndexDraw(iterator, iterator._sampler_iter, around)


def skip_index_batches(iterator: Any, count: int) -> int:
    """Draw ``count`` index batches from the iterator's sampler and drop them, as if fetched (no
    ``__getitem__``, no collate): ``_BaseDataLoaderIter._sampler_iter`` and ``_num_yielded``. Returns how
    many there were (fewer where the sampler ran out)."""
    skipped = 0
    sampler_iter = iterator._sampler_iter
    for _ in range(count):
        try:
            next(sampler_iter)
        except StopIteration:
            break
        skipped += 1
    iterator._num_yielded += skipped
    return skipped


def base_seed_source(loader: Any) -> torch.Tensor:
    """The state of the generator a fresh iterator of the loader draws its workers' base seed from
    (``_BaseDataLoaderIter.__init__``: ``loader.generator``, or torch's global one)."""
    generator = loader.generator if isinstance(loader.generator, torch.Generator) else torch.default_generator
    return generator.get_state()


def set_yielded(iterator: Any, count: int) -> None:
    """Count ``count`` batches as yielded (``_BaseDataLoaderIter._num_yielded``): an iterator that goes on
    from a dataset's own state."""
    iterator._num_yielded = count


def rotate_workers(iterator: Any, batches: int) -> None:
    """Give the next index batch to the worker that loaded batch number ``batches`` of the pass in an
    iterator that started at its first batch: ``_MultiProcessingDataLoaderIter._worker_queue_idx_cycle``
    (``itertools.cycle`` over the workers, reset to worker 0 by ``_reset``) moved on ``batches`` places."""
    workers = int(getattr(iterator, "_num_workers", 0))
    cycle = getattr(iterator, "_worker_queue_idx_cycle", None)
    if workers > 1 and cycle is not None:
        for _ in range(batches % workers):
            next(cycle)


def replay_batches(iterator: Iterator[Any], count: int) -> int:
    """Fetch ``count`` batches and drop them (an ``IterableDataset`` has no index to skip by); returns
    how many there were."""
    replayed = 0
    for _ in range(count):
        try:
            next(iterator)
        except StopIteration:
            break
        replayed += 1
    return replayed


def _state_holder(loader: Any, iterator: Any) -> Any:
    """What holds a single-process ``IterableDataset`` iterator's position, as torchdata reads it: the
    iterator ``iter(dataset)`` returned (``_SingleProcessDataLoaderIter._dataset_fetcher.dataset_iter``)
    where it has ``state_dict()`` and ``load_state_dict()``, else the dataset where it has them; None."""
    fetcher = getattr(iterator, "_dataset_fetcher", None) if iterator is not None else None
    dataset_iter = getattr(fetcher, "dataset_iter", None)
    for holder in (dataset_iter, getattr(loader, "dataset", None)):
        if callable(getattr(holder, "state_dict", None)) and callable(getattr(holder, "load_state_dict", None)):
            return holder
    return None


def held_generators(loader: Any) -> dict[str, torch.Generator]:
    """The ``torch.Generator``s a map-style dataset holds in its own attributes (augmentation drawn from them
    in ``__getitem__``), by attribute name; not one the loader or its samplers draw their order from."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None or isinstance(dataset, IterableDataset):
        return {}
    attributes: Any = getattr(dataset, "__dict__", {})
    ordering = {
        id(getattr(owner, "generator", None))
        for owner in (
            loader,
            getattr(loader, "sampler", None),
            getattr(getattr(loader, "batch_sampler", None), "sampler", None),
        )
    }
    return {
        name: value
        for name, value in cast("dict[str, Any]", attributes).items()
        if isinstance(value, torch.Generator) and id(value) not in ordering
    }


def dataset_state(loader: Any, iterator: Any) -> tuple[str, Any] | None:
    """``("iterator" | "dataset", its state_dict())`` for a single-process ``IterableDataset`` with a
    state of its own (`_state_holder`); ``("generators", name -> state)`` for a single-process map-style
    dataset holding generators of its own (`held_generators`); None elsewhere."""
    if int(getattr(loader, "num_workers", 0)):
        return None
    if not iterable_loader(loader):
        held = held_generators(loader)
        return ("generators", {name: generator.get_state() for name, generator in held.items()}) if held else None
    holder = _state_holder(loader, iterator)
    if holder is None:
        return None
    return ("dataset" if holder is loader.dataset else "iterator", holder.state_dict())


def load_dataset_state(loader: Any, iterator: Any, held_by: str, state: Any) -> None:
    """Load a state `dataset_state` read: into the dataset before ``iterator`` is made (``iterator``
    None; torchdata's order), into the iterator ``iter(dataset)`` returned once it is."""
    if held_by == "dataset" and iterator is None:
        loader.dataset.load_state_dict(state)
    elif held_by == "generators" and iterator is None:
        held = held_generators(loader)
        for name, generator_state in cast("dict[str, torch.Tensor]", state).items():
            if name in held:
                held[name].set_state(generator_state)
    elif held_by == "iterator" and iterator is not None:
        holder = _state_holder(loader, iterator)
        if holder is not None and holder is not loader.dataset:
            holder.load_state_dict(state)


def before_each_fetch(iterator: Any, call: Callable[[int], None]) -> None:
    """``call(fetches so far)`` before each fetch of a single-process iterator: its sampler iterator
    (``_BaseDataLoaderIter._sampler_iter``, drawn from right before each fetch) in a wrapper, and its
    ``_num_yielded``."""
    current = iterator._sampler_iter
    if isinstance(current, _FirstIndexDraw):  # its first draw puts the wrapped one in place
        current.real = _BeforeEachFetch(iterator, current.real, call)
    else:
        iterator._sampler_iter = _BeforeEachFetch(iterator, current, call)


class _BeforeEachFetch:
    def __init__(self, iterator: Any, real: Iterator[Any], call: Callable[[int], None]) -> None:
        self.iterator, self.real, self.call = iterator, real, call

    def __iter__(self) -> _BeforeEachFetch:
        return self

    def __next__(self) -> Any:
        self.call(self.iterator._num_yielded)
        return next(self.real)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def streams_moved(before: StreamsState, after: StreamsState) -> bool:
    """Whether the global streams moved between two ``GlobalStreams.read``s."""
    torch_a, python_a, gauss_a, numpy_a, cuda_a = before
    torch_b, python_b, gauss_b, numpy_b, cuda_b = after
    if isinstance(torch_a, bytes) and isinstance(torch_b, bytes):  # both as their engine's raw bytes
        torch_differs = torch_a != torch_b
    else:
        torch_differs = not torch.equal(torch_state(torch_a), torch_state(torch_b))
    if torch_differs or python_a != python_b or gauss_a != gauss_b:
        return True
    if numpy_a is not numpy_b and (numpy_a is None or numpy_b is None or _numpy_differs(numpy_a, numpy_b)):
        return True
    if (cuda_a is None) != (cuda_b is None):
        return True
    return cuda_a is not None and cuda_b is not None and any(not torch.equal(a, b) for a, b in zip(cuda_a, cuda_b))


def _numpy_differs(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    kind_a, key_a, *rest_a = a
    kind_b, key_b, *rest_b = b
    return kind_a != kind_b or bool((key_a != key_b).any()) or rest_a != rest_b


_STREAMS, _HELD = 1, 2  # a worker's flag: its global streams moved; else a generator its dataset holds


class WorkerDraws:
    """Whether a loader's worker processes drew from their global random streams, or from a random
    generator their dataset holds, while they loaded.

    Torch seeds each worker's streams (torch's, numpy's, Python's) from the iterator's base seed and the
    worker's id when it starts; no checkpoint holds where they are later. A generator the dataset holds
    as an attribute (``self.generator = torch.Generator()``) is a copy in each worker, sent from the main
    process as the worker starts: its draws move the copy only, which no checkpoint holds either.
    ``init`` (the worker's ``worker_init_fn``, the loader's own first) reads both once the worker's start
    is done (the dataset through ``torch.utils.data.get_worker_info()``); ``collate`` (the worker's
    ``collate_fn``, the loader's own first) compares them after each batch it loads with that first read,
    until they differ once: then the worker's flag, in memory the processes share, is set (to say which
    moved: its streams, or a generator its dataset holds, after which the streams are still compared). The
    main process reads the flags (``drew``, ``drew_from_streams``). A worker compares its streams (about 2 µs)
    after each batch it loads until they first move; the main process does nothing per batch.
    """

    def __init__(self, loader: Any) -> None:
        self.init_fn: Callable[[int], None] | None = loader.worker_init_fn
        self.collate_fn: Callable[[Any], Any] = loader.collate_fn
        flags: Any = torch.zeros(int(loader.num_workers), dtype=torch.uint8)
        self.flags: torch.Tensor = flags.share_memory_()  # untyped in torch's stubs
        self._reader: GlobalStreams | None = None  # in a worker, from its start on
        self._start: StreamsState | None = None
        self._dataset: Any = None  # the worker's copy of the dataset
        self._held: list[bytes] = []  # the states of the generators it holds, at the worker's start
        self._worker = -1

    def init(self, worker_id: int) -> None:
        if self.init_fn is not None:
            self.init_fn(worker_id)
        self._reader = GlobalStreams()
        self._start, self._worker = self._reader.read(), worker_id
        info: Any = torch.utils.data.get_worker_info()
        self._dataset = info.dataset if info is not None else None
        self._held = held_generator_states(self._dataset)

    def collate(self, data: Any) -> Any:
        batch = self.collate_fn(data)
        reader, start = self._reader, self._start
        if reader is not None and start is not None:
            if streams_moved(start, reader.read()):
                self.flags[self._worker] = _STREAMS
                self._start = None  # once is enough
            elif self._held and held_generator_states(self._dataset) != self._held:
                self.flags[self._worker] = _HELD
                self._held = []  # the streams are still watched
        return batch

    def drew(self) -> bool:
        return bool(self.flags.any())

    def drew_from_streams(self) -> bool:
        """Whether a worker's global random streams moved (not only a generator its dataset holds)."""
        return bool((self.flags == _STREAMS).any())

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_reader": None, "_start": None, "_dataset": None, "_held": []}


def held_generator_states(dataset: Any) -> list[bytes]:
    """The states of the random generators ``dataset`` holds as its own attributes, as bytes: torch's
    ``Generator``, Python's ``random.Random``, numpy's ``Generator`` and ``RandomState``."""
    attributes: Any = getattr(dataset, "__dict__", None)
    if not isinstance(attributes, dict):
        return []
    states: list[bytes] = []
    for value in cast("dict[str, Any]", attributes).values():
        held: Any = value
        if isinstance(held, torch.Generator):
            states.append(held.get_state().numpy().tobytes())
        elif isinstance(held, random.Random):
            if not isinstance(held, random.SystemRandom):  # no state
                states.append(pickle.dumps(held.getstate()))
        elif type(held).__module__.startswith("numpy.random") and hasattr(held, "bit_generator"):
            states.append(pickle.dumps(held.bit_generator.state))
        elif type(held).__module__.startswith("numpy.random") and callable(getattr(held, "get_state", None)):
            states.append(pickle.dumps(held.get_state()))
    return states


def worker_draws(draws: WorkerDraws | None) -> bool:
    return draws is not None and draws.drew()


def lend_worker_draws(loader: Any, draws: WorkerDraws) -> Callable[[], None]:
    """Give the loader the watch's ``worker_init_fn`` and ``collate_fn`` while its next iterator is made (one
    that makes its own, as torchdata's ``StatefulDataLoader`` does: ``_BaseDataLoaderIter.__init__`` reads them
    from the loader and hands them to each worker); returns what puts the user's back, which the caller calls
    right after the making."""
    init_fn, collate_fn = loader.worker_init_fn, loader.collate_fn
    loader.worker_init_fn, loader.collate_fn = draws.init, draws.collate

    def put_back() -> None:
        if loader.worker_init_fn == draws.init and loader.collate_fn == draws.collate:
            loader.worker_init_fn, loader.collate_fn = init_fn, collate_fn

    return put_back


def combined_mode(trainer: Any) -> str:
    """The training ``CombinedLoader``'s mode (``CombinedLoader._mode``, private; ``FitLoop._combined_loader``)."""
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    return str(getattr(combined, "_mode", "max_size_cycle"))


# `_TrainingEpochLoop.reset`, in a fit restarted inside an epoch from a checkpoint, warns through
# `rank_zero_warn(..., category=PossibleUserWarning)` when a training loader is not `_Stateful` and the
# checkpoint's `global_step` is not at an epoch's end. Checked on pytorch-lightning 2.5.0 and 2.6.6.
_NOT_RESUMABLE = re.escape("You're resuming from a checkpoint that ended before the epoch ended and your dataloader is")


def quiet_not_resumable(trainer: Any) -> None:
    """Keep Lightning's "your dataloader is not resumable" warning from the resumed epoch's start
    (`_TrainingEpochLoop.reset`, looked up on the instance by `_Loop.run`), once: the library resumes
    the loaders exactly."""
    epoch_loop = trainer.fit_loop.epoch_loop
    category: Any = _possible_user_warning(trainer)
    original: Callable[[], None] = epoch_loop.reset

    def reset() -> None:
        take_off_instance(epoch_loop, "reset")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NOT_RESUMABLE, category=category)
            original()

    put_on_instance(epoch_loop, "reset", reset)


def stop_quieting(trainer: Any) -> None:
    take_off_instance(trainer.fit_loop.epoch_loop, "reset")


def _possible_user_warning(trainer: Any) -> Any:
    """``PossibleUserWarning`` of the Trainer's own flavour (``utilities/warnings.py``, public)."""
    package = type(trainer).__module__.split(".trainer")[0]
    return importlib.import_module(f"{package}.utilities.warnings").PossibleUserWarning
