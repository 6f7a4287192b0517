"""Under the adapter, Lightning behaves as Lightning: each test compares with plain Lightning.

- A checkpoint stays Lightning's checkpoint plus one key: its Lightning entries are the ones a plain
  run writes, and a plain-Lightning resume of it goes exactly as a plain resume of Lightning's own.
- Behaviours Lightning's own test suite pins: the batch counters after an epoch-end save, a fit
  continued with a larger ``max_steps``, ``trainer.fit_loop.restarting`` in a resumed run, a user's
  own replacement of a loop method, one ``set_epoch`` per epoch, ``log_loss`` under
  ``training_step(self, dataloader_iter)``, and Lightning's own non-finite handling.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import Mock, call

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_fabric.utilities.spike import TrainingSpikeException
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.callbacks.spike import SpikeDetection
from pytorch_lightning.loggers import Logger
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]

from lightning_step_types import StepResultError, StepResultWarning, TrainStepResult
from lightning_step_types.pytorch_lightning import StepResultAdapter, TypedLightningModule
from lightning_step_types.resume.epoch_state import CHECKPOINT_KEY

ROWS = 22  # 11 batches of 2


class Rows(Logger):
    """Every row a logger receives: ``(step, {name: value})``."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.rows.append((step, {key: float(value) for key, value in metrics.items()}))

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass


def loader(rows: int = ROWS, stateful: bool = True) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(rows, 3, generator=generator)
    dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))
    return StatefulDataLoader(dataset, batch_size=2) if stateful else DataLoader(dataset, batch_size=2)


class Plain(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(3, 1)
        with torch.no_grad():
            self.net.weight.copy_(torch.tensor([[0.3, -0.2, 0.1]]))
            self.net.bias.fill_(0.05)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def train_dataloader(self) -> DataLoader[Any]:
        return loader()

    def val_dataloader(self) -> DataLoader[Any]:
        return loader(4)


class Typed(Plain, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:  # type: ignore[override]
        return TrainStepResult(super().training_step(batch, batch_idx))


def trainer(root: Path, callbacks: list[pl.Callback], logger: Logger | bool = False, **overrides: Any) -> pl.Trainer:
    kwargs: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
        log_every_n_steps=1,
        val_check_interval=3,
        check_val_every_n_epoch=None,
    )
    kwargs.update(overrides)
    return pl.Trainer(callbacks=callbacks, **kwargs)


class ValidationSteps(pl.Callback):
    """The global step at each validation's start."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.steps.append(trainer.global_step)


def saving_run(root: Path, module: pl.LightningModule, adapter: bool) -> None:
    """A fit that saves mid-epoch (every 4 steps) and in the epoch-end hooks."""
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(dirpath=root, filename="mid-{step}", every_n_train_steps=4, save_top_k=-1),
        ModelCheckpoint(
            dirpath=root, filename="end-{epoch}", every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True
        ),
    ]
    trainer(root, callbacks + ([StepResultAdapter()] if adapter else []), Rows()).fit(module)


def resumed(
    root: Path, checkpoint: Path, adapter: bool = False, module: pl.LightningModule | None = None
) -> dict[str, Any]:
    """What a resumed run ends with (plain Lightning unless ``adapter``)."""
    rows, validations = Rows(), ValidationSteps()
    module = module if module is not None else Plain()
    run = trainer(root, [validations] + ([StepResultAdapter()] if adapter else []), rows)
    run.fit(module, ckpt_path=checkpoint)
    progress = run.fit_loop.epoch_loop.batch_progress
    return {
        "global_step": run.global_step,
        "logger_step": run.fit_loop.epoch_loop._batches_that_stepped,
        "batches_total": progress.total.state_dict(),
        "batches_current": progress.current.state_dict(),
        "validations": validations.steps,
        "rows": rows.rows,
        "weights": {name: p.detach().clone() for name, p in module.named_parameters()},
    }


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    weights_a, weights_b = a.pop("weights"), b.pop("weights")
    assert a == b
    assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)


# --- a checkpoint stays Lightning's checkpoint, plus one key ------------------------------------------

CHECKPOINTS = ["mid-step=4.ckpt", "mid-step=16.ckpt", "end-epoch=0.ckpt", "end-epoch=1.ckpt"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("saved")
    saving_run(root / "plain", Plain(), adapter=False)
    saving_run(root / "adapter", Plain(), adapter=True)
    saving_run(root / "typed", Typed(), adapter=False)
    return root


@pytest.mark.parametrize("way_in", ["adapter", "typed"])
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_library_checkpoint_holds_lightning_s_entries_as_a_plain_run_writes_them(
    saved: Path, name: str, way_in: str
) -> None:
    plain = torch.load(saved / "plain" / name, weights_only=False)
    ours = torch.load(saved / way_in / name, weights_only=False)
    assert set(ours) - set(plain) == {CHECKPOINT_KEY}
    for key in plain:
        if key == "callbacks":  # the ModelCheckpoints' states name their own paths
            assert list(ours[key]) == list(plain[key])
            continue
        assert_equal_entries(ours[key], plain[key], key)


def assert_equal_entries(ours: Any, plain: Any, where: str) -> None:
    if isinstance(plain, dict):
        assert isinstance(ours, dict) and list(ours) == list(plain), where
        for key in plain:
            assert_equal_entries(ours[key], plain[key], f"{where}[{key!r}]")
    elif isinstance(plain, (list, tuple)):
        assert type(ours) is type(plain) and len(ours) == len(plain), where
        for index, (a, b) in enumerate(zip(ours, plain)):
            assert_equal_entries(a, b, f"{where}[{index}]")
    elif isinstance(plain, torch.Tensor):
        assert torch.equal(ours, plain), where
    else:
        assert ours == plain, where


@pytest.mark.parametrize("way_in", ["adapter", "typed"])
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_plain_lightning_resumes_a_library_checkpoint_as_its_own(
    saved: Path, name: str, way_in: str, tmp_path: Path
) -> None:
    # the resumed runs have no adapter: what a user who removes the callback, or a plain tool, gets
    of_plain = resumed(tmp_path / "plain", saved / "plain" / name)
    of_ours = resumed(tmp_path / "ours", saved / way_in / name)
    assert of_plain["rows"]  # the comparison covers logged rows
    assert_same(of_ours, of_plain)


def test_the_library_s_resume_of_an_epoch_end_checkpoint_counts_the_batches_as_lightning(
    saved: Path, tmp_path: Path
) -> None:
    """``val_check_interval=3, check_val_every_n_epoch=None``: validation every 3 batches across epochs.

    Lightning's ``loops/test_loops.py::test_restart_from_last_parity``: after a resume from an epoch's
    end, ``batch_progress.total`` and the validation steps are the uninterrupted run's.
    """
    uninterrupted_validations = ValidationSteps()
    full = trainer(tmp_path / "full", [uninterrupted_validations, StepResultAdapter()])
    full.fit(Plain())
    for name in ("end-epoch=0.ckpt", "end-epoch=1.ckpt"):
        of_plain = resumed(tmp_path / "plain" / name, saved / "plain" / name)
        with_adapter = resumed(tmp_path / "adapter" / name, saved / "adapter" / name, adapter=True)
        assert (
            with_adapter["batches_total"]
            == of_plain["batches_total"]
            == full.fit_loop.epoch_loop.batch_progress.total.state_dict()
        )
        assert with_adapter["validations"] == of_plain["validations"]
        assert with_adapter["validations"] == [
            s for s in uninterrupted_validations.steps if s > int(name[10]) * 11 + 11
        ]
        assert with_adapter["global_step"] == of_plain["global_step"] == full.global_step == 33


# --- a fit stopped by max_steps, continued with more steps --------------------------------------------


class SeenBatches(pl.Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self.seen.append((trainer.current_epoch, batch_idx))


@pytest.mark.parametrize("way_in", ["adapter", "typed"])
def test_a_fit_stopped_by_max_steps_goes_on_inside_its_epoch_with_more_steps(way_in: str, tmp_path: Path) -> None:
    """Lightning's ``models/test_hooks.py::test_trainer_model_hook_system_fit_no_val_and_resume_max_steps``:
    training in chunks of steps, the checkpoint saved by ``ModelCheckpoint`` at the epoch's end. The same
    batches, steps and weights as plain Lightning; a callback's plain attributes as in one uninterrupted fit."""

    def chunks(root: Path, library: bool) -> tuple[SeenBatches, Rows, pl.LightningModule, pl.Trainer]:
        def run(max_steps: int, ckpt_path: Path | None) -> tuple[SeenBatches, Rows, pl.LightningModule, pl.Trainer]:
            seen, rows = SeenBatches(), Rows()
            module = Typed() if library and way_in == "typed" else Plain()
            callbacks: list[pl.Callback] = [seen, ModelCheckpoint(dirpath=root, filename="last")]
            callbacks += [StepResultAdapter()] if library and way_in == "adapter" else []
            run = trainer(
                root,
                callbacks,
                rows,
                max_steps=max_steps,
                max_epochs=None,
                limit_val_batches=0,
                val_check_interval=None,
                check_val_every_n_epoch=1,
            )
            run.fit(module, ckpt_path=ckpt_path)
            return seen, rows, module, run

        run(1, None)
        return run(3, root / "last.ckpt")

    plain_seen, plain_rows, plain_module, plain_run = chunks(tmp_path / "plain", library=False)
    seen, rows, module, run = chunks(tmp_path / "ours", library=True)
    # the batches a fit trains are Lightning's; the callback's list, an attribute that changed in the first
    # fit, is put back as it was at the checkpoint, so it holds what the uninterrupted 3-step fit's holds
    assert plain_seen.seen == [(0, 1), (0, 2)]
    assert seen.seen == [(0, 0), (0, 1), (0, 2)]
    assert [step for step, _ in rows.rows] == [step for step, _ in plain_rows.rows]
    assert run.global_step == plain_run.global_step == 3
    assert (
        run.fit_loop.epoch_loop.batch_progress.total.state_dict()
        == plain_run.fit_loop.epoch_loop.batch_progress.total.state_dict()
    )
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), plain_module.parameters()))


# --- trainer.fit_loop.restarting ------------------------------------------------------------------------


class Fault(Exception):
    pass


class RecordsRestarting(Plain):
    def __init__(self, fail_at: int | None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.restarting: list[tuple[str, int, bool]] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.restarting.append(("training_step", batch_idx, self.trainer.fit_loop.restarting))
        if batch_idx == self.fail_at:
            raise Fault
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        self.restarting.append(("on_train_epoch_end", -1, self.trainer.fit_loop.restarting))


@pytest.mark.parametrize("adapter", [False, True])
def test_fit_loop_restarting_reads_as_in_plain_lightning_through_the_resumed_epoch(
    adapter: bool, tmp_path: Path
) -> None:
    """Lightning's ``core/test_metric_result_integration.py::test_result_collection_reload`` branches on it."""
    from pytorch_lightning.callbacks import OnExceptionCheckpoint

    extra = [StepResultAdapter()] if adapter else []
    with pytest.raises(Fault):
        trainer(tmp_path, [OnExceptionCheckpoint(tmp_path), *extra], max_epochs=2, limit_val_batches=0).fit(
            RecordsRestarting(5)
        )
    module = RecordsRestarting(None)
    trainer(tmp_path, extra, max_epochs=2, limit_val_batches=0).fit(module, ckpt_path=tmp_path / "on_exception.ckpt")
    # plain Lightning counts the batch in flight at the save as done: its resumed epoch ends a batch early
    end = 11 if adapter else 10
    epoch_0 = [
        (hook, batch, True)
        for hook, batch in [*(("training_step", b) for b in range(5, end)), ("on_train_epoch_end", -1)]
    ]
    epoch_1 = [
        (hook, batch, False) for hook, batch in [*(("training_step", b) for b in range(11)), ("on_train_epoch_end", -1)]
    ]
    # the library's checkpoint also holds the module's own list as it was at batch 5's start
    restored = [("training_step", batch, False) for batch in range(5)] if adapter else []
    assert module.restarting == restored + epoch_0 + epoch_1


@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_the_resumed_epoch_steps_its_lr_scheduler_as_the_uninterrupted_run(interval: str, tmp_path: Path) -> None:
    """``restarting`` stays set through the resumed epoch's hooks, yet the epoch-end scheduler update
    that plain Lightning skips while it is set is made, as in the uninterrupted run."""
    from pytorch_lightning.callbacks import OnExceptionCheckpoint

    class Scheduled(RecordsRestarting):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": interval}}

    full = Scheduled(None)
    trainer(tmp_path / "full", [StepResultAdapter()], max_epochs=2, limit_val_batches=0).fit(full)
    with pytest.raises(Fault):
        trainer(
            tmp_path, [OnExceptionCheckpoint(tmp_path), StepResultAdapter()], max_epochs=2, limit_val_batches=0
        ).fit(Scheduled(5))
    module = Scheduled(None)
    run = trainer(tmp_path, [StepResultAdapter()], max_epochs=2, limit_val_batches=0)
    run.fit(module, ckpt_path=tmp_path / "on_exception.ckpt")
    assert run.lr_scheduler_configs[0].scheduler.last_epoch == (2 if interval == "epoch" else 22)
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), full.parameters()))


# --- a user's own replacement of a loop method ------------------------------------------------------------


def test_a_user_s_replacement_of_a_loop_method_survives_the_fit(tmp_path: Path) -> None:
    """Lightning's ``loops/test_training_epoch_loop.py::test_should_stop_triggers_validation_once``."""
    run = trainer(tmp_path, [StepResultAdapter()], max_epochs=2, val_check_interval=None, check_val_every_n_epoch=1)
    replaced = Mock()
    run.fit_loop.epoch_loop.val_loop.run = replaced
    run.fit(Plain())
    assert run.fit_loop.epoch_loop.val_loop.run is replaced
    assert replaced.call_count == 2  # once per epoch, through the library's wrapper
    assert "run" in vars(run.fit_loop.epoch_loop.val_loop) and "advance" not in vars(run.fit_loop.epoch_loop)


# --- set_epoch on the training sampler ---------------------------------------------------------------------


def test_the_training_sampler_s_set_epoch_is_called_once_per_epoch(tmp_path: Path) -> None:
    """Lightning's ``loops/test_evaluation_loop.py::test_evaluation_loop_sampler_set_epoch_called``."""

    def calls(adapter: bool) -> list[Any]:
        dataset = TensorDataset(torch.randn(4, 3), torch.randn(4, 1))
        sampler = RandomSampler(dataset)
        sampler.set_epoch = Mock()  # type: ignore[attr-defined]
        run = trainer(
            tmp_path,
            [StepResultAdapter()] if adapter else [],
            max_epochs=2,
            limit_val_batches=0,
            val_check_interval=None,
            check_val_every_n_epoch=1,
        )
        run.fit(Plain(), train_dataloaders=DataLoader(dataset, sampler=sampler, batch_size=2))
        return list(sampler.set_epoch.mock_calls)  # type: ignore[attr-defined]

    assert calls(adapter=True) == calls(adapter=False) == [call(0), call(1)]


# --- log_loss under training_step(self, dataloader_iter) -------------------------------------------------------


class FetchesItsBatches(Plain):
    def __init__(self, logs_itself: bool = False) -> None:
        super().__init__()
        self.logs_itself = logs_itself

    def training_step(self, dataloader_iter: Iterator[Any]) -> Any:  # type: ignore[override]
        batch, _, _ = next(dataloader_iter)
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        if self.logs_itself:  # what a user writes by hand
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(x))
        return loss


def test_log_loss_under_dataloader_iter_logs_with_the_fetched_batch_s_size(tmp_path: Path) -> None:
    """Lightning's ``loops/test_fetchers.py`` with ``log_loss=True``: Lightning demands a batch size there."""

    def fit(module: FetchesItsBatches, callbacks: list[pl.Callback]) -> tuple[list[Any], dict[str, torch.Tensor]]:
        rows = Rows()
        run = trainer(tmp_path, callbacks, rows, max_epochs=1, limit_val_batches=0)
        run.fit(module, train_dataloaders=loader(rows=ROWS - 1))  # the last batch holds one row
        return rows.rows, dict(run.callback_metrics)

    by_hand = fit(FetchesItsBatches(logs_itself=True), [])
    by_log_loss = fit(FetchesItsBatches(), [StepResultAdapter(log_loss=True)])
    assert by_log_loss == by_hand
    assert "train_loss_epoch" in by_hand[1]


def test_log_loss_under_dataloader_iter_names_the_fix_where_the_batch_has_no_size(tmp_path: Path) -> None:
    class NoTensors(FetchesItsBatches):
        def training_step(self, dataloader_iter: Iterator[Any]) -> Any:  # type: ignore[override]
            next(dataloader_iter)
            return self.net(torch.ones(2, 3)).mean()

    words = DataLoader(["a", "b", "c", "d"], batch_size=2)
    run = trainer(tmp_path, [StepResultAdapter(log_loss=True)], max_epochs=1, limit_val_batches=0)
    with pytest.raises(StepResultError) as raised:
        run.fit(NoTensors(), train_dataloaders=words)
    assert raised.value.hook is not None and raised.value.hook.endswith("NoTensors.training_step")
    assert raised.value.where == "log_loss"
    assert "takes `dataloader_iter`" in raised.value.got
    assert "TrainStepResult(loss, batch_size=n)" in raised.value.fix


def test_log_loss_under_dataloader_iter_takes_the_result_s_batch_size(tmp_path: Path) -> None:
    class TypedFetches(TypedLightningModule, FetchesItsBatches):
        def training_step(self, dataloader_iter: Iterator[Any]) -> TrainStepResult:  # type: ignore[override]
            batch, _, _ = next(dataloader_iter)
            x, y = batch
            return TrainStepResult(F.mse_loss(self.net(x), y), batch_size=len(x))

    module = TypedFetches()
    module.log_loss = True
    run = trainer(tmp_path, [], max_epochs=1, limit_val_batches=0)
    run.fit(module)
    reference = trainer(tmp_path, [], max_epochs=1, limit_val_batches=0)
    reference.fit(FetchesItsBatches(logs_itself=True))
    assert torch.equal(run.callback_metrics["train_loss_epoch"], reference.callback_metrics["train_loss_epoch"])


# --- Lightning's own non-finite handling -----------------------------------------------------------------------


class NanAtBatch2(Plain):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if batch_idx == 2 else loss


class TypedNanAtBatch2(TypedLightningModule, NanAtBatch2):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:  # type: ignore[override]
        return TrainStepResult(super().training_step(batch, batch_idx))


class ExplicitRaise(TypedNanAtBatch2):
    nonfinite_loss = "raise"


def raised_by(
    module: pl.LightningModule, callbacks: list[pl.Callback], tmp_path: Path, **overrides: Any
) -> BaseException:
    run = trainer(tmp_path, callbacks, max_epochs=1, limit_val_batches=0, **overrides)
    with pytest.raises(Exception) as raised:
        run.fit(module)
    return raised.value


@pytest.mark.parametrize("module", [NanAtBatch2, TypedNanAtBatch2])
@pytest.mark.parametrize("lightning_s", ["SpikeDetection", "detect_anomaly"])
def test_the_default_nonfinite_check_steps_aside_for_lightning_s_own(
    lightning_s: str, module: type[pl.LightningModule], tmp_path: Path
) -> None:
    """``callbacks/test_spike.py`` and ``trainer/test_trainer.py::test_detect_anomaly_nan``."""
    overrides: dict[str, Any] = {"detect_anomaly": True} if lightning_s == "detect_anomaly" else {}
    own: list[pl.Callback] = [SpikeDetection()] if lightning_s == "SpikeDetection" else []
    plain = raised_by(NanAtBatch2(), own, tmp_path / "plain", **overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepResultWarning)  # "warn", the adapter's default, stepped aside too
        ours = raised_by(module(), [*own, StepResultAdapter()], tmp_path / "ours", **overrides)
    assert type(ours) is type(plain) and str(ours) == str(plain)
    assert type(plain) is (TrainingSpikeException if lightning_s == "SpikeDetection" else RuntimeError)


@pytest.mark.parametrize("lightning_s", ["SpikeDetection", "detect_anomaly"])
def test_an_explicit_nonfinite_loss_wins_over_lightning_s_own(lightning_s: str, tmp_path: Path) -> None:
    overrides: dict[str, Any] = {"detect_anomaly": True} if lightning_s == "detect_anomaly" else {}
    own: list[pl.Callback] = [SpikeDetection()] if lightning_s == "SpikeDetection" else []
    for module, adapter in (
        (NanAtBatch2(), StepResultAdapter(nonfinite_loss="raise")),
        (ExplicitRaise(), StepResultAdapter()),
    ):
        raised = raised_by(module, [*own, adapter], tmp_path, **overrides)
        assert isinstance(raised, StepResultError) and "nonfinite_loss='raise'" in raised.expected


def test_without_lightning_s_own_handling_the_typed_default_still_raises(tmp_path: Path) -> None:
    raised = raised_by(TypedNanAtBatch2(), [StepResultAdapter()], tmp_path)
    assert isinstance(raised, StepResultError) and "nonfinite_loss='raise'" in raised.expected


def test_without_lightning_s_own_handling_the_adapter_s_default_warns_and_trains_on(tmp_path: Path) -> None:
    run = trainer(tmp_path, [StepResultAdapter()], max_epochs=1, limit_val_batches=0)
    with pytest.warns(StepResultWarning) as caught:
        run.fit(NanAtBatch2())
    ours = [str(w.message).split("\n")[0] for w in caught if w.category is StepResultWarning]
    assert ours == ["NanAtBatch2.training_step: return value"]
    assert run.global_step == ROWS // 2


# --- a resume inside a validation --------------------------------------------------------------------------


class FailsInValidation(Plain):
    def __init__(self, fail: bool) -> None:
        super().__init__()
        self.fail = fail

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        if self.fail and self.trainer.global_step == 6 and batch_idx == 1:
            raise Fault
        super().validation_step(batch, batch_idx)


def test_a_validation_run_again_from_its_start_counts_its_batches_once(tmp_path: Path) -> None:
    """Lightning's ``loops/test_loops.py::test_fit_can_fail_during_validation``: the library resumes by running
    the interrupted validation again, and its counters end as the uninterrupted run's (plain Lightning's
    resume counts the failed batch as well: ``total.ready`` one higher)."""
    from pytorch_lightning.callbacks import OnExceptionCheckpoint

    def validation_progress(run: pl.Trainer) -> dict[str, Any]:
        return run.fit_loop.state_dict()["epoch_loop.val_loop.batch_progress"]

    full = trainer(tmp_path / "full", [StepResultAdapter()], max_epochs=1)
    full.fit(FailsInValidation(fail=False))
    with pytest.raises(Fault):
        trainer(tmp_path, [OnExceptionCheckpoint(tmp_path), StepResultAdapter()], max_epochs=1).fit(
            FailsInValidation(fail=True)
        )
    saved = torch.load(tmp_path / "on_exception.ckpt", weights_only=False)
    assert saved["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]["current"]["ready"] == 2  # Lightning's own
    resumed = trainer(tmp_path / "resumed", [StepResultAdapter()], max_epochs=1)
    resumed.fit(FailsInValidation(fail=False), ckpt_path=tmp_path / "on_exception.ckpt")
    assert validation_progress(resumed) == validation_progress(full)
    assert validation_progress(full)["total"] == dict.fromkeys(("ready", "completed", "started", "processed"), 6)
