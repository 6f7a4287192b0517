"""One process's running state at a resume point: what it holds, taken and put back.

- ``logged``: the training epoch's ``self.log(..., on_epoch=True)`` values, per key (Lightning's
  running ``value`` and, for a mean, ``cumulated_batch_size``), with how each was logged;
- ``metrics``: the states of every metric ``resume_metrics`` finds (module-held and declared);
- ``views``: the logger connector's ``callback_metrics``, ``logged_metrics`` and
  ``progress_bar_metrics``, which monitoring callbacks and plateau schedulers read;
- ``gradients``: the parameters' ``.grad``, where a point falls inside an accumulation window;
- ``step_row``: what a batch saved after its optimizer step logs at its end (``callback_metrics``,
  which the plateau schedulers read next; the logged row, which the resumed run writes at the batch's
  end it goes on from, as what runs after the point: the run that saved wrote it only where nothing
  stopped it before, and a ``ModelCheckpoint`` saving in ``on_train_batch_end`` comes before it).

Everything is copied to the CPU when saved and back to each object's device when restored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch

from lightning_step_types._lightning.fit_loop import epoch_end_views, logger_metric_dicts, step_row
from lightning_step_types._lightning.module_state import load_metric_states, metric_states, metric_states_on_cpu
from lightning_step_types._lightning.result_collection import (
    LoggedEntry,
    evaluation_results,
    logged_entries,
    logged_entries_at,
    logged_metric_objects,
)
from lightning_step_types.resume.fit_follower import FitFollower, Phase
from lightning_step_types.resume.points import Point

__all__ = ["rank_state", "restore_gradients", "restore_metrics", "restore_views", "type_name"]


def rank_state(follower: FitFollower, point: Point | None, trainer: Any, module: Any) -> dict[str, Any]:
    """This process's state at ``point``; a resumed run's saved values not back in Lightning's entries
    yet go in as they were."""
    rewound = point is not None and point.kind == "batch" and follower.phase == Phase.BATCH
    state: dict[str, Any] = {}
    if point is not None and point.kind in ("batch", "batch_end", "epoch_end"):
        pending: dict[str, Any]
        if rewound:
            pending, entries = follower.record.pending, logged_entries_at(follower.record.logged)
        else:
            resume: Any = follower.resume
            pending = cast("dict[str, Any]", resume.pending_logged()) if resume is not None else {}
            entries = logged_entries(follower.results)
        state["logged"] = {**pending, **_saved_logged(entries)}
    if rewound:
        state["metrics"] = {
            name: {"type": type_name(follower.metrics[name]), **metric_states_on_cpu(copied)}
            for name, copied in follower.record.metrics.items()
            if name in follower.metrics
        }
    elif point is not None and point.from_validation and follower.validation_metrics is not None:
        state["metrics"] = {
            name: {"type": type_name(follower.metrics[name]), **metric_states_on_cpu(copied)}
            for name, copied in follower.validation_metrics.items()
            if name in follower.metrics
        }
    else:
        # Lightning resets the metric objects logged in an epoch after the hooks a save may come from, which the
        # resumed run does not run again: training's after on_train_epoch_end, validation's after
        # on_validation_end (a ModelCheckpoint's save there): the resumed run starts them afresh
        reset: set[int] = set()
        if point is not None and point.after_epoch_end:
            reset = {id(metric) for metric, _ in logged_metric_objects(follower.results, since_reset=False)}
        elif point is not None and point.skip_validation and follower.phase == Phase.VALIDATION_END:
            validation = evaluation_results(trainer)
            reset = {id(metric) for metric, _ in logged_metric_objects(validation, since_reset=False)}
        state["metrics"] = {
            name: {"type": type_name(metric), **metric_states(metric)}
            for name, metric in follower.metrics.items()
            if id(metric) not in reset
        }
    views = logger_metric_dicts(trainer)
    if point is not None and point.from_validation and follower.validation_views is not None:
        views = follower.validation_views
    if point is not None and point.after_epoch_end:  # the epoch's values, which Lightning adds after the hooks
        added = epoch_end_views(trainer)
        views = {name: {**view, **added.get(name, {})} for name, view in views.items()}
    state["views"] = {name: _on_cpu(view) for name, view in views.items()}
    if point is not None and point.kind == "batch_end" and follower.phase == Phase.BATCH:
        state["step_row"] = {kind: _on_cpu(values) for kind, values in step_row(trainer).items()}
    if point is not None and point.keep_gradients:
        state["gradients"] = {
            name: parameter.grad.detach().cpu().clone()
            for name, parameter in module.named_parameters()
            if parameter.grad is not None
        }
    return state


def _saved_logged(entries: list[LoggedEntry]) -> dict[str, Any]:
    return {
        entry.key: {
            "key": entry.key,
            "shown": entry.shown,
            "fingerprint": list(entry.fingerprint),
            "meta": entry.meta,
            "metric_attribute": entry.metric_attribute,
            "tensors": _on_cpu(entry.tensors),
        }
        for entry in entries
        if entry.in_flight
    }


def _on_cpu(tensors: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value
        for name, value in tensors.items()
    }


def restore_metrics(live: Mapping[str, Any], saved: Mapping[str, Any]) -> list[str]:
    """Load each saved metric state into the live metric of that name; the names that could not be."""
    missing: list[str] = []
    for name, state in saved.items():
        metric = live.get(name)
        if metric is None or type_name(metric) != state["type"] or not _same_states(metric, state["states"]):
            missing.append(f"metric {name!r} ({state['type']})")
            continue
        load_metric_states(metric, state)
    return missing


def _same_states(metric: Any, saved: Mapping[str, Any]) -> bool:
    """Whether the saved states fit the live metric: the same names, and each tensor state's shape
    (a metric built with other arguments, ``num_classes`` say, has other shapes)."""
    live = metric.metric_state
    if set(live) != set(saved):
        return False
    return all(
        not isinstance(value, torch.Tensor)
        or (isinstance(saved[name], torch.Tensor) and value.shape == saved[name].shape)
        for name, value in live.items()
    )


def restore_views(trainer: Any, saved: Mapping[str, Mapping[str, Any]], replace: bool = False) -> None:
    """Put the logger connector's views back, on the device the run's values are on: beside what the resumed
    fit logged already (its on_fit_start and on_train_start hooks), or in place of it (``replace``: a fit with
    nothing left to train ends with the saved values, whatever a tuner's trials logged before)."""
    device = trainer.strategy.root_device
    for name, view in logger_metric_dicts(trainer).items():
        for key, value in saved.get(name, {}).items():
            value = value.to(device) if isinstance(value, torch.Tensor) else value
            if replace:
                view[key] = value
            else:
                view.setdefault(key, value)


def restore_gradients(module: Any, saved: Mapping[str, torch.Tensor]) -> list[str]:
    """Set each parameter's ``.grad`` to the saved one; the parameters that have none saved under their name."""
    missing: list[str] = []
    parameters = dict(module.named_parameters())
    for name, grad in saved.items():
        parameter = parameters.get(name)
        if parameter is None or parameter.shape != grad.shape:
            missing.append(f"the gradient of {name!r}")
            continue
        parameter.grad = grad.to(device=parameter.device, dtype=parameter.dtype)
    return missing


def type_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
