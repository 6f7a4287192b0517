"""Resumes that were exact once and broke, and warnings that fired where nothing differs: each kept as
the smallest setup that showed it, both ways in where the way in matters.

1. Per-rank callback attributes under DDP: a user callback records what its rank saw in its attributes;
   after a fault on rank 1 and a torchrun restart from ``last.ckpt`` each rank gets its own record back
   (rank 1 got rank 0's: the attributes came from the checkpoint's one shared entry).
2. An ``on_train_epoch_start`` that only records is not named at a resume inside the epoch (its
   attributes come back at the point); one that changes what no checkpoint holds is, with what it changed.
3. Nothing of one fit reaches the next in the same process: with ``BatchSizeFinder`` in every Trainer, a
   fit interrupted by a fault its module's configuration plans (a dict set in ``__init__``) and resumed by
   a fresh module that plans none, in the same process, resumes exactly (it raised the planned fault: the
   finder's own checkpoint, saved before the fit's start, counted every attribute as changed, and the
   next checkpoint carried the interrupted module's configuration). And exact at every default point of
   ``check_resume`` (silent differences before: the finder's checkpoint in a resumed fit held a fresh
   optimizer and no loader state).
4. The module's own ``on_save_checkpoint`` is named only where what runs again changes what it saved and
   its ``on_load_checkpoint`` puts that back: a module saving what does not change (as darts' and
   pytorch-forecasting's models do) resumes exactly and silently.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import scaling
import torch
import torch.nn.functional as F
import torchmetrics
from launching import launch, torchrun
from models import assert_same_params
from pytorch_lightning.callbacks import (
    BackboneFinetuning,
    BatchSizeFinder,
    Callback,
    LearningRateMonitor,
    OnExceptionCheckpoint,
)
from pytorch_lightning.loggers import CSVLogger
from test_resume import EXACT
from test_scaling import LIMIT, assert_ok, assert_resumed_exactly
from torch import nn
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import StepResultAdapter, StepResultWarning, TrainStepResult, TypedLightningModule
from lightning_step_types.resume.messages import CHECKPOINT_KEY

pytestmark = pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume")

WAYS = ("typed", "adapter")
ROWS = 24


class PlannedFault(RuntimeError):
    """The fault a module's configuration plans."""


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, 3, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True), torch.arange(ROWS))


class Parts:
    """A regressor with dropout over shuffled rows (sample ids in each batch), SGD with momentum; its
    configuration ``plan`` (set in ``__init__``, never changed) may plan a fault at ``(epoch, batch)``."""

    def build(self, plan: dict[str, Any] | None) -> None:
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.Linear(8, 1))
        self.plan: dict[str, Any] = dict(plan or {})
        self.batch_size = 2  # BatchSizeFinder scales it

    def train_dataloader(self) -> StatefulDataLoader[Any]:
        return StatefulDataLoader(_data(), batch_size=self.batch_size, shuffle=True)

    def loss(self, batch: Any, batch_idx: int) -> torch.Tensor:
        trainer: Any = getattr(self, "trainer")
        if tuple(self.plan.get("fault", ())) == (trainer.current_epoch, batch_idx) and not trainer.sanity_checking:
            raise PlannedFault(f"planned by the module's configuration: {self.plan}")
        x, y, _ = batch
        loss = F.mse_loss(self.net(x), y)
        getattr(self, "log")("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)  # type: ignore[attr-defined]


class TypedPlanned(Parts, TypedLightningModule):
    def __init__(self, plan: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.build(plan)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.loss(batch, batch_idx))


class PlainPlanned(Parts, pl.LightningModule):
    def __init__(self, plan: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.build(plan)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch, batch_idx)


class Fit:
    def __init__(self, trainer: pl.Trainer, module: Any, warned: list[str], error: BaseException | None) -> None:
        self.trainer, self.module, self.warned, self.error = trainer, module, warned, error


def fit(
    way: str,
    root: Path,
    module: Any,
    callbacks: list[Callback],
    ckpt_path: Path | None = None,
    **options: Any,
) -> Fit:
    """One fit in this process (``OnExceptionCheckpoint`` saves in ``root``), with its StepResultWarnings."""
    extra: list[Callback] = [OnExceptionCheckpoint(root)] + ([StepResultAdapter()] if way == "adapter" else [])
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=options.pop("logger", False),
        enable_checkpointing=True,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=[*callbacks, *extra],
        **options,
    )
    error: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(module, ckpt_path=ckpt_path, weights_only=False)  # the loss modules darts saves
        except PlannedFault as fault:
            error = fault
    warned = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    return Fit(trainer, module, warned, error)


def planned(way: str, plan: dict[str, Any] | None = None) -> Any:
    return TypedPlanned(plan) if way == "typed" else PlainPlanned(plan)


def chain(
    way: str, root: Path, callbacks: Callable[[], list[Callback]], fault: tuple[int, int], **options: Any
) -> tuple[Fit, Fit, Fit]:
    """The uninterrupted fit, and in the same process the fit its module's configuration interrupts at
    ``fault`` (``OnExceptionCheckpoint`` saves) and its resume by a fresh module that plans no fault."""
    full = fit(way, root / "full", planned(way), callbacks(), **options)
    assert full.error is None
    interrupted = fit(way, root / "run", planned(way, {"fault": fault}), callbacks(), **options)
    assert isinstance(interrupted.error, PlannedFault)
    saved = root / "saved.ckpt"
    (root / "run" / "on_exception.ckpt").rename(saved)
    resumed = fit(way, root / "run", planned(way), callbacks(), ckpt_path=saved, **options)
    return full, interrupted, resumed


def assert_same_fit(resumed: Fit, full: Fit) -> None:
    assert resumed.error is None, resumed.error
    assert_same_params(resumed.module, full.module)
    for name, optimizer in enumerate(full.trainer.optimizers):
        for key, state in optimizer.state_dict()["state"].items():
            mine = resumed.trainer.optimizers[name].state_dict()["state"][key]
            assert all(torch.equal(state[part], mine[part]) for part in state), (name, key)
    assert resumed.trainer.global_step == full.trainer.global_step
    assert torch.equal(resumed.trainer.callback_metrics["train_loss"], full.trainer.callback_metrics["train_loss"])


# --- 1. per-rank callback attributes under DDP -----------------------------------------------------------

FAULT_ON_RANK_1 = {"kind": "raise", "ranks": [1], "epoch": 1, "batch": 5}


@pytest.mark.slow
def test_each_rank_gets_its_own_callback_attributes_back_after_a_fault_on_one_rank_and_a_torchrun_restart(
    tmp_path: Path,
) -> None:
    """Two processes under torchrun (gloo), a user's callback recording its rank's batches and per-epoch
    sums in its attributes (its on_train_epoch_start only records), a fault on rank 1 in epoch 1's batch 5,
    and torchrun's restart from ``last.ckpt`` (step 20): each rank's record at the end is the uninterrupted
    run's record of that rank, and no warning comes."""
    launcher = torchrun("--nproc-per-node=2", "--max-restarts=1")
    env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # gloo's restarts connect (docs/scaling.md)
    run = {"sampler": "stateful", "ckpt": "last", "rank_record": True}
    full, faulted = tmp_path / "full", tmp_path / "faulted"
    assert_ok(launch(full, [{**run, "root": str(full)}], limit=LIMIT, launcher=launcher, env=env))
    job = launch(
        faulted, [{**run, "root": str(faulted), "fault": FAULT_ON_RANK_1}], limit=LIMIT, launcher=launcher, env=env
    )
    assert_ok(job)
    assert "RuntimeError: simulated fault on rank 1" in job.output
    records = [scaling.record(full, rank)["rank_record"] for rank in (0, 1)]
    assert records[0] != records[1]  # each rank saw batches of its own
    done = [scaling.record(faulted, rank, attempt=1) for rank in (0, 1)]
    assert [record["rank_record"] for record in done] == records
    assert [record["warnings"] for record in done] == [[], []]
    for (record,) in records:
        assert len(record["batches"]) == 3 * 15 and record["epochs_started"] == [0, 1, 2]
    assert_resumed_exactly(faulted, full, attempt=1)
    # last.ckpt when rank 1 failed: step 20, which holds each rank's own record
    saved = torch.load(faulted / "ckpt" / "step=20.ckpt", weights_only=False)[CHECKPOINT_KEY]["epoch_state"]
    assert (saved["point"]["kind"], saved["point"]["epoch"], saved["point"]["batch"]) == ("batch_end", 1, 4)
    own = [state["holders"]["attributes"]["RankRecord"]["batches"] for state in saved["ranks"]]
    assert len(own[0]) == len(own[1]) == 20 and own[0] != own[1]


# --- 2. epoch-start hooks: named only where skipping one leaves something different ------------------------


class RecordsEpochs(Callback):
    """Records, in its attributes, the epochs it started and each epoch's sample ids; nothing else."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.seen: dict[int, list[int]] = {}

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.started.append(int(trainer.current_epoch))
        self.seen[int(trainer.current_epoch)] = []

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen[int(trainer.current_epoch)] += [int(i) for i in batch[2].tolist()]


class Schedule:
    """An object of the user's class that a callback sets up at each epoch's start."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch


class SetsUpAnObject(Callback):
    def __init__(self) -> None:
        self.schedule: Schedule | None = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.schedule = Schedule(int(trainer.current_epoch))


class Backbone(Parts):
    """``BackboneFinetuning``'s module: the first layer is the backbone."""

    def build(self, plan: dict[str, Any] | None) -> None:
        super().build(plan)
        self.backbone = self.net[0]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        trainable = [parameter for parameter in self.parameters() if parameter.requires_grad]  # type: ignore[attr-defined]
        return torch.optim.SGD(trainable, lr=0.01, momentum=0.9)


class TypedBackbone(Backbone, TypedPlanned):
    pass


class PlainBackbone(Backbone, PlainPlanned):
    pass


_EPOCH_START = "a checkpoint saved inside epoch 1: Lightning does not run the on_train_epoch_start hooks again"
_NAMED_HOOKS = "so the resumed run goes on without it: "
# each case's callbacks, and what the one warning at the resume names (None: no warning, an exact resume)
EPOCH_START_CASES: dict[str, tuple[Callable[[], list[Callback]], str | None]] = {
    "records only": (lambda: [RecordsEpochs()], None),
    "BackboneFinetuning unfreezes at epoch 1": (
        lambda: [BackboneFinetuning(unfreeze_backbone_at_epoch=1)],
        f"{_NAMED_HOOKS}BackboneFinetuning.on_train_epoch_start (it changed requires_grad of 2 parameters, the"
        " optimizers' parameter groups)\n",
    ),
    # its row was written by the run that saved, before the save: nothing is lost
    "LearningRateMonitor writes a row at each epoch's start": (
        lambda: [LearningRateMonitor(logging_interval="epoch")],
        None,
    ),
    # named once, by the warning on callback attributes: the epoch-start hook's is not repeated
    "an object of the user's class": (lambda: [SetsUpAnObject()], "SetsUpAnObject.schedule (Schedule)"),
}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("case", list(EPOCH_START_CASES))
def test_an_epoch_start_hook_is_named_only_where_skipping_it_leaves_something_different(
    case: str, way: str, tmp_path: Path
) -> None:
    callbacks, named = EPOCH_START_CASES[case]
    options: dict[str, Any] = {}
    if case.startswith("LearningRateMonitor"):
        options["logger"] = CSVLogger(tmp_path, name="csv")
    if case.startswith("BackboneFinetuning"):
        full = fit(way, tmp_path / "full", _backbone(way), callbacks(), **options)
        run = fit(way, tmp_path / "run", _backbone(way, {"fault": (1, 3)}), callbacks(), **options)
        assert isinstance(run.error, PlannedFault)
        resumed = fit(way, tmp_path / "run", _backbone(way), callbacks(), tmp_path / "run" / "on_exception.ckpt")
    else:
        full, _, resumed = chain(way, tmp_path, callbacks, (1, 3), **options)
    assert resumed.error is None
    if named is None:
        assert resumed.warned == []
        assert_same_fit(resumed, full)
        record, reference = resumed.trainer.callbacks[0], full.trainer.callbacks[0]
        if isinstance(record, RecordsEpochs):
            assert (record.started, record.seen) == (reference.started, reference.seen)  # type: ignore[attr-defined]
            assert record.started == [0, 1]
        return
    (message,) = resumed.warned
    assert message.splitlines()[0].endswith(": resuming epoch 1 at batch 3"), message
    assert named in message, message
    assert (_EPOCH_START in message) is named.startswith(_NAMED_HOOKS), message


def _backbone(way: str, plan: dict[str, Any] | None = None) -> Any:
    return TypedBackbone(plan) if way == "typed" else PlainBackbone(plan)


# --- 3. nothing of one fit reaches the next in the same process --------------------------------------------


@pytest.mark.parametrize("way", WAYS)
def test_an_interrupted_fit_s_configuration_does_not_reach_the_resumed_fit_in_the_same_process(
    way: str, tmp_path: Path
) -> None:
    """``BatchSizeFinder`` in every Trainer; the interrupted fit's module plans a fault at epoch 1's batch 2
    in a dict set in ``__init__``; the resumed fit's fresh module plans none. The resumed fit keeps its own
    configuration, and goes on as the uninterrupted fit did: the batch size found, the weights, the
    optimizer's momentum, the logged epoch value."""
    full, interrupted, resumed = chain(
        way, tmp_path, lambda: [BatchSizeFinder(max_trials=2, steps_per_trial=1)], (1, 2)
    )
    saved = torch.load(tmp_path / "saved.ckpt", weights_only=False)[CHECKPOINT_KEY]["epoch_state"]
    assert "plan" not in saved["ranks"][0]["attributes"]["values"]  # configuration, unchanged in the fit
    assert resumed.module.plan == {} and interrupted.module.plan == {"fault": (1, 2)}
    assert resumed.module.batch_size == full.module.batch_size == 4
    assert resumed.warned == []
    assert_same_fit(resumed, full)


# --- 4. the module's own on_save_checkpoint data -----------------------------------------------------------


class DartsCheckpointHooks:
    """The checkpoint hooks of darts 0.46.1's ``PLForecastingModule``
    (unit8co/darts, darts/models/forecasting/pl_forecasting_module.py): the dtype, the training sample's
    shape, the loss module and the training metrics are saved by reference, and the last three set back."""

    def build(self, plan: dict[str, Any] | None) -> None:
        super().build(plan)  # type: ignore[misc]
        self.train_sample_shape = ((2, 3), (2, 1))
        self.criterion = nn.MSELoss()
        self.train_metrics = torchmetrics.MetricCollection({"mae": torchmetrics.MeanAbsoluteError()})

    def loss(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().loss(batch, batch_idx)  # type: ignore[misc]
        x, y, _ = batch
        self.train_metrics.update(getattr(self, "net")(x).detach(), y)
        return loss

    def on_train_epoch_end(self) -> None:
        getattr(self, "log")("train_mae", self.train_metrics.compute()["mae"])
        self.train_metrics.reset()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["model_dtype"] = getattr(self, "dtype")
        checkpoint["train_sample_shape"] = self.train_sample_shape
        checkpoint["loss_fn"] = self.criterion
        checkpoint["torch_metrics_train"] = self.train_metrics

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        assert checkpoint["model_dtype"] == getattr(self, "dtype")
        self.criterion = checkpoint["loss_fn"]
        self.train_metrics = checkpoint["torch_metrics_train"]


class ForecastingCheckpointHooks:
    """The checkpoint hooks of pytorch-forecasting 1.8.0's ``BaseModel``
    (sktime/pytorch-forecasting, pytorch_forecasting/models/base/_base_model.py): the dataset's parameters,
    ``hparams_name``, and the "special" hyperparameters (the loss module, by reference), set back on load;
    ``training_step`` appends to ``training_step_outputs``."""

    def build(self, plan: dict[str, Any] | None) -> None:
        super().build(plan)  # type: ignore[misc]
        self.dataset_parameters = {"target": "y", "max_encoder_length": 3, "time_varying_known_reals": ["x"]}
        self.loss_module = nn.MSELoss()
        self.hparams_special = ["loss_module"]
        self.training_step_outputs: list[torch.Tensor] = []

    def loss(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().loss(batch, batch_idx)  # type: ignore[misc]
        self.training_step_outputs.append(loss.detach())
        return loss

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["dataset_parameters"] = getattr(self, "dataset_parameters", None)
        checkpoint["hparams_name"] = "kwargs"
        checkpoint["hparams_special"] = {name: getattr(self, name) for name in self.hparams_special}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.dataset_parameters = checkpoint.get("dataset_parameters", None)
        for name, value in checkpoint["hparams_special"].items():
            setattr(self, name, value)


class CountsRows:
    """A counter the batch that runs again changes, saved in on_save_checkpoint and loaded back."""

    def build(self, plan: dict[str, Any] | None) -> None:
        super().build(plan)  # type: ignore[misc]
        self.rows_seen = 0

    def loss(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.rows_seen += len(batch[0])
        return super().loss(batch, batch_idx)  # type: ignore[misc]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rows_seen"] = self.rows_seen

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.rows_seen = checkpoint["rows_seen"]


def _own_data_module(hooks: type, way: str, plan: dict[str, Any] | None = None) -> Any:
    base = TypedPlanned if way == "typed" else PlainPlanned
    return type(f"{hooks.__name__}{base.__name__}", (hooks, base), {})(plan)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("hooks", [DartsCheckpointHooks, ForecastingCheckpointHooks], ids=["darts", "forecasting"])
def test_a_module_saving_what_the_batch_run_again_does_not_change_resumes_exactly_and_silently(
    hooks: type, way: str, tmp_path: Path
) -> None:
    """A fault inside epoch 0's batch 5, after its step's forward: the batch runs again."""
    full = fit(way, tmp_path / "full", _own_data_module(hooks, way), [])
    run = fit(way, tmp_path / "run", _own_data_module(hooks, way, {"fault": (0, 5)}), [])
    assert isinstance(run.error, PlannedFault)
    resumed = fit(way, tmp_path / "run", _own_data_module(hooks, way), [], tmp_path / "run" / "on_exception.ckpt")
    assert resumed.warned == []
    assert_same_fit(resumed, full)
    if hooks is DartsCheckpointHooks:
        assert torch.equal(resumed.trainer.callback_metrics["train_mae"], full.trainer.callback_metrics["train_mae"])
    else:
        assert torch.equal(
            torch.stack(resumed.module.training_step_outputs), torch.stack(full.module.training_step_outputs)
        )


@pytest.mark.parametrize("way", WAYS)
def test_a_counter_the_batch_run_again_changes_and_the_module_loads_back_is_named_with_its_entry(
    way: str, tmp_path: Path
) -> None:
    full = fit(way, tmp_path / "full", _own_data_module(CountsRows, way), [])
    run = fit(way, tmp_path / "run", _own_data_module(CountsRows, way, {"fault": (0, 5)}), [])
    assert isinstance(run.error, PlannedFault)
    resumed = fit(way, tmp_path / "run", _own_data_module(CountsRows, way), [], tmp_path / "run" / "on_exception.ckpt")
    owner = type(resumed.module).__qualname__
    (message,) = resumed.warned
    assert message.splitlines()[:2] == [
        f"{owner}: resuming epoch 0 at batch 5",
        "  got:      a checkpoint saved where the batch it was saved in runs again from its fetch (its training_step"
        f" and hooks), and {owner}.on_save_checkpoint saved the module's own data as it was then, after what runs"
        " again had changed it: its on_load_checkpoint put it back as it was at the save, not at the point, so"
        " what the module counts or collects there counts that part twice:"
        f" {owner}.rows_seen (from checkpoint['rows_seen'])",
    ]
    # what the warning says: batch 5's two rows counted twice, the rest exact
    assert (resumed.module.rows_seen, full.module.rows_seen) == (full.module.rows_seen + 2, 2 * ROWS)
    assert_same_params(resumed.module, full.module)


@pytest.mark.parametrize("way", WAYS)
def test_a_batch_size_finder_fit_resumes_exactly_at_every_default_point(way: str, tmp_path: Path) -> None:
    """``check_resume`` (every fit in this process, as the check runs them) with ``BatchSizeFinder``: its own
    checkpoint, saved in a resumed fit's ``on_fit_start`` and restored after its trials, holds what the
    resumed checkpoint holds (the optimizer's momentum, the loader's and the random streams' states at the
    point), so the fit goes on at the point: exact inside epoch 0, at epoch 1's first batch, at epoch 0's
    end and after a kill (plain Lightning's resume trains from epoch 0 again, with a fresh optimizer)."""
    from lightning_step_types.check_resume import check_resume

    callbacks: list[Callable[[], Any]] = [lambda: BatchSizeFinder(max_trials=2, steps_per_trial=1)]
    if way == "adapter":
        callbacks.append(StepResultAdapter)
    report = check_resume(
        TypedPlanned if way == "typed" else PlainPlanned, trainer={"max_epochs": 2}, callbacks=callbacks, root=tmp_path
    )
    assert [(str(point.point), point.verdict) for point in report.points] == [
        ("inside batch 3 of epoch 0", "exact"),
        ("inside batch 0 of epoch 1", "exact"),
        ("inside batch 5 of epoch 0", "exact"),
        ("at the end of epoch 0", "exact"),
        ("a kill 2 batches after the checkpoint at step 3", "exact"),
    ]
