"""declared_metric's stage is one of the three stage names."""

from lightning_step_types import TypedLightningModule, declared_metric


class Classifier(TypedLightningModule):
    def on_validation_epoch_end(self) -> None:
        declared_metric(self, "acc", "validation")  # E: mypy[arg-type] pyright[reportArgumentType]
