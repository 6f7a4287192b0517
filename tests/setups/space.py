"""The space of training setups, and how one is drawn from choices.

A ``Setup`` is plain data (frozen dataclasses of strings, numbers and tuples): one module, one data
pipeline, one Trainer, one set of callbacks and loggers, checkpointing, one interruption, and the
processes it runs on. ``build.py`` turns it into objects in each fit's process. ``draw_setup`` draws
only setups plain Lightning runs: each dimension offers the options that fit what was drawn before
(an ``IterableDataset`` has no fraction of an epoch, ``BatchSizeFinder`` needs the data built in
hooks, ``StochasticWeightAveraging`` one optimizer, ...). Each field's first option is its simplest,
the one a shrink goes to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from setups.choices import Choices

__all__ = [
    "CallbackSpec",
    "CheckpointSpec",
    "DataSpec",
    "InterruptionSpec",
    "ModuleSpec",
    "Setup",
    "TrainerSpec",
    "draw_setup",
    "shown",
]


@dataclass(frozen=True)
class ModuleSpec:
    way: str = "typed"  # typed (TypedLightningModule) | adapter (LightningModule + StepResultAdapter)
    dropout: bool = False
    batchnorm: bool = False
    global_draws: str = "none"  # none | torch | numpy | random: training_step draws from that global stream
    held_generator: str = "none"  # none | torch | numpy | random: a generator the module holds, drawn in training_step
    attributes: tuple[str, ...] = ()  # of list | dict | counter | tensor: what training_step keeps in attributes
    optimization: str = "automatic"  # automatic | manual
    optimizers: int = 1  # 2: manual optimization, one per part of the network
    optimizer: str = "sgd"  # sgd (with momentum) | adam
    scheduler: str = "none"  # none | step (StepLR) | plateau (ReduceLROnPlateau on train_loss)
    interval: str = "epoch"  # the scheduler's: epoch | step
    frequency: int = 1
    accumulate: int = 1  # automatic: accumulate_grad_batches; manual: an optimizer step every N batches
    clip: bool = False  # gradient_clip_val=0.5 (manual: self.clip_gradients)
    metric: bool = False  # a torchmetrics MeanMetric of the outputs, logged per epoch
    step_metric: bool = False  # configure_step_metrics: the library's declared metric (MeanSquaredError)
    epoch_hook: bool = False  # on_train_epoch_start draws the epoch's input scale from torch's global stream
    saves_own: bool = False  # on_save_checkpoint / on_load_checkpoint of a counter of its own


@dataclass(frozen=True)
class DataSpec:
    rows: int = 14
    batch_size: int = 3
    loader: str = "plain"  # plain (DataLoader) | stateful (torchdata's StatefulDataLoader)
    # sequential | shuffle (shuffle=True) | loader_generator (shuffle=True, generator=) | random_generator
    # (RandomSampler(generator=)) | random_global (RandomSampler without a generator) | replacement |
    # weighted | subset | batch_sampler
    sampler: str = "sequential"
    workers: int = 0
    persistent: bool = False
    dataset: str = "map"  # map | iterable (an IterableDataset with state_dict())
    augment: str = "none"  # none | torch (torch's global stream in __getitem__) | held (a generator the dataset holds)
    via: str = "loaders"  # loaders (passed to fit) | datamodule | module (the module's *_dataloader hooks)
    reload: bool = False  # reload_dataloaders_every_n_epochs=1, with a draw in train_dataloader()
    train_loaders: int = 1  # 2: a dict of two, combined
    combine: str = "max_size_cycle"  # max_size_cycle | min_size | max_size
    val_loaders: int = 1  # 0 | 1 | 2
    val_order: str = "sequential"  # sequential | generator (shuffle=True with a generator of its own)


@dataclass(frozen=True)
class TrainerSpec:
    precision: str = "32-true"  # 32-true | 64-true | bf16-mixed | bf16-true
    max_epochs: int = 2
    limit_train_batches: int | float | None = None
    limit_val_batches: int | float | None = None
    val_check_interval: int | float | None = None
    check_val_every_n_epoch: int | None = 1
    max_steps: int = -1
    max_time: bool = False  # max_time="00:01:00:00": Lightning's Timer, never reached
    num_sanity_val_steps: int = 0
    log_every_n_steps: int = 1


@dataclass(frozen=True)
class CallbackSpec:
    """One callback: ``kind`` and its arguments (``options``, as (name, value) pairs)."""

    kind: str
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class CheckpointSpec:
    every: str = "none"  # none (Lightning's default ModelCheckpoint) | steps | epochs | time (every batch)
    every_n: int = 1
    save_last: bool | str = False  # False | True | "link"
    top_k: int = 1  # -1 | 1 | 2
    monitor: str | None = None
    on_exception: bool = False  # OnExceptionCheckpoint


@dataclass(frozen=True)
class InterruptionSpec:
    # exception | kill (SIGKILL after a periodic save) | sigterm | save (trainer.save_checkpoint, then an
    # exception: the resume starts from the user's file) | relaunch (of the finished job)
    how: str = "exception"
    # training_step | on_after_backward | on_before_optimizer_step | on_train_batch_end | on_train_epoch_start
    # | on_train_epoch_end | validation_step | on_validation_epoch_end | callback_batch_end |
    # callback_validation_end | callback_epoch_end | logger
    where: str = "training_step"
    at: int = 0  # percent through the fit's visits to `where` (in the uninterrupted fit)
    resume: str = "path"  # path (the checkpoint's file) | last (ckpt_path="last")
    process: str = "fresh"  # fresh (the resumed fit in a new process) | same (a retry in the same process)
    rank: int = 0  # under DDP: the process the fault lands on (the other dies as its peer goes)


@dataclass(frozen=True)
class Setup:
    module: ModuleSpec = field(default_factory=ModuleSpec)
    data: DataSpec = field(default_factory=DataSpec)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    callbacks: tuple[CallbackSpec, ...] = ()
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    loggers: tuple[str, ...] = ()  # csv | tensorboard | failing
    interruption: InterruptionSpec = field(default_factory=InterruptionSpec)
    processes: int = 1  # 2: DDP on gloo, two CPU processes


# --- drawing ---------------------------------------------------------------------------------------

MODULE_HOOKS = (
    "training_step",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "validation_step",
    "on_validation_epoch_end",
)
CALLBACK_HOOKS = ("callback_batch_end", "callback_validation_end", "callback_epoch_end")
TRAINING_PLACES = ("training_step", "on_after_backward", "on_before_optimizer_step", "on_train_batch_end")


def draw_setup(choices: Choices, processes: int = 1) -> Setup:
    """One valid setup from ``choices`` (``processes=2``: the DDP tier)."""
    module = _module(choices)
    data = _data(choices, module, processes)
    trainer = _trainer(choices, data, processes)
    callbacks = _callbacks(choices, module, data, trainer, processes)
    hows = (("exception", 40), ("kill", 20), ("save", 15), ("sigterm", 10), ("relaunch", 15))
    how = choices.weighted(hows if processes == 1 else hows[:2])  # under DDP: a fault on one rank
    checkpoint = _checkpoint(choices, data, trainer, how, processes)
    loggers = tuple(name for name in ("csv", "tensorboard") if choices.maybe(8))
    interruption = _interruption(choices, how, module, data, trainer, callbacks, checkpoint, processes)
    if interruption.where == "logger":
        loggers += ("failing",)
    # drawn last: a dimension added after the others leaves every earlier draw of a seed as it was
    if data.val_loaders > 0 and choices.maybe(20):
        data = replace(data, val_order="generator")
    return Setup(module, data, trainer, callbacks, checkpoint, loggers, interruption, processes)


def _module(c: Choices) -> ModuleSpec:
    way = c.pick(("typed", "adapter"))
    dropout = c.maybe(30)
    batchnorm = c.maybe(15)
    global_draws = c.weighted((("none", 70), ("torch", 10), ("numpy", 10), ("random", 10)))
    held = c.weighted((("none", 70), ("torch", 10), ("numpy", 10), ("random", 10)))
    attributes = tuple(name for name in ("list", "dict", "counter", "tensor") if c.maybe(25))
    manual = c.maybe(20)
    optimizers = c.between(1, 2) if manual else 1
    optimizer = c.pick(("sgd", "adam"))
    scheduler = c.weighted((("none", 55), ("step", 30), ("plateau", 15)))
    if manual and scheduler == "plateau":
        scheduler = "step"
    interval = c.pick(("epoch", "step")) if scheduler != "none" else "epoch"
    frequency = c.between(1, 2) if scheduler != "none" else 1
    accumulate = c.weighted(((1, 70), (2, 20), (3, 10)))
    clip = c.maybe(15)
    metric = c.maybe(25)
    step_metric = c.maybe(15)
    epoch_hook = c.maybe(15)
    saves_own = c.maybe(10)
    return ModuleSpec(
        way,
        dropout,
        batchnorm,
        global_draws,
        held,
        attributes,
        "manual" if manual else "automatic",
        optimizers,
        optimizer,
        scheduler,
        interval,
        frequency,
        accumulate,
        clip,
        metric,
        step_metric,
        epoch_hook,
        saves_own,
    )


SAMPLERS = (
    ("sequential", 30),
    ("shuffle", 15),
    ("loader_generator", 10),
    ("random_generator", 10),
    ("random_global", 8),
    ("replacement", 7),
    ("weighted", 7),
    ("subset", 7),
    ("batch_sampler", 6),
)


def _data(c: Choices, module: ModuleSpec, processes: int) -> DataSpec:
    rows = c.between(14, 32) if processes == 1 else c.between(28, 40)  # under DDP each rank trains on half
    batch_size = c.between(3, 6)
    while module.batchnorm and math.ceil(rows / processes) % batch_size == 1:
        rows += 1  # BatchNorm1d in training needs two rows in every batch (under DDP: of each process's share)
    loader = c.pick(("plain", "stateful"))
    dataset = "iterable" if c.maybe(12) else "map"
    sampler = c.weighted(SAMPLERS) if dataset == "map" else "sequential"
    if processes > 1 and sampler == "batch_sampler":
        # Lightning 2.6 rebuilds a loader given a BatchSampler with the DistributedSampler it puts in and no batch
        # size (`_update_dataloader`): one row at a time, which the loader's collate then stacks field by field
        # ("stack expects each tensor to be equal size"). Replaced without a draw, so the draws after it stay.
        sampler = "random_generator"
    workers = c.weighted(((0, 85), (1, 8), (2, 7)))
    if (module.batchnorm and dataset == "iterable") or processes > 1:
        workers = 0  # each worker's share ends in a batch of its own size; under DDP, a cost the tier saves
    persistent = workers > 0 and c.maybe(40)
    augment = c.weighted((("none", 70), ("torch", 15), ("held", 15)))
    via = c.weighted((("loaders", 60), ("datamodule", 25), ("module", 15)))
    reload = via != "loaders" and c.maybe(25)
    train_loaders = 2 if c.maybe(12) else 1
    combine = c.pick(("max_size_cycle", "min_size", "max_size")) if train_loaders == 2 else "max_size_cycle"
    val_loaders = c.weighted(((1, 60), (0, 30), (2, 10)))
    return DataSpec(
        rows,
        batch_size,
        loader,
        sampler,
        workers,
        persistent,
        dataset,
        augment,
        via,
        reload,
        train_loaders,
        combine,
        val_loaders,
    )


def batches_per_epoch(data: DataSpec, limit: int | float | None = None, processes: int = 1) -> int | None:
    """Training batches in an epoch (on each process: DDP's sampler gives each its share); None where the
    loader has no length (an IterableDataset)."""
    if data.dataset == "iterable":
        return limit if isinstance(limit, int) else None
    one = math.ceil(math.ceil(data.rows / processes) / data.batch_size)
    second = math.ceil(math.ceil(SECOND_ROWS / processes) / data.batch_size)
    if data.train_loaders == 2:
        one = min(one, second) if data.combine == "min_size" else max(one, second)
    if isinstance(limit, int):
        return min(one, limit)
    if isinstance(limit, float):
        return max(1, int(one * limit))
    return one


SECOND_ROWS = 20  # the second training loader's rows
VAL_ROWS = 12  # each validation loader's rows


def _trainer(c: Choices, data: DataSpec, processes: int) -> TrainerSpec:
    precision = c.weighted((("32-true", 70), ("64-true", 10), ("bf16-mixed", 10), ("bf16-true", 10)))
    if processes > 1 and precision in ("64-true", "bf16-true"):
        precision = "32-true"  # gloo's all-reduce of the gradients in float32 and bf16-mixed only
    max_epochs = c.weighted(((2, 50), (1, 30), (3, 20)))
    natural = batches_per_epoch(data, None, processes)
    limit_train: int | float | None = None
    if c.maybe(25):
        limit_train = 0.5 if natural is not None and c.maybe(30) else c.between(3, 6)
    if natural is None and limit_train is None and c.maybe(50):
        limit_train = c.between(3, 6)  # an IterableDataset's epoch: its rows, or a limit
    batches = batches_per_epoch(data, limit_train, processes)
    validates = data.val_loaders > 0
    limit_val: int | float | None = None
    interval: int | float | None = None
    every_n: int | None = 1
    sanity = 0
    if validates:
        limit_val = c.pick((None, 2, 0.5))
        if limit_val == 0.5 and math.ceil(math.ceil(VAL_ROWS / processes) / data.batch_size) < 2:
            # under DDP each process validates on its share: half of one batch is none (Lightning refuses it);
            # replaced without a draw, so the draws after it stay
            limit_val = None
        kind = c.weighted((("epoch", 60), ("int", 25), ("fraction", 15)))
        if kind == "fraction" and batches is not None:
            interval = 0.5
        elif kind == "int" and batches is not None:
            interval = c.between(1, batches)
        elif kind != "epoch":
            interval = c.between(2, 5)
            every_n = None  # an epoch without a length: every N batches across epochs
        if every_n is not None:
            every_n = c.weighted(((1, 80), (2, 20)))
        sanity = c.pick((0, 2))
    total = batches * max_epochs if batches is not None else 10 * max_epochs
    max_steps = c.between(2, total) if c.maybe(12) else -1
    max_time = c.maybe(8)
    log_every = c.pick((1, 2, 50))
    return TrainerSpec(
        precision, max_epochs, limit_train, limit_val, interval, every_n, max_steps, max_time, sanity, log_every
    )


def validates_every_epoch(data: DataSpec, trainer: TrainerSpec) -> bool:
    """Whether a validation runs in every epoch (so that its loss is there at each epoch's end): not
    where ``max_steps`` can end an epoch before its validation."""
    return data.val_loaders > 0 and trainer.check_val_every_n_epoch == 1 and trainer.max_steps == -1


def _callbacks(
    c: Choices, module: ModuleSpec, data: DataSpec, trainer: TrainerSpec, processes: int
) -> tuple[CallbackSpec, ...]:
    found: list[CallbackSpec] = []
    automatic_one = module.optimization == "automatic" and module.optimizers == 1
    one_process = processes == 1  # Lightning's finders run on one process
    monitor = "val_loss_0" if validates_every_epoch(data, trainer) else "train_loss_step"
    if c.maybe(12):
        found.append(
            CallbackSpec(
                "early_stopping",
                (("monitor", monitor), ("patience", c.between(0, 2)), ("mode", c.pick(("min", "max")))),
            )
        )
    if c.maybe(12):
        found.append(CallbackSpec("lr_monitor", (("logging_interval", c.pick((None, "step", "epoch"))),)))
    if automatic_one and module.scheduler == "none" and c.maybe(8):
        found.append(CallbackSpec("swa", (("swa_epoch_start", c.pick((1, 0.5))),)))
    if automatic_one and module.accumulate == 1 and c.maybe(8):
        found.append(CallbackSpec("accumulation_scheduler"))
    builds_in_hooks = data.via != "loaders" and data.dataset == "map" and data.train_loaders == 1
    if (
        one_process
        and builds_in_hooks
        and not module.batchnorm
        and not isinstance(trainer.val_check_interval, int)
        and c.maybe(10)
    ):
        found.append(CallbackSpec("batch_size_finder"))
    if one_process and automatic_one and c.maybe(6):
        found.append(CallbackSpec("lr_finder"))
    if trainer.precision in ("32-true", "bf16-mixed") and c.maybe(6):  # its float32 masks need float32 weights
        found.append(CallbackSpec("pruning"))
    if c.maybe(5):
        found.append(CallbackSpec("model_summary"))
    if c.maybe(6):
        found.append(CallbackSpec("weight_averaging", (("every", c.between(1, 2)),)))
    if c.maybe(6):
        found.append(CallbackSpec("timer"))
    if c.maybe(8):
        found.append(CallbackSpec("lambda"))
    for _ in range(c.weighted(((0, 55), (1, 35), (2, 10)))):
        options = (
            ("state_dict", c.maybe(50)),
            ("per_rank", c.maybe(30)),
            ("epoch_start", c.weighted((("none", 60), ("records", 20), ("sets_up", 20)))),
            ("logs", c.maybe(30)),
            ("deque", c.maybe(10)),
        )
        found.append(CallbackSpec("user", options))
    return tuple(found)


def _checkpoint(c: Choices, data: DataSpec, trainer: TrainerSpec, how: str, processes: int) -> CheckpointSpec:
    every = c.weighted((("none", 30), ("steps", 40), ("epochs", 20), ("time", 10)))
    if (how == "kill" and trainer.max_epochs == 1 and every in ("none", "epochs")) or processes > 1:
        every = "steps"  # a kill needs a periodic save before it: one inside the fit's only epoch
    every_n = c.between(1, 4) if every == "steps" else 1
    batches = batches_per_epoch(data, trainer.limit_train_batches, processes) or 4
    every_n = min(every_n, max(1, batches * trainer.max_epochs // 2))  # a save halfway through the fit, at the latest
    save_last = c.weighted(((False, 40), (True, 50), ("link", 10)))
    top_k = c.pick((-1, 1, 2)) if every != "none" else 1
    monitor = None
    if every != "none" and (top_k == 2 or c.maybe(30)):
        at_epochs = every in ("epochs", "none")
        monitor = "val_loss_0" if at_epochs and validates_every_epoch(data, trainer) else "train_loss_step"
    on_exception = c.maybe(50)
    if how in ("exception", "sigterm") and trainer.max_epochs == 1 and every in ("none", "epochs"):
        on_exception = True  # else nothing saved before the fault but the fit's end
    if processes > 1:  # a restart from last.ckpt: one rank's exception saves nothing every rank reaches
        save_last, on_exception = True, False
    return CheckpointSpec(every, every_n, save_last, top_k, monitor, on_exception)


def _interruption(
    c: Choices,
    how: str,
    module: ModuleSpec,
    data: DataSpec,
    trainer: TrainerSpec,
    callbacks: tuple[CallbackSpec, ...],
    checkpoint: CheckpointSpec,
    processes: int,
) -> InterruptionSpec:
    places = list(MODULE_HOOKS)
    if module.optimization == "manual":
        places.remove("on_before_optimizer_step")
    if any(spec.kind == "user" for spec in callbacks):
        places += CALLBACK_HOOKS
    every = trainer.check_val_every_n_epoch
    if data.val_loaders == 0 or (every is not None and every > trainer.max_epochs) or trainer.max_steps != -1:
        places = [place for place in places if "validation" not in place]  # a validation may not come
    if how == "exception":
        places.append("logger")
    if how == "kill" or processes > 1:
        places = [place for place in places if place in TRAINING_PLACES or place == "callback_batch_end"]
    where = c.pick(tuple(places)) if how != "relaunch" else "training_step"
    at = c.below(100)
    # ckpt_path="last": the newest of last.ckpt and OnExceptionCheckpoint's file (not a save of the user's)
    has_last = checkpoint.save_last is not False or (checkpoint.on_exception and how in ("exception", "sigterm"))
    resume = c.pick(("path", "last")) if has_last and how != "save" else "path"
    same = how in ("exception", "save", "relaunch") and processes == 1 and c.maybe(30)
    rank = c.below(processes)
    return InterruptionSpec(how, where, at, resume, "same" if same else "fresh", rank)


# --- showing ---------------------------------------------------------------------------------------


def shown(value: Any) -> str:
    """A setup as Python source, with only what differs from the defaults (what a regression test holds)."""
    if is_dataclass(value) and not isinstance(value, type):
        parts = [
            f"{item.name}={shown(getattr(value, item.name))}"
            for item in fields(value)
            if getattr(value, item.name) != _default(type(value), item.name)
        ]
        return f"{type(value).__name__}({', '.join(parts)})"
    if isinstance(value, tuple):
        items: tuple[Any, ...] = value
        inner = ", ".join(shown(item) for item in items)
        return f"({inner},)" if len(items) == 1 else f"({inner})"
    return repr(value)


_ALWAYS = object()


def _default(cls: type, name: str) -> Any:
    try:
        return getattr(cls(), name)
    except TypeError:  # a dataclass without defaults for every field: every field shown
        return _ALWAYS
