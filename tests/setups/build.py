"""A drawn setup, built into the objects of one fit: module, data, callbacks, loggers, Trainer arguments.

``build(setup, plan)`` runs in each fit's own process (check_resume's fresh processes), from plain
data: the setup, and the interruption ``plan`` the interrupted fit carries (None in the others).
The plan is configuration set in ``__init__``, where the user's objects keep theirs: in the
module's ``config`` dict for a module hook, in the user callback's or the failing logger's
attributes otherwise. Every place a plan can land calls ``reach``, which counts the visits to each
(hook, epoch, batch) and fires the plan at its visit; the uninterrupted fit writes the visits it
made, in order, to ``places.json`` in its folder, and ``plan.py`` picks the interrupted fit's place
from them.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from limits import hang_limit
from pytorch_lightning.callbacks import (
    BatchSizeFinder,
    EarlyStopping,
    GradientAccumulationScheduler,
    LambdaCallback,
    LearningRateFinder,
    LearningRateMonitor,
    ModelCheckpoint,
    ModelPruning,
    ModelSummary,
    OnExceptionCheckpoint,
    StochasticWeightAveraging,
    Timer,
)
from pytorch_lightning.callbacks.weight_averaging import EMAWeightAveraging
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
from pytorch_lightning.loggers.logger import Logger
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities import CombinedLoader
from torch import nn
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from torchdata.stateful_dataloader import StatefulDataLoader
from torchmetrics import MeanMetric, MeanSquaredError

from lightning_step_types import StepMetric, StepResultAdapter, TrainStepResult, TypedLightningModule, ValStepResult
from lightning_step_types.check_resume.runs import Built, kill_this_fit
from setups.space import MODULE_HOOKS, SECOND_ROWS, VAL_ROWS, CallbackSpec, DataSpec, Setup

__all__ = ["PlannedFault", "ROOT", "build", "places_of", "trainer_arguments"]

FEATURES, HIDDEN = 4, 8
ROOT = "GENERATED_SETUP_ROOT"  # the environment variable holding the fit's folder
Plan = Mapping[str, Any]  # how, hook, epoch, batch, occurrence


class PlannedFault(RuntimeError):
    """The interrupted fit's planned failure: stands for an out-of-memory error, a lost device, a bug."""


# --- places --------------------------------------------------------------------------------------

_REACHED: dict[tuple[str, int, int], int] = {}  # visits to each (hook, epoch, batch) in this fit
_VISITS: list[tuple[str, int, int, int]] = []  # every visit, in order, and each checkpoint save ("save")
_TRAINERS: list[Any] = []  # the running fit's Trainer


def _root() -> Path:
    return Path(os.environ[ROOT])


def reach(hook: str, plan: Plan | None, batch: int | None = None) -> None:
    """A visit to ``hook`` (at the batch in flight, or ``batch``); fires ``plan`` at its visit."""
    if not _TRAINERS:
        return
    trainer = _TRAINERS[-1]
    epoch = int(trainer.current_epoch)
    if batch is None:
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        batch = int(progress.completed if trainer.validating or trainer.sanity_checking else progress.ready - 1)
    key = (hook, epoch, batch)
    visit = _REACHED[key] = _REACHED.get(key, 0) + 1
    _VISITS.append((hook, epoch, batch, visit))
    if (
        plan is not None
        and plan["hook"] == hook
        and (plan["epoch"], plan["batch"], plan["visit"]) == key[1:] + (visit,)
    ):
        if plan.get("rank", 0) == int(trainer.global_rank):
            _fire(plan, trainer)


def _fire(plan: Plan, trainer: Any) -> None:
    how = plan["how"]
    if how == "exception":
        raise PlannedFault(f"planned fault in {plan['hook']} at epoch {plan['epoch']} batch {plan['batch']}")
    if how == "kill":
        kill_this_fit()
    if how == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "save":  # the user's save, then the job fails: its resume starts from the user's file
        trainer.save_checkpoint(str(_root() / "user" / "saved.ckpt"))
        raise PlannedFault(
            f"planned fault after a save in {plan['hook']} at epoch {plan['epoch']} batch {plan['batch']}"
        )


class Places(pl.Callback):
    """The harness's own callback, first in every fit: hands ``reach`` the Trainer and writes the visits."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        _REACHED.clear()
        _VISITS.clear()
        _TRAINERS.append(trainer)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        _VISITS.append(("save", int(trainer.current_epoch), -1, 0))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if trainer.global_rank == 0:
            (_root() / "places.json").write_text(json.dumps(_VISITS), encoding="utf-8")
        if _TRAINERS:
            _TRAINERS.pop()


def places_of(folder: Path) -> list[tuple[str, int, int, int]]:
    """The visits a fit in ``folder`` made, in order."""
    return [tuple(visit) for visit in json.loads((folder / "places.json").read_text(encoding="utf-8"))]  # type: ignore[misc]


# --- data ----------------------------------------------------------------------------------------


def _rows(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(count, 1, generator=generator)
    return x, y


class Rows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Fixed rows; ``augment``: noise from torch's global stream, or from a generator the dataset holds."""

    def __init__(self, count: int, seed: int, augment: str = "none", offset: int = 0) -> None:
        self.x, self.y = _rows(count, seed)
        self.augment, self.offset = augment, offset
        self.generator = torch.Generator().manual_seed(seed + 100)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = (index + self.offset) % len(self.x)
        x = self.x[index]
        if self.augment == "torch":
            x = x + 0.01 * torch.randn(FEATURES)
        elif self.augment == "held":
            x = x + 0.01 * torch.randn(FEATURES, generator=self.generator)
        return x, self.y[index]

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """The same rows as an IterableDataset: each worker yields its share; its position is its state."""

    def __init__(self, count: int, seed: int, augment: str = "none", offset: int = 0) -> None:
        self.rows = Rows(count, seed, augment, offset)
        self.position = 0

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        start, self.position = self.position, 0
        for index in range(start, len(self.rows)):
            if index % workers == worker:
                self.position = index + 1
                yield self.rows[index]
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, **self.rows.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.rows.load_state_dict(state)


def _sampled(data: DataSpec, dataset: Any) -> dict[str, Any]:
    """The loader's arguments that choose its order."""
    generator = torch.Generator().manual_seed(5)
    count = len(dataset)
    kind = data.sampler
    if kind == "shuffle":
        return {"shuffle": True}
    if kind == "loader_generator":
        return {"shuffle": True, "generator": generator}
    if kind == "random_generator":
        return {"sampler": RandomSampler(dataset, generator=generator)}
    if kind == "random_global":
        return {"sampler": RandomSampler(dataset)}
    if kind == "replacement":
        return {"sampler": RandomSampler(dataset, replacement=True, num_samples=count, generator=generator)}
    if kind == "weighted":
        return {"sampler": WeightedRandomSampler(torch.linspace(1, 2, count), count, generator=generator)}
    if kind == "subset":
        return {"sampler": SubsetRandomSampler(list(range(count)), generator=generator)}
    if kind == "batch_sampler":
        sampler = RandomSampler(dataset, generator=generator)
        return {"batch_sampler": BatchSampler(sampler, data.batch_size, drop_last=False)}
    return {}


def _loader(data: DataSpec, dataset: Any, batch_size: int, ordered: bool) -> Any:
    """A training loader (``ordered``: its sampler and workers as drawn), or a validation one (in the main
    process: a validation's workers would start at every validation and cost more than the fit; in order, or
    shuffled by a generator of its own, ``val_order``)."""
    cls: Any = StatefulDataLoader if data.loader == "stateful" else DataLoader
    workers = data.workers if ordered else 0
    arguments: dict[str, Any] = {"num_workers": workers, "persistent_workers": data.persistent and workers > 0}
    order = _sampled(data, dataset) if ordered and data.dataset == "map" else {}
    if not ordered and data.val_order == "generator":
        order = {"shuffle": True, "generator": torch.Generator().manual_seed(11)}
    if "batch_sampler" not in order:
        arguments["batch_size"] = batch_size
    if "batch_sampler" in order and batch_size != data.batch_size:  # BatchSizeFinder's
        sampler = order["batch_sampler"].sampler
        order["batch_sampler"] = BatchSampler(sampler, batch_size, drop_last=False)
    return cls(dataset, **arguments, **order)


def train_loaders(data: DataSpec, batch_size: int, offset: int = 0) -> Any:
    kind = Stream if data.dataset == "iterable" else Rows
    first = _loader(data, kind(data.rows, 0, data.augment, offset), batch_size, True)
    if data.train_loaders == 1:
        return first
    second = _loader(data, kind(SECOND_ROWS, 2, data.augment, offset), batch_size, True)
    return CombinedLoader({"a": first, "b": second}, mode=data.combine)


def val_loaders(data: DataSpec) -> Any:
    if data.val_loaders == 0:
        return None
    loaders = [_loader(data, Rows(VAL_ROWS, 3 + index), data.batch_size, False) for index in range(data.val_loaders)]
    return loaders[0] if len(loaders) == 1 else loaders


def _drawn_offset(data: DataSpec) -> int:
    """A reload's draw in train_dataloader(): where the rows start, from torch's global stream."""
    return int(torch.randint(0, 4, ()).item()) if data.reload else 0


class GeneratedData(pl.LightningDataModule):
    def __init__(self, data: DataSpec) -> None:
        super().__init__()
        self.data = data
        self.batch_size = data.batch_size

    def train_dataloader(self) -> Any:
        return train_loaders(self.data, self.batch_size, _drawn_offset(self.data))

    def val_dataloader(self) -> Any:
        return val_loaders(self.data) or []


# --- the module ----------------------------------------------------------------------------------


def _inputs_and_targets(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, y)``; from two combined loaders, both concatenated (``max_size`` gives None for one that ran out)."""
    if isinstance(batch, Mapping):
        parts = [part for part in batch.values() if part is not None]
        return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
    x, y = batch
    return x, y


def _targets_and_outputs(result: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return result.metadata["out"], _inputs_and_targets(batch)[1]


class Body:
    """What every generated module does, as the setup says (a mixin before the LightningModule class)."""

    def __init__(self, setup: Setup, plan: Plan | None) -> None:
        super().__init__()
        spec = setup.module
        self.setup_spec = setup
        self.config = {"lr": 0.02, "fault": dict(plan) if plan is not None and plan["hook"] in MODULE_HOOKS else None}
        self.lr = 0.02
        self.batch_size = setup.data.batch_size
        layers: list[nn.Module] = [nn.Linear(FEATURES, HIDDEN)]
        if spec.batchnorm:
            layers.append(nn.BatchNorm1d(HIDDEN))
        layers.append(nn.ReLU())
        if spec.dropout:
            layers.append(nn.Dropout(0.25))
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(HIDDEN, 1)
        self.scale = 1.0
        if spec.held_generator == "torch":
            self.generator: Any = torch.Generator().manual_seed(11)
        elif spec.held_generator == "numpy":
            self.generator = np.random.default_rng(11)
        elif spec.held_generator == "random":
            self.generator = random.Random(11)
        if "list" in spec.attributes:
            self.seen: list[int] = []
        if "dict" in spec.attributes:
            self.per_epoch: dict[str, int] = {}
        if "counter" in spec.attributes:
            self.rows_seen = 0
        if "tensor" in spec.attributes:
            self.total = torch.zeros(())
        if spec.metric:
            self.mean_out = MeanMetric()
        if spec.saves_own:
            self.own_count = 0
        if spec.optimization == "manual":
            self.automatic_optimization = False

    @property
    def spec(self) -> Any:
        return self.setup_spec.module

    @property
    def fault(self) -> Plan | None:
        return self.config["fault"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def _drawn(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        if spec.global_draws == "torch":
            x = x + 0.01 * torch.randn_like(x)
        elif spec.global_draws == "numpy":
            x = x + 0.01 * torch.as_tensor(np.random.standard_normal(tuple(x.shape)), dtype=x.dtype)
        elif spec.global_draws == "random":
            x = x * (1 + 0.01 * random.random())
        if spec.held_generator == "torch":
            x = x + 0.01 * torch.randn(tuple(x.shape), generator=self.generator).to(x.dtype)
        elif spec.held_generator == "numpy":
            x = x + 0.01 * torch.as_tensor(self.generator.standard_normal(tuple(x.shape)), dtype=x.dtype)
        elif spec.held_generator == "random":
            x = x * (1 + 0.01 * self.generator.random())
        return x * self.scale

    def _keep(self, batch_idx: int, x: torch.Tensor) -> None:
        spec = self.spec
        if "list" in spec.attributes:
            self.seen.append(batch_idx)
        if "dict" in spec.attributes:
            key = str(self.trainer.current_epoch)  # type: ignore[attr-defined]
            self.per_epoch[key] = self.per_epoch.get(key, 0) + 1
        if "counter" in spec.attributes:
            self.rows_seen += len(x)
        if "tensor" in spec.attributes:
            self.total = self.total + x.detach().float().sum()
        if spec.saves_own:
            self.own_count += 1

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        this: Any = self
        reach("training_step", self.fault)
        x, y = _inputs_and_targets(batch)
        out = self(self._drawn(x))
        loss = F.mse_loss(out, y)
        self._keep(batch_idx, x)
        this.log("train_loss", loss, on_step=True, on_epoch=True, batch_size=len(x))
        if self.spec.metric:
            self.mean_out.update(out.detach().float())
            this.log("mean_out", self.mean_out, on_step=False, on_epoch=True)
        if self.spec.optimization == "manual":
            self._step_manually(loss, batch_idx)
        return TrainStepResult(loss=loss, metadata={"out": out.detach()})

    def _step_manually(self, loss: torch.Tensor, batch_idx: int) -> None:
        this: Any = self
        spec = self.spec
        optimizers = this.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        this.manual_backward(loss / spec.accumulate)
        if (batch_idx + 1) % spec.accumulate != 0:
            return
        for optimizer in optimizers:
            if spec.clip:
                this.clip_gradients(optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
            optimizer.step()
            optimizer.zero_grad()
        steps = (batch_idx + 1) // spec.accumulate
        if spec.scheduler != "none" and spec.interval == "step" and steps % spec.frequency == 0:
            self._step_schedulers()

    def _step_schedulers(self) -> None:
        schedulers: Any = self.lr_schedulers()  # type: ignore[attr-defined]
        for scheduler in schedulers if isinstance(schedulers, list) else [schedulers]:
            scheduler.step()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        this: Any = self
        reach("validation_step", self.fault)
        x, y = batch
        out = self(x)
        loss = F.mse_loss(out, y)
        this.log(f"val_loss_{dataloader_idx}", loss, add_dataloader_idx=False, batch_size=len(x))
        return ValStepResult(loss=loss, metadata={"out": out})

    def on_after_backward(self) -> None:
        reach("on_after_backward", self.fault)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        reach("on_before_optimizer_step", self.fault)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        reach("on_train_batch_end", self.fault)

    def on_train_epoch_start(self) -> None:
        reach("on_train_epoch_start", self.fault, batch=-1)
        if self.spec.epoch_hook:
            self.scale = 1.0 + 0.1 * float(torch.rand(()).item())

    def on_train_epoch_end(self) -> None:
        reach("on_train_epoch_end", self.fault, batch=-1)
        spec = self.spec
        if spec.optimization == "manual" and spec.scheduler != "none" and spec.interval == "epoch":
            if (self.trainer.current_epoch + 1) % spec.frequency == 0:  # type: ignore[attr-defined]
                self._step_schedulers()

    def on_validation_epoch_end(self) -> None:
        reach("on_validation_epoch_end", self.fault)

    def configure_step_metrics(self) -> Mapping[str, StepMetric[Any]]:
        return step_metrics(self.setup_spec) if self.spec.way == "typed" else {}

    def configure_optimizers(self) -> Any:
        spec = self.spec
        this: Any = self
        groups = (
            [list(self.body.parameters()), list(self.head.parameters())]
            if spec.optimizers == 2
            else [list(this.parameters())]
        )
        made: list[Any] = []
        for parameters in groups:
            if spec.optimizer == "adam":
                made.append(torch.optim.Adam(parameters, lr=self.lr * 0.2))
            else:
                made.append(torch.optim.SGD(parameters, lr=self.lr, momentum=0.9))
        if spec.scheduler == "none":
            return made if len(made) > 1 else made[0]
        configs = []
        for optimizer in made:
            if spec.scheduler == "step":
                scheduler: Any = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
            else:
                scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
            monitor = "train_loss_epoch" if spec.interval == "epoch" else "train_loss_step"
            # strict=False: a step before the monitored value is logged (a finder's trial) skips the plateau's step
            configs.append(
                {
                    "optimizer": optimizer,
                    "lr_scheduler": {
                        "scheduler": scheduler,
                        "interval": spec.interval,
                        "frequency": spec.frequency,
                        "monitor": monitor,
                        "strict": False,
                    },
                }
            )
        return configs if len(configs) > 1 else configs[0]


class DataHooks:
    """The module's own ``*_dataloader`` hooks (``via="module"``)."""

    setup_spec: Setup
    batch_size: int

    def train_dataloader(self) -> Any:
        data = self.setup_spec.data
        return train_loaders(data, self.batch_size, _drawn_offset(data))

    def val_dataloader(self) -> Any:
        return val_loaders(self.setup_spec.data) or []


class SavesOwn:
    """The module's own checkpoint data: a counter, in ``on_save_checkpoint`` / ``on_load_checkpoint``."""

    own_count: int

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["own_count"] = self.own_count

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.own_count = int(checkpoint["own_count"])


def _module_classes() -> dict[tuple[bool, bool, bool], type]:
    """Each module class a setup can need, by (typed, data hooks, own checkpoint data): a hook the
    module does not need is not defined (the library looks at which hooks a class overrides)."""
    classes: dict[tuple[bool, bool, bool], type] = {}
    for typed in (True, False):
        for hooks in (False, True):
            for own in (False, True):
                name = (
                    ("Typed" if typed else "Plain")
                    + "Module"
                    + ("WithData" if hooks else "")
                    + ("SavingOwn" if own else "")
                )
                bases = (
                    (DataHooks,) * hooks
                    + (SavesOwn,) * own
                    + (Body, TypedLightningModule if typed else pl.LightningModule)
                )
                classes[typed, hooks, own] = type(name, bases, {"__module__": __name__})
    return classes


MODULE_CLASSES = _module_classes()


def step_metrics(setup: Setup) -> dict[str, StepMetric[Any]]:
    if not setup.module.step_metric:
        return {}
    return {"mse": StepMetric(MeanSquaredError(), update=_targets_and_outputs, stages=("train", "val"))}


# --- callbacks and loggers -----------------------------------------------------------------------


class UserCallback(pl.Callback):
    """A user's callback: records the batches it sees and counts per epoch, in plain attributes.

    Options: ``per_rank`` (records its rank with each batch), ``logs`` (logs its count), ``deque``
    (keeps its last batches in a collections.deque, and logs their sum). ``user_callback`` picks the
    class: with or without ``state_dict()``, and an ``on_train_epoch_start`` that ``records`` the epochs
    it starts or ``sets_up`` the epoch its batches count into."""

    def __init__(self, options: tuple[tuple[str, Any], ...], plan: Plan | None, index: int, host: bool) -> None:
        self.options = dict(options)
        self.plan = dict(plan) if plan is not None else None
        self.index = index
        self.host = host  # the first user callback: the one whose hooks are places a plan can land
        self.seen: list[int] = []
        self.per_epoch: dict[str, int] = {}
        self.epoch_mark = -1
        self.epoch_starts: list[int] = []
        if self.options.get("deque"):
            self.recent: collections.deque[int] = collections.deque(maxlen=3)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(index=self.index)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.host:
            reach("callback_batch_end", self.plan)
        rank = int(trainer.global_rank) if self.options.get("per_rank") else 0
        self.seen.append(1000 * rank + batch_idx)
        epoch = self.epoch_mark if self.options.get("epoch_start") == "sets_up" else int(trainer.current_epoch)
        self.per_epoch[str(epoch)] = self.per_epoch.get(str(epoch), 0) + 1
        if self.options.get("logs"):
            pl_module.log(f"callback_{self.index}_seen", float(len(self.seen)))
        if self.options.get("deque"):
            self.recent.append(batch_idx)
            pl_module.log(f"callback_{self.index}_recent", float(sum(self.recent)))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self.host:
            reach("callback_validation_end", self.plan)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.host:
            reach("callback_epoch_end", self.plan, batch=-1)


class StatefulUserCallback(UserCallback):
    """A user's callback whose ``state_dict()`` holds its records."""

    def state_dict(self) -> dict[str, Any]:
        return {"seen": list(self.seen), "per_epoch": dict(self.per_epoch)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.seen = list(state_dict["seen"])
        self.per_epoch = dict(state_dict["per_epoch"])


class EpochStart:
    """A user callback's ``on_train_epoch_start``: records the epoch, or sets up the one its batches count into."""

    options: dict[str, Any]
    epoch_starts: list[int]
    epoch_mark: int

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self.options.get("epoch_start") == "records":
            self.epoch_starts.append(int(trainer.current_epoch))
        else:
            self.epoch_mark = int(trainer.current_epoch)


class EpochStartUserCallback(EpochStart, UserCallback):
    pass


class StatefulEpochStartUserCallback(EpochStart, StatefulUserCallback):
    pass


def user_callback(options: tuple[tuple[str, Any], ...], plan: Plan | None, index: int, host: bool) -> UserCallback:
    chosen = dict(options)
    stateful, epoch_start = bool(chosen.get("state_dict")), chosen.get("epoch_start", "none") != "none"
    classes: dict[tuple[bool, bool], type[UserCallback]] = {
        (False, False): UserCallback,
        (True, False): StatefulUserCallback,
        (False, True): EpochStartUserCallback,
        (True, True): StatefulEpochStartUserCallback,
    }
    return classes[stateful, epoch_start](options, plan, index, host)


def _lambda_logs(trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
    pl_module.log("lambda_batch", float(batch_idx))


class FailingLogger(Logger):
    """A logger whose write fails where the plan says (a full disk, a lost connection)."""

    def __init__(self, plan: Plan | None) -> None:
        super().__init__()
        self.plan = dict(plan) if plan is not None else None

    @property
    def name(self) -> str:
        return "failing"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        reach("logger", self.plan)


def _callback(spec: CallbackSpec, setup: Setup, plan: Plan | None, index: int) -> Any:
    kind = spec.kind
    if kind == "early_stopping":
        return EarlyStopping(monitor=spec.option("monitor"), patience=spec.option("patience"), mode=spec.option("mode"))
    if kind == "lr_monitor":
        return LearningRateMonitor(logging_interval=spec.option("logging_interval"))
    if kind == "swa":
        return StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=spec.option("swa_epoch_start"))
    if kind == "accumulation_scheduler":
        return GradientAccumulationScheduler(scheduling={0: 1, 1: 2})
    if kind == "batch_size_finder":
        return BatchSizeFinder(mode="power", steps_per_trial=1, init_val=setup.data.batch_size, max_trials=2)
    if kind == "lr_finder":
        return LearningRateFinder(min_lr=1e-3, max_lr=0.1, num_training_steps=4, early_stop_threshold=None)
    if kind == "pruning":
        return ModelPruning("l1_unstructured", amount=0.25, verbose=0)
    if kind == "model_summary":
        return ModelSummary(max_depth=1)
    if kind == "weight_averaging":
        return EMAWeightAveraging(decay=0.9, update_every_n_steps=spec.option("every"))
    if kind == "timer":
        return Timer(duration="01:00:00:00")
    if kind == "lambda":
        return LambdaCallback(on_train_batch_end=_lambda_logs)
    host = index == next(i for i, other in enumerate(setup.callbacks) if other.kind == "user")
    holds = host and plan is not None and plan["hook"].startswith("callback")
    return user_callback(spec.options, plan if holds else None, index, host)


def _checkpoints(setup: Setup) -> list[Any]:
    spec = setup.checkpoint
    root = _root()
    schedule: dict[str, Any] = {}
    if spec.every == "steps":
        schedule["every_n_train_steps"] = spec.every_n
    elif spec.every == "epochs":
        schedule["every_n_epochs"] = 1
    elif spec.every == "time":
        schedule["train_time_interval"] = timedelta(0)
    made: list[Any] = [
        ModelCheckpoint(
            dirpath=str(root / "checkpoints"),
            filename="{epoch}-{step}",
            save_last=spec.save_last,
            save_top_k=spec.top_k,
            monitor=spec.monitor,
            **schedule,
        )
    ]
    if spec.on_exception:
        made.append(OnExceptionCheckpoint(dirpath=str(root / "on_exception")))
    return made


def trainer_arguments(setup: Setup) -> dict[str, Any]:
    """The Trainer's arguments (check_resume sets the loggers, callbacks and folder)."""
    spec, module = setup.trainer, setup.module
    arguments: dict[str, Any] = {
        "max_epochs": spec.max_epochs,
        "precision": spec.precision,
        "num_sanity_val_steps": spec.num_sanity_val_steps,
        "log_every_n_steps": spec.log_every_n_steps,
        "check_val_every_n_epoch": spec.check_val_every_n_epoch,
        "max_steps": spec.max_steps,
    }
    for name in ("limit_train_batches", "limit_val_batches", "val_check_interval"):
        if getattr(spec, name) is not None:
            arguments[name] = getattr(spec, name)
    if spec.max_time:
        arguments["max_time"] = "00:01:00:00"
    if module.optimization == "automatic":
        arguments["accumulate_grad_batches"] = module.accumulate
        if module.clip:
            arguments["gradient_clip_val"] = 0.5
    if setup.data.reload:
        arguments["reload_dataloaders_every_n_epochs"] = 1
    if setup.processes == 2:  # each rank a process of its own, started as torchrun starts them
        # a rank whose peer died waits in its next collective until the process group's timeout
        strategy = DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=hang_limit(idle_s=4)))
        arguments.update(devices=2, strategy=strategy)
    return arguments


def build(setup: Setup, plan: Plan | None) -> Built:
    """One fit's objects: ``plan`` goes where its hook is (the module, a user callback, the failing logger)."""
    torch.set_num_threads(1)  # fits run side by side on the machine's cores
    data = setup.data
    typed = setup.module.way == "typed"
    module = MODULE_CLASSES[typed, data.via == "module", setup.module.saves_own](setup, plan)
    callbacks: list[Any] = [Places()]
    if not typed:
        callbacks.append(StepResultAdapter(metrics=step_metrics(setup) or None))
    callbacks += [_callback(spec, setup, plan, index) for index, spec in enumerate(setup.callbacks)]
    callbacks += _checkpoints(setup)
    loggers: list[Any] = []
    for name in setup.loggers:
        if name == "csv":
            loggers.append(CSVLogger(str(_root()), name="csv"))
        elif name == "tensorboard":
            loggers.append(TensorBoardLogger(str(_root()), name="tensorboard"))
        else:
            loggers.append(FailingLogger(plan if plan is not None and plan["hook"] == "logger" else None))
    built = Built(module=module, callbacks=callbacks, loggers=loggers)
    if data.via == "datamodule":
        built.datamodule = GeneratedData(data)
    elif data.via == "loaders":
        built.train_dataloaders = train_loaders(data, data.batch_size)
        built.val_dataloaders = val_loaders(data)
    return built
