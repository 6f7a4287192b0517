"""The resume guide's data loader: torchdata ships no type information, so its import carries an ignore
for each checker (mypy: import-untyped; pyright strict: reportMissingTypeStubs)."""

import torch
from torch.utils.data import TensorDataset

# taught: docs/resume.md
# torchdata ships no type information: mypy reports the import as untyped, strict pyright as missing stubs
from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]  # pyright: ignore[reportMissingTypeStubs]

dataset = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
# taught: docs/resume.md
loader = StatefulDataLoader(dataset, batch_size=2)  # DataLoader's arguments
