"""A StatefulDataLoader's state read back at a save, instead of before every fetch.

Where the training data comes from one torchdata ``StatefulDataLoader`` loading in the main process,
a checkpoint saved inside a batch gets the loader's state as it was before that batch's fetch by
reading its counters back at the save: nothing is read per batch, but for a dataset's own state
(where it has one), read before each fetch. Several such loaders in a ``CombinedLoader`` are read
back the same way, each from its own count of batches taken after each fetch. Every other stateful
loader (worker processes) has its state read before each fetch. These tests count the reads, and resume fits whose
save lands inside a fetch, with the samplers whose order a generator draws, against the
uninterrupted fit (the samplers draw their order from ``seed + epoch``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from models import TypedRegressor, assert_same_params, make_dataset, trainer_kwargs
from pytorch_lightning import Trainer
from pytorch_lightning.callbacks import OnExceptionCheckpoint
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import Dataset, DistributedSampler, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from lightning_step_types import StepResultWarning, TrainStepResult

BATCH = 2


class CountingLoader(StatefulDataLoader):  # type: ignore[misc]  # torchdata has no py.typed
    """Counts the calls of its ``state_dict()``."""

    reads = 0

    def state_dict(self) -> dict[str, Any]:
        CountingLoader.reads += 1
        return super().state_dict()  # type: ignore[no-any-return]


class Rows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``rows`` samples; at the first sample of batch ``fault_batch`` (as fetched), ``fault`` runs once."""

    def __init__(self, rows: int, fault: Any = None, fault_batch: int = -1) -> None:
        self.x, self.y = make_dataset(0, rows // BATCH, BATCH).tensors
        self.fault, self.fault_batch, self.fetched = fault, fault_batch, 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fetched == self.fault_batch * BATCH and self.fault is not None:
            fault, self.fault = self.fault, None
            fault()
        self.fetched += 1
        return self.x[index], self.y[index]


class ServedRows(Rows):
    """Rows with a state of their own: how many samples they served, which shifts each sample served
    (so a resume that put back the count after the fetch, or none, trains on other values)."""

    def __init__(self, rows: int, fault: Any = None, fault_batch: int = -1) -> None:
        super().__init__(rows, fault, fault_batch)
        self.served = 0

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.served += 1  # before a fault inside the fetch: the state then is not the one before it
        x, y = super().__getitem__(index)
        return x + 0.01 * self.served, y

    def state_dict(self) -> dict[str, int]:
        return {"served": self.served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.served = state["served"]


class ReplayedRows(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows as an iterable without a length or a state of its own: Lightning fetches a batch ahead,
    and torchdata replays the iterator at a load. ``fault`` as in ``Rows``."""

    def __init__(self, rows: int, fault: Any = None, fault_batch: int = -1) -> None:
        self.rows = Rows(rows, fault, fault_batch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in range(len(self.rows)):
            yield self.rows[index]


class IterableRows(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """An iterable with a state of its own (where its next row is); counts the reads of it."""

    reads = 0

    def __init__(self, rows: int) -> None:
        self.x, self.y = make_dataset(0, rows // BATCH, BATCH).tensors
        self.next_index = 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for index in range(self.next_index, len(self.x)):
            self.next_index = index + 1
            yield self.x[index], self.y[index]

    def state_dict(self) -> dict[str, int]:
        IterableRows.reads += 1
        return {"next_index": self.next_index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.next_index = state["next_index"]


def _reads_in_a_fit(tmp_path: Path, rows: int, kind: str) -> int:
    CountingLoader.reads = 0
    data: Any = {"map": Rows, "replayed": ReplayedRows, "own_state": IterableRows}[kind](rows)
    loader = CountingLoader(data, batch_size=BATCH, shuffle=True if kind == "map" else None)
    Trainer(**trainer_kwargs(tmp_path)).fit(TypedRegressor(), loader)
    return CountingLoader.reads


@pytest.mark.parametrize("kind", ["map", "replayed"])
def test_a_loader_without_a_dataset_state_is_not_read_per_batch(tmp_path: Path, kind: str) -> None:
    assert _reads_in_a_fit(tmp_path, 8, kind) == _reads_in_a_fit(tmp_path, 24, kind)


def test_a_dataset_with_a_state_of_its_own_has_only_that_read_before_each_fetch(tmp_path: Path) -> None:
    # the loader's state is not read per batch; the dataset's own (which cannot be read back) is:
    # 8 more batches, 8 more of its reads
    IterableRows.reads = 0
    loader_reads = _reads_in_a_fit(tmp_path, 8, "own_state")
    dataset_reads = IterableRows.reads
    assert _reads_in_a_fit(tmp_path, 24, "own_state") == loader_reads
    assert IterableRows.reads - 2 * dataset_reads == 8


ROWS, FAULT_BATCH = 22, 5  # 11 batches; the fault lands inside the fetch of batch 5


def _loader(sampler: str, rows: int, fault: Any = None, fault_batch: int = FAULT_BATCH) -> StatefulDataLoader[Any]:
    if sampler == "iterable":  # no sampler: the iterable's order, replayed at a load
        return StatefulDataLoader(ReplayedRows(rows, fault, fault_batch), batch_size=BATCH)
    if sampler == "served":  # a dataset with a state of its own, in order
        return StatefulDataLoader(ServedRows(rows, fault, fault_batch), batch_size=BATCH)
    data = Rows(rows, fault, fault_batch)
    if sampler == "distributed":  # torch's sampler, without a state: torchdata skips the samples drawn
        chosen: Any = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3)
    else:  # torchdata's: it counts the samples drawn itself
        chosen = StatefulDistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3)
    return StatefulDataLoader(data, batch_size=BATCH, sampler=chosen)


@pytest.mark.parametrize("sampler", ["distributed", "stateful_distributed", "iterable", "served"])
@pytest.mark.parametrize("how", ["exception", "save"])
def test_a_save_inside_a_fetch_resumes_at_that_batch(tmp_path: Path, sampler: str, how: str) -> None:
    """An exception raised by the dataset inside the fetch (``OnExceptionCheckpoint``), or a save made
    there (as SLURM's requeue signal makes it, at any bytecode): the loader's sampler has drawn the
    batch's indices (an iterable: Lightning fetches one batch ahead, so the fault lands in the step
    before), and the resumed run fetches them again."""
    kwargs = trainer_kwargs(tmp_path, max_epochs=2)
    uninterrupted = TypedRegressor()
    Trainer(**kwargs).fit(uninterrupted, _loader(sampler, ROWS))

    saved = tmp_path / "saved.ckpt"
    on_exception = [OnExceptionCheckpoint(str(tmp_path), filename="saved")] if how == "exception" else []
    trainer = Trainer(**{**kwargs, "enable_checkpointing": bool(on_exception)}, callbacks=on_exception)

    def fault() -> None:
        if how == "exception":
            raise RuntimeError("the dataset failed")
        trainer.save_checkpoint(saved)
        raise RuntimeError("the job is stopped after the save")

    first = TypedRegressor()
    with pytest.raises(RuntimeError, match="the dataset failed" if how == "exception" else "the job is stopped"):
        trainer.fit(first, _loader(sampler, ROWS, fault))
    assert saved.exists()
    resumed = TypedRegressor()
    resumed_trainer = Trainer(**kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepResultWarning)  # nothing is lost: no warning at resume
        resumed_trainer.fit(resumed, _loader(sampler, ROWS), ckpt_path=saved)
    assert resumed_trainer.global_step == 2 * ROWS // BATCH
    assert_same_params(resumed, uninterrupted)


@pytest.mark.parametrize("sampler", ["iterable", "stateful_distributed", "served"])
def test_two_resumes_in_one_epoch_resume_at_their_batches(tmp_path: Path, sampler: str) -> None:
    """A save inside batch 5, a resume, a save inside batch 8 of the same epoch, a resume. torchdata
    replays an iterable without a state at a load and counts the replayed batches again in its state
    (torchdata 0.11.0): the second checkpoint holds the batches this epoch's iterator yielded instead."""
    kwargs = trainer_kwargs(tmp_path, max_epochs=2)
    uninterrupted = TypedRegressor()
    Trainer(**kwargs).fit(uninterrupted, _loader(sampler, ROWS))

    saved: Path | None = None
    # `Rows` counts the samples it serves: the resumed map-style run from batch 5 on, the replayed
    # iterable from the epoch's start
    second = FAULT_BATCH + 3 if sampler == "iterable" else 3
    for part, fault_batch in enumerate([FAULT_BATCH, second]):
        trainer = Trainer(**{**kwargs, "enable_checkpointing": False})
        target = tmp_path / f"part{part}.ckpt"

        def fault(trainer: Trainer = trainer, target: Path = target) -> None:
            trainer.save_checkpoint(target)
            raise RuntimeError("the job is stopped after the save")

        loader = _loader(sampler, ROWS, fault, fault_batch)
        with pytest.raises(RuntimeError, match="the job is stopped"):
            trainer.fit(TypedRegressor(), loader, ckpt_path=saved)
        assert trainer.current_epoch == 0
        saved = target
    resumed = TypedRegressor()
    resumed_trainer = Trainer(**kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StepResultWarning)
        resumed_trainer.fit(resumed, _loader(sampler, ROWS), ckpt_path=saved)
    assert resumed_trainer.global_step == 2 * ROWS // BATCH
    assert_same_params(resumed, uninterrupted)


# --- several loaders in a CombinedLoader -------------------------------------------------------------

COMBINED_BATCHES = {"max_size_cycle": 11, "max_size": 11, "min_size": 7}  # loaders of 11 and 7 batches


class CombinedRegressor(TypedRegressor):
    """``TypedRegressor`` on a `CombinedLoader`'s batches: the sum of the losses of its loaders'
    batches (``max_size``: a loader that ran out gives None)."""

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        losses = [self.loss_and_preds(part)[0] for part in batch.values() if part is not None]
        return TrainStepResult(loss=sum(losses[1:], losses[0]))


class SavingInStep(CombinedRegressor):
    """Saves at its step of batch ``fault_batch`` (after the next batch's fetch: Lightning fetches one
    ahead), then the job stops."""

    def __init__(self, saved: Path, fault_batch: int) -> None:
        super().__init__()
        self.saved, self.fault_batch = saved, fault_batch

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        if batch_idx == self.fault_batch:
            self.trainer.save_checkpoint(self.saved)
            raise RuntimeError("the dataset failed")  # the same message as the other faults'
        return super().training_step(batch, batch_idx)


def combined_loader(
    mode: str, fault: Any = None, fault_batch: int = -1, kind: Any = StatefulDataLoader, sampler: str = "torchdata"
) -> CombinedLoader:
    """Two shuffled loaders, each with a seeded generator of its own: a resume that puts back the
    wrong count, or a loader's order from the wrong pass, trains on other batches. ``sampler``:
    ``"torchdata"`` (``shuffle=True``: torchdata's ``RandomSampler``, which saves its generator's state
    and draws its permutation as its iterator is made) or ``"torch"`` (torch's ``RandomSampler``, which
    has no state: a resumed loader draws its permutation again from the generator as it is then)."""
    first = kind(
        Rows(22, fault, fault_batch), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    short = Rows(14)
    if sampler == "torch":
        order = torch.utils.data.RandomSampler(short, generator=torch.Generator().manual_seed(2))
        second = kind(short, batch_size=BATCH, sampler=order)
    else:
        second = kind(short, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(2))
    return CombinedLoader({"a": first, "b": second}, mode=mode)


@pytest.mark.parametrize("mode", list(COMBINED_BATCHES))
def test_combined_loaders_are_not_read_per_batch(tmp_path: Path, mode: str) -> None:
    def reads(epochs: int) -> int:
        CountingLoader.reads = 0
        kwargs = trainer_kwargs(tmp_path, max_epochs=epochs)
        Trainer(**kwargs).fit(CombinedRegressor(), combined_loader(mode, kind=CountingLoader))
        return CountingLoader.reads

    assert reads(1) == reads(3)  # two more epochs of 7 or 11 batches, no more reads


# The short loader (7 batches) runs out at the fetch of batch 7: max_size_cycle starts it again
# there, max_size stops it; min_size's epoch ends. Faults before, at and after that fetch; for
# max_size_cycle, with each kind of random sampler on the short loader.
_COMBINED_FAULTS = [
    (mode, batch, "torchdata")
    for mode, batches in (("max_size_cycle", (3, 7, 8, 10)), ("max_size", (3, 7, 8, 10)), ("min_size", (3, 6)))
    for batch in batches
] + [("max_size_cycle", batch, "torch") for batch in (3, 7, 8, 10)]


@pytest.mark.parametrize(("mode", "fault_batch", "sampler"), _COMBINED_FAULTS)
@pytest.mark.parametrize("how", ["exception", "save", "step"])
def test_combined_loaders_resume_at_the_faulted_batch(
    tmp_path: Path, mode: str, fault_batch: int, sampler: str, how: str
) -> None:
    """A fault inside the fetch of the first loader's batch ``fault_batch`` (its dataset raises, or
    saves there as SLURM's signal does and the job stops), or a save in that batch's step (with the
    next batch fetched already), resumed against the uninterrupted fit:
    the same parameters after two epochs, from each loader's own position and pass. Where the short
    loader of ``max_size_cycle`` started its second pass before the batch (batches 8 and 10), that
    pass's order was drawn from its generator then: the checkpoint holds the generator's states from
    around that draw, and the resumed run draws the same order."""
    kwargs = trainer_kwargs(tmp_path, max_epochs=2)
    uninterrupted = CombinedRegressor()
    Trainer(**kwargs).fit(uninterrupted, combined_loader(mode, sampler=sampler))

    saved = tmp_path / "saved.ckpt"
    on_exception = [OnExceptionCheckpoint(str(tmp_path), filename="saved")] if how == "exception" else []
    trainer = Trainer(**{**kwargs, "enable_checkpointing": bool(on_exception)}, callbacks=on_exception)

    def fault() -> None:
        if how == "save":
            trainer.save_checkpoint(saved)
        raise RuntimeError("the dataset failed")

    with pytest.raises(RuntimeError, match="the dataset failed"):
        if how == "step":
            trainer.fit(SavingInStep(saved, fault_batch), combined_loader(mode, sampler=sampler))
        else:
            trainer.fit(CombinedRegressor(), combined_loader(mode, fault, fault_batch, sampler=sampler))
    assert trainer.current_epoch == 0
    assert saved.exists()
    resumed = CombinedRegressor()
    resumed_trainer = Trainer(**kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed_trainer.fit(resumed, combined_loader(mode, sampler=sampler), ckpt_path=saved)
    named = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert resumed_trainer.global_step == 2 * COMBINED_BATCHES[mode]
    assert named == []
    assert_same_params(resumed, uninterrupted)


@pytest.mark.parametrize("sampler", ["torchdata", "torch"])
def test_two_resumes_inside_a_new_pass_resume_at_their_batches(tmp_path: Path, sampler: str) -> None:
    """Saved in batch 8 (inside the short loader's second pass), resumed, saved again in batch 10 of
    the resumed run (still in that pass, which the resumed run did not start), resumed again: the
    second checkpoint holds the pass's states the first one put back, and the run is the uninterrupted one."""
    kwargs = trainer_kwargs(tmp_path, max_epochs=2)
    uninterrupted = CombinedRegressor()
    Trainer(**kwargs).fit(uninterrupted, combined_loader("max_size_cycle", sampler=sampler))
    first, second = tmp_path / "first.ckpt", tmp_path / "second.ckpt"
    with pytest.raises(RuntimeError, match="the dataset failed"):
        Trainer(**kwargs).fit(SavingInStep(first, 8), combined_loader("max_size_cycle", sampler=sampler))
    with pytest.raises(RuntimeError, match="the dataset failed"):
        Trainer(**kwargs).fit(
            SavingInStep(second, 10), combined_loader("max_size_cycle", sampler=sampler), ckpt_path=first
        )
    resumed = CombinedRegressor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(**kwargs).fit(resumed, combined_loader("max_size_cycle", sampler=sampler), ckpt_path=second)
    assert [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)] == []
    assert_same_params(resumed, uninterrupted)


def with_workers(dataset: Any, **options: Any) -> StatefulDataLoader:
    """A ``StatefulDataLoader`` loading in one worker process: its state is read before each fetch."""
    return StatefulDataLoader(dataset, num_workers=1, **options)


def test_a_new_pass_of_a_loader_with_workers_is_named(tmp_path: Path) -> None:
    """Loaders with worker processes have their states read before each fetch, and the generators'
    states around a pass that ``max_size_cycle`` starts are not kept there: a resume inside that pass is
    named in one warning, and it is not a false alarm."""
    kwargs = trainer_kwargs(tmp_path, max_epochs=2)
    uninterrupted = CombinedRegressor()
    Trainer(**kwargs).fit(uninterrupted, combined_loader("max_size_cycle", kind=with_workers))
    saved = tmp_path / "saved.ckpt"
    with pytest.raises(RuntimeError, match="the dataset failed"):
        Trainer(**kwargs).fit(SavingInStep(saved, 8), combined_loader("max_size_cycle", kind=with_workers))
    resumed = CombinedRegressor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(**kwargs).fit(resumed, combined_loader("max_size_cycle", kind=with_workers), ckpt_path=saved)
    named = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    # the loaders' workers draw nothing at random: a watch in them sees it, and they are not named
    assert len(named) == 1, named
    assert named[0].startswith("CombinedRegressor: resuming epoch 0 at batch 8\n")
    for part in (
        'CombinedLoader(mode="max_size_cycle"): loader 1 (torchdata.stateful_dataloader.sampler.RandomSampler)',
        "the resumed run draws the pass it resumes in from the generator as it was at the epoch's start",
    ):
        assert part in named[0], named[0]
    assert not torch.equal(resumed.net.weight, uninterrupted.net.weight)  # the warning is not a false alarm
