# -*- coding: utf-8 -*-
"""A denoising autoencoder written in a hurry: odd spacing, one-liners and comments everywhere.

Nothing here but the step returns and their annotations may change.
"""
from __future__ import annotations
import pytorch_lightning as pl ; import torch    # two imports, one line
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


#   ----  model  ----
class   DenoisingAE( pl.LightningModule ) :   # spacing kept as written
    """Encoder -> 2-d code -> decoder."""

    def __init__(self, noise: float=0.1)->None:
        super().__init__()
        self.noise=noise
        self.encoder = nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 2))
        self.decoder = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 6))

    def training_step(self,batch:list[torch.Tensor],batch_idx:int)->TrainStepResult :   # returns the loss
        (x,) = batch
        noisy = x + self.noise * torch.randn_like(x)
        recon = self.decoder(self.encoder(noisy))
        loss = F.mse_loss(recon, x)   # reconstruction error
        if batch_idx == 0: self.log("first_batch_loss", loss); return TrainStepResult(loss=loss)
        return TrainStepResult(loss=loss)   # parenthesized on purpose


    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult : # noqa
        (x,) = batch
        recon = self.decoder(self.encoder(x))
        loss = F.mse_loss(recon, x)
        # trailing comment
        return  ValStepResult(loss=loss, metadata={'recon': recon})

    def configure_optimizers( self ) -> torch.optim.Optimizer :
        return torch.optim.Adam(self.parameters(), lr = 1e-2)   # café

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(TensorDataset(torch.randn(40, 6, generator=torch.Generator().manual_seed(0))), batch_size=8)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(TensorDataset(torch.randn(16, 6, generator=torch.Generator().manual_seed(1))), batch_size=8)
