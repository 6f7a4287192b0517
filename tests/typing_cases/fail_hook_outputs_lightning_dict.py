"""A typed module's validation hook still written for Lightning's plain dict."""

from typing import Any

from lightning_step_types import TypedLightningModule


class Model(TypedLightningModule):
    def on_validation_batch_end(  # E: pyright[reportIncompatibleMethodOverride]
        self, outputs: dict[str, Any], batch: Any, batch_idx: int, dataloader_idx: int = 0  # E: mypy[override]
    ) -> None:
        pass
