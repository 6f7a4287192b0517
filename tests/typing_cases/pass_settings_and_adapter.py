"""The typed module's settings (class body and __init__) and the StepResultAdapter callback's options."""

import pytorch_lightning as pl

from lightning_step_types import LossLogging, NonFiniteLoss, StepResultAdapter, TypedLightningModule


class Warns(TypedLightningModule):
    nonfinite_loss = "warn"
    log_loss = True


class Configured(TypedLightningModule):
    def __init__(self, nonfinite: NonFiniteLoss = "skip") -> None:
        super().__init__()
        self.nonfinite_loss = nonfinite
        self.log_loss = LossLogging(train="loss/train", val="loss/val", test=None, sync_dist=True)


callbacks: list[pl.Callback] = [
    StepResultAdapter(),
    StepResultAdapter(strict=True, nonfinite_loss=None),
    StepResultAdapter(nonfinite_loss="raise", log_loss=LossLogging(prog_bar=False)),
]
strict: bool = StepResultAdapter(strict=True).strict
trainer = pl.Trainer(callbacks=callbacks, logger=False, max_epochs=1)
