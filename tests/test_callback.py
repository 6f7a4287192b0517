"""StepResultAdapter on plain LightningModules: Lightning's own returns behave exactly as without it,
obscure crashes become StepResultError, silently ignored returns warn once, and the module is left
exactly as it was after every run."""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_fabric.utilities.exceptions import MisconfigurationException
from models import (
    PlainRegressor,
    PlainTypedRegressor,
    Recorder,
    RegressorParts,
    TypedRegressor,
    assert_same_metrics,
    assert_same_params,
    make_loader,
    make_trainer,
    params_of,
)

from lightning_step_types import StepResultAdapter, StepResultError, StepResultWarning, TypedLightningModule

Return = Callable[[Any, Any], Any]  # (model, batch) -> what the step returns


def dict_return(model: Any, batch: Any) -> Any:
    loss, preds = model.loss_and_preds(batch)
    return {"loss": loss, "preds": preds.detach()}


def eval_dict_return(model: Any, batch: Any) -> Any:
    loss, preds = model.loss_and_preds(batch)
    return {"loss": loss, "preds": preds}


class MyModel(RegressorParts, pl.LightningModule):
    """A plain module whose steps return whatever the test passes in (errors must name `MyModel`)."""

    def __init__(self, train_return: Return = dict_return, eval_return: Return = eval_dict_return) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.train_return = train_return
        self.eval_return = eval_return

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        self.log("train_loss", loss)
        return self.train_return(self, batch)

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return self.eval_return(self, batch)

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return self.eval_return(self, batch)


def assert_error(error: StepResultError, hook: str, where: str, got: str, expected: str, fix: str) -> None:
    text = str(error)
    assert text == f"{hook}: {where}\n  got:      {got}\n  expected: {expected}\n  fix:      {fix}"
    assert text.count(hook) == 1
    assert (error.hook, error.where, error.got, error.expected, error.fix) == (hook, where, got, expected, fix)


def assert_untouched(model: pl.LightningModule, before: dict[str, torch.Tensor]) -> None:
    assert_same_params(model, before)
    assert [p.grad for p in model.parameters()] == [None, None]


def first_loss_item() -> float:
    model = MyModel()
    with torch.no_grad():
        return model.loss_and_preds(next(iter(make_loader())))[0].item()


def step_result_warnings(records: Any) -> list[str]:
    return [str(w.message) for w in records if issubclass(w.category, StepResultWarning)]


# --- Lightning's own returns, unchanged -----------------------------------------------------------


def tensor_return(model: Any, batch: Any) -> Any:
    return model.loss_and_preds(batch)[0]


def loss_only_dict_return(model: Any, batch: Any) -> Any:
    return {"loss": model.loss_and_preds(batch)[0]}


def none_on_odd_batches(model: Any, batch: Any) -> Any:
    model.calls = getattr(model, "calls", 0) + 1
    return None if model.calls % 2 == 0 else model.loss_and_preds(batch)[0]


def eval_tensor_return(model: Any, batch: Any) -> Any:
    return model.loss_and_preds(batch)[0]


@pytest.mark.parametrize(
    ("train_return", "eval_return"),
    [
        (tensor_return, eval_tensor_return),
        (loss_only_dict_return, eval_dict_return),
        (dict_return, eval_dict_return),
        (none_on_odd_batches, eval_dict_return),
    ],
    ids=["tensor", "loss-dict", "dict-with-extras", "none-on-odd-batches"],
)
def test_legacy_returns_train_exactly_as_without_the_adapter(
    tmp_path: Path, train_return: Return, eval_return: Return
) -> None:
    without, adapted = MyModel(train_return, eval_return), MyModel(train_return, eval_return)
    plain_recorder, adapted_recorder = Recorder(), Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepResultWarning)  # Lightning's own returns never warn
        trainer = make_trainer(tmp_path / "without", callbacks=[plain_recorder], num_sanity_val_steps=1)
        trainer.fit(without, make_loader(), make_loader(seed=1))
        adapted_trainer = make_trainer(
            tmp_path / "adapted", callbacks=[StepResultAdapter(), adapted_recorder], num_sanity_val_steps=1
        )
        adapted_trainer.fit(adapted, make_loader(), make_loader(seed=1))

    assert_same_params(adapted, without)
    assert not torch.equal(params_of(adapted)["net.weight"], params_of(MyModel())["net.weight"])
    assert_same_metrics(adapted_trainer.callback_metrics, trainer.callback_metrics)
    # Callbacks receive what they received without the adapter.
    assert [(hook, type(out), list(out) if isinstance(out, dict) else None) for hook, out in adapted_recorder.seen] == [
        (hook, type(out), list(out) if isinstance(out, dict) else None) for hook, out in plain_recorder.seen
    ]


def test_typed_results_from_a_plain_module(tmp_path: Path) -> None:
    plain, typed = PlainRegressor(), PlainTypedRegressor()
    recorder = Recorder()
    make_trainer(tmp_path / "plain", num_sanity_val_steps=1).fit(plain, make_loader(), make_loader(seed=1))
    trainer = make_trainer(tmp_path / "typed", callbacks=[StepResultAdapter(), recorder], num_sanity_val_steps=1)
    trainer.fit(typed, make_loader(), make_loader(seed=1))
    trainer.test(typed, make_loader(seed=2), verbose=False)

    assert_same_params(typed, plain)
    assert sorted(trainer.callback_metrics) == ["test_loss"]
    assert [hook for hook, _ in recorder.seen] == ["validation"] + ["train"] * 4 + ["validation"] * 4 + ["test"] * 4
    for _, outputs in recorder.seen:
        assert type(outputs) is dict and list(outputs) == ["loss", "preds"]


# --- obscure crashes, turned into StepResultError --------------------------------------------


LOSS_EXPECTED = "a torch.Tensor of dtype float16, bfloat16, float32 or float64 holding one value (shape () or (1,))"
ANY_TRAINING_RETURN = "TrainStepResult, a loss Tensor, a dict with a 'loss' key, or None"

CRASHES = [
    pytest.param(
        lambda m, b: {"loss": m.loss_and_preds(b)[0].item()},
        "return value['loss']",
        "float {first_loss!r}",
        LOSS_EXPECTED,
        "return the tensor itself: `loss`, not `loss.item()` or `float(loss)`",
        id="loss-item-in-dict",
    ),
    pytest.param(
        lambda m, b: m.loss_and_preds(b),
        "return value",
        "tuple of 2: (Tensor(shape=(), dtype=float32, requires_grad=True),"
        " Tensor(shape=(2, 1), dtype=float32, requires_grad=True))",
        ANY_TRAINING_RETURN,
        "name the parts: `return TrainStepResult(loss=loss, metadata={'logits': logits})`",
        id="tuple",
    ),
    pytest.param(
        lambda m, b: F.mse_loss(m(b[0]), b[1], reduction="none"),
        "return value",
        "Tensor(shape=(2, 1), dtype=float32, requires_grad=True)",
        LOSS_EXPECTED,
        "reduce it to one value, e.g. `loss = loss.mean()` (or pass `reduction='mean'` to the loss)",
        id="non-scalar-loss",
    ),
    pytest.param(
        lambda m, b: (m(b[0]) > 0).sum(),
        "return value",
        "Tensor(shape=(), dtype=int64, requires_grad=False)",
        LOSS_EXPECTED,
        "compute the loss from floating-point model outputs, e.g. `F.cross_entropy(logits, target)`;"
        " integer and bool tensors carry no gradient",
        id="int-loss",
    ),
    pytest.param(
        lambda m, b: {"Loss": m.loss_and_preds(b)[0]},
        "return value",
        "dict with keys ['Loss']",
        "a 'loss' key: automatic optimization calls backward on it",
        "rename the key 'Loss' to 'loss' (keys are case-sensitive), or return TrainStepResult(loss=...)",
        id="Loss-key",
    ),
    pytest.param(
        lambda m, b: {"los": m.loss_and_preds(b)[0], "acc": 1.0},
        "return value",
        "dict with keys ['los', 'acc']",
        "a 'loss' key: automatic optimization calls backward on it",
        "rename the key 'los' to 'loss' (keys are case-sensitive), or return TrainStepResult(loss=...)",
        id="los-key",
    ),
    pytest.param(
        lambda m, b: "oops",
        "return value",
        "str 'oops'",
        ANY_TRAINING_RETURN,
        "return `TrainStepResult(loss=loss, metadata={...})` with `loss` a tensor computed from the model's output",
        id="string",
    ),
    pytest.param(
        lambda m, b: m.loss_and_preds(b)[0].detach(),
        "return value",
        "Tensor(shape=(), dtype=float32, requires_grad=False): it was cut from the graph, e.g. by"
        " `.item()`, `.detach()`, `torch.tensor(...)` or `torch.no_grad()`",
        "a loss computed from the model's parameters (requires_grad=True): automatic optimization calls backward on it",
        "return the loss tensor as computed from `self(...)`, without `.detach()`, `.item()` or `torch.no_grad()`;"
        " to step optimizers yourself, set `self.automatic_optimization = False`",
        id="detached-tensor",
    ),
]


@pytest.mark.parametrize(("train_return", "where", "got", "expected", "fix"), CRASHES)
def test_obscure_crashes_become_step_result_errors(
    tmp_path: Path, train_return: Return, where: str, got: str, expected: str, fix: str
) -> None:
    model = MyModel(train_return=train_return)
    before = params_of(model)
    trainer = make_trainer(tmp_path, callbacks=[StepResultAdapter()])
    with pytest.raises(StepResultError) as info:
        trainer.fit(model, make_loader())
    assert type(info.value) is StepResultError
    assert_error(info.value, "MyModel.training_step", where, got.format(first_loss=first_loss_item()), expected, fix)
    assert trainer.global_step == 0
    assert_untouched(model, before)


def test_without_the_adapter_lightning_reports_a_misnamed_loss_vaguely(tmp_path: Path) -> None:
    """The reference point for the 'Loss' case above: Lightning's own message names no step and no key."""
    model = MyModel(train_return=lambda m, b: {"Loss": m.loss_and_preds(b)[0]})
    with pytest.raises(MisconfigurationException) as info:
        make_trainer(tmp_path).fit(model, make_loader())
    assert str(info.value) == (
        "In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present"
    )


# --- silent cases, warned once per hook ----------------------------------------------------------


def warning_text(hook: str, where: str, got: str, expected: str, fix: str) -> str:
    return f"{hook}: {where}\n  got:      {got}\n  expected: {expected}\n  fix:      {fix}"


def legacy_log_return(model: Any, batch: Any) -> Any:
    loss, _ = model.loss_and_preds(batch)
    return {"loss": loss, "log": {"train_loss": loss.detach()}}


def legacy_progress_bar_return(model: Any, batch: Any) -> Any:
    loss, _ = model.loss_and_preds(batch)
    return {"loss": loss, "progress_bar": {"train_loss": loss.detach()}}


def int_key_return(model: Any, batch: Any) -> Any:
    loss, preds = model.loss_and_preds(batch)
    return {"loss": loss, 0: preds.detach()}


TRAINING_WARNINGS = [
    pytest.param(
        legacy_log_return,
        "return value['log']",
        "dict with keys ['loss', 'log']: the Lightning 0.x 'log' key, which Lightning 1.0+ ignores",
        "metrics logged with `self.log` / `self.log_dict`",
        "log them with `self.log_dict(...)` inside the step and drop the 'log' key",
        id="log",
    ),
    pytest.param(
        legacy_progress_bar_return,
        "return value['progress_bar']",
        "dict with keys ['loss', 'progress_bar']: the Lightning 0.x 'progress_bar' key, which Lightning 1.0+ ignores",
        "metrics logged with `self.log` / `self.log_dict`",
        "log them with `self.log_dict(..., prog_bar=True)` inside the step and drop the 'progress_bar' key",
        id="progress_bar",
    ),
    pytest.param(
        int_key_return,
        "return value",
        "key int 0 in dict with keys ['loss', 0]",
        "str keys: Lightning and loggers address outputs by name",
        "use a string key, e.g. '0'",
        id="int-key",
    ),
]


@pytest.mark.parametrize(("train_return", "where", "got", "expected", "fix"), TRAINING_WARNINGS)
def test_silently_ignored_training_returns_warn_once(
    tmp_path: Path, train_return: Return, where: str, got: str, expected: str, fix: str
) -> None:
    without, adapted = MyModel(train_return=train_return), MyModel(train_return=train_return)
    make_trainer(tmp_path / "without").fit(without, make_loader())
    with pytest.warns(StepResultWarning) as records:
        make_trainer(tmp_path / "adapted", callbacks=[StepResultAdapter()]).fit(adapted, make_loader())
    # one warning for four steps, and training itself unchanged
    assert step_result_warnings(records) == [warning_text("MyModel.training_step", where, got, expected, fix)]
    assert_same_params(adapted, without)


MALFORMED_EXPECTED = (
    "ValStepResult, a Tensor, a dict, or None; Lightning passes anything else unchecked"
    " to `on_{stage}_batch_end` and nothing else reads it"
)
MALFORMED_FIX = "return `ValStepResult(loss=loss, metadata={...})`, or a dict such as `{'preds': preds}`"


@pytest.mark.parametrize(
    ("eval_return", "got"),
    [
        (lambda m, b: 0.5, "float 0.5"),
        (lambda m, b: ("done", 1), "tuple of 2: (str 'done', int 1)"),
        (lambda m, b: "done", "str 'done'"),
    ],
    ids=["float", "tuple", "string"],
)
def test_malformed_evaluation_returns_warn_once_per_hook(tmp_path: Path, eval_return: Return, got: str) -> None:
    model, recorder = MyModel(eval_return=eval_return), Recorder()
    trainer = make_trainer(tmp_path, callbacks=[StepResultAdapter(), recorder])
    with pytest.warns(StepResultWarning) as validation_records:
        trainer.validate(model, make_loader(), verbose=False)
    with pytest.warns(StepResultWarning) as test_records:
        trainer.test(model, make_loader(), verbose=False)

    assert step_result_warnings(validation_records) == [
        warning_text(
            "MyModel.validation_step", "return value", got, MALFORMED_EXPECTED.format(stage="validation"), MALFORMED_FIX
        )
    ]
    assert step_result_warnings(test_records) == [
        warning_text("MyModel.test_step", "return value", got, MALFORMED_EXPECTED.format(stage="test"), MALFORMED_FIX)
    ]
    # Lightning hands the value on unchanged, as it would without the adapter.
    assert [out for _, out in recorder.seen] == [eval_return(model, None)] * 8


def test_each_kind_of_problem_warns_once_per_hook(tmp_path: Path) -> None:
    def both_legacy_keys(model: Any, batch: Any) -> Any:
        loss, _ = model.loss_and_preds(batch)
        return {"loss": loss, "log": {}, "progress_bar": {}}

    model = MyModel(train_return=both_legacy_keys, eval_return=lambda m, b: {"log": {}})
    with pytest.warns(StepResultWarning) as records:
        make_trainer(tmp_path, callbacks=[StepResultAdapter()], num_sanity_val_steps=2, max_epochs=2).fit(
            model, make_loader(), make_loader(seed=1)
        )
    # 8 training steps and 10 validation steps (2 sanity + 2 x 4) give three warnings in all.
    assert [text.split("\n")[0] for text in step_result_warnings(records)] == [
        "MyModel.validation_step: return value['log']",
        "MyModel.training_step: return value['log']",
        "MyModel.training_step: return value['progress_bar']",
    ]


# --- strict mode -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("train_return", "got", "fix"),
    [
        (
            dict_return,
            "dict with keys ['loss', 'preds']",
            "return `TrainStepResult(loss=..., metadata={'preds': ...})`",
        ),
        (
            tensor_return,
            "Tensor(shape=(), dtype=float32, requires_grad=True)",
            "wrap the loss: `return TrainStepResult(loss=loss)`",
        ),
    ],
    ids=["dict", "tensor"],
)
def test_strict_adapter_rejects_legacy_training_returns(
    tmp_path: Path, train_return: Return, got: str, fix: str
) -> None:
    model = MyModel(train_return=train_return)
    before = params_of(model)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, callbacks=[StepResultAdapter(strict=True)]).fit(model, make_loader())
    assert_error(
        info.value, "MyModel.training_step", "return value", got, "TrainStepResult (or None to skip the batch)", fix
    )
    assert_untouched(model, before)


def test_strict_adapter_rejects_legacy_evaluation_returns(tmp_path: Path) -> None:
    model = MyModel(eval_return=eval_tensor_return)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, callbacks=[StepResultAdapter(strict=True)]).validate(model, make_loader(), verbose=False)
    assert_error(
        info.value,
        "MyModel.validation_step",
        "return value",
        "Tensor(shape=(), dtype=float32, requires_grad=False)",
        "ValStepResult (or None to skip the batch)",
        "wrap the loss: `return ValStepResult(loss=loss)`",
    )


def test_strict_adapter_accepts_typed_results(tmp_path: Path) -> None:
    plain, typed = PlainRegressor(), PlainTypedRegressor()
    make_trainer(tmp_path / "plain").fit(plain, make_loader(), make_loader(seed=1))
    make_trainer(tmp_path / "typed", callbacks=[StepResultAdapter(strict=True)]).fit(
        typed, make_loader(), make_loader(seed=1)
    )
    assert_same_params(typed, plain)
    assert_same_metrics(typed.trainer.callback_metrics, plain.trainer.callback_metrics)


# --- the module is exactly as it was after every run ---------------------------------------------


def run_fit(trainer: pl.Trainer, model: MyModel) -> None:
    trainer.fit(model, make_loader(), make_loader(seed=1))


def run_validate(trainer: pl.Trainer, model: MyModel) -> None:
    trainer.validate(model, make_loader(), verbose=False)


def run_test(trainer: pl.Trainer, model: MyModel) -> None:
    trainer.test(model, make_loader(), verbose=False)


def misnamed_loss(model: Any, batch: Any) -> Any:
    return {"Loss": model.loss_and_preds(batch)[0]}


def run_failing_fit(trainer: pl.Trainer, model: MyModel) -> None:
    model.train_return = misnamed_loss  # fails on the first step, with or without the adapter
    with pytest.raises((StepResultError, MisconfigurationException)):
        trainer.fit(model, make_loader())


@pytest.mark.parametrize(
    "run", [run_fit, run_validate, run_test, run_failing_fit], ids=["fit", "validate", "test", "failing-fit"]
)
def test_module_is_restored_after_the_run(tmp_path: Path, run: Callable[[pl.Trainer, MyModel], None]) -> None:
    control, model = MyModel(), MyModel()
    keys_before = list(model.__dict__)
    run(make_trainer(tmp_path / "control"), control)  # Lightning's own changes to the module, for reference
    run(make_trainer(tmp_path / "adapted", callbacks=[StepResultAdapter()]), model)

    for hook_name in ("training_step", "validation_step", "test_step"):
        assert hook_name not in model.__dict__
        assert getattr(model, hook_name).__func__ is getattr(MyModel, hook_name)
    assert list(model.__dict__) == list(control.__dict__)
    assert set(model.__dict__) - set(keys_before) <= {"_hparams"}  # only Lightning's own lazily created attribute
    restored = pickle.loads(pickle.dumps(model))
    assert_same_params(restored, model)
    assert "training_step" not in restored.__dict__
    assert_same_params(copy.deepcopy(model), model)


def test_an_instance_attribute_step_is_put_back(tmp_path: Path) -> None:
    model = MyModel()
    own_step = model.validation_step  # e.g. set by a test harness or a decorator applied per instance
    model.__dict__["validation_step"] = own_step
    make_trainer(tmp_path, callbacks=[StepResultAdapter()]).validate(model, make_loader(), verbose=False)
    assert model.__dict__["validation_step"] is own_step
    assert "training_step" not in model.__dict__ and "test_step" not in model.__dict__


def test_several_validation_dataloaders_under_the_adapter(tmp_path: Path) -> None:
    class TwoLoaders(MyModel):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
            self.seen.append((dataloader_idx, batch_idx))
            return super().validation_step(batch, batch_idx)

    model = TwoLoaders()
    model.seen = []
    loaders = [make_loader(seed=1, n_batches=2), make_loader(seed=2, n_batches=1)]
    trainer = make_trainer(tmp_path, callbacks=[StepResultAdapter()])
    trainer.validate(model, loaders, verbose=False)
    assert model.seen == [(0, 0), (0, 1), (1, 0)]
    assert sorted(trainer.callback_metrics) == ["val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"]


# --- on a TypedLightningModule the adapter is harmless ---------------------------------------------


class MyTypedModel(RegressorParts, TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.loss_and_preds(batch)[0]}


def test_adapter_on_a_typed_module_does_not_wrap_twice(tmp_path: Path) -> None:
    model = MyTypedModel()
    before = params_of(model)
    keys_before = list(model.__dict__)
    with pytest.raises(StepResultError) as info:
        make_trainer(tmp_path, callbacks=[StepResultAdapter()]).fit(model, make_loader())
    # Still the typed module's strict check (the adapter is lenient), naming the class once.
    assert str(info.value).startswith("MyTypedModel.training_step: return value\n")
    assert str(info.value).count("training_step") == 1
    assert info.value.expected == "TrainStepResult (or None to skip the batch)"
    assert_untouched(model, before)
    assert "training_step" not in model.__dict__
    assert set(model.__dict__) - set(keys_before) <= {"_hparams"}


def test_adapter_on_a_typed_module_trains_the_same(tmp_path: Path) -> None:
    without, adapted = TypedRegressor(), TypedRegressor()
    make_trainer(tmp_path / "without").fit(without, make_loader(), make_loader(seed=1))
    make_trainer(tmp_path / "adapted", callbacks=[StepResultAdapter()]).fit(adapted, make_loader(), make_loader(seed=1))
    assert_same_params(adapted, without)
    assert_same_metrics(adapted.trainer.callback_metrics, without.trainer.callback_metrics)


def test_settings_given_to_the_callback_for_a_typed_module_are_reported_as_ignored(tmp_path: Path) -> None:
    model = TypedRegressor()  # nonfinite_loss="raise", log_loss=False: its own settings win
    with pytest.warns(StepResultWarning) as record:
        make_trainer(tmp_path, callbacks=[StepResultAdapter(log_loss=True, nonfinite_loss="warn")]).fit(
            model, make_loader()
        )
    messages = [str(w.message) for w in record if issubclass(w.category, StepResultWarning)]
    assert messages == [
        "StepResultAdapter(nonfinite_loss='warn', log_loss=True) is ignored for TypedRegressor: a TypedLightningModule"
        " adapts its own steps with its own settings (nonfinite_loss='raise', log_loss=False); set"
        " `nonfinite_loss` / `log_loss` on the module class instead"
    ]
    assert "train_loss_step" not in model.trainer.logged_metrics


def test_a_default_callback_on_a_typed_module_says_nothing(tmp_path: Path) -> None:
    """The callback's default, nonfinite_loss="warn", is no setting given: the typed module's "raise" is no clash."""
    for adapter in (StepResultAdapter(), StepResultAdapter(nonfinite_loss="warn")):
        with warnings.catch_warnings():
            warnings.simplefilter("error", StepResultWarning)
            trainer = make_trainer(tmp_path, callbacks=[adapter])
            trainer.fit(TypedRegressor(), make_loader())
        assert trainer.global_step > 0


def test_state_key_names_the_settings_and_is_built_once() -> None:
    lenient, strict = StepResultAdapter(), StepResultAdapter(strict=True, nonfinite_loss=None)
    assert lenient.state_key == "StepResultAdapter{'strict': False, 'nonfinite_loss': 'warn'}"
    assert strict.state_key == "StepResultAdapter{'strict': True, 'nonfinite_loss': None}"
    # Lightning reads it on every call of every callback hook: one string per callback, not one per read.
    assert lenient.state_key is lenient.state_key
