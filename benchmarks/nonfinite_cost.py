"""What the non-finite loss check costs per step on CPU: ``nonfinite_loss=None`` against ``"raise"``.

Two measurements:

1. the check alone: ``check_training_return`` on a ``TrainStepResult`` whose loss has a graph, the
   way the adapter calls it once per step (best of several ``timeit`` repeats, so that other load
   on the machine inflates it least);
2. whole training steps: a ``TypedLightningModule`` (``Linear(32, 2)``, batch size 2, one thread)
   fitted for a few hundred steps under each policy, interleaved, median over repeats.

The check reads the loss on the host once per step (``loss.item()``): on CPU that is a plain read;
on a GPU it also waits for the step's kernels to finish, which this CPU benchmark cannot show.

Run from the repository root::

    python benchmarks/nonfinite_cost.py [--steps 400] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's package, uninstalled

import pytorch_lightning as pl  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from lightning_step_types import TrainStepResult, TypedLightningModule  # noqa: E402
from lightning_step_types.policy import StepPolicy  # noqa: E402
from lightning_step_types.step.checks import StepCall, check_training_return  # noqa: E402

POLICIES: tuple[str | None, ...] = (None, "raise")


class Classifier(TypedLightningModule):
    def __init__(self, nonfinite_loss: str | None) -> None:
        super().__init__()
        self.nonfinite_loss = nonfinite_loss  # type: ignore[assignment]
        self.net = torch.nn.Linear(32, 2)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def check_cost_us(policy: str | None, number: int, repeats: int) -> float:
    """Best-of-``repeats`` time of one ``check_training_return`` call, in microseconds."""
    module = Classifier(policy)
    call = StepCall(module, "training_step", StepPolicy.of(True, policy))
    x, y = torch.randn(2, 32), torch.tensor([0, 1])
    result = TrainStepResult(loss=F.cross_entropy(module.net(x), y))
    timings = timeit.repeat(lambda: check_training_return(result, call), number=number, repeat=repeats)
    return min(timings) / number * 1e6


def step_cost_us(policy: str | None, steps: int) -> float:
    """Mean wall time of one training step over a fit of ``steps`` batches, in microseconds."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(2 * steps, 32, generator=generator), torch.randint(0, 2, (2 * steps,), generator=generator)
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Classifier(policy)
    loader = DataLoader(data, batch_size=2)
    start = time.perf_counter()
    trainer.fit(model, loader)
    return (time.perf_counter() - start) / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps per fit")
    parser.add_argument("--repeats", type=int, default=5, help="fits (and timeit repeats) per policy")
    parser.add_argument("--number", type=int, default=20000, help="check calls per timeit repeat")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)

    check = {policy: check_cost_us(policy, args.number, args.repeats) for policy in POLICIES}
    steps: dict[str | None, list[float]] = {policy: [] for policy in POLICIES}
    step_cost_us(None, 20)  # warm-up: imports, first-call allocations
    for _ in range(args.repeats):  # interleaved, so that drifting load hits both policies alike
        for policy in POLICIES:
            steps[policy].append(step_cost_us(policy, args.steps))
    step = {policy: statistics.median(times) for policy, times in steps.items()}

    print(f"torch {torch.__version__}, pytorch_lightning {pl.__version__}, CPU, 1 thread")
    print(f"{'nonfinite_loss':>15} {'check alone (us)':>17} {'training step (us)':>19} {'fit-to-fit spread (us)':>23}")
    for policy in POLICIES:
        spread = max(steps[policy]) - min(steps[policy])
        print(f"{policy!r:>15} {check[policy]:>17.2f} {step[policy]:>19.1f} {spread:>23.1f}")
    cost = check["raise"] - check[None]
    print(
        f"the check costs {cost:.2f} us per step ({cost / step[None] * 100:.2f}% of a {step[None]:.0f} us step);"
        f" whole steps differ by {step['raise'] - step[None]:+.1f} us (medians of {args.repeats} fits)"
    )


if __name__ == "__main__":
    main()
