"""The migration codemod: ``python -m lightning_step_types.migrate [--diff] [--base-class] PATH...``.

Each case in ``migrate_cases/<name>/`` is a module as users write it (``input.py``), its exact
rewrite (``expected.py``) and the codemod's exact findings (``report.txt``, one per line; a first
line ``# args: ...`` gives extra command-line arguments). For every case the codemod runs on a
copy through its command line: the output must equal ``expected.py`` byte for byte, a second run
must change nothing, ``--diff`` must print exactly the diff and write nothing, and the rewritten
module must train with a real Trainer (2 batches) with every converted step checked strictly.
One mypy run (strict, the repository's mypy.ini) checks all rewritten modules.

The remaining tests pin the report line for each kind of code the codemod refuses to touch, the
rewrite of edge cases (bare returns, one-line ``if``, imports, CRLF), the exit codes and summary
of the command line, and that no unparseable file is ever written.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("libcst", reason="the codemod needs libcst (the `migrate` / `test` extras)")

import libcst as cst  # noqa: E402
import lightning.pytorch as lpl  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from limits import hang_limit  # noqa: E402

import lightning_step_types.lightning_pytorch as typed_lightning_pytorch  # noqa: E402
import lightning_step_types.migrate.cli as migrate_cli  # noqa: E402
import lightning_step_types.pytorch_lightning as typed_pytorch_lightning  # noqa: E402
from lightning_step_types import StepResultWarning  # noqa: E402
from lightning_step_types.migrate import Migration, main, migrate_source  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASES_DIR = Path(__file__).resolve().parent / "migrate_cases"
STEP_HOOKS = ("training_step", "validation_step", "test_step")
VERDICTS = (
    ": rewritten",
    ": already typed",
    ": returns nothing to convert",
    ": not in a LightningModule, left as it is",
)
# What the codemod did to a class's base or an import: reported, nothing left for the user.
DONE = (": base class switched: ", ": import removed: ", ": import kept: ")
NOT_SKIPS = (*VERDICTS, *DONE, ": note: ", ": base class kept: ", ": Lightning 1.x: ")


# --- cases ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    findings: tuple[str, ...]  # Finding.describe() lines, in order

    @property
    def input(self) -> bytes:
        return (CASES_DIR / self.name / "input.py").read_bytes()

    @property
    def expected(self) -> bytes:
        return (CASES_DIR / self.name / "expected.py").read_bytes()

    @property
    def reported(self) -> list[str]:
        """The findings the command line prints: all of them, a verdict for every step."""
        return list(self.findings)

    def count(self, verdict: str) -> int:
        return sum(1 for f in self.findings if f.endswith(f": {verdict}"))

    @property
    def skipped_steps(self) -> set[str]:
        """``Class.hook`` of every step left as it was."""
        return {f.split(" line ")[0] for f in self.findings if not any(m in f for m in NOT_SKIPS)}

    @property
    def needs_attention(self) -> bool:
        """Exit status 2: a step skipped, a base class kept or a Lightning 1.x leftover."""
        return any(
            ": note: " not in f and not any(f.endswith(v) for v in VERDICTS) and not any(d in f for d in DONE)
            for f in self.findings
        )


def load_case(name: str) -> Case:
    lines = (CASES_DIR / name / "report.txt").read_text().splitlines()
    args: tuple[str, ...] = ()
    if lines and lines[0].startswith("# args:"):
        args = tuple(lines.pop(0).removeprefix("# args:").split())
    return Case(name, args, tuple(line for line in lines if line))


CASE_NAMES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "input.py").is_file())
CASES = [load_case(name) for name in CASE_NAMES]


def test_there_are_enough_realistic_cases() -> None:
    assert len(CASES) >= 15
    for case in CASES:
        assert (CASES_DIR / case.name / "expected.py").is_file(), case.name


# --- running the command line in-process -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CliRun:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()


def run_cli(*args: str) -> CliRun:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return CliRun(code, out.getvalue(), err.getvalue())


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or word + 's'}"


def summary(
    files: int,
    changed: int,
    rewritten: int,
    skipped: int,
    kept: int = 0,
    errors: int = 0,
    diff: bool = False,
    typed: int = 0,
    nothing: int = 0,
    leftovers: int = 0,
    ignored: int = 0,
    switched: int = 0,
    imports_removed: int = 0,
    imports_kept: int = 0,
) -> str:
    parts = [
        f"{plural(files, 'file')} checked",
        f"{plural(changed, 'file')} {'would change' if diff else 'changed'}",
        f"{plural(rewritten, 'method')} {'to rewrite' if diff else 'rewritten'}",
    ]
    if typed:
        parts.append(f"{plural(typed, 'method')} already typed")
    if nothing:
        parts.append(f"{plural(nothing, 'method')} returning nothing to convert")
    if ignored:
        parts.append(f"{plural(ignored, 'method')} not in a LightningModule")
    parts.append(f"{plural(skipped, 'method')} skipped")
    if switched:
        parts.append(f"{plural(switched, 'base class', 'base classes')} {'to switch' if diff else 'switched'}")
    if kept:
        parts.append(f"{plural(kept, 'base class', 'base classes')} kept")
    if imports_removed:
        parts.append(f"{plural(imports_removed, 'import')} {'to remove' if diff else 'removed'}")
    if imports_kept:
        parts.append(f"{plural(imports_kept, 'import')} kept")
    if leftovers:
        parts.append(plural(leftovers, "Lightning 1.x leftover"))
    parts.append(plural(errors, "error"))
    return "lightning_step_types.migrate: " + ", ".join(parts)


def case_summary(case: Case, changed: int, second_run: bool = False, diff: bool = False) -> str:
    """The summary line of a run on the case's input (or, ``second_run``, on its expected output)."""
    kept = sum(1 for f in case.findings if ": base class kept: " in f)
    leftovers = sum(1 for f in case.findings if ": Lightning 1.x: " in f)
    done = {marker: sum(1 for f in case.findings if marker in f) for marker in DONE}
    rewritten, typed = case.count("rewritten"), case.count("already typed")
    if second_run:  # the bases are switched and the imports gone already
        rewritten, typed = 0, rewritten + typed
        done = dict.fromkeys(DONE, 0)
    return summary(
        1,
        changed,
        rewritten,
        len(case.skipped_steps),
        kept,
        diff=diff,
        typed=typed,
        nothing=case.count("returns nothing to convert"),
        leftovers=leftovers,
        ignored=case.count("not in a LightningModule, left as it is"),
        switched=done[": base class switched: "],
        imports_removed=done[": import removed: "],
        imports_kept=done[": import kept: "],
    )


@dataclasses.dataclass(frozen=True)
class Rewritten:
    path: Path
    run: CliRun


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rewritten]:
    """Every case's input, copied and rewritten in place by the command line (once per test module)."""
    folder = tmp_path_factory.mktemp("migrated")
    done: dict[str, Rewritten] = {}
    for case in CASES:
        path = folder / f"case_{case.name}.py"
        path.write_bytes(case.input)
        done[case.name] = Rewritten(path, run_cli(str(path), *case.args))
    return done


# --- each case -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_rewrites_to_expected(case: Case, rewritten: dict[str, Rewritten]) -> None:
    result = rewritten[case.name]
    assert result.path.read_bytes() == case.expected
    migration = migrate_source(case.input, base_class="--base-class" in case.args)
    assert [f.describe() for f in migration.findings] == list(case.findings)
    changed = int(case.expected != case.input)
    assert result.run.lines == [
        *(f"{result.path}: {line}" for line in case.reported),
        case_summary(case, changed),
    ]
    assert result.run.stdout == ""
    assert result.run.code == (2 if case.needs_attention else 0)


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_second_run_changes_nothing(case: Case, rewritten: dict[str, Rewritten]) -> None:
    path = rewritten[case.name].path
    again = run_cli(str(path), *case.args)
    assert path.read_bytes() == case.expected
    assert again.lines[-1] == case_summary(case, changed=0, second_run=True)
    assert again.code == (2 if case.needs_attention else 0)
    second = migrate_source(case.expected, base_class="--base-class" in case.args)
    assert not second.changed
    assert {f.where for f in second.skipped} == case.skipped_steps


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_diff_mode_prints_the_diff_and_writes_nothing(case: Case, tmp_path: Path) -> None:
    path = tmp_path / f"{case.name}.py"
    path.write_bytes(case.input)
    result = run_cli("--diff", str(path), *case.args)
    assert path.read_bytes() == case.input
    expected_diff = difflib.unified_diff(
        case.input.decode().splitlines(keepends=True),
        case.expected.decode().splitlines(keepends=True),
        fromfile=str(path),
        tofile=str(path),
    )
    assert result.stdout == "".join(expected_diff)
    assert result.lines[-1] == case_summary(case, int(case.expected != case.input), diff=True)
    assert result.code == (2 if case.needs_attention else 0)


def import_path(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def defines(cls: type, name: str, module: ModuleType) -> bool:
    """Whether ``cls`` or one of its bases from ``module`` defines ``name`` (not Lightning's default)."""
    return any(name in klass.__dict__ for klass in cls.__mro__ if klass.__module__ == module.__name__)


def checked_strictly(cls: type, module: ModuleType, case: Case) -> bool:
    """Strict checks (typed results only) unless a step the class runs was left for a manual migration."""
    for hook in STEP_HOOKS:
        owner = next((k for k in cls.__mro__ if hook in k.__dict__), None)
        if owner is None or owner.__module__ != module.__name__:
            continue
        if f"{owner.__qualname__}.{hook}" in case.skipped_steps:
            return False
    return True


@pytest.mark.parametrize("case", CASES, ids=CASE_NAMES)
def test_rewritten_module_trains(case: Case, rewritten: dict[str, Rewritten], tmp_path: Path) -> None:
    module = import_path(rewritten[case.name].path, f"migrate_case_{case.name}")
    models = [
        cls
        for cls in vars(module).values()
        if isinstance(cls, type)
        and cls.__module__ == module.__name__
        and issubclass(cls, (pl.LightningModule, lpl.LightningModule))
        and defines(cls, "training_step", module)
        and defines(cls, "train_dataloader", module)
    ]
    assert models, f"{case.name} defines no trainable LightningModule"
    for cls in models:
        flavour: Any = typed_pytorch_lightning if issubclass(cls, pl.LightningModule) else typed_lightning_pytorch
        trainer_class: Any = pl.Trainer if issubclass(cls, pl.LightningModule) else lpl.Trainer
        callbacks = []
        if not issubclass(cls, flavour.TypedLightningModule):  # a typed module checks itself, strictly
            callbacks.append(flavour.StepResultAdapter(strict=checked_strictly(cls, module, case)))
        torch.manual_seed(0)
        model = cls()
        trainer = trainer_class(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            limit_train_batches=2,
            limit_val_batches=2,
            limit_test_batches=2,
            num_sanity_val_steps=0,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(tmp_path / cls.__name__),
            callbacks=callbacks,
        )
        with warnings.catch_warnings():
            # Steps left for a manual migration still return what Lightning 1.x took: the lenient adapter warns.
            warnings.simplefilter("ignore", StepResultWarning)
            # SineRegressor inherits a val_dataloader and has no validation_step, as such subclasses do.
            warnings.filterwarnings("ignore", message="You passed in a `val_dataloader` but have no `validation_step`")
            trainer.fit(model)  # a StepResultError would fail the test here
        assert trainer.fit_loop.epoch_loop.batch_progress.total.completed == 2, cls.__name__
        assert trainer.global_step == 2 * len(trainer.optimizers), cls.__name__  # each optimizer stepped per batch
        if defines(cls, "validation_step", module):
            assert trainer.fit_loop.epoch_loop.val_loop.batch_progress.total.completed == 2, cls.__name__
        if defines(cls, "test_step", module) and defines(cls, "test_dataloader", module):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", StepResultWarning)
                trainer.test(model, verbose=False)
            assert trainer.test_loop.batch_progress.total.completed == 2, cls.__name__


def test_mypy_accepts_every_rewritten_module(rewritten: dict[str, Rewritten]) -> None:
    paths = [str(r.path) for r in rewritten.values()]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "mypy.ini"), "--no-error-summary", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=110),
    )
    assert result.returncode in (0, 1), result.stderr  # 2 would be a mypy crash or a usage error
    folder = str(next(iter(rewritten.values())).path.parent)
    in_cases = [line for line in result.stdout.splitlines() if line.startswith(folder)]
    elsewhere = [line for line in result.stdout.splitlines() if line and not line.startswith(folder)]
    if elsewhere:  # errors inside lightning_step_types itself (its stubs may be in flux): shown, not failed on
        warnings.warn("mypy reports problems outside the rewritten modules:\n" + "\n".join(elsewhere), stacklevel=1)
    assert in_cases == []


# --- what the codemod refuses, and why ---------------------------------------------------------------

HEADER = """import pytorch_lightning as pl
import torch
import torch.nn.functional as F


class Model(pl.LightningModule):
"""


def step(body: str, before: str = "", after: str = "") -> str:
    """A module with one LightningModule, ``Model``, whose class body is ``body`` (dedented here)."""
    return before + HEADER + textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", "    ") + after


REFUSALS = {
    "tuple": (
        step("""
            def training_step(self, batch, batch_idx):
                loss, logits = self.shared(batch)
                return loss, logits
        """),
        "Model.training_step line 9: returns a tuple",
    ),
    "variable built elsewhere": (
        step("""
            def training_step(self, batch, batch_idx):
                out = self.shared_step(batch)
                return out
        """),
        "Model.training_step line 9: returns a variable `out` (from `self.shared_step(batch)`, line 8):"
        " `self.shared_step` is not defined in the files given",
    ),
    "dict built in a variable and aliased": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                result = {"loss": loss}
                self.last = result
                return result
        """),
        "Model.training_step line 11: returns a variable `result` holding a dict built at line 9, which the method"
        " also uses otherwise than by setting and reading its keys; return the dict itself",
    ),
    "non-literal keys": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                return {LOSS_KEY: loss}
        """),
        "Model.training_step line 9: dict has non-literal keys (`LOSS_KEY`)",
    ),
    "star-star in dict": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                return {"loss": loss, **extra}
        """),
        "Model.training_step line 9: `**extra` in dict",
    ),
    "duplicate key": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = self.loss_fn(batch)
                return {"loss": loss, "loss": loss * 2}
        """),
        "Model.training_step line 9: dict has the key 'loss' twice",
    ),
    "several return shapes": (
        step("""
            def validation_step(self, batch, batch_idx):
                if batch_idx == 0:
                    return F.mse_loss(self(batch), batch)
                return self(batch), batch
        """),
        "Model.validation_step line 10: several return shapes: returns a tuple here, a loss tensor at line 9",
    ),
    "training dict without loss": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = self.loss_fn(batch)
                return {"total": loss}
        """),
        "Model.training_step line 9: dict has no 'loss' key",
    ),
    "evaluation dict without loss": (
        step("""
            def validation_step(self, batch, batch_idx):
                return {"preds": self(batch)}
        """),
        "Model.validation_step line 8: dict has no loss key ('loss', 'val_loss' or 'test_loss')",
    ),
    "evaluation dict with two losses": (
        step("""
            def validation_step(self, batch, batch_idx):
                loss = self.loss_fn(batch)
                return {"loss": loss, "val_loss": loss}
        """),
        "Model.validation_step line 9: dict has several loss keys ('loss', 'val_loss')",
    ),
    "hiddens": (
        step("""
            def training_step(self, batch, batch_idx):
                loss, hiddens = self.rnn_loss(batch, self.hiddens)
                return {"loss": loss, "hiddens": hiddens}
        """),
        "Model.training_step line 9: dict has the Lightning 0.x 'hiddens' key (truncated backprop), which Lightning 2"
        " ignores: keep the state on the module (`self.hiddens = ...`) and drop the key",
    ),
    "python number": (
        step("""
            def validation_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                return loss.item()
        """),
        "Model.validation_step line 9: returns a Python number (`loss.item()`)",
    ),
    "accumulated from a number": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = 0.0
                for part in batch:
                    loss = loss + F.mse_loss(self(part), part)
                return loss
        """),
        "Model.training_step line 11: returns a variable `loss` that is assigned a Python number (`0.0`) at line 8",
    ),
    "per-sample losses": (
        step("""
            def validation_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch, reduction='none')
        """),
        "Model.validation_step line 8: returns `F.mse_loss(self(batch), batch, reduction='none')`,"
        " computed with reduction='none' (not one value)",
    ),
    "per-sample losses in a variable": (
        step("""
            def validation_step(self, batch, batch_idx):
                loss = F.l1_loss(self(batch), batch, reduction="none")
                return loss
        """),
        "Model.validation_step line 9: returns a variable `loss` computed with reduction='none' at line 8"
        " (not one value)",
    ),
    "loop variable": (
        step("""
            def training_step(self, batch, batch_idx):
                for loss in self.losses(batch):
                    pass
                return loss
        """),
        "Model.training_step line 10: returns a variable `loss` bound by a for loop at line 8",
    ),
    "conditional expression": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = self.loss_fn(batch)
                return loss if batch_idx else None
        """),
        "Model.training_step line 9: returns `loss if batch_idx else None`, which the code does not show to be a"
        " loss tensor",
    ),
    "assigned step": (
        step("""
            def shared(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)

            training_step = shared
        """),
        "Model.training_step line 10: is assigned (`training_step = shared`), not defined:"
        " define it instead (`def training_step(self, batch, batch_idx): return self.shared(batch, batch_idx)`)",
    ),
    "result used elsewhere in the file": (
        step(
            """
            def training_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)
            """,
            after=textwrap.dedent("""


                def test_step_runs():
                    loss = Model().training_step(torch.ones(2, 2), 0)
                    loss.backward()
            """).removeprefix("\n"),
        ),
        "Model.training_step line 7: its return value is used at line 12"
        " (`Model().training_step(torch.ones(2, 2), 0)`)",
    ),
    "order of calls": (
        step("""
            def training_step(self, batch, batch_idx):
                preds = self(batch)
                return {"acc": self.accuracy(preds, batch), "loss": self.compute_loss(preds, batch)}
        """),
        "Model.training_step line 9: the rewrite would evaluate `self.compute_loss(preds, batch)` before"
        " `self.accuracy(preds, batch)`; both call code that may have side effects",
    ),
    "unknown annotation": (
        step("""
            def training_step(self, batch, batch_idx) -> MyOutput:
                return F.mse_loss(self(batch), batch)
        """),
        "Model.training_step line 7: return annotation `MyOutput` is not one the codemod knows",
    ),
    "log value not a literal": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = self.loss_fn(batch)
                return {"loss": loss, "log": self.metrics()}
        """),
        "Model.training_step line 9: the 'log' value `self.metrics()` is not a dict literal",
    ),
    "log variable changed after it is built": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = self.loss_fn(batch)
                logs = {"train_loss": loss}
                logs.update(self.extra)
                return {"loss": loss, "log": logs}
        """),
        "Model.training_step line 11: the 'log' value `logs` is not a dict literal assigned once in the method",
    ),
    "log and progress bar disagree": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                return {"loss": loss, "log": {"l": loss}, "progress_bar": {"l": loss.detach()}}
        """),
        "Model.training_step line 9: 'log' and 'progress_bar' both have 'l', with different values; give one of"
        " them another name (self.log_dict logs each name once per step)",
    ),
    "log variable shares a key with the progress bar": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                logs = {"train_loss": loss, "train_mse": loss}
                return {"loss": loss, "log": logs, "progress_bar": {"train_loss": loss}}
        """),
        "Model.training_step line 10: 'log' (the dict `logs`) and 'progress_bar' both have 'train_loss', which"
        " self.log_dict would log twice; remove it from `logs` (the progress bar's values are logged to the logger"
        " as well)",
    ),
    "log is a dict of losses a call returned, beside a progress bar": (
        step("""
            def training_step(self, batch, batch_idx):
                images, targets = batch
                loss_dict = self.model(images, targets)
                loss = sum(loss for loss in loss_dict.values())
                return {"loss": loss, "log": loss_dict, "progress_bar": {"total": loss}}
        """),
        "Model.training_step line 11: the 'log' value `loss_dict` is a dict a call returns, whose keys the code"
        " does not show, so they cannot be compared with the 'progress_bar' dict's; log it in the step with"
        " self.log_dict(loss_dict) and drop the 'log' key",
    ),
    "log value not one value": (
        step("""
            def training_step(self, batch, batch_idx):
                logits = self(batch)
                loss = F.cross_entropy(logits, batch)
                return {"loss": loss, "log": {"train_loss": loss, "logits": logits}}
        """),
        "Model.training_step line 10: the 'log' dict's 'logits': `logits` is not shown to be one value;"
        " self.log_dict takes one value per key",
    ),
    "variable None on a path": (
        step("""
            def validation_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                if batch_idx == 0:
                    loss = None
                return loss
        """),
        "Model.validation_step line 11: returns a variable `loss` that is None on some paths (line 10):"
        " return None there",
    ),
    "batch-end hook receives the tensor": (
        step("""
            def validation_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)

            def on_validation_batch_end(self, outputs, batch, batch_idx):
                self.seen.append(outputs)
        """),
        "Model.validation_step line 8: `on_validation_batch_end` (line 10) receives this tensor; returning"
        " ValStepResult would change what it gets",
    ),
    "renamed key read elsewhere": (
        step("""
            def validation_step(self, batch, batch_idx):
                return {"val_loss": self.loss_fn(batch)}

            def summarize(self, outputs):
                return sum(o["val_loss"] for o in outputs)
        """),
        "Model.validation_step line 8: the key 'val_loss' is read at line 11;"
        " after the rewrite it is the result's `loss`",
    ),
    "decorator": (
        step("""
            @cache_outputs
            def training_step(self, batch, batch_idx):
                return self.loss_fn(batch)
        """),
        "Model.training_step line 8: decorated with `@cache_outputs`, which may change what it returns",
    ),
    "async": (
        step("""
            async def training_step(self, batch, batch_idx):
                return self.loss_fn(batch)
        """),
        "Model.training_step line 7: is async",
    ),
    "generator": (
        step("""
            def training_step(self, batch, batch_idx):
                yield self.loss_fn(batch)
        """),
        "Model.training_step line 8: uses `yield`",
    ),
    "wrong result class": (
        step(
            """
            def training_step(self, batch, batch_idx):
                return ValStepResult(loss=self.loss_fn(batch))
            """,
            before="from lightning_step_types import ValStepResult\n",
        ),
        "Model.training_step line 9: returns ValStepResult from training_step; training_step returns TrainStepResult",
    ),
    "name taken": (
        step(
            """
            def training_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)
            """,
            before="class TrainStepResult:\n    pass\n\n\n",
        ),
        "Model.training_step line 11: `TrainStepResult` already names something else in this file",
    ),
    "comments with no line of their own": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                if batch_idx == 0: return {"loss": loss,  # first
                                           "log": {"first": loss}}
                return loss
        """),
        "Model.training_step line 7: the comments inside the returned dict would have no line of their own"
        " (the return shares its line with an `if`/`for`/`with`): put the return on a line of its own",
    ),
}


@pytest.mark.parametrize("source, finding", REFUSALS.values(), ids=list(REFUSALS))
def test_refuses_what_it_cannot_show_safe(source: str, finding: str) -> None:
    migration = migrate_source(source)
    assert [f.describe() for f in migration.findings] == [finding]
    assert not migration.changed
    assert migration.module.code == source


def test_ignores_returns_of_nested_functions_and_says_so() -> None:
    source = step("""
        def training_step(self, batch, batch_idx):
            def closure():
                return F.mse_loss(self(batch), batch)

            loss = closure()
            return loss
    """)
    migration = migrate_source(source)
    assert [f.describe() for f in migration.findings] == [
        "Model.training_step line 7: rewritten",
        "Model.training_step line 9: note: return inside the nested function `closure` ignored"
        " (it is not the step's return)",
    ]
    assert "            return F.mse_loss(self(batch), batch)\n" in migration.module.code
    assert "        return TrainStepResult(loss=loss)\n" in migration.module.code


# --- rewrites of edge cases ------------------------------------------------------------------------


def rewrite(source: str | bytes, base_class: bool = False) -> Migration:
    migration = migrate_source(source, base_class=base_class)
    assert not migration.skipped, [f.describe() for f in migration.findings]
    return migration


def test_none_paths_keep_none_in_the_annotation() -> None:
    source = """import pytorch_lightning as pl
import torch.nn.functional as F


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        if batch_idx == 3:
            return
        loss = F.mse_loss(self(batch), batch)
        return loss

    def validation_step(self, batch, batch_idx) -> Optional[STEP_OUTPUT]:
        if batch_idx == 0:
            return F.mse_loss(self(batch), batch)

    def test_step(self, batch, batch_idx) -> Union[Tensor, None]:
        while True:
            return F.mse_loss(self(batch), batch)
"""
    assert (
        rewrite(source).module.code
        == """import pytorch_lightning as pl
import torch.nn.functional as F
from lightning_step_types import TrainStepResult, ValStepResult


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx) -> TrainStepResult | None:
        if batch_idx == 3:
            return
        loss = F.mse_loss(self(batch), batch)
        return TrainStepResult(loss=loss)

    def validation_step(self, batch, batch_idx) -> Optional[ValStepResult]:
        if batch_idx == 0:
            return ValStepResult(loss=F.mse_loss(self(batch), batch))

    def test_step(self, batch, batch_idx) -> ValStepResult:
        while True:
            return ValStepResult(loss=F.mse_loss(self(batch), batch))
"""
    )


def test_one_line_statements_get_their_log_calls_inline() -> None:
    source = """import pytorch_lightning as pl


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = F.mse_loss(self(batch), batch)
        if batch_idx == 0: return {"loss": loss, "log": {"first_loss": loss}}
        x = 1; return{"loss": loss}
"""
    assert (
        rewrite(source).module.code
        == """import pytorch_lightning as pl
from lightning_step_types import TrainStepResult


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx) -> TrainStepResult:
        loss = F.mse_loss(self(batch), batch)
        if batch_idx == 0: self.log_dict({"first_loss": loss}); return TrainStepResult(loss=loss)
        x = 1; return TrainStepResult(loss=loss)
"""
    )


def test_removed_entries_keep_the_comments_of_their_neighbours() -> None:
    source = """import pytorch_lightning as pl


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = F.mse_loss(self(batch), batch)
        return {
            "acc": self.acc,  # accuracy
            "loss": loss  # the loss
        }

    def validation_step(self, batch, batch_idx):
        loss = F.mse_loss(self(batch), batch)
        return {
            "val_loss": loss,
            "log": {
                "val_loss": loss,  # per step
                "val_n": len(batch),
            },
        }
"""
    assert (
        rewrite(source).module.code
        == """import pytorch_lightning as pl
from lightning_step_types import TrainStepResult, ValStepResult


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx) -> TrainStepResult:
        loss = F.mse_loss(self(batch), batch)
        return TrainStepResult(
            loss=loss,  # the loss
            metadata={
                "acc": self.acc  # accuracy
            },
        )

    def validation_step(self, batch, batch_idx) -> ValStepResult:
        loss = F.mse_loss(self(batch), batch)
        self.log_dict({
            "val_loss": loss,  # per step
            "val_n": len(batch),
        })
        return ValStepResult(
            loss=loss,
        )
"""
    )


MODULE_BODY = """

class Model(LightningModule):
    def training_step(self, batch, batch_idx):
        return F.mse_loss(self(batch), batch)
"""


@pytest.mark.parametrize(
    "imports, expected",
    [
        (  # after the third-party section's plain imports, before its `from` lines that sort after it
            "import math\n\nimport torch.nn.functional as F\nfrom pytorch_lightning import LightningModule\n\n"
            "from .helpers import shared\n",
            "import math\n\nimport torch.nn.functional as F\nfrom lightning_step_types import TrainStepResult\n"
            "from pytorch_lightning import LightningModule\n\nfrom .helpers import shared\n",
        ),
        (  # at the section's end, never after the relative imports
            "import torch.nn.functional as F\nfrom kornia import augmentation\nfrom lightning.pytorch import LightningModule\n\n"
            "from . import shared\nfrom .models import Net\n",
            "import torch.nn.functional as F\nfrom kornia import augmentation\nfrom lightning.pytorch import LightningModule\n"
            "from lightning_step_types import TrainStepResult\n\nfrom . import shared\nfrom .models import Net\n",
        ),
        (  # first in its section: the blank line above the section stays above it
            "import os\n\nfrom pytorch_lightning import LightningModule\nfrom torch.nn import functional as F\n",
            "import os\n\nfrom lightning_step_types import TrainStepResult\nfrom pytorch_lightning import LightningModule\n"
            "from torch.nn import functional as F\n",
        ),
    ],
)
def test_the_added_import_lands_where_isort_puts_it(imports: str, expected: str) -> None:
    migration = rewrite(imports + MODULE_BODY)
    assert migration.module.code.startswith(expected), migration.module.code


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff (the test extra) checks the order as isort does")
def test_each_case_s_imports_are_isort_sorted_after_the_rewrite_where_they_were_before(tmp_path: Path) -> None:
    """ruff's isort rule (I001, default settings, outside this project's configuration) as the judge."""
    for case in CASES:
        (tmp_path / f"input_{case.name}.py").write_bytes(case.input)
        (tmp_path / f"expected_{case.name}.py").write_bytes(case.expected)
    checked = subprocess.run(
        ["ruff", "check", "--isolated", "--select", "I", "--output-format", "json", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=2),
    )
    flagged = {Path(diagnostic["filename"]).name for diagnostic in json.loads(checked.stdout)}
    sorted_inputs = [case.name for case in CASES if f"input_{case.name}.py" not in flagged]
    assert len(sorted_inputs) >= 20
    assert [name for name in sorted_inputs if f"expected_{name}.py" in flagged] == []


def test_merges_into_a_parenthesized_import_in_sorted_order() -> None:
    source = """from lightning_step_types import (
    StepResultAdapter,
    TypedCallback,
)
import pytorch_lightning as pl


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return F.mse_loss(self(batch), batch)
"""
    assert rewrite(source).module.code.startswith(
        "from lightning_step_types import (\n    StepResultAdapter,\n    TrainStepResult,\n    TypedCallback,\n)\n"
    )


def test_an_import_from_the_results_module_counts_and_lightning_pytorch_is_recognized() -> None:
    source = '''"""Docstring."""
from lightning_step_types.results import TrainStepResult
import lightning.pytorch as pl


class Model(pl.LightningModule):
    def training_step(self, batch, batch_idx) -> pl.utilities.types.STEP_OUTPUT:
        if batch_idx:
            return TrainStepResult(loss=F.mse_loss(self(batch), batch))
        return F.mse_loss(self(batch), batch)
'''
    assert rewrite(source).module.code == source.replace(
        "-> pl.utilities.types.STEP_OUTPUT:", "-> TrainStepResult:"
    ).replace(
        "        return F.mse_loss(self(batch), batch)\n",
        "        return TrainStepResult(loss=F.mse_loss(self(batch), batch))\n",
    )


def test_keeps_crlf_line_endings_and_the_encoding() -> None:
    source = (
        "# -*- coding: latin-1 -*-\r\nimport pytorch_lightning as pl\r\n\r\n\r\n"
        "class Mod\xe8le(pl.LightningModule):\r\n    def training_step(self, batch, batch_idx):\r\n"
        "        return F.mse_loss(self(batch), batch)  # caf\xe9\r\n"
    ).encode("latin-1")
    migrated = rewrite(source).module.bytes
    assert migrated == (
        "# -*- coding: latin-1 -*-\r\nimport pytorch_lightning as pl\r\n"
        "from lightning_step_types import TrainStepResult\r\n\r\n\r\n"
        "class Mod\xe8le(pl.LightningModule):\r\n    def training_step(self, batch, batch_idx) -> TrainStepResult:\r\n"
        "        return TrainStepResult(loss=F.mse_loss(self(batch), batch))  # caf\xe9\r\n"
    ).encode("latin-1")


def test_base_class_is_kept_when_its_package_is_unknown() -> None:
    source = """from pytorch_lightning import *


class Model(LightningModule):
    def training_step(self, batch, batch_idx):
        return F.mse_loss(self(batch), batch)
"""
    migration = migrate_source(source, base_class=True)
    assert [f.describe() for f in migration.findings] == [
        "Model line 4: base class kept: cannot tell which Lightning package `LightningModule` comes from",
        "Model.training_step line 5: rewritten",
    ]
    assert "class Model(LightningModule):" in migration.module.code


# --- the command line ---------------------------------------------------------------------------


def test_command_line_diff_on_a_folder(tmp_path: Path) -> None:
    for name in ("regression_tensor", "skipped_shapes", "already_migrated"):
        (tmp_path / f"{name}.py").write_bytes((CASES_DIR / name / "input.py").read_bytes())
    (tmp_path / "notes.txt").write_text("not python")
    (tmp_path / "helpers.py").write_text("def helper() -> int:\n    return 1\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    result = subprocess.run(
        [sys.executable, "-m", "lightning_step_types.migrate", "--diff", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=40),
    )
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert result.returncode == 2  # some steps need a manual migration
    first = tmp_path / "regression_tensor.py"
    assert result.stdout.startswith(f"--- {first}\n+++ {first}\n")
    assert "+        return TrainStepResult(loss=loss)\n" in result.stdout
    assert "already_migrated.py\n" not in result.stdout  # nothing in it can change
    assert f"+++ {tmp_path / 'skipped_shapes.py'}\n" in result.stdout  # its dict built in a variable
    assert result.stderr.splitlines() == [
        *(
            f"{tmp_path / name}.py: {line}"
            for name in ("already_migrated", "regression_tensor", "skipped_shapes")
            for line in load_case(name).reported
        ),
        summary(files=4, changed=2, rewritten=4, skipped=5, typed=2, diff=True),
    ]


def test_exit_code_is_0_when_everything_converts(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_bytes((CASES_DIR / "regression_tensor" / "input.py").read_bytes())
    result = run_cli(str(path))
    assert result.code == 0
    assert result.lines == [
        *(f"{path}: {line}" for line in load_case("regression_tensor").reported),
        summary(files=1, changed=1, rewritten=3, skipped=0),
    ]
    assert path.read_bytes() == (CASES_DIR / "regression_tensor" / "expected.py").read_bytes()


def test_unparseable_input_is_reported_and_left_alone(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(
        "import pytorch_lightning as pl\n\n\nclass Model(pl.LightningModule):\n    def training_step(self, x:\n"
    )
    good = tmp_path / "good.py"
    good.write_bytes((CASES_DIR / "regression_tensor" / "input.py").read_bytes())
    result = run_cli(str(tmp_path))
    assert result.code == 1
    assert broken.read_text().endswith("def training_step(self, x:\n")
    assert good.read_bytes() == (CASES_DIR / "regression_tensor" / "expected.py").read_bytes()
    assert result.lines[0].startswith(f"{broken}: error: cannot parse: ")
    assert result.lines[0].endswith(" (line 5); file left unchanged")
    assert result.lines[-1] == summary(files=2, changed=1, rewritten=3, skipped=0, errors=1)


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    result = run_cli(str(tmp_path / "nowhere.py"))
    assert result.code == 1
    assert result.lines == [
        f"{tmp_path / 'nowhere.py'}: error: no such file or directory",
        summary(files=0, changed=0, rewritten=0, skipped=0, errors=1),
    ]


def test_never_writes_a_file_that_does_not_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.py"
    original = (CASES_DIR / "regression_tensor" / "input.py").read_bytes()
    path.write_bytes(original)

    real_migrate_run = migrate_cli.migrate_run

    def broken_rewrite(*args: Any, **kwargs: Any) -> list[Migration]:
        # A rewrite whose text is not Python: `def` alone on a line.
        def_alone = cst.SimpleStatementLine([cst.Expr(cst.Name("def"))])
        return [
            dataclasses.replace(m, module=m.module.with_changes(body=[*m.module.body, def_alone]))
            for m in real_migrate_run(*args, **kwargs)
        ]

    monkeypatch.setattr(migrate_cli, "migrate_run", broken_rewrite)
    result = run_cli(str(path))
    assert path.read_bytes() == original
    assert result.code == 1
    assert result.lines[5].startswith(
        f"{path}: error: the rewritten file would not parse ("
    )  # after 3 verdicts, 2 notes
    assert result.lines[5].endswith("); file left unchanged")
    assert result.lines[-1] == summary(files=1, changed=0, rewritten=3, skipped=0, errors=1)


def test_says_what_to_install_without_libcst() -> None:
    code = (
        "import sys, runpy\n"
        "sys.modules['libcst'] = None  # as if it were not installed\n"
        "runpy.run_module('lightning_step_types.migrate', run_name='__main__', alter_sys=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "--diff", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=15),
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ModuleNotFoundError: lightning_step_types.migrate needs libcst, which is not installed:"
        " pip install 'lightning-step-types[migrate]'  (or: pip install 'libcst>=1.1')"
    )


def test_module_entry_point_runs(tmp_path: Path) -> None:
    """``python -m lightning_step_types.migrate`` (the package's __main__) on a file with nothing to do."""
    path = tmp_path / "plain.py"
    path.write_text("x = 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "lightning_step_types.migrate", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=15),
    )
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr.splitlines() == [summary(files=1, changed=0, rewritten=0, skipped=0)]


# --- one run over several files -------------------------------------------------------------------

PACKAGE_CASE = CASES_DIR / "package_base_in_other_file"  # input/ and expected/ hold the package geo_trainers


def package_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def test_a_package_run_follows_bases_and_key_readers_across_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchgeo's layout: the tasks derive from BaseTask in base.py; a callback in another file reads
    "val_loss". Every step gets a verdict, the 1.x hook is reported, the read key keeps its step."""
    root = tmp_path / "project"
    shutil.copytree(PACKAGE_CASE / "input", root)
    monkeypatch.chdir(root)
    result = run_cli("geo_trainers")
    assert result.stderr == (PACKAGE_CASE / "report.txt").read_text()
    assert result.code == 2  # a step skipped (its key is read) and a Lightning 1.x leftover
    assert package_files(root) == package_files(PACKAGE_CASE / "expected")
    again = run_cli("geo_trainers")
    assert package_files(root) == package_files(PACKAGE_CASE / "expected")
    assert again.lines[-1] == summary(files=5, changed=0, rewritten=0, typed=3, nothing=1, skipped=1, leftovers=1)


def test_a_file_without_its_base_says_which_file_to_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "project"
    shutil.copytree(PACKAGE_CASE / "input", root)
    monkeypatch.chdir(root)
    path = "geo_trainers/classification.py"
    result = run_cli("--diff", path)
    fix = (
        "derives from `BaseTask` (`.base.BaseTask`), which is not defined in the files given:"
        " pass the file that defines `BaseTask`, or use --assume-lightning"
    )
    assert result.lines == [
        f"{path}: ClassificationTask.training_step line 17: ClassificationTask {fix}",
        f"{path}: ClassificationTask.validation_step line 23: ClassificationTask {fix}",
        f"{path}: MultiLabelClassificationTask.training_step line 32: MultiLabelClassificationTask {fix}",
        summary(files=1, changed=0, rewritten=0, skipped=3, diff=True),
    ]
    assert result.code == 2
    # --assume-lightning examines the classes, but what BaseTask defines stays unseen: no guess from names.
    assumed = run_cli("--diff", "--assume-lightning", path)
    assert assumed.lines[0] == (
        f"{path}: ClassificationTask.training_step line 21: returns a variable `loss` (from `self.criterion(self(x), y)`,"
        " line 19): `self.criterion` is not defined in the files given (it may come from `BaseTask`;"
        " pass the file that defines `BaseTask`)"
    )
    assert assumed.stdout == "" and assumed.code == 2


def import_package(root: Path, alias: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        alias, root / "geo_trainers" / "__init__.py", submodule_search_locations=[str(root / "geo_trainers")]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    spec.loader.exec_module(module)
    return module


def fit_two_batches(model: lpl.LightningModule, root: Path) -> dict[str, torch.Tensor]:
    trainer = lpl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
    )
    trainer.fit(model)
    assert trainer.global_step == 2
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_the_migrated_package_trains_to_the_same_parameters(tmp_path: Path) -> None:
    """Plain Lightning, same seeds: the original and the migrated tasks end with equal parameters; the
    task with a Lightning 1.x `validation_epoch_end` is refused by Lightning 2, as the report says."""
    original = import_package(PACKAGE_CASE / "input", "geo_trainers_original")
    migrated = import_package(PACKAGE_CASE / "expected", "geo_trainers_migrated")
    for task in ("ClassificationTask", "RegressionTask"):
        params = []
        for package in (original, migrated):
            torch.manual_seed(0)
            params.append(fit_two_batches(getattr(package, task)(), tmp_path / task))
        assert params[0].keys() == params[1].keys()
        for name in params[0]:
            assert torch.equal(params[0][name], params[1][name]), (task, name)
    multilabel = importlib.import_module("geo_trainers_migrated.classification").MultiLabelClassificationTask
    with pytest.raises(NotImplementedError, match="Support for `validation_epoch_end` has been removed in v2.0.0"):
        fit_two_batches(multilabel(), tmp_path / "multilabel")


def test_strict_keys_skips_renaming_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_bytes((CASES_DIR / "classification_logits" / "input.py").read_bytes())
    result = run_cli("--strict-keys", str(path))
    assert result.lines == [
        f"{path}: BlobClassifier.training_step line 34: rewritten",
        f"{path}: BlobClassifier.validation_step line 52: the rewrite would change the keys 'val_loss' of what the"
        " step returns (--strict-keys)",
        summary(files=1, changed=1, rewritten=1, skipped=1),
    ]
    assert result.code == 2
    assert 'return {"val_loss": loss, "val_acc": acc}' in path.read_text()


def test_key_readers_are_looked_for_in_every_file_of_the_run(tmp_path: Path) -> None:
    model = tmp_path / "model.py"
    model.write_bytes((CASES_DIR / "comments_and_formatting" / "input.py").read_bytes())
    (tmp_path / "monitor.py").write_text(
        "class Monitor:\n    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx):\n"
        "        print(outputs.val_loss)\n"
    )
    result = run_cli("--diff", str(tmp_path))
    assert result.lines[1] == (
        f"{model}: DenoisingAE.validation_step line 36: the key 'val_loss' is read at {tmp_path / 'monitor.py'}"
        " line 3; after the rewrite it is the result's `loss`"
    )
    assert result.code == 2


def test_lightning_1x_leftovers_are_reported_with_their_replacement() -> None:
    source = step("""
        def training_step(self, batch, batch_idx, optimizer_idx):
            return F.mse_loss(self(batch), batch)

        def training_epoch_end(self, outputs):
            pass

        def on_epoch_end(self):
            pass
    """)
    migration = migrate_source(source)
    assert [f.describe() for f in migration.findings] == [
        "Model.training_step line 7: Lightning 1.x: `optimizer_idx` was removed in Lightning 2.0 (several optimizers"
        " need manual optimization): set `self.automatic_optimization = False` and step each of `self.optimizers()`"
        " in training_step",
        "Model.training_step line 7: rewritten",
        "Model.training_epoch_end line 10: Lightning 1.x: removed in Lightning 2.0 (it raises NotImplementedError):"
        " use `on_train_epoch_end(self)`, which gets no outputs; append what the step computes to a list attribute"
        " and clear it there",
        "Model.on_epoch_end line 13: Lightning 1.x: removed in Lightning 2.0: use `on_train_epoch_end`"
        " (or `on_validation_epoch_end`...)",
    ]


def test_a_detached_loss_is_a_loss() -> None:
    """Manual optimization often returns the loss detached: `.detach()` keeps a loss a loss."""
    source = step("""
        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = F.mse_loss(self(batch), batch)
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return {"loss": loss.detach(), "log": {"train_loss": loss.detach().sqrt()}}
    """)
    migration = rewrite(source)
    assert migration.module.code.endswith(
        '        self.log_dict({"train_loss": loss.detach().sqrt()})\n'
        "        return TrainStepResult(loss=loss.detach())\n"
    )


def test_a_loss_computed_from_itself_needs_a_loss_on_one_side() -> None:
    source = step("""
        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self(batch), batch)
            loss = loss + F.l1_loss(self(batch), batch)
            return loss

        def validation_step(self, batch, batch_idx):
            loss = F.mse_loss(self(batch), batch)
            loss = loss * 2
            return loss
    """)
    assert [f.describe() for f in migrate_source(source).findings] == [
        "Model.training_step line 7: rewritten",
        "Model.validation_step line 15: returns a variable `loss` (from `loss * 2`, line 14), which the code"
        " does not show to be a loss tensor",
    ]


def test_relative_imports_pick_the_base_next_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two copies of a package in one run (a vendored one, a backup): `from .base import BaseTask` is
    the one in the importing file's folder, not a guess between the two."""
    for copy in ("current", "backup"):
        shutil.copytree(PACKAGE_CASE / "input", tmp_path / copy)
    monkeypatch.chdir(tmp_path)
    result = run_cli("--diff", ".")
    assert "not defined in the files given" not in result.stderr
    assert result.lines[-1] == summary(
        files=10, changed=4, rewritten=6, nothing=2, skipped=2, leftovers=2, imports_removed=2, diff=True
    )


def test_a_step_called_elsewhere_blocks_only_the_class_it_is_called_on(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(
        step("""
            def training_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)
        """)
        + "\n\nclass Other(pl.LightningModule):\n    def training_step(self, batch, batch_idx):\n"
        "        return F.mse_loss(self(batch), batch)\n"
    )
    (tmp_path / "test_models.py").write_text(
        "from models import Model\n\n\ndef test_loss():\n    model = Model()\n"
        "    loss = model.training_step(None, 0)\n    loss.backward()\n"
    )
    result = run_cli("--diff", str(tmp_path))
    assert result.lines[:2] == [
        f"{tmp_path / 'models.py'}: Model.training_step line 7: its return value is used at"
        f" {tmp_path / 'test_models.py'} line 6 (`model.training_step(None, 0)`)",
        f"{tmp_path / 'models.py'}: Other.training_step line 12: rewritten",
    ]


def test_the_loss_itself_may_be_logged_after_in_place_updates() -> None:
    source = step("""
        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self(batch), batch, reduction="sum")
            loss += 0.1 * self.weight.abs().sum()
            loss /= batch.size(0)
            logs = {"train_mse_loss": loss}
            return {"loss": loss, "log": logs, "progress_bar": logs}
    """)
    assert rewrite(source).module.code.endswith(
        "        self.log_dict(logs, prog_bar=True)\n        return TrainStepResult(loss=loss)\n"
    )


def test_a_log_dict_variable_beside_an_inline_progress_bar_dict_is_rewritten() -> None:
    """The variable's keys are in the code (a dict literal assigned once): compared with the inline
    dict's, none shared, both are logged."""
    source = step("""
        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self(batch), batch)
            logs = {"train_loss": loss}
            return {"loss": loss, "log": logs, "progress_bar": {"loss_now": loss}}
    """)
    migration = migrate_source(source)
    assert [f.describe() for f in migration.findings] == [
        "Model.training_step line 7: rewritten",
        f"Model.training_step line 10: {LOG_DICTS_NOTE}",
    ]
    assert migration.module.code.endswith(
        '        self.log_dict(logs)\n        self.log_dict({"loss_now": loss}, prog_bar=True)\n'
        "        return TrainStepResult(loss=loss)\n"
    )


def test_keys_read_only_in_hooks_lightning_2_removed_do_not_block() -> None:
    """`validation_epoch_end(outputs)` never runs under Lightning 2 (it refuses the module): its reads
    do not keep the step as it is; the notes say what its port must read."""
    source = step("""
        def validation_step(self, batch, batch_idx):
            return {"val_loss": F.mse_loss(self(batch), batch)}

        def validation_epoch_end(self, outputs):
            self.log("val_loss", torch.stack([o["val_loss"] for o in outputs]).mean())
    """)
    assert [f.describe() for f in migrate_source(source).findings] == [
        "Model.validation_step line 7: rewritten",
        "Model.validation_step line 8: note: keys changed: 'val_loss' -> the result's 'loss'; no code of the files"
        " given that Lightning 2 runs reads them (a callback elsewhere that does must follow; --strict-keys leaves"
        " such steps alone)",
        "Model.validation_step line 8: note: validation_epoch_end reads 'val_loss' at line 11; Lightning 2 removed"
        " that hook: when you port it to on_*_epoch_end, read outputs['loss']",
        "Model.validation_epoch_end line 10: Lightning 1.x: removed in Lightning 2.0 (it raises NotImplementedError):"
        " use `on_validation_epoch_end(self)`, which gets no outputs; append what the step computes to a list"
        " attribute and clear it there",
    ]


def test_helpers_imported_from_another_file_of_the_run_are_followed(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "losses.py").write_text(
        "import torch.nn.functional as F\n\n\ndef compute_loss(model, batch):\n    x, y = batch\n"
        "    return F.cross_entropy(model(x), y)\n\n\ndef loss_and_logits(model, batch):\n    x, y = batch\n"
        "    logits = model(x)\n    return F.cross_entropy(logits, y), logits\n"
    )
    (package / "model.py").write_text(
        step(
            """
            def training_step(self, batch, batch_idx):
                return compute_loss(self, batch)

            def validation_step(self, batch, batch_idx):
                return loss_and_logits(self, batch)

            def test_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch, reduction=self.reduction)
            """,
            before="from .losses import compute_loss, loss_and_logits\n",
        )
    )
    result = run_cli("--diff", str(package))
    model = package / "model.py"
    assert result.lines == [
        f"{model}: Model.training_step line 8: rewritten",
        f"{model}: Model.validation_step line 12: returns what `loss_and_logits` returns: a tuple"
        f" ({package / 'losses.py'} line 12); unpack it (`loss, ... = loss_and_logits(...)`) and return the loss",
        f"{model}: Model.test_step line 15: returns `F.mse_loss(self(batch), batch, reduction=self...`, computed"
        " with `reduction=self.reduction` (maybe not one value)",
        summary(files=2, changed=1, rewritten=1, skipped=2, diff=True),
    ]


def test_an_attribute_holding_a_torch_loss_function_is_a_loss_function() -> None:
    source = step("""
        def __init__(self):
            super().__init__()
            self.loss_func = F.binary_cross_entropy_with_logits

        def loss(self, logits, labels):
            return self.loss_func(input=logits, target=labels)

        def training_step(self, batch, batch_idx):
            x, y = batch
            train_loss = self.loss(self(x), y)
            return {"loss": train_loss, "log": {"train_loss": train_loss}}
    """)
    assert rewrite(source).module.code.endswith(
        '        self.log_dict({"train_loss": train_loss})\n        return TrainStepResult(loss=train_loss)\n'
    )


def test_a_removed_epoch_end_hook_of_another_class_is_not_this_steps_reader() -> None:
    source = step(
        """
        def validation_step(self, batch, batch_idx):
            return {"val_loss": F.mse_loss(self(batch), batch)}
        """,
        after="\n\nclass Other(pl.LightningModule):\n    def validation_epoch_end(self, outputs):\n"
        '        return outputs[0]["val_loss"]\n',
    )
    notes = [f.describe() for f in migrate_source(source).findings if f.kind == "note"]
    assert notes == [
        "Model.validation_step line 8: note: keys changed: 'val_loss' -> the result's 'loss'; nothing in the files"
        " given reads them (a callback elsewhere that does must follow; --strict-keys leaves such steps alone)"
    ]


# --- the Lightning import a --base-class switch leaves unused ----------------------------------------------


def test_base_class_drops_only_the_lightning_names_the_switch_made_unused() -> None:
    source = textwrap.dedent('''\
        """A `LightningModule` (docstrings are prose: they do not keep an import)."""
        import torch, pytorch_lightning as pl
        # the Lightning classes
        from lightning.pytorch import (
            LightningModule,
            seed_everything,
        )
        import torch.nn.functional as F

        seed_everything(0)


        class Model(pl.LightningModule):
            def training_step(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)
        ''')
    assert migrate_source(source, base_class=True).module.code == textwrap.dedent('''\
        """A `LightningModule` (docstrings are prose: they do not keep an import)."""
        import torch
        # the Lightning classes
        from lightning.pytorch import (
            LightningModule,
            seed_everything,
        )
        import torch.nn.functional as F
        from lightning_step_types import TrainStepResult, TypedLightningModule

        seed_everything(0)


        class Model(TypedLightningModule):
            def training_step(self, batch, batch_idx) -> TrainStepResult:
                return TrainStepResult(loss=F.mse_loss(self(batch), batch))
        ''')


@pytest.mark.parametrize(
    "imports, base, kept",
    [
        ("from lightning import LightningModule\n", "LightningModule", ""),
        ("import lightning as L\n", "L.LightningModule", ""),
        ("import lightning.pytorch as pl\n", "pl.LightningModule", ""),
        ("from pytorch_lightning import LightningModule as LM\n", "LM", ""),
        # still used: a string annotation, `__all__`, an attribute of the module, a type comment
        ("import pytorch_lightning as pl\n", "pl.LightningModule", "def make() -> 'pl.Trainer': ...\n"),
        ("from lightning import LightningModule\n", "LightningModule", "__all__ = ['LightningModule']\n"),
        ("import lightning as L\n", "L.LightningModule", "CALLBACK = L.Callback\n"),
        ("import lightning as L\n", "L.LightningModule", "trainer = None  # type: L.Trainer\n"),
    ],
)
def test_base_class_removes_the_lightning_import_unless_still_used(imports: str, base: str, kept: str) -> None:
    source = (
        f"import torch.nn.functional as F\n{imports}\n\n"
        f"class Model({base}):\n    def training_step(self, batch, batch_idx):\n"
        f"        return F.mse_loss(self(batch), batch)\n\n\n{kept}"
    )
    migrated = migrate_source(source, base_class=True)
    head = base.split(".")[0]
    typed_from = "lightning_step_types" if "pytorch_lightning" in imports else "lightning_step_types.lightning_pytorch"
    reason = f"`{head}` is still used in the file" if kept else "its only use was a switched base class"
    assert [f.describe() for f in migrated.findings] == [
        f"line 2: import {'kept' if kept else 'removed'}: `{imports.strip()}` ({reason})",
        f"Model line 5: base class switched: {base} -> TypedLightningModule (from {typed_from})",
        "Model.training_step line 6: rewritten",
    ]
    code = migrated.module.code
    assert "class Model(TypedLightningModule):" in code
    assert (imports in code) == bool(kept), code
    assert code.endswith(kept)
    ast.parse(code)


def test_an_import_the_file_binds_twice_or_of_another_package_stays() -> None:
    twice = step(
        """
        def training_step(self, batch, batch_idx):
            return F.mse_loss(self(batch), batch)
    """,
        before="import lightning as pl\n",
    )  # `pl` is bound twice: which one a reader means is not shown
    migrated = migrate_source(twice, base_class=True)
    assert "import pytorch_lightning as pl\n" in migrated.module.code
    kept = [f.describe() for f in migrated.findings if f.kind == "import-kept"]
    assert kept == [
        "line 1: import kept: `import lightning as pl` (`pl` is bound more than once in the file)",
        "line 2: import kept: `import pytorch_lightning as pl` (`pl` is bound more than once in the file)",
    ]
    other = "from mylib import LightningModule\n\n\nclass Model(LightningModule):\n    pass\n"
    assert migrate_source(other, base_class=True).module.code == other


# --- evaluation steps that returned a bare tensor -----------------------------------------------------------


def test_strict_keys_leaves_evaluation_steps_returning_a_tensor_alone(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    source = (CASES_DIR / "eval_step_returning_a_tensor" / "input.py").read_bytes()
    path.write_bytes(source)
    result = run_cli("--strict-keys", str(path))
    assert result.lines == [
        f"{path}: WaveRegressor.training_step line 29: rewritten",
        f"{path}: WaveRegressor.validation_step line 37: returns a Tensor, and callbacks' `on_validation_batch_end`"
        " would receive a mapping (ValStepResult) instead (--strict-keys)",
        f"{path}: WaveRegressor.test_step line 40: returns `self.validation_step(batch, batch_idx)`, and"
        " WaveRegressor.validation_step was skipped",
        summary(files=1, changed=1, rewritten=1, skipped=2),
    ]
    assert result.code == 2
    text = path.read_text()
    assert "        return val_loss\n" in text and "        return self.validation_step(batch, batch_idx)\n" in text


@pytest.mark.parametrize("adapter", [False, True], ids=["typed-module", "adapter"])
def test_callbacks_receive_a_mapping_once_a_tensor_returning_step_is_rewritten(tmp_path: Path, adapter: bool) -> None:
    """What the note says: a plain callback's on_validation_batch_end got the Tensor, and gets a mapping
    holding the same loss after the rewrite (so `outputs.item()` there would break)."""
    folder = tmp_path / "migrated"
    folder.mkdir()
    path = folder / "wave_model.py"
    path.write_bytes((CASES_DIR / "eval_step_returning_a_tensor" / "input.py").read_bytes())
    original = import_path(path, "wave_model_before")
    run_cli(*(["--base-class"] if not adapter else []), str(path))
    migrated = import_path(path, "wave_model_after")

    class Outputs(pl.Callback):
        def __init__(self) -> None:
            self.seen: list[Any] = []

        def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any) -> None:
            self.seen.append(outputs)

    def validate(module: ModuleType, callbacks: list[pl.Callback]) -> list[Any]:
        torch.manual_seed(0)
        recorder = Outputs()
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            limit_val_batches=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=str(tmp_path),
            callbacks=[recorder, *callbacks],
        )
        trainer.validate(module.WaveRegressor(), verbose=False)
        return recorder.seen

    before = validate(original, [])
    after = validate(migrated, [typed_pytorch_lightning.StepResultAdapter(strict=True)] if adapter else [])
    if not adapter:
        assert issubclass(migrated.WaveRegressor, typed_pytorch_lightning.TypedLightningModule)
    assert [type(o) for o in before] == [torch.Tensor, torch.Tensor]
    assert all(isinstance(o, Mapping) and list(o) == ["loss"] for o in after)
    assert [o["loss"].item() for o in after] == [o.item() for o in before]
    with pytest.raises(AttributeError, match="has no attribute 'item'"):
        after[0].item()


# --- methods named like removed hooks ----------------------------------------------------------------------


def test_a_removed_hook_the_class_calls_itself_is_a_helper_unless_lightning_refuses_it() -> None:
    source = step("""
        def training_step(self, batch, batch_idx):
            return F.mse_loss(self(batch), batch)

        def on_train_epoch_end(self):
            self.on_epoch_end([])
            self.training_epoch_end([])

        def on_epoch_end(self, outputs):
            pass

        def training_epoch_end(self, outputs):
            pass

        def on_batch_end(self):
            pass
    """)
    assert [f.describe() for f in migrate_source(source).findings if f.kind == "leftover"] == [
        # Lightning 2 refuses a module defining training_epoch_end, whoever calls it
        "Model.training_epoch_end line 17: Lightning 1.x: removed in Lightning 2.0 (it raises NotImplementedError):"
        " use `on_train_epoch_end(self)`, which gets no outputs; append what the step computes to a list attribute"
        " and clear it there",
        "Model.on_batch_end line 20: Lightning 1.x: removed in Lightning 2.0: use `on_train_batch_end`",
    ]
    subclass = step(
        """
        def training_step(self, batch, batch_idx):
            return F.mse_loss(self(batch), batch)

        def on_train_epoch_end(self):
            self.on_epoch_end([])
    """,
        after="\n\nclass Child(Model):\n    def on_epoch_end(self, outputs):\n        pass\n",
    )
    assert [f for f in migrate_source(subclass).findings if f.kind == "leftover"] == []


# --- every fix hint, followed, leads to a rewrite ----------------------------------------------------------

TENSOR_NOTE = (
    "note: returned a Tensor: callbacks' `on_validation_batch_end` now receive a mapping, the ValStepResult"
    " (`{'loss': ...}`), instead of the Tensor; no hook of this file receives it (a callback elsewhere calling"
    " `outputs.item()` must read `outputs['loss']`; --strict-keys leaves such steps alone)"
)
LOG_DICTS_NOTE = (
    "note: keys changed: 'log' -> self.log_dict, 'progress_bar' -> self.log_dict; nothing in the files given reads"
    " them (a callback elsewhere that does must follow; --strict-keys leaves such steps alone)"
)
# skip reason -> (the step, the skip, the step after following the skip's fix, the findings then); where
# test_refuses_what_it_cannot_show_safe already holds the step, its REFUSALS entry is reused
HINTS = {
    "log and progress bar disagree": (
        *REFUSALS["log and progress bar disagree"],  # the step and its skip
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                return {"loss": loss, "log": {"l": loss}, "progress_bar": {"l_now": loss.detach()}}
        """),
        ["Model.training_step line 7: rewritten", f"Model.training_step line 9: {LOG_DICTS_NOTE}"],
    ),
    "log variable shares a key with the progress bar": (
        *REFUSALS["log variable shares a key with the progress bar"],  # the step and its skip
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                logs = {"train_mse": loss}
                return {"loss": loss, "log": logs, "progress_bar": {"train_loss": loss}}
        """),
        ["Model.training_step line 7: rewritten", f"Model.training_step line 10: {LOG_DICTS_NOTE}"],
    ),
    "log is a dict of losses a call returned, beside a progress bar": (
        *REFUSALS["log is a dict of losses a call returned, beside a progress bar"],  # the step and its skip
        step("""
            def training_step(self, batch, batch_idx):
                images, targets = batch
                loss_dict = self.model(images, targets)
                loss = sum(loss for loss in loss_dict.values())
                self.log_dict(loss_dict)
                return {"loss": loss, "progress_bar": {"total": loss}}
        """),
        [
            "Model.training_step line 7: rewritten",
            "Model.training_step line 12: note: keys changed: 'progress_bar' -> self.log_dict; nothing in the files"
            " given reads them (a callback elsewhere that does must follow; --strict-keys leaves such steps alone)",
        ],
    ),
    "variable None on a path": (
        *REFUSALS["variable None on a path"],  # the step and its skip
        step("""
            def validation_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                if batch_idx == 0:
                    return None
                return loss
        """),
        ["Model.validation_step line 7: rewritten", f"Model.validation_step line 11: {TENSOR_NOTE}"],
    ),
    "dict built in a variable and aliased": (
        *REFUSALS["dict built in a variable and aliased"],  # the step and its skip
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                self.last = {"loss": loss}
                return {"loss": loss}
        """),
        ["Model.training_step line 7: rewritten"],
    ),
    "helper returning a tuple": (
        step("""
            def shared(self, batch):
                loss = F.mse_loss(self(batch), batch)
                return loss, batch.mean()

            def training_step(self, batch, batch_idx):
                return self.shared(batch)
        """),
        "Model.training_step line 12: returns what `self.shared` returns: a tuple (line 9); unpack it"
        " (`loss, ... = self.shared(...)`) and return the loss",
        step("""
            def shared(self, batch):
                loss = F.mse_loss(self(batch), batch)
                return loss, batch.mean()

            def training_step(self, batch, batch_idx):
                loss, _ = self.shared(batch)
                return loss
        """),
        ["Model.training_step line 11: rewritten"],
    ),
    "helper returning a dict": (
        step("""
            def shared(self, batch):
                return {"val_loss": F.mse_loss(self(batch), batch), "mean": batch.mean()}

            def validation_step(self, batch, batch_idx):
                return self.shared(batch)
        """),
        "Model.validation_step line 11: returns what `self.shared` returns: a dict (line 8); build the result"
        ' from it (`out = self.shared(...)`, then `loss=out["val_loss"]`)',
        step(
            """
            def shared(self, batch):
                return {"val_loss": F.mse_loss(self(batch), batch), "mean": batch.mean()}

            def validation_step(self, batch, batch_idx):
                out = self.shared(batch)
                return ValStepResult(loss=out["val_loss"], metadata={"mean": out["mean"]})
        """,
            before="from lightning_step_types import ValStepResult\n",
        ),
        ["Model.validation_step line 11: rewritten"],  # its annotation: the return was already typed
    ),
    "helper holding its dict in a variable": (
        step("""
            def shared(self, batch, stage):
                metrics = {f"{stage}_loss": F.mse_loss(self(batch), batch)}
                self.log_dict(metrics)
                return metrics

            def validation_step(self, batch, batch_idx):
                return self.shared(batch, "val")
        """),
        "Model.validation_step line 13: returns what `self.shared` returns: `shared` line 10 returns a variable"
        " `metrics` holding a dict built at line 8; in the step, build the result from the dict its call returns"
        " (`out = self.shared(...)`, then `loss=out[...]` (the key that holds the loss))",
        step(
            """
            def shared(self, batch, stage):
                metrics = {f"{stage}_loss": F.mse_loss(self(batch), batch)}
                self.log_dict(metrics)
                return metrics

            def validation_step(self, batch, batch_idx):
                out = self.shared(batch, "val")
                return ValStepResult(loss=out["val_loss"])
        """,
            before="from lightning_step_types import ValStepResult\n",
        ),
        ["Model.validation_step line 13: rewritten"],
    ),
    "assigned step": (
        *REFUSALS["assigned step"],  # the step and its skip
        step("""
            def shared(self, batch, batch_idx):
                return F.mse_loss(self(batch), batch)

            def training_step(self, batch, batch_idx): return self.shared(batch, batch_idx)
        """),
        ["Model.training_step line 10: rewritten"],
    ),
    "hiddens": (
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                return {"loss": loss, "hiddens": batch}
        """),
        "Model.training_step line 9: dict has the Lightning 0.x 'hiddens' key (truncated backprop), which Lightning 2"
        " ignores: keep the state on the module (`self.hiddens = ...`) and drop the key",
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                self.hiddens = batch
                return {"loss": loss}
        """),
        ["Model.training_step line 7: rewritten"],
    ),
    "comments with no line of their own": (
        *REFUSALS["comments with no line of their own"],  # the step and its skip
        step("""
            def training_step(self, batch, batch_idx):
                loss = F.mse_loss(self(batch), batch)
                if batch_idx == 0:
                    return {"loss": loss,  # first
                            "log": {"first": loss}}
                return loss
        """),
        [
            "Model.training_step line 7: rewritten",
            "Model.training_step line 10: note: keys changed: 'log' -> self.log_dict; nothing in the files given reads"
            " them (a callback elsewhere that does must follow; --strict-keys leaves such steps alone)",
        ],
    ),
}


@pytest.mark.parametrize("source, skip, fixed, findings", HINTS.values(), ids=list(HINTS))
def test_each_fix_hint_once_followed_leads_to_a_rewrite(
    source: str, skip: str, fixed: str, findings: list[str]
) -> None:
    assert [f.describe() for f in migrate_source(source).skipped] == [skip]
    again = migrate_source(fixed)
    assert [f.describe() for f in again.findings] == findings
    assert again.skipped == []
    ast.parse(again.module.code)


def test_the_fix_for_a_base_in_another_file_leads_to_a_rewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the skip: test_a_file_without_its_base_says_which_file_to_pass; its fix: pass the file that defines BaseTask
    root = tmp_path / "project"
    shutil.copytree(PACKAGE_CASE / "input", root)
    monkeypatch.chdir(root)
    result = run_cli("--diff", "geo_trainers/classification.py", "geo_trainers/base.py")
    assert [line for line in result.lines if "ClassificationTask." in line and "Lightning 1.x" not in line] == [
        "geo_trainers/classification.py: ClassificationTask.training_step line 17: rewritten",
        "geo_trainers/classification.py: ClassificationTask.validation_step line 23: returns nothing to convert",
        "geo_trainers/classification.py: MultiLabelClassificationTask.training_step line 32: rewritten",
    ]
    assert result.lines[-1].endswith(
        "2 methods to rewrite, 1 method returning nothing to convert, 0 methods skipped, 1 import to remove,"
        " 1 Lightning 1.x leftover, 0 errors"
    )


def test_the_fix_for_a_shared_step_with_a_literal_stage_leads_to_a_typed_step() -> None:
    case = CASES_DIR / "shared_step_with_literal_stage"
    fixed = (
        (case / "expected.py")
        .read_text()
        .replace(
            "    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Tensor]:\n"
            '        return self._shared_step(batch, "val")\n',
            "    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> ValStepResult:\n"
            '        out = self._shared_step(batch, "val")\n'
            '        return ValStepResult(loss=out["val_loss"], metadata={"val_acc": out["val_acc"]})\n',
        )
        .replace("import TrainStepResult\n", "import TrainStepResult, ValStepResult\n")
    )
    findings = [f.describe() for f in migrate_source(fixed).findings]
    assert findings[:2] == [
        "LogisticRegression.training_step line 33: already typed",
        "LogisticRegression.validation_step line 36: already typed",
    ]
    assert [f.split(" line ")[0] for f in findings[2:]] == ["LogisticRegression.test_step"]  # not followed there


def test_a_dict_built_in_the_step_may_also_be_logged() -> None:
    source = step("""
        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self(batch), batch)
            metrics = {"loss": loss}
            self.log_dict(metrics, on_step=True)
            return metrics
    """)
    migration = migrate_source(source)
    assert [f.describe() for f in migration.findings] == ["Model.training_step line 7: rewritten"]
    assert migration.module.code.endswith(
        '        self.log_dict(metrics, on_step=True)\n        return TrainStepResult(loss=metrics["loss"])\n'
    )
    # given to log_dict and kept elsewhere too: an alias, left alone
    logged = "        self.log_dict(metrics, on_step=True)\n"
    kept = source.replace(logged, logged + "        self.last = metrics\n")
    assert [f.kind for f in migrate_source(kept).findings] == ["skipped"]
