"""The fault-injection matrix: every resume path of Lightning's fit loop is exact, or warned.

Each cell is run by ``fault_matrix.run_cell``: the uninterrupted fit against the interrupted,
resumed chain (see that module for what is compared). The cells are data:

- ``ISSUE_CELLS``: the cases that once differed silently, by name;
- ``design(seed)``: a pairwise design over every dimension (the way in, each field of ``Loop``, where
  the fault lands, how it stops the run, when, and a second fault in the resumed run). Every pair
  of values of two dimensions that a valid cell can hold appears in some cell, so every value of
  every dimension does. ``FAULT_MATRIX_SEED`` picks another design; the seed is in pytest's header.

``expected(cell)`` is the rule the docs state (``docs/resume.md``, "What is exact"): a cell is
``exact`` unless no checkpoint can hold what it lost, and then ``warned: <kinds>``. Each cell's
test id reruns it alone: ``pytest "tests/test_fault_matrix.py::test_cell[<id>]"``.
``python tests/test_fault_matrix.py --table`` writes the table docs/resume.md holds (a test checks it).
"""

from __future__ import annotations

import itertools
import os
import random
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from fault_matrix import HOWS, VAL_WHERES, WHERES, Cell, Fault, Loop, Outcome, counts, named_cells_table, run_cell

SEED = int(os.environ.get("FAULT_MATRIX_SEED", "20261201"))

# --- the cells that once differed silently --------------------------------------------------------

_ISSUE = {
    "the same batch faults twice (a resumed run's first batch)": (
        Loop(),
        Fault("training_step", "exception", 0, 5),
        Fault("training_step", "exception", 0, 5),
    ),
    "the batch right after a mid-epoch validation": (
        Loop(validation="half"),
        Fault("training_step", "exception", 0, 5),
        None,
    ),
    "the batch after a validation, with a step-interval ReduceLROnPlateau": (
        Loop(validation="half", scheduler="plateau_step"),
        Fault("training_step", "exception", 0, 5),
        None,
    ),
    "an exception in on_after_batch_transfer": (Loop(), Fault("on_after_batch_transfer", "exception", 0, 5), None),
    "SLURM's signal during the fetch": (Loop(), Fault("fetch", "sigusr1", 0, 5), None),
    "a value logged in the module's on_train_batch_end, ModelCheckpoint(every_n_train_steps=5)": (
        Loop(logging="batch_end"),
        Fault("between_batches", "checkpoint_kill", 0, 4),
        None,
    ),
    "accumulate_grad_batches=3, SIGTERM inside a window": (
        Loop(accumulate=3),
        Fault("training_step", "sigterm", 0, 4),
        None,
    ),
    "accumulate_grad_batches=3, a save from a callback's on_train_batch_end inside a window": (
        Loop(accumulate=3),
        Fault("callback_batch_end", "save", 0, 4),
        None,
    ),
    "an IterableDataset in a StatefulDataLoader, every_n_train_steps": (
        Loop(data="iterable"),
        Fault("between_batches", "checkpoint_kill", 0, 4),
        None,
    ),
    "a StatefulDataLoader checkpoint at an epoch's last batch": (
        Loop(),
        Fault("between_batches", "checkpoint_kill", 0, 10),
        None,
    ),
}
ISSUE_CELLS = [
    (name, Cell(way, loop, fault, second))
    for name, (loop, fault, second) in _ISSUE.items()
    for way in ("typed", "adapter")
]

# A save after a batch's end is done and before the next batch (or the epoch's end) begins: no hook
# runs there, but SLURM's signal may land there. Not a value of the design's `where` (the design and
# the table in docs/resume.md stay as they are): its own cells, each way in, every way to stop.
_AFTER_BATCH_END_LOOPS = (Loop(), Loop(accumulate=3), Loop(validation="half"), Loop(data="iterable"))
AFTER_BATCH_END_CELLS = [
    Cell(way, loop, Fault("after_batch_end", how, 0, batch), None)
    for way in ("typed", "adapter")
    for loop in _AFTER_BATCH_END_LOOPS
    for how in ("exception", "save", "sigusr1", "sigterm")
    for batch in (4, 10)  # inside the epoch; its last batch (the epoch's end comes next)
]

# --- the dimensions -------------------------------------------------------------------------------

LOOP_VALUES: dict[str, tuple[Any, ...]] = {
    "optimization": ("automatic", "manual", "manual_two", "manual_accumulate", "manual_scheduler"),
    "accumulate": (1, 3),
    "validation": ("none", "epoch", "half"),
    "scheduler": ("none", "step", "epoch", "plateau_epoch", "plateau_step"),
    "data": ("map", "iterable"),
    "signature": ("batch", "dataloader_iter"),
    "loaders": (1, 2),
    "limit": ("none", "max_steps", "limit_train_batches"),
    "logging": ("step", "epoch_hooks", "batch_end", "some_batches"),
}
assert set(LOOP_VALUES) == {field.name for field in fields(Loop)}
WHENS = ("mid", "epoch_start", "last", "after_validation")
SECONDS = ("none", "same", "later")
DIMENSIONS: dict[str, tuple[Any, ...]] = {
    "way": ("typed", "adapter"),
    **LOOP_VALUES,
    "where": WHERES,
    "how": HOWS,
    "when": WHENS,
    "second": SECONDS,
}

_TRANSFER = ("fetch", "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")
_AFTER_BACKWARD = ("on_after_backward", "on_before_optimizer_step")
_AFTER_UPDATE = ("after_update", "lr_scheduler_step", "callback_batch_end", "between_batches")


def _steps_at(loop: Loop, batch: int) -> bool:
    """Whether an optimizer steps at the end of ``batch`` (inside it, for manual optimization)."""
    last = batch == loop.batches - 1
    if loop.optimization == "manual_accumulate":
        return batch % 2 == 1 or last
    return loop.accumulate == 1 or (batch + 1) % loop.accumulate == 0 or last


def _zeroes_at(loop: Loop, batch: int) -> bool:
    """Whether Lightning zeroes the gradients in ``batch`` (automatic optimization): where the index it
    passes is a multiple of the window, the batch's own, or with dataloader_iter the last fetched one."""
    index = max(batch - 1, 0) if loop.signature == "dataloader_iter" else batch
    return index % loop.accumulate == 0


def _holds_gradients(loop: Loop, batch: int) -> bool:
    """Whether gradients of earlier batches are still to be stepped when ``batch`` starts."""
    if loop.optimization == "manual_accumulate":
        # Lightning zeroes them before a validation (`on_validation_model_zero_grad`): for manual
        # optimization it counts no accumulation window
        return batch % 2 == 1 and batch - 1 not in loop.validated_after
    return not loop.manual and loop.accumulate > 1 and not _zeroes_at(loop, batch)


def _fault(values: dict[str, Any], loop: Loop) -> Fault | None:
    """The fault a row of the design describes, or None where no fit reaches it."""
    where, how, when = values["where"], values["how"], values["when"]
    last = loop.batches - 1
    epoch, batch = {"mid": (0, 5), "epoch_start": (1, 0), "last": (0, last), "after_validation": (0, 5)}[when]
    if when == "after_validation" and loop.validation != "half":
        return None
    if where in VAL_WHERES:
        if not loop.validated_after:
            return None
        batch = loop.validated_after[-1 if when == "last" else 0]  # the batch the validation runs after
    if where == "lr_scheduler_step":
        if loop.manual or loop.scheduler == "none":
            return None
        if loop.scheduler in ("epoch", "plateau_epoch"):
            batch = last  # updated at the epoch's end
        elif not _steps_at(loop, batch):
            return None  # step-interval schedulers are updated where the optimizer steps
    if where in ("optimizer_step_before", "on_before_zero_grad") and loop.manual:
        return None
    if where == "on_before_zero_grad" and not _zeroes_at(loop, batch):
        return None  # gradients are zeroed at a window's first batch only
    if where in ("on_before_optimizer_step", "optimizer_step_before", "after_update") and not _steps_at(loop, batch):
        return None
    if where in _TRANSFER and loop.signature == "dataloader_iter":
        return None
    if how == "checkpoint_kill" and (where != "between_batches" or not _steps_at(loop, batch)):
        return None  # ModelCheckpoint(every_n_train_steps) saves where an optimizer step was counted
    if how != "checkpoint_kill" and where == "between_batches" and how == "sigterm":
        return None  # the same as SIGTERM anywhere in the batch
    if not loop.reaches(epoch, batch):
        return None  # max_steps ended the fit before
    final = epoch == 1 or not loop.reaches(1, 0)  # the fit's last epoch
    if final and (where == "on_train_epoch_end" or (how == "sigterm" and batch == last)) and how != "exception":
        return None  # the checkpoint comes after the fit's last batch: the resumed fit has nothing left to run
    if how == "checkpoint_kill" and not _reached_later(loop, epoch, batch + 2):
        return None  # nothing left to kill
    return Fault(where, how, epoch, batch)


def _reached_later(loop: Loop, epoch: int, batch: int) -> bool:
    """Whether the fit reaches that batch, counted on into the next epoch."""
    epoch, batch = epoch + batch // loop.batches, batch % loop.batches
    return epoch < 2 and loop.reaches(epoch, batch)


def _loop(values: dict[str, Any]) -> Loop | None:
    loop = Loop(**{name: values[name] for name in LOOP_VALUES})
    if loop.manual and (loop.accumulate > 1 or loop.scheduler != "none"):
        return None
    if loop.signature == "dataloader_iter" and loop.data == "iterable":
        return None  # Lightning learns the epoch's end only once the step's fetch fails: no last batch to aim at
    if loop.scheduler == "plateau_epoch" and loop.validation == "none":
        return None  # it monitors val_loss
    return loop


def _points_back(cell_fault: Fault, loop: Loop) -> bool:
    """Whether the resumed run reaches the fault's place again (its point is before the fault)."""
    where, how = cell_fault.where, cell_fault.how
    if how in ("sigterm", "checkpoint_kill"):
        return False  # SIGTERM stops the fit at the batch's end: the resumed run starts after it
    if where in _AFTER_UPDATE or where in ("module_batch_end", "on_train_epoch_end") or where in VAL_WHERES:
        return False
    if where in _AFTER_BACKWARD and _holds_gradients(loop, cell_fault.batch) and not _steps_at(loop, cell_fault.batch):
        return False  # the batch is rolled forward
    return not (loop.manual and where == "after_update")


def cell_of(values: dict[str, Any]) -> Cell | None:
    loop = _loop(values)
    if loop is None:
        return None
    fault = _fault(values, loop)
    if fault is None:
        return None
    second = None
    if values["second"] == "same":
        if not _points_back(fault, loop):
            return None
        second = fault
    elif values["second"] == "later":
        later = Fault("training_step", "exception", fault.epoch, fault.batch + 2)
        if fault.where == "on_train_epoch_end" or fault.batch + 2 >= loop.batches:
            later = Fault("training_step", "exception", fault.epoch + 1, 2)
        if later.epoch > 1:
            return None
        if (later.epoch, later.batch) <= (fault.epoch, fault.batch) or not loop.reaches(later.epoch, later.batch):
            return None
        if fault.how == "checkpoint_kill" and (later.epoch, later.batch) <= (fault.epoch, fault.batch + 2):
            return None  # the kill comes first
        second = later
    return Cell(values["way"], loop, fault, second)


def _value_of(cell: Cell, name: str) -> Any:
    if name == "way":
        return cell.way
    if name in LOOP_VALUES:
        return getattr(cell.loop, name)
    if name in ("where", "how"):
        return getattr(cell.fault, name)
    if name == "when":
        epoch, batch = cell.fault.epoch, cell.fault.batch
        if (epoch, batch) == (1, 0):
            return "epoch_start"
        if batch == cell.loop.batches - 1:
            return "last"
        if cell.loop.validation == "half" and batch == 5:
            return "after_validation"
        return "mid"
    if cell.second is None:
        return "none"
    return "same" if cell.second == cell.fault else "later"


def _pairs_of(cell: Cell) -> set[tuple[tuple[str, Any], tuple[str, Any]]]:
    """The pairs of dimension values ``cell`` holds (read off the cell, not the row that asked for it)."""
    values = [(name, _value_of(cell, name)) for name in DIMENSIONS]
    return set(itertools.combinations(values, 2))


def design(seed: int, limit: int = 400) -> list[Cell]:
    """A greedy pairwise design: each pick covers the most pairs of dimension values not yet covered;
    then each pair still open gets up to 500 tries at a valid cell that holds it (none: no cell can)."""
    rng = random.Random(seed)
    names = list(DIMENSIONS)
    uncovered = {
        ((a, va), (b, vb)) for a, b in itertools.combinations(names, 2) for va in DIMENSIONS[a] for vb in DIMENSIONS[b]
    }
    cells: list[Cell] = []
    seen: set[str] = set()

    def add(cell: Cell) -> None:
        uncovered.difference_update(_pairs_of(cell))
        seen.add(cell.id)
        cells.append(replace(cell, expected=expected(cell)))

    misses = 0
    while uncovered and len(cells) < limit and misses < 20:
        best: tuple[int, Cell] | None = None
        open_pairs = sorted(uncovered, key=repr)
        for _ in range(80):
            values = {name: rng.choice(DIMENSIONS[name]) for name in names}
            if rng.random() < 0.7:  # start from a pair not yet covered, so that rare pairs get their turn
                values.update(dict(rng.choice(open_pairs)))
            cell = cell_of(values)
            if cell is None or cell.id in seen:
                continue
            gain = len(_pairs_of(cell) & uncovered)
            if best is None or gain > best[0]:
                best = (gain, cell)
        if best is None or best[0] == 0:
            misses += 1
            continue
        add(best[1])
    for pair in sorted(uncovered, key=repr):
        for _ in range(500 if pair in uncovered else 0):
            values = {name: rng.choice(DIMENSIONS[name]) for name in names}
            values.update(dict(pair))
            cell = cell_of(values)
            if cell is not None and cell.id not in seen and pair in _pairs_of(cell):
                add(cell)
                break
    return cells


# --- the rule -------------------------------------------------------------------------------------


def _losses(loop: Loop, fault: Fault) -> set[str]:
    """What no checkpoint of ``fault`` can hold (the kinds the warning names)."""
    where, how, batch = fault.where, fault.how, fault.batch
    if how == "sigterm":
        return set()  # Lightning stops at the batch's end: a clean point
    found: set[str] = set()
    if where in _AFTER_BACKWARD and _holds_gradients(loop, batch) and _steps_at(loop, batch):
        found.add("gradients")  # .grad holds the window's earlier batches and part of this one
    if loop.manual and where == "after_update":
        found.add("manual_rest")  # what training_step does after opt.step()
    ends_after = where in ("after_update", "callback_batch_end", "between_batches") or (
        where == "lr_scheduler_step" and loop.scheduler in ("step", "epoch")
    )  # updated before on_train_batch_end
    if loop.logging == "batch_end" and ends_after and not (loop.manual and where == "after_update"):
        found.add("batch_end_hooks")  # the module's on_train_batch_end logs after the save
    return found


def expected(cell: Cell) -> str:
    kinds = _losses(cell.loop, cell.fault) | (_losses(cell.loop, cell.second) if cell.second else set())
    return "warned: " + ", ".join(sorted(kinds)) if kinds else "exact"


# what each kind of warning says, and which differences it covers
_WARNING_TEXT = {
    "gradients": "saved in batch {batch} after its backward added to .grad",
    "manual_rest": "after an optimizer step inside training_step (manual optimization)",
    "batch_end_hooks": "before its on_train_batch_end hooks ended",
}


def _covered(kind: str, difference: str) -> bool:
    if kind in ("gradients", "manual_rest"):
        return True  # the weights differ from then on: every later value may
    return "end_count" in difference  # batch_end_hooks: the value the module logs there, and its rows


def check(cell: Cell, outcome: Outcome) -> None:
    """The outcome is the expected one: exact, or warned with each difference named."""
    detail = f"{cell.id}: {outcome.shown()}\n" + "\n".join(outcome.warnings)
    if cell.expected == "exact":
        assert outcome.kind == "exact", detail
        return
    kinds = cell.expected.removeprefix("warned: ").split(", ")
    assert outcome.kind in ("warned", "exact") and outcome.warnings, detail
    text = "\n".join(outcome.warnings)
    for kind in kinds:
        faults = [
            fault for fault in (cell.fault, cell.second) if fault is not None and kind in _losses(cell.loop, fault)
        ]
        assert any(_WARNING_TEXT[kind].format(batch=fault.batch) in text for fault in faults), detail
        if kind == "batch_end_hooks":
            assert "'end_count' (on_train_batch_end)" in text, detail
    uncovered = [d for d in outcome.differences if not any(_covered(kind, d) for kind in kinds)]
    assert not uncovered, detail
    resumes = 1 + (cell.second is not None)
    assert len(outcome.warnings) <= resumes * len(kinds), detail


# --- the tests ------------------------------------------------------------------------------------

_DESIGN = design(SEED)


def _id(cell: Cell) -> str:
    return cell.id.replace(" ", "_").replace(",", "").replace("[", "").replace("]", "")


@pytest.mark.parametrize("name,cell", ISSUE_CELLS, ids=[f"{cell.way}: {name}" for name, cell in ISSUE_CELLS])
def test_issue_cell(name: str, cell: Cell, tmp_path: Path) -> None:
    check(replace(cell, expected=expected(cell)), run_cell(cell, tmp_path))


@pytest.mark.parametrize("cell", AFTER_BATCH_END_CELLS, ids=[_id(cell) for cell in AFTER_BATCH_END_CELLS])
def test_after_a_batch_end(cell: Cell, tmp_path: Path) -> None:
    assert expected(cell) == "exact"
    check(replace(cell, expected="exact"), run_cell(cell, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("cell", _DESIGN, ids=[_id(cell) for cell in _DESIGN])
def test_cell(cell: Cell, tmp_path: Path) -> None:
    check(cell, run_cell(cell, tmp_path))


def test_the_design_covers_every_value_of_every_dimension() -> None:
    for name, values in DIMENSIONS.items():
        for value in values:
            assert any(_value_of(cell, name) == value for cell in _DESIGN), (name, value)


DOCS_SEED = 20261201  # the design docs/resume.md shows
_BEGIN = "<!-- fault-matrix table: generated by `python tests/test_fault_matrix.py --table`; tests/test_fault_matrix.py checks it -->"
_END = "<!-- end of the fault-matrix table -->"


def table(cells: list[Cell], seed: int = DOCS_SEED) -> str:
    """The matrix as docs/resume.md holds it: the issue's cases, then the design, each cell's expected outcome."""
    issue = [expected(cell) for _, cell in ISSUE_CELLS]
    lines = [
        *named_cells_table("The cases that once differed silently, both ways in", ISSUE_CELLS, issue),
        "",
        f"The pairwise design, seed {seed} ({counts([cell.expected for cell in cells])}):",
        "",
        "| # | way in | loop | fault | then | outcome |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for number, cell in enumerate(cells, 1):
        second = cell.second.shown() if cell.second else ""
        lines.append(
            f"| {number} | {cell.way} | {cell.loop.shown()} | {cell.fault.shown()} | {second} | {cell.expected} |"
        )
    return "\n".join(lines)


def test_docs_hold_the_matrix_and_its_counts() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "resume.md").read_text()
    assert _BEGIN in docs and _END in docs, "docs/resume.md lost the table's markers"
    shown = docs.split(_BEGIN, 1)[1].split(_END, 1)[0].strip()
    cells = _DESIGN if SEED == DOCS_SEED else design(DOCS_SEED)
    assert shown == table(cells), (
        "docs/resume.md: regenerate the table with `python tests/test_fault_matrix.py --table`"
    )
    # the prose states the same counts
    prose = " ".join(docs.split())
    design_outcomes = [cell.expected for cell in cells]
    issue_outcomes = [expected(cell) for _, cell in ISSUE_CELLS]
    assert f"With the default seed ({DOCS_SEED}): {counts(design_outcomes).replace(' cells:', ' cells,')}" in prose
    assert f"are {counts(issue_outcomes).replace(' cells:', ' more:')}" in prose
    after_batch_end = [expected(cell) for cell in AFTER_BATCH_END_CELLS]
    assert after_batch_end == ["exact"] * len(after_batch_end)
    assert f"has {len(after_batch_end)} cells of its own" in prose and f"all {len(after_batch_end)} exact" in prose


if __name__ == "__main__":  # python tests/test_fault_matrix.py --table: rewrites the table in docs/resume.md
    if sys.argv[1:] == ["--table"]:
        path = Path(__file__).resolve().parent.parent / "docs" / "resume.md"
        docs = path.read_text()
        head, rest = docs.split(_BEGIN, 1)
        tail = rest.split(_END, 1)[1]
        path.write_text(f"{head}{_BEGIN}\n{table(design(DOCS_SEED))}\n{_END}{tail}")
        print(f"wrote {path}")
