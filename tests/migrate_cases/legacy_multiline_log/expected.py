"""A 0.x-era sequence tagger whose step dicts were written one entry per line, with comments."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_step_types import TrainStepResult
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB = 50
TAGS = 5


def tagged_sentences(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (n, 12), generator=generator)
    return TensorDataset(tokens, tokens % TAGS)


class GRUTagger(pl.LightningModule):
    def __init__(self, embedding_dim: int = 16, hidden: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, embedding_dim)
        self.rnn = nn.GRU(embedding_dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, TAGS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        states, _ = self.rnn(self.embed(tokens))
        scores: torch.Tensor = self.head(states)
        return scores

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        tokens, tags = batch
        scores = self(tokens)
        loss = F.cross_entropy(scores.flatten(0, 1), tags.flatten())
        acc = (scores.argmax(-1) == tags).float().mean()
        # shown in the bar and sent to the logger
        # same value as the bar
        self.log_dict({
            "train_loss": loss,
        })
        self.log_dict({"train_acc": acc}, prog_bar=True)
        return TrainStepResult(
            loss=loss,  # what backward runs on
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(tagged_sentences(64, seed=0), batch_size=16, shuffle=True)
