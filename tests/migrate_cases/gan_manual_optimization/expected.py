"""A tiny GAN on a noisy 2-D ring, trained with manual optimization: one step of each optimizer per batch."""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

LATENT_DIM = 4


def ring(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=generator) * 2 * math.pi
    points = torch.stack([angle.cos(), angle.sin()], dim=1)
    return TensorDataset(points + 0.05 * torch.randn(n, 2, generator=generator))


class RingGAN(pl.LightningModule):
    def __init__(self, lr: float = 2e-4) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.lr = lr
        self.generator = nn.Sequential(nn.Linear(LATENT_DIM, 16), nn.ReLU(), nn.Linear(16, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        (real,) = batch
        optimizers = self.optimizers()
        assert isinstance(optimizers, list)
        opt_g, opt_d = optimizers
        z = torch.randn(real.shape[0], LATENT_DIM, device=self.device)
        fake = self.generator(z)

        # discriminator: real -> 1, fake -> 0
        def discriminator_loss() -> torch.Tensor:
            real_logits = self.discriminator(real)
            fake_logits = self.discriminator(fake.detach())
            loss = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
            return loss + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))

        d_loss = discriminator_loss()
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()

        # generator: make the discriminator say "real" on fakes
        fake_logits = self.discriminator(fake)
        g_loss = F.binary_cross_entropy_with_logits(fake_logits, torch.ones_like(fake_logits))
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True)
        return TrainStepResult(loss=g_loss, metadata={"d_loss": d_loss.detach()})

    def configure_optimizers(self) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=self.lr, betas=(0.5, 0.999))
        return opt_g, opt_d

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(ring(128, seed=0), batch_size=32, shuffle=True)
