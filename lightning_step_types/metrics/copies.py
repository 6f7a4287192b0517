"""Declared metrics: one entry's copies in one stage (``StageCopies``), what the updates and their messages share.

``metrics`` builds them at setup, ``metric_updates`` updates and logs them after each step, and
``metric_messages`` names them in what goes wrong; each of those imports this module, which
imports none of them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from torchmetrics import Metric, MetricCollection


class Binding(Protocol):
    """The options the run time reads of a ``StepMetric`` (declared in ``metrics``); its ``update``
    is passed on its own."""

    @property
    def prog_bar(self) -> bool: ...

    @property
    def on_step(self) -> bool: ...

    @property
    def on_epoch(self) -> bool: ...

    @property
    def stages(self) -> Sequence[str]: ...


class CopyOwner(Protocol):
    """What holds the copies of one run's declared metrics (``metric_updates.MetricSet``)."""

    @property
    def declared_by(self) -> str: ...

    def register(self, stage_copies: StageCopies, dataloader_idx: int, metric: Metric | MetricCollection) -> None: ...


class StageCopies:
    """One entry in one stage: its copy per dataloader, and the names they are logged under."""

    __slots__ = (
        "entry", "stage", "binding", "read", "names", "first_name", "copies", "logged_first", "owner",
        "step_values", "epoch_values", "fed", "warned_unfed", "checked_one_value",
    )  # fmt: skip
    owner: CopyOwner
    entry: str
    stage: str
    binding: Binding
    read: Callable[[Any, Any], tuple[Any, ...]]
    names: dict[str | None, str]
    first_name: str
    step_values: bool
    epoch_values: bool
    fed: bool
    warned_unfed: bool
    checked_one_value: bool

    def __init__(
        self,
        owner: CopyOwner,
        entry: str,
        stage: str,
        binding: Binding,
        read: Callable[[Any, Any], tuple[Any, ...]],
        names: dict[str | None, str],
        first: Metric | MetricCollection,
    ) -> None:
        self.owner = owner
        self.entry = entry
        self.stage = stage
        self.binding = binding
        self.read = read  # the binding's update(result, batch)
        # `on_step` / `on_epoch` apply to training; validation and test log epoch values.
        self.step_values = bool(binding.on_step) and stage == "train"
        self.epoch_values = bool(binding.on_epoch) or stage != "train"
        self.names = names  # member key (or None) -> log name
        self.first_name = next(iter(self.names.values()))
        self.copies: dict[int, Metric | MetricCollection] = {0: first}  # dataloader index -> copy
        # dataloader index -> the object logged under first_name (the copy, or a collection's first member)
        self.logged_first: dict[int, Metric] = {0: _first_logged(first)}
        # Set at the copy's first update in an epoch (no cost per step); read and reset at the
        # stage's epoch end, which warns once per run about a copy the stage never fed.
        self.fed = False
        self.warned_unfed = False
        self.checked_one_value = False  # its first value was checked to be one number

    def copy_for(self, dataloader_idx: int) -> Metric | MetricCollection:
        found = self.copies.get(dataloader_idx)
        if found is None:
            # Another loader of this stage: a fresh copy made like the first (device, dtype included).
            found = copy.deepcopy(self.copies[0])
            found.reset()
            # Made mid-run, it is not among the modules whose train/eval mode Lightning records and
            # restores around validation: give it the mode of those made at setup.
            found.train()
            self.copies[dataloader_idx] = found
            self.logged_first[dataloader_idx] = _first_logged(found)
            self.owner.register(self, dataloader_idx, found)
        return found


def _first_logged(metric: Metric | MetricCollection) -> Metric:
    if isinstance(metric, MetricCollection):
        first: Metric = next(iter(metric.values(copy_state=False)))
        return first
    return metric
