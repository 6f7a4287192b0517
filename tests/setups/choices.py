"""The choices a setup is drawn from: a sequence of small integers, random or replayed.

A setup is a function of its choices (``space.draw_setup``): each dimension asks for an integer
below some bound, and 0 always means its simplest option. So a seeded sampler gives random setups,
and a shrinker (``shrink.py``) finds a simpler failing setup by replaying the choices with some set
to 0, lowered or left out: every replay is a valid setup, because the space only ever asks for
options that fit what it drew before.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["Choices"]

T = TypeVar("T")


class Choices:
    """Where a setup's choices come from: ``replay`` first, then a seeded generator, then 0."""

    def __init__(self, seed: str | None = None, replay: Sequence[int] = ()) -> None:
        self.random = random.Random(seed) if seed is not None else None
        self.replay = list(replay)
        self.made: list[int] = []

    def below(self, bound: int) -> int:
        """An integer in ``[0, bound)``."""
        if bound <= 1:
            return 0
        index = len(self.made)
        if index < len(self.replay):
            value = min(max(self.replay[index], 0), bound - 1)
        elif self.random is not None:
            value = self.random.randrange(bound)
        else:
            value = 0
        self.made.append(value)
        return value

    def pick(self, options: Sequence[T]) -> T:
        """One of ``options``; the first is the simplest."""
        return options[self.below(len(options))]

    def maybe(self, percent: int) -> bool:
        """True ``percent`` times in a hundred; False is the simpler."""
        return self.below(100) >= 100 - percent

    def between(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``; ``low`` is the simplest."""
        return low + self.below(high - low + 1) if high > low else low

    def weighted(self, options: Sequence[tuple[T, int]]) -> T:
        """One of ``options`` by weight (``(option, weight)``); the first is the simplest."""
        total = sum(weight for _, weight in options)
        value = self.below(total)
        for option, weight in options:
            if value < weight:
                return option
            value -= weight
        return options[-1][0]
