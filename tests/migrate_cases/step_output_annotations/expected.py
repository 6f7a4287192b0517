"""A bag-of-words sentiment model whose steps are annotated with Lightning's STEP_OUTPUT."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB_SIZE = 100


def reviews(n: int, seed: int) -> TensorDataset:
    """Token ids of 20-word reviews; positive when the first word has an even id."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB_SIZE, (n, 20), generator=generator)
    return TensorDataset(tokens, (tokens[:, 0] % 2 == 0).long())


class BagOfWordsSentiment(pl.LightningModule):
    def __init__(self, embedding_dim: int = 16) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB_SIZE, embedding_dim, mode="mean")
        self.classifier = nn.Linear(embedding_dim, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.classifier(self.bag(tokens))
        return logits

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> TrainStepResult:
        tokens, labels = batch
        loss = F.cross_entropy(self(tokens), labels)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        tokens, labels = batch
        logits = self(tokens)
        val_loss = F.cross_entropy(logits, labels)
        self.log("val_loss", val_loss, prog_bar=True)
        return ValStepResult(loss=val_loss, metadata={"preds": logits.argmax(dim=-1)})

    def test_step(self, batch: list[torch.Tensor], batch_idx: int) -> ValStepResult:
        tokens, labels = batch
        test_loss = F.cross_entropy(self(tokens), labels)
        return ValStepResult(loss=test_loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(reviews(64, seed=0), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(reviews(32, seed=1), batch_size=16)

    def test_dataloader(self) -> DataLoader[tuple[torch.Tensor, ...]]:
        return DataLoader(reviews(32, seed=2), batch_size=16)
