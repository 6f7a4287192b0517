"""``compiled``: ``torch.compile`` typed as the module it compiles, for ``trainer.fit(compiled(model))``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

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
    """``torch.compile(module, ...)``, typed as ``module``'s own class.

    torch declares ``torch.compile`` to return a ``Callable``, which mypy and pyright do not accept
    where Lightning takes a ``LightningModule`` (``trainer.fit(torch.compile(model))``) or where an
    attribute holds a module (``self.net = torch.compile(self.net)``). At run time this is
    ``torch.compile``'s result itself, an ``OptimizedModule``: Lightning unwraps it and compiles the
    module's steps; as a submodule it reads attributes through to the module it wraps. The
    arguments are ``torch.compile``'s.
    """
    # torch types its result as Callable (and its own backend argument partly Unknown to pyright).
    result: object = torch.compile(  # pyright: ignore[reportUnknownMemberType]
        module, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options, disable=disable
    )
    return cast(ModuleT, result)
