"""Many setups at once: drawn from a seed, checked side by side in lanes (each lane's fits in fresh processes)."""

from __future__ import annotations

import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from setups.choices import Choices
from setups.oracle import Verdict, check
from setups.space import Setup, draw_setup

__all__ = ["Checked", "drawn", "run_setups"]


@dataclass
class Checked:
    seed: str
    index: int
    setup: Setup
    verdict: Verdict


def drawn(seed: str, index: int, processes: int = 1) -> Setup:
    """Setup ``index`` of ``seed``: the same setup whatever else runs."""
    return draw_setup(Choices(f"{seed}:{processes}:{index}"), processes)


def run_setups(
    seed: str,
    indices: Iterable[int],
    lanes: int = 2,
    processes: int = 1,
    each: Callable[[Checked], None] | None = None,
) -> list[Checked]:
    """Checks setup ``index`` of ``seed`` for each index, ``lanes`` at a time; ``each`` sees each as it ends."""
    root = Path(tempfile.mkdtemp(prefix="generated-setups-"))

    def one(index: int) -> Checked:
        setup = drawn(seed, index, processes)
        try:
            verdict = check(setup, root / str(index))
        except Exception as error:  # the oracle's own failure: a failure of the check, reported as one
            text = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            verdict = Verdict("harness error", f"harness error: {text}", traceback.format_exc())
        checked = Checked(seed, index, setup, verdict)
        if each is not None:
            each(checked)
        return checked

    try:
        with ThreadPoolExecutor(max_workers=lanes) as pool:
            return list(pool.map(one, indices))
    finally:
        shutil.rmtree(root, ignore_errors=True)
