"""The typed step results: the static contract of ``lightning_step_types.results``.

At runtime the results are read-only dataclasses (assigning a field raises
``FrozenInstanceError``) that are also read-only mappings and pytree nodes. This stub states
what users may rely on, in the terms checkers understand:

- ``loss``, ``metadata`` and ``batch_size`` are read-only (assigning to them is an error).
- ``metadata`` is read-only whatever it was built from: a result built from a dict (a dict
  literal, a ``dict`` variable) reads its metadata back as ``Mapping[str, V]``, so item
  assignment and ``.update()`` on it are errors, as they are at runtime (``FrozenMetadata``
  has no mutators). A ``TypedDict`` is read back as that ``TypedDict``: declare its items
  ``ReadOnly[...]`` to make assigning to them an error too (see docs/typing.md).
- A result is generic in its metadata: ``TrainStepResult[MyMeta]`` with ``MyMeta`` a
  ``TypedDict`` types ``result.metadata["logits"]``; bare ``TrainStepResult`` means
  ``TrainStepResult[Mapping[str, Any]]``.
"""

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import Field
from typing import Any, ClassVar, Final, Generic, Literal, TypeGuard, overload

import torch
from typing_extensions import Never, Self, TypeVar

from lightning_step_types.errors import StepResultError

__all__ = ["FrozenMetadata", "StepResult", "TrainStepResult", "ValStepResult"]

MetaT = TypeVar("MetaT", bound=Mapping[str, Any], default=Mapping[str, Any], covariant=True)
_V = TypeVar("_V")
_MetaU = TypeVar("_MetaU", bound=Mapping[str, Any])

class FrozenMetadata(Mapping[str, Any]):
    """A read-only copy of a result's metadata (what ``result.metadata`` is at runtime)."""

    _data: dict[str, Any]  # internal: the adapter hands it to Lightning without copying
    def __init__(self, data: Mapping[str, Any] = ...) -> None: ...
    def __getitem__(self, key: str) -> Any: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def copy(self) -> dict[str, Any]:
        """A mutable shallow copy."""

class _MetadataField:
    """How ``StepResult.metadata`` reads: a descriptor, so its type can depend on the result's.

    A result whose metadata type was solved as a mutable mapping (a dict literal gives
    ``dict[str, V]``) reads it back as ``Mapping[str, V]``; any other metadata type (a
    ``TypedDict``, ``Mapping[str, Any]``) reads back as itself. There is no way to assign it.
    """

    @overload
    def __get__(self, instance: None, owner: type[object], /) -> FrozenMetadata: ...
    @overload
    def __get__(self, instance: StepResult[MutableMapping[str, _V]], owner: type[object], /) -> Mapping[str, _V]: ...
    @overload
    def __get__(self, instance: StepResult[_MetaU], owner: type[object], /) -> _MetaU: ...
    def __set__(self, instance: StepResult[Any], value: Never, /) -> None: ...

class StepResult(Mapping[str, Any], Generic[MetaT]):
    """Base of the step results: a loss tensor holding one real floating value, and read-only metadata.

    As a ``Mapping`` a result is exactly ``{"loss": loss, **metadata}``. Subclasses may add
    methods and properties but no fields.
    """

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    __match_args__: ClassVar[tuple[Literal["loss"], Literal["metadata"], Literal["batch_size"]]]
    # Final: a frozen dataclass's fields cannot be assigned, not even in a subclass's methods.
    loss: Final[torch.Tensor]
    """The loss: a tensor of a real floating dtype holding one value."""
    metadata: _MetadataField
    """Read-only metadata: ``{}`` when none was given."""
    batch_size: Final[int | None]
    """How many samples the loss averages over, when the batch does not say it plainly."""
    # Without metadata the result is a StepResult[Mapping[str, Any]], whatever the context asks for:
    # `-> TrainStepResult[MyMeta]` returning `TrainStepResult(loss=loss)` is an error, not an empty MyMeta.
    @overload
    def __init__(self: StepResult[Mapping[str, Any]], loss: torch.Tensor, *, batch_size: int | None = None) -> None: ...
    @overload
    def __init__(self, loss: torch.Tensor, metadata: MetaT, batch_size: int | None = None) -> None: ...
    @classmethod
    def _trusted(cls, loss: torch.Tensor, metadata: Mapping[str, Any], batch_size: int | None = None) -> Self:
        """Internal: build without checks, for values that already passed them."""

    @overload
    def __getitem__(self, key: Literal["loss"]) -> torch.Tensor: ...
    @overload
    def __getitem__(self, key: str) -> Any: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object) -> bool: ...
    def copy(self) -> dict[str, Any]:
        """``{"loss": loss, **metadata}`` as a new dict."""

    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class TrainStepResult(StepResult[MetaT]):
    """What ``training_step`` returns: ``TrainStepResult(loss=loss, metadata={"logits": logits})``."""

    @overload
    def __init__(
        self: TrainStepResult[Mapping[str, Any]], loss: torch.Tensor, *, batch_size: int | None = None
    ) -> None: ...
    @overload
    def __init__(self, loss: torch.Tensor, metadata: MetaT, batch_size: int | None = None) -> None: ...

class ValStepResult(StepResult[MetaT]):
    """What ``validation_step`` and ``test_step`` return: ``ValStepResult(loss=loss, metadata={...})``."""

    @overload
    def __init__(
        self: ValStepResult[Mapping[str, Any]], loss: torch.Tensor, *, batch_size: int | None = None
    ) -> None: ...
    @overload
    def __init__(self, loss: torch.Tensor, metadata: MetaT, batch_size: int | None = None) -> None: ...

# Internal helpers that lightning_step_types.step.checks imports from this module. They are declared here
# only because pyright reads the runtime's own modules through these stubs (stubPath); they are not
# part of the API (not in __all__).
LOSS_DTYPES: frozenset[torch.dtype]

def is_loss_tensor(value: object) -> TypeGuard[torch.Tensor]: ...
def loss_error(where: str, loss: object) -> StepResultError: ...
