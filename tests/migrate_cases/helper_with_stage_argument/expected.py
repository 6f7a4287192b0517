"""One shared step for every stage, called with the stage's name, as the Lightning docs suggest."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def ratings(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    users = torch.randn(n, 6, generator=generator)
    return TensorDataset(users, users[:, :2].sum(dim=1, keepdim=True).sigmoid() * 5)


class RatingRegressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        self.criterion = nn.SmoothL1Loss()

    def _common_step(self, batch: list[torch.Tensor], stage: str) -> torch.Tensor:
        x, y = batch
        preds = self.net(x)
        loss: torch.Tensor = self.criterion(preds, y)
        self.log(f"{stage}_loss", loss, prog_bar=stage == "train")
        if stage != "train":
            self.log(f"{stage}_mae", F.l1_loss(preds, y))
        return loss

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self._common_step(batch, "train"))

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        return ValStepResult(loss=self._common_step(batch, "val"))

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        return ValStepResult(loss=self._common_step(batch, "test"))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(ratings(32, seed=0), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(ratings(16, seed=1), batch_size=8)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(ratings(16, seed=2), batch_size=8)


class WeightedRatingRegressor(RatingRegressor):
    """Helpers may call helpers: the loss is followed through `_weighted` to `_common_step`."""

    def _weighted(self, batch: list[torch.Tensor], stage: str) -> torch.Tensor:
        return 0.5 * self._common_step(batch, stage)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self._weighted(batch, "train"))
