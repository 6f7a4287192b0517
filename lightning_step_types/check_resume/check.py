"""The check itself: the uninterrupted fit, then each point's interrupted fit and its resume."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_step_types.check_resume.compare import differences
from lightning_step_types.check_resume.points import Interrupted, Interruption, default_interruptions
from lightning_step_types.check_resume.processes import FitJob, check_importable, run_in_fresh_process
from lightning_step_types.check_resume.report import PointReport, ResumeReport
from lightning_step_types.check_resume.runs import Built, Fit, Setup, run_fit

__all__ = ["Factories", "check_resume", "check_setup"]

_OWN = ("callbacks", "logger", "default_root_dir")
# how long a fresh process may run one fit before the check calls it hung and kills it
FRESH_PROCESS_LIMIT_S = 1800.0


@dataclass(frozen=True)
class Factories:
    """The user's factories: each call builds one fit's objects anew (picklable where they are)."""

    module: Callable[[], Any]
    datamodule: Callable[[], Any] | None = None
    train_dataloaders: Callable[[], Any] | None = None
    val_dataloaders: Callable[[], Any] | None = None
    callbacks: tuple[Callable[[], Any], ...] = field(default=())

    def __call__(self) -> Built:
        return Built(
            module=self.module(),
            datamodule=self.datamodule() if self.datamodule is not None else None,
            train_dataloaders=self.train_dataloaders() if self.train_dataloaders is not None else None,
            val_dataloaders=self.val_dataloaders() if self.val_dataloaders is not None else None,
            callbacks=[factory() for factory in self.callbacks],
        )

    def check_importable(self) -> None:
        """Raises ``TypeError`` naming the first factory a fresh process cannot import."""
        named = [("module", self.module), ("datamodule", self.datamodule)]
        named += [("train_dataloaders", self.train_dataloaders), ("val_dataloaders", self.val_dataloaders)]
        named += [("callbacks", factory) for factory in self.callbacks]
        for name, factory in named:
            if factory is not None:
                check_importable(name, factory)


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
    """Run your fit uninterrupted and, at each point, interrupted and resumed; report what differs.

    - ``module``: builds your LightningModule (``lambda: MyModel(lr=0.05)``); ``datamodule`` builds
      your LightningDataModule, or ``train_dataloaders`` / ``val_dataloaders`` build your loaders.
    - ``trainer``: the Trainer's arguments, as you pass them (``{"max_epochs": 2,
      "limit_train_batches": 8}`` keeps it short); ``callbacks``: one factory per callback (a callback
      holds state, so each fit gets its own). The check sets ``default_root_dir`` (a folder per fit),
      and the loggers (one that records every row).
    - ``points``: where to interrupt (``Interruption.in_batch(0, 5)``, ...); by default a spread the
      check chooses from the uninterrupted fit: inside epoch 0's middle and last batches and the next
      epoch's first, inside a validation, at epoch 0's end, and a kill after a periodic checkpoint.
    - ``exact_resume=False``: plain Lightning's resume (``exact_resume = False`` on a typed module and
      on every ``StepResultAdapter``), to see what it would do on the same setup.
    - ``seed``: each fit runs ``seed_everything(seed, workers=True)`` before building anything, under
      ``Trainer(deterministic=True)`` unless ``trainer`` says otherwise.
    - ``root``: where the fits write (a temporary folder, removed afterwards, by default).
    - ``fresh_processes=True``: every fit runs in a process of its own, as a relaunched job does, so that
      nothing of one fit reaches the next through memory (a module-level global, a class attribute, a
      library's registry); the factories must then be importable (module-level functions or classes, or
      ``functools.partial`` of them: a lambda raises ``TypeError``), and a kill ends its process with
      SIGKILL. A fresh process is forked from one that imported torch, Lightning and this library once.

    Every fit builds a fresh module, data, callbacks and Trainer from the factories, in a folder of its
    own; an interrupted fit and its resume share theirs, as a relaunched job does. By default every fit
    runs in this process: a kill stops its fit with an exception nothing saves on, so that the resume
    starts from the periodic checkpoint alone, and state kept outside the objects the factories build
    (a module-level global, a class attribute) is not rebuilt between fits.
    """
    kwargs = dict(trainer or {})
    for name in _OWN:
        if name in kwargs:
            raise TypeError(
                f"check_resume: trainer={{{name!r}: ...}}: the check sets {name!r} itself;"
                " expected callbacks as factories in `callbacks=[...]`, and no logger or default_root_dir;"
                f" fix: leave {name!r} out of trainer="
            )
    factories = Factories(module, datamodule, train_dataloaders, val_dataloaders, tuple(callbacks))
    if fresh_processes:
        factories.check_importable()
    setup = Setup(factories, kwargs, exact_resume, seed)
    return check_setup(setup, points, root, fresh_processes)


def check_setup(
    setup: Setup, points: Iterable[Interruption] | None, root: str | Path | None, fresh_processes: bool = False
) -> ResumeReport:
    """The check on a built setup (what ``check_resume`` and the command line share)."""
    run = _fresh if fresh_processes else _here
    if root is None:
        folder = Path(tempfile.mkdtemp(prefix="check_resume-"))
        try:
            return _check(setup, points, folder, run)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return _check(setup, points, Path(root), run)


Run = Callable[[FitJob], Fit]


def _here(job: FitJob) -> Fit:
    assert not callable(job.resume_from)
    return run_fit(job.setup, job.root, job.point, job.resume_from)


def _fresh(job: FitJob) -> Fit:
    (fit,) = run_in_fresh_process([job], FRESH_PROCESS_LIMIT_S)
    return fit


def _check(setup: Setup, points: Iterable[Interruption] | None, root: Path, run: Run) -> ResumeReport:
    reference = run(FitJob(setup, root / "uninterrupted"))
    if reference.error is not None:
        raise RuntimeError(
            f"check_resume: the uninterrupted fit failed with {type(reference.error).__name__}: {reference.error};"
            " expected a fit that runs to its end; fix: make the fit run on its own first"
        ) from reference.error
    chosen = (
        list(points)
        if points is not None
        else default_interruptions(
            reference.batches,
            reference.counters["epochs completed"],
            reference.counters["global_step"],
            reference.validated,
        )
    )
    reports: list[PointReport] = []
    fits = 1
    for index, point in enumerate(chosen):
        folder = root / f"point-{index}"
        interrupted = run(FitJob(setup, folder, point))
        fits += 1
        reports.append(_verdict(setup, reference, interrupted, point, folder, run))
        fits += 1 if interrupted.resume_from is not None else 0
    settings = tuple(
        f"{name}={setup.trainer.get(name, default)!r}"
        for name, default in (("deterministic", True), ("accelerator", "cpu"), ("devices", 1))
    )
    return ResumeReport(tuple(reports), fits, reference.seconds, setup.exact_resume, setup.seed, settings)


def _verdict(
    setup: Setup, reference: Fit, interrupted: Fit, point: Interruption, folder: Path, run: Run
) -> PointReport:
    if not interrupted.fired:
        why = f"the fit ended with {type(interrupted.error).__name__}: {interrupted.error}" if interrupted.error else ""
        return PointReport(point, "not reached", error=why or "the fit never came to this point")
    if interrupted.error is not None and not isinstance(interrupted.error, Interrupted):
        return PointReport(point, "differs", error=f"the interrupted fit failed: {_failure(interrupted.error)}")
    if interrupted.resume_from is None:
        return PointReport(point, "differs", error="the interrupted fit left no checkpoint to resume from")
    resumed = run(FitJob(setup, folder, None, interrupted.resume_from))
    messages = tuple(interrupted.warnings + resumed.warnings)
    if resumed.error is not None:
        return PointReport(
            point, "differs", warnings=messages, error=f"the resumed fit failed: {_failure(resumed.error)}"
        )
    found = tuple(differences(reference, [interrupted, resumed]))
    lightning = tuple(dict.fromkeys(interrupted.lightning_warnings + resumed.lightning_warnings))
    if messages:
        return PointReport(point, "warned", found, messages, lightning_warnings=lightning)
    return PointReport(point, "differs" if found else "exact", found, lightning_warnings=lightning)


def _failure(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"
