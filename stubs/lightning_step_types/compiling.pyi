from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["compiled"]

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)

def compiled(
    module: ModuleT,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable[..., Any] = "inductor",
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> ModuleT:
    """``torch.compile(module, ...)``, typed as ``module``'s own class: ``trainer.fit(compiled(model))``
    and ``self.net = compiled(self.net)`` type-check where ``torch.compile``'s ``Callable`` does not."""
