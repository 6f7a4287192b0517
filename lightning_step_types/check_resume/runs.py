"""One checked fit: built fresh from the user's factories, in a folder of its own, and what it ended with.

Each fit seeds every random generator (``seed_everything(seed, workers=True)``) before it builds the
module, data and callbacks, and runs under ``Trainer(deterministic=True)`` unless the Trainer's
arguments say otherwise. A logger that records every row the Trainer hands its loggers (what
``CSVLogger`` writes), tagged with where in the fit it was logged, comes first among them.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import logging
import time
import types
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeGuard, cast

import torch

from lightning_step_types._lightning.fit_loop import logger_step
from lightning_step_types.check_resume.points import Interrupted, Interrupter, Interruption
from lightning_step_types.errors import StepResultWarning

try:  # both Lightning packages seed the same generators and set the same environment variables
    from lightning_fabric.utilities.seed import seed_everything
except ModuleNotFoundError:  # only the `lightning` package
    from lightning.fabric.utilities.seed import seed_everything

__all__ = [
    "Built",
    "Fit",
    "Killed",
    "Row",
    "Setup",
    "is_mapping",
    "is_sequence",
    "kill_this_fit",
    "lightning_of",
    "run_fit",
]

PLAIN = (type(None), bool, int, float, complex, str, bytes)


@dataclass
class Built:
    """What one fit runs: made anew for each fit, so that no fit sees another's objects."""

    module: Any
    datamodule: Any = None
    train_dataloaders: Any = None
    val_dataloaders: Any = None
    callbacks: list[Any] = field(default_factory=lambda: [])
    loggers: list[Any] = field(default_factory=lambda: [])  # beside the check's own, which comes first


@dataclass
class Setup:
    """The user's run: ``build`` makes a fit's objects, ``trainer`` holds the Trainer's other arguments."""

    build: Callable[[], Built]
    trainer: Mapping[str, Any]
    exact_resume: bool = True
    seed: int = 0


@dataclass(frozen=True)
class Row:
    """One row a logger was given: where in the fit (epoch, batches completed (0 in the epoch's
    on_train_epoch_start hooks), what logged it: 0 a training batch, 1 a validation, 2 the epoch's end;
    its index among the rows logged there), the step column and the values."""

    position: tuple[int, int, int, int]
    step: int
    values: tuple[tuple[str, float], ...]


@dataclass
class Fit:
    """What one fit ended with, copied out of its Trainer and module."""

    root: Path
    state: dict[str, torch.Tensor]
    attributes: dict[str, Any]
    attributes_at: dict[tuple[int, int], dict[str, Any]]  # at training batches' starts, by (epoch, batch)
    optimizers: list[Any]
    schedulers: list[Any]
    counters: dict[str, int]
    callback_metrics: dict[str, torch.Tensor]
    logged_metrics: dict[str, torch.Tensor]
    callbacks: dict[str, Any]
    checkpoint_dirs: list[Path]
    rows: list[Row]
    warnings: list[str]  # the library's StepResultWarning messages
    lightning_warnings: list[str]  # Lightning's own warnings about the resume (a loader it cannot resume)
    error: BaseException | None
    seconds: float
    fired: bool
    resume_from: Path | None
    batches: int = 0
    validated: bool = False
    # the plain attributes of each callback, by the key ``callbacks`` uses (see `callback_attributes`)
    callback_attributes: dict[str, dict[str, Any]] = field(default_factory=lambda: {})
    trained: list[tuple[int, int]] = field(default_factory=lambda: [])  # (epoch, batch) of each batch started
    # each checkpoint saved: (epoch, batches started in it, global step, where: "batch", "validation", "epoch_end")
    saves: list[tuple[int, int, int, str]] = field(default_factory=lambda: [])
    rank: int = 0
    resumed_from: Path | None = None  # the checkpoint this fit resumed from (``ckpt_path="last"`` resolved)
    cpu_seconds: float = 0.0  # in a fresh process: the CPU time its process (and its loaders' workers) used


class Killed(Interrupted):
    """A fit that died the way ``kill -9`` ends one: no hook ran after the kill, nothing saved at it."""


def lightning_of(module: Any) -> types.ModuleType:
    """The Lightning package ``module`` is a LightningModule of (``pytorch_lightning`` or ``lightning.pytorch``)."""
    for name in ("pytorch_lightning", "lightning.pytorch"):
        try:
            package = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if isinstance(module, package.LightningModule):
            return package
    raise TypeError(
        f"check_resume: the module factory returned {type(module).__name__}, not a LightningModule;"
        " expected a LightningModule of pytorch_lightning or lightning.pytorch; fix: pass a factory that"
        " builds your module, e.g. `lambda: MyModel(lr=0.05)`"
    )


_CLASSES: dict[tuple[str, str], type] = {}


def _class(package: types.ModuleType, kind: str) -> type:
    key = (package.__name__, kind)
    if key not in _CLASSES:
        if kind == "interrupter":
            _CLASSES[key] = type("Interrupter", (Interrupter, package.Callback), {})
        else:
            _CLASSES[key] = type("RowRecorder", (_RowRecorder, package.loggers.logger.Logger), {})
    return _CLASSES[key]


class _RowRecorder:
    """Every row the Trainer's logger connector writes, with where it was logged."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.trainer: Any = None
        self.interrupter: Interrupter | None = None

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        trainer = self.trainer
        # in the on_train_epoch_start hooks (the epoch counted ready, not yet started): before the epoch's first
        # batch, though the batch counts are the last epoch's until the epoch's loop resets them after the hooks
        epoch = trainer.fit_loop.epoch_progress.current
        at_epoch_start = int(epoch.ready) > int(epoch.started)
        at_epoch_end = self.interrupter is not None and self.interrupter.in_epoch_end and not at_epoch_start
        place = (
            int(trainer.current_epoch),
            0 if at_epoch_start else int(trainer.fit_loop.epoch_loop.batch_progress.current.completed),
            1 if trainer.validating else 2 if at_epoch_end else 0,
        )
        index = sum(row.position[:3] == place for row in self.rows)
        values = tuple(sorted((name, float(value)) for name, value in metrics.items()))
        self.rows.append(Row((*place, index), int(step or 0), values))


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    return isinstance(value, Mapping)


def is_sequence(value: object) -> TypeGuard[list[Any] | tuple[Any, ...]]:
    return isinstance(value, (list, tuple))


def _switch_off_exact_resume(built: Built) -> None:
    """Plain Lightning's resume: ``exact_resume = False`` on a typed module and on every StepResultAdapter."""
    if hasattr(built.module, "exact_resume"):
        built.module.exact_resume = False
    for callback in built.callbacks:
        if hasattr(callback, "exact_resume"):
            callback.exact_resume = False


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if is_mapping(value):
        return {key: _copied(item) for key, item in value.items()}
    if is_sequence(value):
        copied = [_copied(item) for item in value]
        return tuple(copied) if isinstance(value, tuple) else copied
    try:
        return copy.deepcopy(value)
    except Exception:  # an object that cannot be copied: what it prints as
        return repr(value)


def _is_plain(value: Any) -> bool:
    if isinstance(value, PLAIN) or (isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_is_plain(item) for item in cast("Iterable[Any]", value))
    if is_mapping(value):
        return all(_is_plain(k) and _is_plain(v) for k, v in value.items())
    return False


def plain_attributes(module: Any, package: types.ModuleType) -> dict[str, Any]:
    """The module's own plain attributes (numbers, strings, tensors that are neither parameters nor
    buffers, and containers of them), leaving out those every LightningModule has."""
    every = _LIGHTNING_ATTRIBUTES.get(package.__name__)
    if every is None:
        bare = cast("dict[str, Any]", vars(package.LightningModule()))
        every = _LIGHTNING_ATTRIBUTES[package.__name__] = set(bare)
    own = cast("dict[str, Any]", vars(module))
    return {
        name: _copied(value)
        for name, value in own.items()
        if not name.startswith("_") and name not in every and _is_plain(value)
    }


_LIGHTNING_ATTRIBUTES: dict[str, set[str]] = {}

# Lightning's callbacks whose state is the time, the machine, a display or a search before the fit,
# which no resumed fit can or should equal; and the attributes of others that hold a clock's reading.
# The check's own list, not the library's (resume/holders.py): a checker that shared what it checks
# would be blind where that is wrong.
_UNCOMPARED_CALLBACKS = (
    "Timer",
    "DeviceStatsMonitor",
    "ProgressBar",
    "ModelSummary",
    "BatchSizeFinder",
    "LearningRateFinder",
    "ThroughputMonitor",
)
_CLOCK_ATTRIBUTES = {"ModelCheckpoint": frozenset({"_last_time_checked"})}


def callback_attributes(callback: Any) -> dict[str, Any] | None:
    """A callback's plain attributes (those its class does not define as methods), its own and
    Lightning's private ones too; None for the library's callbacks and those whose state is the clock's."""
    kinds = [cls.__name__ for cls in type(callback).__mro__]
    if type(callback).__module__.startswith("lightning_step_types") or any(
        name in kinds for name in _UNCOMPARED_CALLBACKS
    ):
        return None
    none: frozenset[str] = frozenset()
    clock = none.union(*(_CLOCK_ATTRIBUTES.get(kind, none) for kind in kinds))
    cls: type = callback.__class__
    own = cast("dict[str, Any]", getattr(callback, "__dict__", {}))
    return {
        name: _copied(value)
        for name, value in own.items()
        if name not in clock and not callable(getattr(cls, name, None)) and _is_plain(value)
    }


_KILL: list[Callable[[], None]] = []  # the running fit's kill, where it runs in a process of its own


def kill_this_fit() -> NoReturn:
    """Ends the running fit as ``kill -9`` would: in a fresh process, the process dies (SIGKILL) once the
    check has its record; in the calling process, an exception that no hook saves on (``Killed``)."""
    if _KILL:
        _KILL[-1]()
    raise Killed("check_resume: killed")


def run_fit(
    setup: Setup,
    root: Path,
    point: Interruption | None,
    resume_from: Path | str | None,
    kill: Callable[[Callable[[], Fit]], NoReturn] | None = None,
) -> Fit:
    """One fit of ``setup`` in ``root``: interrupted at ``point`` (none: the uninterrupted fit, or one
    whose setup interrupts itself), resumed from ``resume_from`` (a path, or ``"last"`` as
    ``trainer.fit(ckpt_path="last")`` takes it; none: from the start). ``kill``: how a kill ends the
    fit, given its record (none: ``kill_this_fit`` raises ``Killed``)."""
    root.mkdir(parents=True, exist_ok=True)
    seed_everything(setup.seed, workers=True, verbose=False)
    built = setup.build()
    package = lightning_of(built.module)
    if not setup.exact_resume:
        _switch_off_exact_resume(built)
    callbacks_module = package.callbacks
    user_callbacks = list(built.callbacks)
    if setup.trainer.get("enable_checkpointing", True) and not any(
        isinstance(callback, callbacks_module.ModelCheckpoint) for callback in user_callbacks
    ):
        user_callbacks.append(callbacks_module.ModelCheckpoint())  # the one Lightning adds by default

    def snapshot(module: Any) -> dict[str, Any]:
        return plain_attributes(module, package)

    interrupter = _class(package, "interrupter")(point, snapshot, every=point is None and resume_from is None)
    checks: list[Any] = [interrupter]
    if point is not None:  # the check's own interruptions: an exception this saves on
        checks.append(callbacks_module.OnExceptionCheckpoint(dirpath=str(root / "interrupted")))
    if point is not None and point.kind == "kill_after_checkpoint":
        checks.append(
            callbacks_module.ModelCheckpoint(
                dirpath=str(root / "periodic"),
                filename="{step}",
                every_n_train_steps=point.step,
                save_top_k=-1,
                save_on_train_epoch_end=False,
            )
        )
    recorder: Any = _class(package, "recorder")()
    kwargs: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "deterministic": True,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        **setup.trainer,
        "default_root_dir": str(root),
        "logger": [recorder, *built.loggers],
        "callbacks": checks + user_callbacks,  # the interrupter's hooks run before the user's
        # the check's own checkpoints need it; without them, Lightning adds its ModelCheckpoint only where
        # the user's arguments ask for one
        "enable_checkpointing": len(checks) > 1 or setup.trainer.get("enable_checkpointing", True),
    }
    started = time.perf_counter()
    error: BaseException | None = None
    quiet = [logging.getLogger(name) for name in (package.__name__, "lightning_fabric", "lightning.fabric")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:  # Lightning's info lines, once per fit, would bury the report
        logger.setLevel(logging.WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = package.Trainer(**kwargs)
        recorder.trainer, recorder.interrupter = trainer, interrupter

        def record(error: BaseException | None) -> Fit:
            seconds = time.perf_counter() - started
            parts = (trainer, built.module, package, user_callbacks, recorder, interrupter, caught)
            return _record(*parts, error, root, point, seconds)

        if kill is not None:
            _KILL.append(lambda: kill(lambda: record(Killed(f"check_resume: killed {point or 'by the setup'}"))))
            interrupter.kill = kill_this_fit
        try:
            trainer.fit(
                built.module,
                train_dataloaders=built.train_dataloaders,
                val_dataloaders=built.val_dataloaders,
                datamodule=built.datamodule,
                ckpt_path=str(resume_from) if resume_from is not None else None,
                **_own_files(package, resume_from),
            )
        except (Exception, SystemExit) as raised:  # the interruption (SIGTERM's is a SystemExit), or a failure
            error = raised
        finally:
            if kill is not None:
                _KILL.pop()
            for logger, level in zip(quiet, levels):
                logger.setLevel(level)
    return record(error)


def _own_files(package: types.ModuleType, resume_from: Path | str | None) -> dict[str, Any]:
    """``weights_only=False`` where the fit resumes: the check resumes only from files its own fits wrote
    (a module's hyperparameters may hold objects, as pytorch-forecasting's do, which torch's default
    ``weights_only=True`` load refuses); where ``Trainer.fit`` takes it (Lightning 2.6 and later)."""
    if resume_from is None or "weights_only" not in inspect.signature(package.Trainer.fit).parameters:
        return {}
    return {"weights_only": False}


def _record(
    trainer: Any,
    module: Any,
    package: types.ModuleType,
    user_callbacks: list[Any],
    recorder: Any,
    interrupter: Interrupter,
    caught: list[warnings.WarningMessage],
    error: BaseException | None,
    root: Path,
    point: Interruption | None,
    seconds: float,
) -> Fit:
    """What the fit holds now: at its end, or where it is killed."""
    callbacks_module = package.callbacks
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    lightning_messages = [
        str(w.message)
        for w in caught
        if "resuming from a checkpoint" in str(w.message) and str(w.message) not in messages
    ]
    keys = [f"{index}: {callback.state_key}" for index, callback in enumerate(user_callbacks)]
    attributes = {key: callback_attributes(callback) for key, callback in zip(keys, user_callbacks)}
    return Fit(
        root=root,
        state={name: _copied(value) for name, value in module.state_dict().items()},
        attributes=plain_attributes(module, package),
        attributes_at=interrupter.attributes_at,
        optimizers=[_copied(optimizer.state_dict()) for optimizer in trainer.optimizers],
        schedulers=[_copied(config.scheduler.state_dict()) for config in trainer.lr_scheduler_configs],
        counters={
            "global_step": int(trainer.global_step),
            "current_epoch": int(trainer.current_epoch),
            "logger step": logger_step(trainer),
            "epochs completed": int(trainer.fit_loop.epoch_progress.total.completed),
        },
        callback_metrics=_copied(dict(trainer.callback_metrics)),
        logged_metrics=_copied(dict(trainer.logged_metrics)),
        callbacks={key: _copied(callback.state_dict()) for key, callback in zip(keys, user_callbacks)},
        checkpoint_dirs=[
            Path(callback.dirpath)
            for callback in user_callbacks
            if isinstance(callback, callbacks_module.ModelCheckpoint) and callback.dirpath
        ],
        rows=list(recorder.rows),
        warnings=messages,
        lightning_warnings=lightning_messages,
        error=error,
        seconds=seconds,
        fired=interrupter.fired,
        resume_from=_resume_point(root, point, interrupter.fired),
        batches=int(trainer.num_training_batches) if trainer.num_training_batches != float("inf") else 0,
        validated=interrupter.validated,
        callback_attributes={key: value for key, value in attributes.items() if value is not None},
        trained=list(interrupter.trained),
        saves=list(interrupter.saves),
        rank=int(trainer.global_rank),
        resumed_from=Path(trainer.ckpt_path) if trainer.ckpt_path else None,
    )


def _resume_point(root: Path, point: Interruption | None, fired: bool) -> Path | None:
    """The checkpoint the interrupted fit left to resume from."""
    if point is None or not fired:
        return None
    if point.kind == "kill_after_checkpoint":
        saved = root / "periodic" / f"step={point.step}.ckpt"
        return saved if saved.exists() else None
    saved = root / "interrupted" / "on_exception.ckpt"
    return saved if saved.exists() else None


def timer_like(callback_key: str) -> bool:
    """Whether a callback's state holds wall-clock time (Lightning's ``Timer``): compared by its keys only."""
    return callback_key.split(": ", 1)[-1] == "Timer"
