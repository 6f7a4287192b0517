"""What typed step results cost per training step, against plain Lightning.

Four measurements, all in one process on one CPU thread:

1. End to end: the same ``Linear(32, 2)`` model, batch size 2, trained as a plain
   ``LightningModule`` (returning the loss tensor, or a dict) and as a ``TypedLightningModule``
   (returning ``TrainStepResult``), plus the ``StepResultAdapter`` callback on the plain dict
   module, and an empty ``Callback()`` on it. The fits run side by side, one thread each, taking
   turns of a few steps (in a new random order each round), so every variant trains under the
   same machine load; each ratio is the median over rounds of a variant's turn against its plain
   baseline's turn in the same round, and each "µs over" the median over rounds of the difference
   of the two turns' CPU time per step. The typed step with ``exact_resume = False``, and the
   adapter with it and then also with ``nonfinite_loss=None``, separate what the batch-start record
   for exact resume and the finiteness check cost. Loss logging: the hand-written
   ``self.log("train_loss", loss, on_step=True, on_epoch=True)`` in plain Lightning, the same with
   ``prog_bar=True`` (the call ``log_loss=True`` makes), and the typed step with ``log_loss=True``.
   The last rows train plain, typed and the adapter from a torchdata ``StatefulDataLoader`` in the
   main process, and with one and with two worker processes, each against plain Lightning on the
   same loader, and plain, typed and the adapter from a plain ``DataLoader(shuffle=True)`` (the loader
   exact resume starts inside an epoch at the index level), without workers and with two. Targets:
   the typed steps, with and without metadata, at most 1.02 (or the typed
   step at most 10 µs over plain in table 4); the adapter's ratio at most 0.02 above the empty
   ``Callback()``'s (the "minus" rows: the median over rounds of the difference of the two
   ratios); the typed step on the ``StatefulDataLoader`` at most 0.01 above the typed step on a
   ``DataLoader``, and so on the shuffled ``DataLoader``; what ``log_loss=True`` costs (its ratio minus the typed step's) at most 0.01
   above what the hand-written call with the same arguments costs plain Lightning. An A/A row
   (plain against itself) shows the method's noise floor. Progress bar, logger, checkpointing and
   model summary are off: they would dominate.
2. Construction: building and validating one ``TrainStepResult`` against an equivalent frozen
   pydantic dataclass whose validators make the same checks, and a plain dict (``timeit``).
3. The adapter's own cost: a step called through the adapter (check, convert, record) against
   the same step function called directly (``__wrapped__``), in a tight loop inside a running
   Trainer. End-to-end ratios move with machine noise; this difference hardly does.
4. The step call inside a real fit: the median time of the Trainer's ``strategy.training_step``
   call per variant, fit after fit in turns. The model's own work is the same in a variant and
   its baseline, so the difference is the adapter's work as it runs in training, with cold caches.

Run from the repository root after ``pip install torch==2.13.0 && pip install -e .``::

    python benchmarks/step_overhead.py          # about 11 minutes on 2 idle cores
    python benchmarks/step_overhead.py --quick  # a few minutes, noisier
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import logging
import random
import statistics
import threading
import time
import timeit
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from lightning_step_types import TrainStepResult
from lightning_step_types.pytorch_lightning import StepResultAdapter, TypedLightningModule

IN_FEATURES, OUT_FEATURES, BATCH_SIZE = 32, 2, 2
TARGET_RATIO = 1.02
Batch = tuple[torch.Tensor, torch.Tensor]


# --- the models: one body, five ways of returning from training_step --------------------------


class _LinearBody:
    """The same seeded ``Linear(32, 2)`` and SGD for every variant (a mixin before the Lightning base)."""

    layer: torch.nn.Linear

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(IN_FEATURES, OUT_FEATURES)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=0.01)


class PlainLoss(_LinearBody, pl.LightningModule):
    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.layer(x), y)


class PlainDict(_LinearBody, pl.LightningModule):
    def training_step(self, batch: Batch, batch_idx: int) -> dict[str, torch.Tensor]:
        x, y = batch
        logits = self.layer(x)
        return {"loss": F.cross_entropy(logits, y), "logits": logits}


class TypedLoss(_LinearBody, TypedLightningModule):
    def training_step(self, batch: Batch, batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.cross_entropy(self.layer(x), y))


class TypedMetadata(_LinearBody, TypedLightningModule):
    def training_step(self, batch: Batch, batch_idx: int) -> TrainStepResult:
        x, y = batch
        logits = self.layer(x)
        return TrainStepResult(loss=F.cross_entropy(logits, y), metadata={"logits": logits})


class TypedLossNoExactResume(TypedLoss):
    exact_resume = False  # no batch-start record: the difference to TypedLoss is the record's cost


class PlainLogs(_LinearBody, pl.LightningModule):
    """Plain Lightning with the loss logging a user writes by hand."""

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss


class PlainLogsToBar(_LinearBody, pl.LightningModule):
    """The same call with ``prog_bar=True``: the call ``log_loss=True`` makes."""

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss


class TypedLogsLoss(TypedLoss):
    """The typed step with ``log_loss=True``: the adapter makes the ``self.log`` call (``prog_bar=True``)."""

    log_loss = True


@dataclass(frozen=True)
class Variant:
    name: str
    make: Callable[[], pl.LightningModule]
    callbacks: Callable[[], list[pl.Callback]] = list
    baseline: str | None = None  # the plain variant this one is compared with
    target: float | None = None  # the most its CPU ratio to the baseline may be
    stateful: bool = False  # trained from a torchdata StatefulDataLoader
    workers: int = 0  # its worker processes
    shuffled: bool = False  # trained from a plain DataLoader(shuffle=True, generator=...)


def _stateful(workers: int) -> str:
    return "stateful loader" + ("" if workers == 0 else f", {workers} worker{'s' if workers > 1 else ''}")


def _stateful_variants(workers: int) -> list[Variant]:
    """Plain, typed and the adapter trained from a torchdata ``StatefulDataLoader`` with ``workers`` workers."""
    on = _stateful(workers)
    plain, plain_dict = f"{on}, plain: return loss", f"{on}, plain: return {{'loss', 'logits'}}"
    variants = [
        Variant(plain, PlainLoss, stateful=True, workers=workers),
        Variant(f"{on}, typed: TrainStepResult(loss)", TypedLoss, baseline=plain, stateful=True, workers=workers),
        Variant(plain_dict, PlainDict, stateful=True, workers=workers),
        Variant(
            f"{on}, StepResultAdapter() on the dict module",
            PlainDict,
            lambda: [StepResultAdapter()],
            plain_dict,
            stateful=True,
            workers=workers,
        ),
    ]
    if workers == 0:
        variants.insert(
            2,
            Variant(
                f"{on}, typed: exact_resume=False",
                TypedLossNoExactResume,
                baseline=plain,
                stateful=True,
                workers=workers,
            ),
        )
    return variants


def _shuffled(workers: int) -> str:
    return "shuffled DataLoader" + ("" if workers == 0 else f", {workers} worker{'s' if workers > 1 else ''}")


def _shuffled_variants(workers: int) -> list[Variant]:
    """Plain, typed and the adapter trained from a plain ``DataLoader(shuffle=True)`` with ``workers``
    workers: the loader exact resume starts inside an epoch at the index level (nothing per step)."""
    on = _shuffled(workers)
    plain, plain_dict = f"{on}, plain: return loss", f"{on}, plain: return {{'loss', 'logits'}}"
    options: dict[str, Any] = dict(shuffled=True, workers=workers)
    variants = [
        Variant(plain, PlainLoss, **options),
        Variant(f"{on}, typed: TrainStepResult(loss)", TypedLoss, baseline=plain, **options),
    ]
    if workers == 0:
        variants += [
            Variant(plain_dict, PlainDict, **options),
            Variant(
                f"{on}, StepResultAdapter() on the dict module",
                PlainDict,
                lambda: [StepResultAdapter()],
                plain_dict,
                **options,
            ),
        ]
    return variants


VARIANTS = (
    Variant("plain: return loss", PlainLoss),
    # The same plain model again: its ratio is the method's noise floor (1.000 on a quiet machine).
    Variant("plain: return loss (A/A control)", PlainLoss, baseline="plain: return loss"),
    Variant("plain: return {'loss', 'logits'}", PlainDict),
    Variant("typed: TrainStepResult(loss)", TypedLoss, baseline="plain: return loss", target=TARGET_RATIO),
    Variant(
        "typed: TrainStepResult(loss, metadata)",
        TypedMetadata,
        baseline="plain: return {'loss', 'logits'}",
        target=TARGET_RATIO,
    ),
    # Any callback costs Lightning's per-step hook dispatch; this row separates that from the adapter's work.
    Variant(
        "empty Callback() on the dict module", PlainDict, lambda: [pl.Callback()], "plain: return {'loss', 'logits'}"
    ),
    Variant(
        "StepResultAdapter() on the dict module",
        PlainDict,
        lambda: [StepResultAdapter()],
        "plain: return {'loss', 'logits'}",
    ),
    # The adapter's two per-step features turned off one after the other: what each costs.
    Variant(
        "StepResultAdapter(exact_resume=False) on the dict module",
        PlainDict,
        lambda: [StepResultAdapter(exact_resume=False)],
        "plain: return {'loss', 'logits'}",
    ),
    Variant(
        "StepResultAdapter(exact_resume=False, nonfinite_loss=None) on the dict module",
        PlainDict,
        lambda: [StepResultAdapter(exact_resume=False, nonfinite_loss=None)],
        "plain: return {'loss', 'logits'}",
    ),
    # The batch-start record for exact resume, off.
    Variant("typed: TrainStepResult(loss), exact_resume=False", TypedLossNoExactResume, baseline="plain: return loss"),
    # Loss logging: the hand-written call in plain Lightning, and log_loss=True in the typed module.
    Variant(
        "plain: self.log('train_loss', loss, on_step=True, on_epoch=True)", PlainLogs, baseline="plain: return loss"
    ),
    Variant(
        "plain: self.log('train_loss', loss, on_step=True, on_epoch=True, prog_bar=True)",
        PlainLogsToBar,
        baseline="plain: return loss",
    ),
    Variant("typed: log_loss=True", TypedLogsLoss, baseline="plain: return loss"),
    *(variant for workers in (0, 1, 2) for variant in _stateful_variants(workers)),
    *(variant for workers in (0, 2) for variant in _shuffled_variants(workers)),
)
EMPTY_CALLBACK, ADAPTER = "empty Callback() on the dict module", "StepResultAdapter() on the dict module"
ADAPTER_ROWS = [v.name for v in VARIANTS if v.name.startswith("StepResultAdapter(")]
# The adapter's target: its ratio to plain Lightning at most this much above the empty Callback()'s.
ADAPTER_TARGET_DIFFERENCE = 0.02
TYPED = "typed: TrainStepResult(loss)"
# The typed step's target in the step-call table (4), where the ratio's is not met: µs over plain.
TYPED_TARGET_US = 10.0
# The typed step on a StatefulDataLoader: its ratio at most this much above the typed step's on a DataLoader.
STATEFUL_TARGET_DIFFERENCE = 0.01
# The typed step on a shuffled plain DataLoader: its ratio at most this much above the typed step's on a DataLoader.
SHUFFLED_TARGET_DIFFERENCE = 0.01
# log_loss=True's cost (its ratio minus the typed step's) at most this much above the hand-written call's.
LOG_LOSS_TARGET_DIFFERENCE = 0.01
HAND_LOG = "plain: self.log('train_loss', loss, on_step=True, on_epoch=True)"
HAND_LOG_BAR = "plain: self.log('train_loss', loss, on_step=True, on_epoch=True, prog_bar=True)"
LOG_LOSS = "typed: log_loss=True"


def quiet_trainer(max_steps: int, callbacks: list[pl.Callback], checkpoints: str | None = None) -> pl.Trainer:
    """A Trainer of one epoch of ``max_steps`` training batches, with nothing around them; checkpointing
    on, into ``checkpoints``, where it is given (the callbacks then hold a ``ModelCheckpoint``)."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        max_steps=max_steps,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        default_root_dir=checkpoints,
    )


def _loader(steps: int, stateful: bool = False, workers: int = 0, shuffled: bool = False) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(steps * BATCH_SIZE, IN_FEATURES, generator=generator)
    y = torch.randint(0, OUT_FEATURES, (steps * BATCH_SIZE,), generator=generator)
    # Workers are started with "spawn": the fits run in threads, and a fork would copy their locks.
    options: dict[str, Any] = (
        dict(num_workers=workers, persistent_workers=True, multiprocessing_context="spawn") if workers else {}
    )
    if stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]  # no py.typed

        loader: DataLoader[Any] = StatefulDataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, **options)
        return loader
    if shuffled:
        shuffle = torch.Generator().manual_seed(1)
        return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True, generator=shuffle, **options)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE)


def variant_loader(variant: Variant, steps: int) -> DataLoader[Any]:
    """The loader ``variant`` trains from, of ``steps`` batches."""
    return _loader(steps, variant.stateful, variant.workers, variant.shuffled)


# --- 1. end to end ------------------------------------------------------------------------------


class Baton:
    """Lets one fit run at a time: each round, every unfinished variant gets one turn, in a new order.

    Shuffling the order every round keeps any effect of a turn's position (what ran just before
    it) from landing on one variant.
    """

    def __init__(self, names: Sequence[str], seed: int = 0) -> None:
        self._names = list(names)
        self._finished: set[str] = set()
        self._random = random.Random(seed)
        self._round: list[str] = []
        self._new_round()
        self._condition = threading.Condition()

    def _new_round(self) -> None:
        self._round = [name for name in self._names if name not in self._finished]
        self._random.shuffle(self._round)

    def wait_for_turn(self, name: str) -> None:
        with self._condition:
            self._condition.wait_for(lambda: not self._round or self._round[0] == name)

    def pass_turn(self, finished: str | None = None) -> None:
        with self._condition:
            if finished is not None:
                self._finished.add(finished)
                if finished in self._round:
                    self._round.remove(finished)
            elif self._round:
                self._round.pop(0)
            if not self._round:
                self._new_round()
            self._condition.notify_all()


class SegmentClock(pl.Callback):
    """Runs its fit in turns of ``segment`` steps and times each timed turn.

    Each turn's time is read from this thread's CPU clock (``time.thread_time``), which leaves out
    the moments another process had the core, and from the wall clock.
    """

    def __init__(self, name: str, baton: Baton, warmup: int, segment: int) -> None:
        self.name, self.baton, self.warmup, self.segment = name, baton, warmup, segment
        self.cpu: list[float] = []  # seconds per step, one entry per timed turn
        self.wall: list[float] = []
        self._start_cpu = self._start_wall = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.baton.wait_for_turn(self.name)
        self._start()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if (batch_idx + 1) % self.segment:
            return
        if batch_idx >= self.warmup:  # turns that end within the warm-up are not recorded
            self.cpu.append((time.thread_time() - self._start_cpu) / self.segment)
            self.wall.append((time.perf_counter() - self._start_wall) / self.segment)
        self.baton.pass_turn()
        self.baton.wait_for_turn(self.name)
        self._start()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.baton.pass_turn(finished=self.name)

    def _start(self) -> None:
        self._start_cpu, self._start_wall = time.thread_time(), time.perf_counter()


def end_to_end(
    steps: int, warmup: int, segment: int, variants: Sequence[Variant] = VARIANTS
) -> dict[str, SegmentClock]:
    """Fit every variant at once, one thread each, taking turns of ``segment`` steps.

    Interleaving every few milliseconds puts each variant under the same machine load, so a
    turn of one variant can be compared with the other variants' turns of the same round.
    """
    baton = Baton([v.name for v in variants])
    clocks = {v.name: SegmentClock(v.name, baton, warmup, segment) for v in variants}
    errors: list[BaseException] = []

    def fit(variant: Variant) -> None:
        torch.set_num_threads(1)  # per thread: OpenMP's setting is thread-local
        try:
            trainer = quiet_trainer(steps, [*variant.callbacks(), clocks[variant.name]])
            trainer.fit(variant.make(), train_dataloaders=variant_loader(variant, steps))
        except BaseException as error:  # re-raised below; the baton must not wait for a dead thread
            errors.append(error)
            baton.pass_turn(finished=variant.name)

    threads = [threading.Thread(target=fit, args=(v,), name=v.name) for v in variants]
    gc.collect()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    rounds = {len(clock.cpu) for clock in clocks.values()}
    assert rounds == {(steps - warmup) // segment}, rounds
    return clocks


# --- 2. construction: TrainStepResult vs a pydantic dataclass with the same checks ------------


def pydantic_step_result() -> type[Any]:
    """A frozen pydantic dataclass with ``TrainStepResult``'s checks (pydantic comes with the test extra:
    imported here, so that the other measurements' models import without it)."""
    from pydantic import ConfigDict, field_validator
    from pydantic.dataclasses import dataclass as pydantic_dataclass

    @pydantic_dataclass(frozen=True, config=ConfigDict(arbitrary_types_allowed=True))
    class PydanticStepResult:
        loss: torch.Tensor
        metadata: dict[str, Any]

        @field_validator("loss")
        @classmethod
        def _loss(cls, loss: torch.Tensor) -> torch.Tensor:
            if not isinstance(loss, torch.Tensor) or not loss.dtype.is_floating_point or loss.numel() != 1:
                raise ValueError("loss must be a floating tensor holding one value")
            return loss

        @field_validator("metadata")
        @classmethod
        def _metadata(cls, metadata: dict[str, Any]) -> dict[str, Any]:
            if not all(isinstance(key, str) for key in metadata):
                raise ValueError("metadata keys must be str")
            if "loss" in metadata:
                raise ValueError("metadata must not hold 'loss'")
            return metadata

    return PydanticStepResult


def _per_call_us(func: Callable[[], object], number: int, repeat: int) -> float:
    """Best of ``repeat`` timeit runs, in microseconds per call (the minimum is the least disturbed)."""
    return min(timeit.repeat(func, number=number, repeat=repeat)) / number * 1e6


def construction(number: int, repeat: int) -> dict[str, float]:
    layer = torch.nn.Linear(IN_FEATURES, OUT_FEATURES)
    x, y = torch.randn(BATCH_SIZE, IN_FEATURES), torch.randint(0, OUT_FEATURES, (BATCH_SIZE,))
    logits = layer(x)
    loss = F.cross_entropy(logits, y)
    metadata = {"logits": logits}
    PydanticStepResult = pydantic_step_result()
    # Same inputs, same outcome: each builds a checked, immutable loss + metadata pair.
    assert TrainStepResult(loss=loss, metadata=metadata)["logits"] is logits
    assert PydanticStepResult(loss=loss, metadata=metadata).metadata["logits"] is logits
    return {
        "TrainStepResult(loss, metadata)": _per_call_us(
            lambda: TrainStepResult(loss=loss, metadata=metadata), number, repeat
        ),
        "pydantic dataclass, same checks": _per_call_us(
            lambda: PydanticStepResult(loss=loss, metadata=metadata), number, repeat
        ),
        "plain dict {'loss': loss, **metadata}": _per_call_us(lambda: {"loss": loss, **metadata}, number, repeat),
    }


# --- 3. the adapter's own cost per step, inside a running Trainer ------------------------------


class CheapTyped(TypedLightningModule):
    """A step that does almost nothing, so that the adapter's work is most of what is timed.

    It keeps the default ``nonfinite_loss = "raise"``: the finiteness check is part of the cost.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(IN_FEATURES, OUT_FEATURES)
        self.loss = self.layer(torch.ones(1, IN_FEATURES)).sum()  # has a graph, like a real loss
        self.logits = torch.zeros(BATCH_SIZE, OUT_FEATURES)

    def training_step(self, batch: Batch, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.loss, metadata={"logits": self.logits})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class CheapTypedNoFiniteCheck(CheapTyped):
    nonfinite_loss = None  # the adapted step reads this per call: no host sync for the finiteness check


class CheapPlain(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(IN_FEATURES, OUT_FEATURES)
        self.loss = self.layer(torch.ones(1, IN_FEATURES)).sum()
        self.logits = torch.zeros(BATCH_SIZE, OUT_FEATURES)

    def training_step(self, batch: Batch, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"loss": self.loss, "logits": self.logits}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class AdapterClock(pl.Callback):
    """At the start of training (the Trainer is running, the steps are adapted) times both calls."""

    def __init__(self, number: int, repeat: int) -> None:
        self.number, self.repeat = number, repeat
        self.adapted_us = self.direct_us = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batch = (torch.zeros(BATCH_SIZE, IN_FEATURES), torch.zeros(BATCH_SIZE, dtype=torch.long))
        adapted = pl_module.training_step
        direct = getattr(adapted, "__wrapped__")  # the user's own function, as Lightning itself sees it
        if "training_step" not in pl_module.__dict__:  # adapted on the class: __wrapped__ is unbound
            direct = direct.__get__(pl_module)
        converted = adapted(batch, 0)
        assert isinstance(converted, dict) and set(converted) == {"loss", "logits"}, converted
        self.adapted_us = _per_call_us(lambda: adapted(batch, 0), self.number, self.repeat)
        self.direct_us = _per_call_us(lambda: direct(batch, 0), self.number, self.repeat)


def adapter_cost(number: int, repeat: int) -> dict[str, tuple[float, float]]:
    cases: dict[str, tuple[Callable[[], pl.LightningModule], list[pl.Callback]]] = {
        "TypedLightningModule (nonfinite_loss='raise')": (CheapTyped, []),
        "TypedLightningModule (nonfinite_loss=None)": (CheapTypedNoFiniteCheck, []),
        "StepResultAdapter() on a dict return": (CheapPlain, [StepResultAdapter()]),
    }
    costs: dict[str, tuple[float, float]] = {}
    for name, (make, callbacks) in cases.items():
        clock = AdapterClock(number, repeat)
        quiet_trainer(1, [*callbacks, clock]).fit(make(), train_dataloaders=_loader(1))
        costs[name] = (clock.adapted_us, clock.direct_us)
    return costs


# --- 4. the step call inside a real fit: the adapter's work with Lightning's code around it ---


def step_call_ns(variant: Variant, steps: int, skip: int) -> float:
    """The median time of the Trainer's ``strategy.training_step`` calls in one fit of ``variant``.

    That call runs the module's step: for the typed and adapted variants, with the adapter's work
    around it (policy, state, checks, conversion, recording the result), building the result
    included. Timed inside a real fit, the code runs as cold as in training, unlike part 3.
    """
    trainer = quiet_trainer(steps, variant.callbacks())
    strategy = trainer.strategy
    training_step = strategy.training_step
    times: list[int] = []

    def timed_training_step(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        output = training_step(*args, **kwargs)
        times.append(time.perf_counter_ns() - start)
        return output

    strategy.training_step = timed_training_step  # type: ignore[method-assign]
    trainer.fit(variant.make(), train_dataloaders=variant_loader(variant, steps))
    return statistics.median(times[skip:])


def step_call_cost(steps: int, rounds: int) -> dict[str, float]:
    """Median over ``rounds`` of each variant's median step call (µs); one fit per variant per round,
    in a new random order each round, so machine load falls on every variant alike."""
    # the record is outside the step call, the loader too
    variants = [v for v in VARIANTS if "A/A" not in v.name and not v.stateful and not v.shuffled]
    medians: dict[str, list[float]] = {v.name: [] for v in variants}
    order = random.Random(1)
    for _ in range(rounds):
        order.shuffle(variants)
        for variant in variants:
            medians[variant.name].append(step_call_ns(variant, steps, skip=steps // 10) / 1e3)
    return {name: statistics.median(values) for name, values in medians.items()}


# --- report ------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and timeit loops: a rough figure in seconds")
    args = parser.parse_args()
    # Many short fits rather than a few long ones: finer interleaving cancels more drift.
    # steps per variant, untimed warm-up steps, steps per turn
    steps, warmup, segment = (1_200, 200, 20) if args.quick else (10_200, 200, 20)
    number, repeat = (5_000, 3) if args.quick else (20_000, 7)
    call_steps, call_rounds = (300, 3) if args.quick else (500, 9)  # part 4: steps per fit, fits per variant

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)  # "GPU available: False ..." per Trainer
    pl.seed_everything(0, verbose=False)
    print(
        f"torch {torch.__version__}, pytorch-lightning {importlib.metadata.version('pytorch-lightning')}, 1 CPU thread"
    )

    rounds = (steps - warmup) // segment
    print(f"\n1. Training step, end to end (Linear(32, 2), batch size {BATCH_SIZE}): the variants train side by")
    print(f"   side, taking turns of {segment} steps in a new random order each round; {rounds} timed turns each.")
    print("   Median over turns; each ratio is the median over rounds of this variant's turn divided by its")
    print("   plain baseline's turn in the same round.\n")
    clocks = end_to_end(steps, warmup, segment)

    def per_round_ratios(name: str, baseline: str) -> list[float]:
        return [t / b for t, b in zip(clocks[name].cpu, clocks[baseline].cpu)]

    def per_round_us(name: str, baseline: str) -> list[float]:
        return [(t - b) * 1e6 for t, b in zip(clocks[name].cpu, clocks[baseline].cpu)]

    def ratio_difference(name: str, baseline: str, other: str, other_baseline: str) -> float:
        """The median over rounds of the difference of two ratios, each to its baseline's turn in that round."""
        ours, theirs = per_round_ratios(name, baseline), per_round_ratios(other, other_baseline)
        return statistics.median(a - b for a, b in zip(ours, theirs))

    def verdict(value: float, target: float, shown: str) -> str:
        return f"{shown}: " + ("ok" if value <= target else "ABOVE")

    rows: list[tuple[str, ...]] = []
    for variant in VARIANTS:
        clock = clocks[variant.name]
        cpu_us, wall_us = statistics.median(clock.cpu) * 1e6, statistics.median(clock.wall) * 1e6
        if variant.baseline is None:
            rows.append((variant.name, f"{cpu_us:.1f}", f"{wall_us:.1f}", "", "", "", ""))
            continue
        base = clocks[variant.baseline]
        cpu_ratio = statistics.median(per_round_ratios(variant.name, variant.baseline))
        extra_us = statistics.median(per_round_us(variant.name, variant.baseline))
        wall_ratio = statistics.median(t / b for t, b in zip(clock.wall, base.wall))
        shown = "" if variant.target is None else verdict(cpu_ratio, variant.target, f"<= {variant.target}")
        rows.append(
            (
                variant.name,
                f"{cpu_us:.1f}",
                f"{wall_us:.1f}",
                f"{cpu_ratio:.3f}",
                f"{extra_us:+.1f}",
                f"{wall_ratio:.3f}",
                shown,
            )
        )
    # The adapter against the empty Callback(): both ratios are to the same plain turn of each round,
    # so their per-round difference is what the adapter adds beyond being a callback at all.
    # The target is the default adapter's; the rows with a feature off show what that feature costs.
    for name in ADAPTER_ROWS:
        baseline = next(v.baseline for v in VARIANTS if v.name == name)
        assert baseline is not None
        difference = ratio_difference(name, baseline, EMPTY_CALLBACK, baseline)
        extra_us = statistics.median(
            a - e for a, e in zip(per_round_us(name, baseline), per_round_us(EMPTY_CALLBACK, baseline))
        )
        shown = (
            verdict(difference, ADAPTER_TARGET_DIFFERENCE, f"<= {ADAPTER_TARGET_DIFFERENCE}") if name == ADAPTER else ""
        )
        rows.append(
            (
                f"{name.split(' on ')[0]} minus empty Callback()",
                "",
                "",
                f"{difference:+.3f}",
                f"{extra_us:+.1f}",
                "",
                shown,
            )
        )
    # The typed step on a StatefulDataLoader against the typed step on a DataLoader, each to its own plain baseline.
    stateful_typed = f"{_stateful(0)}, typed: TrainStepResult(loss)"
    stateful_difference = ratio_difference(
        stateful_typed, f"{_stateful(0)}, plain: return loss", TYPED, "plain: return loss"
    )
    rows.append(
        (
            "stateful loader, typed, minus typed on a DataLoader",
            "",
            "",
            f"{stateful_difference:+.3f}",
            "",
            "",
            verdict(stateful_difference, STATEFUL_TARGET_DIFFERENCE, f"<= {STATEFUL_TARGET_DIFFERENCE}"),
        )
    )
    # The typed step on a shuffled plain DataLoader (which exact resume starts inside an epoch at the
    # index level) against the typed step on an unshuffled one, each to its own plain baseline.
    shuffled_difference = ratio_difference(
        f"{_shuffled(0)}, typed: TrainStepResult(loss)",
        f"{_shuffled(0)}, plain: return loss",
        TYPED,
        "plain: return loss",
    )
    rows.append(
        (
            "shuffled DataLoader, typed, minus typed on a DataLoader",
            "",
            "",
            f"{shuffled_difference:+.3f}",
            "",
            "",
            verdict(shuffled_difference, SHUFFLED_TARGET_DIFFERENCE, f"<= {SHUFFLED_TARGET_DIFFERENCE}"),
        )
    )
    # What log_loss=True costs (its ratio minus the typed step's) against what the hand-written call
    # costs plain Lightning (its ratio minus 1): the logging alone, each way. The target compares it
    # with the call log_loss=True makes (prog_bar=True); the call without prog_bar is shown beside it.
    log_loss_costs = [
        a - t
        for a, t in zip(per_round_ratios(LOG_LOSS, "plain: return loss"), per_round_ratios(TYPED, "plain: return loss"))
    ]
    rows.append(
        ("log_loss=True's cost (minus the typed step)", "", "", f"{statistics.median(log_loss_costs):+.3f}", "", "", "")
    )
    for hand, shown in ((HAND_LOG_BAR, "with prog_bar=True"), (HAND_LOG, "without prog_bar")):
        hand_costs = [r - 1.0 for r in per_round_ratios(hand, "plain: return loss")]
        rows.append(
            (f"the hand-written self.log's cost, {shown}", "", "", f"{statistics.median(hand_costs):+.3f}", "", "", "")
        )
        difference = statistics.median(a - h for a, h in zip(log_loss_costs, hand_costs))
        target = (
            verdict(difference, LOG_LOSS_TARGET_DIFFERENCE, f"<= {LOG_LOSS_TARGET_DIFFERENCE}")
            if hand == HAND_LOG_BAR
            else ""
        )
        rows.append((f"log_loss=True's cost minus that ({shown})", "", "", f"{difference:+.3f}", "", "", target))
    print(
        _table(
            ("variant", "CPU µs/step", "wall µs/step", "ratio (CPU)", "µs over (CPU)", "ratio (wall)", "target (CPU)"),
            rows,
        )
    )

    print(f"\n2. Building one checked result (timeit, best of {repeat} x {number})\n")
    built = construction(number, repeat)
    typed_us = built["TrainStepResult(loss, metadata)"]
    print(
        _table(
            ("construction", "µs each", "ratio vs TrainStepResult"),
            [(name, f"{us:.2f}", f"{us / typed_us:.2f}") for name, us in built.items()],
        )
    )

    print(f"\n3. The adapter's own cost per step (a near-empty step, timeit best of {repeat} x {number})\n")
    plain_step_us = statistics.median(clocks["plain: return loss"].cpu) * 1e6
    cost_rows = []
    for name, (adapted_us, direct_us) in adapter_cost(number, repeat).items():
        overhead = adapted_us - direct_us
        cost_rows.append(
            (name, f"{adapted_us:.2f}", f"{direct_us:.2f}", f"{overhead:.2f}", f"{overhead / plain_step_us:.2%}")
        )
    print(_table(("step called", "adapted µs", "direct µs", "overhead µs", "of a plain step"), cost_rows))

    print(f"\n4. The step call inside a real fit ({call_rounds} fits of {call_steps} steps per variant, taking turns;")
    print("   median over fits of each fit's median `strategy.training_step` call)\n")
    step_calls = step_call_cost(call_steps, call_rounds)
    call_rows = []
    for variant in VARIANTS:
        if variant.name not in step_calls:
            continue
        us = step_calls[variant.name]
        if variant.baseline is None:
            call_rows.append((variant.name, f"{us:.2f}", "", "", ""))
        else:
            extra = us - step_calls[variant.baseline]
            # the typed step's target is met by either its ratio (table 1) or this
            shown = verdict(extra, TYPED_TARGET_US, f"<= {TYPED_TARGET_US:g} µs") if variant.name == TYPED else ""
            call_rows.append((variant.name, f"{us:.2f}", f"{extra:+.2f}", f"{extra / plain_step_us:+.2%}", shown))
    print(_table(("variant", "step call µs", "vs its baseline µs", "of a plain step", "target"), call_rows))


if __name__ == "__main__":
    main()
