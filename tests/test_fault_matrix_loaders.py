"""The fault-injection matrix with the training loader as a dimension: a plain ``DataLoader`` or torchdata's
``StatefulDataLoader``.

The harness and the outcome rule are ``fault_matrix``'s (``run_cell``: the uninterrupted fit against the
interrupted, resumed chain, every value and every logged row). ``LoaderLoop`` adds its dimensions:

- **the loader**: ``plain`` (``torch.utils.data.DataLoader``) or ``stateful`` (``StatefulDataLoader``,
  the same arguments);
- **the order**, each sampler and batch sampler a user passes (``ORDERS``): none (sequential);
  torch's ``RandomSampler`` without a generator and with one; ``WeightedRandomSampler`` and
  ``SubsetRandomSampler`` without one; a sampler and a batch sampler of the user's own that shuffle from
  torch's global stream, each without and with a ``state_dict()`` (torchdata's convention: their position in
  the epoch); an ``IterableDataset`` without and with a ``state_dict()`` of its own;
- **the workers**: ``num_workers`` 0 or 2 (``2p``: with ``persistent_workers=True``);
- **both ways in** (the typed module, ``StepResultAdapter()``) and **both origins of a checkpoint**: an
  exception, saved by ``OnExceptionCheckpoint``, and ``ModelCheckpoint(every_n_train_steps=...)`` with the
  job killed two batches later; more points in the pairwise part (inside epoch 1, its first batch, a save
  at its start);
- in the pairwise part also ``drop_last=True`` (the last, partial batch dropped: 10 batches), where the
  loader comes from (given to ``fit``, a ``LightningDataModule``, or one made anew each epoch with
  ``reload_dataloaders_every_n_epochs=1``, its rows depending on the epoch), and several loaders combined
  by Lightning (``CombinedLoader`` in ``max_size_cycle``, ``max_size`` and ``min_size``: the cell's loader
  of 11 batches with a shuffled one of 7).

The full product of loader x order x workers (0, 2) x way in x origin (176 cells), and an all-pairs design
over every dimension (``fault_matrix.pairwise``, a fixed seed). Each cell is exact (a ``StatefulDataLoader``'s
workers start their random streams again inside an epoch, or at any point with persistent workers, but these
draw nothing, which a watch in the workers sees: ``random_streams``, nothing named). Two ranks under DDP, with the sampler Lightning puts in:
``test_resume_ddp_samplers.py``. ``python tests/test_fault_matrix_loaders.py --table`` writes the table
docs/resume.md holds (a test checks it).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from fault_matrix import (
    BATCH,
    ROWS,
    SECOND_LOADER_ROWS,
    Cell,
    Fault,
    Faults,
    IterableRows,
    Loop,
    MapRows,
    Outcome,
    counts,
    named_cells_table,
    pairwise,
    run_cell,
)
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import (
    DataLoader,
    IterableDataset,
    RandomSampler,
    Sampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torchdata.stateful_dataloader import StatefulDataLoader

LOADERS = ("plain", "stateful")
ORDERS = (
    "sequential",  # no sampler: torch's SequentialSampler
    "random",  # RandomSampler(ds): no generator, torch's global stream
    "random_generator",  # RandomSampler(ds, generator=g)
    "weighted",  # WeightedRandomSampler(weights, n): no generator
    "subset",  # SubsetRandomSampler(indices): no generator
    "user_sampler",  # a Sampler of the user's own, shuffling from torch's global stream
    "user_sampler_state",  # ... with state_dict() / load_state_dict() (its position in the epoch)
    "user_batch_sampler",  # a batch sampler of the user's own, shuffling from torch's global stream
    "user_batch_sampler_state",  # ... with state_dict() / load_state_dict()
    "iterable",  # an IterableDataset without a state of its own
    "iterable_state",  # an IterableDataset with state_dict() / load_state_dict()
)
ITERABLE = ("iterable", "iterable_state")
ORDER_SHOWN = {
    "sequential": "none (sequential)",
    "random": "`RandomSampler(ds)`, no generator",
    "random_generator": "`RandomSampler(ds, generator=g)`",
    "weighted": "`WeightedRandomSampler(weights, n)`, no generator",
    "subset": "`SubsetRandomSampler(indices)`, no generator",
    "user_sampler": "a `Sampler` of the user's own (torch's global stream)",
    "user_sampler_state": "... with `state_dict()` (its position)",
    "user_batch_sampler": "`batch_sampler=` the user's own (torch's global stream)",
    "user_batch_sampler_state": "... with `state_dict()` (its position)",
    "iterable": "an `IterableDataset`, no `state_dict()`",
    "iterable_state": "an `IterableDataset` with `state_dict()`",
}
WORKERS = ("0", "2", "2p")  # 2p: persistent_workers=True
SOURCES = ("fit", "datamodule", "reload")
MODES = ("one", "max_size_cycle", "max_size", "min_size")


class UserSampler(Sampler[int]):
    """A sampler of the user's own: a permutation from torch's global stream, drawn as its iteration starts."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.rows).tolist())


class UserSamplerWithState(Sampler[int]):
    """... with a ``state_dict()`` as torchdata's samplers have one: how far into the epoch it is, and a
    loaded state makes its next iteration go on from there."""

    def __init__(self, rows: int) -> None:
        self.rows, self.yielded, self.resume_at = rows, 0, 0

    def __len__(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.rows).tolist()
        start, self.resume_at = self.resume_at, 0
        self.yielded = start
        for index in order[start:]:
            self.yielded += 1
            yield index

    def state_dict(self) -> dict[str, int]:
        return {"yielded": self.yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.resume_at = state["yielded"]


class UserBatches(Sampler[list[int]]):
    """A batch sampler of the user's own: the rows shuffled from torch's global stream, cut into batches."""

    def __init__(self, rows: int, batch: int, drop_last: bool) -> None:
        self.rows, self.batch, self.drop_last = rows, batch, drop_last

    def __len__(self) -> int:
        return self.rows // self.batch if self.drop_last else math.ceil(self.rows / self.batch)

    def __iter__(self) -> Iterator[list[int]]:
        order = torch.randperm(self.rows).tolist()
        for start in range(0, len(self) * self.batch, self.batch):
            yield order[start : start + self.batch]


class UserBatchesWithState(UserBatches):
    """... with a ``state_dict()``: the batches it yielded this epoch."""

    def __init__(self, rows: int, batch: int, drop_last: bool) -> None:
        super().__init__(rows, batch, drop_last)
        self.yielded, self.resume_at = 0, 0

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(super().__iter__())
        start, self.resume_at = self.resume_at, 0
        self.yielded = start
        for batch in batches[start:]:
            self.yielded += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"yielded": self.yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.resume_at = state["yielded"]


class Rows(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """The harness's rows as an iterable without a length or a state of its own."""

    def __init__(self, seed: int) -> None:
        self.rows = MapRows(ROWS, seed, None)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (self.rows[index] for index in range(len(self.rows)))


@dataclass(frozen=True)
class LoaderLoop(Loop):
    """``Loop`` whose training data is the cell's loader (see the module docstring)."""

    loader: str = "plain"
    order: str = "random"
    workers: str = "0"
    drop_last: bool = False
    source: str = "fit"
    mode: str = "one"

    @property
    def batches(self) -> int:
        if self.mode == "min_size":
            return math.ceil(SECOND_LOADER_ROWS / BATCH)
        return ROWS // BATCH if self.drop_last else super().batches

    @property
    def trainer_kwargs(self) -> dict[str, Any]:
        return {"reload_dataloaders_every_n_epochs": 1} if self.source == "reload" else {}

    def make(self, seed: int, faults: Faults | None) -> Any:
        """The cell's loader over the rows of ``seed`` (``faults``: where a fault in the fetch can land)."""
        make: Any = StatefulDataLoader if self.loader == "stateful" else DataLoader
        workers = int(self.workers[0])
        options: dict[str, Any] = dict(num_workers=workers, persistent_workers=self.workers == "2p")
        batching: dict[str, Any] = dict(batch_size=BATCH, drop_last=self.drop_last)
        torch.manual_seed(3)  # the same global stream at each fit's start: the samplers without a generator
        if self.order == "iterable":
            return make(Rows(seed), **batching, **options)
        if self.order == "iterable_state":
            return make(IterableRows(ROWS, seed, None), **batching, **options)
        data = MapRows(ROWS, seed, faults if workers == 0 else None)
        if self.order == "shuffle":  # DataLoader(shuffle=True): torch's RandomSampler, no generator
            return make(data, shuffle=True, **batching, **options)
        if self.order == "shuffle_generator":
            return make(data, shuffle=True, generator=torch.Generator().manual_seed(7), **batching, **options)
        if self.order == "user_batch_sampler":
            return make(data, batch_sampler=UserBatches(ROWS, BATCH, self.drop_last), **options)
        if self.order == "user_batch_sampler_state":
            return make(data, batch_sampler=UserBatchesWithState(ROWS, BATCH, self.drop_last), **options)
        samplers: dict[str, Any] = {
            "sequential": lambda: None,
            "random": lambda: RandomSampler(data),
            "random_generator": lambda: RandomSampler(data, generator=torch.Generator().manual_seed(7)),
            "weighted": lambda: WeightedRandomSampler(torch.linspace(1, 2, ROWS), ROWS),
            "subset": lambda: SubsetRandomSampler(range(ROWS)),
            "user_sampler": lambda: UserSampler(ROWS),
            "user_sampler_state": lambda: UserSamplerWithState(ROWS),
        }
        return make(data, sampler=samplers[self.order](), **batching, **options)

    def train_data(self, seed: int, faults: Faults | None) -> Any:
        if self.mode == "one":
            return self.make(seed, faults)
        make: Any = StatefulDataLoader if self.loader == "stateful" else DataLoader
        first = self.make(seed, faults)  # seeds the global stream the shorter loader's sampler draws from too
        second = make(MapRows(SECOND_LOADER_ROWS, 1, None), batch_size=BATCH, sampler=RandomSampler(range(28)))
        return CombinedLoader({"a": first, "b": second}, mode=self.mode)

    def make_train_loaders(self, faults: Faults) -> Any:
        if self.source == "fit":
            return self.train_data(0, faults)
        return EpochData(self, faults)

    def shown(self) -> str:
        parts = [self.loader, self.order, f"workers={self.workers}"]
        parts += ["drop_last"] if self.drop_last else []
        parts += [self.source] if self.source != "fit" else []
        parts += [self.mode] if self.mode != "one" else []
        return ", ".join(parts)


class EpochData(pl.LightningDataModule):
    """The cell's loader from a data module; made anew each epoch (``reload``) over rows of that epoch's own."""

    def __init__(self, loop: LoaderLoop, faults: Faults) -> None:
        super().__init__()
        self.loop, self.faults = loop, faults

    def train_dataloader(self) -> Any:
        epoch = int(self.trainer.current_epoch) if self.loop.source == "reload" else 0  # type: ignore[union-attr]
        return self.loop.train_data(10 * epoch, self.faults)


# --- the cells ------------------------------------------------------------------------------------

EXCEPTION_0 = Fault("training_step", "exception", 0, 5)  # inside epoch 0, saved by OnExceptionCheckpoint
KILL_0 = Fault("between_batches", "checkpoint_kill", 0, 4)  # ModelCheckpoint at batch 4's end, killed 2 later
ORIGINS = (EXCEPTION_0, KILL_0)
POINTS = {
    "exception in epoch 0": EXCEPTION_0,
    "kill after a checkpoint in epoch 0": KILL_0,
    "exception in epoch 1": Fault("training_step", "exception", 1, 5),
    "exception in epoch 1's first batch": Fault("training_step", "exception", 1, 0),
    "save as epoch 1 starts": Fault("on_train_epoch_start", "save", 1, 0),
}

# The cases the loader dimension was built for, both ways in: a plain DataLoader(shuffle=True) without a
# generator and with one, inside epoch 0 and at epoch 1's first batch (where nothing differed, yet a
# warning came), a StatefulDataLoader with a RandomSampler without a generator (exact, yet warned), and
# two resumes in a row inside one epoch, with workers.
_ISSUE = {
    "DataLoader(shuffle=True), an exception in epoch 0 batch 8": (
        LoaderLoop(order="shuffle"),
        Fault("training_step", "exception", 0, 8),
        None,
    ),
    "DataLoader(shuffle=True), a kill after the checkpoint at step 8": (
        LoaderLoop(order="shuffle"),
        Fault("between_batches", "checkpoint_kill", 0, 7),
        None,
    ),
    "DataLoader(shuffle=True), an exception in epoch 1's first batch": (
        LoaderLoop(order="shuffle"),
        Fault("training_step", "exception", 1, 0),
        None,
    ),
    "DataLoader(shuffle=True, generator=g), an exception in epoch 0 batch 8": (
        LoaderLoop(order="shuffle_generator"),
        Fault("training_step", "exception", 0, 8),
        None,
    ),
    "StatefulDataLoader(sampler=RandomSampler(ds)), an exception in epoch 0 batch 5": (
        LoaderLoop(loader="stateful", order="random"),
        EXCEPTION_0,
        None,
    ),
    "DataLoader(shuffle=True, num_workers=2), exceptions in epoch 0 batches 3 and 7": (
        LoaderLoop(order="shuffle", workers="2"),
        Fault("training_step", "exception", 0, 3),
        Fault("training_step", "exception", 0, 7),
    ),
}
ISSUE_CELLS = [
    (name, Cell(way, loop, fault, second))
    for name, (loop, fault, second) in _ISSUE.items()
    for way in ("typed", "adapter")
]

PRODUCT_CELLS = [
    Cell(way, LoaderLoop(loader=loader, order=order, workers=workers), fault)
    for loader in LOADERS
    for order in ORDERS
    for workers in ("0", "2")
    for way in ("typed", "adapter")
    for fault in ORIGINS
]


def _allowed(row: dict[str, Any]) -> bool:
    """What the pairwise design lets meet: combined loaders are map-style ones."""
    return not (row.get("mode", "one") != "one" and row.get("order") in ITERABLE)


PAIRWISE_ROWS = pairwise(
    {
        "loader": LOADERS,
        "order": ORDERS,
        "workers": WORKERS,
        "drop_last": (False, True),
        "way": ("typed", "adapter"),
        "point": tuple(POINTS),
        "source": SOURCES,
        "mode": MODES,
    },
    _allowed,
    seed=43,
)
PAIRWISE_CELLS = [
    Cell(
        row["way"],
        LoaderLoop(
            loader=row["loader"],
            order=row["order"],
            workers=row["workers"],
            drop_last=row["drop_last"],
            source=row["source"],
            mode=row["mode"],
        ),
        POINTS[row["point"]],
    )
    for row in PAIRWISE_ROWS
]


def _inside_an_epoch(fault: Fault) -> bool:
    """A point from which a stateful loader resumes with its state (a batch after the epoch's first)."""
    return fault.where != "on_train_epoch_start" and fault.batch > 0


def expected(cell: Cell) -> list[str]:
    """What the resume of ``cell`` warns of (nothing: exact). Every plain loader resumes exactly. A
    ``StatefulDataLoader`` restored inside an epoch draws its order again from torch's global stream where
    its sampler draws as its iterator is made (the user's ``UserSampler``: torchdata makes it twice), and
    where several loaders load in the main process (here the shorter, shuffled loader of a combined
    pair). Its worker processes start their random streams again inside an epoch, or at any point with
    persistent workers, but draw nothing here: not named."""
    loop = cell.loop
    assert isinstance(loop, LoaderLoop)
    if loop.loader == "plain":
        return []
    found: list[str] = []
    inside = _inside_an_epoch(cell.fault)
    if inside and (loop.order == "user_sampler" or loop.mode != "one"):
        found.append("a training loader whose order torchdata's restore drew again from torch's global random state")
    return found


def shown(warned: list[str]) -> str:
    if not warned:
        return "exact"
    return "warned: " + " and ".join("its order drawn again" if "drew again" in w else "worker streams" for w in warned)


def check(cell: Cell, outcome: Outcome) -> None:
    detail = f"{cell.id}: {outcome.shown()}\n" + "\n".join(outcome.warnings)
    warned = expected(cell)
    if not warned:
        assert outcome.kind == "exact", detail
        return
    assert outcome.kind in ("warned", "exact") and len(outcome.warnings) == len(warned), detail
    for part, warning in zip(warned, sorted(outcome.warnings, key=lambda w: "worker" in w)):
        assert part in warning, detail


def _id(cell: Cell) -> str:
    return f"{cell.way}-{cell.loop.shown()}-{cell.fault.shown()}".replace(" ", "_").replace(",", "")


@pytest.mark.parametrize("name,cell", ISSUE_CELLS, ids=[f"{cell.way}: {name}" for name, cell in ISSUE_CELLS])
def test_issue_cell(name: str, cell: Cell, tmp_path: Path) -> None:
    check(cell, run_cell(cell, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("cell", PRODUCT_CELLS, ids=[_id(cell) for cell in PRODUCT_CELLS])
def test_product_cell(cell: Cell, tmp_path: Path) -> None:
    check(cell, run_cell(cell, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("cell", PAIRWISE_CELLS, ids=[_id(cell) for cell in PAIRWISE_CELLS])
def test_pairwise_cell(cell: Cell, tmp_path: Path) -> None:
    check(cell, run_cell(cell, tmp_path))


def test_the_product_and_the_pairs_cover_their_dimensions() -> None:
    product = {(c.loop.loader, c.loop.order, c.loop.workers, c.way, c.fault) for c in PRODUCT_CELLS}  # type: ignore[attr-defined]
    assert product == {
        (loader, order, workers, way, fault)
        for loader in LOADERS
        for order in ORDERS
        for workers in ("0", "2")
        for way in ("typed", "adapter")
        for fault in ORIGINS
    }
    names = ("loader", "order", "workers", "drop_last", "way", "point", "source", "mode")
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            met = {(row[a], row[b]) for row in PAIRWISE_ROWS}
            values = {name: sorted({row[name] for row in PAIRWISE_ROWS}, key=repr) for name in names}
            wanted = {(x, y) for x in values[a] for y in values[b] if _allowed({a: x, b: y})}
            assert met == wanted, (a, b, wanted - met)


# --- the table docs/resume.md holds ---------------------------------------------------------------

_BEGIN = (
    "<!-- loader matrix table: generated by `python tests/test_fault_matrix_loaders.py --table`; the file checks it -->"
)
_END = "<!-- end of the loader matrix table -->"
_DOCS = Path(__file__).resolve().parent.parent / "docs" / "resume.md"


def _counts(cells: list[Cell]) -> str:
    return counts([shown(expected(cell)) for cell in cells])


def table() -> str:
    issue = [shown(expected(cell)) for _, cell in ISSUE_CELLS]
    lines = [
        *named_cells_table("The cases the loader dimension was built for, both ways in", ISSUE_CELLS, issue),
        "",
        f"The full product, loader x order x workers (0, 2) x way in x origin ({_counts(PRODUCT_CELLS)}):",
        "",
        "| the training loader's order | plain `DataLoader` | `StatefulDataLoader` |",
        "| --- | --- | --- |",
    ]
    for order in ORDERS:
        columns = []
        for loader in LOADERS:
            cells = [c for c in PRODUCT_CELLS if c.loop.order == order and c.loop.loader == loader]  # type: ignore[attr-defined]
            outcomes = [shown(expected(cell)) for cell in cells]
            columns.append(", ".join(f"{outcome} ({outcomes.count(outcome)})" for outcome in sorted(set(outcomes))))
        lines.append(f"| {ORDER_SHOWN[order]} | {columns[0]} | {columns[1]} |")
    warned = [shown(expected(cell)) for cell in PAIRWISE_CELLS if expected(cell)]
    order = sum("order drawn again" in outcome for outcome in warned)
    lines += [
        "",
        f"All pairs over loader, order, workers (0, 2, 2 persistent), `drop_last`, way in, point (an exception"
        f" inside epoch 0, inside epoch 1, in epoch 1's first batch, a kill after a checkpoint, a save as"
        f" epoch 1 starts), where the loader comes from (`fit`, a data module, made anew each epoch) and"
        f" `CombinedLoader` mode ({_counts(PAIRWISE_CELLS)}; every warned one a `StatefulDataLoader`, {order}"
        f" naming its order drawn again; workers that draw nothing are named by none).",
    ]
    return "\n".join(lines)


def test_docs_hold_the_table_and_its_counts() -> None:
    docs = _DOCS.read_text()
    assert _BEGIN in docs and _END in docs, "docs/resume.md lost the loader matrix table's markers"
    shown = docs.split(_BEGIN, 1)[1].split(_END, 1)[0].strip()
    assert shown == table(), (
        "docs/resume.md: regenerate the table with `python tests/test_fault_matrix_loaders.py --table`"
    )


if __name__ == "__main__":  # python tests/test_fault_matrix_loaders.py --table: rewrites the table in docs/resume.md
    if sys.argv[1:] == ["--table"]:
        docs = _DOCS.read_text()
        head, rest = docs.split(_BEGIN, 1)
        _DOCS.write_text(f"{head}{_BEGIN}\n{table()}\n{_END}{rest.split(_END, 1)[1]}")
        print(f"wrote {_DOCS}")
