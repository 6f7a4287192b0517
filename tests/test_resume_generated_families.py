"""Families of failures the generator of setups found in the resume machinery, each in a focused form
beside its shrunk setup (tests/test_generated_regressions.py), both ways in:

1. A relaunch of a finished job (``ckpt_path`` = the checkpoint of the last epoch's end, the same
   ``max_epochs``): Lightning's fit loop returns before its start, so no ``on_train_start`` and no batch.
   The module's attributes, the callbacks' (those their ``on_train_start`` set too) and the logger's views
   come back all the same (they came back empty); one saved inside the epoch ``max_steps`` ended is named.
2. ``LearningRateFinder`` in a resumed fit: it restores its own checkpoint and sets the loops'
   ``restarting`` flags to False, so the fit started the epoch's batches from the first (global step 30 for
   24); exact at every default point of ``check_resume``.
3. ``ModelCheckpoint``'s ``state_dict()`` holds ``current_score``, which its ``load_state_dict()`` does not
   read: the library puts it back itself. The table of such keys is checked against Lightning's own code.
4. ``BatchSizeFinder``, a fault in its trial: ``OnExceptionCheckpoint`` saves the finder's own checkpoint
   (taken before the trial) as the point, the fit's start. The uninterrupted fit went on from the trial's
   draws from torch's stream; the resumed fit's trial draws them again from the streams put back, and then
   the streams were put back a second time, where the finder restored its checkpoint: the shuffled order and
   dropout differed (and a later checkpoint's record of the streams).
5. A sampler that draws its order from its own generator at the first index draw, in a ``StatefulDataLoader``
   resumed inside an epoch: the restore drew the order as the iterator was made, and a later checkpoint
   recorded the generator's state past it as the state after the iterator's making (a second resume from
   that file reads the record only for a sampler that draws as its iterator is made, as torchdata's does).
6. A save in the first epoch's ``on_train_epoch_start``: the epoch's iterator is made again from the streams
   before it.
7. ``ModelCheckpoint(save_last=True)`` writes a top-k file before it sets ``last_model_path`` to the last file:
   a fit resumed from that file found its ``last.ckpt`` "taken" and wrote ``last-v1.ckpt`` from then on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from models import assert_same_params
from pytorch_lightning.callbacks import (
    BatchSizeFinder,
    Callback,
    LearningRateFinder,
    LearningRateMonitor,
    ModelCheckpoint,
)
from test_resume import TypedResume, dataset, no_step_result_warnings
from test_resume import fit as resume_fit
from test_resume_regressions import (
    WAYS,
    PlainPlanned,
    PlannedFault,
    TypedPlanned,
    _data,
    assert_same_fit,
    chain,
    fit,
    planned,
)
from torch.utils.data import RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import StepResultAdapter
from lightning_step_types._lightning.checkpoint_callback import keys_not_loaded
from lightning_step_types.resume.messages import CHECKPOINT_KEY

# --- 1. a relaunch with nothing left to train --------------------------------------------------------------


class CountsBatches(Callback):
    """A user callback counting the batches it saw (no state_dict: its attribute comes back through the library)."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1


def _seen(module: Any) -> dict[str, Any]:
    return {"rows_seen": module.rows_seen, "batches": module.batches}


class _Counting:
    """Counts the rows and batches training_step sees, in plain attributes no checkpoint of Lightning's holds."""

    def count(self) -> None:
        self.rows_seen, self.batches = 0, 0

    def loss(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.rows_seen += len(batch[0])
        self.batches += 1
        return super().loss(batch, batch_idx)  # type: ignore[misc]


class TypedCounting(_Counting, TypedPlanned):
    def __init__(self) -> None:
        super().__init__()
        self.count()


class PlainCounting(_Counting, PlainPlanned):
    def __init__(self) -> None:
        super().__init__()
        self.count()


@pytest.mark.parametrize("way", WAYS)
def test_a_relaunch_of_a_finished_job_ends_as_the_job_ended(way: str, tmp_path: Path) -> None:
    """Relaunched from epoch=1-step=24.ckpt with max_epochs=2: the module's counters, a user callback's, what
    LearningRateMonitor's on_train_start set, ModelCheckpoint's last save and callback_metrics are the job's."""

    def counting() -> Any:
        return TypedCounting() if way == "typed" else PlainCounting()

    def callbacks() -> list[Callback]:
        return [
            ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1),
            CountsBatches(),
            LearningRateMonitor(logging_interval="step"),
        ]

    full = fit(way, tmp_path / "full", counting(), callbacks(), logger=True)
    assert _seen(full.module) == {"rows_seen": 48, "batches": 24}
    relaunched = fit(
        way,
        tmp_path / "full",
        counting(),
        callbacks(),
        logger=True,
        ckpt_path=tmp_path / "ckpt" / "epoch=1-step=24.ckpt",
    )
    assert (relaunched.error, relaunched.warned, relaunched.trainer.global_step) == (None, [], 24)
    assert _seen(relaunched.module) == _seen(full.module)  # both 0 before: nothing ran to put them back
    counting_callback, monitor, checkpoint = (
        next(c for c in relaunched.trainer.callbacks if isinstance(c, kind))
        for kind in (CountsBatches, LearningRateMonitor, ModelCheckpoint)
    )
    full_checkpoint = next(c for c in full.trainer.callbacks if isinstance(c, ModelCheckpoint))
    assert counting_callback.batches == 24  # 0 before
    full_monitor = next(c for c in full.trainer.callbacks if isinstance(c, LearningRateMonitor))
    assert monitor.last_momentum_values == full_monitor.last_momentum_values == {"lr-SGD-momentum": None}  # {} before
    assert (checkpoint._last_global_step_saved, checkpoint._last_checkpoint_saved) == (
        24,
        full_checkpoint._last_checkpoint_saved,
    )  # (0, "") before
    assert torch.equal(relaunched.trainer.callback_metrics["train_loss"], full.trainer.callback_metrics["train_loss"])


@pytest.mark.parametrize("way", WAYS)
def test_a_relaunch_at_max_steps_inside_an_epoch_names_the_epochs_end(way: str, tmp_path: Path) -> None:
    """max_steps=9 ends the fit in epoch 0 (12 batches); the checkpoint saved at step 9 holds the point after
    batch 8; the job then ended the epoch (current_epoch 1). The relaunch runs nothing: named."""

    def callbacks() -> list[Callback]:
        return [ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=9, save_top_k=-1)]

    full = fit(way, tmp_path / "full", planned(way), callbacks(), max_steps=9)
    assert (full.trainer.global_step, full.trainer.current_epoch) == (9, 1)
    relaunched = fit(
        way,
        tmp_path / "again",
        planned(way),
        callbacks(),
        max_steps=9,
        ckpt_path=tmp_path / "ckpt" / "epoch=0-step=9.ckpt",
    )
    assert (relaunched.trainer.global_step, relaunched.trainer.current_epoch) == (9, 0)
    owner = "TypedPlanned" if way == "typed" else "PlainPlanned"
    assert relaunched.warned == [
        f"{owner}: resuming epoch 0 at the end of batch 8\n"
        "  got:      a relaunch with nothing left to train (max_steps reached) from a checkpoint saved inside epoch 0:"
        " after that save the run that saved ended epoch 0 (its on_train_epoch_end hooks, the epoch's logged values,"
        " current_epoch 1), and Lightning runs none of that in a fit with nothing to train\n"
        "  expected: a finished job's checkpoint saved after its last epoch ended\n"
        "  fix:      relaunch from a checkpoint the job saved after trainer.fit returned (trainer.save_checkpoint(path)),"
        " or give the relaunch a larger max_steps: it trains on from the point exactly"
    ]


# --- 2. LearningRateFinder in a resumed fit --------------------------------------------------------------


class _LearningRate:
    """``lr``, which LearningRateFinder sets to its suggestion, read by configure_optimizers."""

    lr = 0.01

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)  # type: ignore[attr-defined]


class TypedLearningRate(_LearningRate, TypedPlanned):
    pass


class PlainLearningRate(_LearningRate, PlainPlanned):
    pass


@pytest.mark.parametrize("way", WAYS)
def test_a_learning_rate_finder_fit_resumes_exactly_at_every_default_point(way: str, tmp_path: Path) -> None:
    """``check_resume`` with ``LearningRateFinder`` in every Trainer: its own checkpoint, restored after its
    trials, leaves the loops restarting from the point it holds and the loaders' states loaded (1 of 5 exact
    before: inside an epoch, the fit trained the epoch's batches from the first again)."""
    from lightning_step_types.check_resume import check_resume

    callbacks: list[Callable[[], Any]] = [lambda: LearningRateFinder(num_training_steps=5)]
    if way == "adapter":
        callbacks.append(StepResultAdapter)
    report = check_resume(
        TypedLearningRate if way == "typed" else PlainLearningRate,
        trainer={"max_epochs": 2},
        callbacks=callbacks,
        root=tmp_path,
    )
    assert [(str(point.point), point.verdict) for point in report.points] == [
        ("inside batch 6 of epoch 0", "exact"),
        ("inside batch 0 of epoch 1", "exact"),
        ("inside batch 11 of epoch 0", "exact"),
        ("at the end of epoch 0", "exact"),
        ("a kill 2 batches after the checkpoint at step 6", "exact"),
    ]


class _ValidatesOnce:
    """A validation loader of its own; ``validation_fault`` (set in ``__init__``) raises in epoch 0's
    on_validation_epoch_end, after the epoch's last batch: the point is that batch's end, its validation to run."""

    validation_fault = False

    def val_dataloader(self) -> StatefulDataLoader[Any]:
        return StatefulDataLoader(_data(), batch_size=6)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y, _ = batch
        getattr(self, "log")("val_loss", torch.nn.functional.mse_loss(getattr(self, "net")(x), y))

    def on_validation_epoch_end(self) -> None:
        trainer: Any = getattr(self, "trainer")
        if self.validation_fault and trainer.current_epoch == 0 and not trainer.sanity_checking:
            raise PlannedFault("planned in epoch 0's on_validation_epoch_end")


class TypedValidatesOnce(_ValidatesOnce, TypedLearningRate):
    pass


class PlainValidatesOnce(_ValidatesOnce, PlainLearningRate):
    pass


@pytest.mark.parametrize("way", WAYS)
def test_a_learning_rate_finder_fit_resumed_at_its_last_batchs_validation_trains_on(way: str, tmp_path: Path) -> None:
    """LearningRateFinder; an exception in epoch 0's on_validation_epoch_end (OnExceptionCheckpoint): the resumed
    fit runs epoch 0's validation again and trains epoch 1 as the uninterrupted one. Its trial left the validation
    loop's ``_has_run`` set, so the restarting epoch, its 12 batches done, ended at once without the validation,
    the epoch loop stayed restarting, and epoch 1 kept those 12 batches done: no batch trained (global step 12)."""

    def module(fault: bool) -> Any:
        made = TypedValidatesOnce() if way == "typed" else PlainValidatesOnce()
        made.validation_fault = fault
        return made

    def callbacks() -> list[Callback]:
        return [LearningRateFinder(num_training_steps=5)]

    full = fit(way, tmp_path / "full", module(False), callbacks())
    interrupted = fit(way, tmp_path / "run", module(True), callbacks())
    assert isinstance(interrupted.error, PlannedFault)
    saved = tmp_path / "saved.ckpt"
    (tmp_path / "run" / "on_exception.ckpt").rename(saved)
    resumed = fit(way, tmp_path / "run", module(False), callbacks(), ckpt_path=saved)
    assert (resumed.error, resumed.warned) == (None, [])
    assert (resumed.trainer.global_step, resumed.trainer.current_epoch) == (24, 2)
    assert_same_fit(resumed, full)
    assert torch.equal(resumed.trainer.callback_metrics["val_loss"], full.trainer.callback_metrics["val_loss"])


# --- 3. the state_dict() keys a Lightning callback's load_state_dict() does not read -----------------------


def test_modelcheckpoints_unread_keys_are_the_ones_its_load_leaves_out(tmp_path: Path) -> None:
    """Every key of ModelCheckpoint's state_dict() whose attribute its load_state_dict() leaves as it was, other
    than its configuration (monitor, dirpath): the library's table of them, read from Lightning's behaviour."""
    saving = ModelCheckpoint(dirpath=tmp_path, monitor="loss")
    for name in saving.state_dict():
        if name not in ("monitor", "dirpath"):
            setattr(
                saving,
                name,
                torch.tensor(7.0)
                if name.endswith(("score", "value"))
                else {"x": 1}
                if name == "best_k_models"
                else "x",
            )
    loading = ModelCheckpoint(dirpath=tmp_path, monitor="loss")
    loading.load_state_dict(saving.state_dict())
    unread = {
        name
        for name, value in saving.state_dict().items()
        if name not in ("monitor", "dirpath") and repr(getattr(loading, name)) != repr(value)
    }
    assert unread == set(keys_not_loaded(loading)) == {"current_score"}


# --- 4. a fault in BatchSizeFinder's trial ------------------------------------------------------------------


def _streams_before_iterator(path: Path) -> torch.Tensor:
    saved = torch.load(path, weights_only=False)[CHECKPOINT_KEY]["epoch_state"]["ranks"][0]
    return saved["random_streams"]["iterator"]["torch"]


@pytest.mark.parametrize("way", WAYS)
def test_a_fault_in_batch_size_finders_trial_resumes_after_the_trials_draws(way: str, tmp_path: Path) -> None:
    """The module plans a fault at epoch 0's batch 0, which the finder's first trial reaches; the resumed fit
    (a fresh module that plans none) finds the same batch size, and goes on from its trial's draws as the
    uninterrupted fit did: the weights, the momentum, and epoch 1's checkpoint, with its record of the streams
    before epoch 1's iterator."""
    folders = iter(("full", "interrupted", "resumed"))

    def callbacks() -> list[Callback]:
        saves = ModelCheckpoint(dirpath=tmp_path / next(folders), save_top_k=-1)
        return [BatchSizeFinder(max_trials=2, steps_per_trial=1), saves]

    full, interrupted, resumed = chain(way, tmp_path, callbacks, (0, 0))
    saved = torch.load(tmp_path / "saved.ckpt", weights_only=False)[CHECKPOINT_KEY]["epoch_state"]
    assert (saved["point"]["kind"], saved["point"]["epoch"]) == ("epoch", 0)
    assert interrupted.module.batch_size == 2  # the trial's fault came before a size was found
    assert resumed.module.batch_size == full.module.batch_size == 4
    assert resumed.warned == []
    assert_same_fit(resumed, full)
    later = "epoch=1-step=12.ckpt"
    assert torch.equal(
        _streams_before_iterator(tmp_path / "resumed" / later), _streams_before_iterator(tmp_path / "full" / later)
    )
    assert saved["before_loop"] is True  # the finder's own save, before its trials: the fit's start


# --- 5. a later checkpoint's record of a sampler's generator, after a resume inside an epoch ----------------


def _shuffled_by_a_generator() -> StatefulDataLoader[Any]:
    """A StatefulDataLoader whose torch RandomSampler draws its order from its own generator as the first
    index is drawn (not as the iterator is made)."""
    rows = dataset(0)
    return StatefulDataLoader(
        rows, batch_size=2, sampler=RandomSampler(rows, generator=torch.Generator().manual_seed(3))
    )


def _sampler_record(path: Path) -> dict[str, torch.Tensor]:
    (rank,) = torch.load(path, weights_only=False)[CHECKPOINT_KEY]["epoch_state"]["ranks"]  # one process
    (loader,) = rank["generators"]["loaders"]
    return dict(loader["sampler"])


def test_a_later_checkpoints_record_of_a_samplers_generator_is_the_uninterrupted_runs(tmp_path: Path) -> None:
    """Resumed from step=4.ckpt (inside epoch 0): step=8.ckpt's record of the sampler's generator, before
    and after epoch 0's iterator was made, is the uninterrupted run's (the resumed iterator's restore had
    drawn the order: the generator's state past it was recorded as the state after the iterator's making)."""
    full = resume_fit(tmp_path / "full", TypedResume, every=4, loader=_shuffled_by_a_generator)
    resumed = no_step_result_warnings(
        lambda: resume_fit(
            tmp_path / "resumed",
            TypedResume,
            loader=_shuffled_by_a_generator,
            every=4,
            ckpt_path=tmp_path / "full" / "ckpt" / "step=4.ckpt",
        )
    )
    assert_same_params(resumed.module, full.module)
    mine, theirs = (
        _sampler_record(root / "ckpt" / "step=8.ckpt") for root in (tmp_path / "resumed", tmp_path / "full")
    )
    assert list(mine) == list(theirs) == ["before", "after", "saved"]
    assert [torch.equal(mine[moment], theirs[moment]) for moment in mine] == [True, True, True]


def test_a_checkpoint_of_format_3_with_the_generators_beside_the_running_state_resumes_exactly(tmp_path: Path) -> None:
    """Format 3 held the generators' states once, beside the running state; format 4 holds each process's own in
    its part. Resumed at epoch 1's start (the file of epoch 0's end), epoch 1's order is drawn from the state its
    record holds, not from where the script seeded the generator (epoch 0's order again): from a format 3
    checkpoint all the same."""

    def at_each_epoch(root: Path) -> dict[str, Any]:
        saving = ModelCheckpoint(dirpath=root / "ckpt", every_n_epochs=1, save_top_k=-1, filename="{epoch}")
        return {"callbacks": [saving], "enable_checkpointing": True, "max_epochs": 2}

    full = resume_fit(
        tmp_path / "full", TypedResume, loader=_shuffled_by_a_generator, **at_each_epoch(tmp_path / "full")
    )
    checkpoint = torch.load(tmp_path / "full" / "ckpt" / "epoch=0.ckpt", weights_only=False)
    ours = checkpoint[CHECKPOINT_KEY]
    assert ours["epoch_state"]["format"] == 4 and "generators" not in ours
    (rank,) = ours["epoch_state"]["ranks"]
    ours["generators"] = rank.pop("generators")  # where format 3 held it
    ours["epoch_state"]["format"] = 3
    torch.save(checkpoint, tmp_path / "format3.ckpt")
    resumed = no_step_result_warnings(
        lambda: resume_fit(
            tmp_path / "resumed",
            TypedResume,
            loader=_shuffled_by_a_generator,
            ckpt_path=tmp_path / "format3.ckpt",
            **at_each_epoch(tmp_path / "resumed"),
        )
    )
    assert_same_params(resumed.module, full.module)


# --- 6. a save in the first epoch's on_train_epoch_start ---------------------------------------------------


class FailsAtTheFirstEpochsStart(Callback):
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.fail and trainer.current_epoch == 0:
            raise PlannedFault("planned in epoch 0's on_train_epoch_start")


@pytest.mark.parametrize("way", WAYS)
def test_a_fault_in_the_first_epochs_start_resumes_on_the_uninterrupted_draws(way: str, tmp_path: Path) -> None:
    """OnExceptionCheckpoint saves in epoch 0's on_train_epoch_start, after `FitLoop.setup_data` made the epoch's
    iterator (a StatefulDataLoader's iterator draws its base seed from torch's stream): the resumed fit makes
    it again from the streams before it (they were the streams after it: dropout drew other masks), and
    epoch 1's checkpoint records the streams before epoch 1's iterator as the uninterrupted run's does."""

    def callbacks(name: str, fail: bool = False) -> list[Callback]:
        return [FailsAtTheFirstEpochsStart(fail), ModelCheckpoint(dirpath=tmp_path / name, save_top_k=-1)]

    full = fit(way, tmp_path / "full", planned(way), callbacks("full"))
    interrupted = fit(way, tmp_path / "run", planned(way), callbacks("interrupted", fail=True))
    assert isinstance(interrupted.error, PlannedFault)
    saved = tmp_path / "run" / "on_exception.ckpt"
    point = torch.load(saved, weights_only=False)[CHECKPOINT_KEY]["epoch_state"]["point"]
    assert (point["kind"], point["epoch"]) == ("epoch", 0)
    resumed = fit(way, tmp_path / "run", planned(way), callbacks("resumed"), ckpt_path=saved)
    assert resumed.warned == []
    assert_same_fit(resumed, full)
    later = "epoch=1-step=24.ckpt"
    assert torch.equal(
        _streams_before_iterator(tmp_path / "resumed" / later), _streams_before_iterator(tmp_path / "full" / later)
    )


# --- 7. ModelCheckpoint's last file after a resume from one of its top-k files ----------------------------


@pytest.mark.parametrize("way", WAYS)
def test_a_resume_from_a_top_k_file_goes_on_writing_the_same_last_file(way: str, tmp_path: Path) -> None:
    """Resumed from epoch=0-step=12.ckpt (written before ModelCheckpoint set last_model_path, which it held as
    ''): the resumed ModelCheckpoint overwrites last.ckpt, as the uninterrupted one does (it wrote last-v1.ckpt,
    and epoch=1-step=24.ckpt held last_model_path '')."""

    def callbacks(name: str) -> list[Callback]:
        return [ModelCheckpoint(dirpath=tmp_path / name, save_top_k=-1, save_last=True)]

    full = fit(way, tmp_path / "full", planned(way), callbacks("full"))
    interrupted = fit(way, tmp_path / "run", planned(way, {"fault": (1, 3)}), callbacks("run"))
    assert isinstance(interrupted.error, PlannedFault)
    resumed = fit(
        way, tmp_path / "run", planned(way), callbacks("run"), ckpt_path=tmp_path / "run" / "epoch=0-step=12.ckpt"
    )
    assert resumed.warned == []
    assert_same_fit(resumed, full)
    checkpoint, full_checkpoint = (
        next(c for c in run.trainer.callbacks if isinstance(c, ModelCheckpoint)) for run in (resumed, full)
    )
    assert checkpoint.last_model_path == str(tmp_path / "run" / "last.ckpt")
    assert full_checkpoint.last_model_path == str(tmp_path / "full" / "last.ckpt")
    files = ["epoch=0-step=12.ckpt", "epoch=1-step=24.ckpt", "last.ckpt"]
    assert sorted(path.name for path in (tmp_path / "run").glob("*.ckpt") if path.name != "on_exception.ckpt") == files
    entries = [
        next(
            state["last_model_path"]
            for key, state in torch.load(root / "epoch=1-step=24.ckpt", weights_only=False)["callbacks"].items()
            if key.startswith("ModelCheckpoint")
        )
        for root in (tmp_path / "run", tmp_path / "full")
    ]
    assert entries == [str(tmp_path / "run" / "last.ckpt"), str(tmp_path / "full" / "last.ckpt")]
