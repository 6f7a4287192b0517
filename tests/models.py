"""Tiny models, fixed data and recording callbacks shared by the runtime tests.

Every model is the same ``nn.Linear(3, 1)`` regressor with a fixed initialisation, trained with
plain SGD on a few fixed batches, so that a typed run and the equivalent plain-Lightning run can
be compared bit for bit (``torch.equal`` on every parameter, identical logged values).

Other test modules import from here (``from models import ...``): keep the names stable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.multiprocessing.spawn import ProcessExitedException
from torch.utils.data import DataLoader, TensorDataset

from lightning_step_types import TrainStepResult, TypedCallback, TypedLightningModule, ValStepResult

__all__ = [
    "BATCH_SIZE",
    "IN_FEATURES",
    "N_BATCHES",
    "PlainRegressor",
    "PlainTypedRegressor",
    "Recorder",
    "RegressorParts",
    "TypedRecorder",
    "TypedRegressor",
    "assert_same_metrics",
    "assert_same_params",
    "make_dataset",
    "make_loader",
    "make_trainer",
    "params_of",
    "trainer_kwargs",
]

IN_FEATURES = 3
BATCH_SIZE = 2
N_BATCHES = 4


# --- data -------------------------------------------------------------------------------------


def make_dataset(seed: int = 0, n_batches: int = N_BATCHES, batch_size: int = BATCH_SIZE) -> TensorDataset:
    """``(x, y)`` pairs with ``y`` a noisy sum of ``x``; drawn from a private generator (no global RNG)."""
    generator = torch.Generator().manual_seed(seed)
    n = n_batches * batch_size
    x = torch.randn(n, IN_FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


def make_loader(seed: int = 0, n_batches: int = N_BATCHES, batch_size: int = BATCH_SIZE) -> DataLoader[Any]:
    """A fixed-order loader (no shuffling, no workers), so every run sees the same batches."""
    return DataLoader(make_dataset(seed, n_batches, batch_size), batch_size=batch_size, shuffle=False)


# --- trainer ----------------------------------------------------------------------------------


def trainer_kwargs(root: Path | str, **overrides: Any) -> dict[str, Any]:
    """Quiet, single-CPU settings: no logger files, checkpoints, progress bar or sanity check unless asked."""
    kwargs: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
    )
    kwargs.update(overrides)
    return kwargs


def make_trainer(root: Path | str, **overrides: Any) -> pl.Trainer:
    return pl.Trainer(**trainer_kwargs(root, **overrides))


# --- comparisons ------------------------------------------------------------------------------


def params_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of every parameter, to compare against later."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def assert_same_params(a: nn.Module | Mapping[str, torch.Tensor], b: nn.Module | Mapping[str, torch.Tensor]) -> None:
    """Bit-for-bit equality of every parameter (a module or a ``params_of`` snapshot on either side)."""
    pa = params_of(a) if isinstance(a, nn.Module) else dict(a)
    pb = params_of(b) if isinstance(b, nn.Module) else dict(b)
    assert list(pa) == list(pb)
    for name in pa:
        assert torch.equal(pa[name], pb[name]), f"parameter {name!r} differs: {pa[name]} != {pb[name]}"


def assert_same_metrics(a: Mapping[str, Any], b: Mapping[str, Any]) -> None:
    """Same metric names, and bit-for-bit the same values."""
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.equal(torch.as_tensor(a[name]), torch.as_tensor(b[name])), (
            f"metric {name!r}: {a[name]} != {b[name]}"
        )


# --- models -----------------------------------------------------------------------------------


def spawn_with_teardown_retry(fit: Callable[[Path], None], root: Path, finished: Callable[[Path], bool]) -> Path:
    """Run ``fit(run_root)`` (a fit on spawned gloo processes); return the run root that completed.

    Now and then a spawned gloo child aborts at interpreter exit ("terminate called without an
    active exception", SIGABRT) after its fit has finished: a torch/gloo shutdown crash, not a test
    outcome. Only then, when ``finished(run_root)`` shows every rank's record was written, is the
    run repeated, at most twice; any other failure stands.
    """
    for attempt in range(3):
        run_root = root / f"attempt{attempt}"
        run_root.mkdir(parents=True)
        try:
            fit(run_root)
        except ProcessExitedException as error:
            if attempt == 2 or error.signal_name != "SIGABRT" or not finished(run_root):
                raise
            continue
        return run_root
    raise AssertionError("unreachable")


class RegressorParts:
    """Network, forward, loss and optimizer shared by every regressor below (a mixin, not a module)."""

    net: nn.Linear
    lr: float

    def build(self, seed: int, lr: float) -> None:
        self.lr = lr
        self.net = nn.Linear(IN_FEATURES, 1)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():  # a fixed initialisation that does not depend on (or touch) the global RNG
            self.net.weight.copy_(torch.randn(self.net.weight.shape, generator=generator))
            self.net.bias.copy_(torch.randn(self.net.bias.shape, generator=generator))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss_and_preds(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        preds = self(x)  # type: ignore[operator]
        return F.mse_loss(preds, y), preds

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)  # type: ignore[attr-defined]


class PlainRegressor(RegressorParts, pl.LightningModule):
    """The plain-Lightning reference: steps return dicts, metrics go through ``self.log``."""

    def __init__(self, seed: int = 0, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed, lr)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        self.log("train_loss", loss)
        return {"loss": loss, "preds": preds.detach()}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return {"loss": loss, "preds": preds}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        self.log("test_loss", loss)
        return {"loss": loss, "preds": preds}


class TypedRegressor(RegressorParts, TypedLightningModule):
    """``PlainRegressor`` written with typed results: the same computation, step for step."""

    def __init__(self, seed: int = 0, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed, lr)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return ValStepResult(loss=loss, metadata={"preds": preds})

    def test_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("test_loss", loss)
        return ValStepResult(loss=loss, metadata={"preds": preds})


class PlainTypedRegressor(RegressorParts, pl.LightningModule):
    """A plain ``LightningModule`` whose steps return typed results (meant for ``StepResultAdapter``)."""

    def __init__(self, seed: int = 0, lr: float = 0.1) -> None:
        super().__init__()
        self.build(seed, lr)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return ValStepResult(loss=loss, metadata={"preds": preds})

    def test_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        self.log("test_loss", loss)
        return ValStepResult(loss=loss, metadata={"preds": preds})


# --- recording callbacks ----------------------------------------------------------------------


class Recorder(pl.Callback):
    """A plain callback that records what each batch-end hook receives, as ``(hook, outputs)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.seen.append(("train", outputs))

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(("validation", outputs))

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(("test", outputs))

    def outputs(self, hook: str) -> list[Any]:
        return [outputs for name, outputs in self.seen if name == hook]


class TypedRecorder(TypedCallback):
    """``Recorder`` as a ``TypedCallback``: its batch-end hooks receive the typed results."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.seen.append(("train", outputs))

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(("validation", outputs))

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.seen.append(("test", outputs))

    def outputs(self, hook: str) -> list[Any]:
        return [outputs for name, outputs in self.seen if name == hook]
