"""The training data: combined loaders, their saved states, samplers and the order they draw.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, cast

import torch

from lightning_step_types._lightning.fit_loop import nested_dict
from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance

__all__ = [
    "DatasetStates",
    "around_epoch_iterator",
    "around_next_validation_setup",
    "before_train_iterator",
    "before_train_loaders_request",
    "before_wrapped_draw",
    "combined_train_loader",
    "continue_loader_iterator",
    "counted_loader_states",
    "counted_loaders",
    "cycled_loaders",
    "dataset_states",
    "epoch_iterator_made_again",
    "epoch_of_iterator",
    "fetched_batch_size",
    "first_iterator_fetches_nothing",
    "holds_dataset_state",
    "load_dataset_states",
    "load_finished_loaders_as_ended",
    "loaded_dataset_states",
    "loaded_loader_states",
    "loader_states_to_load",
    "loader_count_offset",
    "loader_counts",
    "loader_samplers",
    "loaders_made_at",
    "loaders_reload_every",
    "make_epoch_iterator_again",
    "make_epoch_iterator_again_at_loop_start",
    "make_train_loaders_again",
    "rewindable_loader",
    "rewound_loader_states",
    "saved_inside_epoch",
    "set_train_sampler_epochs",
    "set_validation_loaders_made_at",
    "stateful_loader_states",
    "stop_around_epoch_iterator",
    "stop_around_next_validation_setup",
    "stop_before_train_iterator",
    "stop_before_train_loaders_request",
    "stop_before_wrapped_draw",
    "train_iterator",
    "torchdata_loader",
    "train_loaders",
    "train_loaders_requested_again_at",
    "validation_loaders_made_again",
    "validation_loaders_made_at",
    "wrapped_sampler",
]


# `FitLoop.setup_data` builds the epoch's iterator (`iter(self._data_fetcher)`, right after
# `self._load_combined_loader_states()` puts a stateful loader's saved state back) before
# `FitLoop.on_advance_start` calls `_set_sampler_epoch` for the epoch; a resumed fit uses that
# iterator (`_TrainingEpochLoop.on_run_start` makes no other while `fit_loop.is_resuming`). A
# `DistributedSampler` draws its permutation from ``seed + epoch`` when its iterator is made, which a
# `StatefulDataLoader` does at once (its `BatchSampler` iterator, and its fast-forward to the saved
# batch), as do a loader's worker processes: the resumed epoch is drawn with epoch 0's permutation.
# Lightning issue 21938 (PRs 21941 and 21960). Checked on pytorch-lightning 2.5.0 and 2.6.6.

# A checkpoint saved inside a batch resumes from the loaders' state before that batch's fetch. Where
# the training data comes from one torchdata `StatefulDataLoader` that loads in this process from a
# map-style dataset without a state of its own, that state is counters only: how many batches the
# loader's iterator yielded, and how many samples its sampler iterator drew, under a random
# sampler's generator state from the iterator's start. Those counters are read back at the save, as
# they were before the batch's fetch, instead of reading the loader's state before every fetch.
# Checked on torchdata 0.11.0: `_StatefulSingleProcessDataLoaderIter.state_dict` (the keys below;
# `_num_yielded` counts completed fetches, `_sampler_iter_yielded` the index draws, which run ahead
# of it while a fetch is under way), `_BatchSamplerIterator.state_dict` (``samples_yielded``, and its
# sampler's or sampler iterator's state), `_StatefulRandomSamplerIterator.state_dict` (``yielded``,
# ``generator``: the state the iterator drew its order from) and `StatefulDistributedSampler.state_dict`
# (``yielded``). Several such loaders combined are rewound each from its own count, taken after each
# fetch, as each moves on by its own in a `CombinedLoader` mode. Any other layout is not rewound: the
# loaders' states are then read before each fetch.

# `_TrainingEpochLoop.on_run_start` makes each epoch's training iterator after the fit's first
# (`iter(data_fetcher)`, which `FitLoop.setup_data` made): `_DataFetcher.__iter__` calls
# `iter(combined_loader)`, and `CombinedLoader.__iter__` binds a new `_ModeIterator` to
# `CombinedLoader._iterator` (private). A `DataLoader` iterator draws its sampler's order from the
# sampler's generator as it is made (or at its first batch), and its workers' base seed from
# ``loader.generator`` right after. Checked on pytorch-lightning 2.5.0 and 2.6.6, torchdata 0.11.0.


def fetched_batch_size(trainer: Any) -> int | None:
    """The size of the batch a ``training_step(self, dataloader_iter)`` fetched last, or None.

    `_DataLoaderIterDataFetcher._batch` (private; `FitLoop._data_fetcher`) holds the last batch the
    step's iterator yielded; its size is read as Lightning reads a batch's (`extract_batch_size`, public,
    in the Trainer's own flavour: ``utilities/data.py``), which raises where it finds no tensor.
    """
    fetcher = trainer.fit_loop._data_fetcher
    batch = getattr(fetcher, "_batch", None) if type(fetcher).__name__ == "_DataLoaderIterDataFetcher" else None
    if batch is None:
        return None
    package = type(trainer).__module__.split(".trainer")[0]  # "pytorch_lightning" or "lightning.pytorch"
    extract_batch_size: Any = importlib.import_module(f"{package}.utilities.data").extract_batch_size
    try:
        with warnings.catch_warnings():  # several sizes: Lightning's "ambiguous collection" warning, and its first size
            warnings.simplefilter("ignore")
            return int(extract_batch_size(batch))
    except Exception:  # MisconfigurationException where no tensor is found; a batch may hold anything
        return None


def stateful_loader_states(trainer: Any) -> list[dict[str, Any]] | None:
    """The training loaders' ``state_dict()``s as Lightning saves them, or None without a stateful one.

    `CombinedLoader._state_dicts` (private) is what `FitLoop.on_save_checkpoint` stores under
    ``checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]``; `FitLoop._combined_loader`
    (private) is the training `CombinedLoader`, set in `setup_data`. Lightning before 2.5 has no
    `_state_dicts` (nor resumes a loader mid-epoch): None there.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    state_dicts = getattr(loader, "_state_dicts", None)
    if state_dicts is None:
        return None
    states: list[dict[str, Any]] = state_dicts()
    return states or None


def cycled_loaders(trainer: Any) -> list[bool] | None:
    """Which training loaders of a ``"max_size_cycle"`` `CombinedLoader` ran out and started again.

    `_MaxSizeCycle._consumed` (private; `CombinedLoader._iterator`) ends the epoch once every loader
    ran out; it is in no checkpoint, so a resumed epoch would run its cycled loaders out once more.
    None for another mode, or before the epoch's iterator exists.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    consumed: Any = getattr(getattr(loader, "_iterator", None), "_consumed", None)
    if not isinstance(consumed, list) or not consumed:
        return None
    flags: list[Any] = cast(Any, consumed)
    return [bool(flag) for flag in flags]


def continue_loader_iterator(trainer: Any, consumed: list[bool] | None, batches_before: int) -> None:
    """Make the resumed epoch's `CombinedLoader` iterator (made by `FitLoop.setup_data`) go on as the
    saved one would: which loaders had cycled (`cycled_loaders`), and the index it gives each batch.

    `_ModeIterator._idx` (private) counts the batches the iterator yielded: the ``batch_idx`` that
    ``training_step(self, dataloader_iter)`` receives, and that Lightning's accumulation uses to zero
    gradients at a window's start. A restored loader's iterator counts from 0; it started
    ``batches_before`` batches into the epoch.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    iterator: Any = getattr(loader, "_iterator", None)
    if consumed and isinstance(getattr(iterator, "_consumed", None), list) and len(iterator._consumed) == len(consumed):
        # a loader without a length may have run out already, at the batch `setup_data`'s `iter()` fetches ahead
        iterator._consumed = [before or now for before, now in zip(consumed, iterator._consumed)]
    if batches_before and isinstance(getattr(iterator, "_idx", None), int):
        iterator._idx += batches_before
    # `_DataLoaderIterDataFetcher._batch_idx` (private): the index of the last fetched batch, which
    # Lightning passes on at the next batch's start (to the hooks, and to the accumulation's zero_grad)
    fetcher = trainer.fit_loop._data_fetcher
    if batches_before and type(fetcher).__name__ == "_DataLoaderIterDataFetcher":
        fetcher._batch_idx = batches_before - 1


def saved_inside_epoch(checkpoint: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's fit loop was inside an epoch (`_Loop.state_dict`'s progress counters)."""
    fit_loop = nested_dict(nested_dict(checkpoint.get("loops")).get("fit_loop"))
    epochs = nested_dict(nested_dict(fit_loop.get("epoch_progress")).get("current"))
    batches = nested_dict(nested_dict(fit_loop.get("epoch_loop.batch_progress")).get("current"))
    return bool(epochs.get("started", 0) > epochs.get("processed", 0) and batches.get("completed", 0) > 0)


def loaded_loader_states(checkpoint: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The loader states a checkpoint resumes with (written by `FitLoop.on_save_checkpoint`)."""
    loops: Any = checkpoint.get("loops") or {}
    fit_loop: Any = loops.get("fit_loop") or {}
    loop_state: Any = fit_loop.get("state_dict") or {}
    states: list[dict[str, Any]] | None = loop_state.get("combined_loader")
    return states or None


def loaded_dataset_states(states: list[dict[str, Any]] | None) -> list[Any] | None:
    """Of a checkpoint's loader states (`loaded_loader_states`), each main-process ``StatefulDataLoader``'s
    dataset state (torchdata's ``"dataset_state"`` key of `_StatefulSingleProcessDataLoaderIter.state_dict`,
    whose ``"_num_yielded"`` marks the single-process form), else None for that loader; None where none has one."""
    if not states:
        return None
    found = [state.get("dataset_state") if "_num_yielded" in state else None for state in states]
    return found if any(state is not None for state in found) else None


def load_dataset_states(trainer: Any, states: list[Any]) -> None:
    """Each main-process ``StatefulDataLoader``'s map-style dataset gets its saved state, as torchdata's
    `_StatefulSingleProcessDataLoaderIter.load_state_dict` loads it (``dataset.load_state_dict``). Not an
    ``IterableDataset``'s: its state is a position its next iterator would resume from, where a new pass starts it
    anew."""
    loaders = train_loaders(trainer)
    if len(loaders) != len(states):
        return
    for loader, state in zip(loaders, states):
        dataset: Any = getattr(loader, "dataset", None)
        load: Any = getattr(dataset, "load_state_dict", None)
        iterable = isinstance(dataset, torch.utils.data.IterableDataset)
        if state is not None and not iterable and _main_process_stateful_loader(loader) and callable(load):
            load(state)


def before_train_iterator(trainer: Any, call: Callable[[], None]) -> None:
    """Call ``call()`` in `FitLoop.setup_data` right before the training iterator is built (and the
    loaders' saved states loaded): `FitLoop._load_combined_loader_states` (private), looked up on the
    instance, runs there, after `_process_dataloader` put Lightning's distributed sampler in."""
    _call_first(trainer.fit_loop, "_load_combined_loader_states", call)


def stop_before_train_iterator(trainer: Any) -> None:
    take_off_instance(trainer.fit_loop, "_load_combined_loader_states")


# `FitLoop.setup_data` asks for the training loaders with `_request_dataloader(self._data_source)`, which calls
# `_DataLoaderSource.dataloader()` (the module's or datamodule's `train_dataloader()`): at the fit's first
# `setup_data`, and again at an epoch's start where `FitLoop._should_reload_train_dl` (private) holds, that is
# ``reload_dataloaders_every_n_epochs`` (public) epochs after `FitLoop._last_train_dl_reload_epoch` (private;
# ``-inf`` until the first request, then the epoch of the last). `FitLoop._data_source` (private) is one
# object for the fit (`attach_data` sets its `instance`), a dataclass whose `dataloader` is looked up on the
# instance, so an instance attribute runs first. Checked on pytorch-lightning 2.6.6.


def before_train_loaders_request(trainer: Any, call: Callable[[], None]) -> None:
    """Call ``call()`` right before `FitLoop.setup_data` asks for the training loaders (``train_dataloader()``)."""
    source: Any = trainer.fit_loop._data_source
    own: Callable[[Any], Any] = source.__class__.dataloader  # the class's: an instance attribute is ours

    def dataloader() -> Any:
        call()
        return own(source)

    put_on_instance(source, "dataloader", dataloader)


def stop_before_train_loaders_request(trainer: Any) -> None:
    _AGAIN.pop(trainer.fit_loop, None)  # an epoch the fit did not reach
    source: Any = getattr(trainer.fit_loop, "_data_source", None)
    if source is not None:
        take_off_instance(source, "dataloader")


def train_loaders_requested_again_at(trainer: Any, epoch: int) -> bool:
    """Whether the fit, having asked for its training loaders already, asks for them anew at ``epoch``'s start
    (``reload_dataloaders_every_n_epochs``), as `FitLoop._should_reload_train_dl` will compute it there."""
    every = loaders_reload_every(trainer)
    last: Any = getattr(trainer.fit_loop, "_last_train_dl_reload_epoch", float("-inf"))
    if every <= 0 or not isinstance(last, int):  # ``-inf``: not asked for yet in this fit
        return False
    return epoch - last >= every


def combined_train_loader(trainer: Any) -> Any:
    """The fit's training `CombinedLoader` (`FitLoop._combined_loader`, private), or None before
    `FitLoop.setup_data`; a new object each time Lightning makes the loaders anew."""
    return getattr(trainer.fit_loop, "_combined_loader", None)


def make_train_loaders_again(trainer: Any) -> None:
    """Have `FitLoop.setup_data` make the training loaders again when the fit loop next runs.

    `FitLoop.setup_data` loads a checkpoint's loader states (`_load_combined_loader_states`) only into
    loaders it makes; with loaders made already, it returns at once. A checkpoint loaded after the
    loaders were made, as `BatchSizeFinder` and `LearningRateFinder` restore their own from
    `on_fit_start` (their trials made the loaders), would leave its loader states unloaded: the resumed
    epoch would start from the loaders' first batch. `FitLoop._combined_loader` (private): None makes
    `setup_data` request the loaders again (as `BatchSizeFinder`'s own `_reset_dataloaders` does).
    """
    trainer.fit_loop._combined_loader = None


def train_loaders(trainer: Any) -> list[Any]:
    """The training loaders as `FitLoop.setup_data` processed them (`FitLoop._combined_loader`, private)."""
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    return list(combined.flattened) if combined is not None else []


def set_train_sampler_epochs(trainer: Any) -> None:
    """What `FitLoop.on_advance_start` does next: `_set_sampler_epoch` (lightning_fabric, private;
    imported into the fit loop's module) on each training loader, with the epoch it will use there
    (`FitLoop.epoch_progress.current.processed`, restored from the checkpoint by now). Only in a fit
    resumed from a checkpoint (`_Loop.is_resuming`, public, set by `load_state_dict`): a fresh fit's
    first iterator is drawn with the samplers' epoch as the user made them, as in plain Lightning, and
    its samplers see one ``set_epoch`` per epoch."""
    fit_loop = trainer.fit_loop
    if not fit_loop.is_resuming:
        return
    set_sampler_epoch: Any = getattr(sys.modules[type(fit_loop).__module__], "_set_sampler_epoch", None)
    if set_sampler_epoch is None:
        return
    for loader in train_loaders(trainer):
        set_sampler_epoch(loader, fit_loop.epoch_progress.current.processed)


def loader_samplers(loader: Any) -> list[Any]:
    """The samplers `_set_sampler_epoch` reaches: ``loader.sampler`` and ``loader.batch_sampler.sampler``."""
    found: dict[int, Any] = {}
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if sampler is not None:
            found[id(sampler)] = sampler
    return list(found.values())


def wrapped_sampler(sampler: Any) -> Any:
    """The sampler inside Lightning's `DistributedSamplerWrapper` (`_DatasetSamplerWrapper._sampler`,
    lightning_fabric, private), or None for any other sampler."""
    if type(sampler).__name__ != "DistributedSamplerWrapper":
        return None
    return getattr(getattr(sampler, "dataset", None), "_sampler", None)


def before_wrapped_draw(sampler: Any, call: Callable[[], None]) -> None:
    """Call ``call()`` before a `DistributedSamplerWrapper` draws its sampler's order for an epoch:
    `DistributedSamplerWrapper.__iter__` calls `_DatasetSamplerWrapper.reset()` (private), which runs
    ``list(self._sampler)``; looked up on the instance, so an instance attribute runs first."""
    _call_first(sampler.dataset, "reset", call)


def stop_before_wrapped_draw(sampler: Any) -> None:
    dataset = getattr(sampler, "dataset", None)
    if dataset is not None:
        take_off_instance(dataset, "reset")


# `_EvaluationLoop.setup_data` (private loop; the method looked up on the instance) makes the validation loaders: at
# the sanity check, at `FitLoop.on_run_start` where the first epoch validates, else at the first validation, and
# again where `reload_dataloaders_every_n_epochs` asks. Checked on pytorch-lightning 2.6.6.


def around_next_validation_setup(trainer: Any, around: Callable[[Callable[[], None]], None]) -> None:
    """The fit's validation loop's next set-up of its loaders runs through ``around(setup)``, which calls
    ``setup()`` itself; once."""
    val_loop: Any = trainer.fit_loop.epoch_loop.val_loop
    own: Callable[[Any], None] = val_loop.__class__.setup_data

    def setup_data() -> None:
        take_off_instance(val_loop, "setup_data")
        around(functools.partial(own, val_loop))

    put_on_instance(val_loop, "setup_data", setup_data)


def stop_around_next_validation_setup(trainer: Any) -> None:
    take_off_instance(trainer.fit_loop.epoch_loop.val_loop, "setup_data")


def validation_loaders_made_at(trainer: Any) -> int | None:
    """The epoch the fit's validation loaders were last made at, as ``reload_dataloaders_every_n_epochs`` counts
    from it (`_EvaluationLoop._last_val_dl_reload_epoch`, private: ``-inf`` until a making that counts; a sanity
    check's counts only where the first epoch validates); None where none counted."""
    made: Any = getattr(trainer.fit_loop.epoch_loop.val_loop, "_last_val_dl_reload_epoch", float("-inf"))
    return made if isinstance(made, int) else None


def set_validation_loaders_made_at(trainer: Any, made: int | None) -> None:
    """`_EvaluationLoop._last_val_dl_reload_epoch` (private) set to ``made`` (None: ``-inf``)."""
    trainer.fit_loop.epoch_loop.val_loop._last_val_dl_reload_epoch = float("-inf") if made is None else made


def validation_loaders_made_again(trainer: Any, made: int | None) -> bool:
    """Whether a validation now makes its loaders anew where they were last made at epoch ``made`` (None: not
    counted), as `_EvaluationLoop._should_reload_val_dl` (private) computes it."""
    every = loaders_reload_every(trainer)
    return every > 0 and (made is None or int(trainer.current_epoch) - made >= every)


def loaders_reload_every(trainer: Any) -> int:
    """``reload_dataloaders_every_n_epochs`` (public; 0: never): how often the training and the validation
    loaders are asked for anew."""
    return int(getattr(trainer, "reload_dataloaders_every_n_epochs", 0) or 0)


def _call_first(instance: Any, method: str, call: Callable[[], None]) -> None:
    """``instance.<method>()`` (no arguments) calls ``call()`` first: an instance attribute over the class's."""
    kind: Any = instance.__class__
    own: Callable[[Any], None] = getattr(kind, method)

    def first() -> None:
        call()
        own(instance)

    put_on_instance(instance, method, first)


# torchdata's `StatefulDataLoader.state_dict()` key (single- and multi-process): its iterator ran out.
_ITERATOR_FINISHED = "_iterator_finished"


_SINGLE_PROCESS_STATE = frozenset(
    {
        "_index_sampler_state",
        "_sampler_iter_state",
        "_sampler_iter_yielded",
        "_num_yielded",
        "_IterableDataset_len_called",
        "_shared_seed",
        "fetcher_state",
        "dataset_state",
        "_iterator_finished",
    }
)


_BATCH_SAMPLER_STATE = frozenset({"samples_yielded", "sampler_state", "sampler_iter_state"})


_SAMPLER_COUNTERS = frozenset({"yielded", "generator"})


_ITERABLE_FETCHER = frozenset({"dataset_iter_state", "fetcher_ended"})


def rewindable_loader(trainer: Any) -> Any:
    """The one training loader whose state `rewound_loader_states` reads back, or None.

    A torchdata `StatefulDataLoader` (matched by its class's name and package) with ``num_workers=0``,
    alone in the fit's `CombinedLoader`, whose state now has the layout read here. Its dataset (or an
    `IterableDataset`'s iterator) may have a state of its own: `dataset_states` then reads that part
    before each fetch.
    """
    loaders = train_loaders(trainer)
    if len(loaders) != 1:
        return None
    loader = loaders[0]
    if not _main_process_stateful_loader(loader):
        return None
    states = stateful_loader_states(trainer)
    if not states or len(states) != 1:
        return None
    fetches = int(states[0].get("_num_yielded", 0))
    if _rewound(states[0], fetches, loader, dataset_states(loader) if holds_dataset_state(loader) else None) is None:
        return None
    return loader


def torchdata_loader(loader: Any) -> bool:
    """A torchdata `StatefulDataLoader` (matched by its class's name and package, a subclass's too)."""
    kind: Any = loader.__class__
    return any(k.__name__ == "StatefulDataLoader" and k.__module__.startswith("torchdata.") for k in kind.__mro__)


def _main_process_stateful_loader(loader: Any) -> bool:
    """A torchdata `StatefulDataLoader` with ``num_workers=0``."""
    return torchdata_loader(loader) and int(getattr(loader, "num_workers", 1)) == 0


def counted_loaders(trainer: Any) -> list[Any] | None:
    """The training loaders whose states `counted_loader_states` reads back at a save, or None.

    Several loaders in the fit's `CombinedLoader`, each a `StatefulDataLoader` loading in the main
    process from a map-style dataset without a state of its own, whose state now has the layout read
    here. Each moves on by its own count in a fetch (``max_size`` stops one that ran out,
    ``max_size_cycle`` starts it again with a new iterator), so the counts are taken after each fetch
    (`loader_counts`): a few attributes, where the states themselves cost torchdata's checks of each part.
    """
    loaders = train_loaders(trainer)
    if len(loaders) < 2:
        return None
    states = stateful_loader_states(trainer)
    if not states or len(states) != len(loaders):
        return None
    for loader, state in zip(loaders, states):
        if not _main_process_stateful_loader(loader):
            return None
        if isinstance(getattr(loader, "dataset", None), torch.utils.data.IterableDataset):
            return None  # replayed at a load, and counted twice then (`loader_count_offset`)
        if _rewound(state, int(state.get("_num_yielded", 0)), loader, None) is None:
            return None
    return loaders


def loader_counts(loaders: list[Any]) -> tuple[tuple[Any, int, bool], ...]:
    """Each of ``loaders``' running iterator (``StatefulDataLoader._iterator``), with the batches it
    yielded and whether it ran out (`_StatefulBaseDataLoaderIter._num_yielded` and ``_finished``,
    torchdata-private): what `counted_loader_states` reads the states back to. A main-process
    `StatefulDataLoader` makes a new iterator for each pass (``__iter__``), so the one held here keeps
    its counts after ``max_size_cycle`` started the loader again."""
    counts: list[tuple[Any, int, bool]] = []
    for loader in loaders:
        iterator = loader._iterator
        counts.append(
            (iterator, iterator._num_yielded, iterator._finished) if iterator is not None else (None, 0, False)
        )
    return tuple(counts)


def counted_loader_states(loaders: list[Any], counts: tuple[tuple[Any, int, bool], ...]) -> list[dict[str, Any]] | None:
    """The states of `counted_loaders` as their ``state_dict()`` was when ``counts`` (`loader_counts`) were
    taken: each iterator's state (`_StatefulSingleProcessDataLoaderIter.state_dict`, torchdata-private,
    what the loader's ``state_dict()`` returns while it runs) with its counters read back as in
    `rewound_loader_states`; None where one cannot be."""
    states: list[dict[str, Any]] = []
    for loader, (iterator, yielded, finished) in zip(loaders, counts):
        if iterator is None:
            return None
        state = _rewound(iterator.state_dict(), yielded, loader, None)
        if state is None:
            return None
        state[_ITERATOR_FINISHED] = finished  # a loader may have run out in a fetch since
        states.append(state)
    return states


class DatasetStates(NamedTuple):
    """The part of a main-process `StatefulDataLoader`'s state that its dataset holds, as its
    `_StatefulSingleProcessDataLoaderIter.state_dict` (torchdata-private) writes it: ``dataset_state``,
    and for an `IterableDataset` its fetcher's ``fetcher_state`` (the iterator's state and whether it ended)."""

    dataset: Any
    fetcher: dict[str, Any] | None


def _own_state(holder: Any) -> Any:
    """torchdata's `try_to_serialize`: the ``state_dict()`` of an object that has ``state_dict`` and
    ``load_state_dict`` (its `Stateful` protocol), else None; without the protocol's `isinstance`
    check (about 15 µs on Python 3.11), as it runs before every fetch."""
    state_dict = getattr(holder, "state_dict", None)
    if callable(state_dict) and callable(getattr(holder, "load_state_dict", None)):
        return state_dict()
    return None


def holds_dataset_state(loader: Any) -> bool:
    """Whether the loader's dataset, or its running `IterableDataset` iterator
    (`_StatefulSingleProcessDataLoaderIter._dataset_fetcher.dataset_iter`, torchdata-private), has a
    state of its own."""
    fetcher = getattr(getattr(loader, "_iterator", None), "_dataset_fetcher", None)
    holders = [getattr(loader, "dataset", None), getattr(fetcher, "dataset_iter", None)]
    return any(
        callable(getattr(h, "state_dict", None)) and callable(getattr(h, "load_state_dict", None)) for h in holders
    )


def dataset_states(loader: Any) -> DatasetStates | None:
    """The dataset's part of the loader's state now (see `DatasetStates`); None before it has an iterator.

    `_StatefulSingleProcessDataLoaderIter._dataset_fetcher` (torchdata-private): a map-style fetcher's
    ``dataset``; an iterable one's ``dataset``, ``dataset_iter`` and ``ended``, read as its
    ``state_dict`` reads them.
    """
    fetcher = getattr(getattr(loader, "_iterator", None), "_dataset_fetcher", None)
    if fetcher is None:
        return None
    dataset = fetcher.dataset
    if not hasattr(fetcher, "dataset_iter"):  # map-style
        return DatasetStates(_own_state(dataset), None)
    dataset_iter = fetcher.dataset_iter
    return DatasetStates(
        _own_state(dataset) if dataset_iter is not dataset else None,
        {"dataset_iter_state": _own_state(dataset_iter), "fetcher_ended": fetcher.ended},
    )


def loader_count_offset(loader: Any, fetched: int) -> int:
    """How many batches more the loader's running iterator counts as yielded (`_StatefulBaseDataLoaderIter._num_yielded`,
    torchdata-private) than Lightning's fetcher has fetched from it (``fetched``); 0 before it has one.

    0 for an `IterableDataset`: at a load, torchdata replays its iterator by calling its own ``__next__``
    `_num_yielded` times after setting `_num_yielded`, so a resumed epoch's count holds the replayed
    batches twice (torchdata 0.11.0), while Lightning's count is the batches this epoch's iterator yielded.
    """
    iterator = getattr(loader, "_iterator", None)
    fetches = getattr(iterator, "_num_yielded", None)
    if not isinstance(fetches, int) or isinstance(getattr(loader, "dataset", None), torch.utils.data.IterableDataset):
        return 0
    return fetches - fetched


def rewound_loader_states(
    trainer: Any, loader: Any, fetches: int, dataset: DatasetStates | None = None
) -> list[dict[str, Any]] | None:
    """The training loaders' states as Lightning saves them (`stateful_loader_states`), read back to
    when ``loader`` (`rewindable_loader`) had yielded ``fetches`` batches of its running iterator, with
    ``dataset``, the dataset's part read then (`dataset_states`), where it holds a state of its own;
    None where they cannot be."""
    states = stateful_loader_states(trainer)
    if not states or len(states) != 1:
        return None
    state = _rewound(states[0], fetches, loader, dataset)
    return [state] if state is not None else None


def _rewound(
    state: Mapping[str, Any], fetches: int, loader: Any, dataset: DatasetStates | None
) -> dict[str, Any] | None:
    if frozenset(state) != _SINGLE_PROCESS_STATE or not 0 <= fetches <= int(state["_num_yielded"]):
        return None
    if state["_index_sampler_state"] is not None:
        return None
    found_fetcher: Any = state["fetcher_state"]
    fetcher = cast("dict[str, Any]", found_fetcher) if isinstance(found_fetcher, dict) else None
    if found_fetcher is not None and (fetcher is None or frozenset(fetcher) != _ITERABLE_FETCHER):
        return None
    rewound = dict(state)
    if dataset is not None:  # the dataset's own state, read before the fetch read back to
        if (dataset.fetcher is None) != (fetcher is None):
            return None
        rewound["dataset_state"], rewound["fetcher_state"] = dataset.dataset, dataset.fetcher
    elif state["dataset_state"] is not None or (fetcher is not None and fetcher["dataset_iter_state"] is not None):
        return None  # a state of the dataset's own, not read before the fetch: it cannot be read back
    if fetches < int(state["_num_yielded"]):
        rewound["_iterator_finished"] = False
        if fetcher is not None and dataset is None:
            # `_StatefulSingleProcessDataLoaderIter.load_state_dict` replays an iterable without a state
            # of its own for `_num_yielded` batches; its iterator had not ended before the fetch read back to
            rewound["fetcher_state"] = {**fetcher, "fetcher_ended": False}
    rewound["_num_yielded"] = rewound["_sampler_iter_yielded"] = fetches
    sampler_iter: Any = state["_sampler_iter_state"]
    if sampler_iter is None:  # torchdata fast-forwards the sampler by `_sampler_iter_yielded` draws
        return rewound
    batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    if not isinstance(sampler_iter, dict) or not isinstance(batch_size, int) or "samples_yielded" not in sampler_iter:
        return None
    parts = cast("dict[str, Any]", sampler_iter)
    if not set(parts) <= _BATCH_SAMPLER_STATE:
        return None
    # every batch before the last is full; a fetch under way drew its samples already
    samples = min(fetches * batch_size, int(parts["samples_yielded"]))
    counters: dict[str, Any] = {"samples_yielded": samples}
    for name in ("sampler_state", "sampler_iter_state"):
        if name not in parts:
            continue
        found: Any = parts[name]
        if not isinstance(found, dict):
            return None
        inner = cast("dict[str, Any]", found)
        if "yielded" not in inner or not set(inner) <= _SAMPLER_COUNTERS:
            return None
        yielded: Any = inner["yielded"]
        counters[name] = {**inner, "yielded": min(samples, int(yielded))}
    rewound["_sampler_iter_state"] = counters
    return rewound


def around_epoch_iterator(trainer: Any, around: Callable[[Callable[[], None]], None]) -> None:
    """Run `_TrainingEpochLoop.on_run_start` (looked up on the instance) as ``around(run)``, where
    ``run()`` calls what the instance had (Lightning's own, or another wrapper): once per epoch,
    before its first batch."""
    fit_loop = trainer.fit_loop
    epoch_loop = fit_loop.epoch_loop
    original: Callable[[Any], None] = epoch_loop.on_run_start

    def run(data_fetcher: Any) -> None:
        again = _AGAIN.pop(fit_loop, None)
        if again == int(trainer.current_epoch) and (fit_loop.is_resuming or epoch_loop.restarting):
            iter(data_fetcher)  # what Lightning's own does past the first epoch of a fit not resuming
        original(data_fetcher)

    def on_run_start(data_fetcher: Any) -> None:
        around(lambda: run(data_fetcher))

    put_on_instance(epoch_loop, "on_run_start", on_run_start)


def epoch_iterator_made_again(trainer: Any) -> bool:
    """Whether the epoch about to run makes an iterator of its own, in place of the one `FitLoop.setup_data`
    made (when `reload_dataloaders_every_n_epochs` made the loaders anew at the epoch's start).
    `_TrainingEpochLoop.on_run_start` calls `iter(data_fetcher)` again past the first epoch, unless the fit
    is resuming (`FitLoop.is_resuming`, public) or the epoch loop restarting (`_Loop.restarting`). Checked
    on pytorch-lightning 2.5.0 and 2.6.6."""
    fit_loop = trainer.fit_loop
    if _AGAIN.get(fit_loop) == int(trainer.current_epoch):
        return True
    return int(trainer.current_epoch) > 0 and not fit_loop.is_resuming and not fit_loop.epoch_loop.restarting


def make_epoch_iterator_again(trainer: Any) -> None:
    """Make the training iterator again, as `_TrainingEpochLoop.on_run_start` does past the first epoch
    (``iter(data_fetcher)``, on `FitLoop._data_fetcher`, private): before the epoch loop's start, where
    Lightning makes none (a fit resumed at an epoch's start trains from the one `FitLoop.setup_data` made
    before the on_train_epoch_start hooks). Checked on pytorch-lightning 2.5.0 and 2.6.6."""
    data_fetcher: Any = getattr(trainer.fit_loop, "_data_fetcher", None)
    if data_fetcher is not None:
        iter(data_fetcher)


def loaders_made_at(trainer: Any, epoch: int) -> bool:
    """Whether `FitLoop.setup_data` makes the training loaders (and an iterator) at ``epoch``'s start, before
    its on_train_epoch_start hooks: with ``reload_dataloaders_every_n_epochs``, where the epochs since the
    last making (`FitLoop._last_train_dl_reload_epoch`, private) reach it, or where they were made at
    ``epoch`` already (`FitLoop._should_reload_train_dl`'s test). Checked on pytorch-lightning 2.6.6."""
    every = loaders_reload_every(trainer)
    if every <= 0:
        return False
    last: Any = getattr(trainer.fit_loop, "_last_train_dl_reload_epoch", float("-inf"))
    return bool(last == epoch or epoch - last >= every)


# a resumed fit's fit loop -> the epoch whose loop start makes its training iterator again (`make_epoch_iterator_again_at_loop_start`)
_AGAIN: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def make_epoch_iterator_again_at_loop_start(trainer: Any) -> None:
    """Have the epoch about to run make its training iterator again at its loop's start, as a fit not resuming
    does past its first epoch (`_TrainingEpochLoop.on_run_start` calls `iter(data_fetcher)`; a resumed fit's
    does not): a resumed fit whose point, at that epoch's start, was saved before the uninterrupted run made the
    epoch's loaders anew (`reload_dataloaders_every_n_epochs`) and then two iterators of them, in `FitLoop.setup_data`
    and at the epoch loop's start. A loader with ``generator=`` draws its workers' base seed from the generator
    for each iterator, before the order: the epoch trains from the second. Only through `around_epoch_iterator`,
    which a followed fit has."""
    _AGAIN[trainer.fit_loop] = int(trainer.current_epoch)


def stop_around_epoch_iterator(trainer: Any) -> None:
    take_off_instance(trainer.fit_loop.epoch_loop, "on_run_start")


def around_loader_iterator(loader: Any, around: Callable[[Callable[[], Any]], Any]) -> None:
    """Make a `StatefulDataLoader`'s iterators through ``around(make)``, which returns what ``make()``
    returns. `StatefulDataLoader.__iter__` calls ``self._get_iterator()`` (torchdata-private, looked
    up on the instance) for each new iterator of a loader without persistent workers: for each pass
    ``CombinedLoader(mode="max_size_cycle")`` starts."""
    original: Callable[[], Any] = loader._get_iterator

    def get_iterator() -> Any:
        return around(original)

    put_on_instance(loader, "_get_iterator", get_iterator)


def stop_around_loader_iterator(loader: Any) -> None:
    take_off_instance(loader, "_get_iterator")


def train_iterator(trainer: Any) -> Any:
    """The training `CombinedLoader`'s current iterator (`CombinedLoader._iterator`, private): a new
    object each time an epoch's iterator is made."""
    return getattr(getattr(trainer.fit_loop, "_combined_loader", None), "_iterator", None)


def epoch_of_iterator(trainer: Any) -> int:
    """The epoch the training iterator made now is for (`FitLoop.epoch_progress.current.processed`:
    the epochs done, restored from the checkpoint in a resumed fit)."""
    return int(trainer.fit_loop.epoch_progress.current.processed)


def loader_states_to_load(trainer: Any) -> bool:
    """Whether `FitLoop._load_combined_loader_states` (private) is about to load the training loaders'
    saved states: `FitLoop._combined_loader_states_to_load` (private, from the checkpoint's fit loop)."""
    return bool(getattr(trainer.fit_loop, "_combined_loader_states_to_load", None))


def load_finished_loaders_as_ended(trainer: Any) -> None:
    """In ``CombinedLoader(mode="max_size")``, a loader that ran out goes on yielding nothing until the
    epoch ends (`_MaxSize.__next__` suppresses its `StopIteration`). Its `StatefulDataLoader` state
    says its iterator finished, and torchdata's `StatefulDataLoader.__iter__` makes a new iterator
    in place of a finished one: after a resume it would yield its data again from the start. Its
    state is loaded here as not finished (its samples all yielded, it raises `StopIteration` at its
    next batch), as the uninterrupted epoch has it. `FitLoop._combined_loader_states_to_load` (private):
    what `_load_combined_loader_states` loads next; `CombinedLoader._mode` (private): the mode."""
    fit_loop = trainer.fit_loop
    if getattr(getattr(fit_loop, "_combined_loader", None), "_mode", None) != "max_size":
        return
    states: Any = getattr(fit_loop, "_combined_loader_states_to_load", None)
    if not isinstance(states, list):
        return
    listed: list[Any] = cast(Any, states)
    loaded: list[Any] = []
    for state in listed:
        ended = isinstance(state, dict) and cast("dict[str, Any]", state).get(_ITERATOR_FINISHED) is True
        loaded.append({**state, _ITERATOR_FINISHED: False} if ended else state)
    fit_loop._combined_loader_states_to_load = loaded


# `FitLoop.setup_data` makes the fit's first training iterator (`iter(self._data_fetcher)`, right after
# `_load_combined_loader_states`), and `_PrefetchDataFetcher.__iter__` fetches one batch ahead where the
# `CombinedLoader` has no length (a loader of an IterableDataset). A fit resumed after its epoch's last batch
# trains nothing from that iterator (`_TrainingEpochLoop.done` reads the restored `is_last_batch`); the next
# epoch's loop makes its own (`_TrainingEpochLoop.on_run_start`, the fit loop no longer resuming). The fetch
# ahead ran the loaders' data the uninterrupted epoch never fetched again: an IterableDataset that keeps its
# own position in the main process moves on, and the next epoch starts after that batch.
# `CombinedLoader.__iter__` makes its mode's iterator (`_ModeIterator`, private) from `CombinedLoader._flattened`
# (private; the `flattened` property reads it), and `_ModeIterator.__iter__` calls ``iter()`` on each; where a
# loader runs out, `_MaxSizeCycle.__next__` calls ``iter()`` on it again and fetches once more, and raises
# `StopIteration` once all ran out. Checked on pytorch-lightning 2.6.6.


class _Ended:
    """A training loader as the mode's iterator sees it for an epoch that trains nothing more: its first pass
    makes the loader's iterator, as Lightning's would (what making one draws and starts, torchdata's state of
    it), and fetches nothing from it; each pass ends at once. Anything else is the loader's."""

    def __init__(self, loader: Any, on_iter: Callable[[], None]) -> None:
        self._loader, self._on_iter = loader, on_iter
        self._made = False

    def __iter__(self) -> Any:
        self._on_iter()
        if not self._made:
            self._made = True
            iter(self._loader)
        return iter(())

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def first_iterator_fetches_nothing(trainer: Any) -> None:
    """Have the training iterator `FitLoop.setup_data` makes next yield nothing (the loaders' iterators made,
    nothing fetched from them), where the `CombinedLoader` has no length (its fetcher would fetch a batch ahead).
    Called right before that iterator is made (`before_train_iterator`), in a fit resumed after its epoch's last
    batch."""
    combined: Any = getattr(trainer.fit_loop, "_combined_loader", None)
    if combined is None or _combined_length(combined) is not None:
        return
    loaders: list[Any] = combined._flattened

    def loaders_back() -> None:
        # the mode's iterator keeps the stand-ins; whatever reads the combined loader after reads the loaders
        combined._flattened = loaders

    combined._flattened = [_Ended(loader, loaders_back) for loader in loaders]


def _combined_length(combined: Any) -> int | None:
    """``len(combined)`` as the fetcher reads it (lightning_fabric's `sized_len`), before its iterator is made:
    from the loaders' lengths (``inf`` without one), their limits and the mode's function (`_SUPPORTED_MODES`)."""
    lengths: list[float] = []
    for loader in combined.flattened:
        try:
            lengths.append(len(loader))
        except (TypeError, NotImplementedError):
            lengths.append(float("inf"))
    limits: list[float] = list(combined.limits) if combined.limits is not None else [float("inf")] * len(lengths)
    if combined._mode == "min_size":
        length = min(lengths + limits)
    elif combined._mode == "sequential":
        length = sum(min(count, limit) for count, limit in zip(lengths, limits))
    else:
        length = max(min(count, limit) for count, limit in zip(lengths, limits))
    return None if length == float("inf") else int(length)
