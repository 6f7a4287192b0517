"""Where a checked fit is interrupted, and the callback that interrupts it there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Interrupted", "Interruption", "Interrupter", "default_interruptions"]

Kind = Literal["batch", "validation", "epoch_end", "kill_after_checkpoint"]


class Interrupted(RuntimeError):
    """Stands for the failure that stops a checked fit: an out-of-memory error, a lost node, a kill."""


@dataclass(frozen=True)
class Interruption:
    """One place to interrupt a fit and resume it.

    Build one with ``in_batch``, ``in_validation``, ``at_epoch_end`` or ``kill_after_checkpoint``.
    """

    kind: Kind
    epoch: int = 0
    batch: int = 0  # in_batch: the training batch of ``epoch`` (0 is the first)
    step: int = 0  # kill_after_checkpoint: the global step ModelCheckpoint saves at

    @classmethod
    def in_batch(cls, epoch: int, batch: int) -> Interruption:
        """Inside training batch ``batch`` of ``epoch``, after its backward and before the optimizer step.

        An exception is raised from a callback's ``on_after_backward`` (from its ``on_train_batch_end``
        where the batch has no backward); ``OnExceptionCheckpoint`` saves, and the fit resumes from that.
        """
        return cls("batch", epoch, batch)

    @classmethod
    def in_validation(cls, epoch: int) -> Interruption:
        """Inside the first validation of ``epoch`` (not the sanity check), at its first batch's end."""
        return cls("validation", epoch)

    @classmethod
    def at_epoch_end(cls, epoch: int) -> Interruption:
        """In ``on_train_epoch_end`` of ``epoch``, from a callback."""
        return cls("epoch_end", epoch)

    @classmethod
    def kill_after_checkpoint(cls, step: int) -> Interruption:
        """``ModelCheckpoint(every_n_train_steps=step)`` saves at global step ``step``; the fit dies two
        training batches later with nothing saved, and resumes from that periodic checkpoint."""
        return cls("kill_after_checkpoint", step=step)

    def __str__(self) -> str:
        if self.kind == "batch":
            return f"inside batch {self.batch} of epoch {self.epoch}"
        if self.kind == "validation":
            return f"inside epoch {self.epoch}'s first validation"
        if self.kind == "epoch_end":
            return f"at the end of epoch {self.epoch}"
        return f"a kill 2 batches after the checkpoint at step {self.step}"


def default_interruptions(batches: int, epochs: int, steps: int, validates: bool) -> list[Interruption]:
    """The spread the check chooses from the uninterrupted fit: ``batches`` per epoch, ``epochs`` run,
    ``steps`` optimizer steps in all, whether it validated.

    Inside epoch 0's middle and last batches and the next epoch's first (epoch 0's first when the fit
    runs one epoch), inside a validation, at epoch 0's end, and a kill after a periodic checkpoint
    saved halfway through epoch 0.
    """
    points = [Interruption.in_batch(0, batches // 2)]
    points.append(Interruption.in_batch(1, 0) if epochs > 1 else Interruption.in_batch(0, 0))
    if batches > 1:
        points.append(Interruption.in_batch(0, batches - 1))
    if validates:
        points.append(Interruption.in_validation(0))
    points.append(Interruption.at_epoch_end(0))
    per_epoch = max(1, steps // max(1, epochs))
    if steps >= 2:
        points.append(Interruption.kill_after_checkpoint(max(1, per_epoch // 2)))
    return list(dict.fromkeys(points))


class Interrupter:
    """The hooks a checked fit's interrupting callback runs (wrapped in each Lightning package's
    ``Callback`` by ``runs.py``): fires once, where its interruption is due."""

    def __init__(
        self, point: Interruption | None, snapshot: Callable[[Any], dict[str, Any]] | None = None, every: bool = False
    ) -> None:
        self.point = point
        # the module's plain attributes at a training batch's start, by (epoch, batch): at every batch
        # (``every``: the uninterrupted fit), else at the fit's first batch only (a resumed fit)
        self.snapshot: Callable[[Any], dict[str, Any]] | None = snapshot
        self.every: bool = every
        self.attributes_at: dict[tuple[int, int], dict[str, Any]] = {}
        self.fired: bool = False
        self.batches_after_save: int | None = None  # kill_after_checkpoint: training batches since the save
        self.validated: bool = False  # whether a validation ran in the fit (the sanity check aside)
        self.in_epoch_end: bool = False  # from on_train_epoch_end on: the rows logged are the epoch's end rows
        self.trained: list[tuple[int, int]] = []  # (epoch, batch) of each training batch started
        self.saves: list[tuple[int, int, int, str]] = []  # (epoch, batches started, global step, where) per save
        self.kill: Callable[[], None] | None = None  # how a kill ends the fit (none: an exception)

    @property
    def state_key(self) -> str:
        return "lightning_step_types.check_resume.Interrupter"

    def _due(self, kind: Kind, trainer: Any) -> bool:
        point = self.point
        if self.fired or point is None or point.kind != kind or trainer.sanity_checking:
            return False
        return kind == "kill_after_checkpoint" or int(trainer.current_epoch) == point.epoch

    def _fire(self) -> None:
        self.fired = True
        if self.kill is not None and self._point().kind == "kill_after_checkpoint":
            self.kill()
        raise Interrupted(f"check_resume: interrupted {self.point}")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        where = (int(trainer.current_epoch), self._batch_in_flight(trainer))
        self.trained.append(where)
        if self.snapshot is not None and (self.every or not self.attributes_at):
            self.attributes_at[where] = self.snapshot(pl_module)
        if self._due("kill_after_checkpoint", trainer) and self.batches_after_save is not None:
            if self.batches_after_save >= 2:
                self._fire()

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._due("batch", trainer) and self._batch_in_flight(trainer) == self._point().batch:
            self._fire()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._due("batch", trainer) and self._batch_in_flight(trainer) == self._point().batch:
            self._fire()  # a batch without a backward (manual optimization that skipped it)
        if self._due("kill_after_checkpoint", trainer):
            if self.batches_after_save is not None:
                self.batches_after_save += 1
            elif int(trainer.global_step) >= self._point().step:
                self.batches_after_save = 0

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.validated = True
            if self._due("validation", trainer):
                self._fire()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.in_epoch_end = False

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.in_epoch_end = True
        if self._due("epoch_end", trainer):
            self._fire()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        where = "validation" if trainer.validating else "epoch_end" if self.in_epoch_end else "batch"
        started = int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)
        self.saves.append((int(trainer.current_epoch), started, int(trainer.global_step), where))

    def _point(self) -> Interruption:
        assert self.point is not None
        return self.point

    @staticmethod
    def _batch_in_flight(trainer: Any) -> int:
        """The training batch in flight, by Lightning's public progress counters."""
        return int(trainer.fit_loop.epoch_loop.batch_progress.current.ready) - 1
