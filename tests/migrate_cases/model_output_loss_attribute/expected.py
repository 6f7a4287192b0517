"""A character language model whose inner model returns its own loss, Hugging Face style (`outputs.loss`)."""

from __future__ import annotations

from typing import NamedTuple

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

TEXT = "the quick brown fox jumps over the lazy dog " * 8


class CausalLMOutput(NamedTuple):
    loss: torch.Tensor
    logits: torch.Tensor


class CharWindows(Dataset[dict[str, torch.Tensor]]):
    """Fixed-width windows of a text, as byte ids; the labels are the next bytes."""

    def __init__(self, text: str, width: int = 16) -> None:
        self.ids = torch.tensor(list(text.encode()))
        self.width = width

    def __len__(self) -> int:
        return (len(self.ids) - 1) // self.width

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = index * self.width
        window = self.ids[start : start + self.width + 1]
        return {"input_ids": window[:-1], "labels": window[1:]}


class CharLM(nn.Module):
    def __init__(self, vocab: int = 256, hidden: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> CausalLMOutput:
        states, _ = self.rnn(self.embed(input_ids))
        logits = self.head(states)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
        return CausalLMOutput(loss=loss, logits=logits)


class LitCharLM(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = CharLM()

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        outputs: CausalLMOutput = self.model(**batch)
        self.log("train_loss", outputs.loss)
        return outputs.loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        outputs = self.model(**batch)
        return {"loss": outputs.loss, "logits": outputs.logits}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=3e-3)

    def train_dataloader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return DataLoader(CharWindows(TEXT), batch_size=4, shuffle=True)

    def val_dataloader(self) -> DataLoader[dict[str, torch.Tensor]]:
        return DataLoader(CharWindows(TEXT[::-1]), batch_size=4)
