"""torch.compile: a compiled module trains as the compiled plain module does, with no graph break of ours.

Both ways of compiling a LightningModule: the whole module (``trainer.fit(torch.compile(model))``,
where Lightning compiles ``forward`` and the steps) and its submodules (``torch.compile`` in
``configure_model``), for the typed module and the adapter, on CPU inductor. Each run is compared
with the same model as plain Lightning compiled the same way: the same final parameters, the same
graph-break count (dynamo's ``counters["graph_break"]``, 0 for these steps), and no dynamo log line
or warning that the plain run does not give too. Every model computes the same graphs, so inductor
compiles them once and later runs hit its cache.

The steps call no ``self.log`` unless a test says so: ``self.log`` in a compiled step is measured
on its own below, for the typed module (its calls are made after the compiled step returns), for
Lightning's own ``self.log`` inside the compiled graph, and for plain modules. The figures the docs
quote are these tests' (torch 2.13.0, pytorch-lightning 2.6.6: ``MEASURED_TORCH``).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning.pytorch as lightning_pytorch
import pytest
import pytorch_lightning
import torch
from models import RegressorParts, assert_same_params, make_loader, params_of, trainer_kwargs
from torch._dynamo.utils import counters

import lightning_step_types.step.compiled_logging as compiled_logging
from lightning_step_types import StepResultError, TrainStepResult, ValStepResult, compiled
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning

FLAVOURS = {
    "pytorch_lightning": (pytorch_lightning, lst_pytorch_lightning),
    "lightning.pytorch": (lightning_pytorch, lst_lightning_pytorch),
}
NAN_BATCH = 2
# The torch release whose dynamo the exact figures below were measured with (docs/quickstart.md#torchcompile).
MEASURED_TORCH = "2.13."


class Steps(RegressorParts):
    """One regressor's steps; ``typed`` picks typed results or Lightning's dicts, ``whole`` how it compiles."""

    typed = False
    compile_submodules = False
    with_metadata = True
    logs = False  # the steps call self.log: train_loss per step and epoch, val_loss

    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.nan_at: int | None = None
        self.train_outputs: list[Any] = []

    def configure_model(self) -> None:
        if self.compile_submodules:
            self.net = torch.compile(self.net)  # type: ignore[assignment]

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        if batch_idx == self.nan_at:
            loss = loss * math.nan
        if self.logs:
            self.log("train_loss", loss, on_step=True, on_epoch=True)
        if self.typed:
            return (
                TrainStepResult(loss=loss, metadata={"preds": preds.detach()})
                if self.with_metadata
                else TrainStepResult(loss=loss)
            )
        return {"loss": loss, "preds": preds.detach()}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, preds = self.loss_and_preds(batch)
        if self.logs:
            self.log("val_loss", loss)
        return ValStepResult(loss=loss, metadata={"preds": preds}) if self.typed else {"loss": loss, "preds": preds}

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_outputs.append(outputs)


class LightningsOwnLog:
    """A typed module's ``self.log`` going straight to Lightning's, inside the compiled graph."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pytorch_lightning.LightningModule.log(self, *args, **kwargs)  # type: ignore[arg-type]


def build(
    flavour: str,
    way: str,
    compile_submodules: bool,
    with_metadata: bool = True,
    logs: bool = False,
    adapter_args: dict[str, Any] | None = None,
) -> tuple[Any, list[Any]]:
    """The model and callbacks: ``plain`` Lightning, the ``typed`` module, the ``adapter`` over a plain
    module returning dicts, ``adapter+typed`` (a plain module returning typed results), or
    ``typed+lightning-log`` (the typed module calling Lightning's ``self.log`` in its compiled step)."""
    package, ours = FLAVOURS[flavour]
    typed = way in ("typed", "adapter+typed", "typed+lightning-log")
    bases: tuple[type, ...] = (package.LightningModule,)
    if way == "typed":
        bases = (ours.TypedLightningModule,)
    elif way == "typed+lightning-log":
        bases = (LightningsOwnLog, ours.TypedLightningModule)
    namespace = {"typed": typed, "compile_submodules": compile_submodules, "with_metadata": with_metadata, "logs": logs}
    cls = type("Regressor", (Steps, *bases), namespace)
    callbacks = [ours.StepResultAdapter(**(adapter_args or {}))] if way.startswith("adapter") else []
    return cls(), callbacks


class DynamoRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def dynamo_watched() -> Iterator[dict[str, Any]]:
    """Dynamo's graph breaks, its (and inductor's) log records at WARNING and above, and the warnings."""
    torch._dynamo.reset()
    counters.clear()
    handler = DynamoRecords()
    handler.setLevel(logging.WARNING)
    loggers = [logging.getLogger(name) for name in ("torch._dynamo", "torch._inductor")]
    for logger in loggers:
        logger.addHandler(handler)
    seen: dict[str, Any] = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        seen["graph_breaks"] = sum(counters["graph_break"].values())
        seen["break_reasons"] = sorted(counters["graph_break"])
        seen["graphs"] = counters["stats"]["unique_graphs"]
        seen["log_lines"] = handler.lines
        seen["warnings"] = sorted({str(w.message) for w in caught if _from_the_compiler(w)})
        torch._dynamo.reset()


def _from_the_compiler(warning: warnings.WarningMessage) -> bool:
    return any(part in warning.filename for part in ("_dynamo", "_inductor")) or "lightning_step_types" in str(
        warning.message
    )


def fit(
    flavour: str,
    way: str,
    root: Path,
    *,
    whole: bool,
    fullgraph: bool = False,
    nan_at: int | None = None,
    with_metadata: bool = True,
    logs: bool = False,
    adapter_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    model, callbacks = build(
        flavour, way, compile_submodules=not whole, with_metadata=with_metadata, logs=logs, adapter_args=adapter_args
    )
    model.nan_at = nan_at
    trainer = FLAVOURS[flavour][0].Trainer(**trainer_kwargs(root, limit_val_batches=2), callbacks=callbacks)
    with dynamo_watched() as seen:
        try:
            trainer.fit(
                torch.compile(model, fullgraph=fullgraph) if whole else model, make_loader(), make_loader(seed=1)
            )
        except StepResultError as error:
            seen["error"] = str(error)
    seen["params"] = params_of(model)
    seen["model"] = model
    seen["global_step"] = trainer.global_step
    seen["logged"] = {name: value.clone() for name, value in trainer.callback_metrics.items()}
    return seen


def assert_compiled_alike(run: dict[str, Any], plain: dict[str, Any]) -> None:
    assert plain["graph_breaks"] == 0
    assert run["graph_breaks"] == plain["graph_breaks"]
    assert run["log_lines"] == plain["log_lines"]
    assert run["warnings"] == plain["warnings"]
    assert not any("lightning_step_types" in line for line in run["log_lines"])
    assert_same_params(run["params"], plain["params"])


@pytest.fixture(scope="module")
def plain_whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return fit("pytorch_lightning", "plain", tmp_path_factory.mktemp("plain_whole"), whole=True)


@pytest.mark.parametrize("flavour", list(FLAVOURS))
@pytest.mark.parametrize("way", ["typed", "adapter", "adapter+typed"])
def test_the_whole_module_compiled_trains_as_the_compiled_plain_module(
    flavour: str, way: str, plain_whole: dict[str, Any], tmp_path: Path
) -> None:
    run = fit(flavour, way, tmp_path, whole=True)
    assert_compiled_alike(run, plain_whole)
    assert run["global_step"] == 4
    outputs = run["model"].train_outputs
    if way == "typed":  # the typed module's batch-end hook receives the typed result, from the compiled step
        assert [type(o) for o in outputs] == [TrainStepResult] * 4
        assert all(
            torch.equal(o.metadata["preds"], p["preds"]) for o, p in zip(outputs, plain_whole["model"].train_outputs)
        )


@pytest.mark.parametrize("with_metadata", [True, False], ids=["metadata", "no metadata"])
@pytest.mark.parametrize("way", ["typed", "adapter+typed"])
def test_a_compiled_typed_step_is_one_graph(way: str, with_metadata: bool, tmp_path: Path) -> None:
    """``fullgraph=True`` refuses any graph break, even one dynamo does not count (a step whose
    returned object it cannot rebuild ends its graph early): building a typed result, returning it,
    and the wrapper (outside the compiled region) leave dynamo nothing to break on."""
    run = fit("pytorch_lightning", way, tmp_path, whole=True, fullgraph=True, with_metadata=with_metadata)
    assert "error" not in run
    assert run["graph_breaks"] == 0
    assert run["global_step"] == 4


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_submodules_compiled_in_configure_model_train_as_plain(way: str, tmp_path: Path) -> None:
    plain = fit("pytorch_lightning", "plain", tmp_path / "plain", whole=False)
    run = fit("pytorch_lightning", way, tmp_path / way, whole=False)
    assert isinstance(run["model"].net, torch._dynamo.eval_frame.OptimizedModule)
    assert_compiled_alike(run, plain)


@pytest.mark.parametrize("way", ["typed", "adapter"])
def test_a_nan_loss_in_a_compiled_step_raises_before_its_backward(way: str, tmp_path: Path) -> None:
    """The non-finite check runs after the compiled step returns and before backward: the same
    error as without compiling, and the weights of the batches before it only (the adapter set to raise:
    its default warns)."""
    raising = {"nonfinite_loss": "raise"}
    compiled = fit("pytorch_lightning", way, tmp_path / "compiled", whole=True, nan_at=NAN_BATCH, adapter_args=raising)
    model, callbacks = build("pytorch_lightning", way, compile_submodules=False, adapter_args=raising)
    model.nan_at = NAN_BATCH
    with pytest.raises(StepResultError) as eager:
        pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / "eager"), callbacks=callbacks).fit(model, make_loader())
    assert compiled["error"] == str(eager.value)
    assert compiled["error"].startswith("Regressor.training_step: return value")
    assert "with value nan" in compiled["error"]
    assert compiled["graph_breaks"] == 0
    assert compiled["global_step"] == NAN_BATCH  # batches 0 and 1 stepped; batch 2 raised before its backward
    assert_same_params(compiled["params"], model)


def test_log_loss_logs_a_compiled_steps_loss_from_outside_the_compiled_region(tmp_path: Path) -> None:
    """``log_loss`` logs after the compiled step returns, with the values of the same module run eagerly."""
    logged: dict[str, dict[str, torch.Tensor]] = {}
    for how in ("compiled", "eager"):
        model, _ = build("pytorch_lightning", "typed", compile_submodules=False)
        model.log_loss = True
        trainer = pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / how, limit_val_batches=2))
        with dynamo_watched() as seen:
            trainer.fit(torch.compile(model) if how == "compiled" else model, make_loader(), make_loader(seed=1))
        assert seen["graph_breaks"] == 0
        logged[how] = {name: value.clone() for name, value in trainer.callback_metrics.items()}
    assert sorted(logged["compiled"]) == ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss"]
    for name, value in logged["eager"].items():
        assert torch.equal(logged["compiled"][name], value), name


def fit_eagerly(way: str, root: Path, *, logs: bool = False) -> dict[str, Any]:
    """``fit``'s run uncompiled: the reference for a compiled run's values."""
    model, callbacks = build("pytorch_lightning", way, compile_submodules=False, logs=logs)
    trainer = pytorch_lightning.Trainer(**trainer_kwargs(root, limit_val_batches=2), callbacks=callbacks)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    return {
        "params": params_of(model),
        "logged": {name: value.clone() for name, value in trainer.callback_metrics.items()},
    }


LOGGED = ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss"]


@pytest.mark.parametrize("fullgraph", [False, True], ids=["default", "fullgraph"])
def test_self_log_in_a_compiled_typed_step_leaves_the_graph_whole(fullgraph: bool, tmp_path: Path) -> None:
    """The typed module makes a compiled step's ``self.log`` calls as soon as it returns: no graph
    break, as many graphs as the same steps without ``self.log`` compile to (no recompilation on
    Lightning's state), ``fullgraph=True`` accepted, and the eager run's logged values and weights,
    bit for bit."""
    compiled = fit("pytorch_lightning", "typed", tmp_path / "compiled", whole=True, fullgraph=fullgraph, logs=True)
    unlogged = fit("pytorch_lightning", "typed", tmp_path / "unlogged", whole=True, fullgraph=fullgraph)
    eager = fit_eagerly("typed", tmp_path / "eager", logs=True)
    assert "error" not in compiled
    assert compiled["graph_breaks"] == unlogged["graph_breaks"] == 0
    assert compiled["graphs"] == unlogged["graphs"] == 3  # validation_step, training_step at batch 0 and after
    assert compiled["log_lines"] == [] and compiled["warnings"] == []
    assert sorted(compiled["logged"]) == LOGGED
    assert list(compiled["logged"]) == list(eager["logged"])  # logged in the same order
    for name, value in eager["logged"].items():
        assert torch.equal(compiled["logged"][name], value), name
    assert_same_params(compiled["params"], eager["params"])
    assert compiled["global_step"] == 4


def test_lightnings_own_self_log_in_a_compiled_step_breaks_the_graph(tmp_path: Path) -> None:
    """What the typed module's ``log`` spares a compiled step, measured: Lightning's ``self.log``
    called inside the compiled graph (a typed module whose ``log`` goes straight to
    ``LightningModule.log``). Dynamo breaks the graph at ``_ResultCollection.log``, which Lightning
    marks ``torch.compiler.disable``, and recompiles as Lightning's state changes; ``fullgraph=True``
    refuses the step."""
    run = fit("pytorch_lightning", "typed+lightning-log", tmp_path / "default", whole=True, logs=True)
    assert "error" not in run
    assert len(run["break_reasons"]) == 1
    assert "Skip inlining `torch.compiler.disable()`d function" in run["break_reasons"][0]
    assert "_ResultCollection.log" in run["break_reasons"][0]
    assert sorted(run["logged"]) == LOGGED
    if torch.__version__.startswith(MEASURED_TORCH):  # the figures docs/quickstart.md quotes
        assert (run["graph_breaks"], run["graphs"]) == (9, 8)
    else:
        assert run["graph_breaks"] > 0
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"Skip inlining `torch\.compiler\.disable\(\)`d function"):
        fit("pytorch_lightning", "typed+lightning-log", tmp_path / "fullgraph", whole=True, fullgraph=True, logs=True)


def validate_compiled(way: str, root: Path, *, fullgraph: bool = False) -> dict[str, Any]:
    """``trainer.validate(torch.compile(model))`` of the model whose validation step logs ``val_loss``."""
    model, callbacks = build("pytorch_lightning", way, compile_submodules=False, logs=True)
    trainer = pytorch_lightning.Trainer(**trainer_kwargs(root, limit_val_batches=2), callbacks=callbacks)
    with dynamo_watched() as seen:
        trainer.validate(torch.compile(model, fullgraph=fullgraph), make_loader(seed=1), verbose=False)
    seen["logged"] = {name: value.clone() for name, value in trainer.callback_metrics.items()}
    return seen


@pytest.mark.skipif(not torch.__version__.startswith(MEASURED_TORCH), reason=f"measured with torch {MEASURED_TORCH}x")
def test_self_log_in_a_compiled_plain_step_under_torch_2_13(tmp_path: Path) -> None:
    """A plain module's compiled step calls Lightning's ``self.log`` inside the graph. In training,
    ``self.log`` looks at the training step's signature, which dynamo fails on under torch 2.13 (the
    step is a bound method that Lightning wrapped with dynamo), ``fullgraph=True`` or not. In
    validation it gets as far as ``_ResultCollection.log``: 3 graph breaks there in 2 validation
    batches (dynamo compiles the step again at the second), or ``Unsupported`` with ``fullgraph=True``."""
    for fullgraph in (False, True):
        with pytest.raises(
            torch._dynamo.exc.InternalTorchDynamoError, match="'method' object has no attribute '__dict__'"
        ):
            fit("pytorch_lightning", "plain", tmp_path / f"fit-{fullgraph}", whole=True, fullgraph=fullgraph, logs=True)
    validated = validate_compiled("plain", tmp_path / "validate")
    assert validated["graph_breaks"] == 3
    assert len(validated["break_reasons"]) == 1 and "_ResultCollection.log" in validated["break_reasons"][0]
    assert sorted(validated["logged"]) == ["val_loss"]
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"Skip inlining `torch\.compiler\.disable\(\)`d function"):
        validate_compiled("plain", tmp_path / "validate-fullgraph", fullgraph=True)


@pytest.mark.parametrize("flavour", list(FLAVOURS))
@pytest.mark.parametrize("whole", [True, False], ids=["torch.compile(model)", "submodules"])
def test_self_log_in_a_compiled_step_under_the_adapter_trains_as_the_eager_plain_module(
    whole: bool, flavour: str, tmp_path: Path
) -> None:
    """The plain module above, unchanged, under ``StepResultAdapter()``: the adapter compiles its steps as the
    typed module does (the user's step alone) and makes their ``self.log`` calls as soon as they return. No
    graph break, as many graphs as the typed module's, and the eager plain run's logged values (in the same
    order) and weights, bit for bit; afterwards the module is as it was."""
    run = fit(flavour, "adapter", tmp_path / "compiled", whole=whole, logs=True)
    eager = fit_eagerly("plain", tmp_path / "eager", logs=True)
    assert "error" not in run
    assert run["graph_breaks"] == 0
    # Compiled submodules: self.net alone is compiled, and the steps (self.log too) run eagerly, as in plain Lightning.
    plain = None if whole else fit(flavour, "plain", tmp_path / "plain", whole=False, logs=True)
    if plain is None:
        assert run["graphs"] == 3  # as the typed module's: validation_step, training_step at batch 0 and after
    else:
        assert run["graphs"] == plain["graphs"] == 2
        assert list(plain["logged"]) == list(run["logged"])
    assert run["log_lines"] == [] and run["warnings"] == []
    assert list(run["logged"]) == list(eager["logged"]) and sorted(run["logged"]) == LOGGED
    for name, value in eager["logged"].items():
        assert torch.equal(run["logged"][name], value), name
    # the eager run's weights (compiled submodules name theirs `net._orig_mod.weight`, ...: the plain compiled run's)
    assert_same_params(run["params"], eager["params"] if plain is None else plain["params"])
    assert [p.tolist() for p in run["params"].values()] == [p.tolist() for p in eager["params"].values()]
    assert run["global_step"] == 4
    assert "log" not in vars(run["model"])
    if whole:  # Lightning's own compiled steps are back, as after a plain compiled fit
        step = vars(run["model"])["training_step"]
        assert step._torchdynamo_orig_callable == run["model"]._compiler_ctx["original_training_step"]


def test_self_log_in_a_compiled_validation_step_under_the_adapter_breaks_no_graph(tmp_path: Path) -> None:
    """``trainer.validate(torch.compile(model))`` of the plain module under the adapter (the plain run above
    breaks its graph 3 times), with ``fullgraph=True`` too."""
    validated = validate_compiled("adapter", tmp_path / "validate")
    assert validated["graph_breaks"] == 0
    assert sorted(validated["logged"]) == ["val_loss"]
    assert validate_compiled("adapter", tmp_path / "validate-fullgraph", fullgraph=True)["graph_breaks"] == 0
    model, _ = build("pytorch_lightning", "plain", compile_submodules=False, logs=True)
    eager = pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / "eager", limit_val_batches=2))
    eager.validate(model, make_loader(seed=1), verbose=False)
    assert torch.equal(validated["logged"]["val_loss"], eager.callback_metrics["val_loss"])


def test_self_log_in_a_compiled_typed_validation_step_breaks_no_graph(tmp_path: Path) -> None:
    """The typed module's counterpart of the plain validation run above."""
    validated = validate_compiled("typed", tmp_path / "validate")
    assert validated["graph_breaks"] == 0
    assert sorted(validated["logged"]) == ["val_loss"]
    assert validate_compiled("typed", tmp_path / "validate-fullgraph", fullgraph=True)["graph_breaks"] == 0


class LogsText(Steps, lst_pytorch_lightning.TypedLightningModule):
    """A training step whose ``self.log`` Lightning refuses (a string value)."""

    typed = True

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("note", "text")  # type: ignore[arg-type]
        return super().training_step(batch, batch_idx)


class RaisesAfterLogging(Steps, lst_pytorch_lightning.TypedLightningModule):
    """A training step that logs, then raises at its second batch."""

    typed = True

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.log("before_the_error", 1.0)
        if batch_idx == 1:
            raise RuntimeError("the step failed")
        return super().training_step(batch, batch_idx)


def test_a_self_log_lightning_refuses_raises_its_error_from_a_compiled_typed_step(tmp_path: Path) -> None:
    errors = []
    for how in ("compiled", "eager"):
        trainer = pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / how))
        with dynamo_watched(), pytest.raises(ValueError) as raised:
            model = LogsText()
            trainer.fit(torch.compile(model) if how == "compiled" else model, make_loader())
        errors.append(str(raised.value))
    assert errors[0] == errors[1] == "`self.log(note, text)` was called, but `str` values cannot be logged"


def test_a_compiled_step_that_raises_logs_nothing_of_that_call_and_leaves_nothing_for_the_next(tmp_path: Path) -> None:
    with dynamo_watched(), pytest.raises(RuntimeError, match="the step failed"):
        first = pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / "failed"))
        first.fit(torch.compile(RaisesAfterLogging()), make_loader())
    assert float(first.callback_metrics["before_the_error"]) == 1.0  # batch 0's
    assert compiled_logging._pending == []  # batch 1's call is dropped with its exception
    compiled = fit("pytorch_lightning", "typed", tmp_path / "compiled", whole=True, logs=True)
    eager = fit_eagerly("typed", tmp_path / "eager", logs=True)
    assert sorted(compiled["logged"]) == LOGGED
    for name, value in eager["logged"].items():
        assert torch.equal(compiled["logged"][name], value), name


def test_compiled_is_torch_compile_with_its_arguments(tmp_path: Path) -> None:
    """``compiled`` (the typed spelling) returns ``torch.compile``'s result: a fit trains as under
    ``torch.compile(model, fullgraph=True)``, and its arguments reach ``torch.compile``."""
    model, _ = build("pytorch_lightning", "typed", compile_submodules=False, logs=True)
    wrapped = compiled(model, fullgraph=True)
    assert isinstance(wrapped, torch._dynamo.eval_frame.OptimizedModule) and wrapped._orig_mod is model
    assert wrapped.net is model.net  # attributes read through to the module
    assert compiled(model, disable=True) is model  # torch.compile's own answer to disable=True
    trainer = pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / "compiled", limit_val_batches=2))
    with dynamo_watched() as seen:
        trainer.fit(wrapped, make_loader(), make_loader(seed=1))
    assert seen["graph_breaks"] == 0
    reference = fit("pytorch_lightning", "typed", tmp_path / "torch.compile", whole=True, fullgraph=True, logs=True)
    assert_same_params(model, reference["params"])


def test_to_uncompiled_gives_back_the_typed_modules_own_steps_after_two_compiled_fits(tmp_path: Path) -> None:
    """Lightning's ``to_uncompiled`` puts back the steps ``from_compiled`` found on the instance; from
    the second compiled fit on, those would be the ones the first fit left there."""
    from pytorch_lightning.utilities.compile import to_uncompiled

    model, _ = build("pytorch_lightning", "typed", compile_submodules=False)
    for run in ("first", "second"):
        with dynamo_watched() as seen:
            pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / run)).fit(torch.compile(model), make_loader())
        assert seen["graph_breaks"] == 0
    to_uncompiled(model)
    assert model.training_step.__func__ is type(model).training_step
    assert model.validation_step.__func__ is type(model).validation_step


class Parent(RegressorParts, lst_pytorch_lightning.TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, _ = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss)


class Child(Parent):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=super().training_step(batch, batch_idx).loss * 2.0)


def test_a_nested_super_step_call_in_a_compiled_step_traces_no_library_setting(tmp_path: Path) -> None:
    """``super().training_step(...)`` inside the compiled step reaches the parent's wrapper, traced:
    it passes the call through before it reads any setting (reading one would trace a cached
    function, which dynamo warns about)."""
    compiled = Child()
    with dynamo_watched() as seen:
        pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / "compiled")).fit(
            torch.compile(compiled, fullgraph=True), make_loader()
        )
    assert seen["graph_breaks"] == 0
    assert seen["warnings"] == []
    assert seen["log_lines"] == []
    eager = Child()
    pytorch_lightning.Trainer(**trainer_kwargs(tmp_path / "eager")).fit(eager, make_loader())
    assert_same_params(compiled, eager)
