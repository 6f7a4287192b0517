"""torch.compile as the quick start teaches it: ``compiled`` keeps the module's class for both checkers.

``torch.compile`` itself returns a ``Callable`` to them (fail_compile_result_is_a_callable.py).
"""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import assert_type

from lightning_step_types import TrainStepResult, TypedLightningModule, compiled

Batch = tuple[torch.Tensor, torch.Tensor]


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)

    # taught: docs/quickstart.md
    def configure_model(self) -> None:
        self.net = compiled(self.net)

    def training_step(self, batch: Batch, batch_idx: int) -> TrainStepResult:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return TrainStepResult(loss=loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


train_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 3, (8,))), batch_size=4)
assert_type(compiled(Classifier()), Classifier)
assert_type(compiled(torch.nn.Linear(4, 3), fullgraph=True, backend="aot_eager", mode=None), torch.nn.Linear)
trainer = pl.Trainer(max_epochs=1)
# taught: docs/quickstart.md
trainer.fit(compiled(Classifier()), train_loader, val_loader)  # Lightning compiles forward and the steps
