"""Under DDP, a scheduler that steps on a value each process logs for itself (``ReduceLROnPlateau`` on an unsynced
``self.log``): each process's own scheduler state comes back to it at a resume, and a learning rate that differed
between the processes at the save is named in one warning (the file holds rank 0's weights only)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import RegressorParts, spawn_with_teardown_retry, trainer_kwargs
from pytorch_lightning.callbacks import ModelCheckpoint
from test_docs import catalogue_blocks
from test_resume import EXACT, stateful_loader

from lightning_step_types import TrainStepResult, TypedLightningModule

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume"),
]


class PlateauOnOwnLoss(RegressorParts, TypedLightningModule):
    """A plateau scheduler each step, on a value each process logs for itself: rank 1's is its loss negated, so
    the processes' best values differ from the first step on, and where the loss falls only rank 1's waits."""

    def __init__(self, patience: int) -> None:
        super().__init__()
        self.build(0, 0.1)
        self.patience = patience

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, _ = self.loss_and_preds(batch)
        self.log("own_loss", -loss.detach() if self.global_rank else loss.detach(), on_step=True, on_epoch=False)
        return TrainStepResult(loss=loss)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=self.patience, factor=0.5)
        config = {"scheduler": scheduler, "interval": "step", "monitor": "own_loss", "strict": False}
        return {"optimizer": optimizer, "lr_scheduler": config}


class Record(pl.Callback):
    """Each rank writes its scheduler's state, its weights and the library's warnings (a spawned child's result)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.caught: list[warnings.WarningMessage] = []
        self.catcher: Any = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.catcher = warnings.catch_warnings(record=True)
        self.caught = self.catcher.__enter__()
        warnings.simplefilter("always")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.catcher.__exit__(None, None, None)
        record = {
            "scheduler": trainer.lr_scheduler_configs[0].scheduler.state_dict(),
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "params": {k: p.detach().clone() for k, p in pl_module.named_parameters()},
            "warnings": [str(w.message) for w in self.caught if "lightning_step_types" in type(w.message).__module__],
        }
        torch.save(record, self.root / f"rank{trainer.global_rank}.pt")


def fit_on_two(root: Path, patience: int, ckpt_path: Path | None) -> tuple[list[dict[str, Any]], Path]:
    def fit(run_root: Path) -> None:
        callbacks: list[pl.Callback] = [Record(run_root)]
        if ckpt_path is None:
            callbacks.append(
                ModelCheckpoint(dirpath=run_root / "ckpt", every_n_train_steps=3, save_top_k=-1, filename="{step}")
            )
        kwargs = trainer_kwargs(
            run_root, devices=2, strategy="ddp_spawn", callbacks=callbacks, enable_checkpointing=True
        )
        pl.Trainer(**kwargs).fit(PlateauOnOwnLoss(patience), stateful_loader(), ckpt_path=ckpt_path)

    run_root = spawn_with_teardown_retry(fit, root, lambda r: all((r / f"rank{rank}.pt").exists() for rank in (0, 1)))
    return [torch.load(run_root / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)], run_root


def test_each_process_gets_its_own_plateau_state_back(tmp_path: Path) -> None:
    full, root = fit_on_two(tmp_path / "full", patience=1000, ckpt_path=None)  # the learning rate never moves
    assert full[1]["scheduler"]["best"] != full[0]["scheduler"]["best"]  # each rank's own best
    resumed, _ = fit_on_two(tmp_path / "resumed", patience=1000, ckpt_path=root / "ckpt" / "step=3.ckpt")
    for rank in (0, 1):
        assert resumed[rank]["scheduler"]["best"] == full[rank]["scheduler"]["best"], rank
        assert resumed[rank]["scheduler"]["num_bad_epochs"] == full[rank]["scheduler"]["num_bad_epochs"], rank
        for name, value in full[rank]["params"].items():
            assert torch.equal(resumed[rank]["params"][name], value), (rank, name)
        assert resumed[rank]["warnings"] == []


def test_a_learning_rate_that_differed_between_the_processes_is_named(tmp_path: Path) -> None:
    full, root = fit_on_two(tmp_path / "full", patience=0, ckpt_path=None)
    saved = torch.load(root / "ckpt" / "step=3.ckpt", weights_only=False)["lightning_step_types"]["epoch_state"]
    lrs = [state["settings"]["optimizers"][0][0]["lr"] for state in saved["ranks"]]
    assert lrs[0] != lrs[1]  # rank 1's plateau, on its higher value, cut its learning rate where rank 0's did not
    resumed, _ = fit_on_two(tmp_path / "resumed", patience=0, ckpt_path=root / "ckpt" / "step=3.ckpt")
    (message,) = resumed[0]["warnings"]
    assert message == EXPECTED
    assert message.replace("PlateauOnOwnLoss", "MyModel") in catalogue_blocks()  # docs/errors.md quotes it
    assert resumed[1]["warnings"] == []


EXPECTED = """PlateauOnOwnLoss: resuming epoch 0 at the end of batch 2
  got:      a checkpoint whose processes' optimizer settings or LR schedulers differed when it was saved (rank 1's \
optimizer 0 group 0 lr, not as rank 0's): the file holds rank 0's weights, optimizers and schedulers, which every \
process loads, so rank 1 goes on from rank 0's, not from its own
  expected: every process with the same optimizer settings and scheduler states: under DDP they train one model
  fix:      log the value a scheduler monitors with self.log(..., sync_dist=True), so that every process steps it \
alike"""
