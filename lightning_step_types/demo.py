"""A complete training run with typed step results: ``python -m lightning_step_types.demo``.

It trains a small classifier on a synthetic "two moons" problem (made with a seeded
``torch.Generator``: nothing is downloaded) as a ``TypedLightningModule`` whose steps return
``TrainStepResult`` / ``ValStepResult``, with the usual Lightning parts around it: the default
progress bar (on a terminal; elsewhere, in a CI log or a file, one line per epoch), a ``CSVLogger``, a ``ModelCheckpoint`` on ``val_loss``, validation every epoch,
and a final ``trainer.test`` on the best checkpoint. A ``TypedCallback`` reads the test
predictions from each ``ValStepResult``'s metadata (its ``on_test_batch_result`` hook) to build
a confusion matrix.

It runs on CPU in well under a minute and prints where its outputs are.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint, TQDMProgressBar
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric, TrainStepResult, ValStepResult
from lightning_step_types.pytorch_lightning import TypedCallback, TypedLightningModule

__all__ = ["ConfusionMatrix", "DemoResult", "MoonsClassifier", "main", "make_moons", "train_and_test"]

TRAIN_SIZE, VAL_SIZE, TEST_SIZE = 1024, 256, 256
TRAIN_BATCH_SIZE, EVAL_BATCH_SIZE = 32, 64
LOG_EVERY_N_STEPS = 8  # divides the 32 training batches of an epoch: 4 step rows per epoch in metrics.csv
DEFAULT_MAX_EPOCHS = 20
DEFAULT_OUTPUT_DIR = Path("demo_outputs")
SEED = 0
# The demo's last printed line.
NEXT_STEP = (
    "Next: read this run's source, lightning_step_types/demo.py, then docs/quickstart.md to type your own module."
)


def make_moons(size: int, generator: torch.Generator, noise: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved half circles in the plane, labelled 0 and 1: not linearly separable."""
    labels = torch.randint(0, 2, (size,), generator=generator)
    angle = torch.rand(size, generator=generator) * math.pi
    upper = torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    lower = torch.stack([1.0 - torch.cos(angle), 0.5 - torch.sin(angle)], dim=1)
    points = torch.where(labels[:, None] == 0, upper, lower)
    return points + noise * torch.randn(size, 2, generator=generator), labels


class MoonsClassifier(TypedLightningModule):
    """A small MLP whose steps log with ``self.log`` and return typed results."""

    def __init__(self, hidden: int = 32, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()  # so that load_from_checkpoint needs no arguments
        self.lr = lr
        self.net: torch.nn.Sequential = torch.nn.Sequential(
            torch.nn.Linear(2, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 2),
        )

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.net(points)
        return logits

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> TrainStepResult:
        points, labels = batch
        logits = self(points)
        loss = F.cross_entropy(logits, labels)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return TrainStepResult(loss=loss, metadata={"preds": logits.argmax(dim=1)})

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> ValStepResult:
        return self._evaluate(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> ValStepResult:
        return self._evaluate(batch, "test")

    def _evaluate(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> ValStepResult:
        points, labels = batch
        logits = self(points)
        loss = F.cross_entropy(logits, labels)
        self.log(f"{stage}_loss", loss, prog_bar=True)
        return ValStepResult(loss=loss, metadata={"preds": logits.argmax(dim=1), "target": labels})

    def configure_step_metrics(self) -> dict[str, StepMetric[ValStepResult]]:
        # `val_acc` / `test_acc`: the accuracy over each epoch's samples, fed by every ValStepResult.
        accuracy = MulticlassAccuracy(num_classes=2, average="micro")
        return {
            "acc": StepMetric(
                accuracy,
                update=lambda result, batch: (result.metadata["preds"], batch[1]),
                stages=("val", "test"),
                prog_bar=True,
            )
        }

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class ConfusionMatrix(TypedCallback):
    """Counts test predictions per (true class, predicted class) from each ``ValStepResult``."""

    def __init__(self, num_classes: int = 2) -> None:
        self.counts: torch.Tensor = torch.zeros(num_classes, num_classes, dtype=torch.long)

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.counts.zero_()

    def on_test_batch_result(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        result: ValStepResult | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        # A TypedCallback's result hooks receive the step's ValStepResult (None if the step
        # returned None), typed exactly: no isinstance, no cast. Lightning's dict stays with
        # on_test_batch_end, which is left as it is.
        if result is None:
            return
        metadata = result.metadata
        target: torch.Tensor = metadata["target"]
        preds: torch.Tensor = metadata["preds"]
        num_classes = self.counts.shape[0]
        flat = torch.bincount(target * num_classes + preds, minlength=num_classes * num_classes)
        self.counts += flat.reshape(num_classes, num_classes).cpu()

    def as_lists(self) -> list[list[int]]:
        """The counts as rows of ints: ``[true class][predicted class]``."""
        size = self.counts.shape[0]
        return [[int(self.counts[true, predicted]) for predicted in range(size)] for true in range(size)]


class DemoResult(TypedDict):
    """What ``main`` returns: where the outputs are, and the metrics it printed."""

    log_dir: Path
    metrics_csv: Path
    best_checkpoint: Path
    best_val_loss: float
    val_metrics: dict[str, float]
    test_metrics: dict[str, float]
    confusion_matrix: list[list[int]]
    seconds: float


class EpochLines(pl.Callback):
    """One line per epoch, in place of the progress bar's redraws where stdout is not a terminal."""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = trainer.callback_metrics
        shown = {"train_loss": "train_loss_epoch", "val_loss": "val_loss", "val_acc": "val_acc"}
        values = "  ".join(f"{name}={float(metrics[key]):.4f}" for name, key in shown.items() if key in metrics)
        print(f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}  {values}", flush=True)


def _dataloaders(seed: int) -> tuple[DataLoader[Any], DataLoader[Any], DataLoader[Any]]:
    generator = torch.Generator().manual_seed(seed)
    train = TensorDataset(*make_moons(TRAIN_SIZE, generator))
    val = TensorDataset(*make_moons(VAL_SIZE, generator))
    test = TensorDataset(*make_moons(TEST_SIZE, generator))
    shuffle = torch.Generator().manual_seed(seed + 1)
    return (
        DataLoader(train, batch_size=TRAIN_BATCH_SIZE, shuffle=True, generator=shuffle),
        DataLoader(val, batch_size=EVAL_BATCH_SIZE),
        DataLoader(test, batch_size=EVAL_BATCH_SIZE),
    )


def _floats(metrics: Mapping[str, Any], prefix: str) -> dict[str, float]:
    return {name: float(value) for name, value in sorted(metrics.items()) if name.startswith(prefix)}


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_step_types.demo",
        description="Train a small classifier with typed step results on synthetic data (CPU, no download).",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help="where the CSV logs and checkpoints go (default: ./demo_outputs)",
    )
    parser.add_argument(
        "--max-epochs",
        type=int,
        default=DEFAULT_MAX_EPOCHS,
        help=f"training epochs (default: {DEFAULT_MAX_EPOCHS})",
    )
    args = parser.parse_args(argv)
    if args.max_epochs < 1:
        parser.error("--max-epochs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> DemoResult:
    """Run the demo with command-line style arguments; print and return the output paths and metrics."""
    args = _parse_args(argv)
    # A 1.2k-parameter model gains nothing from intra-op threads, and on a busy machine their
    # spin-waiting makes the run several times slower. The setting is restored for callers of main().
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():  # these filters end with the run, also when main() is called from code
            # With num_workers=0 Lightning suggests more workers; for in-memory points they would only add start-up time.
            warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
            # Lightning 2.6 still checks torch's deprecated LeafSpec; nothing a user of this demo can act on.
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
            result = train_and_test(args.output_dir.resolve(), args.max_epochs)
    finally:
        torch.set_num_threads(threads)
    _report(result)
    return result


def train_and_test(output_dir: Path, max_epochs: int) -> DemoResult:
    """Fit with validation each epoch, keep the best checkpoint by ``val_loss``, test it."""
    started = time.perf_counter()
    pl.seed_everything(SEED, verbose=False)
    train_loader, val_loader, test_loader = _dataloaders(SEED)
    model = MoonsClassifier()
    logger = CSVLogger(save_dir=output_dir, name="demo")  # a new version_N directory per run
    log_dir = Path(logger.log_dir)
    checkpoint = ModelCheckpoint(
        dirpath=log_dir / "checkpoints",
        filename="best-{epoch:02d}-{val_loss:.4f}",
        monitor="val_loss",
        mode="min",
        save_top_k=1,
    )
    confusion = ConfusionMatrix()
    # The progress bar redraws itself in place: on a terminal one line, in a CI log or a file
    # hundreds of kilobytes.
    on_terminal = sys.stdout.isatty()
    progress: pl.Callback = TQDMProgressBar() if on_terminal else EpochLines()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        logger=logger,
        callbacks=[progress, checkpoint, confusion],
        enable_progress_bar=on_terminal,
        log_every_n_steps=LOG_EVERY_N_STEPS,
        default_root_dir=output_dir,
    )
    trainer.fit(model, train_dataloaders=train_loader, val_dataloaders=val_loader)
    val_metrics = _floats(trainer.callback_metrics, "val_")
    test_metrics = _floats(trainer.test(model, dataloaders=test_loader, ckpt_path="best", verbose=False)[0], "test_")

    best_score = checkpoint.best_model_score
    best_path = str(checkpoint.state_dict()["best_model_path"])  # the attribute's declared type is partly unknown
    return {
        "log_dir": log_dir,
        "metrics_csv": log_dir / ExperimentWriter.NAME_METRICS_FILE,
        "best_checkpoint": Path(best_path),
        "best_val_loss": float(best_score) if best_score is not None else math.nan,
        "val_metrics": val_metrics,
        "test_metrics": test_metrics,
        "confusion_matrix": confusion.as_lists(),
        "seconds": time.perf_counter() - started,
    }


def _report(result: DemoResult) -> None:
    def metrics(values: dict[str, float]) -> str:
        return "  ".join(f"{name}={value:.4f}" for name, value in values.items())

    print()
    print(f"Trained and tested in {result['seconds']:.1f} s. Outputs:")
    print(f"  metrics (CSV):       {result['metrics_csv']}")
    print(f"  best checkpoint:     {result['best_checkpoint']}  (val_loss={result['best_val_loss']:.4f})")
    print(f"  last validation:     {metrics(result['val_metrics'])}")
    print(f"  test (best ckpt):    {metrics(result['test_metrics'])}")
    print(f"  test confusion matrix (rows: true class, columns: predicted): {result['confusion_matrix']}")
    print(NEXT_STEP)


if __name__ == "__main__":
    main()
