"""A detector in the torchvision style: in training mode the model returns a dict of losses."""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def boxes(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 3, 8, 8, generator=generator)
    return TensorDataset(images, torch.randint(0, 3, (n,), generator=generator), torch.rand(n, 4, generator=generator))


class TinyDetector(nn.Module):
    """Returns its losses by name, as torchvision's detection models do while training."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten())
        self.classifier = nn.Linear(144, 3)
        self.box_regressor = nn.Linear(144, 4)

    def forward(self, images: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.backbone(images)
        return {
            "loss_classifier": F.cross_entropy(self.classifier(features), labels),
            "loss_box_reg": F.smooth_l1_loss(self.box_regressor(features), targets),
        }


class LitDetector(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = TinyDetector()

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        images, labels, targets = batch
        loss_dict: dict[str, torch.Tensor] = self.model(images, labels, targets)
        loss = sum(loss for loss in loss_dict.values())
        self.log_dict(loss_dict)
        return TrainStepResult(loss=loss)  # type: ignore  # sum() of an empty dict would be 0; the model always returns its losses

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        images, labels, targets = batch
        loss_dict: dict[str, torch.Tensor] = self.model(images, labels, targets)
        return ValStepResult(loss=sum(loss_dict.values()))  # type: ignore

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(boxes(16, seed=0), batch_size=4)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(boxes(8, seed=1), batch_size=4)
