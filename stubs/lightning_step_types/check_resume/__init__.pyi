from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Difference",
    "Interruption",
    "PointReport",
    "ResumeReport",
    "check_resume",
]

@dataclass(frozen=True)
class Difference:
    """One item the resumed chain ends with that the uninterrupted fit does not: its two values."""

    item: str
    uninterrupted: str
    resumed: str

@dataclass(frozen=True)
class Interruption:
    """One place to interrupt a fit and resume it.

    Build one with ``in_batch``, ``in_validation``, ``at_epoch_end`` or ``kill_after_checkpoint``.
    """

    kind: Literal["batch", "validation", "epoch_end", "kill_after_checkpoint"]
    epoch: int = 0
    batch: int = 0
    step: int = 0
    @classmethod
    def in_batch(cls, epoch: int, batch: int) -> Interruption:
        """Inside training batch ``batch`` of ``epoch``, after its backward and before the optimizer step."""
    @classmethod
    def in_validation(cls, epoch: int) -> Interruption:
        """Inside the first validation of ``epoch`` (not the sanity check), at its first batch's end."""
    @classmethod
    def at_epoch_end(cls, epoch: int) -> Interruption:
        """In ``on_train_epoch_end`` of ``epoch``, from a callback."""
    @classmethod
    def kill_after_checkpoint(cls, step: int) -> Interruption:
        """``ModelCheckpoint(every_n_train_steps=step)`` saves at global step ``step``; the fit dies two
        training batches later with nothing saved, and resumes from that periodic checkpoint."""

@dataclass(frozen=True)
class PointReport:
    """One interruption point: the resumed chain against the uninterrupted fit."""

    point: Interruption
    verdict: Literal["exact", "warned", "differs", "not reached"]
    differences: tuple[Difference, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None
    lightning_warnings: tuple[str, ...] = ()

@dataclass(frozen=True)
class ResumeReport:
    """Every interruption point's verdict, and what the check cost."""

    points: tuple[PointReport, ...]
    fits: int
    reference_seconds: float
    exact_resume: bool
    seed: int
    settings: tuple[str, ...] = ()
    @property
    def ok(self) -> bool:
        """No point differs silently: each is exact, warned, or not reached."""

def check_resume(
    module: Callable[[], Any],
    *,
    datamodule: Callable[[], Any] | None = None,
    train_dataloaders: Callable[[], Any] | None = None,
    val_dataloaders: Callable[[], Any] | None = None,
    trainer: Mapping[str, Any] | None = None,
    callbacks: Iterable[Callable[[], Any]] = (),
    points: Iterable[Interruption] | None = None,
    exact_resume: bool = True,
    seed: int = 0,
    root: str | Path | None = None,
    fresh_processes: bool = False,
) -> ResumeReport:
    """Run your fit uninterrupted and, at each point, interrupted and resumed; report what differs."""
