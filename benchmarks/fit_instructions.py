"""Instructions per training step of several fits, counted in one process under valgrind's callgrind.

``step_instructions.py`` runs each variant in two processes of its own (a short and a long fit) and
divides the difference: every count pays for importing torch and Lightning under valgrind (about two
minutes of the machine each). Here one process imports once and fits one variant after another; the
training data marks where the counted batches begin and end: fetching the first sample of batch
``skip`` and of batch ``skip + batches`` calls ``os.getpgrp()``, and callgrind, started with
``--dump-before=getpgrp``, writes its counters out and zeroes them at each such call. The part
between a fit's two marks is whole batches (fetch, hooks, step, backward, optimizer step, batch
end) and nothing else: no import, no set-up, no teardown. With one thread and ``PYTHONHASHSEED=0``
the count is the same from run to run, and it does not depend on the machine's load. The first few
fits of a process count a few thousand instructions a step more than the later ones (the same fit
again: 2,436,763, 2,434,426, 2,437,787, then 2,433,171, 2,432,634, 2,432,660), whether or not the
garbage collector runs, so a script fits a few first (not counted) and compares fits after them.

A child process (``python <script> --child <spec.json>``, under valgrind) fits what the spec names;
each script that uses this module says what a spec names and how a fit is made.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_overhead import BATCH_SIZE, IN_FEATURES, OUT_FEATURES  # noqa: E402 - the benchmarks' own model sizes

# One thread, and the same string hashes in every process: otherwise thread pools and dict probe
# sequences differ from run to run and move the count (as in ``step_instructions.py``).
QUIET_ENVIRONMENT = {
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
# The libc function whose call marks a counted region's edges; nothing in a training fit calls it.
MARK = "getpgrp"


class MarkedSamples(TensorDataset):
    """The training data: fetching sample ``first`` or sample ``last`` calls ``os.getpgrp()``, the mark.

    Right before the first mark, the garbage collector collects and freezes what exists (``gc.freeze``):
    its generations then start the counted batches empty and at the same count in every fit, so that
    the collections inside them, and their cost, are those of the batches' own objects, not of what
    earlier fits in the process left behind."""

    def __init__(self, first: int, last: int, *tensors: torch.Tensor) -> None:
        super().__init__(*tensors)
        self.first, self.last = first, last

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        if index == self.first:
            gc.collect()
            gc.freeze()
            os.getpgrp()
        elif index == self.last:
            os.getpgrp()
            gc.unfreeze()
        return super().__getitem__(index)


def marked_loader(skip: int, batches: int, stateful: bool = False) -> DataLoader[Any]:
    """``skip + batches + 2`` batches of the benchmarks' data, in order, marked around ``batches`` after ``skip``."""
    steps = skip + batches + 2
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH_SIZE, IN_FEATURES, generator=generator)
    y = torch.randint(0, OUT_FEATURES, (steps * BATCH_SIZE,), generator=generator)
    data = MarkedSamples(skip * BATCH_SIZE, (skip + batches) * BATCH_SIZE, x, y)
    if stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]  # no py.typed

        loader: DataLoader[Any] = StatefulDataLoader(data, batch_size=BATCH_SIZE)
        return loader
    return DataLoader(data, batch_size=BATCH_SIZE)


def steps_of_fit(skip: int, batches: int) -> int:
    """The training steps of a fit of ``marked_loader(skip, batches)``: its last batch is never fetched
    (the fit stops at ``max_steps`` first), so the last mark always runs."""
    return skip + batches + 1


def child(spec_path: str, fit: Callable[[dict[str, Any], int, int], None]) -> None:
    """In the process under valgrind: ``fit(entry, skip, batches)`` for each of the spec's ``fits``."""
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(1)
    for entry in spec["fits"]:
        fit(entry, spec["skip"], spec["batches"])


def count(
    script: Path,
    fits: Sequence[dict[str, Any]],
    skip: int,
    batches: int,
    keep: Path | None = None,
    caches: bool = False,
) -> list[dict[str, float]]:
    """Each fit's events per training step (``Ir``: instructions): ``script --child`` fits them one after
    another in one process under callgrind. ``caches``: also simulate the caches and the branch
    predictor (callgrind's ``D1mr``, ``D1mw``, ``DLmr``, ``DLmw``, ``Bcm``, ``Bim``... per step).
    ``keep``: a folder for callgrind's files (each fit's counted part is part ``2 * (fit's index + 1)``:
    ``callgrind_annotate`` lists its functions), else a temporary one."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as directory:
        folder = keep if keep is not None else Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        spec = folder / "spec.json"
        spec.write_text(json.dumps({"fits": list(fits), "skip": skip, "batches": batches}))
        out = folder / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--dump-before={MARK}",
            *(["--cache-sim=yes", "--branch-sim=yes"] if caches else []),
            f"--callgrind-out-file={out}",
            sys.executable,
            str(script),
            "--child",
            str(spec),
        ]
        completed = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, **QUIET_ENVIRONMENT}, cwd=Path.cwd()
        )
        if completed.returncode != 0:
            raise RuntimeError(f"{script.name} --child failed under valgrind:\n{completed.stderr[-3000:]}")
        parts = _parts(folder, out.name)
        if len(parts) < 2 * len(fits):
            raise RuntimeError(f"{len(parts)} counted parts for {len(fits)} fits: a fit did not reach its marks")
        return [
            {event: total / batches for event, total in parts[2 * (index + 1)].items()} for index in range(len(fits))
        ]


def _parts(folder: Path, stem: str) -> dict[int, dict[str, int]]:
    """callgrind's dumps, by part number: each one's events (``events:``) and their totals (``summary:``)."""
    totals: dict[int, dict[str, int]] = {}
    for path in folder.glob(f"{stem}.*"):
        text = path.read_text()
        part = re.search(r"^part: (\d+)$", text, re.M)
        events = re.search(r"^events: (.+)$", text, re.M)
        summary = re.search(r"^summary: (.+)$", text, re.M)
        if part is not None and events is not None and summary is not None:
            totals[int(part[1])] = dict(zip(events[1].split(), map(int, summary[1].split())))
    return totals
