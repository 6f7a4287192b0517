"""Declared metrics: reading their live copies (in hooks, for exact resume, in tests).

The copies are made at setup (``metrics.build_metric_set``) and updated after each step
(``metric_updates``); these functions find them on a module, whoever declared them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

from torchmetrics import Metric, MetricCollection

from lightning_step_types.errors import StepResultError
from lightning_step_types.metrics.updates import STAGES, MetricSet
from lightning_step_types.step.adapter import module_state


def metric_sets_of(module: Any) -> list[MetricSet]:
    return [s for s in module_state(module).metric_sets.values() if isinstance(s, MetricSet)]


def step_metric_objects(module: Any) -> dict[str, Metric]:
    """The live copies of a module's declared metrics, by stable name.

    Keys are ``"{stage}/{entry}"`` (``"train/acc"``, ``"val/acc"``), with
    ``"/dataloader_idx_{N}"`` for the copies of validation/test dataloaders after the first
    (made when that loader first runs), and for a ``MetricCollection`` one key per member:
    ``"train/scores/MulticlassAccuracy"`` (the members are what Lightning computes and resets).
    Works for metrics declared by a ``TypedLightningModule`` or a ``StepResultAdapter``, from
    setup on; the training copies exist from setup, so their state can be restored before the
    first step.
    """
    found: dict[str, Metric] = {}
    for metric_set in metric_sets_of(module):
        found.update(metric_set.objects())
    return found


def iter_stage_copies(module: Any) -> Iterator[tuple[str, str, int, Metric | MetricCollection]]:
    """(stage, entry, dataloader index, copy) for each copy of the module's declared metrics."""
    for metric_set in metric_sets_of(module):
        for sc in metric_set.stage_copies:
            for idx, metric in sc.copies.items():
                yield sc.stage, sc.entry, idx, metric


def declared_metric(module: Any, name: str, stage: str = "val", dataloader_idx: int = 0) -> Metric | MetricCollection:
    """The live copy of the declared metric ``name`` for ``stage`` and ``dataloader_idx``.

    The object Lightning computes, syncs and resets at each epoch's end, so inside
    ``on_validation_epoch_end`` its ``compute()`` is the epoch value about to be logged (and
    computing it there costs nothing more: torchmetrics caches the value for Lightning). Works
    for metrics declared by a ``TypedLightningModule`` or a ``StepResultAdapter``, from setup on.
    """
    where = (
        f"declared_metric({name!r}, stage={stage!r}"
        + (f", dataloader_idx={dataloader_idx}" if dataloader_idx else "")
        + ")"
    )
    found = [sc for metric_set in metric_sets_of(module) for sc in metric_set.stage_copies if sc.stage == stage]
    for stage_copies in found:
        if stage_copies.entry == name:
            metric = stage_copies.copies.get(dataloader_idx)
            if metric is not None:
                return metric
            raise StepResultError(
                where,
                f"no copy for dataloader {dataloader_idx} yet: copies {sorted(stage_copies.copies)} exist",
                "a dataloader that has run a batch: the copy of each further loader is made at its first batch",
                "read it once that loader has run, e.g. in on_validation_epoch_end",
                type(module).__qualname__,
            )
    entries = [sc.entry for sc in found]
    if stage not in STAGES:
        fix = "pass stage='train', 'val' or 'test'"
    elif not metric_sets_of(module):
        fix = "read it from setup on (the copies are made at setup), e.g. in on_validation_epoch_end"
    else:
        close = difflib.get_close_matches(name, entries, n=1, cutoff=0.6)
        fix = f"read {close[0]!r}" if close else f"declare {name!r} for stage {stage!r}, or read one of {entries}"
    raise StepResultError(
        where,
        f"no declared metric {name!r} in stage {stage!r}; the stage's declared metrics are {entries}",
        "the key of an entry declared for that stage (configure_step_metrics or StepResultAdapter(metrics=...))",
        fix,
        type(module).__qualname__,
    )
