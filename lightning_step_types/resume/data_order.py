"""The training data's order under DDP, resumed as the uninterrupted run drew it.

Lightning builds a fit's first training iterator in ``FitLoop.setup_data``, before
``on_advance_start`` sets the samplers' epoch, and a resumed fit trains its first epoch from that
iterator. A ``DistributedSampler`` (the one Lightning puts in, or the user's own) draws its
permutation from ``seed + epoch`` when its iterator is made, which a ``StatefulDataLoader`` does at
once and worker processes do ahead: the resumed epoch gets epoch 0's permutation (Lightning issue
21938). Here the samplers' epoch is set right before that iterator is built, to the epoch
Lightning is about to set (``_lightning.data.before_train_iterator``).

Where Lightning wraps another sampler in its ``DistributedSamplerWrapper`` (a ``StatefulDataLoader``
with ``shuffle=True`` gets one around torchdata's ``RandomSampler``), the wrapper draws that
sampler's whole order at each epoch's start, and no checkpoint holds it. A checkpoint saved in a
followed fit carries the wrapped sampler's state from before its draw of the resume point's epoch (its
``state_dict()``, or its ``torch.Generator``'s state); the resumed run puts it back before each draw of
that epoch. A wrapped sampler with neither (one that draws from torch's global random state) cannot be
resumed exactly: one ``StepResultWarning`` at resume names it.

`DataOrder` is a source of state (``resume/source.py``): each process's entry is its own samplers' (in its
part of the running state, so that each process gets its own back), read at the save; nothing per batch. A
checkpoint of an earlier release holds rank 0's under ``checkpoint["lightning_step_types"]["data_order"]``,
which every process reads.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from lightning_step_types._lightning.data import (
    before_train_iterator,
    before_wrapped_draw,
    loader_samplers,
    set_train_sampler_epochs,
    stop_before_train_iterator,
    stop_before_wrapped_draw,
    train_loaders,
    wrapped_sampler,
)
from lightning_step_types._lightning.plain_loader import plain_loader
from lightning_step_types.resume.messages import CHECKPOINT_KEY, Problem, sampler_order_problem, warn
from lightning_step_types.resume.source import Loading, Moment, Saving

__all__ = ["DATA_ORDER", "DataOrder", "also_before_train_iterator", "order_named", "saved_part", "where_resumed"]

DATA_ORDER = "data_order"


class _Wrapped:
    """One ``DistributedSamplerWrapper`` of a training loader: its sampler's state before each draw."""

    def __init__(self, wrapper: Any, inner: Any) -> None:
        self.wrapper, self.inner = wrapper, inner
        self.before: dict[int, Any] = {}  # epoch -> the sampler's state before that epoch's draw
        self.restore: tuple[int, Any] | None = None  # a resumed fit: (epoch, the state its draws start from)

    def drawing(self) -> None:
        epoch = int(self.wrapper.epoch)
        if self.restore is not None and self.restore[0] == epoch:
            _load_state(self.inner, self.restore[1])
        elif self.restore is not None:  # past the resumed epoch: the order goes on from its draw
            self.restore = None
        self.before = {e: state for e, state in self.before.items() if e >= epoch - 1}
        self.before[epoch] = _state_of(self.inner)


class DataOrder:
    """A followed fit's training samplers, and what a resumed fit puts back: a source of state."""

    key = DATA_ORDER
    reads_each_batch = False

    def __init__(self, trainer: Any) -> None:
        self.trainer: weakref.ReferenceType[Any] = weakref.ref(trainer)
        self.wrapped: list[_Wrapped | None] = []  # per training loader
        self.loaded: list[Mapping[str, Any]] | None = None  # a resumed fit's saved entries
        self.named: bool = False  # the resume's warning named a sampler whose order no checkpoint holds
        self.also: list[Callable[[], None]] = []  # what else runs there (also_before_train_iterator)
        self.last: list[Callable[[], None]] = []  # what runs after all of that, right before the iterator

    def follow(self, trainer: Any) -> None:
        """At the fit's setup: the samplers' epoch set before its first iterator is built."""
        previous = _ORDERS.pop(trainer, None)
        if previous is not None:
            previous.stop()
        _ORDERS[trainer] = self
        before_train_iterator(trainer, self.before_iterator)

    # --- the protocol (resume/source.py) -----------------------------------------------------------------

    def mark(self, moment: Moment) -> None:
        pass

    def batch_start(self) -> None:
        pass

    def encode(self, saving: Saving) -> list[dict[str, Any]] | None:
        """The wrapped samplers' states for the epoch the checkpoint resumes in."""
        return self.saved(saving.point.epoch) or None

    def load(self, entry: Any, loading: Loading, checkpoint: Mapping[str, Any]) -> None:
        """Keep the sampler states for the resumed fit (this process's own, or an earlier release's rank 0's);
        warn (global rank 0) where one is missing."""
        ours = saved_part(checkpoint, CHECKPOINT_KEY)
        entries: Any = entry if entry is not None else ours.get(DATA_ORDER)
        trainer, module = self.trainer(), loading.module()
        if not isinstance(entries, list) or trainer is None:
            return
        saved = cast("list[Mapping[str, Any]]", entries)
        self.loaded = saved
        point = saved_part(saved_part(ours, "epoch_state"), "point")
        missing: list[str] = [str(item["sampler"]) for item in saved if item["state"] is None]
        self.named = bool(missing)
        if missing and int(getattr(trainer, "global_rank", 0)) == 0:
            warn(module, where_resumed(point), sampler_order_problem(missing))

    def restore(self, loading: Loading, nothing_runs: bool) -> list[Problem]:
        return []  # the states go back before each draw of the point's epoch (`_Wrapped.drawing`)

    def reach_point(self, loading: Loading, batch: bool, inside_epoch: bool) -> None:
        pass

    def before_iterator(self) -> None:
        trainer = self.trainer()
        if trainer is None:
            return
        for call in self.also:
            call()
        set_train_sampler_epochs(trainer)
        self.wrapped = [self._follow(loader) for loader in train_loaders(trainer)]
        for entry in self.loaded or []:
            index = int(entry["loader"])
            wrapped = self.wrapped[index] if index < len(self.wrapped) else None
            if wrapped is not None and entry["state"] is not None:
                wrapped.restore = (int(entry["epoch"]), entry["state"])
        self.loaded = None
        for call in self.last:
            call()

    def _follow(self, loader: Any) -> _Wrapped | None:
        for sampler in loader_samplers(loader):
            inner = wrapped_sampler(sampler)
            if inner is not None:
                wrapped = _Wrapped(sampler, inner)
                before_wrapped_draw(sampler, wrapped.drawing)
                return wrapped
        return None

    def saved(self, epoch: int) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        trainer = self.trainer()
        loaders = train_loaders(trainer) if trainer is not None else []
        for index, wrapped in enumerate(self.wrapped):
            if wrapped is None or isinstance(wrapped.inner, torch.utils.data.SequentialSampler):
                continue  # nothing drawn at random
            state = wrapped.before.get(epoch, None) if epoch in wrapped.before else _state_of(wrapped.inner)
            if state is None and index < len(loaders) and plain_loader(loaders[index]):
                continue  # a plain DataLoader: `plain_loaders` draws its order again from the global streams it saves
            entries.append({"loader": index, "sampler": _named(wrapped.inner), "epoch": epoch, "state": state})
        return entries

    def stop(self) -> None:
        trainer = self.trainer()
        if trainer is not None:
            if _ORDERS.get(trainer) is self:
                del _ORDERS[trainer]
            stop_before_train_iterator(trainer)
        for wrapped in self.wrapped:
            if wrapped is not None:
                stop_before_wrapped_draw(wrapped.wrapper)
        self.wrapped = []


# the followed fit's DataOrder of each Trainer: for the sources that run right before its training iterator too
# (`also_before_train_iterator`), and for the warnings that say nothing more where it named the order
_ORDERS: weakref.WeakKeyDictionary[Any, DataOrder] = weakref.WeakKeyDictionary()


def also_before_train_iterator(trainer: Any, call: Callable[[], None], last: bool = False) -> None:
    """In a followed fit, ``call()`` too right before the training iterator is built (and the loaders'
    saved states loaded), first; ``last``: after the samplers are followed, the last thing before it."""
    order = _ORDERS.get(trainer)
    if order is not None:
        (order.last if last else order.also).append(call)


def order_named(trainer: Any) -> bool:
    """Whether this fit's resume named a training sampler whose order no checkpoint holds: its batches
    differ from there on, and a warning about the same order says nothing more."""
    order = _ORDERS.get(trainer) if trainer is not None else None
    return order is not None and order.named


def saved_part(saved: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``saved[key]``, a mapping in a loaded checkpoint, or an empty one where it is none."""
    part: Any = saved.get(key)
    return cast("Mapping[str, Any]", part) if isinstance(part, Mapping) else {}


def where_resumed(point: Mapping[str, Any]) -> str:
    """As the other resume warnings name the point (``resume_load``)."""
    epoch, batch, kind = point.get("epoch", 0), point.get("batch", 0), point.get("kind")
    if kind == "batch":
        return f"resuming epoch {epoch} at batch {batch}"
    if kind == "batch_end":
        return f"resuming epoch {epoch} at the end of batch {batch}"
    if kind == "epoch_end":
        return f"resuming epoch {epoch} at its end"
    return f"resuming epoch {epoch} at its start"


def _state_of(sampler: Any) -> Any:
    """What makes ``sampler`` draw its next order again: its ``state_dict()``, its generator's state, or None."""
    state_dict = getattr(sampler, "state_dict", None)
    if callable(state_dict) and callable(getattr(sampler, "load_state_dict", None)):
        return {"state_dict": copy.deepcopy(state_dict())}
    generator = getattr(sampler, "generator", None)
    if isinstance(generator, torch.Generator):
        return {"generator": generator.get_state()}
    return None


def _load_state(sampler: Any, state: Mapping[str, Any]) -> None:
    if "state_dict" in state:
        sampler.load_state_dict(copy.deepcopy(state["state_dict"]))
    else:
        sampler.generator.set_state(state["generator"])


def _named(sampler: Any) -> str:
    return f"DistributedSamplerWrapper around {type(sampler).__module__}.{type(sampler).__qualname__}"
