"""The fits behind the scaling-out tests (tests/test_scaling*.py): a script each launcher starts.

``python tests/scaling.py RUNS.json`` runs each fit of the JSON list in turn, on the processes that
the launcher gives it: Lightning's own (``devices=2``: the script is started again for rank 1),
torchrun (``--nproc-per-node=2``), two "nodes" of one process each, or SLURM's variables. Every
rank writes what it saw and ended with to ``<run dir>/rank<N>-<attempt>.pt``: the sample ids of each
batch it trained, its weights, ``callback_metrics`` and ``logged_metrics``; rank 0 also writes its
CSV rows. A run's fault happens once (a marker file in the run's folder), so a restarted attempt
trains on from its checkpoint.

The model is the one the issue measured: ``nn.Linear(8, 2)``, 120 rows in batches of 4 (15 batches
per rank and epoch on 2 ranks), 3 epochs, ``ModelCheckpoint(every_n_train_steps=4, save_last=True)``.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
)
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from lightning_step_types import StepResultWarning, TrainStepResult, TypedLightningModule

ROWS, BATCH_SIZE, EPOCHS, EVERY = 120, 4, 3, 4


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ROWS, 8, generator=generator)
    y = torch.randint(0, 2, (ROWS,), generator=generator)
    return TensorDataset(x, y, torch.arange(ROWS))


def loader(sampler: str, workers: int = 0) -> Any:
    """The training loader; ``sampler`` names what Lightning finds in it under DDP."""
    data = dataset()
    options: dict[str, Any] = dict(batch_size=BATCH_SIZE, num_workers=workers, persistent_workers=workers > 0)
    if workers:
        # Workers start from a forkserver, not by fork. A DDP process has threads of its own (gloo's, the
        # store server on rank 0, Lightning's child-process observer, queue feeders); a worker forked
        # while one of them held CPython 3.11's lock on the list of thread states never gets out of
        # `os.fork()` (gdb: PyOS_AfterFork_Child -> _PyThreadState_DeleteExcept, waiting on that lock),
        # and the loader waits for its start-up reply without a time limit. That hung this file's jobs:
        # one rank in the first `iter()` of a 2-worker loader, the other in the next collective, until
        # gloo's 30-minute timeout. A forkserver is a single-threaded process: nothing is held there.
        # It imports what a worker unpickles once, before its first worker (Python 3.11 does not preload
        # a script's own imports there): each worker would import them again, about 3.5 s.
        forkserver = multiprocessing.get_context("forkserver")
        forkserver.set_forkserver_preload(["torch", "torchdata.stateful_dataloader", "pytorch_lightning"])
        options["multiprocessing_context"] = forkserver
    if sampler == "injected":  # torch's RandomSampler: Lightning puts a DistributedSampler(shuffle=True) in
        return StatefulDataLoader(data, sampler=RandomSampler(data), **options)
    if sampler == "wrapper":  # torchdata's RandomSampler: Lightning wraps it in DistributedSamplerWrapper
        return StatefulDataLoader(data, shuffle=True, **options)
    if sampler == "user":  # the user's own DistributedSampler, which Lightning keeps
        return StatefulDataLoader(data, sampler=DistributedSampler(data, shuffle=True), **options)
    if sampler == "stateful":
        return StatefulDataLoader(data, sampler=StatefulDistributedSampler(data, shuffle=True), **options)
    if sampler == "weighted":  # a sampler without a generator: Lightning wraps it, and its order is not saved
        return StatefulDataLoader(data, sampler=WeightedRandomSampler(torch.ones(ROWS), ROWS), **options)
    if sampler == "shuffle-generator":  # torchdata's RandomSampler, wrapped; the loader's generator is its own
        return StatefulDataLoader(data, shuffle=True, generator=_seeded(7), **options)
    if sampler == "subset-generator":  # torch's SubsetRandomSampler with a generator: Lightning wraps it
        return StatefulDataLoader(data, sampler=SubsetRandomSampler(range(ROWS), generator=_seeded(7)), **options)
    if sampler == "ordered":  # no shuffling: every launcher's runs draw the same batches
        return StatefulDataLoader(data, **options)
    if sampler == "plain-injected":  # a plain DataLoader: Lightning puts a DistributedSampler(shuffle=True) in
        return DataLoader(data, shuffle=True, **options)
    if sampler == "plain-wrapper":  # a plain DataLoader, a sampler without a generator: Lightning wraps it
        return DataLoader(data, sampler=WeightedRandomSampler(torch.linspace(1, 2, ROWS), ROWS), **options)
    raise ValueError(sampler)


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Parts:
    """The model and its logging, shared by the typed module and the plain-Lightning one."""

    run: dict[str, Any]
    fault: dict[str, Any] | None = None
    marker = Path()

    def build(self, run: dict[str, Any], marker: Path) -> None:
        torch.manual_seed(0)
        self.net = torch.nn.Linear(8, 2)
        self.seen: list[tuple[int, int, list[int]]] = []
        self.run, self.fault, self.marker = run, run.get("fault"), marker
        self.model_parallel = run.get("strategy") == "model_parallel"

    def step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        trainer: Any = getattr(self, "trainer")
        x, y, ids = batch
        self.seen.append((int(trainer.current_epoch), batch_idx, ids.tolist()))
        self.inject_fault(trainer, batch_idx)
        loss = F.cross_entropy(self.net(x), y)
        log: Any = getattr(self, "log")
        log("train_loss", loss, on_step=True, on_epoch=True)
        log("train_max", loss, on_epoch=True, reduce_fx="max")
        return loss

    def inject_fault(self, trainer: Any, batch_idx: int) -> None:
        fault = self.fault
        if fault is None or (trainer.current_epoch, batch_idx) != (fault["epoch"], fault["batch"]):
            return
        if (
            trainer.global_rank not in fault["ranks"]
            or (self.marker.parent / f"{self.marker.name}-{trainer.global_rank}").exists()
        ):
            return
        (self.marker.parent / f"{self.marker.name}-{trainer.global_rank}").touch()  # once: a restart trains on
        if fault["kind"] == "raise":
            raise RuntimeError(f"simulated fault on rank {trainer.global_rank}")
        if fault["kind"] == "signal":  # SLURM's requeue signal, to this process only
            os.kill(os.getpid(), signal.SIGUSR1)
        if fault["kind"] == "save":  # trainer.save_checkpoint from this rank's hook alone
            trainer.save_checkpoint(self.marker.parent / "alone.ckpt")

    def train_dataloader(self) -> Any:
        """Made after the process group (a DistributedSampler of the user's own asks it for the ranks)."""
        return loader(self.run.get("sampler", "ordered"), self.run.get("workers", 0))

    def configure_model(self) -> None:
        if self.model_parallel:
            from torch.distributed.fsdp import fully_shard

            fully_shard(self.net, mesh=getattr(self, "device_mesh")["data_parallel"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=0.1)


class MyModel(Parts, TypedLightningModule):
    """The typed module (named as in docs/errors.md, whose catalogue quotes its warnings)."""

    def __init__(self, run: dict[str, Any], marker: Path) -> None:
        super().__init__()
        self.build(run, marker)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.step(batch, batch_idx))


class Plain(Parts, pl.LightningModule):
    def __init__(self, run: dict[str, Any], marker: Path) -> None:
        super().__init__()
        self.build(run, marker)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.step(batch, batch_idx)


class RankRecord(pl.Callback):
    """A user's callback that records what its own rank saw, in its attributes (no ``state_dict()``): the
    sample ids of each batch, and each epoch's sum of them; its ``on_train_epoch_start`` only records."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.sums: dict[int, int] = {}
        self.epochs_started: list[int] = []

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        self.epochs_started.append(int(trainer.current_epoch))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        ids = [int(i) for i in batch[2].tolist()]
        self.batches.append(ids)
        epoch = int(trainer.current_epoch)
        self.sums[epoch] = self.sums.get(epoch, 0) + sum(ids)

    def recorded(self) -> dict[str, Any]:
        return {"batches": self.batches, "sums": self.sums, "epochs_started": self.epochs_started}


class Record(pl.Callback):
    """Each rank's record of its fit, written at its end (the only way a child's result reaches the test)."""

    def __init__(self, root: Path, attempt: int, caught: list[str]) -> None:
        self.root, self.attempt, self.caught = root, attempt, caught

    def on_fit_end(self, trainer: pl.Trainer, pl_module: Any) -> None:
        params = {name: _full(value) for name, value in pl_module.net.state_dict().items()}
        torch.save(
            {
                "seen": pl_module.seen,
                "params": params,
                "callback": {k: v.detach().clone() for k, v in trainer.callback_metrics.items()},
                "logged": {k: v.detach().clone() for k, v in trainer.logged_metrics.items()},
                "warnings": list(self.caught),
                "rank_record": [c.recorded() for c in trainer.callbacks if isinstance(c, RankRecord)],
            },
            self.root / f"rank{trainer.global_rank}-{self.attempt}.pt",
        )


def _full(value: torch.Tensor) -> torch.Tensor:
    """A parameter as one tensor: a sharded one (fully_shard's DTensor) gathered."""
    full = getattr(value, "full_tensor", None)
    return (full() if callable(full) else value).detach().clone()


def attempt(root: Path) -> int:
    """Which attempt of the job this process belongs to: 0 for the first, then torchrun's restarts or
    SLURM's requeues.

    Not ``TORCHELASTIC_RESTART_COUNT``: each torchrun agent counts only the restarts its own workers
    failed. With two nodes, when rank 1's fault breaks rank 0's collective only after rank 0's agent
    saw the other node wait for a new rendezvous, rank 0's agent restarts its worker without counting,
    and the nodes may swap ranks in the new rendezvous (3 of 14 runs here). A torchrun worker counts its
    agent's starts of it instead: a marker per start, by the agent's process id and the local rank.
    """
    if not under_torchrun():
        return int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    starts = root / "starts"
    starts.mkdir(parents=True, exist_ok=True)
    agent = f"{os.getppid()}-{os.environ.get('LOCAL_RANK', '0')}"
    (starts / f"{agent}-{os.getpid()}").touch()
    return len(list(starts.glob(f"{agent}-*"))) - 1


class PauseAt(pl.Callback):
    """Stops at the start of one training batch and waits there for a signal from outside, once per run
    folder: ``<root>/paused`` tells the test to send it. SIGTERM ends the wait (Lightning then finishes
    the batch and stops); SIGUSR1's save happens inside the wait; SIGKILL ends the process in it."""

    def __init__(self, root: Path, epoch: int, batch: int) -> None:
        self.marker, self.at = root / "paused", (epoch, batch)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if (trainer.current_epoch, batch_idx) != self.at or self.marker.exists():
            return
        self.marker.touch()
        waited = 0.0
        while not trainer.received_sigterm and waited < WAIT_FOR_SIGNAL_S:
            time.sleep(0.05)
            waited += 0.05


WAIT_FOR_SIGNAL_S = 600.0  # a test that never sends it is killed at its own limit first


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ  # torchrun's agent sets it for its workers


def trainer_for(run: dict[str, Any], root: Path, caught: list[str]) -> pl.Trainer:
    this_attempt = attempt(root)
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(
            dirpath=root / "ckpt",
            every_n_train_steps=run.get("every", EVERY),
            save_last=True,
            save_top_k=-1,
            filename="{step}",
        ),
        Record(root, this_attempt, caught),
    ]
    if run.get("epoch_checkpoints"):
        callbacks.append(ModelCheckpoint(dirpath=root / "ckpt", filename="end-{epoch}", save_top_k=-1))
    if run.get("on_exception"):
        callbacks.append(OnExceptionCheckpoint(root / "ckpt"))
    if run.get("rank_record"):
        callbacks.append(RankRecord())
    if run.get("pause"):
        callbacks.append(PauseAt(root, run["pause"]["epoch"], run["pause"]["batch"]))
    plugins: list[Any] = []
    if run.get("slurm"):
        from pytorch_lightning.plugins.environments import SLURMEnvironment

        plugins.append(SLURMEnvironment(auto_requeue=True))
    strategy: Any = run.get("strategy", "ddp")
    if strategy == "model_parallel":
        from pytorch_lightning.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    return pl.Trainer(
        accelerator="cpu",
        devices=run.get("devices", 2),
        num_nodes=run.get("num_nodes", 1),
        strategy=strategy,
        max_epochs=run.get("epochs", EPOCHS),
        callbacks=callbacks,
        plugins=plugins,
        logger=CSVLogger(root, name="csv", version=None if run.get("new_versions") else this_attempt),
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
    )


def step_result_warnings() -> list[str]:
    """From now on, every StepResultWarning this process shows is also kept in the list returned."""
    caught: list[str] = []
    original = warnings.showwarning

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if issubclass(category, StepResultWarning):
            caught.append(str(message))
        original(message, category, *args, **kwargs)

    warnings.showwarning = show
    warnings.simplefilter("always", StepResultWarning)
    return caught


def fit(run: dict[str, Any]) -> None:
    root = Path(run["root"])
    root.mkdir(parents=True, exist_ok=True)
    caught = step_result_warnings()
    make = MyModel if run.get("module", "typed") == "typed" else Plain
    trainer = trainer_for(run, root, caught)
    ckpt = run.get("ckpt")
    trainer.fit(make(run, root / "faulted"), ckpt_path=ckpt)


def main(argv: list[str]) -> None:
    for run in json.loads(Path(argv[0]).read_text()):
        fit(run)
    if under_torchrun():
        # torch 2.13 on gloo sometimes aborts a torchrun worker in the interpreter's teardown after a
        # ModelParallelStrategy fit ("terminate called without an active exception": 4 of 26 resumed
        # runs; 1 of 58 with the process group destroyed first), and torchrun counts the abort as the
        # job's failure. So: wait until every rank is done, destroy the group, and leave without that
        # teardown (every record is written): the exit status says how the fits went.
        if torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# --- reading the records (in the test process) ----------------------------------------------------------


def record(root: Path, rank: int, attempt: int = 0) -> dict[str, Any]:
    return torch.load(root / f"rank{rank}-{attempt}.pt", weights_only=False)


def rows(root: Path, attempt: int = 0) -> list[dict[str, str]]:
    with open(root / "csv" / f"version_{attempt}" / "metrics.csv", newline="") as file:
        return [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(file)]


def epoch_value(table: list[dict[str, str]], name: str, epoch: int) -> float:
    """Rank 0's logged epoch value ``name`` of ``epoch`` (its CSV rows)."""
    (value,) = [float(row[name]) for row in table if name in row and int(row["epoch"]) == epoch]
    return value


if __name__ == "__main__":  # Lightning's launcher starts this file again for each other rank
    main(sys.argv[1:])
