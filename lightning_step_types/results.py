"""The typed step results: read-only dataclasses that are also read-only mappings and pytree nodes.

A result is ``loss`` plus ``metadata`` and nothing else; logging stays with ``self.log``.
Seen as a ``Mapping`` it equals ``{"loss": loss, **metadata}``, which is what Lightning's loops
already accept from a step. Registering every result class with torch's pytree lets DDP,
``torch.compile`` and ``torch.utils._pytree`` see the tensors inside.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeGuard, cast

import torch
import torch.utils._pytree as pytree
from typing_extensions import Self, TypeVar

from lightning_step_types.errors import StepResultError, describe, describe_tensor

__all__ = ["FrozenMetadata", "StepResult", "TrainStepResult", "ValStepResult"]

MetaT = TypeVar("MetaT", bound=Mapping[str, Any], default=Mapping[str, Any], covariant=True)


def _same(a: object, b: object) -> bool:
    """Equality that never raises: tensors compare by identity (as their hash does), others by ``==``."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    try:
        return bool(a == b)
    except Exception:  # numpy arrays, nested tensors: "ambiguous truth value" means not equal here
        return False


def _mappings_equal(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for key, value in a.items():
        if key not in b or not _same(value, b[key]):
            return False
    return True


class FrozenMetadata(Mapping[str, Any]):
    """A read-only copy of a result's metadata; it pickles and deep-copies, unlike ``MappingProxyType``."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] = {}) -> None:  # noqa: B006 - never mutated
        self._data: dict[str, Any] = dict(data)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return _mappings_equal(self._data, cast("Mapping[object, object]", other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._data))

    def __repr__(self) -> str:
        return f"FrozenMetadata({self._data!r})"

    def __reduce__(self) -> tuple[type[FrozenMetadata], tuple[dict[str, Any]]]:
        return (FrozenMetadata, (self._data,))

    def copy(self) -> dict[str, Any]:
        """A mutable shallow copy, as ``MappingProxyType.copy()`` gives."""
        return dict(self._data)


_EMPTY_METADATA = FrozenMetadata()


# --- pytree: a result flattens to (loss, metadata dict); metadata to its values ---


def _flatten_result(result: StepResult[Any]) -> tuple[list[Any], int | None]:
    return [result.loss, result.metadata._data], result.batch_size


def _flatten_result_with_keys(result: StepResult[Any]) -> tuple[list[tuple[Any, Any]], int | None]:
    children = [(pytree.GetAttrKey("loss"), result.loss), (pytree.GetAttrKey("metadata"), result.metadata._data)]
    return children, result.batch_size


def _register_pytree_node(cls: type[StepResult[Any]]) -> None:
    def unflatten(children: Any, batch_size: int | None) -> StepResult[Any]:
        loss, metadata = children
        return cls._trusted(loss, metadata, batch_size)  # pyright: ignore[reportPrivateUsage]  # this module's own class

    pytree.register_pytree_node(
        cls,
        _flatten_result,
        unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=_flatten_result_with_keys,
    )


def _flatten_metadata(metadata: FrozenMetadata) -> tuple[list[Any], list[str]]:
    return list(metadata._data.values()), list(metadata._data)  # pyright: ignore[reportPrivateUsage]


def _flatten_metadata_with_keys(metadata: FrozenMetadata) -> tuple[list[tuple[Any, Any]], list[str]]:
    return [(pytree.MappingKey(k), v) for k, v in metadata._data.items()], list(metadata._data)  # pyright: ignore[reportPrivateUsage]


pytree.register_pytree_node(
    FrozenMetadata,
    _flatten_metadata,
    lambda values, keys: FrozenMetadata(dict(zip(keys, values))),
    serialized_type_name=f"{__name__}.FrozenMetadata",
    flatten_with_keys_fn=_flatten_metadata_with_keys,
)


# init=False: the hand-written __init__ checks before it stores (a result is built on every step).
# Read-only through `_refuse_setattr` below rather than `frozen=True`: torch.compile rebuilds a
# frozen dataclass made inside a compiled step only as a constant, so a step returning one would
# end its graph early (`fullgraph=True` fails); a plain dataclass it rebuilds like a dict.
@dataclasses.dataclass(eq=False, init=False)
class StepResult(Mapping[str, Any], Generic[MetaT]):
    """Base of the step results: a loss tensor holding one real floating value, and read-only metadata.

    As a ``Mapping`` a result is exactly ``{"loss": loss, **metadata}``, which is what Lightning's
    loops accept. Subclasses may add methods and properties but no fields.
    """

    loss: torch.Tensor
    # The default suits only the default MetaT (Mapping[str, Any]); the stubs say so with overloads.
    metadata: MetaT = _EMPTY_METADATA  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # How many samples the loss averages over, when the batch does not say it plainly; used only
    # to weight epoch means when the adapter logs the loss (Lightning infers it otherwise).
    batch_size: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        new_fields = [
            name
            for name, annotation in cls.__dict__.get("__annotations__", {}).items()
            if "ClassVar" not in str(annotation)
        ]
        if new_fields:
            raise TypeError(
                f"{cls.__qualname__} declares fields {new_fields}; step results carry only `loss`, `metadata`"
                " and `batch_size`. Put extra values in `metadata`, or expose them as properties."
            )
        _register_pytree_node(cls)

    # The default is None, not _EMPTY_METADATA: torch.compile cannot trace a call that leaves out
    # an argument whose default is an object of a class of ours (a graph break per step).
    def __init__(self, loss: torch.Tensor, metadata: MetaT | None = None, batch_size: int | None = None) -> None:
        # Checks what the caller passed, whatever its annotation said. A plain 0-d tensor of a loss
        # dtype is a loss: that usual case is told apart with no call (this runs on every step).
        if not (type(loss) is torch.Tensor and loss.ndim == 0 and loss.dtype in LOSS_DTYPES) and not is_loss_tensor(
            loss
        ):
            raise loss_error(f"{type(self).__name__}.loss", loss)
        if metadata is None:
            metadata = _EMPTY_METADATA  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
        elif metadata is not _EMPTY_METADATA:  # the default needs no check
            metadata = _frozen_metadata(type(self).__name__, metadata)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
        if batch_size is not None and (type(batch_size) is not int or batch_size < 1):
            raise StepResultError(
                f"{type(self).__name__}.batch_size",
                describe(batch_size),
                "None, or a positive int: the number of samples the loss averages over",
                "pass the count, e.g. `batch_size=len(x)`, or leave it out to let Lightning infer it",
            )
        fields = self.__dict__  # frozen: fields are stored past __setattr__, as dataclasses' own __init__ does
        fields["loss"] = loss
        fields["metadata"] = metadata
        fields["batch_size"] = batch_size

    @classmethod
    def _trusted(cls, loss: torch.Tensor, metadata: Mapping[str, Any], batch_size: int | None = None) -> Self:
        """Build without checks, for values that already passed them (pytree unflatten, hook re-typing)."""
        result = object.__new__(cls)
        frozen = metadata if type(metadata) is FrozenMetadata else FrozenMetadata(metadata)
        result.__dict__.update(loss=loss, metadata=frozen, batch_size=batch_size)
        return result

    # Mapping view: {"loss": loss, **metadata}
    def __getitem__(self, key: str) -> Any:
        if key == "loss":
            return self.loss
        return self.metadata[key]

    def __iter__(self) -> Iterator[str]:
        yield "loss"
        yield from self.metadata

    def __len__(self) -> int:
        return 1 + len(self.metadata)

    def __contains__(self, key: object) -> bool:
        return key == "loss" or key in self.metadata

    def copy(self) -> dict[str, Any]:
        """``{"loss": loss, **metadata}`` as a new dict (Lightning's manual-optimization loop calls this)."""
        return {"loss": self.loss, **self.metadata}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepResult):
            result = cast("StepResult[Mapping[str, object]]", other)  # isinstance leaves the type argument unknown
            return (
                type(self) is type(result)
                and self.loss is result.loss
                and self.batch_size == result.batch_size
                and self.metadata == result.metadata
            )
        if isinstance(other, Mapping):
            return _mappings_equal(self, cast("Mapping[object, object]", other))
        return NotImplemented

    def __hash__(self) -> int:
        # Equal results share their loss tensor, so hashing its identity is consistent with __eq__.
        return hash((type(self), id(self.loss)))


def _refuse_setattr(self: object, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delattr(self: object, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


# The dataclass machinery freezes only the decorated class against new attribute names; results
# of every subclass must refuse them too (`result.los = x` is a typo, not a new field).
StepResult.__setattr__ = _refuse_setattr  # type: ignore[method-assign]
StepResult.__delattr__ = _refuse_delattr  # type: ignore[method-assign]


class TrainStepResult(StepResult[MetaT]):
    """What ``training_step`` returns: ``TrainStepResult(loss=loss, metadata={"logits": logits})``."""


class ValStepResult(StepResult[MetaT]):
    """What ``validation_step`` and ``test_step`` return: ``ValStepResult(loss=loss, metadata={...})``."""


# The dtypes a loss may have: those autograd and Lightning's loops (which divide the loss by
# accumulate_grad_batches) handle; float8 counts as floating point but cannot even be divided on CPU.
LOSS_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def is_loss_tensor(value: object) -> TypeGuard[torch.Tensor]:
    """A tensor of a real floating dtype holding one value: what backward and Lightning accept as a loss."""
    return isinstance(value, torch.Tensor) and value.dtype in LOSS_DTYPES and value.numel() == 1


def loss_error(where: str, loss: object) -> StepResultError:
    """The error for a ``loss`` that is not a tensor holding one real floating value."""
    expected = "a torch.Tensor of dtype float16, bfloat16, float32 or float64 holding one value (shape () or (1,))"
    if isinstance(loss, torch.Tensor):
        if loss.dtype.is_floating_point and loss.dtype not in LOSS_DTYPES:
            fix = "compute the loss in a wider dtype, e.g. `loss = loss.float()` (float16, bfloat16, float32, float64)"
        elif not loss.dtype.is_floating_point:
            if loss.dtype.is_complex:
                fix = "reduce the complex value to a real one, e.g. `loss = loss.abs()` or `loss.real`"
            else:
                fix = (
                    "compute the loss from floating-point model outputs, e.g."
                    " `F.cross_entropy(logits, target)`; integer and bool tensors carry no gradient"
                )
        elif loss.numel() == 0:
            fix = "the loss is empty: check the batch is not empty before reducing it"
        else:
            fix = "reduce it to one value, e.g. `loss = loss.mean()` (or pass `reduction='mean'` to the loss)"
        return StepResultError(where, describe_tensor(loss), expected, fix)
    if isinstance(loss, (float, int)) and not isinstance(loss, bool):
        fix = "return the tensor itself: `loss`, not `loss.item()` or `float(loss)`"
    elif isinstance(loss, (list, tuple)):
        fix = "return the loss tensor, not a container of it, e.g. `loss=torch.stack(losses).sum()`"
    elif type(loss).__module__ == "numpy":
        fix = "compute the loss with torch operations on the model's output so it keeps its graph"
    else:
        fix = "compute the loss as a tensor, e.g. `loss = F.mse_loss(self(x), y)`"
    # The list/tuple narrowing above leaves element types unknown to pyright; describe() takes any object.
    return StepResultError(where, describe(loss), expected, fix)  # pyright: ignore[reportUnknownArgumentType]


def _frozen_metadata(owner: str, metadata: object) -> FrozenMetadata:
    if type(metadata) is dict:  # the common case, without the Mapping ABC check (nor a typing.cast call)
        given: dict[str, object] = metadata  # pyright: ignore[reportUnknownVariableType]  # keys checked below
        frozen = FrozenMetadata(given)
        data = frozen._data  # pyright: ignore[reportPrivateUsage]
        for key in data:  # a loop, not all(<generator>): half the cost for the usual few keys
            if type(key) is not str:
                break
        else:
            if "loss" not in data:
                return frozen
    where = f"{owner}.metadata"
    if not isinstance(metadata, Mapping):
        fix = "pass a dict, e.g. `metadata={'logits': logits}`"
        if isinstance(metadata, (list, tuple)):
            fix = "pass a dict, not a list of pairs: `metadata=dict(pairs)`"
        raise StepResultError(where, describe(metadata), "a mapping with str keys", fix)  # pyright: ignore[reportUnknownArgumentType]
    mapping = cast("Mapping[object, object]", metadata)  # isinstance leaves the type arguments unknown
    # A FrozenMetadata is immutable, so it is shared rather than copied; its keys are checked all the same.
    frozen = mapping if type(mapping) is FrozenMetadata else FrozenMetadata(cast("Mapping[str, object]", mapping))
    for key in frozen._data:  # pyright: ignore[reportPrivateUsage]
        if not isinstance(key, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise StepResultError(
                where,
                f"key {describe(key)} in {describe(mapping)}",
                "str keys only",
                f"use a string key, e.g. `{str(key)!r}` instead of {key!r}",
            )
    if "loss" in frozen._data:  # pyright: ignore[reportPrivateUsage]
        raise StepResultError(
            where,
            describe(mapping),
            "no 'loss' key: the loss is the result's own field",
            "pass the loss as `loss=...` and drop it from metadata, or rename the key (e.g. 'raw_loss')",
        )
    return frozen
