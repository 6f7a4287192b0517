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
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import torch
from torch.utils.data import DataLoader, IterableDataset

from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance
from lightning_step_types._lightning.random_state import GlobalStreams, StreamsState

__all__ = [
    "IteratorEvents",
    "around_first_index_draw",
    "base_seed_source",
    "WorkerDraws",
    "combined_mode",
    "dataset_state",
    "follow_loader_iterators",
    "iterable_loader",
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
        ``_reset``): nothing of it has drawn yet. Returns the generator a fresh iterator draws its workers'
        base seed from in place of ``loader.generator`` (or torch's global one), or None."""

    def first_draw(self, loader: Any, iterator: Any, draw: Callable[[], Any]) -> Any:
        """The pass's first index draw (``_next_index``): calls ``draw()`` (what torch draws) and returns
        what it returns (``StopIteration`` goes through)."""

    def made(self, loader: Any, iterator: Any, draws: WorkerDraws | None) -> None:
        """Right after it was made or run again; ``draws``: its workers' watch (None in the main process)."""


def follow_loader_iterators(loader: Any, events: IteratorEvents) -> None:
    """Make each of the loader's iterators through ``events`` (see the module docstring), from now until
    `stop_following_loader_iterators`. A persistent iterator made before is followed from its next pass."""

    def get_iterator() -> Any:
        kind: Any = _SINGLE_PROCESS if loader.num_workers == 0 else _MULTI_PROCESS
        if loader.num_workers:
            loader.check_worker_number_rationality()
        iterator = kind.__new__(kind)
        _before_first_draw(loader, iterator, events)  # `__init__` keeps instance attributes
        base_seed_from = events.making(loader, iterator, True)
        draws = WorkerDraws(loader) if loader.num_workers else None
        original = (loader.collate_fn, loader.worker_init_fn, loader.generator)
        if draws is not None:  # read by `_MultiProcessingDataLoaderIter.__init__`, handed to each worker
            loader.collate_fn, loader.worker_init_fn = draws.collate, draws.init
        if base_seed_from is not None:  # `_BaseDataLoaderIter.__init__` draws the base seed from it
            loader.generator = base_seed_from
        try:
            kind.__init__(iterator, loader)
        finally:
            loader.collate_fn, loader.worker_init_fn, loader.generator = original
        if loader.persistent_workers and loader.num_workers:
            _follow_passes(loader, iterator, events, draws)
        events.made(loader, iterator, draws)
        return iterator

    put_on_instance(loader, "_get_iterator", get_iterator)
    kept = persistent_iterator(loader)
    if kept is not None:  # made before this fit: its workers were not watched
        _follow_passes(loader, kept, events, None)


def stop_following_loader_iterators(loader: Any) -> None:
    take_off_instance(loader, "_get_iterator")
    kept = persistent_iterator(loader)
    if kept is not None:
        take_off_instance(kept, "_reset")
        if "_next_index" in vars(kept):
            del kept._next_index


def persistent_iterator(loader: Any) -> Any:
    """The iterator a loader with persistent workers keeps between passes (``DataLoader._iterator``), or None."""
    return getattr(loader, "_iterator", None)


def _follow_passes(loader: Any, iterator: Any, events: IteratorEvents, draws: WorkerDraws | None) -> None:
    """Each later pass of a persistent iterator (``DataLoader.__iter__`` calls ``self._iterator._reset(self)``)."""
    kind: Any = type(cast(object, iterator))

    def reset(loader_now: Any, first_iter: bool = False) -> None:
        _before_first_draw(loader, iterator, events)
        events.making(loader, iterator, False)
        kind._reset(iterator, loader_now, first_iter)
        events.made(loader, iterator, draws)

    put_on_instance(iterator, "_reset", reset)


def _before_first_draw(loader: Any, iterator: Any, events: IteratorEvents) -> None:
    """The pass's first ``_next_index()`` through ``events.first_draw``."""
    around_first_index_draw(iterator, lambda draw: events.first_draw(loader, iterator, draw))


def around_first_index_draw(iterator: Any, around: Callable[[Callable[[], Any]], Any]) -> None:
    """A loader iterator's next index draw (``_BaseDataLoaderIter._next_index``, torch's or torchdata's,
    looked up on the instance) as ``around(draw)``, once: the instance attribute goes, and the class's
    method runs from then on (nothing per batch)."""

    def first_index() -> Any:
        del iterator._next_index
        return around(iterator._next_index)

    iterator._next_index = first_index


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


def dataset_state(loader: Any, iterator: Any) -> tuple[str, Any] | None:
    """``("iterator" | "dataset", its state_dict())`` for a single-process ``IterableDataset`` with a
    state of its own (`_state_holder`), None elsewhere."""
    if int(getattr(loader, "num_workers", 0)) or not iterable_loader(loader):
        return None
    holder = _state_holder(loader, iterator)
    if holder is None:
        return None
    return ("dataset" if holder is loader.dataset else "iterator", holder.state_dict())


def load_dataset_state(loader: Any, iterator: Any, held_by: str, state: Any) -> None:
    """Load a state `dataset_state` read: into the dataset before ``iterator`` is made (``iterator``
    None; torchdata's order), into the iterator ``iter(dataset)`` returned once it is."""
    if held_by == "dataset" and iterator is None:
        loader.dataset.load_state_dict(state)
    elif held_by == "iterator" and iterator is not None:
        holder = _state_holder(loader, iterator)
        if holder is not None and holder is not loader.dataset:
            holder.load_state_dict(state)


def before_each_fetch(iterator: Any, call: Callable[[int], None]) -> None:
    """``call(fetches so far)`` before each fetch of a single-process iterator: ``_next_data`` (looked
    up on the instance by ``_BaseDataLoaderIter.__next__``), and its ``_num_yielded``."""
    kind: Any = type(cast(object, iterator))

    def next_data() -> Any:
        call(iterator._num_yielded)
        return kind._next_data(iterator)

    iterator._next_data = next_data


def streams_moved(before: StreamsState, after: StreamsState) -> bool:
    """Whether the global streams moved between two ``GlobalStreams.read``s."""
    torch_a, python_a, gauss_a, numpy_a, cuda_a = before
    torch_b, python_b, gauss_b, numpy_b, cuda_b = after
    if not torch.equal(torch_a, torch_b) or python_a != python_b or gauss_a != gauss_b:
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


class WorkerDraws:
    """Whether a loader's worker processes drew from their global random streams while they loaded.

    Torch seeds each worker's streams (torch's, numpy's, Python's) from the iterator's base seed and the
    worker's id when it starts; no checkpoint holds where they are later. ``init`` (the worker's
    ``worker_init_fn``, the loader's own first) reads them once the worker's start is done; ``collate``
    (the worker's ``collate_fn``, the loader's own first) compares them after each batch it loads with
    that first read, until they differ once: then the worker's flag, in memory the processes share, is
    set. The main process reads the flags (``drew``). A worker compares its streams (about 2 µs) after
    each batch it loads until they first move; the main process does nothing per batch.
    """

    def __init__(self, loader: Any) -> None:
        self.init_fn: Callable[[int], None] | None = loader.worker_init_fn
        self.collate_fn: Callable[[Any], Any] = loader.collate_fn
        flags: Any = torch.zeros(int(loader.num_workers), dtype=torch.uint8)
        self.flags: torch.Tensor = flags.share_memory_()  # untyped in torch's stubs
        self._reader: GlobalStreams | None = None  # in a worker, from its start on
        self._start: StreamsState | None = None
        self._worker = -1

    def init(self, worker_id: int) -> None:
        if self.init_fn is not None:
            self.init_fn(worker_id)
        self._reader = GlobalStreams()
        self._start, self._worker = self._reader.read(), worker_id

    def collate(self, data: Any) -> Any:
        batch = self.collate_fn(data)
        reader, start = self._reader, self._start
        if reader is not None and start is not None and streams_moved(start, reader.read()):
            self.flags[self._worker] = 1
            self._start = None  # once is enough
        return batch

    def drew(self) -> bool:
        return bool(self.flags.any())

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_reader": None, "_start": None}


def worker_draws(draws: WorkerDraws | None) -> bool:
    return draws is not None and draws.drew()


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
