"""Families of failures the generator of setups found, fixed since (families brief 4): each kept as a shrunk setup,
judged by the oracle as ``tests/test_generated_regressions.py`` judges its own (uninterrupted against
interrupted-and-resumed, each fit in a fresh process). ``Setup(...)`` shows only what differs from the simplest
setup (see that file)."""

from __future__ import annotations

from pathlib import Path

from setups.space import CheckpointSpec, DataSpec, InterruptionSpec, Setup
from test_generated_regressions import resumes_exactly_or_named

# --- an IterableDataset resumed after its epoch's last batch ---------------------------------------------------


def test_an_iterable_dataset_resumed_at_its_epochs_end(tmp_path: Path) -> None:
    """Resumed at epoch 0's end, the fit's first iterator (Lightning's `FitLoop.setup_data`) fetched a batch ahead of
    the loader without a length: the IterableDataset, which keeps its position, moved on, and epoch 1's iterator
    started after that batch (global_step 9 after the resume, 10 uninterrupted). Now that iterator, from which the
    ended epoch trains nothing, fetches nothing. Drawn: setup ci 124."""
    setup = Setup(
        data=DataSpec(dataset="iterable"),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(where="on_train_epoch_end"),
    )
    resumes_exactly_or_named(setup, tmp_path)


def test_a_stateful_loaders_iterable_dataset_resumed_at_its_epochs_end(tmp_path: Path) -> None:
    """The same with torchdata's StatefulDataLoader (its dataset's state loaded before that iterator): the loader's
    iterator is still made there (its state at epoch 0's save, its base seed drawn at epoch 1's iterator, as
    uninterrupted), nothing fetched from it."""
    setup = Setup(
        data=DataSpec(dataset="iterable", loader="stateful"),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(where="on_train_epoch_end"),
    )
    resumes_exactly_or_named(setup, tmp_path)


def test_two_iterable_datasets_resumed_at_the_epochs_end(tmp_path: Path) -> None:
    """Two combined loaders (``max_size_cycle``, which makes a loader that ran out a new iterator and fetches
    again): neither fetched from."""
    setup = Setup(
        data=DataSpec(dataset="iterable", train_loaders=2),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(where="on_train_epoch_end"),
    )
    resumes_exactly_or_named(setup, tmp_path)


# --- loader workers that draw at random, resumed at an epoch's start --------------------------------------------


def test_persistent_workers_drawing_from_torchs_stream_resumed_at_an_epochs_start(tmp_path: Path) -> None:
    """A StatefulDataLoader's persistent workers add noise from torch's global stream; resumed at epoch 1's start
    they start their streams again (the weights differ), and the check that names restarting workers passed over a
    loader whose dataset has a state_dict() (there: its own generator's, which does not hold the workers' streams).
    Now a watch in the workers sees them draw, the checkpoint records it, and the resume names the loader. Drawn:
    setups ci 40 and 92 (shrunk)."""
    setup = Setup(data=DataSpec(loader="stateful", workers=1, persistent=True, augment="torch"))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "warned", verdict.detail


def test_workers_drawing_from_the_datasets_generator_inside_an_epoch_resume_exactly(tmp_path: Path) -> None:
    """The noise from a generator the dataset holds, in its state_dict(): resumed inside the epoch, torchdata loads
    each worker's dataset state, and nothing is named (no false alarm), with or without persistent workers."""
    for persistent in (False, True):
        setup = Setup(
            data=DataSpec(loader="stateful", workers=1, persistent=persistent, augment="held"),
            checkpoint=CheckpointSpec(on_exception=True),
            interruption=InterruptionSpec(at=30),
        )
        verdict = resumes_exactly_or_named(setup, tmp_path / str(persistent))
        assert verdict.outcome == "exact", verdict.detail


def test_persistent_workers_drawing_from_the_datasets_generator_resumed_at_an_epochs_start(tmp_path: Path) -> None:
    """The same generator, persistent workers resumed at epoch 1's start: torchdata loads no state into the new
    workers (a new iterator), whose copies of the generator start where the main process's is, not where the
    uninterrupted workers' had moved to: named."""
    setup = Setup(data=DataSpec(loader="stateful", workers=1, persistent=True, augment="held"))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "warned", verdict.detail


def test_workers_drawing_nothing_are_not_named(tmp_path: Path) -> None:
    """Persistent workers that draw nothing at random, resumed inside an epoch: exact, and no longer named."""
    setup = Setup(
        data=DataSpec(loader="stateful", workers=1, persistent=True),
        checkpoint=CheckpointSpec(on_exception=True),
        interruption=InterruptionSpec(at=30),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact", verdict.detail
