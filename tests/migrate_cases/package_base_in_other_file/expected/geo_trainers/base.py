"""The base task: losses, optimizer and data; subclasses write the steps."""

from abc import ABC, abstractmethod

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def patches(n: int, seed: int, classes: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 4, 8, 8, generator=generator)
    return TensorDataset(images, torch.randint(0, classes, (n,), generator=generator))


class BaseTask(L.LightningModule, ABC):
    def __init__(self, classes: int = 3, loss: str = "ce") -> None:
        super().__init__()
        self.classes = classes
        self.loss_name = loss
        self.configure_models()
        self.configure_losses()

    @abstractmethod
    def configure_models(self) -> None: ...

    def configure_losses(self) -> None:
        if self.loss_name == "ce":
            self.criterion = nn.CrossEntropyLoss()
        elif self.loss_name == "mse":
            self.criterion = nn.MSELoss()
        else:
            raise ValueError(f"unknown loss {self.loss_name!r}")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(patches(16, 0, self.classes), batch_size=4)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(patches(8, 1, self.classes), batch_size=4)
