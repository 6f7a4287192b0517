"""``torch.compile``'s own result, where Lightning takes a module: torch types it as a ``Callable``.

At run time Lightning accepts it (it unwraps the ``OptimizedModule``); the checkers cannot know.
``lightning_step_types.compiled`` is the typed spelling (pass_compiled_module.py). pyright strict
also finds ``torch.compile``'s own signature partly unknown.
"""

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from lightning_step_types import TrainStepResult, TypedLightningModule


class Classifier(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 3)

    def configure_model(self) -> None:
        self.net = torch.compile(self.net)  # E: mypy[assignment] pyright[reportUnknownMemberType]

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.net(x), y))


pl.Trainer().fit(torch.compile(Classifier()))  # E: mypy[arg-type] pyright[reportArgumentType,reportUnknownMemberType]
