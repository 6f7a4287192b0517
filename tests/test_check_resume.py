"""``check_resume``: a user's own run, interrupted and resumed at each point, against the uninterrupted fit.

- the documented example (docs/resume.md, "How to know") runs as written, on Lightning's own
  ``BoringModel`` (Lightning-AI/pytorch-lightning, ``src/lightning/pytorch/demos/boring_classes.py``,
  as released in pytorch-lightning 2.6.6), and reports every point exact;
- the command line on a LightningCLI config: exit 0 where every point is exact, 1 where a point
  differs silently (a plain ``DataLoader``, which Lightning cannot resume inside an epoch);
- on some of the fault matrix's hardest cells (``fault_matrix.run_cell``) the report's verdict is the
  matrix's, and under ``exact_resume=False`` it reports the difference plain Lightning's resume makes,
  naming the first differing item with its two values;
- on Lightning's own LSTM demo, the hidden state it keeps in a plain attribute is named at the resume;
- a module attribute no checkpoint holds is reported as "differs", with its values named.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fault_matrix import Cell as MatrixCell
from fault_matrix import Fault, Faults, Loop, module_class, reference_run, run_cell, train_loaders, val_loader
from limits import hang_limit
from models import make_dataset
from pytorch_lightning import Callback, LightningDataModule
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from torch import nn
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from lightning_step_types import TrainStepResult, TypedLightningModule
from lightning_step_types.check_resume import Interruption, check_resume

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
CONFIGS = TESTS / "cli_configs"


def repo_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}


# --- the documented example ---------------------------------------------------------------------


def documented_example() -> str:
    text = (REPO / "docs" / "resume.md").read_text(encoding="utf-8")
    marker = "<!-- check_resume example -->\n```python\n"
    start = text.index(marker) + len(marker)
    return text[start : text.index("```", start)]


def test_the_documented_example_runs_as_written_and_every_point_is_exact(tmp_path: Path) -> None:
    code = documented_example()
    assert len(code.strip().splitlines()) < 15
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=repo_env(), capture_output=True, text=True,
        timeout=hang_limit(idle_s=300),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "check_resume, exact resume: 6 interruption points, 6 exact, 0 warned, 0 differ"
    assert lines[1].startswith("13 fits; the uninterrupted fit took ")
    assert lines[1].endswith(" s; seed_everything(0, workers=True), deterministic=True, accelerator='cpu', devices=1")
    assert [line.split(None, 1) for line in lines[2:]] == [
        ["exact", "inside batch 4 of epoch 0"],
        ["exact", "inside batch 0 of epoch 1"],
        ["exact", "inside batch 7 of epoch 0"],
        ["exact", "inside epoch 0's first validation"],
        ["exact", "at the end of epoch 0"],
        ["exact", "a kill 2 batches after the checkpoint at step 4"],
    ]


# --- the command line ---------------------------------------------------------------------------


def run_command(config: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lightning_step_types.check_resume", "--config", str(CONFIGS / config), *args],
        cwd=CONFIGS,  # the configs name `cli_models.<Class>`, found from the folder the command runs in
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=300),
    )


def test_the_command_line_on_a_lightning_cli_config_exits_0_where_every_point_is_exact() -> None:
    completed = run_command("pytorch_lightning_check_resume.yaml", "--batch", "0:1", "--batch", "1:3")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "check_resume, exact resume: 2 interruption points, 2 exact, 0 warned, 0 differ"
    assert lines[1].startswith("5 fits; the uninterrupted fit took ")
    assert lines[2:] == ["exact       inside batch 1 of epoch 0", "exact       inside batch 3 of epoch 1"]


def test_the_command_line_in_fresh_processes_parses_the_config_in_each() -> None:
    completed = run_command("pytorch_lightning_check_resume.yaml", "--batch", "0:1", "--fresh-processes")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "check_resume, exact resume: 1 interruption points, 1 exact, 0 warned, 0 differ"
    assert lines[2:] == ["exact       inside batch 1 of epoch 0"]


def test_the_command_line_exits_1_where_a_point_differs_silently() -> None:
    # plain Lightning's resume (--plain) of a plain DataLoader: Lightning restarts the epoch's iterator
    # (docs/resume.md, "Without a stateful loader"), where exact resume goes on at the next batch
    completed = run_command("pytorch_lightning_typed.yaml", "--batch", "0:1", "--plain")
    assert completed.returncode == 1, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == (
        "check_resume, plain Lightning's resume (exact_resume=False): 1 interruption points, 0 exact, 0 warned,"
        " 1 differ"
    )
    assert lines[2] == "differs     inside batch 1 of epoch 0"
    assert lines[3].startswith(
        "            Lightning warned: You're resuming from a checkpoint that ended before the epoch ended"
    )
    assert lines[4].startswith("            logger step: ")
    exact = run_command("pytorch_lightning_typed.yaml", "--batch", "0:1")
    assert exact.returncode == 0, exact.stdout + exact.stderr
    assert (
        exact.stdout.splitlines()[0] == "check_resume, exact resume: 1 interruption points, 1 exact, 0 warned, 0 differ"
    )


# --- the fault matrix's hardest cells: the same verdicts -----------------------------------------


class MatrixTrainer(Callback):
    """Hands the matrix module's fault plan (which plans none here) the Trainer it reads its counters from."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl_module.faults.trainer = trainer


def check_matrix_loop(way: str, loop: Loop, point: Interruption, tmp_path: Path, exact_resume: bool = True) -> Any:
    trainer: dict[str, Any] = {
        "max_epochs": 2,
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
        "enable_checkpointing": False,
        "accumulate_grad_batches": loop.accumulate,
    }
    if loop.validation == "half":
        trainer["val_check_interval"] = loop.val_check_interval
    no_faults = Faults(None, tmp_path)
    callbacks: list[Any] = [MatrixTrainer]
    if way == "adapter":
        from lightning_step_types import StepResultAdapter

        callbacks.append(StepResultAdapter)
    return check_resume(
        lambda: module_class(way, loop)(loop, Faults(None, tmp_path)),
        train_dataloaders=lambda: train_loaders(loop, no_faults),
        val_dataloaders=val_loader if loop.validation != "none" else None,
        trainer=trainer,
        callbacks=callbacks,
        points=[point],
        exact_resume=exact_resume,
        root=tmp_path / "check",
    )


# (name, way in, loop, the matrix's fault, the check's interruption at the same place)
HARDEST = [
    (
        "the batch right after a mid-epoch validation",
        "typed",
        Loop(validation="half"),
        Fault("on_after_backward", "exception", 0, 5),
        Interruption.in_batch(0, 5),
    ),
    (
        "a window's last batch, after its backward (accumulate_grad_batches=3)",
        "adapter",
        Loop(accumulate=3),
        Fault("on_after_backward", "exception", 0, 5),
        Interruption.in_batch(0, 5),
    ),
    (
        "an IterableDataset in a StatefulDataLoader, every_n_train_steps",
        "typed",
        Loop(data="iterable"),
        Fault("between_batches", "checkpoint_kill", 0, 4),
        Interruption.kill_after_checkpoint(5),
    ),
    (
        "a value logged in the module's on_train_batch_end, ModelCheckpoint(every_n_train_steps=5)",
        "typed",
        Loop(logging="batch_end"),
        Fault("between_batches", "checkpoint_kill", 0, 4),
        Interruption.kill_after_checkpoint(5),
    ),
    (
        "a StatefulDataLoader checkpoint at an epoch's last batch",
        "adapter",
        Loop(),
        Fault("between_batches", "checkpoint_kill", 0, 10),
        Interruption.kill_after_checkpoint(11),
    ),
]
VERDICTS = {"exact": "exact", "warned": "warned", "silent": "differs"}


@pytest.mark.parametrize(("name", "way", "loop", "fault", "point"), HARDEST, ids=[case[0] for case in HARDEST])
def test_the_report_agrees_with_the_fault_matrix(
    name: str, way: str, loop: Loop, fault: Fault, point: Interruption, tmp_path: Path
) -> None:
    outcome = run_cell(MatrixCell(way, loop, fault), tmp_path / "matrix")
    report = check_matrix_loop(way, loop, point, tmp_path)
    (checked,) = report.points
    assert checked.verdict == VERDICTS[outcome.kind], f"{name}: matrix {outcome.shown()}\n{report}"
    assert report.ok
    assert report.fits == 3
    if outcome.kind == "warned":
        assert [message.splitlines()[0] for message in checked.warnings] == [
            message.splitlines()[0] for message in outcome.warnings
        ]


def test_plain_lightning_differs_where_the_matrix_shows_it_and_the_first_item_is_named(tmp_path: Path) -> None:
    """Plain Lightning's resume inside an epoch (exact_resume=False): the epoch's train_loss starts afresh."""
    loop = Loop()
    report = check_matrix_loop("typed", loop, Interruption.in_batch(0, 5), tmp_path, exact_resume=False)
    (checked,) = report.points
    assert checked.verdict == "differs" and checked.warnings == () and not report.ok
    reference = reference_run("typed", loop, tmp_path / "reference")  # the matrix's own uninterrupted fit
    items = {difference.item: difference for difference in checked.differences}
    epoch_loss = items["callback_metrics train_loss_epoch"]
    assert epoch_loss.uninterrupted == repr(reference.trainer.callback_metrics["train_loss_epoch"].item())
    assert epoch_loss.resumed != epoch_loss.uninterrupted
    first = checked.differences[0]
    assert str(checked).splitlines()[1] == f"            {first}"
    assert str(first) == f"{first.item}: {first.resumed} after the resume, {first.uninterrupted} uninterrupted"
    assert report.exact_resume is False
    assert str(report).startswith("check_resume, plain Lightning's resume (exact_resume=False): 1 interruption points")


# --- a real-world module: Lightning's own LSTM demo ------------------------------------------------


class Tokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """WikiText2's items as the demo reads them (35 token ids, and the same shifted by one), drawn at random:
    the demo's own dataset downloads WikiText2."""

    def __init__(self, vocab: int = 40, count: int = 80, block: int = 35) -> None:
        self.data = torch.randint(0, vocab, (count + block,), generator=torch.Generator().manual_seed(0))
        self.count, self.block = count, block

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data[index : index + self.block], self.data[index + 1 : index + 1 + self.block]


class SmallLSTM(LightningLSTM):
    """``LightningLSTM`` as released (its steps, its hidden state carried from batch to batch in
    ``self.hidden``), with a small ``SimpleLSTM`` and without WikiText2's download."""

    def __init__(self) -> None:
        super().__init__(vocab_size=40)
        self.model = SimpleLSTM(40, ninp=16, nhid=16, nlayers=2)

    def prepare_data(self) -> None:
        pass


def test_lightnings_lstm_demo_its_hidden_state_named_at_the_resume(tmp_path: Path) -> None:
    """Lightning-AI/pytorch-lightning, ``src/lightning/pytorch/demos/lstm.py`` (pytorch-lightning 2.6.6):
    ``LightningLSTM`` keeps the LSTM's hidden state in a plain attribute that no checkpoint holds, and
    resets it at each epoch's end, so the fit's end cannot show it: the check names it as the resumed
    fit's first batch starts."""

    def tokens() -> StatefulDataLoader[Any]:
        dataset = Tokens()
        return StatefulDataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    report = check_resume(
        SmallLSTM,
        train_dataloaders=tokens,
        trainer={"max_epochs": 1, "enable_checkpointing": False},
        points=[Interruption.in_batch(0, 2)],
        exact_resume=False,
        root=tmp_path,
    )
    (checked,) = report.points
    assert checked.verdict == "differs"
    # the resumed fit starts batch 2 again (by Lightning's counters) with no hidden state; the
    # uninterrupted fit started it with the state batches 0 and 1 left
    first = checked.differences[0]
    assert first.item == "at the resume (epoch 0, batch 2) module attribute hidden"
    assert (first.resumed, first.uninterrupted) == (
        "None",
        "(tensor of shape (2, 20, 16), tensor of shape (2, 20, 16))",
    )


# --- a deliberately broken setup ------------------------------------------------------------------


class CountsRows(TypedLightningModule):
    """Keeps a count of the rows it trained on in a plain attribute, which no checkpoint holds."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(3, 1)
        self.rows_seen = 0

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        self.rows_seen += len(x)
        return TrainStepResult(loss=F.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_a_module_attribute_no_checkpoint_holds_is_reported_with_its_values(tmp_path: Path) -> None:
    report = check_resume(
        CountsRows,
        train_dataloaders=lambda: StatefulDataLoader(make_dataset(0, 6), batch_size=2),
        trainer={"max_epochs": 1, "enable_checkpointing": False},
        points=[Interruption.in_batch(0, 3), Interruption.at_epoch_end(0)],
        exact_resume=False,
        root=tmp_path,
    )
    assert [point.verdict for point in report.points] == ["differs", "differs"] and not report.ok
    # 6 batches of 2 rows; the resumed fit counts from 0 again: plain Lightning resumes after batch 3
    # (interrupted after its backward, it counts the batch done), so batches 4 and 5; after the epoch's
    # end, none
    named = [[d for d in point.differences if d.item == "module attribute rows_seen"] for point in report.points]
    assert [[(d.uninterrupted, d.resumed) for d in found] for found in named] == [[("12", "4")], [("12", "0")]]
    assert "module attribute rows_seen: 4 after the resume, 12 uninterrupted" in str(report)
    assert report.fits == 5


# --- warned: the library's warnings, and what they name ----------------------------------------------


class CountsInItsCheckpoint(TypedLightningModule):
    """Running statistics (``BatchNorm1d`` in training mode) and a counter saved in ``on_save_checkpoint``:
    a checkpoint saved inside a batch cannot hold either exactly (docs/errors.md, "Resuming a run")."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(3)
        self.net = nn.Linear(3, 1)
        self.rows_seen = 0

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        self.rows_seen += len(x)
        return TrainStepResult(loss=F.mse_loss(self.net(self.bn(x)), y))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rows_seen"] = self.rows_seen

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.rows_seen = checkpoint["rows_seen"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_a_point_the_library_warns_about_is_warned_with_its_messages_and_what_differs(tmp_path: Path) -> None:
    report = check_resume(
        CountsInItsCheckpoint,
        train_dataloaders=lambda: StatefulDataLoader(make_dataset(0, 6), batch_size=2),
        trainer={"max_epochs": 1, "enable_checkpointing": False},
        points=[Interruption.in_batch(0, 3)],
        root=tmp_path,
    )
    (checked,) = report.points
    assert checked.verdict == "warned" and report.ok
    assert [message.splitlines()[0] for message in checked.warnings] == [
        "CountsInItsCheckpoint: resuming epoch 0 at batch 3",
        "CountsInItsCheckpoint: resuming epoch 0 at batch 3",
    ]
    text = "\n".join(checked.warnings)
    assert "running statistics: self.bn (BatchNorm1d)" in text and "CountsInItsCheckpoint.on_save_checkpoint" in text
    # batch 3 runs again: the counter saved before it counts its 2 rows twice, and so does bn's forward
    assert [(d.item, d.resumed, d.uninterrupted) for d in checked.differences[:3]] == [
        ("at the resume (epoch 0, batch 3) module attribute rows_seen", "8", "6"),
        ("module attribute rows_seen", "14", "12"),
        ("state_dict bn.num_batches_tracked", "7", "6"),
    ]
    assert [d.item for d in checked.differences[3:]] == [
        "state_dict bn.running_mean[0]",
        "state_dict bn.running_var[0]",
    ]


class Rows(LightningDataModule):
    """The data as a LightningDataModule: ``check_resume(..., datamodule=Rows)``."""

    def train_dataloader(self) -> StatefulDataLoader[Any]:
        return StatefulDataLoader(make_dataset(0, 6), batch_size=2)

    def val_dataloader(self) -> StatefulDataLoader[Any]:
        return StatefulDataLoader(make_dataset(1, 2), batch_size=2)


class Logs(TypedLightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss = F.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def test_a_datamodule_and_its_checkpoint_files_the_default_spread_exact(tmp_path: Path) -> None:
    """The default spread on a LightningDataModule, with a ModelCheckpoint keeping every epoch's file and
    logging each step: every point exact, the files kept compared by content too."""
    report = check_resume(
        Logs,
        datamodule=Rows,
        trainer={"max_epochs": 2, "log_every_n_steps": 1, "num_sanity_val_steps": 0},
        callbacks=[lambda: ModelCheckpoint(monitor="val_loss", save_top_k=-1, filename="{epoch}")],
        root=tmp_path,
    )
    assert [(str(point.point), point.verdict) for point in report.points] == [
        ("inside batch 3 of epoch 0", "exact"),
        ("inside batch 0 of epoch 1", "exact"),
        ("inside batch 5 of epoch 0", "exact"),
        ("inside epoch 0's first validation", "exact"),
        ("at the end of epoch 0", "exact"),
        ("a kill 2 batches after the checkpoint at step 3", "exact"),
    ]
    assert report.ok and report.fits == 13
    kept = sorted(path.name for path in (tmp_path / "point-0").rglob("epoch=*.ckpt"))
    assert kept == ["epoch=0.ckpt", "epoch=1.ckpt"]


def test_the_checkpoint_files_kept_are_compared_by_name_and_content(tmp_path: Path) -> None:
    """Plain Lightning's resume inside batch 3 (exact_resume=False) ends epoch 0 without its validation,
    so ModelCheckpoint keeps no epoch=0.ckpt, and epoch=1.ckpt holds one optimizer step fewer."""
    report = check_resume(
        Logs,
        datamodule=Rows,
        trainer={"max_epochs": 2, "log_every_n_steps": 1, "num_sanity_val_steps": 0},
        callbacks=[lambda: ModelCheckpoint(monitor="val_loss", save_top_k=-1, filename="{epoch}")],
        points=[Interruption.in_batch(0, 3)],
        exact_resume=False,
        root=tmp_path,
    )
    (checked,) = report.points
    folder = "<root>/rows/version_0/checkpoints"
    files = [
        (d.item, d.resumed, d.uninterrupted)
        for d in checked.differences
        if d.item == "checkpoint files kept" or d.item.startswith(folder)
    ]
    assert files == [
        ("checkpoint files kept", f"['{folder}/epoch=1.ckpt']", f"['{folder}/epoch=0.ckpt', '{folder}/epoch=1.ckpt']"),
        (f"{folder}/epoch=1.ckpt['global_step']", "11", "12"),
    ]


def test_a_point_the_fit_never_reaches_and_arguments_the_check_sets_itself(tmp_path: Path) -> None:
    report = check_resume(
        Logs,
        datamodule=Rows,
        trainer={"max_epochs": 1, "enable_checkpointing": False},
        points=[Interruption.in_batch(3, 0)],
        root=tmp_path,
    )
    (checked,) = report.points
    assert (checked.verdict, checked.error, report.fits, report.ok) == (
        "not reached",
        "the fit never came to this point",
        2,
        True,
    )
    assert str(checked) == "not reached inside batch 0 of epoch 3\n            the fit never came to this point"
    with pytest.raises(TypeError) as raised:
        check_resume(Logs, datamodule=Rows, trainer={"callbacks": [ModelCheckpoint()]})
    assert str(raised.value) == (
        "check_resume: trainer={'callbacks': ...}: the check sets 'callbacks' itself; expected callbacks as"
        " factories in `callbacks=[...]`, and no logger or default_root_dir; fix: leave 'callbacks' out of trainer="
    )


# --- fresh processes: nothing of one fit reaches the next through memory ---------------------------

TRAINED_BY_THIS_PROCESS: list[int] = []  # a module-level global: what every fit of this process trained on


class RemembersThisProcess(TypedLightningModule):
    """Notes in ``__init__`` how many batches earlier fits of its process trained (a module-level global),
    then appends its own: state that only memory carries from one fit to the next."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(3, 1)
        self.batches_before = len(TRAINED_BY_THIS_PROCESS)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        TRAINED_BY_THIS_PROCESS.append(batch_idx)
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def six_batches() -> StatefulDataLoader[Any]:
    return StatefulDataLoader(make_dataset(0, 6), batch_size=2)


def test_fresh_processes_keep_what_memory_carries_from_fit_to_fit_out_of_the_resume(tmp_path: Path) -> None:
    """In this process, the resumed fit's module sees the 6 + 4 batches the two fits before it trained; in
    fresh processes each fit starts from the module's import, as a relaunched job does."""
    points = [Interruption.in_batch(0, 3)]
    kwargs: dict[str, Any] = {"train_dataloaders": six_batches, "trainer": {"max_epochs": 1}, "points": points}
    TRAINED_BY_THIS_PROCESS.clear()
    here = check_resume(RemembersThisProcess, **kwargs, root=tmp_path / "here")
    (checked,) = here.points
    assert checked.verdict == "differs"
    assert [(d.item, d.resumed, d.uninterrupted) for d in checked.differences] == [
        ("at the resume (epoch 0, batch 3) module attribute batches_before", "10", "0"),
        ("module attribute batches_before", "10", "0"),
    ]
    TRAINED_BY_THIS_PROCESS.clear()
    fresh = check_resume(RemembersThisProcess, **kwargs, root=tmp_path / "fresh", fresh_processes=True)
    assert [(point.verdict, point.differences) for point in fresh.points] == [("exact", ())]
    assert TRAINED_BY_THIS_PROCESS == [] and fresh.fits == 3


class WritesAtTheEnd(Callback):
    """Writes a file from ``on_exception`` (a fit an exception ends) and ``on_fit_end`` (one that ends)."""

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        (Path(trainer.default_root_dir) / f"exception-{trainer.global_step}").touch()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        (Path(trainer.default_root_dir) / f"end-{trainer.global_step}").touch()


def test_a_kill_in_a_fresh_process_is_sigkill_no_hook_runs_after_it(tmp_path: Path) -> None:
    """Killed 2 batches after the periodic checkpoint at step 2: in this process the kill is an exception,
    so the check's OnExceptionCheckpoint saves and on_exception hooks run; in a fresh process nothing runs
    after it."""
    kwargs: dict[str, Any] = {
        "train_dataloaders": six_batches,
        "trainer": {"max_epochs": 1, "enable_checkpointing": False},
        "callbacks": [WritesAtTheEnd],
        "points": [Interruption.kill_after_checkpoint(2)],
    }
    here = check_resume(CountsRows, **kwargs, root=tmp_path / "here")
    fresh = check_resume(CountsRows, **kwargs, root=tmp_path / "fresh", fresh_processes=True)
    assert [point.verdict for point in here.points + fresh.points] == ["exact", "exact"]
    # the fits' folder: the periodic checkpoints, what ran after the kill, and the resumed fit's end
    here_files = sorted(path.name for path in (tmp_path / "here" / "point-0").rglob("*") if path.is_file())
    fresh_files = sorted(path.name for path in (tmp_path / "fresh" / "point-0").rglob("*") if path.is_file())
    assert here_files == ["end-6", "exception-4", "on_exception.ckpt", "step=2.ckpt", "step=4.ckpt"]
    assert fresh_files == ["end-6", "step=2.ckpt", "step=4.ckpt"]


def test_fresh_processes_name_a_factory_no_fresh_process_can_import(tmp_path: Path) -> None:
    with pytest.raises(TypeError) as raised:
        check_resume(CountsRows, train_dataloaders=lambda: six_batches(), fresh_processes=True, root=tmp_path)
    message = str(raised.value)
    assert message.startswith(
        "check_resume(fresh_processes=True): train_dataloaders=test_fresh_processes_name_a_factory_no_fresh_process"
        f"_can_import.<locals>.<lambda> (defined at {Path(__file__)}:"
    )
    assert message.endswith(
        ") is a lambda, which a fresh process cannot import; expected a module-level function or class, or"
        " functools.partial of one; fix: define it at module level (`def make_train_dataloaders(): return"
        " DataLoader(...)`) and pass `train_dataloaders=make_train_dataloaders`"
    )
    code = (
        "from lightning_step_types.check_resume import check_resume\n"
        "def make():\n    raise AssertionError('never called')\n"
        "check_resume(make, fresh_processes=True)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=repo_env(), capture_output=True, text=True,
        timeout=hang_limit(idle_s=30),
    )  # fmt: skip
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines()[-1] == (
        "TypeError: check_resume(fresh_processes=True): module=make is defined in an interactive session (a"
        " notebook, `python -c`), which a fresh process cannot import; expected a function or class of an"
        " importable module; fix: move it into a .py file next to the notebook and import it from there"
    )


class CountsBatches(Callback):
    """Counts the training batches it saw in a plain attribute, outside its (absent) ``state_dict()``."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1


def test_a_callbacks_plain_attributes_are_compared(tmp_path: Path) -> None:
    """Plain Lightning's resume (exact_resume=False) starts a callback's attribute afresh: the report names it
    with both values; the library's puts it back (exact)."""
    kwargs: dict[str, Any] = {
        "train_dataloaders": six_batches,
        "trainer": {"max_epochs": 1, "enable_checkpointing": False},
        "callbacks": [CountsBatches],
        "points": [Interruption.in_batch(0, 3)],
    }
    plain = check_resume(CountsRows, **kwargs, exact_resume=False, root=tmp_path / "plain")
    (checked,) = plain.points
    named = [(d.item, d.resumed, d.uninterrupted) for d in checked.differences if d.item.startswith("callback")]
    assert named == [("callback attribute 0: CountsBatches.batches", "2", "6")]
    exact = check_resume(CountsRows, **kwargs, root=tmp_path / "exact")
    assert [point.verdict for point in exact.points] == ["exact"]


# --- a checkpoint that holds objects: the check resumes from the files it wrote itself --------------


class Normalizer:
    """An object in the module's hyperparameters, as pytorch-forecasting 1.8.0 keeps its
    ``GroupNormalizer`` (``TimeSeriesDataSet``'s target normalizer, in ``save_hyperparameters()``): the
    checkpoint then pickles it, and ``torch.load(weights_only=True)``, torch's default, refuses it."""

    def __init__(self, scale: float, method: str = "standard") -> None:
        self.scale = scale
        self.method = method


class KeepsAnObjectInItsHyperparameters(TypedLightningModule):
    def __init__(self, normalizer: Normalizer | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.normalizer = normalizer or Normalizer(2.0)
        self.net = nn.Linear(3, 1)

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        x, y = batch
        return TrainStepResult(loss=F.mse_loss(self.net(x) * self.normalizer.scale, y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_a_checkpoint_holding_objects_resumes_where_torchs_weights_only_load_would_refuse_it(tmp_path: Path) -> None:
    report = check_resume(
        lambda: KeepsAnObjectInItsHyperparameters(Normalizer(2.0)),
        train_dataloaders=lambda: StatefulDataLoader(make_dataset(0, 4), batch_size=2),
        trainer={"max_epochs": 1, "enable_checkpointing": False},
        points=[Interruption.in_batch(0, 2)],
        root=tmp_path,
    )
    assert [point.verdict for point in report.points] == ["exact"], str(report)
    assert report.ok and report.fits == 3


def test_an_object_in_a_checkpoint_file_is_compared_by_its_attributes_not_by_identity(tmp_path: Path) -> None:
    # the kept file's hyperparameters hold a Normalizer, which compares by identity: two loads of one
    # file are two objects, equal by their attributes
    report = check_resume(
        lambda: KeepsAnObjectInItsHyperparameters(Normalizer(2.0)),
        train_dataloaders=lambda: StatefulDataLoader(make_dataset(0, 4), batch_size=2),
        trainer={"max_epochs": 1},
        points=[Interruption.in_batch(0, 2)],
        root=tmp_path,
    )
    assert [point.verdict for point in report.points] == ["exact"], str(report)
    # and where the attributes differ, the attribute is named
    changed = check_resume(
        lambda: KeepsAnObjectInItsHyperparameters(Normalizer(2.0)),
        train_dataloaders=lambda: StatefulDataLoader(make_dataset(0, 4), batch_size=2),
        trainer={"max_epochs": 1},
        callbacks=[ChangesTheNormalizerOnResume],
        points=[Interruption.in_batch(0, 2)],
        root=tmp_path / "changed",
    )
    (point,) = changed.points
    assert point.verdict == "differs"
    assert any(
        d.item.endswith("['hyper_parameters']['normalizer']['method']")
        and (d.resumed, d.uninterrupted) == ("'robust'", "'standard'")
        for d in point.differences
    ), str(changed)


class ChangesTheNormalizerOnResume(Callback):
    """Sets the hyperparameters' normalizer's ``method`` (which training does not read) in a resumed fit."""

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        pl_module.hparams["normalizer"].method = "robust"
