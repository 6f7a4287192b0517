"""The documentation site: it builds in strict mode, the quick start's examples run, and the error
catalogue quotes exactly the messages the package produces.

The catalogue check works both ways: each message below, produced by really triggering it, must
appear verbatim as a ```text block in docs/errors.md, and each ```text block there must be one of
these messages. A reworded message therefore fails here until the catalogue is updated.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from limits import hang_limit
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler as TorchdataRandomSampler

import lightning_step_types
from lightning_step_types import (
    LossLogging,
    StepMetric,
    StepResultError,
    StepResultWarning,
    TrainStepResult,
    ValStepResult,
    declared_metric,
)
from lightning_step_types.pytorch_lightning import StepResultAdapter, TypedLightningModule

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
BUILD_TIMEOUT = hang_limit(idle_s=30)  # the build takes about 10 s on 2 cores
QUICKSTART_TIMEOUT = hang_limit(idle_s=30)  # the quick start's examples take about 10 s


def repo_env() -> dict[str, str]:
    """The environment for a subprocess that imports the package from this checkout."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


# --- fenced code blocks in the Markdown pages ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    marker: str | None  # the HTML comment on the line before the fence, e.g. "runnable"

    @property
    def runnable(self) -> bool:
        return self.marker == "runnable"


FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*$")
MARKER = re.compile(r"^<!--\s*(?P<marker>.*?)\s*-->$")


def fenced_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order (indented blocks, e.g. inside admonitions, included)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent = match["indent"]
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(previous)
        start = i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != f"{indent}```":
            end += 1
        assert end < len(lines), f"{page.name}:{i + 1}: unclosed code fence"
        code = "\n".join(line[len(indent) :] for line in lines[start:end])
        blocks.append(Block(page, start + 1, match["lang"], code, marker["marker"] if marker else None))
        i = end + 1
    return blocks


# --- the site builds -------------------------------------------------------------------------------


def _page_text(path: Path) -> str:
    """The visible text of a built page's article, tags stripped."""
    page = path.read_text(encoding="utf-8")
    article = page[page.index("<article") : page.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", "", article))


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**repo_env(), "NO_MKDOCS_2_WARNING": "1"},  # Material's banner about MkDocs 2.0, not a build problem
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert completed.returncode == 0, f"mkdocs build --strict failed:\n{completed.stdout}\n{completed.stderr}"
    return site


NAV = [
    "Home",
    "Quick start",
    "Metrics",
    "Resuming a run",
    "Scaling out",
    "Migration guide",
    "Error catalogue",
    "Typing guide",
    "Reliability",
    "Design notes",
    "API reference",
]
PAGES = [
    "index.html",
    "quickstart",
    "metrics",
    "resume",
    "scaling",
    "migration",
    "errors",
    "typing",
    "reliability",
    "design",
    "api",
]


def test_site_builds_strict_with_every_page_in_the_nav(built_site: Path) -> None:
    for page in PAGES:
        path = built_site / page if page.endswith(".html") else built_site / page / "index.html"
        assert path.is_file(), f"{path} was not built"
    home = (built_site / "index.html").read_text(encoding="utf-8")
    primary_nav = home[home.index("md-nav--primary") :]
    titles = [html.unescape(t) for t in re.findall(r'<span class="md-ellipsis">\s*(.*?)\s*</span>', primary_nav, re.S)]
    in_order = list(dict.fromkeys(t for t in titles if t in NAV))
    assert in_order == NAV


def test_nav_lists_every_guide_once_and_the_home_page_points_to_each() -> None:
    import yaml

    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = [next(iter(entry.items())) for entry in yaml.safe_load(re.sub(r"!!python/\S+", "", config))["nav"]]
    assert [title for title, _ in nav] == NAV
    pages = [page for _, page in nav]
    assert len(set(pages)) == len(pages), pages
    # Every page is in the nav, and nothing is built outside it.
    assert sorted(pages) == sorted(path.name for path in DOCS.glob("*.md"))
    assert "not_in_nav" not in config
    where_to_go = (DOCS / "index.md").read_text(encoding="utf-8").split("## Where to go", 1)[1].split("\n## ", 1)[0]
    linked = re.findall(r"^\| \[([^\]]+)\]\(([^)]+)\) \|", where_to_go, re.M)
    assert linked == [(title, page) for title, page in nav if page != "index.md"]


def test_api_page_documents_the_public_surface(built_site: Path) -> None:
    api = (built_site / "api" / "index.html").read_text(encoding="utf-8")
    text = _page_text(built_site / "api" / "index.html")
    public = set(lightning_step_types.__all__)
    assert public == {
        "FrozenMetadata",
        "LossLogging",
        "NonFiniteLoss",
        "StepMetric",
        "StepResult",
        "StepResultAdapter",
        "StepResultError",
        "StepResultWarning",
        "TrainStepResult",
        "TypedCallback",
        "TypedLightningModule",
        "ValStepResult",
        "compiled",
        "declared_metric",
        "not_resumed",
    }, "the public API changed: document the new names in docs/api.md and update this list"
    anchors = set(re.findall(r'id="(lightning_step_types\.[\w.]+)"', api))
    top_level = {
        f"lightning_step_types.{name}"
        for name in public - {"StepResultAdapter", "TypedCallback", "TypedLightningModule"}
    }
    flavoured = {
        f"lightning_step_types.{flavour}.{name}"
        for flavour in ("pytorch_lightning", "lightning_pytorch")
        for name in ("StepResultAdapter", "TypedCallback", "TypedLightningModule")
    }
    assert top_level | flavoured <= anchors, f"missing from the API page: {sorted((top_level | flavoured) - anchors)}"
    # Docstrings were rendered, including the ones the flavour classes take from their mixins.
    assert "What training_step returns: TrainStepResult(loss=loss" in text
    assert "A step result was built wrongly, or a step returned something it must not." in text
    assert "A LightningModule whose steps return typed results." in text
    assert "Trainer(callbacks=[StepResultAdapter()]) checks every step return of any LightningModule." in text
    assert "StepResultAdapter(strict: bool = False, nonfinite_loss: NonFiniteLoss = 'warn'" in text
    assert "torch.compile(module, ...), typed as module" in text


# --- the quick start runs ------------------------------------------------------------------------


def runnable_examples(page: Path) -> list[tuple[Block, str | None]]:
    """Each runnable block, with the output shown right after it (a block marked `<!-- output -->`)."""
    blocks = fenced_blocks(page)
    examples = []
    for index, block in enumerate(blocks):
        if block.runnable:
            following = blocks[index + 1] if index + 1 < len(blocks) else None
            shown = following.code if following is not None and following.marker == "output" else None
            examples.append((block, shown))
    return examples


def test_quickstart_marks_its_examples_runnable() -> None:
    python = [b for b in fenced_blocks(DOCS / "quickstart.md") if b.lang == "python"]
    assert len(python) >= 8
    assert [b.line for b in python if not b.runnable] == [], "mark each example `<!-- runnable -->`"
    # After the first (which only defines the module), each example shows what it prints.
    examples = runnable_examples(DOCS / "quickstart.md")
    assert [block.line for block, shown in examples[1:] if shown is None] == []


# Runs the page's runnable blocks in order in one namespace; prints what each block printed, as JSON.
RUNNER = """
import contextlib, io, json, sys
namespace = {"__name__": "__main__"}
printed = []
for line, code in json.loads(sys.stdin.read()):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile("\\n" * (line - 1) + code, "docs/quickstart.md", "exec"), namespace)
    printed.append(buffer.getvalue())
print("\\n@@printed@@" + json.dumps(printed))
"""


def test_quickstart_examples_run_and_print_what_the_page_shows(tmp_path: Path) -> None:
    """The page is one script. Each block is compiled with its own line numbers, so a traceback
    points at docs/quickstart.md:LINE; the run happens in a fresh interpreter in a temporary folder."""
    examples = runnable_examples(DOCS / "quickstart.md")
    completed = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps([(block.line, block.code) for block, _ in examples]),
        cwd=tmp_path,  # whatever the examples write stays in the test's folder
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=QUICKSTART_TIMEOUT,
    )
    assert completed.returncode == 0, f"a quick start example failed:\n{completed.stdout}\n{completed.stderr}"
    printed = json.loads(completed.stdout.rsplit("@@printed@@", 1)[1])
    assert len(printed) == len(examples)
    for (block, shown), output in zip(examples, printed, strict=True):
        if shown is not None:
            assert output.rstrip("\n") == shown, f"docs/quickstart.md:{block.line}: the example printed\n{output}"


# --- the migration guide's example is what the codemod does -----------------------------------------


def migration_blocks() -> dict[str, str]:
    """The guide's example, by marker: before, report, after, manual-before, manual-after, report-2."""
    return {
        b.marker.removeprefix("migrate: "): b.code
        for b in fenced_blocks(DOCS / "migration.md")
        if b.marker is not None and b.marker.startswith("migrate: ")
    }


def run_codemod(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lightning_step_types.migrate", "--base-class", "model.py"],
        cwd=folder,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=15),
    )


def test_migration_guide_example_is_what_the_codemod_does(tmp_path: Path) -> None:
    blocks = migration_blocks()
    assert sorted(blocks) == ["after", "before", "manual-after", "manual-before", "report", "report-2"]
    model = tmp_path / "model.py"
    model.write_text(blocks["before"] + "\n", encoding="utf-8")

    first = run_codemod(tmp_path)
    assert (first.returncode, first.stdout) == (2, ""), first.stderr
    assert first.stderr.rstrip("\n") == blocks["report"]
    assert model.read_text(encoding="utf-8") == blocks["after"] + "\n"

    # The hand edit, as the guide shows it, then the second run.
    assert blocks["after"].count(blocks["manual-before"]) == 1
    model.write_text(blocks["after"].replace(blocks["manual-before"], blocks["manual-after"]) + "\n", encoding="utf-8")
    second = run_codemod(tmp_path)
    assert (second.returncode, second.stdout) == (0, ""), second.stderr
    assert second.stderr.rstrip("\n") == blocks["report-2"]
    final = model.read_text(encoding="utf-8")
    assert "\nfrom lightning_step_types import TrainStepResult, TypedLightningModule, ValStepResult\n" in final
    assert "\nclass LitClassifier(TypedLightningModule):\n" in final

    # The migrated module trains and tests as a TypedLightningModule, and now logs the old "log" entry.
    spec = importlib.util.spec_from_file_location("migrated_model", model)
    assert spec is not None and spec.loader is not None
    migrated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migrated)
    assert issubclass(migrated.LitClassifier, TypedLightningModule)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 32, generator=generator), torch.randint(0, 10, (8,), generator=generator))
    trainer = pl.Trainer(**QUIET, default_root_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(does not have many workers|LeafSpec|smaller than the logging).*")
        trainer.fit(migrated.LitClassifier(), DataLoader(data, batch_size=4))
        assert trainer.global_step == 2
        assert sorted(trainer.callback_metrics) == ["train_loss"]
        tested = trainer.test(trainer.lightning_module, DataLoader(data, batch_size=4), verbose=False)
    assert tested == [{}]  # the test step logs nothing; it returned a ValStepResult the adapter accepted


# --- the error catalogue quotes the real messages ------------------------------------------------
#
# Every model is `MyModel`, as in the catalogue, with zero weights: on the data below its loss is
# exactly 1.0, so the messages carry no run-dependent numbers.

LOADER_DATA = (torch.ones(4, 3), torch.ones(4, 1))
QUIET: dict[str, Any] = dict(
    accelerator="cpu",
    devices=1,
    max_epochs=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    num_sanity_val_steps=0,
)

Return = Callable[[Any, torch.Tensor], Any]  # (model, the batch's loss) -> what the step returns


def _loader() -> DataLoader[Any]:
    return DataLoader(TensorDataset(*LOADER_DATA), batch_size=2)


def _zero_linear() -> nn.Linear:
    net = nn.Linear(3, 1)
    nn.init.zeros_(net.weight)
    nn.init.zeros_(net.bias)
    return net


def typed_train(model: Any, loss: torch.Tensor) -> TrainStepResult:
    return TrainStepResult(loss=loss)


def typed_val(model: Any, loss: torch.Tensor) -> ValStepResult:
    return ValStepResult(loss=loss)


def none_return(model: Any, loss: torch.Tensor) -> None:
    return None


def nan_result(model: Any, loss: torch.Tensor) -> TrainStepResult:
    return TrainStepResult(loss=loss * float("nan"))


class MyModel(TypedLightningModule):
    """The catalogue's typed module; its steps return what ``train_return``/``val_return`` build."""

    def __init__(self, train_return: Return = typed_train, val_return: Return = typed_val, **settings: Any) -> None:
        super().__init__()
        self.net = _zero_linear()
        self.train_return, self.val_return = train_return, val_return
        for name, value in settings.items():  # nonfinite_loss=..., log_loss=...
            setattr(self, name, value)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return self.train_return(self, F.mse_loss(self.net(x), y))

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return self.val_return(self, F.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _PlainModel(pl.LightningModule):
    """The catalogue's existing (plain Lightning) module, run under ``StepResultAdapter``."""

    def __init__(self, train_return: Return, val_return: Return | None = None) -> None:
        super().__init__()
        self.net = _zero_linear()
        self.train_return, self.val_return = train_return, val_return

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        return self.train_return(self, F.mse_loss(self.net(x), y))

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        assert self.val_return is not None
        return self.val_return(self, F.mse_loss(self.net(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


# The same name as the typed one, so that messages read `MyModel.training_step` as in the catalogue.
PlainMyModel: type[_PlainModel] = type("MyModel", (_PlainModel,), {"__module__": __name__})


class _FetchesWords(_PlainModel):
    """A step that fetches its own batches (``dataloader_iter``), batches that hold no tensor."""

    def training_step(self, dataloader_iter: Any) -> Any:  # type: ignore[override]
        next(dataloader_iter)
        return self.net(torch.ones(2, 3)).sum()


FetchesWordsMyModel: type[_FetchesWords] = type("MyModel", (_FetchesWords,), {"__module__": __name__})


def _fit_on_words(model: pl.LightningModule, *callbacks: pl.Callback) -> None:
    pl.Trainer(**QUIET, callbacks=list(callbacks)).fit(model, DataLoader(["a", "b", "c", "d"], batch_size=2))


def fit(model: pl.LightningModule, *callbacks: pl.Callback, validate: bool = False) -> None:
    trainer = pl.Trainer(**QUIET, callbacks=list(callbacks), limit_val_batches=1)
    trainer.fit(model, _loader(), _loader() if validate else None)


def error_of(run: Callable[[], object], kind: type[BaseException] = StepResultError) -> str:
    with pytest.raises(kind) as info:
        run()
    assert type(info.value) is kind
    return str(info.value)


def warning_of(run: Callable[[], object]) -> str:
    """The one StepResultWarning that ``run`` gives (a problem warns once per hook, not per step)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    assert len(messages) == 1, messages
    return messages[0]


def _no_grad_loss(model: Any, loss: torch.Tensor) -> TrainStepResult:
    with torch.no_grad():
        return TrainStepResult(loss=F.mse_loss(model.net(LOADER_DATA[0]), LOADER_DATA[1]))


def _logs_train_loss_itself(model: Any, loss: torch.Tensor) -> TrainStepResult:
    model.log("train_loss", loss)  # the step's own call, beside log_loss's of the same name
    return TrainStepResult(loss=loss)


def _subclass_with_a_field() -> None:
    # `class LogitsResult(TrainStepResult): logits: torch.Tensor`, named as at module level.
    type("LogitsResult", (TrainStepResult,), {"__annotations__": {"logits": "torch.Tensor"}, "__module__": __name__})


# Run in a fresh interpreter where a meta path finder makes both Lightning packages look uninstalled.
NO_LIGHTNING = """
import importlib.abc, sys
class Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pytorch_lightning", "lightning"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Uninstalled())
import lightning_step_types
try:
    lightning_step_types.TypedLightningModule
except ImportError as error:
    print(type(error).__name__ + ": " + str(error))
"""


def _lightning_missing() -> str:
    completed = subprocess.run(
        [sys.executable, "-c", NO_LIGHTNING],
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=15),
    )
    assert completed.returncode == 0, completed.stderr
    kind, _, message = completed.stdout.strip().partition(": ")
    assert kind == "ImportError"
    return message


class StepOutputs(Mapping[str, Any]):
    """A mapping a step returns that fails when inspected (as if defined in the user's model.py)."""

    __module__ = "model"

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iteration not supported")

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return "StepOutputs()"


def untyped(value: object) -> Any:
    """A deliberately wrong argument, hidden from the type checker (which would reject it first)."""
    return value


def _assign(target: Any, name: str, value: Any) -> None:
    setattr(target, name, value)


def _set_item(target: Any, key: str, value: Any) -> None:
    target[key] = value


def _resume_warning(case: str) -> str:
    """A resume from a checkpoint the epoch state cannot fully continue (tests/test_resume.py's models)."""
    import tempfile

    import test_resume as resume

    saved_by: Any = resume.PlainResume if case == "plain" else resume.TypedResume
    resumed_as = type("MyModel", (resume.ChangedLogging if case == "changed" else resume.TypedResume,), {})
    options: dict[str, Any] = {"max_epochs": 2, "loader": lambda: DataLoader(resume.dataset(), batch_size=2)}
    if case == "restored order":  # a sampler drawing from torch's global stream as its iteration starts

        def drawn_at_iter() -> StatefulDataLoader[Any]:
            import test_fault_matrix_loaders as loaders

            return StatefulDataLoader(resume.dataset(), batch_size=2, sampler=loaders.UserSampler(20))

        options["loader"] = drawn_at_iter
    if case == "shared generator":  # torchdata's RandomSampler(replacement=True) drawing from the loader's generator

        def shared() -> StatefulDataLoader[Any]:
            generator = torch.Generator().manual_seed(7)
            sampler = TorchdataRandomSampler(resume.dataset(), replacement=True, generator=generator)
            return StatefulDataLoader(resume.dataset(), batch_size=2, sampler=sampler, generator=generator)

        options["loader"] = shared
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        resume.fit(root / "saved", saved_by, every=5, **options)
        checkpoint = root / "saved" / "ckpt" / "step=5.ckpt"
        return warning_of(lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=checkpoint, **options))


def _plain_loader_warning(case: str) -> str:
    """A plain DataLoader resumed inside an epoch, where it cannot be exact (tests/test_plain_loaders.py's data)."""
    import tempfile

    import test_plain_loaders as plain
    import test_resume as resume

    resumed_as = type("MyModel", (resume.TypedResume,), {})
    loaders: dict[str, Callable[[], Any]] = {
        "unpositioned": lambda: plain.OwnIterators(plain.rows(), batch_size=2),
        "replayed": lambda: DataLoader(plain.NoisyStream(), batch_size=2),
    }
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        resume.fit(root / "saved", resume.TypedResume, every=5, loader=loaders[case])
        checkpoint = root / "saved" / "ckpt" / "step=5.ckpt"
        return warning_of(lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=checkpoint, loader=loaders[case]))


def _worker_draws_warning() -> str:
    """Workers adding noise as they load (tests/test_plain_loaders.py's), resumed inside epoch 1."""
    import tempfile

    import test_plain_loaders as plain
    import test_resume as resume

    def loader() -> DataLoader[Any]:
        return DataLoader(plain.WorkerRows(noise=True), batch_size=2, shuffle=True, num_workers=2)

    resumed_as = type("MyModel", (plain.WorkerRecorder,), {})
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        resume.fit(root / "saved", plain.WorkerRecorder, every=13, loader=loader, max_epochs=2)
        checkpoint = root / "saved" / "ckpt" / "step=13.ckpt"
        return warning_of(
            lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=checkpoint, loader=loader, max_epochs=2)
        )


def _cycled_loader_warning() -> str:
    """A save in batch 8, after the shorter of two shuffled loaders in ``max_size_cycle``, each loading in
    a worker process, started again at batch 7's fetch (tests/test_loader_rewind.py's models)."""
    import tempfile

    import test_loader_rewind as rewind

    with tempfile.TemporaryDirectory() as folder:
        saved = Path(folder) / "saved.ckpt"
        kwargs = {**rewind.trainer_kwargs(folder, max_epochs=2), "enable_checkpointing": False}
        loader = rewind.combined_loader("max_size_cycle", kind=rewind.with_workers)
        with pytest.raises(RuntimeError, match="the dataset failed"):
            pl.Trainer(**kwargs).fit(rewind.SavingInStep(saved, 8), loader)
        resumed_as = type("MyModel", (rewind.CombinedRegressor,), {})
        loader = rewind.combined_loader("max_size_cycle", kind=rewind.with_workers)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pl.Trainer(**kwargs).fit(resumed_as(), loader, ckpt_path=saved)
        messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
        # the loaders' workers draw nothing at random: not named
        (message,) = messages
        return message


def _resume_inside_a_batch_warning(case: str) -> str:
    """A checkpoint saved inside batch 5 that no point can fully hold (tests/test_resume_fault.py's models)."""
    import tempfile

    import test_resume as resume
    import test_resume_fault as fault
    from pytorch_lightning.callbacks import OnExceptionCheckpoint

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        saved_to = root / "saving" / "in_step.ckpt"
        if case == "running statistics":
            named_as = type("MyModel", (fault.NormedFaulty,), {})
            with pytest.raises(fault.SimulatedFault):
                resume.fit(
                    root / "faulty",
                    lambda: fault.NormedFaulty("backward"),
                    loader=fault.batches_of_three,
                    enable_checkpointing=True,
                    callbacks=[OnExceptionCheckpoint(root / "faulty")],
                )
            saved_to = root / "faulty" / "on_exception.ckpt"
            return warning_of(
                lambda: resume.fit(root / "resumed", named_as, loader=fault.batches_of_three, ckpt_path=saved_to)
            )
        if case == "batch-end hooks":
            resume.fit(root / "saving", lambda: fault.BatchEndLogging("save_after_optimizer_step", saved_to))
            logging_as = type("MyModel", (fault.BatchEndLogging,), {})
            return warning_of(lambda: resume.fit(root / "resumed", logging_as, ckpt_path=saved_to))
        if case == "manual":
            resume.fit(root / "saving", lambda: fault.ManualSteps("save_after_step", saved_to))
            manual_as = type("MyModel", (fault.ManualSteps,), {})
            return warning_of(lambda: resume.fit(root / "resumed", manual_as, ckpt_path=saved_to))
        # a save in on_after_backward of batch 5, the last of the accumulation window 4-5
        resume.fit(root / "saving", lambda: fault.FaultyTyped("save_in_hook", saved_to), accumulate_grad_batches=2)
        resumed_as = type("MyModel", (fault.FaultyTyped,), {})
        return warning_of(
            lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=saved_to, accumulate_grad_batches=2)
        )


def _resume_holder_warning(case: str) -> str:
    """A resume where a holder of state outside the library's running state cannot be exact
    (tests/test_resume_fault.py's models, with one more holder each)."""
    import tempfile

    import test_resume as resume
    import test_resume_fault as fault
    from pytorch_lightning.callbacks import ModelCheckpoint, OnExceptionCheckpoint

    class CountsRows(fault.FaultyTyped):
        """Counts the rows training_step sees, in its own on_save_checkpoint data, which it loads back."""

        rows_seen = 0

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.rows_seen += len(batch[0])
            return super().training_step(batch, batch_idx)

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            super().on_save_checkpoint(checkpoint)
            checkpoint["rows_seen"] = self.rows_seen

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            super().on_load_checkpoint(checkpoint)
            self.rows_seen = checkpoint["rows_seen"]

    class WarmUpFreeze(pl.Callback):
        """Trains the layer's weight alone in epoch 0 (a warm-up), its bias too from epoch 1."""

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            pl_module.net.bias.requires_grad_(trainer.current_epoch > 0)

    class FullDisk(TorchCheckpointIO):
        """The write of ModelCheckpoint's step=6.ckpt fails, as on a full disk."""

        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            if Path(path).name == "step=6.ckpt":
                raise OSError(28, "No space left on device", str(path))
            super().save_checkpoint(checkpoint, path, storage_options)

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        saving: Any = CountsRows if case == "module" else fault.FaultyTyped
        resumed_as: Any = type("MyModel", (saving,), {})
        callbacks: list[Any] = [OnExceptionCheckpoint(root / "faulty")]
        options: dict[str, Any] = {"enable_checkpointing": True}
        if case == "epoch start":
            callbacks.append(WarmUpFreeze())
        if case == "batch end":
            callbacks.append(ModelCheckpoint(root / "ckpt", every_n_train_steps=6, save_top_k=-1, filename="{step}"))
            options["plugins"] = [FullDisk()]
        with pytest.raises((fault.SimulatedFault, OSError)):
            resume.fit(
                root / "faulty",
                (lambda: saving()) if case == "batch end" else (lambda: saving("after_log")),
                callbacks=callbacks,
                **options,
            )
        checkpoint = root / "faulty" / "on_exception.ckpt"
        options.pop("plugins", None)
        resumed_callbacks = [WarmUpFreeze()] if case == "epoch start" else []
        return warning_of(
            lambda: resume.fit(
                root / "resumed", resumed_as, ckpt_path=checkpoint, callbacks=resumed_callbacks, **options
            )
        )


def _save_in_batch_end_warning() -> str:
    """A user's callback saves in batch 5's on_train_batch_end before it records the batch, a callback after it
    records it too (tests/test_resume.py's models)."""
    import tempfile

    import test_resume as resume

    class SavesEvery5(pl.Callback):
        def __init__(self, path: Path) -> None:
            self.path, self.seen = path, list[int]()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 5:
                trainer.save_checkpoint(self.path)
            self.seen.append(batch_idx)

    class Records(pl.Callback):
        def __init__(self) -> None:
            self.seen = list[int]()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.seen.append(batch_idx)

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        checkpoint = root / "user.ckpt"
        resume.fit(root / "saved", resume.TypedResume, callbacks=[SavesEvery5(checkpoint), Records()])
        resumed_as = type("MyModel", (resume.TypedResume,), {})
        return warning_of(
            lambda: resume.fit(
                root / "resumed", resumed_as, ckpt_path=checkpoint, callbacks=[SavesEvery5(root / "x"), Records()]
            )
        )


def _relaunch_warning(case: str) -> str:
    """A resume that cannot be exact for what Lightning does before or instead of the fit: a float64 checkpoint
    loaded into a module built in float32 (``float64``), a relaunch with nothing left to train from a checkpoint
    saved inside the epoch ``max_steps`` ended (``max_steps``) (tests/test_resume.py's models)."""
    import tempfile

    import test_resume as resume

    options: dict[str, Any] = {"max_epochs": 1, "precision": "64-true"} if case == "float64" else {"max_steps": 5}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        resume.fit(root / "saved", resume.TypedResume, every=5, **options)
        resumed_as = type("MyModel", (resume.TypedResume,), {})
        checkpoint = root / "saved" / "ckpt" / "step=5.ckpt"
        return warning_of(lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=checkpoint, **options))


def _resume_callback_warning(case: str) -> str:
    """A resume with a callback the library cannot take back to the point: an attribute that is not plain
    data (``attribute``), or ``ModelPruning`` resumed after its first pruning (``pruning``)."""
    import tempfile

    import test_resume as resume
    import test_resume_fault as fault
    from pytorch_lightning.callbacks import ModelPruning, OnExceptionCheckpoint

    class Best:
        """An object of the user's own class."""

        def __init__(self, loss: float) -> None:
            self.loss = loss

    class KeepsBest(pl.Callback):
        """Keeps the best batch's loss in an object of its own class."""

        def __init__(self) -> None:
            self.best = Best(float("inf"))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.best = Best(min(self.best.loss, float(outputs["loss"])))

    def callbacks() -> list[Any]:
        return [KeepsBest()] if case == "attribute" else [ModelPruning("l1_unstructured", amount=0.2)]

    fault_at = (0, 5) if case == "attribute" else (1, 5)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with pytest.raises(fault.SimulatedFault):
            resume.fit(
                root / "faulty",
                lambda: fault.FaultyTyped("after_log", fault_at=fault_at),
                callbacks=[OnExceptionCheckpoint(root / "faulty"), *callbacks()],
                max_epochs=2,
                enable_checkpointing=True,
            )
        resumed_as: Any = type("MyModel", (fault.FaultyTyped,), {})
        return warning_of(
            lambda: resume.fit(
                root / "resumed",
                resumed_as,
                ckpt_path=root / "faulty" / "on_exception.ckpt",
                callbacks=callbacks(),
                max_epochs=2,
            )
        )


def _resume_workers_warning() -> str:
    """Augmentation in two worker processes, resumed inside the epoch (tests/test_random_streams.py's model)."""
    import tempfile

    import test_random_streams as streams

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        setup = streams.Setup(dropout=False, augment=True, workers=2)
        broken = streams.fit("typed", setup, root / "broken", streams.Fault("exception"), named="MyModel")
        resumed = streams.fit("typed", setup, root / "resumed", ckpt=broken.checkpoint, named="MyModel")
        (message,) = resumed.warnings
        return message


class Tally:
    """A user's helper object, as a script defines it (the catalogue shows its class as ``Tally``)."""

    def __init__(self) -> None:
        self.count = 0


Tally.__module__ = "__main__"


def _resume_attribute_warning() -> str:
    """A module attribute that no checkpoint holds changed before the save (tests/test_resume_fault.py's model)."""
    import tempfile

    import test_resume as resume
    import test_resume_fault as fault
    from pytorch_lightning.callbacks import OnExceptionCheckpoint

    class Counting(fault.FaultyTyped):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.tally = Tally()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.tally.count += 1
            return super().training_step(batch, batch_idx)

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with pytest.raises(fault.SimulatedFault):
            resume.fit(
                root / "faulty",
                lambda: Counting("after_log"),
                callbacks=[OnExceptionCheckpoint(root / "faulty")],
                enable_checkpointing=True,
            )
        resumed_as: Any = type("MyModel", (Counting,), {})
        checkpoint = root / "faulty" / "on_exception.ckpt"
        return warning_of(lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=checkpoint))


def _resume_plain_epoch_end_warning() -> str:
    """Plain Lightning's checkpoint saved by OnExceptionCheckpoint in an epoch's end hooks."""
    import tempfile

    import test_resume as resume
    import test_resume_fault as fault
    from pytorch_lightning.callbacks import OnExceptionCheckpoint

    class FailsAtEpochEnd(fault.FaultyPlain):
        def on_train_epoch_end(self) -> None:
            if self.current_epoch == 0:
                raise fault.SimulatedFault("on_train_epoch_end")

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with pytest.raises(fault.SimulatedFault):
            resume.fit(
                root / "faulty",
                FailsAtEpochEnd,
                max_epochs=2,
                enable_checkpointing=True,
                callbacks=[OnExceptionCheckpoint(root / "faulty")],
            )
        resumed_as = type("MyModel", (fault.FaultyTyped,), {})
        checkpoint = root / "faulty" / "on_exception.ckpt"
        return warning_of(lambda: resume.fit(root / "resumed", resumed_as, ckpt_path=checkpoint, max_epochs=2))


ONE = torch.tensor(1.0)
NAN = float("nan")
A = StepResultAdapter


# --- declared metrics: MyModel with a configure_step_metrics, and a step whose metadata holds "preds" ---


class _DeclaresMetrics(MyModel):
    declared: Any = {}

    def configure_step_metrics(self) -> Any:
        return self.declared


MetricsMyModel: type[_DeclaresMetrics] = type("MyModel", (_DeclaresMetrics,), {"__module__": __name__})


def with_preds(model: Any, loss: torch.Tensor) -> TrainStepResult:
    return TrainStepResult(loss=loss, metadata={"preds": torch.zeros(2, 1)})


def logs_train_mse(model: Any, loss: torch.Tensor) -> TrainStepResult:
    model.log("train_mse", loss)
    return with_preds(model, loss)


def mse(
    update: Callable[[Any, Any], Any] = lambda r, b: (r.metadata["preds"], b[1]), **options: Any
) -> StepMetric[Any]:
    from torchmetrics import MeanSquaredError

    return StepMetric(MeanSquaredError(), update=update, **options)


def fit_metrics(declared: Any, train_return: Return = with_preds, **settings: Any) -> None:
    fit(MetricsMyModel(train_return, declared=declared, **settings))


def _metric_class() -> Any:
    from torchmetrics import MeanSquaredError

    return MeanSquaredError()


# --- one metric object that training and validation share (MyModel keeps `self.mse`) ---


def _shares_mse_init(self: Any, *args: Any, **kwargs: Any) -> None:
    from torchmetrics import MeanSquaredError

    super(type(self), self).__init__(*args, **kwargs)
    self.mse = MeanSquaredError()


def _shares_mse_step(stage: str, result: Callable[[torch.Tensor], Any]) -> Callable[..., Any]:
    def step(self: Any, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        preds = self.net(x)
        self.mse.update(preds.detach(), y)
        self.log(f"{stage}_mse", self.mse, on_step=False, on_epoch=True)
        return result(F.mse_loss(preds, y))

    return step


def _sharing_model(
    base: type[Any], train_result: Callable[[torch.Tensor], Any], val_result: Callable[[torch.Tensor], Any]
) -> Any:
    namespace = {
        "__module__": __name__,
        "__init__": _shares_mse_init,
        "training_step": _shares_mse_step("train", train_result),
        "validation_step": _shares_mse_step("val", val_result),
    }
    return type("MyModel", (base,), namespace)


SharesMetricMyModel = _sharing_model(
    MyModel, lambda loss: TrainStepResult(loss=loss), lambda loss: ValStepResult(loss=loss)
)
SharesMetricPlainMyModel = _sharing_model(_PlainModel, lambda loss: loss, lambda loss: None)


def _shares_collection_init(self: Any, *args: Any, **kwargs: Any) -> None:
    from torchmetrics import MeanAbsoluteError, MeanSquaredError, MetricCollection

    super(type(self), self).__init__(*args, **kwargs)
    self.metrics = MetricCollection({"mse": MeanSquaredError(), "mae": MeanAbsoluteError()})


def _shares_collection_step(stage: str, result: Callable[[torch.Tensor], Any]) -> Callable[..., Any]:
    def step(self: Any, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        preds = self.net(x)
        self.metrics.update(preds.detach(), y)
        self.log_dict(
            {f"{stage}_{name}": metric for name, metric in self.metrics.items()}, on_step=False, on_epoch=True
        )
        return result(F.mse_loss(preds, y))

    return step


SharesCollectionMyModel = type(
    "MyModel",
    (MyModel,),
    {
        "__module__": __name__,
        "__init__": _shares_collection_init,
        "training_step": _shares_collection_step("train", lambda loss: TrainStepResult(loss=loss)),
        "validation_step": _shares_collection_step("val", lambda loss: ValStepResult(loss=loss)),
    },
)


class _DictBatches(MyModel):
    """MyModel on batches that are dicts, ``{"image": ..., "label": ...}``."""

    declared: Any = {}

    def configure_step_metrics(self) -> Any:
        return self.declared

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return with_preds(self, F.mse_loss(self.net(batch["image"]), batch["label"]))


DictMyModel: type[_DictBatches] = type("MyModel", (_DictBatches,), {"__module__": __name__})


def fit_dict_batches(declared: Any) -> None:
    x, y = LOADER_DATA
    batches = [{"image": x[i], "label": y[i]} for i in range(len(x))]
    trainer = pl.Trainer(**QUIET)
    trainer.fit(DictMyModel(declared=declared), DataLoader(batches, batch_size=2))  # type: ignore[arg-type]


def _confusion_matrix() -> StepMetric[Any]:
    from torchmetrics.classification import MulticlassConfusionMatrix

    return StepMetric(MulticlassConfusionMatrix(3), update=lambda r, b: (r.metadata["preds"], b[1]))


def _collected_preds() -> StepMetric[Any]:
    from torchmetrics import CatMetric

    return StepMetric(CatMetric(), update=lambda r, b: (r.metadata["preds"],), stages=("train",))


def _reads_an_undeclared_metric(model: Any) -> None:
    class Reads(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            declared_metric(pl_module, "mes", "train")

    trainer = pl.Trainer(**QUIET, callbacks=[Reads()])
    trainer.fit(model, _loader())


# name -> how to produce the message; names only identify failures.
TRIGGERS: dict[str, Callable[[], str]] = {
    # building a result
    "loss from .item() in a step": lambda: error_of(
        lambda: fit(MyModel(lambda m, loss: TrainStepResult(loss=untyped(loss.item()))))
    ),
    "loss integer tensor": lambda: error_of(lambda: TrainStepResult(loss=torch.tensor(3))),
    "loss complex tensor": lambda: error_of(lambda: TrainStepResult(loss=torch.tensor(1 + 2j))),
    "loss float8": lambda: error_of(lambda: TrainStepResult(loss=torch.tensor(1.0).to(torch.float8_e4m3fn))),
    "loss per-sample": lambda: error_of(lambda: TrainStepResult(loss=torch.ones(4))),
    "loss empty": lambda: error_of(lambda: TrainStepResult(loss=torch.ones(0))),
    "loss list": lambda: error_of(lambda: TrainStepResult(loss=untyped([ONE, ONE]))),
    "loss numpy": lambda: error_of(lambda: TrainStepResult(loss=untyped(np.float32(1.0)))),
    "loss None": lambda: error_of(lambda: ValStepResult(loss=untyped(None))),
    "metadata pairs": lambda: error_of(lambda: TrainStepResult(loss=ONE, metadata=untyped([("logits", ONE)]))),
    "metadata int key": lambda: error_of(lambda: TrainStepResult(loss=ONE, metadata=untyped({0: ONE}))),
    "metadata loss key": lambda: error_of(lambda: TrainStepResult(loss=ONE, metadata={"loss": ONE})),
    "batch_size zero": lambda: error_of(lambda: TrainStepResult(loss=ONE, batch_size=0)),
    "subclass field": lambda: error_of(_subclass_with_a_field, TypeError),
    "assign a field": lambda: error_of(
        lambda: _assign(TrainStepResult(loss=ONE), "loss", ONE), dataclasses.FrozenInstanceError
    ),
    "assign metadata": lambda: error_of(lambda: _set_item(TrainStepResult(loss=ONE).metadata, "x", 1), TypeError),
    # what a typed step returns
    "strict tensor": lambda: error_of(lambda: fit(MyModel(lambda m, loss: loss))),
    "strict dict": lambda: error_of(lambda: fit(MyModel(lambda m, loss: {"loss": loss, "logits": loss}))),
    "strict tuple": lambda: error_of(lambda: fit(MyModel(lambda m, loss: (loss, loss)))),
    "strict legacy log key": lambda: error_of(
        lambda: fit(MyModel(lambda m, loss: {"loss": loss, "acc": loss.detach(), "log": {"train_loss": loss}}))
    ),
    "strict validation dict": lambda: error_of(
        lambda: fit(MyModel(val_return=lambda m, loss: {"val_loss": loss}), validate=True)
    ),
    "val result from training": lambda: error_of(lambda: fit(MyModel(lambda m, loss: ValStepResult(loss=loss)))),
    "train result from validation": lambda: error_of(
        lambda: fit(MyModel(val_return=lambda m, loss: TrainStepResult(loss=loss)), validate=True)
    ),
    "detached loss": lambda: error_of(lambda: fit(MyModel(lambda m, loss: TrainStepResult(loss=loss.detach())))),
    "loss under no_grad": lambda: error_of(lambda: fit(MyModel(_no_grad_loss))),
    "leaf loss": lambda: error_of(
        lambda: fit(MyModel(lambda m, loss: TrainStepResult(loss=torch.tensor(loss.item(), requires_grad=True))))
    ),
    # non-finite losses
    "nan raise": lambda: error_of(lambda: fit(MyModel(nan_result))),
    "nan warn": lambda: warning_of(lambda: fit(MyModel(nan_result, nonfinite_loss="warn"))),
    "nan skip": lambda: warning_of(lambda: fit(MyModel(nan_result, nonfinite_loss="skip"))),
    "nan under the adapter's default": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: nan_result(m, loss).loss), A())
    ),
    # existing modules under the lenient StepResultAdapter
    "lenient misspelt loss key": lambda: error_of(lambda: fit(PlainMyModel(lambda m, loss: {"Loss": loss}), A())),
    "lenient no loss key": lambda: error_of(lambda: fit(PlainMyModel(lambda m, loss: {"train_loss": loss}), A())),
    "lenient tuple": lambda: error_of(lambda: fit(PlainMyModel(lambda m, loss: (loss, loss)), A())),
    "lenient .item() in the dict": lambda: error_of(
        lambda: fit(PlainMyModel(lambda m, loss: {"loss": loss.item()}), A())
    ),
    "lenient mapping that fails": lambda: error_of(lambda: fit(PlainMyModel(lambda m, loss: StepOutputs()), A())),
    "lenient legacy log key": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: {"loss": loss, "log": {"train_loss": loss}}), A())
    ),
    "lenient legacy progress_bar key": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: {"loss": loss, "progress_bar": {"train_loss": loss}}), A())
    ),
    "lenient legacy hiddens key": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: {"loss": loss, "hiddens": loss}), A())
    ),
    "lenient int key": lambda: warning_of(lambda: fit(PlainMyModel(lambda m, loss: {"loss": loss, 0: loss}), A())),
    "lenient validation tuple": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: loss, lambda m, loss: (loss, loss)), A(), validate=True)
    ),
    "lenient leaf loss": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: torch.tensor(0.0, requires_grad=True)), A())
    ),
    "lenient per-sample validation loss": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: loss, lambda m, loss: {"loss": loss.repeat(4)}), A(), validate=True)
    ),
    "log_loss beside the step's own self.log": lambda: warning_of(
        lambda: fit(MyModel(_logs_train_loss_itself, log_loss=True))
    ),
    "log_loss beside the step's own self.log, callback": lambda: warning_of(
        lambda: fit(PlainMyModel(lambda m, loss: _logs_train_loss_itself(m, loss).loss), A(log_loss=True))
    ),
    "log_loss with dataloader_iter and no batch size": lambda: error_of(
        lambda: _fit_on_words(FetchesWordsMyModel(lambda m, loss: loss), A(log_loss=True))
    ),
    "adapter settings on a typed module": lambda: warning_of(lambda: fit(MyModel(), A(nonfinite_loss="skip"))),
    "strict adapter dict": lambda: error_of(
        lambda: fit(PlainMyModel(lambda m, loss: {"loss": loss, "preds": loss.detach()}), A(strict=True))
    ),
    # resuming a run
    "resume from a plain checkpoint": lambda: _resume_warning("plain"),
    "resume after the module changed": lambda: _resume_warning("changed"),
    "resume with a sampler drawing as its iteration starts": lambda: _resume_warning("restored order"),
    "resume with a loader the library cannot start inside an epoch": lambda: _plain_loader_warning("unpositioned"),
    "resume replaying an iterable that draws from the global streams": lambda: _plain_loader_warning("replayed"),
    "resume with workers that drew at random": _worker_draws_warning,
    "resume with a sampler sharing the loader's generator": lambda: _resume_warning("shared generator"),
    "resume inside a combined loader's new pass": _cycled_loader_warning,
    "resume after an optimizer step, before on_train_batch_end logs": lambda: _resume_inside_a_batch_warning(
        "batch-end hooks"
    ),
    "resume after a manual optimizer step inside training_step": lambda: _resume_inside_a_batch_warning("manual"),
    "resume inside an accumulation window's backward": lambda: _resume_inside_a_batch_warning("accumulation"),
    "resume with running statistics inside the batch": lambda: _resume_inside_a_batch_warning("running statistics"),
    "resume with the module's own checkpoint data": lambda: _resume_holder_warning("module"),
    "resume with a module attribute no checkpoint holds": lambda: _resume_attribute_warning(),
    "resume inside an epoch with a callback set up at its start": lambda: _resume_holder_warning("epoch start"),
    "resume after a failed write in on_train_batch_end": lambda: _resume_holder_warning("batch end"),
    "resume from a save inside on_train_batch_end": _save_in_batch_end_warning,
    "resume plain Lightning's checkpoint from an epoch's end": _resume_plain_epoch_end_warning,
    "resume with a callback attribute that is not plain data": lambda: _resume_callback_warning("attribute"),
    "resume with ModelPruning after its first pruning": lambda: _resume_callback_warning("pruning"),
    "resume with workers drawing at random": lambda: _resume_workers_warning(),
    "resume a float64 checkpoint into a module built in float32": lambda: _relaunch_warning("float64"),
    "relaunch at max_steps from inside the epoch it ended": lambda: _relaunch_warning("max_steps"),
    # declared metrics
    "metric key typo": lambda: error_of(lambda: fit_metrics({"mse": mse(lambda r, b: (r.metadata["pred"], b[1]))})),
    "metric attribute for a key": lambda: error_of(lambda: fit_metrics({"mse": mse(lambda r, b: (r.preds, b[1]))})),
    "metric wrong shape": lambda: error_of(
        lambda: fit_metrics({"mse": mse(lambda r, b: (r.metadata["preds"], b[1][:, 0]))})
    ),
    "metric wrong arity": lambda: error_of(lambda: fit_metrics({"mse": mse(lambda r, b: (r.metadata["preds"],))})),
    "metric update not a tuple": lambda: error_of(lambda: fit_metrics({"mse": mse(lambda r, b: r.metadata["preds"])})),
    "metric the step logs too": lambda: error_of(lambda: fit_metrics({"mse": mse()}, logs_train_mse)),
    "metric not a StepMetric": lambda: error_of(lambda: fit_metrics({"mse": _metric_class()})),
    "metric not torchmetrics": lambda: error_of(
        lambda: fit_metrics({"mse": StepMetric(untyped(F.mse_loss), update=lambda r, b: (r.metadata["preds"], b[1]))})
    ),
    "metric unknown stage": lambda: error_of(
        lambda: fit_metrics({"mse": mse(stages=untyped(("train", "validation")))})
    ),
    "metric name twice": lambda: error_of(lambda: fit_metrics({"mse": mse(), "error": mse(log_name="{stage}_mse")})),
    "metric name of log_loss": lambda: error_of(lambda: fit_metrics({"loss": mse()}, log_loss=True)),
    "metric shared by training and validation": lambda: warning_of(lambda: fit(SharesMetricMyModel(), validate=True)),
    "metric shared by training and validation, callback": lambda: warning_of(
        lambda: fit(SharesMetricPlainMyModel(typed_train), A(), validate=True)
    ),
    "collection shared by training and validation": lambda: warning_of(
        lambda: fit(SharesCollectionMyModel(), validate=True)
    ),
    "metric batch key typo": lambda: error_of(
        lambda: fit_dict_batches({"mse": mse(lambda r, b: (r.metadata["preds"], b["labels"]))})
    ),
    "metric log_name typo": lambda: error_of(lambda: fit_metrics({"mse": mse(log_name="{stag}_{name}")})),
    "metric on_step without training": lambda: error_of(
        lambda: fit_metrics({"mse": mse(stages=("val",), on_step=True)})
    ),
    "metric on_epoch without on_step": lambda: error_of(lambda: fit_metrics({"mse": mse(on_epoch=False)})),
    "metric many values by kind": lambda: error_of(lambda: fit_metrics({"cm": _confusion_matrix()})),
    "metric many values at compute": lambda: error_of(lambda: fit_metrics({"preds": _collected_preds()})),
    "metric unfed": lambda: warning_of(
        lambda: fit(
            PlainMyModel(lambda m, loss: {"loss": loss, "preds": torch.zeros(2, 1)}, none_return),
            A(metrics={"mse": mse(lambda r, b: (r["preds"], b[1]), stages=("train", "val"))}),
            validate=True,
        )
    ),
    "declared_metric unknown name": lambda: error_of(
        lambda: _reads_an_undeclared_metric(MetricsMyModel(with_preds, declared={"mse": mse(stages=("train",))}))
    ),
    # settings
    "bad nonfinite_loss": lambda: error_of(lambda: A(nonfinite_loss=untyped("ignore")), ValueError),
    "bad log_loss": lambda: error_of(lambda: A(log_loss=untyped("yes")), ValueError),
    "bad log_loss on a module": lambda: error_of(lambda: fit(MyModel(log_loss=LossLogging)), ValueError),
    "no Lightning installed": _lightning_missing,
}

# Raised only under distributed training: checked by the slow tests below (two CPU processes).
DISTRIBUTED_TRIGGERS: dict[str, Return] = {
    "None under DDP": none_return,
    "skip under DDP": nan_result,
}
DISTRIBUTED_SETTINGS: dict[str, dict[str, Any]] = {"None under DDP": {}, "skip under DDP": {"nonfinite_loss": "skip"}}


def catalogue_blocks() -> list[str]:
    return [b.code for b in fenced_blocks(DOCS / "errors.md") if b.lang == "text"]


@pytest.fixture(scope="module")
def messages() -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(does not have many workers|LeafSpec|smaller than the logging).*")
        return {name: trigger() for name, trigger in TRIGGERS.items()}


@pytest.mark.parametrize("name", list(TRIGGERS))
def test_catalogue_quotes_the_message(messages: dict[str, str], name: str) -> None:
    assert messages[name] in catalogue_blocks(), (
        f"docs/errors.md lacks the current message for {name!r}:\n{messages[name]}"
    )


def test_catalogue_quotes_only_real_messages(messages: dict[str, str]) -> None:
    blocks = catalogue_blocks()
    assert len(blocks) == len(set(blocks)), "docs/errors.md quotes a message twice"
    unexplained = [b for b in blocks if b not in messages.values()]
    # The distributed-only messages are checked by the slow tests below, the two DDP resume warnings
    # by tests/test_scaling.py, the processes' settings by tests/test_resume_ddp_settings.py and torchrun's by
    # tests/test_scaling_recipes.py.
    distributed = [b for b in unexplained if any(marker in b for marker in DISTRIBUTED_MARKERS)]
    assert len(distributed) == len(DISTRIBUTED_TRIGGERS) + 4, distributed
    assert unexplained == distributed, "docs/errors.md quotes messages nothing produces:\n\n" + "\n\n".join(unexplained)


DISTRIBUTED_MARKERS = (
    "under distributed training",
    "whose processes were not at one point",
    "optimizer settings or LR schedulers differed",
    "whose order no checkpoint holds",
    "torchrun's restarts",
)


def _distributed_fit(name: str) -> None:
    model = MyModel(DISTRIBUTED_TRIGGERS[name], **DISTRIBUTED_SETTINGS[name])
    trainer = pl.Trainer(**{**QUIET, "devices": 2, "strategy": "ddp_spawn"}, limit_train_batches=1)
    trainer.fit(model, _loader())


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DISTRIBUTED_TRIGGERS))
def test_catalogue_quotes_the_distributed_message(name: str) -> None:
    # ddp_spawn re-raises a worker's exception as torch's ProcessRaisedException with its traceback.
    with pytest.raises(Exception) as info:
        _distributed_fit(name)
    traceback_text = str(info.value)
    marker = "lightning_step_types.errors.StepResultError: "
    assert marker in traceback_text, traceback_text
    message = traceback_text[traceback_text.rindex(marker) + len(marker) :].strip()
    assert message in catalogue_blocks(), f"docs/errors.md lacks the current message for {name!r}:\n{message}"
