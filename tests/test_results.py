"""TrainStepResult / ValStepResult as values: frozen, checked on construction, read-only mappings,
picklable, pytree nodes, and never handed to Lightning's loops as objects."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
from lightning_utilities import apply_to_collection
from models import Recorder, TypedRegressor, make_loader, make_trainer

from lightning_step_types import FrozenMetadata, StepResultError, TrainStepResult, ValStepResult

RESULT_CLASSES = [TrainStepResult, ValStepResult]
LOSS_EXPECTED = "a torch.Tensor of dtype float16, bfloat16, float32 or float64 holding one value (shape () or (1,))"


def error_parts(error: StepResultError) -> tuple[str, str, str, str]:
    return error.where, error.got, error.expected, error.fix


# --- frozen dataclass -------------------------------------------------------------------------


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_results_are_frozen_dataclasses(cls: type[TrainStepResult]) -> None:
    result = cls(loss=torch.tensor(1.0), metadata={"a": 1})
    assert dataclasses.is_dataclass(result)
    assert [f.name for f in dataclasses.fields(result)] == ["loss", "metadata", "batch_size"]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'loss'"):
        result.loss = torch.tensor(2.0)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'metadata'"):
        result.metadata = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'batch_size'"):
        result.batch_size = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'loss'"):
        del result.loss


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_results_reject_new_attributes(cls: type[TrainStepResult]) -> None:
    result = cls(loss=torch.tensor(1.0))
    try:
        result.los = torch.tensor(2.0)  # type: ignore[attr-defined]  # a typo must not pass silently
    except dataclasses.FrozenInstanceError:
        return
    raise AssertionError(f"{cls.__name__} accepted a new attribute: {vars(result)}")


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_replace_builds_a_new_result_and_checks_new_values(cls: type[TrainStepResult]) -> None:
    loss, new_loss = torch.tensor(1.0), torch.tensor(2.0)
    result = cls(loss=loss, metadata={"a": 1})

    replaced = dataclasses.replace(result, loss=new_loss)
    assert type(replaced) is cls
    assert replaced.loss is new_loss
    assert dict(replaced.metadata) == {"a": 1}
    assert result.loss is loss  # the original is untouched

    with_metadata = dataclasses.replace(result, metadata={"b": 2})
    assert with_metadata.loss is loss
    assert dict(with_metadata.metadata) == {"b": 2}

    with_size = dataclasses.replace(result, batch_size=4)
    assert (with_size.loss, with_size.metadata, with_size.batch_size) == (loss, result.metadata, 4)

    with pytest.raises(StepResultError) as bad_loss:
        dataclasses.replace(result, loss=torch.tensor(3))
    assert error_parts(bad_loss.value)[:3] == (
        f"{cls.__name__}.loss",
        "Tensor(shape=(), dtype=int64, requires_grad=False)",
        LOSS_EXPECTED,
    )
    with pytest.raises(StepResultError) as bad_metadata:
        dataclasses.replace(result, metadata={"loss": 1})
    assert bad_metadata.value.where == f"{cls.__name__}.metadata"
    assert bad_metadata.value.expected == "no 'loss' key: the loss is the result's own field"
    with pytest.raises(StepResultError) as bad_size:
        dataclasses.replace(result, batch_size=0)
    assert error_parts(bad_size.value)[:2] == (f"{cls.__name__}.batch_size", "int 0")


# --- metadata is a read-only copy ---------------------------------------------------------------


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_metadata_is_a_read_only_copy(cls: type[TrainStepResult]) -> None:
    logits = torch.zeros(2)
    caller_dict: dict[str, Any] = {"logits": logits, "n": 3}
    result = cls(loss=torch.tensor(1.0), metadata=caller_dict)

    caller_dict["n"] = 4
    caller_dict["extra"] = 5
    del caller_dict["logits"]
    assert dict(result.metadata) == {"logits": logits, "n": 3}
    assert result.metadata["logits"] is logits  # a shallow copy: values are shared, not cloned

    with pytest.raises(TypeError, match="does not support item assignment"):
        result.metadata["n"] = 5  # type: ignore[index]
    with pytest.raises(TypeError, match="does not support item deletion"):
        del result.metadata["n"]  # type: ignore[attr-defined]
    assert not hasattr(result.metadata, "update")
    assert dict(result.metadata) == {"logits": logits, "n": 3}


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_metadata_defaults_to_empty(cls: type[TrainStepResult]) -> None:
    loss = torch.tensor(0.5)
    result = cls(loss=loss)
    assert len(result.metadata) == 0
    assert dict(result) == {"loss": loss}


# --- construction checks --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", RESULT_CLASSES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(), (1,)])
def test_accepted_losses(cls: type[TrainStepResult], dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    loss = torch.full(shape, 0.25, dtype=dtype)
    result = cls(loss=loss)
    assert result.loss is loss


REJECTED_LOSSES = [
    pytest.param(
        1.5,
        "float 1.5",
        "return the tensor itself: `loss`, not `loss.item()` or `float(loss)`",
        id="python-float",
    ),
    pytest.param(
        torch.tensor(3),
        "Tensor(shape=(), dtype=int64, requires_grad=False)",
        "compute the loss from floating-point model outputs, e.g. `F.cross_entropy(logits, target)`;"
        " integer and bool tensors carry no gradient",
        id="int-tensor",
    ),
    pytest.param(
        torch.tensor(True),
        "Tensor(shape=(), dtype=bool, requires_grad=False)",
        "compute the loss from floating-point model outputs, e.g. `F.cross_entropy(logits, target)`;"
        " integer and bool tensors carry no gradient",
        id="bool-tensor",
    ),
    pytest.param(
        torch.tensor(1 + 2j),
        "Tensor(shape=(), dtype=complex64, requires_grad=False)",
        "reduce the complex value to a real one, e.g. `loss = loss.abs()` or `loss.real`",
        id="complex-tensor",
    ),
    pytest.param(
        torch.ones(3),
        "Tensor(shape=(3,), dtype=float32, requires_grad=False)",
        "reduce it to one value, e.g. `loss = loss.mean()` (or pass `reduction='mean'` to the loss)",
        id="shape-3",
    ),
    pytest.param(
        torch.ones(0),
        "Tensor(shape=(0,), dtype=float32, requires_grad=False)",
        "the loss is empty: check the batch is not empty before reducing it",
        id="empty",
    ),
    pytest.param(
        np.float32(0.5),
        "numpy.float32 np.float32(0.5)",
        "compute the loss with torch operations on the model's output so it keeps its graph",
        id="numpy-scalar",
    ),
    pytest.param(
        [torch.tensor(1.0)],
        "list of 1: (Tensor(shape=(), dtype=float32, requires_grad=False))",
        "return the loss tensor, not a container of it, e.g. `loss=torch.stack(losses).sum()`",
        id="list",
    ),
    pytest.param(
        None,
        "None",
        "compute the loss as a tensor, e.g. `loss = F.mse_loss(self(x), y)`",
        id="none",
    ),
]


@pytest.mark.parametrize("cls", RESULT_CLASSES)
@pytest.mark.parametrize(("loss", "got", "fix"), REJECTED_LOSSES)
def test_rejected_losses(cls: type[TrainStepResult], loss: object, got: str, fix: str) -> None:
    with pytest.raises(StepResultError) as info:
        cls(loss=loss)  # type: ignore[arg-type]
    error = info.value
    assert error_parts(error) == (f"{cls.__name__}.loss", got, LOSS_EXPECTED, fix)
    assert error.hook is None  # only the adapter knows which step built it
    assert str(error) == (f"{cls.__name__}.loss\n  got:      {got}\n  expected: {LOSS_EXPECTED}\n  fix:      {fix}")
    assert isinstance(error, TypeError)  # StepResultError is a TypeError, as wrong argument types are


@pytest.mark.parametrize("cls", RESULT_CLASSES)
@pytest.mark.parametrize(
    ("metadata", "got", "fix"),
    [
        pytest.param(
            [("a", 1)],
            "list of 1: (tuple of 2: (str 'a', int 1))",
            "pass a dict, not a list of pairs: `metadata=dict(pairs)`",
            id="list-of-pairs",
        ),
        pytest.param(
            object(), "object <object object at", "pass a dict, e.g. `metadata={'logits': logits}`", id="object"
        ),
        pytest.param("logits", "str 'logits'", "pass a dict, e.g. `metadata={'logits': logits}`", id="str"),
    ],
)
def test_metadata_must_be_a_mapping(cls: type[TrainStepResult], metadata: object, got: str, fix: str) -> None:
    with pytest.raises(StepResultError) as info:
        cls(loss=torch.tensor(1.0), metadata=metadata)  # type: ignore[arg-type]
    error = info.value
    assert error.where == f"{cls.__name__}.metadata"
    assert error.got.startswith(got)
    assert error.expected == "a mapping with str keys"
    assert error.fix == fix


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_metadata_keys_must_be_str(cls: type[TrainStepResult]) -> None:
    with pytest.raises(StepResultError) as info:
        cls(loss=torch.tensor(1.0), metadata={"a": 1, 0: 2})  # type: ignore[dict-item]
    assert error_parts(info.value) == (
        f"{cls.__name__}.metadata",
        "key int 0 in dict with keys ['a', 0]",
        "str keys only",
        "use a string key, e.g. `'0'` instead of 0",
    )


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_loss_is_a_reserved_metadata_key(cls: type[TrainStepResult]) -> None:
    with pytest.raises(StepResultError) as info:
        cls(loss=torch.tensor(1.0), metadata={"loss": torch.tensor(2.0), "acc": 1.0})
    assert error_parts(info.value) == (
        f"{cls.__name__}.metadata",
        "dict with keys ['loss', 'acc']",
        "no 'loss' key: the loss is the result's own field",
        "pass the loss as `loss=...` and drop it from metadata, or rename the key (e.g. 'raw_loss')",
    )


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_a_user_built_frozen_metadata_is_checked_too(cls: type[TrainStepResult]) -> None:
    with pytest.raises(StepResultError) as info:
        cls(loss=torch.tensor(1.0), metadata=FrozenMetadata({"loss": torch.tensor(2.0)}))
    assert info.value.expected == "no 'loss' key: the loss is the result's own field"


# --- mapping view -------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_mapping_view_is_loss_then_metadata(cls: type[TrainStepResult]) -> None:
    loss, logits = torch.tensor(0.5), torch.randn(2, 3)
    result = cls(loss=loss, metadata={"logits": logits, "acc": 0.75})

    assert dict(result) == {"loss": loss, "logits": logits, "acc": 0.75}
    assert list(result) == ["loss", "logits", "acc"]
    assert list(result.keys()) == ["loss", "logits", "acc"]
    assert list(result.values())[0] is loss
    assert len(result) == 3
    assert "loss" in result and "logits" in result and "acc" in result
    assert "missing" not in result
    assert result["loss"] is loss
    assert result["logits"] is logits
    assert result.get("acc") == 0.75
    assert result.get("missing") is None
    assert result.get("missing", 7) == 7
    with pytest.raises(KeyError):
        result["missing"]

    copied = result.copy()
    assert type(copied) is dict
    assert copied == {"loss": loss, "logits": logits, "acc": 0.75}
    copied["extra"] = 1  # a new plain dict: changing it leaves the result alone
    assert "extra" not in result
    assert result.copy() is not result.copy()


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_equals_its_plain_dict(cls: type[TrainStepResult]) -> None:
    loss, logits = torch.tensor(0.5), torch.randn(2, 3)
    result = cls(loss=loss, metadata={"logits": logits, "acc": 0.75})
    assert result == {"loss": loss, "logits": logits, "acc": 0.75}
    assert {"loss": loss, "logits": logits, "acc": 0.75} == result
    assert result != {"loss": loss, "logits": logits}
    assert result != {"loss": loss, "logits": logits, "acc": 0.5}
    assert result != {"loss": loss, "logits": logits, "other": 0.75}
    assert result != 1
    assert result != [loss]


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_comparisons_never_raise(cls: type[TrainStepResult]) -> None:
    """Tensors compare by identity (as they hash) and arrays do not raise "ambiguous truth value"."""
    loss = torch.tensor(0.5)
    logits = torch.randn(2, 3)
    array = np.arange(4)
    result = cls(loss=loss, metadata={"logits": logits, "array": array})

    same_objects = cls(loss=loss, metadata={"logits": logits, "array": array})
    equal_values = cls(loss=loss.clone(), metadata={"logits": logits.clone(), "array": array.copy()})
    other_logits = cls(loss=loss, metadata={"logits": logits.clone(), "array": array})
    other_array = cls(loss=loss, metadata={"logits": logits, "array": array.copy()})

    assert result == same_objects
    assert result != equal_values
    assert result != other_logits
    assert result != other_array
    assert result == {"loss": loss, "logits": logits, "array": array}
    assert result != {"loss": loss, "logits": logits, "array": array.copy()}
    assert result.metadata == {"logits": logits, "array": array}
    assert result.metadata != {"logits": logits.clone(), "array": array}


@pytest.mark.parametrize("cls", RESULT_CLASSES)
def test_hash_is_consistent_with_equality(cls: type[TrainStepResult]) -> None:
    loss = torch.tensor(0.5)
    result = cls(loss=loss, metadata={"logits": torch.zeros(2)})
    twin = cls(loss=loss, metadata=result.metadata)
    assert result == twin
    assert hash(result) == hash(twin)
    assert len({result, twin}) == 1
    assert {result: "value"}[twin] == "value"
    assert hash(result.metadata) == hash(twin.metadata)
    other = cls(loss=torch.tensor(0.5))
    assert result != other
    assert len({result, twin, other}) == 2


def test_batch_size_is_not_part_of_the_mapping_view_but_of_equality() -> None:
    loss = torch.tensor(0.5)
    sized = TrainStepResult(loss=loss, metadata={"a": 1}, batch_size=3)
    unsized = TrainStepResult(loss=loss, metadata={"a": 1})
    assert dict(sized) == {"loss": loss, "a": 1}
    assert sized == {"loss": loss, "a": 1}
    assert sized != unsized
    assert sized == TrainStepResult(loss=loss, metadata={"a": 1}, batch_size=3)


def test_train_and_val_results_with_the_same_contents_differ() -> None:
    loss = torch.tensor(0.5)
    train = TrainStepResult(loss=loss, metadata={"a": 1})
    val = ValStepResult(loss=loss, metadata={"a": 1})
    assert train != val
    assert val != train
    assert not (train == val)
    assert len({train, val}) == 2
    assert train == {"loss": loss, "a": 1} and val == {"loss": loss, "a": 1}


# --- pickle and deepcopy ----------------------------------------------------------------------


@pytest.mark.parametrize("cls", RESULT_CLASSES)
@pytest.mark.parametrize("clone", [lambda r: pickle.loads(pickle.dumps(r)), copy.deepcopy], ids=["pickle", "deepcopy"])
def test_pickle_and_deepcopy(cls: type[TrainStepResult], clone: Any) -> None:
    loss = torch.tensor(0.5, requires_grad=True)  # a leaf: non-leaf tensors refuse deepcopy in torch itself
    logits = torch.randn(2, 3)
    result = cls(loss=loss, metadata={"logits": logits, "names": ["a", "b"]}, batch_size=2)

    restored = clone(result)
    assert type(restored) is cls
    assert restored.batch_size == 2
    assert restored.loss is not loss
    assert torch.equal(restored.loss, loss)
    assert restored.loss.requires_grad
    assert list(restored.metadata) == ["logits", "names"]
    assert torch.equal(restored.metadata["logits"], logits)
    assert restored.metadata["names"] == ["a", "b"]
    with pytest.raises(TypeError, match="does not support item assignment"):
        restored.metadata["names"] = []  # still read-only after the round trip
    with pytest.raises(dataclasses.FrozenInstanceError):
        restored.loss = loss  # type: ignore[misc]


def test_shallow_copy_keeps_the_same_values() -> None:
    loss = torch.tensor(0.5)
    result = TrainStepResult(loss=loss, metadata={"a": 1})
    copied = copy.copy(result)
    assert type(copied) is TrainStepResult
    assert copied.loss is loss
    assert copied == result


# --- pytree -------------------------------------------------------------------------------------


class LogitsResult(TrainStepResult):
    """A user subclass that adds a property (and a ClassVar), but no field."""

    kind: ClassVar[str] = "logits"

    @property
    def logits(self) -> torch.Tensor:
        return self.metadata["logits"]


@pytest.mark.parametrize("cls", [TrainStepResult, ValStepResult, LogitsResult])
def test_pytree_round_trip(cls: type[TrainStepResult]) -> None:
    loss, logits, target = torch.tensor(0.5), torch.randn(2, 3), torch.tensor([1, 2])
    result = cls(loss=loss, metadata={"logits": logits, "target": target}, batch_size=2)

    leaves, spec = pytree.tree_flatten(result)
    assert len(leaves) == 3
    assert leaves[0] is loss and leaves[1] is logits and leaves[2] is target

    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert type(rebuilt) is cls
    assert rebuilt == result
    assert rebuilt.loss is loss
    assert list(rebuilt.metadata) == ["logits", "target"]
    assert rebuilt.batch_size == 2  # not a leaf: it travels in the spec

    doubled = pytree.tree_map(lambda t: t * 2, result)
    assert type(doubled) is cls
    assert doubled.batch_size == 2
    assert torch.equal(doubled.loss, loss * 2)
    assert torch.equal(doubled.metadata["logits"], logits * 2)
    assert torch.equal(doubled.metadata["target"], target * 2)
    with pytest.raises(TypeError, match="does not support item assignment"):
        doubled.metadata["logits"] = None  # type: ignore[index]
    if cls is LogitsResult:
        assert doubled.logits is doubled.metadata["logits"]  # type: ignore[attr-defined]


def test_pytree_sees_results_nested_in_containers() -> None:
    loss = torch.tensor(0.5)
    nested = {"step": [TrainStepResult(loss=loss, metadata={"x": torch.ones(1)})]}
    leaves, spec = pytree.tree_flatten(nested)
    assert len(leaves) == 2 and leaves[0] is loss
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert type(rebuilt["step"][0]) is TrainStepResult
    assert rebuilt["step"][0] == nested["step"][0]


def test_a_subclass_cannot_declare_fields() -> None:
    with pytest.raises(TypeError) as info:

        class WithField(TrainStepResult):
            accuracy: float = 0.0

    assert str(info.value) == (
        "test_a_subclass_cannot_declare_fields.<locals>.WithField declares fields ['accuracy'];"
        " step results carry only `loss`, `metadata` and `batch_size`. Put extra values in `metadata`,"
        " or expose them as properties."
    )


def test_apply_to_collection_refuses_a_frozen_result() -> None:
    """Documents lightning_utilities' behaviour on a result: it treats it as a frozen dataclass,
    before looking at it as a Mapping. This is why the adapter hands Lightning plain dicts."""
    loss = torch.tensor(0.5)
    result = ValStepResult(loss=loss, metadata={"preds": torch.ones(2)})
    with pytest.raises(ValueError, match="A frozen dataclass was passed to `apply_to_collection`"):
        apply_to_collection(result, torch.Tensor, lambda t: t * 2)
    untouched = apply_to_collection(result, torch.Tensor, lambda t: t * 2, allow_frozen=True)
    assert untouched is not result  # a deep copy ...
    assert torch.equal(untouched.loss, loss)  # ... whose tensors were not transformed
    assert torch.equal(untouched.metadata["preds"], torch.ones(2))
    # The plain dict the adapter gives Lightning is transformed as usual.
    doubled = apply_to_collection(dict(result), torch.Tensor, lambda t: t * 2)
    assert type(doubled) is dict and torch.equal(doubled["loss"], loss * 2)


def test_lightning_callbacks_never_receive_a_result_object(tmp_path: Any) -> None:
    recorder = Recorder()
    model = TypedRegressor()
    trainer = make_trainer(tmp_path, callbacks=[recorder], limit_val_batches=2, limit_test_batches=2)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    trainer.validate(model, make_loader(seed=1), verbose=False)
    trainer.test(model, make_loader(seed=2), verbose=False)

    by_hook = {hook: recorder.outputs(hook) for hook in ("train", "validation", "test")}
    assert [len(v) for v in by_hook.values()] == [4, 4, 2]  # fit validates 2 batches, validate 2 more
    for outputs in recorder.seen:
        assert type(outputs[1]) is dict
        assert list(outputs[1]) == ["loss", "preds"]
