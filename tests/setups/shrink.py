"""Shrinking a failing setup: the simplest setup that still fails the same way.

A setup is a function of its choices (``choices.py``), and each choice's 0 is its simplest option,
so a simpler setup is one drawn from smaller choices. The shrink replays the failing choices with
blocks of them set to 0 (halves, then quarters, ... then single choices), then each remaining
choice lowered, keeping every change after which the setup still fails the same way, until no
change helps. Each try is a full check (three fits), so tries are cached by the setup they draw:
many choice changes draw the same setup.
"""

from __future__ import annotations

from collections.abc import Callable

from setups.choices import Choices
from setups.space import Setup, draw_setup

__all__ = ["shrink"]


def shrink(
    made: list[int], fails: Callable[[Setup], bool], processes: int = 1, tries: int = 400
) -> tuple[Setup, list[int], int]:
    """The simplest setup (and its choices) drawn from choices no larger than ``made`` that ``fails``;
    at most ``tries`` checks. Returns the setup, its choices and the checks run."""
    seen: dict[Setup, bool] = {}
    checks = 0

    def draw(replay: list[int]) -> tuple[Setup, list[int]]:
        choices = Choices(None, replay)
        return draw_setup(choices, processes), choices.made

    def still_fails(replay: list[int]) -> bool:
        nonlocal checks
        setup, _ = draw(replay)
        if setup not in seen:
            if checks >= tries:
                return False
            checks += 1
            seen[setup] = fails(setup)
        return seen[setup]

    current = draw(list(made))[1]
    block = max(1, len(current) // 2)
    while block >= 1:
        start = 0
        while start < len(current):
            trial = current[:start] + [0] * block + current[start + block :]
            if trial[: len(current)] != current and still_fails(trial):
                current = draw(trial)[1]
            else:
                start += block
        block //= 2
    changed = True
    while changed:
        changed = False
        for index in range(len(current)):
            if index >= len(current):
                break
            value = current[index]
            for lower in sorted({value // 2, value - 1} - {value}):
                if lower < 0:
                    continue
                trial = current[:index] + [lower] + current[index + 1 :]
                if still_fails(trial):
                    current, changed = draw(trial)[1], True
                    break
    return draw(current)[0], current, checks
