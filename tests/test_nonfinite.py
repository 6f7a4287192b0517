"""The non-finite loss policy: ``"raise"`` (the typed module's default), ``"warn"`` (the adapter's),
``"skip"`` or ``None``.

Set as ``TypedLightningModule.nonfinite_loss`` (on the class or the instance) or
``StepResultAdapter(nonfinite_loss=...)``. Each policy is compared with what plain Lightning
does, and the check's cost is pinned down: with the policy off the adapter makes no
device-to-host read of the loss; with it on, exactly one per step.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import N_BATCHES, RegressorParts, assert_same_params, make_loader, make_trainer, params_of
from test_lightning_parity import Rows
from torch.overrides import TorchFunctionMode

from lightning_step_types import (
    StepResultAdapter,
    StepResultError,
    StepResultWarning,
    TrainStepResult,
    TypedLightningModule,
    ValStepResult,
)

NAN_BATCHES = (1, 2)  # two bad batches: the warning must come once, not per batch
POLICIES = ("raise", "warn", "skip", None)

GOT_NAN = "Tensor(shape=(), dtype=float32, requires_grad=True) with value nan"
GOT_NAN_EVAL = "Tensor(shape=(), dtype=float32, requires_grad=False) with value nan"
DIVERGES = "find where training diverges: lower the learning rate"
_FROM_CLASS = object()


class TypedNonFinite(RegressorParts, TypedLightningModule):
    """NaN losses on ``NAN_BATCHES``; the policy set on the instance, or left to the class."""

    def __init__(self, policy: Any = _FROM_CLASS) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        if policy is not _FROM_CLASS:
            self.nonfinite_loss = policy
        self.batch_end_outputs: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, _ = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss * math.nan if batch_idx in NAN_BATCHES else loss)

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, _ = self.loss_and_preds(batch)
        loss = loss * math.nan if batch_idx in NAN_BATCHES else loss
        self.log("val_loss", loss)
        return ValStepResult(loss=loss)

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.batch_end_outputs.append(outputs)


class SkipOnTheClass(TypedNonFinite):
    nonfinite_loss = "skip"


class PlainNonFinite(RegressorParts, pl.LightningModule):
    """The same steps as plain Lightning returns: a loss tensor, NaN on ``NAN_BATCHES``."""

    def __init__(self, none_instead_of_nan: bool = False) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.none_instead_of_nan = none_instead_of_nan
        self.batch_end_outputs: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        if batch_idx in NAN_BATCHES:
            return None if self.none_instead_of_nan else loss * math.nan
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        loss = loss * math.nan if batch_idx in NAN_BATCHES else loss
        self.log("val_loss", loss)
        return {"loss": loss}

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.batch_end_outputs.append(outputs)


class ParamsPerBatch(pl.Callback):
    """The weights at the start and end of every training batch."""

    def __init__(self) -> None:
        self.start: dict[int, dict[str, torch.Tensor]] = {}
        self.end: dict[int, dict[str, torch.Tensor]] = {}

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.start[batch_idx] = params_of(pl_module)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.end[batch_idx] = params_of(pl_module)


def subject(kind: str, policy: Any) -> tuple[pl.LightningModule, list[pl.Callback]]:
    """The module under test and its callbacks: a typed module, or a plain one under the adapter."""
    if kind == "typed":
        return TypedNonFinite(policy), []
    return PlainNonFinite(), [StepResultAdapter(nonfinite_loss=policy)]


def run(fn: Callable[[], Any]) -> tuple[BaseException | None, list[str]]:
    """Run, catching the exception (asserted by the caller) and the StepResultWarnings."""
    raised: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - the caller asserts its exact type
            raised = error
    return raised, [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]


def assert_same_params_nan_aware(a: pl.LightningModule, b: pl.LightningModule) -> None:
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=f"parameter {name}")


KINDS = ("typed", "adapter")


@pytest.mark.parametrize("kind", KINDS)
def test_training_raise_stops_before_the_optimizer_step(kind: str, tmp_path: Path) -> None:
    model, callbacks = subject(kind, "raise")
    per_batch = ParamsPerBatch()
    trainer = make_trainer(tmp_path, callbacks=[*callbacks, per_batch])
    raised, step_warnings = run(lambda: trainer.fit(model, make_loader()))
    assert type(raised) is StepResultError
    lines = str(raised).split("\n")
    assert lines[0] == f"{type(model).__qualname__}.training_step: return value" + (".loss" if kind == "typed" else "")
    assert GOT_NAN in lines[1]
    assert "a finite loss (nonfinite_loss='raise')" in lines[2]
    assert DIVERGES in lines[3] and "`nonfinite_loss='skip'` skips such training batches" in lines[3]
    assert step_warnings == []
    assert trainer.global_step == NAN_BATCHES[0]
    assert_same_params(model, per_batch.start[NAN_BATCHES[0]])  # nothing of the bad batch was applied


@pytest.mark.parametrize("kind", [*KINDS, "typed-class-attribute"])
def test_training_skip_skips_the_batches_and_warns_once(kind: str, tmp_path: Path) -> None:
    if kind == "typed-class-attribute":
        model: pl.LightningModule = SkipOnTheClass()
        callbacks: list[pl.Callback] = []
    else:
        model, callbacks = subject(kind, "skip")
    per_batch = ParamsPerBatch()
    trainer = make_trainer(tmp_path / "skip", callbacks=[*callbacks, per_batch])
    raised, step_warnings = run(lambda: trainer.fit(model, make_loader()))
    assert raised is None
    assert len(step_warnings) == 1  # two NaN batches, one warning
    lines = step_warnings[0].split("\n")
    assert lines[0].startswith(f"{type(model).__qualname__}.training_step: return value")
    assert GOT_NAN in lines[1]
    assert lines[2] == "  expected: a finite loss"
    assert lines[3].startswith("  fix:      skipping this batch (nonfinite_loss='skip'); " + DIVERGES)
    for batch_idx in NAN_BATCHES:
        assert_same_params(per_batch.end[batch_idx], per_batch.start[batch_idx])
    assert all(torch.isfinite(p).all() for p in model.parameters())

    # exactly what plain Lightning does when the step returns None for those batches
    reference = PlainNonFinite(none_instead_of_nan=True)
    reference_trainer = make_trainer(tmp_path / "reference")
    reference_trainer.fit(reference, make_loader())
    assert trainer.global_step == reference_trainer.global_step == N_BATCHES
    assert_same_params(model, reference)


class ChangesTheSetting(pl.Callback):
    """Sets the typed module's ``nonfinite_loss`` during the fit: ``"skip"`` once the fit has started
    (after its setup), ``"raise"`` again at the second NaN batch's start."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.nonfinite_loss = "skip"

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == NAN_BATCHES[1]:
            pl_module.nonfinite_loss = "raise"


def test_a_typed_module_s_setting_changed_during_the_fit_applies_from_its_next_step(tmp_path: Path) -> None:
    """The settings are read on every step (not once per fit): each change applies to the next step."""
    model = TypedNonFinite()  # the default, "raise"
    per_batch = ParamsPerBatch()
    trainer = make_trainer(tmp_path, callbacks=[ChangesTheSetting(), per_batch])
    raised, step_warnings = run(lambda: trainer.fit(model, make_loader()))
    # the first NaN batch is skipped ("skip", set after the setup), with one warning ...
    assert len(step_warnings) == 1
    assert "skipping this batch (nonfinite_loss='skip')" in step_warnings[0]
    assert_same_params(per_batch.end[NAN_BATCHES[0]], per_batch.start[NAN_BATCHES[0]])
    # ... and the second raises ("raise" again) before its optimizer step
    assert type(raised) is StepResultError
    assert "a finite loss (nonfinite_loss='raise')" in str(raised).split("\n")[2]
    assert NAN_BATCHES[1] not in per_batch.end
    assert_same_params(model, per_batch.start[NAN_BATCHES[1]])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", ["warn", None])
def test_training_warn_and_off_train_on_as_plain_lightning(kind: str, policy: str | None, tmp_path: Path) -> None:
    model, callbacks = subject(kind, policy)
    trainer = make_trainer(tmp_path / "subject", callbacks=callbacks)
    raised, step_warnings = run(lambda: trainer.fit(model, make_loader()))
    assert raised is None
    if policy == "warn":
        assert len(step_warnings) == 1  # two NaN batches, one warning for the run
        lines = step_warnings[0].split("\n")
        assert lines[1] == f"  got:      {GOT_NAN} at batch_idx={NAN_BATCHES[0]} (epoch 0)"
        assert lines[2].startswith("  expected: a finite loss; training goes on as plain Lightning's does")
        assert DIVERGES in lines[3]
    else:
        assert step_warnings == []
    assert trainer.global_step == N_BATCHES
    assert all(torch.isnan(p).all() for p in model.parameters())  # the NaN reached the weights, as it would

    reference = PlainNonFinite()
    make_trainer(tmp_path / "reference").fit(reference, make_loader())
    assert_same_params_nan_aware(model, reference)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_validation_policies(kind: str, policy: str | None, tmp_path: Path) -> None:
    """Evaluation batches are never skipped (it would bias the epoch means): "skip" warns there."""
    model, callbacks = subject(kind, policy)
    trainer = make_trainer(tmp_path, callbacks=callbacks)
    metrics: list[dict[str, float]] = []
    raised, step_warnings = run(lambda: metrics.extend(trainer.validate(model, make_loader(), verbose=False)))
    hook = f"{type(model).__qualname__}.validation_step"
    if policy == "raise":
        assert type(raised) is StepResultError
        lines = str(raised).split("\n")
        assert lines[0].startswith(f"{hook}: return value")
        assert GOT_NAN_EVAL in lines[1] and "a finite loss (nonfinite_loss='raise')" in lines[2]
        assert step_warnings == []
        assert len(model.batch_end_outputs) == NAN_BATCHES[0]
        return
    assert raised is None
    if policy is None:
        assert step_warnings == []
    else:
        assert len(step_warnings) == 1
        lines = step_warnings[0].split("\n")
        assert lines[0].startswith(f"{hook}: return value")
        assert GOT_NAN_EVAL in lines[1]
        if policy == "warn":
            assert lines[1].endswith(f" at batch_idx={NAN_BATCHES[0]} (epoch 0)")
            assert lines[2].startswith("  expected: a finite loss; training goes on as plain Lightning's does")
            assert lines[3].startswith("  fix:      to stop the run at the first one, before backward, set ")
        else:
            assert lines[2] == "  expected: a finite loss"
            assert lines[3].startswith("  fix:      " + DIVERGES) and "skipping" not in lines[3]
    assert len(model.batch_end_outputs) == N_BATCHES  # every batch evaluated
    assert math.isnan(metrics[0]["val_loss"])  # the epoch mean saw the NaN batches, as plain Lightning's does


# --- the adapter's default: a run that plain Lightning completes is never stopped ----------------------------


NAN_FROM = (0, 2)  # (epoch, batch_idx) of the first NaN loss


class TurnsNaN(RegressorParts, pl.LightningModule):
    """An existing module whose loss turns NaN mid-run: at ``NAN_FROM``, and from then on through the NaN
    weights (training and validation alike); it logs its losses itself."""

    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        if (self.current_epoch, batch_idx) == NAN_FROM:
            loss = loss * math.nan
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        self.log("val_loss", loss)
        return {"loss": loss}


def same_rows(a: list[tuple[int | None, dict[str, float]]], b: list[tuple[int | None, dict[str, float]]]) -> bool:
    """Equal rows, NaN equal to NaN."""

    def same_value(x: float, y: float) -> bool:
        return x == y or (math.isnan(x) and math.isnan(y))

    return len(a) == len(b) and all(
        step_a == step_b and row_a.keys() == row_b.keys() and all(same_value(row_a[k], row_b[k]) for k in row_a)
        for (step_a, row_a), (step_b, row_b) in zip(a, b, strict=True)
    )


def test_the_adapter_s_default_warns_once_and_trains_on_as_plain_lightning(tmp_path: Path) -> None:
    """``StepResultAdapter()`` never stops a run that plain Lightning completes: a NaN loss mid-run gives one
    warning for the run (not one per NaN step or per hook), and every parameter and logged value is plain
    Lightning's."""
    runs: dict[str, tuple[pl.Trainer, TurnsNaN, Rows]] = {}
    for name, callbacks in (("plain", []), ("adapter", [StepResultAdapter()])):
        model, rows = TurnsNaN(), Rows()
        trainer = make_trainer(tmp_path / name, callbacks=callbacks, max_epochs=2, logger=rows, log_every_n_steps=1)
        raised, step_warnings = run(lambda t=trainer, m=model: t.fit(m, make_loader(), make_loader(seed=1)))
        assert raised is None
        runs[name] = trainer, model, rows
        if name == "plain":
            assert step_warnings == []
            continue
        assert len(step_warnings) == 1  # NaN on 6 training and 4 validation batches: one warning for the run
        lines = step_warnings[0].split("\n")
        assert lines[0] == "TurnsNaN.training_step: return value"
        assert lines[1] == f"  got:      {GOT_NAN} at batch_idx={NAN_FROM[1]} (epoch {NAN_FROM[0]})"
        assert lines[2] == (
            "  expected: a finite loss; training goes on as plain Lightning's does (the value reaches backward and"
            " the weights), and later non-finite losses in this run are not reported (nonfinite_loss='warn')"
        )
        assert lines[3].startswith(
            '  fix:      to stop the run at the first one, before backward, set `StepResultAdapter(nonfinite_loss="raise")`; '
            + DIVERGES
        )

    (plain, plain_model, plain_rows), (adapted, adapted_model, adapted_rows) = runs["plain"], runs["adapter"]
    assert adapted.global_step == plain.global_step == 2 * N_BATCHES  # trained to the end
    assert all(torch.isnan(p).all() for p in adapted_model.parameters())  # the NaN reached the weights, as plainly
    for (name, ours), (_, theirs) in zip(adapted_model.named_parameters(), plain_model.named_parameters(), strict=True):
        assert torch.equal(ours.isnan(), theirs.isnan()), name
        assert torch.equal(ours.nan_to_num(), theirs.nan_to_num()), name
    assert len(plain_rows.rows) == 2 * N_BATCHES + 4  # a row per step, and per epoch its validation and means
    assert same_rows(adapted_rows.rows, plain_rows.rows)
    finite = [row for _, row in plain_rows.rows if not any(math.isnan(v) for v in row.values())]
    assert len(finite) == NAN_FROM[1]  # the steps before the first NaN: compared as numbers, not only as NaN


def test_raise_on_the_adapter_still_stops_the_run(tmp_path: Path) -> None:
    model = TurnsNaN()
    trainer = make_trainer(tmp_path, callbacks=[StepResultAdapter(nonfinite_loss="raise")], max_epochs=2)
    raised, step_warnings = run(lambda: trainer.fit(model, make_loader()))
    assert type(raised) is StepResultError
    assert str(raised).split("\n")[2] == "  expected: a finite loss (nonfinite_loss='raise')"
    assert step_warnings == []
    assert trainer.global_step == NAN_FROM[1]


def test_invalid_policy_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^nonfinite_loss='ignore': expected one of 'raise', 'warn', 'skip' or None$"):
        StepResultAdapter(nonfinite_loss="ignore")  # type: ignore[arg-type]
    model = TypedNonFinite(policy="ignore")
    with pytest.raises(ValueError, match=r"^nonfinite_loss='ignore': expected one of 'raise', 'warn', 'skip' or None$"):
        make_trainer(tmp_path).fit(model, make_loader())  # read at the first step


# --- the cost: host reads of the loss ----------------------------------------------------------

# The Tensor methods that read a value on the host (a device-to-host sync on an accelerator).
HOST_READS = frozenset({"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy", "cpu"})


class HostReads(TorchFunctionMode):
    """Counts host reads of tensor values while active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


class CountingWindow:
    """A ``HostReads`` mode from the end of the step body to ``on_before_backward``: the adapter's checks
    and Lightning's handling of the returned loss, and nothing of the user's own step."""

    def __init__(self) -> None:
        self.mode: HostReads | None = None
        self.per_step: list[list[str]] = []

    def open(self) -> None:
        self.mode = HostReads()
        self.mode.__enter__()

    def close(self) -> None:
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
            self.per_step.append(self.mode.calls)
            self.mode = None


class TypedCounting(RegressorParts, TypedLightningModule):
    def __init__(self, policy: Any, window: CountingWindow) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.nonfinite_loss = policy
        self.window = window

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, _ = self.loss_and_preds(batch)
        self.window.open()
        return TrainStepResult(loss=loss)

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.window.close()


class PlainCounting(RegressorParts, pl.LightningModule):
    def __init__(self, window: CountingWindow) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.window = window

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        self.window.open()
        return {"loss": loss}

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.window.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("policy", "reads_per_step"), [(None, []), ("raise", ["item"]), ("warn", ["item"]), ("skip", ["item"])]
)
def test_host_reads_per_step(kind: str, policy: str | None, reads_per_step: list[str], tmp_path: Path) -> None:
    assert not torch.cuda.is_available()  # on CPU a host read is cheap, but it is the same call that syncs a GPU
    window = CountingWindow()
    if kind == "typed":
        model: pl.LightningModule = TypedCounting(policy, window)
        callbacks: list[pl.Callback] = []
    else:
        model = PlainCounting(window)
        callbacks = [StepResultAdapter(nonfinite_loss=policy)]
    trainer = make_trainer(tmp_path, callbacks=callbacks)
    trainer.fit(model, make_loader())
    assert trainer.global_step == N_BATCHES
    assert window.per_step == [reads_per_step] * N_BATCHES
