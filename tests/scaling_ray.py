"""Plain Lightning run as docs/scaling.md's Ray Train recipe runs (``examples/scaling/ray_train.py``):
``python tests/scaling_ray.py RUNS.json`` (one run), with ``examples/scaling`` on ``PYTHONPATH``.

The recipe's own Trainer, callbacks and Ray settings (its ``ray_trainer``, ``fit`` and ``run_on_ray``); the
module is ``tests/scaling.py``'s plain one, in the ``lightning`` flavour Ray Train builds on, so that its
resumed figures can be set beside the typed recipe's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import ray.train
import scaling
from ray_train import fit, ray_trainer, run_on_ray


class Plain(scaling.Parts, pl.LightningModule):
    def __init__(self, run: dict[str, Any], marker: Path) -> None:
        super().__init__()
        self.build(run, marker)

    training_step = scaling.Plain.training_step


class Record(pl.Callback):
    def __init__(self, root: Path, attempt: int, caught: list[str]) -> None:
        self.root, self.attempt, self.caught = root, attempt, caught

    on_fit_end = scaling.Record.on_fit_end


def train_loop(config: dict[str, Any]) -> None:
    run = config["run"]
    root = Path(run["root"])
    trainer = ray_trainer(root)
    attempt = 1 if ray.train.get_checkpoint() else 0  # the CSV logger's version too
    trainer.callbacks.append(Record(root, attempt, scaling.step_result_warnings()))
    fit(trainer, Plain(run, root / "faulted"))


def main(argv: list[str]) -> None:
    (run,) = json.loads(Path(argv[0]).read_text())
    run_on_ray(train_loop, {"run": run}, Path(run["root"]))


if __name__ == "__main__":
    main(sys.argv[1:])
