"""Per-step cost of the adapter's loss logging (``log_loss=True``) against the explicit ``self.log`` call.

Both modules are ``TypedLightningModule`` subclasses on the same ``Linear(32, 2)`` model, batch size 2,
one CPU thread; they differ only in who calls ``self.log("train_loss", loss, on_step=True,
on_epoch=True, prog_bar=True, batch_size=2)``: the user inside the step, or the adapter after it.
A third module logs nothing, to show what the logging itself costs.

A step's time is the interval between consecutive ``on_train_batch_start`` calls (the whole loop
iteration: step, logging, backward, optimizer, logger connector). Each repetition fits every variant
once, in rotating order, and keeps the median step time; the figures are medians over repetitions,
and the ratio is the median of each repetition's own adapter/explicit ratio.

Run: ``python benchmarks/loss_logging.py [--steps 400] [--repeats 15]``. Target: ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import pytorch_lightning as pl  # noqa: E402
from step_timing import interleaved_step_times  # noqa: E402  (benchmarks/ is sys.path[0])

from lightning_step_types import TrainStepResult, TypedLightningModule  # noqa: E402

BATCH_SIZE = 2


class LinearParts:
    net: torch.nn.Linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)  # type: ignore[attr-defined]


class AdapterLogs(LinearParts, TypedLightningModule):
    log_loss = True

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(32, 2)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self(x), y), batch_size=BATCH_SIZE)


class ExplicitLog(LinearParts, TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(32, 2)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=BATCH_SIZE)
        return TrainStepResult(loss=loss, batch_size=BATCH_SIZE)


class NoLogging(LinearParts, TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(32, 2)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self(x), y), batch_size=BATCH_SIZE)


VARIANTS: dict[str, type[pl.LightningModule]] = {
    "adapter log_loss": AdapterLogs,
    "explicit self.log": ExplicitLog,
    "no logging": NoLogging,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps per fit")
    parser.add_argument("--repeats", type=int, default=15, help="fits per variant, interleaved")
    args = parser.parse_args()

    times = interleaved_step_times(VARIANTS, NoLogging, args.steps, args.repeats, BATCH_SIZE)
    median = {name: statistics.median(values) for name, values in times.items()}
    adapter, explicit, bare = median["adapter log_loss"], median["explicit self.log"], median["no logging"]
    print(
        f"torch {torch.__version__}, pytorch_lightning {pl.__version__}, 1 thread, Linear(32, 2), batch size {BATCH_SIZE}"
    )
    print(f"{args.repeats} interleaved fits of {args.steps} steps per variant; median of per-fit median step times")
    for name in VARIANTS:
        spread = f"{min(times[name]) * 1e6:.1f}-{max(times[name]) * 1e6:.1f}"
        print(f"  {name:<18} {median[name] * 1e6:8.1f} us/step   (per-fit medians {spread} us)")
    print(
        f"  logging cost: adapter {(adapter - bare) * 1e6:.1f} us, explicit {(explicit - bare) * 1e6:.1f} us per step"
    )
    # Each repetition's own ratio cancels load that drifts between repetitions (a shared machine).
    paired = sorted(a / e for a, e in zip(times["adapter log_loss"], times["explicit self.log"], strict=True))
    ratio = statistics.median(paired)
    print(f"  ratio of medians: {adapter / explicit:.3f}; per-repetition ratios {paired[0]:.3f}-{paired[-1]:.3f}")
    print(
        f"ratio adapter / explicit (median per-repetition): {ratio:.3f} (target <= 1.05: {'met' if ratio <= 1.05 else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
