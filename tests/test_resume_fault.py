"""A checkpoint saved inside a training batch resumes exactly (lightning_step_types/resume/epoch_state.py).

A fault in batch 5 of 11 (an exception in ``training_step`` or in backward, caught by
``OnExceptionCheckpoint``; SLURM's requeue signal, handled by Lightning's own
``SLURMEnvironment(auto_requeue=True)``; ``trainer.save_checkpoint`` from inside the step or a hook)
saves a checkpoint that Lightning would resume past batch 5: its loader state is already past it.
Each test runs the uninterrupted fit, the faulty one, and a fresh fit resumed from the faulty one's
checkpoint, and compares weights, ``callback_metrics``, ``logged_metrics`` and the CSV rows bit for bit.
"""

from __future__ import annotations

import gc
import os
import signal
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import assert_same_metrics, assert_same_params
from pytorch_lightning.callbacks import OnExceptionCheckpoint
from pytorch_lightning.plugins.environments import SLURMEnvironment
from pytorch_lightning.utilities.exceptions import SIGTERMException
from test_resume import (
    BATCHES,
    Logs,
    PlainResume,
    Run,
    TypedResume,
    assert_same_run,
    dataset,
    declared_mse,
    exact,
    fit,
)
from torch.utils.data import DataLoader

from lightning_step_types import StepMetric, StepResultAdapter, StepResultWarning, TrainStepResult
from lightning_step_types.resume.epoch_state import CHECKPOINT_KEY, resuming

FAULT_BATCH = 5


class SimulatedFault(RuntimeError):
    """Stands for an out-of-memory error, a NaN guard, a lost device."""


class FailInBackward(torch.autograd.Function):
    """The identity forward; backward raises, as an out-of-memory error in backward does."""

    @staticmethod
    def forward(ctx: Any, loss: torch.Tensor) -> torch.Tensor:
        return loss.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise SimulatedFault("out of memory in backward")


class Faults(Logs):
    """``fault`` happens once, at ``fault_at`` (epoch, batch); None: an ordinary run."""

    fault: str | None = None
    fault_at = (0, FAULT_BATCH)  # (epoch, batch)
    save_to = ""
    _at: str | None = None

    def setup_fault(self, fault: str | None, save_to: Path | None, fault_at: tuple[int, int]) -> None:
        self.fault, self.save_to, self.fault_at = fault, str(save_to), fault_at

    def faulty_training(self, batch: Any, batch_idx: int) -> torch.Tensor:
        trainer: Any = getattr(self, "trainer")
        here = (trainer.current_epoch, batch_idx) == self.fault_at
        self._at = self.fault if here else None
        if self._at == "before_log":
            raise SimulatedFault("before the step's self.log calls")
        loss = self.log_training(batch)
        if self._at == "after_log":
            raise SimulatedFault("after the step's self.log calls")
        if self._at == "backward":
            loss = FailInBackward.apply(loss)
        if self._at == "slurm_signal":  # the signal handler runs here, inside the step
            os.kill(os.getpid(), signal.SIGUSR1)
        if self._at == "sigterm":  # Lightning notes it, and stops at the batch's end
            os.kill(os.getpid(), signal.SIGTERM)
        if self._at == "save_in_step":
            trainer.save_checkpoint(self.save_to)
        return loss

    def on_after_backward(self) -> None:
        if self._at == "save_in_hook":
            getattr(self, "trainer").save_checkpoint(self.save_to)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)  # type: ignore[misc]
        if self._at == "save_after_optimizer_step":
            getattr(self, "trainer").save_checkpoint(self.save_to)


class FaultyTyped(Faults, TypedResume):
    def __init__(
        self, fault: str | None = None, save_to: Path | None = None, fault_at: tuple[int, int] = (0, FAULT_BATCH)
    ) -> None:
        super().__init__()
        self.setup_fault(fault, save_to, fault_at)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.faulty_training(batch, batch_idx))


class FaultyPlain(Faults, PlainResume):
    def __init__(
        self, fault: str | None = None, save_to: Path | None = None, fault_at: tuple[int, int] = (0, FAULT_BATCH)
    ) -> None:
        super().__init__()
        self.setup_fault(fault, save_to, fault_at)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.faulty_training(batch, batch_idx)


def model(how: str) -> type[Faults]:
    return FaultyTyped if how == "typed" else FaultyPlain


def run(root: Path, how: str, fault: str | None = None, *, callbacks: list[Any] | None = None, **kwargs: Any) -> Run:
    """One fit of the fault model, with ``StepResultAdapter()`` for the plain module (how="adapter")."""
    save_to, fault_at = root / "in_step.ckpt", kwargs.pop("fault_at", (0, FAULT_BATCH))
    extra = list(callbacks or []) + ([StepResultAdapter()] if how == "adapter" else [])
    return fit(
        root,
        lambda: model(how)(fault, save_to, fault_at),
        callbacks=extra,
        enable_checkpointing=any(isinstance(c, OnExceptionCheckpoint) for c in extra),
        **kwargs,
    )


def fault_then_resume(tmp_path: Path, how: str, fault: str, **kwargs: Any) -> tuple[Run, Run]:
    """The uninterrupted run, and a fresh run resumed from the checkpoint the fault left."""
    full = run(tmp_path / "full", how, **kwargs)
    with pytest.raises(SimulatedFault):
        run(tmp_path / "faulty", how, fault, callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")], **kwargs)
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt", **kwargs)
    )
    return full, resumed


def no_step_result_warning(call: Callable[[], Run]) -> Run:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)] == []
    return result


HOWS = ["typed", "adapter"]


# --- what plain Lightning does ---------------------------------------------------------------------


@exact
def test_plain_lightning_never_trains_the_batch_in_flight(tmp_path: Path) -> None:
    """The figures docs/resume.md quotes: an exception after batch 5's self.log calls, OnExceptionCheckpoint."""
    full = fit(tmp_path / "full", FaultyPlain)
    with pytest.raises(SimulatedFault):
        fit(
            tmp_path / "faulty",
            lambda: FaultyPlain("after_log"),
            enable_checkpointing=True,
            callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")],
        )
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    fit_loop = checkpoint["loops"]["fit_loop"]
    assert fit_loop["epoch_loop.batch_progress"]["current"] == {
        "ready": 6,
        "started": 6,
        "processed": 5,
        "completed": 5,
    }
    assert fit_loop["state_dict"]["combined_loader"][0]["_num_yielded"] == 6  # batch 5 already fetched
    resumed = fit(tmp_path / "resumed", FaultyPlain, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    assert (full.trainer.global_step, resumed.trainer.global_step) == (BATCHES, BATCHES - 1)
    assert not torch.equal(resumed.module.net.weight, full.module.net.weight)
    assert round(float(full.trainer.callback_metrics["train_loss_epoch"]), 3) == 4.375
    assert round(float(resumed.trainer.callback_metrics["train_loss_epoch"]), 3) == 1.240


# --- exact resume from inside a batch ------------------------------------------------------------------


@exact
@pytest.mark.parametrize("fault", ["before_log", "after_log", "backward"])
@pytest.mark.parametrize("how", HOWS)
def test_an_exception_inside_a_batch_resumes_by_training_that_batch(how: str, fault: str, tmp_path: Path) -> None:
    full, resumed = fault_then_resume(tmp_path, how, fault)
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    # Lightning's own entry as Lightning wrote it: batch 5 fetched and started
    lightning_progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert lightning_progress["ready"] == 6 and lightning_progress["completed"] == 5
    # the library's copy, rewritten as saved just before batch 5 was fetched, is what its resume loads
    fit_loop = checkpoint[CHECKPOINT_KEY]["epoch_state"]["fit_loop"]
    assert fit_loop["epoch_loop.batch_progress"]["current"] == {
        "ready": 5,
        "started": 5,
        "processed": 5,
        "completed": 5,
    }
    assert fit_loop["state_dict"]["combined_loader"][0]["_num_yielded"] == 5
    point = checkpoint[CHECKPOINT_KEY]["epoch_state"]["point"]
    assert (point["kind"], point["epoch"], point["batch"]) == ("batch", 0, FAULT_BATCH)
    assert resumed.trainer.global_step == BATCHES
    assert_same_run(resumed, full)
    assert not resuming()


@exact
@pytest.mark.parametrize("how", HOWS)
def test_an_exception_in_the_first_batch_of_the_second_epoch_resumes_exactly(how: str, tmp_path: Path) -> None:
    # batch 0 of an epoch: the loader state from before its fetch is the epoch's new iterator
    full = run(tmp_path / "full", how, max_epochs=2)
    with pytest.raises(SimulatedFault):
        run(
            tmp_path / "faulty",
            how,
            "after_log",
            callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")],
            max_epochs=2,
            fault_at=(1, 0),
        )
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    assert "combined_loader" not in checkpoint[CHECKPOINT_KEY]["epoch_state"]["fit_loop"]["state_dict"]
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, max_epochs=2, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    )
    assert_same_run(resumed, full)


@exact
@pytest.mark.parametrize("fault", ["save_in_step", "save_in_hook"])
@pytest.mark.parametrize("how", HOWS)
def test_save_checkpoint_from_inside_a_batch_resumes_exactly(how: str, fault: str, tmp_path: Path) -> None:
    full = run(tmp_path / "full", how)
    saving = run(tmp_path / "saving", how, fault)
    assert_same_run(saving, full)  # saving changes nothing for the run that goes on
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, ckpt_path=tmp_path / "saving" / "in_step.ckpt")
    )
    assert_same_run(resumed, full)


@exact
@pytest.mark.parametrize("how", HOWS)
def test_a_checkpoint_saved_after_the_optimizer_step_goes_on_after_that_batch_exactly(how: str, tmp_path: Path) -> None:
    full = run(tmp_path / "full", how)
    run(tmp_path / "saving", how, "save_after_optimizer_step")
    checkpoint = torch.load(tmp_path / "saving" / "in_step.ckpt", weights_only=False)
    point = checkpoint[CHECKPOINT_KEY]["epoch_state"]["point"]
    assert (point["kind"], point["batch"]) == (
        "batch_end",
        FAULT_BATCH,
    )  # the weights hold batch 5: its end comes first
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, ckpt_path=tmp_path / "saving" / "in_step.ckpt")
    )
    assert_same_run(resumed, full)


@exact
@pytest.mark.parametrize("how", HOWS)
def test_a_fault_inside_an_accumulation_window_carries_the_window_s_gradients(how: str, tmp_path: Path) -> None:
    # accumulate_grad_batches=2: batch 5 is the second of the window 4-5; batch 4's gradients are only in .grad
    full = run(tmp_path / "full", how, accumulate_grad_batches=2)
    with pytest.raises(SimulatedFault):
        run(
            tmp_path / "faulty",
            how,
            "after_log",
            callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")],
            accumulate_grad_batches=2,
        )
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    assert sorted(checkpoint[CHECKPOINT_KEY]["epoch_state"]["ranks"][0]["gradients"]) == ["net.bias", "net.weight"]
    resumed = no_step_result_warning(
        lambda: run(
            tmp_path / "resumed", how, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt", accumulate_grad_batches=2
        )
    )
    assert_same_run(resumed, full)


@exact
@pytest.mark.parametrize("how", HOWS)
def test_a_save_after_the_window_s_last_backward_names_the_lost_gradients(how: str, tmp_path: Path) -> None:
    # saved in on_after_backward of batch 5, before the window 4-5's step: .grad holds batch 4 and 5 together
    full = run(tmp_path / "full", how, accumulate_grad_batches=2)
    run(tmp_path / "saving", how, "save_in_hook", accumulate_grad_batches=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = run(
            tmp_path / "resumed", how, ckpt_path=tmp_path / "saving" / "in_step.ckpt", accumulate_grad_batches=2
        )
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert messages == [
        f"{model(how).__name__}: resuming epoch 0 at batch 5\n"
        "  got:      a checkpoint saved in batch 5 after its backward added to .grad and before its optimizer step:"
        " .grad held the gradients of the earlier batches of its window of accumulate_grad_batches=2 together with"
        " batch 5's, which no point can separate, so the resumed run trains batch 5 again without the earlier ones"
        " and the weights differ from the uninterrupted run's from that optimizer step on\n"
        "  expected: a checkpoint saved before a batch's backward, or between batches (each carries .grad)\n"
        "  fix:      nothing restores those gradients; for an exact resume save between batches (ModelCheckpoint("
        "every_n_train_steps=...)), or before a batch's backward"
    ]
    assert not torch.equal(resumed.module.net.weight, full.module.net.weight)
    assert resumed.trainer.global_step == full.trainer.global_step == 6


@exact
@pytest.mark.parametrize("how", HOWS)
def test_a_fault_in_the_first_batch_of_an_accumulation_window_resumes_exactly(how: str, tmp_path: Path) -> None:
    full = run(tmp_path / "full", how, accumulate_grad_batches=2)
    with pytest.raises(SimulatedFault):
        run(
            tmp_path / "faulty",
            how,
            "after_log",
            callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")],
            accumulate_grad_batches=2,
            fault_at=(0, 4),
        )
    resumed = no_step_result_warning(
        lambda: run(
            tmp_path / "resumed", how, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt", accumulate_grad_batches=2
        )
    )
    assert_same_run(resumed, full)


class DeclaredFaulty(FaultyTyped):
    """Declared step metrics: the library updates them from the step's result, before backward."""

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss = self.faulty_training(batch, batch_idx)
        return TrainStepResult(loss=loss, metadata={"preds": self.loss_and_preds(batch)[1].detach()})

    def configure_step_metrics(self) -> dict[str, StepMetric[Any]]:
        return declared_mse()


class DeclaredFaultyPlain(FaultyPlain):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.faulty_training(batch, batch_idx), "preds": self.loss_and_preds(batch)[1].detach()}


@exact
@pytest.mark.parametrize("how", HOWS)
def test_declared_metrics_updated_before_a_backward_fault_count_the_batch_once(how: str, tmp_path: Path) -> None:
    def go(root: Path, fault: str | None = None, **kwargs: Any) -> Run:
        if how == "typed":
            return fit(root, lambda: DeclaredFaulty(fault), enable_checkpointing=True, **kwargs)
        adapter = StepResultAdapter(metrics=declared_mse())
        callbacks = [*kwargs.pop("callbacks", []), adapter]
        return fit(root, lambda: DeclaredFaultyPlain(fault), enable_checkpointing=True, callbacks=callbacks, **kwargs)

    full = go(tmp_path / "full")
    with pytest.raises(SimulatedFault):
        go(tmp_path / "faulty", "backward", callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")])
    resumed = no_step_result_warning(
        lambda: go(tmp_path / "resumed", ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    )
    assert "train_mse" in full.trainer.callback_metrics
    assert_same_run(resumed, full)


# --- SLURM: the requeue signal inside a step, and Lightning's own automatic resume ----------------------


@pytest.fixture
def on_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Path]:
    """A job step as SLURM starts one, with a fake ``scontrol`` that records the requeue it is asked for."""

    def enter() -> Path:
        bin_dir, requeued = tmp_path / "bin", tmp_path / "requeued"
        bin_dir.mkdir()
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(f'#!/bin/sh\necho "$@" >> {requeued}\n')
        scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        for name, value in dict(
            SLURM_NTASKS="1",
            SLURM_JOB_NAME="train",
            SLURM_JOB_ID="4242",
            SLURM_PROCID="0",
            SLURM_LOCALID="0",
            SLURM_NODEID="0",
        ).items():
            monkeypatch.setenv(name, value)
        return requeued

    return enter


@exact
@pytest.mark.parametrize("how", HOWS)
def test_a_slurm_requeue_signal_inside_a_step_resumes_exactly(
    how: str, tmp_path: Path, on_slurm: Callable[[], Path]
) -> None:
    full = run(tmp_path / "full", how)  # off SLURM
    requeued = on_slurm()
    job = tmp_path / "job"
    signalled = run(
        job / "first", how, "slurm_signal", plugins=[SLURMEnvironment(auto_requeue=True)], default_root_dir=str(job)
    )
    assert requeued.read_text() == "requeue 4242\n"
    assert sorted(path.name for path in job.glob("*.ckpt")) == ["hpc_ckpt_1.ckpt"]
    assert_same_run(signalled, full)  # SLURM kills the job later; here it ran on, unchanged by the save
    # the requeued job: the same script, no ckpt_path; Lightning finds hpc_ckpt_1.ckpt by itself
    requeued_run = no_step_result_warning(
        lambda: run(job / "requeued", how, plugins=[SLURMEnvironment(auto_requeue=True)], default_root_dir=str(job))
    )
    assert Path(str(requeued_run.trainer.ckpt_path)).name == "hpc_ckpt_1.ckpt"
    assert requeued_run.trainer.global_step == BATCHES
    assert_same_run(requeued_run, full)


@exact
@pytest.mark.parametrize("how", HOWS)
def test_sigterm_inside_a_step_is_handled_at_the_batch_end_and_resumes_exactly(how: str, tmp_path: Path) -> None:
    full = run(tmp_path / "full", how)
    with pytest.raises(SIGTERMException):
        run(tmp_path / "faulty", how, "sigterm", callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")])
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    # saved after batch 5 ended: nothing in flight, nothing rewritten
    progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]
    assert progress == {"ready": 6, "started": 6, "processed": 6, "completed": 6}
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    )
    assert_same_run(resumed, full)


# --- the other flavour ---------------------------------------------------------------------------------


@exact
def test_lightning_pytorch_flavour_resumes_a_fault_inside_a_batch_exactly(tmp_path: Path) -> None:
    import lightning.pytorch as lp
    from test_resume import stateful_loader

    from lightning_step_types.lightning_pytorch import TypedLightningModule as LTyped

    class LightningFaulty(Faults, LTyped):
        def __init__(self, fault: str | None = None) -> None:
            super().__init__()
            self.build(0, 0.1)
            self.setup_logs()
            self.setup_fault(fault, None, (0, FAULT_BATCH))

        def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
            return TrainStepResult(loss=self.faulty_training(batch, batch_idx))

    def fit_lp(root: Path, fault: str | None = None, ckpt: Path | None = None) -> tuple[Any, Any]:
        callbacks = [lp.callbacks.OnExceptionCheckpoint(root)]
        trainer = lp.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(root),
            callbacks=callbacks,
        )
        module = LightningFaulty(fault)
        trainer.fit(module, stateful_loader(), ckpt_path=ckpt)
        return trainer, module

    full_trainer, full_module = fit_lp(tmp_path / "full")
    with pytest.raises(SimulatedFault):
        fit_lp(tmp_path / "faulty", "backward")
    resumed_trainer, resumed_module = fit_lp(tmp_path / "resumed", ckpt=tmp_path / "faulty" / "on_exception.ckpt")
    assert resumed_trainer.global_step == BATCHES
    assert_same_params(resumed_module, full_module)
    assert_same_metrics(resumed_trainer.callback_metrics, full_trainer.callback_metrics)


# --- without a stateful loader ----------------------------------------------------------------------------


class SeenBatches(TypedResume):
    """Records which data each batch index trains on (the first feature of its first sample)."""

    seen: list[tuple[int, float]]

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        self.__dict__.setdefault("seen", []).append((batch_idx, float(batch[0][0, 0])))
        return super().training_step(batch, batch_idx)


@exact
def test_a_plain_dataloader_resumed_mid_epoch_goes_on_with_the_epoch_s_next_batch(tmp_path: Path) -> None:
    """What docs/resume.md says of a plain DataLoader ("Without a stateful loader"), figures measured here:
    plain Lightning restarts the epoch's data and warns; the library resumes at the next batch, silently."""

    def loader() -> DataLoader[Any]:
        return DataLoader(dataset(), batch_size=2)

    class PlainSeenBatches(SeenBatches):
        exact_resume = False

    checkpoint = tmp_path / "full" / "ckpt" / "step=5.ckpt"
    full = fit(tmp_path / "full", SeenBatches, every=5, loader=loader)
    resumed: dict[str, Any] = {}
    caught: dict[str, list[Any]] = {}
    for name, module in (("plain", PlainSeenBatches), ("exact", SeenBatches)):
        with warnings.catch_warnings(record=True) as caught[name]:
            warnings.simplefilter("always")
            resumed[name] = fit(tmp_path / name, module, loader=loader, ckpt_path=checkpoint)
    lightning_warnings = [str(w.message) for w in caught["plain"] if "not resumable" in str(w.message)]
    assert lightning_warnings == [
        "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable."
        " This can cause unreliable results if further training is done. Consider using an end-of-epoch checkpoint"
        " or make your dataloader resumable by implementing the `state_dict` / `load_state_dict` interface."
    ]
    # plain Lightning trains the epoch's batches 0 to 5 again as its batches 5 to 10
    full_seen, plain_seen = getattr(full.module, "seen"), getattr(resumed["plain"].module, "seen")
    assert plain_seen == [(index + 5, data) for index, (_, data) in enumerate(full_seen[:6])]
    assert not torch.equal(resumed["plain"].module.net.weight, full.module.net.weight)
    assert round(float(full.trainer.callback_metrics["train_loss_epoch"]), 3) == 4.375
    # its epoch mean covers the 6 batches it trained after the resume (batches 0 to 5 again), not the epoch
    assert round(float(resumed["plain"].trainer.callback_metrics["train_loss_epoch"]), 3) == 0.504
    # the library: batches 5 to 10 as uninterrupted, no warning, Lightning's included
    assert [str(w.message) for w in caught["exact"] if "not resumable" in str(w.message)] == []
    assert [str(w.message) for w in caught["exact"] if issubclass(w.category, StepResultWarning)] == []
    assert getattr(resumed["exact"].module, "seen") == full_seen
    assert_same_run(resumed["exact"], full)


# --- a fault before the library noted the batch's start ------------------------------------------------


class FailAtBatchStart(pl.Callback):
    """Raises in ``on_train_batch_start`` of batch 5: before the typed module's hook and the adapter's."""

    def __init__(self, at: tuple[int, int] = (0, FAULT_BATCH)) -> None:
        self.at = at

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if (trainer.current_epoch, batch_idx) == self.at:
            raise SimulatedFault("in an earlier callback's on_train_batch_start")


@exact
@pytest.mark.parametrize("how", HOWS)
def test_an_exception_in_an_earlier_callback_s_batch_start_resumes_by_training_that_batch(
    how: str, tmp_path: Path
) -> None:
    # the callback comes before StepResultAdapter(); the typed module's hook runs after every callback's
    full = run(tmp_path / "full", how)
    with pytest.raises(SimulatedFault):
        run(tmp_path / "faulty", how, callbacks=[FailAtBatchStart(), OnExceptionCheckpoint(tmp_path / "faulty")])
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    fit_loop = checkpoint[CHECKPOINT_KEY]["epoch_state"]["fit_loop"]  # what the library's resume loads
    assert checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["ready"] == 6  # Lightning's own
    assert fit_loop["epoch_loop.batch_progress"]["current"] == {
        "ready": 5,
        "started": 5,
        "processed": 5,
        "completed": 5,
    }
    assert fit_loop["state_dict"]["combined_loader"][0]["_num_yielded"] == 5
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    )
    assert resumed.trainer.global_step == BATCHES
    assert_same_run(resumed, full)


@exact
@pytest.mark.parametrize("how", HOWS)
def test_an_exception_in_an_earlier_callback_s_start_of_an_epoch_resumes_exactly(how: str, tmp_path: Path) -> None:
    # batch 0 of epoch 1: the last noted batch is epoch 0's; the resumed run makes the epoch's iterator anew
    full = run(tmp_path / "full", how, max_epochs=2)
    with pytest.raises(SimulatedFault):
        run(
            tmp_path / "faulty",
            how,
            callbacks=[FailAtBatchStart((1, 0)), OnExceptionCheckpoint(tmp_path / "faulty")],
            max_epochs=2,
        )
    checkpoint = torch.load(tmp_path / "faulty" / "on_exception.ckpt", weights_only=False)
    assert "combined_loader" not in checkpoint[CHECKPOINT_KEY]["epoch_state"]["fit_loop"]["state_dict"]
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, max_epochs=2, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    )
    assert resumed.trainer.global_step == 2 * BATCHES
    assert_same_run(resumed, full)


# --- running statistics (BatchNorm) --------------------------------------------------------------------


def batches_of_three() -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(dataset(), batch_size=3)  # 7 full batches: BatchNorm1d needs two samples or more


class NormedFaulty(FaultyTyped):
    def __init__(self, fault: str | None = None) -> None:
        super().__init__(fault)
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.bn(x))


@exact
def test_running_statistics_count_the_batch_in_flight_twice_with_one_warning(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", NormedFaulty, loader=batches_of_three)
    with pytest.raises(SimulatedFault):
        fit(
            tmp_path / "faulty",
            lambda: NormedFaulty("backward"),
            loader=batches_of_three,
            enable_checkpointing=True,
            callbacks=[OnExceptionCheckpoint(tmp_path / "faulty")],
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = fit(
            tmp_path / "resumed",
            NormedFaulty,
            loader=batches_of_three,
            ckpt_path=tmp_path / "faulty" / "on_exception.ckpt",
        )
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert messages == [
        "NormedFaulty: resuming epoch 0 at batch 5\n"
        "  got:      a checkpoint saved inside batch 5, with modules in training mode that keep running statistics:"
        " self.bn (BatchNorm1d); their running_mean, running_var and num_batches_tracked already count batch 5's"
        " forward if it ran before the save, and the resumed run forwards batch 5 again, so they count it twice\n"
        "  expected: a checkpoint saved between batches, or a module without running statistics in training mode\n"
        "  fix:      nothing to do for the weights and the epoch values, which are exact; the running statistics count"
        " one batch twice (num_batches_tracked is one higher); to avoid it save between batches"
        " (ModelCheckpoint(every_n_train_steps=...)), or recompute the statistics after training with"
        " torch.optim.swa_utils.update_bn(loader, model)"
    ]
    assert_same_params(resumed.module, full.module)
    assert_same_metrics(resumed.trainer.callback_metrics, full.trainer.callback_metrics)
    full_bn, resumed_bn = getattr(full.module, "bn"), getattr(resumed.module, "bn")
    assert int(full_bn.num_batches_tracked) == 7
    assert int(resumed_bn.num_batches_tracked) - int(full_bn.num_batches_tracked) == 1
    assert not torch.equal(resumed_bn.running_mean, full_bn.running_mean)


@exact
@pytest.mark.parametrize("how", HOWS)
def test_a_fault_in_an_earlier_callback_at_a_resumed_run_s_first_batch_resumes_exactly(
    how: str, tmp_path: Path
) -> None:
    # resumed from step=5.ckpt, the run fails at its first batch (5), in a callback's on_train_batch_start
    full = fit(tmp_path / "saving", model(how), every=5, adapter=how == "adapter")
    with pytest.raises(SimulatedFault):
        run(
            tmp_path / "faulty",
            how,
            callbacks=[FailAtBatchStart(), OnExceptionCheckpoint(tmp_path / "faulty")],
            ckpt_path=tmp_path / "saving" / "ckpt" / "step=5.ckpt",
        )
    gc.collect()
    resumed = no_step_result_warning(
        lambda: run(tmp_path / "resumed", how, ckpt_path=tmp_path / "faulty" / "on_exception.ckpt")
    )
    assert resumed.trainer.global_step == BATCHES
    assert_same_params(resumed.module, full.module)
    assert_same_metrics(resumed.trainer.callback_metrics, full.trainer.callback_metrics)


class ScheduledFaulty(FaultyTyped):
    """A step-interval LR scheduler: halves the learning rate after every optimizer step."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


@exact
def test_a_save_after_the_optimizer_step_makes_up_the_scheduler_step_that_follows_it(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", ScheduledFaulty)
    fit(tmp_path / "saving", lambda: ScheduledFaulty("save_after_optimizer_step", tmp_path / "in_step.ckpt"))
    checkpoint = torch.load(tmp_path / "in_step.ckpt", weights_only=False)
    assert checkpoint[CHECKPOINT_KEY]["epoch_state"]["point"]["update_schedulers"] is True
    assert checkpoint["lr_schedulers"][0]["last_epoch"] == FAULT_BATCH  # saved before batch 5's scheduler step
    resumed = no_step_result_warning(
        lambda: fit(tmp_path / "resumed", ScheduledFaulty, ckpt_path=tmp_path / "in_step.ckpt")
    )
    full_lr = full.trainer.optimizers[0].param_groups[0]["lr"]
    resumed_lr = resumed.trainer.optimizers[0].param_groups[0]["lr"]
    assert full_lr == resumed_lr == 0.1 * 0.5**BATCHES
    assert_same_run(resumed, full)


# --- what no point holds: named in one warning ---------------------------------------------------------


class BatchEndLogging(FaultyTyped):
    """Logs a value in its result hook: it runs in on_train_batch_end, after every callback's."""

    def on_train_batch_result(self, result: Any, batch: Any, batch_idx: int) -> None:
        self.log("ends", 1.0, on_step=False, on_epoch=True, reduce_fx="sum", batch_size=1)


@exact
def test_a_save_after_the_optimizer_step_names_what_on_train_batch_end_logs_after_it(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", BatchEndLogging)
    fit(tmp_path / "saving", lambda: BatchEndLogging("save_after_optimizer_step", tmp_path / "in_step.ckpt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = fit(tmp_path / "resumed", BatchEndLogging, ckpt_path=tmp_path / "in_step.ckpt")
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert messages == [
        "BatchEndLogging: resuming epoch 0 at the end of batch 5\n"
        "  got:      a checkpoint saved in batch 5 after its optimizer step and before its on_train_batch_end hooks"
        " ended: what they log for batch 5 is not in it, and the resumed run goes on after batch 5, so these miss"
        " batch 5: 'ends' (on_train_batch_end)\n"
        "  expected: a checkpoint saved before a batch's optimizer step, or after its on_train_batch_end hooks"
        " (ModelCheckpoint saves after every callback's, but before the LightningModule's own)\n"
        "  fix:      log these values in training_step (or a hook before the optimizer step), or save the checkpoint"
        " from the LightningModule's on_train_batch_end after they are logged"
    ]
    assert (float(full.trainer.callback_metrics["ends"]), float(resumed.trainer.callback_metrics["ends"])) == (
        11.0,
        10.0,
    )
    assert_same_params(resumed.module, full.module)  # everything else is exact


class ManualSteps(FaultyTyped):
    """Manual optimization with a scheduler stepped after each optimizer step; saves right after opt.step()."""

    def __init__(self, fault: str | None = None, save_to: Path | None = None) -> None:
        super().__init__(fault, save_to)
        self.automatic_optimization = False

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer: Any = self.optimizers()
        loss = self.log_training(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        if self.fault == "save_after_step" and (self.trainer.current_epoch, batch_idx) == self.fault_at:
            self.trainer.save_checkpoint(self.save_to)
        scheduler: Any = self.lr_schedulers()
        scheduler.step()


@exact
def test_a_save_after_a_manual_optimizer_step_names_what_training_step_does_after_it(tmp_path: Path) -> None:
    full = fit(tmp_path / "full", ManualSteps)
    fit(tmp_path / "saving", lambda: ManualSteps("save_after_step", tmp_path / "in_step.ckpt"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = fit(tmp_path / "resumed", ManualSteps, ckpt_path=tmp_path / "in_step.ckpt")
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert messages == [
        "ManualSteps: resuming epoch 0 at the end of batch 5\n"
        "  got:      a checkpoint saved in batch 5 after an optimizer step inside training_step (manual optimization):"
        " the weights hold that step, so the resumed run goes on after batch 5, and what training_step does after"
        " the save (other optimizers' steps, LR scheduler steps, values it logs) is not in it\n"
        "  expected: a checkpoint saved before a batch's first optimizer step, or between batches\n"
        "  fix:      save from on_train_batch_end or with ModelCheckpoint(every_n_train_steps=...) rather than inside"
        " training_step after opt.step()"
    ]
    full_lr = full.trainer.optimizers[0].param_groups[0]["lr"]
    resumed_lr = resumed.trainer.optimizers[0].param_groups[0]["lr"]
    assert (full_lr, resumed_lr) == (0.1 * 0.5**BATCHES, 0.1 * 0.5 ** (BATCHES - 1))  # batch 5's scheduler step is lost
