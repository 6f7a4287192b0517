"""Nothing is lost when a step's result is rejected.

A run that fails at batch 2 (a NaN loss, a ``loss.item()`` return, a detached loss) stops before
that batch's optimizer step: the weights and the optimizer's momentum are exactly as they were
when the batch started. The last checkpoint written before the failure (``every_n_train_steps=1``,
``save_last=True``) resumes, with the step fixed, to exactly the weights of a run that never failed.

Resuming in the middle of an epoch needs a resumable data loader (Lightning's ``state_dict`` /
``load_state_dict`` protocol, as ``torchdata``'s ``StatefulDataLoader`` has); ``ResumableBatches``
is the smallest one. The adapter runs with ``nonfinite_loss="raise"`` (the typed module's default):
its own default warns of a NaN loss and trains on, as plain Lightning does (``tests/test_nonfinite.py``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import RegressorParts, assert_same_params, make_dataset, params_of
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_step_types import StepResultAdapter, StepResultError, TrainStepResult, TypedLightningModule

N_BATCHES = 4
EPOCHS = 2
FAIL_AT = 2  # batch_idx of the failing batch, in the first epoch


class ResumableBatches:
    """Fixed batches in a fixed order that resume mid-epoch from a checkpoint (Lightning's ``_Stateful``)."""

    def __init__(self, n_batches: int = N_BATCHES, batch_size: int = 2) -> None:
        x, y = make_dataset(seed=3, n_batches=n_batches, batch_size=batch_size).tensors
        self.batches = list(zip(x.split(batch_size), y.split(batch_size), strict=True))
        self.consumed = 0  # batches handed out in the current epoch
        self._resume_at = 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        start, self._resume_at = self._resume_at, 0
        self.consumed = start
        for batch in self.batches[start:]:
            self.consumed += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"consumed": self.consumed % len(self.batches)}  # a finished epoch resumes at the next one

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume_at = state["consumed"]


def bad_return(failure: str, loss: torch.Tensor, typed: bool) -> Any:
    if failure == "nan":
        bad = loss * math.nan
        return TrainStepResult(loss=bad) if typed else bad
    if failure == "item":
        return TrainStepResult(loss=loss.item()) if typed else loss.item()
    assert failure == "detached"
    return TrainStepResult(loss=loss.detach()) if typed else {"loss": loss.detach()}


class MomentumParts(RegressorParts):
    """The shared regressor, with momentum so that the optimizer has state a stray step would change."""

    failure: str | None

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)  # type: ignore[attr-defined]

    def fails_now(self, batch_idx: int) -> bool:
        return self.failure is not None and self.current_epoch == 0 and batch_idx == FAIL_AT  # type: ignore[attr-defined]


class TypedFailing(MomentumParts, TypedLightningModule):
    def __init__(self, failure: str | None = None) -> None:
        super().__init__()
        self.build(seed=1, lr=0.05)
        self.failure = failure

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, _ = self.loss_and_preds(batch)
        if self.fails_now(batch_idx):
            return bad_return(self.failure, loss, typed=True)  # type: ignore[arg-type]
        return TrainStepResult(loss=loss)


class PlainFailing(MomentumParts, pl.LightningModule):
    def __init__(self, failure: str | None = None) -> None:
        super().__init__()
        self.build(seed=1, lr=0.05)
        self.failure = failure

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        if self.fails_now(batch_idx):
            return bad_return(self.failure, loss, typed=False)  # type: ignore[arg-type]
        return loss


MODULES = {"typed": TypedFailing, "adapter": PlainFailing}


class SnapshotAtFailingBatch(pl.Callback):
    """Weights and optimizer state as the failing batch starts."""

    params: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if trainer.current_epoch == 0 and batch_idx == FAIL_AT:
            self.params = params_of(pl_module)
            self.optimizer_state = copy.deepcopy(trainer.optimizers[0].state_dict())


def trainer_for(root: Path, kind: str, *callbacks: pl.Callback) -> pl.Trainer:
    adapter = [StepResultAdapter(nonfinite_loss="raise")] if kind == "adapter" else []
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        callbacks=[*adapter, *callbacks],
        logger=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )


def assert_same_optimizer_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["state"].keys() == b["state"].keys()
    for index, state in a["state"].items():
        assert torch.equal(state["momentum_buffer"], b["state"][index]["momentum_buffer"])


EXPECTED_GOT = {
    "nan": "with value nan",
    "item": "float ",
    "detached": "requires_grad=False): it was cut from the graph",
}


# Lightning's reminder that the resuming Trainer lacks the ModelCheckpoint the checkpoint came from:
# on purpose here, the resumed run writes no checkpoints.
@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`, callbacks used to create the checkpoint")
@pytest.mark.parametrize("kind", sorted(MODULES))
@pytest.mark.parametrize("failure", sorted(EXPECTED_GOT))
def test_rejected_step_loses_nothing_and_resumes_exactly(kind: str, failure: str, tmp_path: Path) -> None:
    module_class = MODULES[kind]

    # the reference: the same run with nothing wrong
    reference = module_class(failure=None)
    trainer_for(tmp_path / "reference", kind).fit(reference, ResumableBatches())

    # the failing run: every step checkpointed
    failing = module_class(failure=failure)
    snapshot = SnapshotAtFailingBatch()
    checkpoints = tmp_path / "checkpoints"
    every_step = ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=1, save_last=True, save_top_k=-1)
    trainer = trainer_for(tmp_path / "failing", kind, every_step, snapshot)
    with pytest.raises(StepResultError) as raised:
        trainer.fit(failing, ResumableBatches())
    error = str(raised.value)
    assert error.startswith(f"{module_class.__qualname__}.training_step: ")
    assert EXPECTED_GOT[failure] in error.split("\n")[1]

    # nothing was applied for the failing batch: weights and optimizer state as the batch started
    assert trainer.global_step == FAIL_AT
    assert_same_params(failing, snapshot.params)
    assert_same_optimizer_state(trainer.optimizers[0].state_dict(), snapshot.optimizer_state)
    assert all(torch.isfinite(p).all() for p in failing.parameters())

    # the last checkpoint is the one written after the last good step
    assert sorted(p.name for p in checkpoints.iterdir()) == ["epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "last.ckpt"]
    last = torch.load(checkpoints / "last.ckpt", weights_only=False)
    assert last["global_step"] == FAIL_AT
    for name, value in snapshot.params.items():
        assert torch.equal(last["state_dict"][name], value)

    # resume from it with the step fixed: exactly the uninterrupted run
    fixed = module_class(failure=None)
    resumed = trainer_for(tmp_path / "resumed", kind)
    resumed.fit(fixed, ResumableBatches(), ckpt_path=checkpoints / "last.ckpt")
    assert resumed.global_step == N_BATCHES * EPOCHS
    assert_same_params(fixed, reference)
