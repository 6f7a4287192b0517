"""What a user tells exact resume: a metric to leave out of checkpoints."""

from __future__ import annotations

from typing import TypeVar

from torchmetrics import Metric, MetricCollection

from lightning_step_types.resume.metric_state import NOT_RESUMED

__all__ = ["not_resumed"]

MetricT = TypeVar("MetricT", Metric, MetricCollection)


def not_resumed(metric: MetricT) -> MetricT:
    """Keep ``metric`` (a ``Metric`` or ``MetricCollection``) out of checkpoints; returns it.

    Every checkpoint of a ``TypedLightningModule``, or under ``StepResultAdapter()``, carries the
    states of the torchmetrics objects the module holds, so that a resumed run goes on with them.
    ``self.fid = not_resumed(FrechetInceptionDistance())`` leaves one out (a large state, or one a
    run rebuilds on purpose): a resumed run starts it from its current state, as plain Lightning does.
    """
    object.__setattr__(metric, NOT_RESUMED, True)  # a plain attribute: nn.Module's __setattr__ registers modules only
    return metric
