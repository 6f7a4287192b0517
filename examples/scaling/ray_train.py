"""The Ray Train recipe (docs/scaling.md), complete: the scaling recipes' model and data, trained by two
Ray workers with ``RayDDPStrategy``, and a fault to watch Ray restart them from a mid-epoch checkpoint.

    python ray_train.py --fault

Ray starts two workers (``ScalingConfig(num_workers=2)``); each fits the model on its half of the data.
A callback reports every checkpoint ``ModelCheckpoint(every_n_train_steps=4)`` saves to Ray, and
``FailureConfig(max_failures=1)`` lets Ray restart both workers from the last one reported.
``--fault``: rank 1 raises in epoch 1, batch 5, once (a marker file in ``ckpt/`` keeps the restarted
run from doing it again). The restarted run resumes from step 20's ``last.ckpt`` and ends as the run
that was never interrupted: rank 0's ``csv/version_1/metrics.csv`` holds the same rows from its start on.

Ray Train builds on the ``lightning`` package where it is installed (``pip install
"lightning-step-types[ray]"`` installs it): Lightning is imported as ``lightning.pytorch``, and the
typed module from ``lightning_step_types.lightning_pytorch``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import ray
import ray.train
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer
from ray.train.torch import TorchTrainer
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler  # type: ignore[import-untyped]

from lightning_step_types import TrainStepResult
from lightning_step_types.lightning_pytorch import TypedLightningModule

FAULT_AT = (1, 5)  # (epoch, batch)
EVERY = 4  # a checkpoint every 4 optimizer steps


class MyModel(TypedLightningModule):
    def __init__(self, fault_marker: Path | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(8, 2)
        self.fault_marker = fault_marker

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        self.inject_fault(batch_idx)
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_max", loss, on_epoch=True, reduce_fx="max")
        return TrainStepResult(loss=loss)

    def inject_fault(self, batch_idx: int) -> None:
        marker = self.fault_marker
        if marker is None or (self.current_epoch, batch_idx) != FAULT_AT or self.global_rank != 1:
            return
        if not marker.exists():
            marker.touch()
            raise RuntimeError(f"simulated fault on rank {self.global_rank}")

    def train_dataloader(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(120, 8, generator=generator)
        y = torch.randint(0, 2, (120,), generator=generator)
        data = TensorDataset(x, y)
        # torchdata's sampler and loader: a checkpoint holds the data order, mid-epoch too
        return StatefulDataLoader(data, batch_size=4, sampler=StatefulDistributedSampler(data, shuffle=True))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


class ReportCheckpoints(pl.Callback):
    """Reports each checkpoint to Ray at the batch after its save (ModelCheckpoint saves after every
    other callback's on_train_batch_end), from every worker, as ``ray.train.report`` requires."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.reported = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step and step % EVERY == 0 and step != self.reported:
            self.reported = step
            checkpoint = Checkpoint.from_directory(str(self.directory)) if trainer.global_rank == 0 else None
            ray.train.report({"step": step}, checkpoint=checkpoint)


def ray_trainer(root: Path) -> pl.Trainer:
    """The Trainer each Ray worker fits with; ``root`` absolute, as Ray runs workers in a folder of its own."""
    return prepare_trainer(
        pl.Trainer(
            accelerator="cpu",
            devices="auto",
            strategy=RayDDPStrategy(),
            plugins=[RayLightningEnvironment()],
            max_epochs=3,
            callbacks=[
                ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=EVERY, save_last=True),
                ReportCheckpoints(root / "ckpt"),
            ],
            logger=CSVLogger(root, name="csv"),
            log_every_n_steps=1,
            enable_progress_bar=False,
        )
    )


def fit(trainer: pl.Trainer, model: pl.LightningModule) -> None:
    """The first time afresh; after a restart, from the checkpoint reported last."""
    restored = ray.train.get_checkpoint()
    with restored.as_directory() if restored else contextlib.nullcontext() as directory:
        trainer.fit(model, ckpt_path=f"{directory}/last.ckpt" if directory else None)


def train_loop(config: dict[str, Any]) -> None:
    """What each Ray worker runs."""
    root = Path(config["root"])
    fit(ray_trainer(root), MyModel(root / "ckpt" / "fault-done" if config["fault"] else None))


def run_on_ray(loop: Any, config: dict[str, Any], root: Path) -> None:
    """``loop(config)`` on two Ray workers, both restarted once after a fault, from the last checkpoint reported."""
    (root / "ckpt").mkdir(exist_ok=True)
    TorchTrainer(
        loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name="train",
            storage_path=str(root / "ray"),
            failure_config=FailureConfig(max_failures=1),
            checkpoint_config=CheckpointConfig(num_to_keep=1),
        ),
    ).fit()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="The Ray Train recipe (docs/scaling.md).")
    parser.add_argument("--fault", action="store_true", help="fail once on rank 1 in epoch 1, batch 5")
    args = parser.parse_args(argv)
    root = Path.cwd()
    run_on_ray(train_loop, {"root": str(root), "fault": args.fault}, root)


if __name__ == "__main__":
    main(sys.argv[1:])
