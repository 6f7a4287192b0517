"""Per-step cost of declared metrics (``StepMetric``) against the hand-written pattern, side by side.

Every variant is a ``TypedLightningModule`` on the same ``Linear(32, 2)`` model, batch size 2, one
CPU thread, with a ``MulticlassAccuracy`` on the training step:

- ``hand-written``: ``self.train_acc.update(logits, y)`` and ``self.log("train_acc", self.train_acc,
  on_step=False, on_epoch=True)`` in the step, on every step (torchmetrics' recommended pattern);
- ``declared``: ``configure_step_metrics`` returns ``{"acc": StepMetric(MulticlassAccuracy(2), update=...)}``:
  updated after each step, logged with ``self.log`` once per epoch;
- the same two with training step values: ``self.train_acc(logits, y)`` and ``self.log(...,
  on_step=True, on_epoch=True)`` against ``StepMetric(..., on_step=True)``;
- ``no metric``: what the metric costs at all.

A step's time is the interval between consecutive ``on_train_batch_start`` calls (step, metric,
logging, backward, optimizer, logger connector). Each repetition fits every variant once, in
rotating order, and keeps the median step time; each ratio is the median over repetitions of that
repetition's declared/hand-written ratio, which cancels load that drifts between repetitions.

Run: ``python benchmarks/metrics_cost.py [--steps 300] [--repeats 7]`` (about a minute on 2 idle
cores; ``--quick`` about 15 s). Target: ratio <= 1.00 for epoch values.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import pytorch_lightning as pl  # noqa: E402
from step_timing import interleaved_step_times  # noqa: E402  (benchmarks/ is sys.path[0])

from lightning_step_types import StepMetric, TrainStepResult, TypedLightningModule  # noqa: E402

BATCH_SIZE = 2


class Parts(TypedLightningModule):
    on_step = False

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(32, 2)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class NoMetric(Parts):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.net(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})


class HandWritten(NoMetric):
    def __init__(self) -> None:
        super().__init__()
        self.train_acc = MulticlassAccuracy(2)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.net(x)
        if self.on_step:
            self.train_acc(logits.detach(), y)
        else:
            self.train_acc.update(logits.detach(), y)
        self.log("train_acc", self.train_acc, on_step=self.on_step, on_epoch=True)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits.detach()})


class Declared(NoMetric):
    def configure_step_metrics(self) -> dict[str, StepMetric[Any]]:
        return {
            "acc": StepMetric(
                MulticlassAccuracy(2),
                update=lambda result, batch: (result.metadata["logits"], batch[1]),
                stages=("train",),
                on_step=self.on_step,
            )
        }


class HandWrittenSteps(HandWritten):
    on_step = True


class DeclaredSteps(Declared):
    on_step = True


VARIANTS: dict[str, type[pl.LightningModule]] = {
    "no metric": NoMetric,
    "hand-written (epoch)": HandWritten,
    "declared (epoch)": Declared,
    "hand-written (step+epoch)": HandWrittenSteps,
    "declared (step+epoch)": DeclaredSteps,
}
PAIRS = [("declared (epoch)", "hand-written (epoch)"), ("declared (step+epoch)", "hand-written (step+epoch)")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per fit")
    parser.add_argument("--repeats", type=int, default=7, help="fits per variant, interleaved")
    parser.add_argument("--quick", action="store_true", help="150 steps, 3 repeats (noisier)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 150, 3

    times = interleaved_step_times(VARIANTS, NoMetric, args.steps, args.repeats, BATCH_SIZE)
    median = {name: statistics.median(values) for name, values in times.items()}
    bare = median["no metric"]
    print(
        f"torch {torch.__version__}, pytorch_lightning {pl.__version__}, 1 thread, Linear(32, 2), batch size {BATCH_SIZE}"
    )
    print(f"{args.repeats} interleaved fits of {args.steps} steps per variant; median of per-fit median step times")
    for name in VARIANTS:
        spread = f"{min(times[name]) * 1e6:.1f}-{max(times[name]) * 1e6:.1f}"
        extra = "" if name == "no metric" else f"   metric cost {(median[name] - bare) * 1e6:+7.1f} us"
        print(f"  {name:<26} {median[name] * 1e6:8.1f} us/step   (per-fit {spread} us){extra}")
    for declared, hand in PAIRS:
        paired = sorted(d / h for d, h in zip(times[declared], times[hand], strict=True))
        ratio = statistics.median(paired)
        verdict = "met" if ratio <= 1.00 else "NOT met"
        print(
            f"ratio {declared} / {hand}: {ratio:.3f} (per-repetition {paired[0]:.3f}-{paired[-1]:.3f};"
            f" target <= 1.00: {verdict})"
        )


if __name__ == "__main__":
    main()
