"""A typo in the `nonfinite_loss` setting of a typed module (a Literal: "raise", "warn", "skip" or None)."""

from lightning_step_types import TypedLightningModule


class Model(TypedLightningModule):
    nonfinite_loss = "ignore"  # E: mypy[assignment] pyright[reportAssignmentType]
