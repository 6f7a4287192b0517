"""docs/scaling.md's Ray Train recipe, as a script: ``python tests/scaling_ray.py RUNS.json`` (one run).

Ray starts two workers (``ScalingConfig(num_workers=2)``) that fit ``tests/scaling.py``'s model with
``RayDDPStrategy``; a callback reports each checkpoint ``ModelCheckpoint(every_n_train_steps=4)`` saved,
and ``FailureConfig(max_failures=1)`` restarts the workers from the last one reported after the fault.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import ray
import ray.train
import scaling
from lightning.pytorch.callbacks import ModelCheckpoint
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, prepare_trainer
from ray.train.torch import TorchTrainer

from lightning_step_types.lightning_pytorch import TypedLightningModule

# Ray Train's Lightning support is built on the `lightning` package where it is installed (as here):
# the modules and callbacks of tests/scaling.py, in that flavour.


class MyModel(scaling.Parts, TypedLightningModule):
    def __init__(self, run: dict[str, Any], marker: Path) -> None:
        super().__init__()
        self.build(run, marker)

    training_step = scaling.MyModel.training_step


class Plain(scaling.Parts, pl.LightningModule):
    def __init__(self, run: dict[str, Any], marker: Path) -> None:
        super().__init__()
        self.build(run, marker)

    training_step = scaling.Plain.training_step


class Record(pl.Callback):
    def __init__(self, root: Path, attempt: int, caught: list[str]) -> None:
        self.root, self.attempt, self.caught = root, attempt, caught

    on_fit_end = scaling.Record.on_fit_end


class ReportCheckpoints(pl.Callback):
    """At the batch after a save (ModelCheckpoint saves last, after every other callback's hook)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if (
            trainer.global_step
            and trainer.global_step % scaling.EVERY == 0
            and trainer.global_step != getattr(self, "reported", 0)
        ):
            self.reported = trainer.global_step
            checkpoint = Checkpoint.from_directory(str(self.directory)) if trainer.global_rank == 0 else None
            ray.train.report({"step": trainer.global_step}, checkpoint=checkpoint)


def train_loop(config: dict[str, Any]) -> None:
    run = config["run"]
    root = Path(run["root"])
    restored = ray.train.get_checkpoint()
    attempt = 1 if restored else 0
    caught = scaling.step_result_warnings()
    trainer = prepare_trainer(
        pl.Trainer(
            accelerator="cpu",
            devices="auto",
            strategy=RayDDPStrategy(),
            plugins=[RayLightningEnvironment()],
            max_epochs=scaling.EPOCHS,
            log_every_n_steps=1,
            num_sanity_val_steps=0,
            enable_progress_bar=False,
            enable_model_summary=False,
            logger=pl.loggers.CSVLogger(root, name="csv", version=attempt),
            callbacks=[
                ModelCheckpoint(
                    dirpath=root / "ckpt",
                    every_n_train_steps=scaling.EVERY,
                    save_last=True,
                    save_top_k=-1,
                    filename="{step}",
                ),
                ReportCheckpoints(root / "ckpt"),
                Record(root, attempt, caught),
            ],
        )
    )
    make = MyModel if run["module"] == "typed" else Plain
    with restored.as_directory() if restored else contextlib.nullcontext() as directory:
        trainer.fit(make(run, root / "faulted"), ckpt_path=f"{directory}/last.ckpt" if directory else None)


def main(argv: list[str]) -> None:
    (run,) = json.loads(Path(argv[0]).read_text())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True)
    TorchTrainer(
        train_loop,
        train_loop_config={"run": run},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(
            name="train",
            storage_path=str(Path(run["root"]) / "ray"),
            failure_config=FailureConfig(max_failures=1),
            checkpoint_config=CheckpointConfig(num_to_keep=1),
        ),
    ).fit()


if __name__ == "__main__":
    main(sys.argv[1:])
