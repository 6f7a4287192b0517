"""The fault-injection matrix, on where the data's randomness lives and on the loaders Lightning combines.

The harness and the outcome rule are ``fault_matrix``'s (``run_cell``: the uninterrupted fit against
the interrupted, resumed chain, every value and every logged row). ``DataLoop`` adds two dimensions
to its loop:

- **the sampler** of the training loader, one process: each torch sampler that takes a
  ``generator`` (``RandomSampler``, with and without replacement, ``SubsetRandomSampler``,
  ``WeightedRandomSampler``), a loader's ``generator=`` with ``shuffle=True``, a ``batch_sampler`` of
  the user's own with a generator, torchdata's ``RandomSampler`` and ``StatefulDistributedSampler``,
  a ``RandomSampler`` without a generator (torch's global random state, drawn at the epoch's first
  fetch), and no sampler: an ``IterableDataset`` without a state of its own, which torchdata replays at
  a load;
- **the combined mode** of two training loaders of unequal length (11 and 7 batches):
  ``CombinedLoader`` in ``max_size_cycle``, ``max_size`` and ``min_size``.

The cells: the issue's cases (both ways in), every sampler x way in x fault, every mode x way in x
fault; all exact but torchdata's sampler sharing its loader's generator, resumed inside an epoch
(warned). The issue's cases run with the fast tests, the rest under ``slow``. A plain ``DataLoader``
against a ``StatefulDataLoader``, every sampler kind: ``test_fault_matrix_loaders.py``. Each cell's test id reruns it alone; ``python
tests/test_fault_matrix_data.py --table`` writes the table docs/resume.md holds (a test checks it).
Two ranks under DDP: ``test_resume_ddp_samplers.py``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from fault_matrix import BATCH, ROWS, SECOND_LOADER_ROWS, Cell, Fault, Faults, Loop, MapRows, Outcome, run_cell
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import IterableDataset, RandomSampler, Sampler, SubsetRandomSampler, WeightedRandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler as TorchdataRandomSampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

SAMPLERS = (
    "shuffle_generator",  # StatefulDataLoader(shuffle=True, generator=g): torchdata's RandomSampler, g shared
    "random",  # torch's RandomSampler(generator=g)
    "random_replacement",  # ... replacement=True: it draws in chunks of 32 as the epoch goes
    "subset",  # SubsetRandomSampler(generator=g)
    "weighted",  # WeightedRandomSampler(generator=g)
    "batch_sampler",  # the user's own batch_sampler, shuffling with a generator
    "torchdata_random",  # torchdata's RandomSampler(generator=g)
    "torchdata_shuffle",  # StatefulDataLoader(shuffle=True): torchdata's RandomSampler with a generator of its own
    "stateful_distributed",  # torchdata's StatefulDistributedSampler(shuffle=True), on one process
    "global",  # torch's RandomSampler without a generator: torch's global random state, at the epoch's first fetch
    "torchdata_replacement_shared",  # torchdata's RandomSampler(replacement=True, generator=g), the loader's generator=g
    "iterable_replayed",  # no sampler: an IterableDataset without a state, replayed by torchdata at a load
)
# how docs/resume.md names each (``ds`` the dataset, ``g`` a seeded torch.Generator)
SAMPLER_SHOWN = {
    "shuffle_generator": "`StatefulDataLoader(ds, shuffle=True, generator=g)`",
    "random": "`RandomSampler(ds, generator=g)`",
    "random_replacement": "`RandomSampler(ds, replacement=True, generator=g)`",
    "subset": "`SubsetRandomSampler(indices, generator=g)`",
    "weighted": "`WeightedRandomSampler(weights, n, generator=g)`",
    "batch_sampler": "`batch_sampler=` a sampler of the user's own, shuffling with `g`",
    "torchdata_random": "torchdata's `RandomSampler(ds, generator=g)`",
    "torchdata_shuffle": "`StatefulDataLoader(ds, shuffle=True)` (torchdata's `RandomSampler`, its own generator)",
    "stateful_distributed": "torchdata's `StatefulDistributedSampler(ds, shuffle=True)`",
    "global": "`RandomSampler(ds)`, no generator (torch's global random state)",
    "torchdata_replacement_shared": "torchdata's `RandomSampler(ds, replacement=True, generator=g)` in `StatefulDataLoader(ds, sampler=..., generator=g)`",
    "iterable_replayed": "none: an `IterableDataset` without `state_dict()` (torchdata replays it at a load)",
}
MODES = ("max_size_cycle", "max_size", "min_size")
SECOND_BATCHES = math.ceil(SECOND_LOADER_ROWS / BATCH)  # 7


class ShuffledBatches(Sampler[list[int]]):
    """A batch sampler of the user's own: the rows shuffled with its generator, cut into batches."""

    def __init__(self, rows: int, batch: int, generator: torch.Generator) -> None:
        self.rows, self.batch, self.generator = rows, batch, generator

    def __len__(self) -> int:
        return math.ceil(self.rows / self.batch)

    def __iter__(self) -> Any:
        order = torch.randperm(self.rows, generator=self.generator).tolist()
        for start in range(0, self.rows, self.batch):
            yield order[start : start + self.batch]


class ReplayedRows(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """The harness's rows as an iterable without a length or a state of its own: Lightning fetches a
    batch ahead, and torchdata replays the iterator at a load (so no fault is planned in its fetches:
    the replay would meet it again)."""

    def __init__(self) -> None:
        self.rows = MapRows(ROWS, 0, None)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (self.rows[index] for index in range(len(self.rows)))


def sampled_loader(sampler: str, faults: Faults | None) -> StatefulDataLoader[Any]:
    """The training loader of ``sampler`` (see ``SAMPLERS``), over the harness's 42 rows."""
    if sampler == "iterable_replayed":
        return StatefulDataLoader(ReplayedRows(), batch_size=BATCH)
    data = MapRows(ROWS, 0, faults)
    generator = torch.Generator().manual_seed(7)
    if sampler == "shuffle_generator":
        return StatefulDataLoader(data, batch_size=BATCH, shuffle=True, generator=generator)
    if sampler == "batch_sampler":
        return StatefulDataLoader(data, batch_sampler=ShuffledBatches(ROWS, BATCH, generator))
    if sampler == "torchdata_shuffle":
        torch.manual_seed(3)  # where its own generator's seed comes from
        return StatefulDataLoader(data, batch_size=BATCH, shuffle=True)
    if sampler == "torchdata_replacement_shared":
        shared = TorchdataRandomSampler(data, replacement=True, generator=generator)
        return StatefulDataLoader(data, batch_size=BATCH, sampler=shared, generator=generator)
    if sampler == "global":
        torch.manual_seed(3)  # the same global state at each fit's start: the reference is one fixed run
    made: dict[str, Any] = {
        "random": lambda: RandomSampler(data, generator=generator),
        "random_replacement": lambda: RandomSampler(data, replacement=True, generator=generator),
        "subset": lambda: SubsetRandomSampler(range(ROWS), generator=generator),
        "weighted": lambda: WeightedRandomSampler(torch.linspace(1, 2, ROWS), ROWS, generator=generator),
        "torchdata_random": lambda: TorchdataRandomSampler(data, generator=generator),
        "stateful_distributed": lambda: StatefulDistributedSampler(data, num_replicas=1, rank=0, shuffle=True),
        "global": lambda: RandomSampler(data),
    }
    return StatefulDataLoader(data, batch_size=BATCH, sampler=made[sampler]())


@dataclass(frozen=True)
class DataLoop(Loop):
    """``Loop`` with the training loaders this file varies: a sampler, or two loaders combined in a mode."""

    sampler: str = "sequential"  # sequential | one of SAMPLERS
    mode: str = ""  # "": one loader; else two (11 and 7 batches) in a CombinedLoader of this mode

    @property
    def batches(self) -> int:
        return SECOND_BATCHES if self.mode == "min_size" else super().batches

    def make_train_loaders(self, faults: Faults) -> Any:
        if not self.mode:
            return sampled_loader(self.sampler, faults)
        first = StatefulDataLoader(MapRows(ROWS, 0, faults), batch_size=BATCH)
        second = StatefulDataLoader(MapRows(SECOND_LOADER_ROWS, 1, None), batch_size=BATCH)
        return CombinedLoader({"a": first, "b": second}, mode=self.mode)

    def shown(self) -> str:
        base = Loop(**{name: getattr(self, name) for name in Loop.__dataclass_fields__}).shown()
        mine = f"mode={self.mode}" if self.mode else f"sampler={self.sampler}"
        return mine if base == "default" else f"{mine}, {base}"


# --- the cells ------------------------------------------------------------------------------------

EXCEPTION_0 = Fault("training_step", "exception", 0, 5)  # inside epoch 0: the point is batch 5, from its fetch
EXCEPTION_1 = Fault("training_step", "exception", 1, 5)  # inside epoch 1
KILL_0 = Fault("between_batches", "checkpoint_kill", 0, 4)  # ModelCheckpoint at batch 4's end, killed 2 later
EPOCH_START_1 = Fault("on_train_epoch_start", "save", 1, 0)  # a save as epoch 1 starts, the run goes on
SIGUSR1_1 = Fault("module_batch_start", "sigusr1", 1, 3)  # SLURM's signal in epoch 1, batch 3

# The issue's cases, both ways in.
_ISSUE = {
    "StatefulDataLoader(shuffle=True, generator=g), a fault in epoch 0": (
        DataLoop(sampler="shuffle_generator"),
        EXCEPTION_0,
    ),
    "sampler=RandomSampler(ds, generator=g), a fault in epoch 1": (DataLoop(sampler="random"), EXCEPTION_1),
    "CombinedLoader max_size, b exhausted before the save": (
        DataLoop(mode="max_size"),
        Fault("training_step", "exception", 0, 8),
    ),
}
ISSUE_CELLS = [(name, Cell(way, loop, fault)) for name, (loop, fault) in _ISSUE.items() for way in ("typed", "adapter")]

EPOCH_END_0 = Fault("on_train_epoch_end", "exception", 0, 10)  # the point is epoch 0's end
LAST_BATCH_END_0 = Fault("callback_batch_end", "exception", 0, 10)  # after epoch 0's last optimizer step

# Every sampler, each way in, at each fault (and one chain of two faults, in epoch 0 then epoch 1).
_FAULTS: tuple[tuple[Fault, Fault | None], ...] = (
    *((fault, None) for fault in (EXCEPTION_0, EXCEPTION_1, KILL_0, EPOCH_START_1, SIGUSR1_1, EPOCH_END_0)),
    (LAST_BATCH_END_0, None),
    (Fault("training_step", "exception", 0, 3), Fault("training_step", "exception", 1, 7)),
)
SAMPLER_CELLS = [
    Cell(way, DataLoop(sampler=sampler), fault, second)
    for sampler in SAMPLERS
    for way in ("typed", "adapter")
    for fault, second in _FAULTS
]


def _mode_cells(mode: str) -> list[Cell]:
    """The second loader (7 batches) runs out at the fetch of batch 7: faults before and after that, and
    once more in the resumed run (min_size: its epoch is those 7 batches)."""
    late, later = (5, 6) if mode == "min_size" else (8, 10)
    loop = DataLoop(mode=mode)
    faults = [
        (Fault("training_step", "exception", 0, late), None),
        (Fault("training_step", "exception", 0, 3), Fault("training_step", "exception", 0, later)),
        (Fault("between_batches", "checkpoint_kill", 0, late - 2), None),
        (Fault("module_batch_start", "sigusr1", 0, late), None),
        (EPOCH_START_1, None),
        (Fault("training_step", "exception", 1, 3), None),
    ]
    return [Cell(way, loop, fault, second) for way in ("typed", "adapter") for fault, second in faults]


MODE_CELLS = [cell for mode in MODES for cell in _mode_cells(mode)]


# The faults whose checkpoint resumes at an epoch's start or end, not inside it
AT_AN_EPOCH_EDGE = (EPOCH_START_1, EPOCH_END_0)


def _resumes_inside_an_epoch(cell: Cell) -> list[Fault]:
    return [fault for fault in (cell.fault, cell.second) if fault is not None and fault not in AT_AN_EPOCH_EDGE]


def expected(cell: Cell) -> str:
    """Exact, but where torchdata's sampler shares the loader's generator and the run resumes inside an
    epoch: one warning names the sampler. (The sampler without a generator draws again from the streams
    of the epoch's first fetch, which the checkpoint holds.)"""
    loop = cell.loop
    assert isinstance(loop, DataLoop)
    if loop.sampler == "torchdata_replacement_shared" and _resumes_inside_an_epoch(cell):
        return "warned: generator shared with the loader"
    return "exact"


def check(cell: Cell, outcome: Outcome) -> None:
    detail = f"{cell.id}: {outcome.shown()}\n" + "\n".join(outcome.warnings)
    if expected(cell) == "exact":
        assert outcome.kind == "exact", detail
        return
    # one at each resume inside an epoch
    assert outcome.kind in ("warned", "exact"), detail
    assert len(outcome.warnings) == len(_resumes_inside_an_epoch(cell)), detail
    for warning in outcome.warnings:
        assert "torchdata.stateful_dataloader.sampler.RandomSampler(replacement=True)" in warning, detail
        assert "shares the loader's generator=" in warning, detail


def _id(cell: Cell) -> str:
    return cell.id.replace(" ", "_").replace(",", "").replace("[", "").replace("]", "")


@pytest.mark.parametrize("name,cell", ISSUE_CELLS, ids=[f"{cell.way}: {name}" for name, cell in ISSUE_CELLS])
def test_issue_cell(name: str, cell: Cell, tmp_path: Path) -> None:
    check(cell, run_cell(cell, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("cell", SAMPLER_CELLS + MODE_CELLS, ids=[_id(cell) for cell in SAMPLER_CELLS + MODE_CELLS])
def test_cell(cell: Cell, tmp_path: Path) -> None:
    check(cell, run_cell(cell, tmp_path))


def test_every_sampler_and_mode_meets_every_fault_and_way() -> None:
    samplers = {(c.loop.sampler, c.way, c.fault, c.second) for c in SAMPLER_CELLS if isinstance(c.loop, DataLoop)}
    ways = ("typed", "adapter")
    assert samplers == {(sampler, way, *faults) for sampler in SAMPLERS for way in ways for faults in _FAULTS}
    modes = {(cell.loop.mode, cell.way) for cell in MODE_CELLS if isinstance(cell.loop, DataLoop)}
    assert modes == {(mode, way) for mode in MODES for way in ("typed", "adapter")}


# --- the table docs/resume.md holds ---------------------------------------------------------------

_BEGIN = "<!-- data matrix table: generated by `python tests/test_fault_matrix_data.py --table`; the file checks it -->"
_END = "<!-- end of the data matrix table -->"
_DOCS = Path(__file__).resolve().parent.parent / "docs" / "resume.md"


def _counts(cells: list[Cell]) -> str:
    exact = sum(expected(cell) == "exact" for cell in cells)
    return f"{len(cells)} cells: {exact} exact, {len(cells) - exact} warned"


def table() -> str:
    issue = [cell for _, cell in ISSUE_CELLS]
    lines = [
        f"The cases that once differed silently, both ways in ({_counts(issue)}):",
        "",
        "| case | way in | outcome |",
        "| --- | --- | --- |",
        *(f"| {name} | {cell.way} | {expected(cell)} |" for name, cell in ISSUE_CELLS),
        "",
        f"Each sampler, one process ({_counts(SAMPLER_CELLS)}):",
        "",
        "| the training loader's sampler | cells | outcome |",
        "| --- | --- | --- |",
    ]
    for sampler in SAMPLERS:
        cells = [cell for cell in SAMPLER_CELLS if isinstance(cell.loop, DataLoop) and cell.loop.sampler == sampler]
        outcomes = [expected(cell) for cell in cells]
        shown = ", ".join(f"{outcome} ({outcomes.count(outcome)})" for outcome in sorted(set(outcomes)))
        lines.append(
            f"| {SAMPLER_SHOWN[sampler]} | {len(cells)} | {outcomes[0] if len(set(outcomes)) == 1 else shown} |"
        )
    lines += [
        "",
        f"Each combined mode, two loaders of 11 and 7 batches ({_counts(MODE_CELLS)}):",
        "",
        "| `CombinedLoader` mode | cells | outcome |",
        "| --- | --- | --- |",
    ]
    for mode in MODES:
        cells = [cell for cell in MODE_CELLS if isinstance(cell.loop, DataLoop) and cell.loop.mode == mode]
        (outcome,) = {expected(cell) for cell in cells}
        lines.append(f"| `{mode}` | {len(cells)} | {outcome} |")
    return "\n".join(lines)


def test_docs_hold_the_table_and_its_counts() -> None:
    docs = _DOCS.read_text()
    assert _BEGIN in docs and _END in docs, "docs/resume.md lost the data matrix table's markers"
    shown = docs.split(_BEGIN, 1)[1].split(_END, 1)[0].strip()
    assert shown == table(), (
        "docs/resume.md: regenerate the table with `python tests/test_fault_matrix_data.py --table`"
    )
    everything = [cell for _, cell in ISSUE_CELLS] + SAMPLER_CELLS + MODE_CELLS
    assert f"{_counts(everything).replace(' cells:', ' cells,')}, none silent" in " ".join(docs.split())


if __name__ == "__main__":  # python tests/test_fault_matrix_data.py --table: rewrites the table in docs/resume.md
    if sys.argv[1:] == ["--table"]:
        docs = _DOCS.read_text()
        head, rest = docs.split(_BEGIN, 1)
        _DOCS.write_text(f"{head}{_BEGIN}\n{table()}\n{_END}{rest.split(_END, 1)[1]}")
        print(f"wrote {_DOCS}")
