"""A plain ``torch.utils.data.DataLoader`` resumed inside an epoch (lightning_step_types/resume/plain_loaders.py).

The fault matrix (``test_fault_matrix_loaders.py``) checks every sampler kind, workers, combined modes and
both ways in against the uninterrupted run. Here, what the matrix's comparison cannot see: that a skipped
batch is never loaded (no ``__getitem__``, no collate), that each batch is loaded by the worker, with the
seed, that loaded it in the uninterrupted run, which warnings come (Lightning's, the library's) and which do
not, and ``check_resume`` on the README's quick-start model.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import RegressorParts, assert_same_params, make_dataset
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from test_readme import _block_with
from test_resume import TypedResume, fit
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler, TensorDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import StepResultWarning, TrainStepResult, TypedLightningModule
from lightning_step_types.check_resume import check_resume

ROWS, BATCH = 20, 2  # 10 batches; ModelCheckpoint(every_n_train_steps=5) saves after batch 4
NOT_RESUMABLE = "your dataloader is not resumable"


def rows() -> TensorDataset:
    x, y = make_dataset(0, ROWS // BATCH, BATCH).tensors
    return TensorDataset(x, y)


def caught_fit(run: Callable[[], Any]) -> tuple[Any, list[str], list[str]]:
    """``run()``'s result, its StepResultWarnings and Lightning's "not resumable" warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run()
    ours = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    lightning = [str(w.message) for w in caught if NOT_RESUMABLE in str(w.message)]
    return result, ours, lightning


def resumed_pair(tmp_path: Path, loader: Callable[[], Any], **kwargs: Any) -> tuple[Any, Any, list[str], list[str]]:
    """The uninterrupted fit (saving after batch 4 of 10) and the fit resumed from that checkpoint."""
    full = fit(tmp_path / "full", TypedResume, every=5, loader=loader, **kwargs)
    checkpoint = tmp_path / "full" / "ckpt" / "step=5.ckpt"
    resumed, ours, lightning = caught_fit(
        lambda: fit(tmp_path / "resumed", TypedResume, loader=loader, ckpt_path=checkpoint, **kwargs)
    )
    return full, resumed, ours, lightning


# --- the warnings ----------------------------------------------------------------------------------


def test_an_exact_resume_keeps_lightning_s_not_resumable_warning_from_the_user(tmp_path: Path) -> None:
    full, resumed, ours, lightning = resumed_pair(
        tmp_path, lambda: DataLoader(rows(), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1))
    )
    assert ours == [] and lightning == []
    assert_same_params(resumed.module, full.module)
    assert resumed.rows == full.rows[-len(resumed.rows) :]


def test_plain_lightning_warns_and_differs_on_the_same_resume(tmp_path: Path) -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(rows(), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1))

    full = fit(tmp_path / "full", lambda: TypedResume(), every=5, loader=loader)
    checkpoint = tmp_path / "full" / "ckpt" / "step=5.ckpt"

    class Plain(TypedResume):
        exact_resume = False

    resumed, ours, lightning = caught_fit(lambda: fit(tmp_path / "resumed", Plain, loader=loader, ckpt_path=checkpoint))
    assert ours == [] and len(lightning) == 1
    assert not torch.equal(resumed.module.net.weight, full.module.net.weight)


class OwnIterators(DataLoader[Any]):
    """A DataLoader that makes its iterators itself: the library cannot start it inside an epoch."""

    def _get_iterator(self) -> Any:
        return super()._get_iterator()


UNPOSITIONED = (
    "TypedResume: resuming epoch 0 at the end of batch 4\n"
    "  got:      a training loader that cannot be started inside an epoch: loader 0"
    " (test_plain_loaders.OwnIterators); Lightning starts it again from its first batch, so the resumed epoch"
    " trains its first batches again and not its last ones\n"
    "  expected: a torch.utils.data.DataLoader (which lightning_step_types resumes at the batch), or a loader"
    " with state_dict() / load_state_dict() such as torchdata's StatefulDataLoader\n"
    "  fix:      build the training data as a DataLoader, or torchdata.stateful_dataloader.StatefulDataLoader"
)


def test_a_loader_the_library_cannot_start_inside_an_epoch_is_named_beside_lightning_s_warning(tmp_path: Path) -> None:
    _, _, ours, lightning = resumed_pair(tmp_path, lambda: OwnIterators(rows(), batch_size=BATCH))
    assert ours == [UNPOSITIONED]
    assert len(lightning) == 1


# --- what a skipped batch costs: nothing loaded ------------------------------------------------------


class Counted(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows that note each index loaded (in the main process)."""

    def __init__(self, loaded: list[int]) -> None:
        self.data, self.loaded = rows(), loaded

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.loaded.append(index)
        return self.data[index]


def test_a_skipped_batch_is_neither_loaded_nor_collated(tmp_path: Path) -> None:
    loaded: dict[str, list[int]] = {"full": [], "resumed": []}
    collated: dict[str, list[int]] = {"full": [], "resumed": []}

    def loader(run: str) -> Callable[[], DataLoader[Any]]:
        def collate(batch: list[Any]) -> Any:
            collated[run].append(len(batch))
            return torch.utils.data.default_collate(batch)

        return lambda: DataLoader(Counted(loaded[run]), batch_size=BATCH, shuffle=True, collate_fn=collate)

    torch.manual_seed(5)
    full = fit(tmp_path / "full", TypedResume, every=5, loader=loader("full"))
    torch.manual_seed(5)
    resumed, ours, _ = caught_fit(
        lambda: fit(
            tmp_path / "resumed",
            TypedResume,
            loader=loader("resumed"),
            ckpt_path=tmp_path / "full" / "ckpt" / "step=5.ckpt",
        )
    )
    assert ours == []
    # the resumed epoch loads the rows of batches 5 to 9 only, in the uninterrupted order, and collates 5 batches
    assert loaded["resumed"] == loaded["full"][5 * BATCH :]
    assert collated["resumed"] == [BATCH] * 5
    assert_same_params(resumed.module, full.module)


# --- the workers -----------------------------------------------------------------------------------

SEEN: list[tuple[int, int, int]] = []  # (batch, worker id, worker seed), as each step saw it


class WorkerRows(Dataset[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Rows with the id and seed of the worker that loaded them; ``noise``: plus ``torch.randn`` noise."""

    def __init__(self, noise: bool = False) -> None:
        self.data, self.noise = rows(), noise

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        info = get_worker_info()
        x, y = self.data[index]
        if self.noise:
            x = x + 0.1 * torch.randn(x.shape)
        worker = torch.tensor(info.id if info is not None else -1)
        return x, y, worker, torch.tensor(info.seed if info is not None else -1)


class WorkerRecorder(RegressorParts, TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.build(0, 0.1)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y, worker, seed = batch
        SEEN.append((batch_idx, int(worker[0]), int(seed[0])))
        return TrainStepResult(loss=torch.nn.functional.mse_loss(self.net(x), y))


def _worker_fits(tmp_path: Path, persistent: bool, noise: bool = False) -> tuple[Any, Any, list[str]]:
    def loader() -> DataLoader[Any]:
        return DataLoader(
            WorkerRows(noise),
            batch_size=BATCH,
            shuffle=True,
            generator=torch.Generator().manual_seed(3),
            num_workers=2,
            persistent_workers=persistent,
        )

    SEEN.clear()
    full = fit(tmp_path / "full", WorkerRecorder, every=13, loader=loader, max_epochs=2)  # epoch 1, after batch 2
    reference = list(SEEN)
    SEEN.clear()
    resumed, ours, _ = caught_fit(
        lambda: fit(
            tmp_path / "resumed",
            WorkerRecorder,
            loader=loader,
            ckpt_path=tmp_path / "full" / "ckpt" / "step=13.ckpt",
            max_epochs=2,
        )
    )
    assert SEEN == reference[13:] and len(SEEN) == 7, (SEEN, reference)
    return full, resumed, ours


@pytest.mark.parametrize("persistent", [False, True], ids=["workers", "persistent workers"])
def test_each_batch_is_loaded_by_the_worker_and_seed_that_loaded_it_uninterrupted(
    tmp_path: Path, persistent: bool
) -> None:
    """Batch n of an epoch goes to worker n % 2, seeded from the uninterrupted run's base seed (with
    persistent workers, the one drawn when the fit's first iterator was made)."""
    full, resumed, ours = _worker_fits(tmp_path, persistent)
    assert ours == []
    assert [worker for _, worker, _ in SEEN] == [1, 0, 1, 0, 1, 0, 1]  # batches 3 to 9 of epoch 1
    assert_same_params(resumed.module, full.module)


WORKER_DRAWS = (
    "WorkerRecorder: resuming epoch 1 at the end of batch 2\n"
    "  got:      a training loader whose worker processes drew at random while they loaded the batches before the"
    " point: loader 0 (torch.utils.data.dataloader.DataLoader, num_workers=2); each worker's random streams"
    " (torch's, numpy's, Python's) start where torch seeds them, and a generator the dataset holds is a copy in"
    " each worker, sent from the main process as the worker starts; no checkpoint holds how far the batches before"
    " the point moved them, and the resumed workers do not load those batches, so their random draws"
    " (augmentation in Dataset.__getitem__) are not the uninterrupted run's\n"
    "  expected: workers that draw nothing at random, or a loader that loads in the main process"
    " (num_workers=0), whose streams the checkpoint holds\n"
    "  fix:      draw the augmentation from a torch.Generator seeded from the sample's index (and the epoch), so"
    " that a batch's draws do not depend on the batches a worker loaded before it; or set num_workers=0"
)


def test_workers_that_drew_at_random_are_named(tmp_path: Path) -> None:
    full, resumed, ours = _worker_fits(tmp_path, persistent=False, noise=True)
    assert ours == [WORKER_DRAWS]
    assert not torch.equal(resumed.module.net.weight, full.module.net.weight)


# --- an IterableDataset replayed ---------------------------------------------------------------------


class NoisyStream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows with noise drawn from torch's global stream as they are read, without a state of its own."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in rows():
            yield x + 0.1 * torch.randn(x.shape), y


REPLAYED = (
    "TypedResume: resuming epoch 0 at the end of batch 4\n"
    "  got:      a training loader over an IterableDataset without a state_dict(), replayed up to the point:"
    " loader 0 (torch.utils.data.dataloader.DataLoader); it draws from the global random streams while it is"
    " iterated in the main process, and the replay draws the batches before the point one after another, where"
    " the uninterrupted run drew them between training steps, so the batches from the point on are not the"
    " uninterrupted run's\n"
    "  expected: an IterableDataset with state_dict() / load_state_dict() (what its iterator needs to go on from a"
    " point), or one that draws from a torch.Generator of its own\n"
    "  fix:      give the dataset state_dict() and load_state_dict() returning and taking its position and its"
    " generator's get_state(), or draw from a torch.Generator the dataset keeps"
)


def test_an_iterable_dataset_drawing_from_the_global_streams_is_named_where_it_is_replayed(tmp_path: Path) -> None:
    _, _, ours, lightning = resumed_pair(tmp_path, lambda: DataLoader(NoisyStream(), batch_size=BATCH))
    assert ours == [REPLAYED]
    assert lightning == []  # Lightning does not warn for a loader without a length


# --- torchdata's StatefulDataLoader, its sampler without a generator ----------------------------------


class DrawsAtTrainStart(Callback):
    """Draws from torch's global stream between the fit's first iterator and its first fetch."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.rand(3)


def test_a_stateful_loader_s_generator_less_sampler_resumes_exactly_where_a_hook_drew_before_its_first_fetch(
    tmp_path: Path,
) -> None:
    """torchdata's restore draws the order again as it makes the iterator; the uninterrupted run drew it at
    the epoch's first fetch, after the fit's start hooks: the restore draws from the streams of that fetch."""

    def loader() -> StatefulDataLoader[Any]:
        data = rows()
        return StatefulDataLoader(data, batch_size=BATCH, sampler=RandomSampler(data))

    saving = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=5, save_top_k=-1, filename="{step}")
    torch.manual_seed(2)
    full = fit(
        tmp_path / "full",
        TypedResume,
        loader=loader,
        callbacks=[saving, DrawsAtTrainStart()],
        enable_checkpointing=True,
    )
    torch.manual_seed(2)
    checkpoint = tmp_path / "ckpt" / "step=5.ckpt"
    resumed, ours, _ = caught_fit(
        lambda: fit(
            tmp_path / "resumed", TypedResume, loader=loader, ckpt_path=checkpoint, callbacks=[DrawsAtTrainStart()]
        )
    )
    assert ours == []
    assert_same_params(resumed.module, full.module)


# --- check_resume on the README's quick-start model -------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_check_resume_reports_exact_on_the_quick_start_model_with_a_shuffled_plain_loader(workers: int) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_quick_start"}
    exec(
        compile(_block_with("class Classifier(TypedLightningModule):\n"), "README.md (quick start)", "exec"), namespace
    )
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 32, generator=generator), torch.randint(0, 2, (64,), generator=generator))
    report = check_resume(
        namespace["Classifier"],
        train_dataloaders=lambda: DataLoader(data, batch_size=8, shuffle=True, num_workers=workers),
        trainer={"max_epochs": 2, "log_every_n_steps": 1},
    )
    assert [point.verdict for point in report.points] == ["exact"] * 5, str(report)
    assert all(point.lightning_warnings == () for point in report.points), str(report)


# --- a generator the dataset holds -------------------------------------------------------------------


class HeldNoise(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows with noise drawn in ``__getitem__`` from a ``torch.Generator`` the dataset holds (no state_dict())."""

    def __init__(self, drawn: list[float]) -> None:
        self.data, self.drawn = rows(), drawn
        self.noise = torch.Generator().manual_seed(7)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data[index]
        noise = torch.randn(x.shape, generator=self.noise)
        self.drawn.append(float(noise[0]))
        return x + 0.1 * noise, y


@pytest.mark.parametrize("checkpoint", ["step=5.ckpt", "step=10.ckpt", "step=15.ckpt"])
def test_a_generator_the_dataset_holds_draws_on_where_the_uninterrupted_run_was(
    checkpoint: str, tmp_path: Path
) -> None:
    """Resumed inside epoch 0, at epoch 1's start (the checkpoint of epoch 0's last batch) and inside epoch 1:
    each batch's noise is the uninterrupted run's (the dataset's generator started from its seed again)."""
    drawn: dict[str, list[float]] = {"full": [], "resumed": []}

    def loader(run: str) -> Callable[[], DataLoader[Any]]:
        return lambda: DataLoader(HeldNoise(drawn[run]), batch_size=BATCH, shuffle=True)

    torch.manual_seed(5)
    full = fit(tmp_path / "full", TypedResume, every=5, loader=loader("full"), max_epochs=2)
    torch.manual_seed(5)
    resumed, ours, _ = caught_fit(
        lambda: fit(
            tmp_path / "resumed",
            TypedResume,
            every=5,
            loader=loader("resumed"),
            ckpt_path=tmp_path / "full" / "ckpt" / checkpoint,
            max_epochs=2,
        )
    )
    assert ours == []
    consumed = int(checkpoint[5:-5]) * BATCH
    assert drawn["resumed"] == drawn["full"][consumed:]
    assert_same_params(resumed.module, full.module)
    # a later checkpoint of the resumed fit resumes the same way
    later = tmp_path / "resumed" / "ckpt" / "step=20.ckpt"
    assert later.exists()
