"""The families of failures the generator has found and whose fixes are open.

``tests/test_generated_setups.py`` tolerates a failure of one of these families (and reports it);
any other fails it. A family is what its failures have in common, found by shrinking them: the
verdict's name (its outcome and what differs first, a regular expression here) and, where the name
alone would cover other causes, what the setup has (``where``). A verdict ``unnamed: X (warned: ...)``
(a warning came, but not about X) is matched as ``silent: X`` would be: X's cause is the family's.

A family is kept as a test in ``tests/test_generated_regressions.py`` (shrunk where it has been), marked
as an expected failure: when its fix lands, that test passes, its mark goes, and so does the family here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from setups.oracle import Verdict
from setups.space import Setup

__all__ = ["KNOWN", "Family", "known_family"]


@dataclass(frozen=True)
class Family:
    name: str
    pattern: str  # the verdict's family, in full
    where: Callable[[Setup, Verdict], bool] | None = None


def _silent(what: str) -> str:
    """``silent: <what>``, or ``unnamed: <what> (warned: ...)``: a warning that named something else."""
    return rf"(silent: {what}|unnamed: {what} \(warned: [^)]*\))"


KNOWN: tuple[Family, ...] = (
    Family(
        "a kill, resumed from the best file top-k kept (not the newest): ModelCheckpoint skips a save, rows shift",
        _silent("(callback states|callback attributes|rows|checkpoint files)"),
        lambda setup, verdict: (
            setup.interruption.how == "kill"
            and setup.checkpoint.monitor is not None
            and setup.checkpoint.save_last is False
        ),
    ),
    Family(
        "ModelPruning's _global_kwargs after a resume",
        _silent("(callback attributes|callback states|checkpoint files)"),
        lambda setup, verdict: any("ModelPruning" in difference for difference in verdict.differences),
    ),
)


def known_family(verdict: Verdict, setup: Setup) -> str | None:
    """The known family ``verdict``'s failure is of; None for a new one (or a verdict that did not fail)."""
    if not verdict.failed:
        return None
    for family in KNOWN:
        if re.fullmatch(family.pattern, verdict.family) and (family.where is None or family.where(setup, verdict)):
            return family.name
    return None
