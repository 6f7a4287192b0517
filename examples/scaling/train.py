"""The training script of the scaling-out recipes (docs/scaling.md), complete: a model, its data, and
a fault to watch a run resume exactly.

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nproc-per-node=2 --max-restarts=1 train.py --fault

``--fault``: rank 1 raises in epoch 1, batch 5 (under ``--slurm``, every rank gets SLURM's requeue
signal there instead), once: a marker file in ``ckpt/`` keeps the restarted run from doing it again.
The restarted run resumes from ``ckpt/last.ckpt`` (a requeued SLURM job from ``hpc_ckpt_1.ckpt``) and
ends as the run that was never interrupted: rank 0's ``csv/version_<N>/metrics.csv`` holds the same rows.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.plugins.environments import SLURMEnvironment
from pytorch_lightning.strategies import ModelParallelStrategy
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler  # type: ignore[import-untyped]

from lightning_step_types import TrainStepResult, TypedLightningModule

FAULT_AT = (1, 5)  # (epoch, batch)
MARKER = Path("ckpt") / "fault-done"


class MyModel(TypedLightningModule):
    def __init__(self, fault: str | None = None, fsdp2: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(8, 2)
        self.fault, self.fsdp2 = fault, fsdp2

    def configure_model(self) -> None:
        if self.fsdp2:  # shard the layer over the data-parallel ranks
            from torch.distributed.fsdp import fully_shard

            fully_shard(self.net, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        self.inject_fault(batch_idx)
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_max", loss, on_epoch=True, reduce_fx="max")
        return TrainStepResult(loss=loss)

    def inject_fault(self, batch_idx: int) -> None:
        if self.fault is None or (self.current_epoch, batch_idx) != FAULT_AT:
            return
        marker = MARKER.with_name(f"{MARKER.name}-{self.global_rank}")
        if marker.exists():
            return
        if self.fault == "signal":  # SLURM's requeue signal, as SLURM sends it to every task
            marker.touch()
            os.kill(os.getpid(), signal.SIGUSR1)
        elif self.global_rank == 1:
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


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="The scaling-out recipes' training script (docs/scaling.md).")
    parser.add_argument("--nodes", type=int, default=1, help="Trainer(num_nodes=...)")
    parser.add_argument("--devices", type=int, default=2, help="processes per node")
    parser.add_argument("--strategy", choices=["ddp", "fsdp2"], default="ddp")
    parser.add_argument("--slurm", action="store_true", help="SLURMEnvironment(auto_requeue=True)")
    parser.add_argument("--fault", action="store_true", help="fail once in epoch 1, batch 5")
    args = parser.parse_args(argv)
    MARKER.parent.mkdir(exist_ok=True)

    strategy: Any = "ddp"
    if args.strategy == "fsdp2":
        strategy = ModelParallelStrategy(data_parallel_size=args.nodes * args.devices, tensor_parallel_size=1)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.nodes,
        strategy=strategy,
        max_epochs=3,
        callbacks=[ModelCheckpoint(dirpath="ckpt", every_n_train_steps=4, save_last=True)],
        plugins=[SLURMEnvironment(auto_requeue=True)] if args.slurm else [],
        logger=CSVLogger(".", name="csv"),
        log_every_n_steps=1,
        enable_progress_bar=False,
    )
    fault = ("signal" if args.slurm else "raise") if args.fault else None
    model = MyModel(fault, fsdp2=args.strategy == "fsdp2")
    # the first run finds no checkpoint and starts afresh; a requeued SLURM job finds hpc_ckpt_1.ckpt itself
    trainer.fit(model, ckpt_path=None if args.slurm else "last")

    # torch 2.13 on gloo may abort a process in the interpreter's teardown after the fit, and torchrun
    # counts that as a failure: every rank is done and everything is saved, so leave without it.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
