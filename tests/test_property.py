"""Property: whatever a step returns, the checks accept it (and Lightning then takes it) or raise StepResultError.

The returns are drawn by hypothesis: nested containers of tensors of every dtype and shape
(0-element ones too), with or without a graph to a parameter, numbers including NaN and inf,
None, strings, bytes, numpy values, hostile objects (a raising ``__eq__``/``__repr__``/``__len__``),
dicts with non-str keys, and ``TrainStepResult``/``ValStepResult``. For each, under strict and
lenient policies, every non-finite policy, and automatic and manual optimization:

- ``check_training_return`` / ``check_evaluation_return`` either raise ``StepResultError`` (never
  another exception) or give back a value that Lightning's own ``ClosureResult`` /
  ``ManualResult.from_training_step_output`` accept; under automatic optimization its closure loss
  backpropagates;
- the returned object is not changed (a structural snapshot before and after: containers by
  identity and content, tensors by identity, data pointer, version counter and bytes);
- no check hangs (a hypothesis deadline, and a watchdog alarm).

A second property runs generated returns through real ``Trainer`` runs end to end.
"""

from __future__ import annotations

import math
import signal
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from limits import hang_limit
from pytorch_lightning.loops.optimization.automatic import ClosureResult
from pytorch_lightning.loops.optimization.manual import ManualResult
from torch import nn

from lightning_step_types import (
    StepResultAdapter,
    StepResultError,
    StepResultWarning,
    TrainStepResult,
    TypedLightningModule,
    ValStepResult,
)
from lightning_step_types.policy import StepPolicy
from lightning_step_types.results import StepResult
from lightning_step_types.step.checks import StepCall, check_evaluation_return, check_training_return

settings.register_profile(
    "step-returns",
    max_examples=300,
    deadline=timedelta(seconds=hang_limit(idle_s=0.75)),  # a hang, not timing noise: a check takes microseconds
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # the same examples on every run: a failure reproduces
    database=None,  # nothing written into the checkout
)
PROFILE = settings.get_profile("step-returns")
WATCHDOG_SECONDS = math.ceil(hang_limit(idle_s=4))  # signal.alarm takes whole seconds

HOOKS = ("training_step", "validation_step", "test_step")
POLICIES = ("raise", "warn", "skip", None)

# --- hostile objects ----------------------------------------------------------------------------


class Boom(Exception):
    """Raised by the hostile objects: must never escape the checks."""


class RaisingEq:
    """Hashable, but comparing it with anything but its own kind raises (hypothesis compares keys)."""

    def __init__(self, tag: int) -> None:
        self.tag = tag

    def __hash__(self) -> int:
        return hash(("RaisingEq", self.tag))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RaisingEq):
            return self is other
        raise Boom("__eq__")

    def __ne__(self, other: object) -> bool:
        if isinstance(other, RaisingEq):
            return self is not other
        raise Boom("__ne__")


class RaisingRepr:
    def __repr__(self) -> str:
        raise Boom("__repr__")

    def __str__(self) -> str:
        raise Boom("__str__")


class RaisingLen:
    def __len__(self) -> int:
        raise Boom("__len__")


class RaisingLenList(list):  # type: ignore[type-arg]
    """A list whose ``len`` raises (iteration works)."""

    def __len__(self) -> int:
        raise Boom("__len__")


class RaisingBool:
    def __bool__(self) -> bool:
        raise Boom("__bool__")


class ReadOnlyMapping(Mapping[Any, Any]):
    """A Mapping with only the abstract methods: no ``copy()``, no ``__setitem__``."""

    def __init__(self, data: dict[Any, Any]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class RaisingLenMapping(ReadOnlyMapping):
    def __len__(self) -> int:
        raise Boom("__len__")


# --- strategies ---------------------------------------------------------------------------------

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)  # floating, but Lightning cannot divide them
OTHER_DTYPES = (
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
SHAPES = ((), (1,), (1, 1), (0,), (3,), (2, 3), (0, 2))
ELEMENTS = (0.0, 1.5, -2.0, 0.25, math.nan, math.inf, -math.inf)


def tensors(
    source: nn.Parameter, dtypes: tuple[torch.dtype, ...] = FLOAT_DTYPES + OTHER_DTYPES
) -> st.SearchStrategy[torch.Tensor]:
    """Tensors of the given dtypes and ``SHAPES``; floating and complex ones may require grad:
    as a leaf, through a graph to ``source`` (a module parameter), or through a graph to an input only."""

    @st.composite
    def build(draw: st.DrawFn) -> torch.Tensor:
        dtype = draw(st.sampled_from(dtypes))
        shape = draw(st.sampled_from(SHAPES))
        n = math.prod(shape)
        values = draw(st.lists(st.sampled_from(ELEMENTS), min_size=n, max_size=n))
        base = torch.tensor(values, dtype=torch.float64).reshape(shape)
        if dtype.is_floating_point or dtype.is_complex:
            grad = draw(st.sampled_from(("none", "leaf", "parameter", "input", "nn.Parameter")))
        else:
            grad = "none"
            base = torch.nan_to_num(base, nan=0.0, posinf=7.0, neginf=-7.0)
        if grad == "parameter":
            return (source.sum() * 0 + base.float()).to(dtype)
        if grad == "input":
            return (torch.zeros((), requires_grad=True) + base.float()).to(dtype)
        tensor = base.to(dtype)
        if grad == "leaf":
            return tensor.requires_grad_()
        if grad == "nn.Parameter" and dtype.is_floating_point:
            return nn.Parameter(tensor)
        return tensor

    return build()


def losses(source: nn.Parameter) -> st.SearchStrategy[torch.Tensor]:
    """Tensors a result accepts as its loss: one value of a floating dtype."""
    return tensors(source, FLOAT_DTYPES).filter(lambda t: t.numel() == 1)


KEYS = st.one_of(
    st.sampled_from(["loss", "Loss", "los", "preds", "log", "progress_bar", "hiddens", ""]),
    st.text(max_size=4),
    st.integers(-2, 2),
    st.none(),
    st.tuples(st.integers(0, 1)),
)
# Keys whose comparison or repr raises: see test_hostile_returns_are_rejected_cleanly.
HOSTILE_KEYS = st.one_of(st.builds(RaisingEq, st.integers(0, 3)), st.builds(RaisingRepr))


def numpy_values() -> st.SearchStrategy[Any]:
    floats = st.sampled_from(ELEMENTS)
    return st.one_of(
        st.builds(np.float32, floats),
        st.builds(np.float64, floats),  # a subclass of float
        st.builds(np.int64, st.integers(-3, 3)),
        st.builds(lambda v, shape: np.full(shape, v, dtype=np.float32), floats, st.sampled_from(SHAPES)),
        st.builds(lambda shape: np.zeros(shape, dtype=np.int64), st.sampled_from(SHAPES)),
    )


def leaves(source: nn.Parameter) -> st.SearchStrategy[Any]:
    return st.one_of(
        tensors(source),
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.complex_numbers(allow_nan=True, allow_infinity=True),
        st.text(max_size=6),
        st.binary(max_size=6),
        numpy_values(),
        # hostile values (not keys, not containers): the checks must describe them without tripping
        st.sampled_from([RaisingRepr, RaisingLen, RaisingBool, object]).map(lambda cls: cls()),
        st.builds(RaisingEq, st.integers(0, 3)),
    )


def metadata_values(source: nn.Parameter) -> st.SearchStrategy[dict[str, Any]]:
    names = st.text(max_size=5).filter(lambda k: k != "loss")
    return st.dictionaries(names, leaves(source), max_size=3)


def results(source: nn.Parameter) -> st.SearchStrategy[StepResult[Any]]:
    return st.builds(
        lambda cls, loss, metadata, batch_size: cls(loss=loss, metadata=metadata, batch_size=batch_size),
        st.sampled_from([TrainStepResult, ValStepResult]),
        losses(source),
        metadata_values(source),
        st.one_of(st.none(), st.integers(1, 64)),
    )


def step_returns(
    source: nn.Parameter, *, copyless_top_level: bool = True, hostile: bool = False
) -> st.SearchStrategy[Any]:
    """Anything a step could return; dicts with a 'loss' key are drawn often, to reach the deep checks.

    ``copyless_top_level``: whether the returned object itself may be a Mapping without ``copy()``
    (``ReadOnlyMapping``). ``hostile``: also keys whose ``==``/``repr`` raise, containers whose
    ``len`` raises, and float8 losses (Lightning cannot divide those by accumulate_grad_batches).
    """
    keys = st.one_of(KEYS, HOSTILE_KEYS) if hostile else KEYS
    loss_values = losses(source)
    if hostile:
        loss_values |= tensors(source, FLOAT8_DTYPES).filter(lambda t: t.numel() == 1)
    base = st.one_of(leaves(source), results(source))

    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        containers = [
            st.lists(children, max_size=3),
            st.lists(children, max_size=3).map(tuple),
            st.dictionaries(keys, children, max_size=3),
            st.dictionaries(keys, children, max_size=3).map(ReadOnlyMapping),
        ]
        if hostile:
            containers += [
                st.lists(children, max_size=3).map(RaisingLenList),
                st.dictionaries(keys, children, max_size=3).map(RaisingLenMapping),
            ]
        return st.one_of(containers)

    nested = st.recursive(base, extend, max_leaves=6)
    with_loss = st.builds(
        lambda loss, extra: {"loss": loss, **extra},
        st.one_of(loss_values, leaves(source)),
        st.dictionaries(keys, nested, max_size=2),
    )
    top_level = [nested, with_loss, results(source)]
    if copyless_top_level:
        top_level.append(with_loss.map(ReadOnlyMapping))
    else:  # a nested ReadOnlyMapping is fine; only the returned object itself meets Lightning's .copy()
        top_level[0] = nested.filter(lambda value: not isinstance(value, ReadOnlyMapping))
    return st.one_of(top_level)


# --- snapshots: what "unchanged" means ---------------------------------------------------------


def tensor_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().reshape(-1).contiguous().view(torch.uint8).clone()


def snapshot(value: Any) -> Any:
    """A structure that compares equal only if ``value`` and everything in it is unchanged."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            id(value),
            value.data_ptr(),
            value._version,
            value.requires_grad,
            id(value.grad_fn),
            tuple(value.shape),
            value.dtype,
            tuple(tensor_bytes(value).tolist()),
        )
    if isinstance(value, StepResult):
        return (
            "result",
            id(value),
            type(value),
            snapshot(value.loss),
            snapshot(value.metadata._data),
            value.batch_size,
        )
    if isinstance(value, ReadOnlyMapping):  # its own storage: its __len__ may raise
        return ("mapping", id(value), type(value), snapshot(value._data))
    if isinstance(value, dict):
        return ("dict", id(value), type(value), tuple((id(k), snapshot(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):  # iterating works even when a subclass's __len__ raises
        return ("sequence", id(value), type(value), tuple(snapshot(v) for v in iter(value)))
    if isinstance(value, np.ndarray):
        return ("ndarray", id(value), value.dtype, value.shape, value.tobytes(), value.flags.writeable)
    if isinstance(value, (str, bytes, int, float, complex, np.generic)) or value is None:
        return ("atom", id(value), type(value), repr(value))
    return ("object", id(value), type(value), tuple(sorted(vars(value).items())) if hasattr(value, "__dict__") else ())


# --- the property ---------------------------------------------------------------------------------


class CheckedModule(pl.LightningModule):
    """A real LightningModule for the StepCall: its parameter is the source of the drawn graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))


@contextmanager
def watchdog(seconds: int) -> Iterator[None]:
    """Turn a hang into a failure (hypothesis' deadline only measures calls that return)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(output: Any, hook: str, module: pl.LightningModule, strict: bool, nonfinite: str | None) -> tuple[bool, Any]:
    """(accepted, what Lightning receives); StepResultError means rejected, anything else escapes."""
    call = StepCall(module, hook, StepPolicy.of(strict, nonfinite))  # a fresh one: its warn-once memory too
    checker = check_training_return if hook == "training_step" else check_evaluation_return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StepResultWarning)
        try:
            lightning_output, _ = checker(output, call)
        except StepResultError as error:
            assert error.hook == f"CheckedModule.{hook}"
            return False, None
    return True, lightning_output


def hand_to_lightning(lightning_output: Any, hook: str, automatic: bool) -> None:
    """What Lightning's loops do first with a training step's output."""
    if hook != "training_step":
        return  # evaluation outputs go, unchanged, to the batch-end hooks
    if automatic:
        closure = ClosureResult.from_training_step_output(lightning_output, 1)
        if closure.closure_loss is not None:
            closure.closure_loss.backward()
    else:
        ManualResult.from_training_step_output(lightning_output).asdict()


@PROFILE
@given(
    data=st.data(),
    hook=st.sampled_from(HOOKS),
    strict=st.booleans(),
    nonfinite=st.sampled_from(POLICIES),
    automatic=st.booleans(),
)
def test_checks_accept_or_raise_step_result_error(
    data: st.DataObject, hook: str, strict: bool, nonfinite: str | None, automatic: bool
) -> None:
    module = CheckedModule()
    module.automatic_optimization = automatic
    manual_training = (
        hook == "training_step" and not automatic
    )  # see test_mapping_without_copy_under_manual_optimization
    output = data.draw(step_returns(module.weight, copyless_top_level=not manual_training), label="returned")
    check_and_hand_over(output, hook, module, strict, nonfinite, automatic)


def check_and_hand_over(
    output: Any, hook: str, module: pl.LightningModule, strict: bool, nonfinite: str | None, automatic: bool
) -> None:
    before = snapshot(output)
    with watchdog(WATCHDOG_SECONDS):
        accepted, lightning_output = check(output, hook, module, strict, nonfinite)
        event("accepted" if accepted else "StepResultError")
        assert snapshot(output) == before, "the checks changed the returned object"
        if accepted:
            hand_to_lightning(lightning_output, hook, automatic)
    if accepted and isinstance(output, StepResult) and lightning_output is not None:
        if isinstance(lightning_output, torch.Tensor):
            # a training result without metadata reaches Lightning as its bare loss, which Lightning's
            # loops turn into the same {"loss": loss} as the dict
            assert hook == "training_step" and len(output.metadata) == 0 and lightning_output is output.loss
        else:
            # a typed result reaches Lightning as {"loss": loss, **metadata}, the same objects
            assert list(lightning_output) == list(output)
            assert all(lightning_output[key] is output[key] for key in output)


# --- hostile returns: objects that raise when inspected, float8 losses, copyless Mappings ---------


@settings(PROFILE, max_examples=300, phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False)
@given(
    data=st.data(),
    hook=st.sampled_from(HOOKS),
    strict=st.booleans(),
    nonfinite=st.sampled_from(POLICIES),
    automatic=st.booleans(),
)
def test_hostile_returns_are_rejected_cleanly(
    data: st.DataObject, hook: str, strict: bool, nonfinite: str | None, automatic: bool
) -> None:
    """The same property over hostile returns: raising keys and containers, float8 losses."""
    module = CheckedModule()
    module.automatic_optimization = automatic
    output = data.draw(step_returns(module.weight, hostile=True), label="returned")
    check_and_hand_over(output, hook, module, strict, nonfinite, automatic)


def checked_call(hook: str, strict: bool, automatic: bool = True) -> tuple[CheckedModule, StepCall]:
    module = CheckedModule()
    module.automatic_optimization = automatic
    return module, StepCall(module, hook, StepPolicy.of(strict, "raise"))


@pytest.mark.parametrize("container", [RaisingLenList, RaisingLenMapping], ids=["list", "mapping"])
def test_container_with_raising_len_is_rejected_cleanly(container: type) -> None:
    _, call = checked_call("training_step", strict=True)
    output = container([1.0]) if container is RaisingLenList else container({"preds": 1.0})
    with pytest.raises(StepResultError) as info:
        check_training_return(output, call)
    assert str(info.value).startswith("CheckedModule.training_step: return value\n  got:      ")
    assert "expected: TrainStepResult (or None to skip the batch)" in str(info.value)


@pytest.mark.parametrize(("key", "strict"), [(RaisingEq(0), True), (RaisingRepr(), True), (RaisingRepr(), False)])
def test_key_with_raising_eq_or_repr_is_handled(key: object, strict: bool) -> None:
    module, call = checked_call("training_step", strict=strict)
    output = {"loss": module.weight * 2, key: 1}
    if strict:  # a dict is not a typed result: rejected, with a rewrite hint that survives the key
        with pytest.raises(StepResultError, match=r"expected: TrainStepResult \(or None to skip the batch\)"):
            check_training_return(output, call)
    else:  # Lightning accepts it: a warning about the non-str key, and the dict passes on unchanged
        with pytest.warns(StepResultWarning, match="str keys: Lightning and loggers address outputs by name"):
            lightning_output, result = check_training_return(output, call)
        assert lightning_output is output and result is None


class ManualCopylessMapping(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        loss = (self.weight * 2) ** 2
        self.manual_backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        return ReadOnlyMapping({"loss": loss})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def quiet_trainer(root: Path, callbacks: list[pl.Callback]) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )


def test_mapping_without_copy_under_manual_optimization(tmp_path: Path) -> None:
    """Accepted, so Lightning must take it: the adapter hands its manual loop a dict."""
    trainer = quiet_trainer(tmp_path, [StepResultAdapter()])
    trainer.fit(ManualCopylessMapping(), train_dataloaders=[torch.zeros(1)])
    assert trainer.global_step == 1


class Float8Loss(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=((self.weight * 2) ** 2).to(torch.float8_e4m3fn))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_float8_loss_is_rejected_before_lightning(tmp_path: Path) -> None:
    with pytest.raises(StepResultError, match=r"Float8Loss\.training_step"):
        quiet_trainer(tmp_path, []).fit(Float8Loss(), train_dataloaders=[torch.zeros(1)])


# --- end to end --------------------------------------------------------------------------------


def _init_drawn(self: Any, draw: Callable[[nn.Parameter], Any], automatic: bool) -> None:
    self.weight = nn.Parameter(torch.ones(()))
    self.draw = draw
    self.automatic_optimization = automatic
    self.returned = []


def _drawn_step(self: Any, batch: Any, batch_idx: int) -> Any:
    """Returns a drawn object; the draw happens inside the step, on the module's own weight."""
    if not self.automatic_optimization and self.training:
        optimizer = self.optimizers()
        self.manual_backward((self.weight * 2) ** 2)
        optimizer.step()
        optimizer.zero_grad()
    output = self.draw(self.weight)
    self.returned.append(output)
    return output


def _sgd(self: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(self.parameters(), lr=0.1)


class DrawnReturnModel(TypedLightningModule):
    def __init__(self, draw: Callable[[nn.Parameter], Any], automatic: bool) -> None:
        super().__init__()
        _init_drawn(self, draw, automatic)

    training_step = _drawn_step
    validation_step = _drawn_step
    configure_optimizers = _sgd


class PlainDrawnReturnModel(pl.LightningModule):
    def __init__(self, draw: Callable[[nn.Parameter], Any], automatic: bool) -> None:
        super().__init__()
        _init_drawn(self, draw, automatic)

    training_step = _drawn_step
    validation_step = _drawn_step
    configure_optimizers = _sgd


ONE_BATCH = [torch.zeros(1)]


@settings(PROFILE, max_examples=20)
@given(
    data=st.data(),
    hook=st.sampled_from(("training_step", "validation_step")),
    kind=st.sampled_from(("typed", "adapter", "adapter-strict")),
    automatic=st.booleans(),
)
def test_generated_returns_through_a_trainer(
    data: st.DataObject, hook: str, kind: str, automatic: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    manual_training = (
        hook == "training_step" and not automatic
    )  # see test_mapping_without_copy_under_manual_optimization

    def draw(weight: nn.Parameter) -> Any:
        return data.draw(step_returns(weight, copyless_top_level=not manual_training), label="returned")

    if kind == "typed":
        model: pl.LightningModule = DrawnReturnModel(draw, automatic)
        callbacks: list[pl.Callback] = []
    else:
        model = PlainDrawnReturnModel(draw, automatic)
        callbacks = [StepResultAdapter(strict=kind == "adapter-strict")]
    trainer = quiet_trainer(tmp_path_factory.mktemp("run"), callbacks)
    with warnings.catch_warnings(), watchdog(WATCHDOG_SECONDS):
        warnings.simplefilter("ignore")
        try:
            if hook == "training_step":
                trainer.fit(model, train_dataloaders=ONE_BATCH)
            else:
                trainer.validate(model, dataloaders=ONE_BATCH, verbose=False)
        except StepResultError as error:
            assert str(error).startswith(f"{type(model).__qualname__}.{hook}: ")
            return
    assert len(model.returned) == 1
    if hook == "training_step":
        assert trainer.global_step == 1
