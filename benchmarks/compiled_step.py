"""A compiled typed step against a compiled plain step: ``trainer.fit(torch.compile(model))``.

The same ``Linear(32, 2)`` model, batch size 2, one CPU thread, as in ``step_overhead.py``,
compiled whole with inductor (Lightning compiles ``forward`` and ``training_step``): a plain
``LightningModule`` returning the loss or a dict, a ``TypedLightningModule`` returning
``TrainStepResult(loss)`` or ``TrainStepResult(loss, metadata)``, and ``StepResultAdapter()`` on
the dict module; the plain module uncompiled shows what compiling itself changes at this size.
Three more variants call ``self.log("train_loss", loss)`` in the step: the plain module uncompiled
(compiled, its ``self.log`` fails under torch 2.13), the typed module (its calls are made after the
compiled step returns), and the typed module with Lightning's own ``self.log`` inside the compiled
graph (its ``log`` calls ``LightningModule.log``: what the typed module avoids).

A step's time is the interval between consecutive ``on_train_batch_start`` calls, the median after
the first steps (which compile). Each repetition fits every variant once, in rotating order, after
``torch._dynamo.reset()`` (inductor's cache makes the recompilation quick); the figures are medians
over repetitions, and each ratio is the median of the repetitions' own ratios to the baseline. The
graph-break column is dynamo's ``counters["graph_break"]`` for the variant's first fit.

Run: ``python benchmarks/compiled_step.py [--steps 300] [--repeats 7]``; ``--quick`` for a rough figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import pytorch_lightning as pl  # noqa: E402
from step_timing import StepClock, in_turns, quiet_single_thread_loader, quiet_trainer  # noqa: E402  (benchmarks/ is sys.path[0])

from lightning_step_types import StepResultAdapter, TrainStepResult, TypedLightningModule  # noqa: E402

BATCH_SIZE = 2
WARMUP_STEPS = 20  # the first steps compile (and recompile once, when Lightning's loop settles)


class LinearParts:
    layer: torch.nn.Linear

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(32, 2)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.01)


class PlainLoss(LinearParts, pl.LightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.layer(x), y)


class PlainDict(LinearParts, pl.LightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = self.layer(x)
        return {"loss": F.cross_entropy(logits, y), "logits": logits}


class TypedLoss(LinearParts, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.layer(x), y))


class TypedMetadata(LinearParts, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.layer(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits})


class PlainLogged(LinearParts, pl.LightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        return loss


class TypedLogged(LinearParts, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss)


class TypedLightningLogged(TypedLogged):
    def log(self, *args: Any, **kwargs: Any) -> None:
        pl.LightningModule.log(self, *args, **kwargs)


# name -> (model class, adapter?, compiled?, baseline name)
VARIANTS: dict[str, tuple[type[pl.LightningModule], bool, bool, str | None]] = {
    "plain: return loss, eager": (PlainLoss, False, False, None),
    "plain: return loss": (PlainLoss, False, True, None),
    "plain: return {'loss', 'logits'}": (PlainDict, False, True, None),
    "typed: TrainStepResult(loss)": (TypedLoss, False, True, "plain: return loss"),
    "typed: TrainStepResult(loss, metadata)": (TypedMetadata, False, True, "plain: return {'loss', 'logits'}"),
    "StepResultAdapter() on the dict module": (PlainDict, True, True, "plain: return {'loss', 'logits'}"),
    "plain: self.log, return loss, eager": (PlainLogged, False, False, None),
    "typed: self.log, TrainStepResult(loss)": (TypedLogged, False, True, "plain: self.log, return loss, eager"),
    "typed: Lightning's self.log in the graph": (
        TypedLightningLogged,
        False,
        True,
        "plain: self.log, return loss, eager",
    ),
}


def fit_once(name: str, loader: DataLoader[Any], steps: int) -> tuple[float, int]:
    """One fit of a variant: (median step time in seconds after the warm-up, graph breaks counted)."""
    model_class, adapter, compiled, _ = VARIANTS[name]
    clock = StepClock()
    callbacks: list[pl.Callback] = [clock, StepResultAdapter()] if adapter else [clock]
    trainer = quiet_trainer(steps, callbacks)
    torch._dynamo.reset()
    counters.clear()
    model = model_class()
    trainer.fit(torch.compile(model) if compiled else model, loader)
    breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return clock.median_step(warmup=WARMUP_STEPS), breaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="100 steps, 3 repetitions: a rough figure")
    args = parser.parse_args()
    steps, repeats = (100, 3) if args.quick else (args.steps, args.repeats)

    loader = quiet_single_thread_loader(steps, BATCH_SIZE)
    names = list(VARIANTS)
    breaks: dict[str, int] = {}
    fit_once("plain: return loss", loader, 50)  # warms up imports, inductor's cache and the allocator

    def fit(name: str) -> float:
        seconds, counted = fit_once(name, loader, steps)
        breaks.setdefault(name, counted)
        return seconds

    times = in_turns(names, fit, repeats)

    print(f"torch {torch.__version__}, pytorch-lightning {pl.__version__}, 1 CPU thread, inductor")
    print(f"{repeats} fits of {steps} steps per variant, in turns; median step time after {WARMUP_STEPS} steps\n")
    header = f"{'variant':<42} {'µs/step':>9} {'ratio':>7} {'graph breaks':>13}"
    print(header)
    print("-" * len(header))
    for name in names:
        baseline = VARIANTS[name][3]
        ratio = ""
        if baseline is not None:
            ratio = f"{statistics.median(t / b for t, b in zip(times[name], times[baseline])):.3f}"
        print(f"{name:<42} {statistics.median(times[name]) * 1e6:>9.1f} {ratio:>7} {breaks[name]:>13}")


if __name__ == "__main__":
    main()
