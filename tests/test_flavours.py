"""Both Lightning packages: ``pytorch_lightning`` and ``lightning.pytorch``, side by side or alone.

``lightning_step_types.pytorch_lightning`` and ``lightning_step_types.lightning_pytorch`` hold the same
classes built on each package's ``LightningModule``/``Callback``; the top-level names are the
``pytorch_lightning`` flavour when it is installed. Every model here is built from one namespace of
functions for both flavours (``type(name, bases, namespace)``), so the runs differ only in the package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning.pytorch as lightning_pytorch
import pytest
import pytorch_lightning
import torch
from limits import hang_limit
from models import RegressorParts, assert_same_metrics, assert_same_params, make_loader, params_of, trainer_kwargs

import lightning_step_types
from lightning_step_types import LossLogging, StepResultError, TrainStepResult, ValStepResult
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning
from lightning_step_types.callback import StepResultAdapterMixin
from lightning_step_types.module import TypedModuleMixin
from lightning_step_types.typed_callback import TypedCallbackMixin

REPO_ROOT = Path(__file__).resolve().parents[1]

# flavour id -> (the Lightning package, the matching lightning_step_types module)
FLAVOURS: dict[str, tuple[ModuleType, ModuleType]] = {
    "pytorch_lightning": (pytorch_lightning, lst_pytorch_lightning),
    "lightning.pytorch": (lightning_pytorch, lst_lightning_pytorch),
}
FLAVOUR_IDS = list(FLAVOURS)
FLAVOURED_NAMES = ("TypedLightningModule", "StepResultAdapter", "TypedCallback")


# --- one set of methods, built into classes of either flavour --------------------------------------


class Built(RegressorParts):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)


def typed_training_step(self: Any, batch: Any, batch_idx: int) -> TrainStepResult:
    loss, preds = self.loss_and_preds(batch)
    return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})


def typed_eval_step(self: Any, batch: Any, batch_idx: int) -> ValStepResult:
    loss, preds = self.loss_and_preds(batch)
    return ValStepResult(loss=loss, metadata={"preds": preds})


def legacy_training_step(self: Any, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
    loss, preds = self.loss_and_preds(batch)
    return {"loss": loss, "preds": preds.detach()}


def logged_training_step(self: Any, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
    loss, preds = self.loss_and_preds(batch)
    self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
    return {"loss": loss, "preds": preds.detach()}


def logged_validation_step(self: Any, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
    loss, preds = self.loss_and_preds(batch)
    self.log("val_loss", loss, on_step=False, on_epoch=True, prog_bar=True)
    return {"loss": loss, "preds": preds}


def logged_test_step(self: Any, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
    loss, preds = self.loss_and_preds(batch)
    self.log("test_loss", loss, on_step=False, on_epoch=True, prog_bar=True)
    return {"loss": loss, "preds": preds}


def list_training_step(self: Any, batch: Any, batch_idx: int) -> Any:
    loss, preds = self.loss_and_preds(batch)
    return [loss, preds]


def tensor_training_step(self: Any, batch: Any, batch_idx: int) -> Any:
    return self.loss_and_preds(batch)[0]


TYPED_STEPS = {"training_step": typed_training_step, "validation_step": typed_eval_step, "test_step": typed_eval_step}
LEGACY_STEPS = {
    "training_step": legacy_training_step,
    "validation_step": logged_validation_step,
    "test_step": logged_test_step,
}
LOGGED_STEPS = {
    "training_step": logged_training_step,
    "validation_step": logged_validation_step,
    "test_step": logged_test_step,
}


def typed_module_class(flavour: str, name: str = "MyModel", **namespace: Any) -> type[Any]:
    """A ``TypedLightningModule`` subclass of ``flavour``, as if written ``class MyModel(...)`` at module level."""
    return type(
        name, (Built, FLAVOURS[flavour][1].TypedLightningModule), {**TYPED_STEPS, "log_loss": True, **namespace}
    )


def plain_module_class(flavour: str, steps: dict[str, Any], name: str = "MyModel") -> type[Any]:
    return type(name, (Built, FLAVOURS[flavour][0].LightningModule), dict(steps))


def _record(hook: str) -> Any:
    def record(self: Any, trainer: Any, pl_module: Any, outputs: Any, *args: Any) -> None:
        self.seen.append((hook, outputs))

    return record


def _init_seen(self: Any) -> None:
    self.seen = []


def typed_recorder(flavour: str) -> Any:
    """A ``TypedCallback`` of ``flavour`` that records what its batch-end hooks receive."""
    cls = type(
        "TypedRecorder",
        (FLAVOURS[flavour][1].TypedCallback,),
        {
            "__init__": _init_seen,
            "on_train_batch_end": _record("train"),
            "on_validation_batch_end": _record("validation"),
            "on_test_batch_end": _record("test"),
        },
    )
    return cls()


def trainer_of(flavour: str, root: Path, callbacks: list[Any] = [], **overrides: Any) -> Any:  # noqa: B006
    return FLAVOURS[flavour][0].Trainer(**trainer_kwargs(root, **overrides), callbacks=list(callbacks))


def fit_validate_test(
    flavour: str,
    model: Any,
    root: Path,
    callbacks: list[Any] = [],  # noqa: B006
) -> tuple[Any, list[dict[str, Any]]]:
    trainer = trainer_of(flavour, root, callbacks, max_epochs=2, num_sanity_val_steps=2)
    trainer.fit(model, make_loader(), make_loader(seed=1))
    metrics = [dict(trainer.callback_metrics), dict(trainer.logged_metrics), dict(trainer.progress_bar_metrics)]
    metrics += trainer.validate(model, make_loader(seed=1), verbose=False)
    metrics += trainer.test(model, make_loader(seed=2), verbose=False)
    return trainer, metrics


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Plain ``pytorch_lightning`` with explicit ``self.log``: what every flavour's typed run must give."""
    model = plain_module_class("pytorch_lightning", LOGGED_STEPS)()
    trainer, metrics = fit_validate_test("pytorch_lightning", model, tmp_path_factory.mktemp("reference"))
    assert trainer.global_step == 8
    assert sorted(metrics[0]) == ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss"]
    return params_of(model), metrics


def assert_matches_reference(model: Any, metrics: list[dict[str, Any]], reference: Any) -> None:
    reference_params, reference_metrics = reference
    assert_same_params(model, reference_params)
    for got, expected in zip(metrics, reference_metrics, strict=True):
        assert_same_metrics(got, expected)


# --- which class is which ----------------------------------------------------------------------------


def test_top_level_names_are_the_pytorch_lightning_flavour() -> None:
    for name in FLAVOURED_NAMES:
        assert getattr(lightning_step_types, name) is getattr(lst_pytorch_lightning, name)
        assert getattr(lightning_step_types, name) is not getattr(lst_lightning_pytorch, name)
    assert issubclass(lightning_step_types.TypedLightningModule, pytorch_lightning.LightningModule)
    assert not issubclass(lightning_step_types.TypedLightningModule, lightning_pytorch.LightningModule)


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
def test_each_flavour_builds_on_its_own_package_and_the_shared_implementation(flavour: str) -> None:
    package, classes = FLAVOURS[flavour]
    other_package = lightning_pytorch if package is pytorch_lightning else pytorch_lightning
    assert classes.__all__ == ["StepResultAdapter", "TypedCallback", "TypedLightningModule"]
    assert issubclass(classes.TypedLightningModule, TypedModuleMixin)
    assert issubclass(classes.StepResultAdapter, StepResultAdapterMixin)
    assert issubclass(classes.TypedCallback, TypedCallbackMixin)
    assert issubclass(classes.TypedLightningModule, package.LightningModule)
    assert not issubclass(classes.TypedLightningModule, other_package.LightningModule)
    for callback_class in (classes.StepResultAdapter, classes.TypedCallback):
        assert issubclass(callback_class, package.Callback)
        assert not issubclass(callback_class, other_package.Callback)
    # One implementation: the flavour classes add nothing but their Lightning base.
    for name, mixin in [
        ("TypedLightningModule", TypedModuleMixin),
        ("StepResultAdapter", StepResultAdapterMixin),
        ("TypedCallback", TypedCallbackMixin),
    ]:
        cls = getattr(classes, name)
        assert cls.__mro__[1] is mixin
        # (__slotnames__ is copyreg's cache, written on the class when an instance is first pickled or copied)
        assert set(vars(cls)) <= {
            "__module__",
            "__doc__",
            "__qualname__",
            "__firstlineno__",
            "__static_attributes__",
            "__slotnames__",
        }
        assert cls.__doc__ == mixin.__doc__


# --- the same runs in either package -------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
def test_typed_module_runs_as_plain_lightning(flavour: str, reference: Any, tmp_path: Path) -> None:
    model = typed_module_class(flavour)()
    recorder = typed_recorder(flavour)
    trainer, metrics = fit_validate_test(flavour, model, tmp_path, [recorder])

    assert isinstance(trainer, FLAVOURS[flavour][0].Trainer)
    assert trainer.global_step == 8
    assert_matches_reference(model, metrics, reference)
    # 2 epochs x 4 training batches; validation: sanity 2 + 2 x 4, validate 4, test 4.
    kinds = [hook for hook, _ in recorder.seen]
    assert (kinds.count("train"), kinds.count("validation"), kinds.count("test")) == (8, 14, 4)
    for hook, outputs in recorder.seen:
        assert type(outputs) is (TrainStepResult if hook == "train" else ValStepResult)
        assert list(outputs.metadata) == ["preds"]


ADAPTER_CASES = [
    pytest.param(TYPED_STEPS, {"strict": False, "log_loss": True}, id="lenient, typed steps"),
    pytest.param(TYPED_STEPS, {"strict": True, "log_loss": True}, id="strict, typed steps"),
    # dict steps log val/test themselves (like the reference); the adapter logs the training loss
    pytest.param(
        LEGACY_STEPS, {"strict": False, "log_loss": LossLogging(val=None, test=None)}, id="lenient, dict steps"
    ),
]


@pytest.mark.parametrize(("steps", "adapter_kwargs"), ADAPTER_CASES)
@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
def test_adapter_runs_as_plain_lightning(
    flavour: str, steps: dict[str, Any], adapter_kwargs: dict[str, Any], reference: Any, tmp_path: Path
) -> None:
    model = plain_module_class(flavour, steps)()
    adapter = FLAVOURS[flavour][1].StepResultAdapter(**adapter_kwargs)
    recorder = typed_recorder(flavour)
    trainer, metrics = fit_validate_test(flavour, model, tmp_path, [adapter, recorder])

    assert trainer.global_step == 8
    assert_matches_reference(model, metrics, reference)
    assert "training_step" not in vars(model)  # the adapter put the module back as it was
    typed = steps is TYPED_STEPS
    train_outputs = [outputs for hook, outputs in recorder.seen if hook == "train"]
    assert len(train_outputs) == 8
    for outputs in train_outputs:  # typed results for typed steps, Lightning's dict for dict steps
        assert type(outputs) is (TrainStepResult if typed else dict)


# --- errors read the same in both packages ---------------------------------------------------------------

LIST_RETURN_ERROR = (
    "MyModel.training_step: return value\n"
    "  got:      list of 2: (Tensor(shape=(), dtype=float32, requires_grad=True),"
    " Tensor(shape=(2, 1), dtype=float32, requires_grad=True))\n"
    "  expected: TrainStepResult (or None to skip the batch)\n"
    "  fix:      name the parts: `return TrainStepResult(loss=loss, metadata={'logits': logits})`"
)
LENIENT_LIST_RETURN_ERROR = LIST_RETURN_ERROR.replace(
    "TrainStepResult (or None to skip the batch)", "TrainStepResult, a loss Tensor, a dict with a 'loss' key, or None"
)
STRICT_TENSOR_ERROR = (
    "MyModel.training_step: return value\n"
    "  got:      Tensor(shape=(), dtype=float32, requires_grad=True)\n"
    "  expected: TrainStepResult (or None to skip the batch)\n"
    "  fix:      wrap the loss: `return TrainStepResult(loss=loss)`"
)


def error_from(flavour: str, model: Any, root: Path, callbacks: list[Any] = []) -> str:  # noqa: B006
    before = params_of(model)
    with pytest.raises(StepResultError) as info:
        trainer_of(flavour, root, callbacks).fit(model, make_loader())
    assert_same_params(model, before)  # raised before any optimizer step
    return str(info.value)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("typed module", LIST_RETURN_ERROR),
        ("lenient adapter", LENIENT_LIST_RETURN_ERROR),
        ("strict adapter", STRICT_TENSOR_ERROR),
    ],
)
def test_errors_are_identical_in_both_packages(case: str, expected: str, tmp_path: Path) -> None:
    messages = []
    for flavour in FLAVOUR_IDS:
        if case == "typed module":
            model, callbacks = typed_module_class(flavour, training_step=list_training_step)(), []
        else:
            strict = case == "strict adapter"
            step = tensor_training_step if strict else list_training_step
            model = plain_module_class(flavour, {**TYPED_STEPS, "training_step": step})()
            callbacks = [FLAVOURS[flavour][1].StepResultAdapter(strict=strict)]
        messages.append(error_from(flavour, model, tmp_path / flavour, callbacks))
    assert messages == [expected, expected]


# --- mixing the packages: what Lightning itself does ------------------------------------------------------


@pytest.mark.parametrize(
    ("trainer_flavour", "module_flavour"),
    [("lightning.pytorch", "pytorch_lightning"), ("pytorch_lightning", "lightning.pytorch")],
)
def test_a_trainer_rejects_the_other_packages_typed_module(
    trainer_flavour: str, module_flavour: str, tmp_path: Path
) -> None:
    model = typed_module_class(module_flavour)()
    with pytest.raises(TypeError) as info:
        trainer_of(trainer_flavour, tmp_path).fit(model, make_loader())
    assert str(info.value) == "`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `MyModel`"


@pytest.mark.parametrize(
    ("trainer_flavour", "callback_flavour"),
    [("lightning.pytorch", "pytorch_lightning"), ("pytorch_lightning", "lightning.pytorch")],
)
def test_a_trainer_duck_types_the_other_packages_callbacks_in_a_list(
    trainer_flavour: str, callback_flavour: str, tmp_path: Path
) -> None:
    """Lightning checks no callback's class when given a list: the other flavour's adapter runs, with its checks."""
    adapter = FLAVOURS[callback_flavour][1].StepResultAdapter(strict=True)
    recorder = typed_recorder(callback_flavour)
    model = plain_module_class(trainer_flavour, TYPED_STEPS)()
    trainer = trainer_of(trainer_flavour, tmp_path, [adapter, recorder])
    trainer.fit(model, make_loader())
    assert trainer.global_step == 4
    assert [type(outputs) for _, outputs in recorder.seen] == [TrainStepResult] * 4

    wrong = plain_module_class(trainer_flavour, {**TYPED_STEPS, "training_step": tensor_training_step})()
    assert error_from(trainer_flavour, wrong, tmp_path / "wrong", [adapter]) == STRICT_TENSOR_ERROR


@pytest.mark.parametrize(
    ("trainer_flavour", "callback_flavour"),
    [("lightning.pytorch", "pytorch_lightning"), ("pytorch_lightning", "lightning.pytorch")],
)
def test_a_trainer_rejects_a_single_callback_of_the_other_package(
    trainer_flavour: str, callback_flavour: str, tmp_path: Path
) -> None:
    """``Trainer(callbacks=cb)`` wraps ``cb`` in a list only if it is the Trainer's own ``Callback``."""
    own = FLAVOURS[trainer_flavour][1].StepResultAdapter()
    trainer = FLAVOURS[trainer_flavour][0].Trainer(**trainer_kwargs(tmp_path), callbacks=own)
    assert own in trainer.callbacks
    with pytest.raises(TypeError, match=r"^'StepResultAdapter' object is not iterable$"):
        FLAVOURS[trainer_flavour][0].Trainer(
            **trainer_kwargs(tmp_path), callbacks=FLAVOURS[callback_flavour][1].StepResultAdapter()
        )


# --- only one package installed (or none): simulated in a fresh interpreter --------------------------------

# Installed before anything else imports: makes the named top-level packages look uninstalled.
HIDE_BY_FINDER = """
import importlib.abc, sys
class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Hidden())
"""
# The import system's own way to block a module: `sys.modules[name] = None` (find_spec then says None).
HIDE_BY_SYS_MODULES = """
import sys
for _name in HIDDEN:
    sys.modules[_name] = None
"""

PROBE = """
import importlib, json, sys
import torch
import lightning_step_types as lst
from lightning_step_types import _lightning, errors, policy, results
from lightning_step_types._lightning import trainer
from lightning_step_types.step import adapter, checks, wrapping
from lightning_step_types.module import TypedModuleMixin
out = {"result": repr(lst.TrainStepResult(loss=torch.tensor(1.0)))}
out["error_is_type_error"] = issubclass(lst.StepResultError, TypeError)
try:
    cls = lst.TypedLightningModule
except ImportError as error:
    out["typed_module_error"] = [type(error).__name__, str(error)]
else:
    out["typed_module"] = f"{cls.__module__}.{cls.__qualname__}"
    out["base"] = f"{cls.__mro__[2].__module__}.{cls.__mro__[2].__qualname__}"
    out["mixin"] = issubclass(cls, TypedModuleMixin)
    out["adapter"] = lst.StepResultAdapter.__module__
    out["typed_callback"] = lst.TypedCallback.__module__
    # a real run with the flavour that was picked
    from torch.utils.data import DataLoader, TensorDataset
    package = importlib.import_module(cls.__mro__[2].__module__.split(".core")[0])
    class Model(cls):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(3, 1)
        def training_step(self, batch, batch_idx):
            return lst.TrainStepResult(loss=self.net(batch[0]).pow(2).mean())
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
    trainer = package.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                              enable_model_summary=False, callbacks=[lst.StepResultAdapter()])
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2))
    out["global_step"] = trainer.global_step
for flavour in ("pytorch_lightning", "lightning_pytorch"):
    try:
        importlib.import_module(f"lightning_step_types.{flavour}")
        out[f"import {flavour}"] = "ok"
    except ModuleNotFoundError as error:
        out[f"import {flavour}"] = f"ModuleNotFoundError {error.name.partition('.')[0]}"
out["lightning_modules_loaded"] = sorted(
    {m.partition(".")[0] for m, mod in sys.modules.items() if mod is not None and m.partition(".")[0] in ("lightning", "pytorch_lightning")}
)
print(json.dumps(out))
"""


def probe(hidden: tuple[str, ...], how: str) -> dict[str, Any]:
    hide = HIDE_BY_FINDER if how == "finder" else HIDE_BY_SYS_MODULES
    script = f"HIDDEN = {hidden!r}\n{hide}\n{PROBE}"
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**_clean_env(), "PYTHONPATH": str(REPO_ROOT), "PYTHONWARNINGS": "ignore"},
        timeout=hang_limit(idle_s=40),
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


HOW = [pytest.param("sys.modules", id="sys.modules=None"), pytest.param("finder", id="raising finder")]


@pytest.mark.parametrize("how", HOW)
def test_only_pytorch_lightning_installed(how: str) -> None:
    out = probe(("lightning",), how)
    assert out["typed_module"] == "lightning_step_types.pytorch_lightning.TypedLightningModule"
    assert out["base"] == "pytorch_lightning.core.module.LightningModule"
    assert out["adapter"] == out["typed_callback"] == "lightning_step_types.pytorch_lightning"
    assert out["global_step"] == 2
    assert out["mixin"] is True
    assert out["import pytorch_lightning"] == "ok"
    assert out["import lightning_pytorch"] == "ModuleNotFoundError lightning"
    assert out["lightning_modules_loaded"] == ["pytorch_lightning"]


@pytest.mark.parametrize("how", [HOW[0], pytest.param("finder", id="raising finder")])
def test_only_lightning_installed(how: str) -> None:
    out = probe(("pytorch_lightning",), how)
    assert out["typed_module"] == "lightning_step_types.lightning_pytorch.TypedLightningModule"
    assert out["base"] == "lightning.pytorch.core.module.LightningModule"
    assert out["adapter"] == out["typed_callback"] == "lightning_step_types.lightning_pytorch"
    assert out["global_step"] == 2
    assert out["mixin"] is True
    assert out["import lightning_pytorch"] == "ok"
    assert out["import pytorch_lightning"] == "ModuleNotFoundError pytorch_lightning"
    assert out["lightning_modules_loaded"] == ["lightning"]


@pytest.mark.parametrize("how", [HOW[0], pytest.param("finder", id="raising finder")])
def test_results_without_any_lightning(how: str) -> None:
    out = probe(("pytorch_lightning", "lightning"), how)
    assert out["result"] == "TrainStepResult(loss=tensor(1.), metadata=FrozenMetadata({}), batch_size=None)"
    assert out["error_is_type_error"] is True
    assert out["typed_module_error"] == [
        "ImportError",
        "lightning_step_types.TypedLightningModule needs Lightning: `pip install pytorch-lightning` (or `lightning`)",
    ]
    assert out["import pytorch_lightning"] == "ModuleNotFoundError pytorch_lightning"
    assert out["import lightning_pytorch"] == "ModuleNotFoundError lightning"
    assert out["lightning_modules_loaded"] == []
