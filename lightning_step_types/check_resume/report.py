"""What the check found: a verdict per interruption point, and the summary it prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from lightning_step_types.check_resume.compare import Difference
from lightning_step_types.check_resume.points import Interruption

__all__ = ["PointReport", "ResumeReport", "Verdict"]

Verdict = Literal["exact", "warned", "differs", "not reached"]
SHOWN_DIFFERENCES = 5


@dataclass(frozen=True)
class PointReport:
    """One interruption point: the resumed chain against the uninterrupted fit.

    ``verdict``: ``"exact"`` (every compared value is bit for bit the uninterrupted fit's),
    ``"warned"`` (the library warned at the resume; ``warnings`` holds its ``StepResultWarning``
    messages, ``differences`` what differs), ``"differs"`` (something differs and nothing warned: a
    silent difference, or the resumed fit failed) or ``"not reached"`` (the fit never came to the point).
    """

    point: Interruption
    verdict: Verdict
    differences: tuple[Difference, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None  # the resumed fit's failure, or why the point was not reached
    lightning_warnings: tuple[str, ...] = ()  # Lightning's own warnings about the resume

    def __str__(self) -> str:
        lines = [f"{self.verdict:<11} {self.point}"]
        if self.error:
            lines.append(f"            {self.error}")
        for message in self.warnings:
            lines.append(f"            StepResultWarning: {message.splitlines()[0]}")
        for message in self.lightning_warnings:
            lines.append(f"            Lightning warned: {message.splitlines()[0]}")
        for difference in self.differences[:SHOWN_DIFFERENCES]:
            lines.append(f"            {difference}")
        if len(self.differences) > SHOWN_DIFFERENCES:
            lines.append(f"            ... and {len(self.differences) - SHOWN_DIFFERENCES} more items differ")
        return "\n".join(lines)


@dataclass(frozen=True)
class ResumeReport:
    """Every interruption point's verdict, and what the check cost."""

    points: tuple[PointReport, ...]
    fits: int  # the fits it ran: the uninterrupted one, then two per point (interrupted, resumed)
    reference_seconds: float  # how long the uninterrupted fit took
    exact_resume: bool
    seed: int
    settings: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """No point differs silently: each is exact, warned, or not reached."""
        return all(point.verdict != "differs" for point in self.points)

    def __str__(self) -> str:
        counts = {verdict: sum(p.verdict == verdict for p in self.points) for verdict in ("exact", "warned", "differs")}
        way = "exact resume" if self.exact_resume else "plain Lightning's resume (exact_resume=False)"
        head = [
            f"check_resume, {way}: {len(self.points)} interruption points, {counts['exact']} exact,"
            f" {counts['warned']} warned, {counts['differs']} differ",
            f"{self.fits} fits; the uninterrupted fit took {self.reference_seconds:.1f} s;"
            f" seed_everything({self.seed}, workers=True), {', '.join(self.settings)}",
        ]
        return "\n".join([*head, *(str(point) for point in self.points)])
