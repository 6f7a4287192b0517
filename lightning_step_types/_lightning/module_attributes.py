"""The names Lightning and torch keep on a LightningModule instance, and a tensor's in-place version.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["framework_names", "tensor_version"]

_NAMES: dict[type, frozenset[str]] = {}


def framework_names(module: Any) -> frozenset[str]:
    """The attribute names a fresh instance of the module's ``LightningModule`` base holds in its
    ``__dict__`` (``_trainer``, ``_current_fx_name``, ``training``, torch's ``_parameters`` ...).

    Relies on Lightning and torch setting their per-instance state in ``__init__``: the names are
    read off a new ``LightningModule()`` of the module's flavour (its first base so named), once per
    flavour, and not listed here, so that a Lightning release that adds one needs no change.
    """
    base: Any = None
    for cls in type(module).__mro__:
        if cls.__name__ == "LightningModule" and cls.__module__.endswith("core.module"):
            base = cls
            break
    if base is None:
        base = torch.nn.Module
    names = _NAMES.get(base)
    if names is None:
        names = _NAMES[base] = frozenset(vars(base()))
    return names


def tensor_version(tensor: torch.Tensor) -> int:
    """The tensor's in-place version (`Tensor._version`, torch-private): every in-place operation on
    it (``self.total += loss``) moves it; a tensor rebound to the attribute is another object."""
    return int(tensor._version)
