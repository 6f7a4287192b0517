"""The harness that runs Lightning's own tests with the adapter (conformance/): it really injects it.

Lightning's tests themselves are not in this repository (conformance/README.md); the one test
that needs a clone of Lightning is skipped unless ``LIGHTNING_CHECKOUT`` names one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
from limits import hang_limit
from pytorch_lightning.callbacks import Callback, ModelCheckpoint

from lightning_step_types import StepResultAdapter

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"
sys.path.insert(0, str(CONFORMANCE))

import run as conformance_run  # noqa: E402
import step_adapter_plugin  # noqa: E402


@pytest.fixture
def injector(request: pytest.FixtureRequest) -> Iterator[Any]:
    injector = step_adapter_plugin._Injector(request.param)
    injector.install()
    try:
        yield injector
    finally:
        injector.uninstall()


def _trainer(**kwargs: Any) -> pl.Trainer:
    return pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, **kwargs)


@pytest.mark.parametrize("injector", ["default"], indirect=True)
def test_the_adapter_is_appended_to_every_form_of_callbacks(injector: Any) -> None:
    alone = _trainer(enable_checkpointing=False)
    assert [type(c) for c in alone.callbacks] == [StepResultAdapter]

    single = Callback()
    one = _trainer(callbacks=single, enable_checkpointing=False)
    assert [type(c) for c in one.callbacks] == [Callback, StepResultAdapter]
    assert one.callbacks[0] is single

    given: list[Callback] = [single]
    listed = _trainer(callbacks=given)
    # Lightning keeps the list it is given and appends its defaults; checkpoint callbacks go last
    assert [type(c) for c in listed.callbacks] == [Callback, StepResultAdapter, ModelCheckpoint]
    assert [type(c) for c in given] == [Callback, StepResultAdapter, ModelCheckpoint]

    assert (injector.trainers_built, injector.trainers_with_adapter) == (3, 3)
    assert pl.Trainer.__init__ is not injector._original_init


@pytest.mark.parametrize("injector", ["log_loss"], indirect=True)
def test_log_loss_mode_builds_the_adapter_with_log_loss(injector: Any) -> None:
    (adapter,) = _trainer(enable_checkpointing=False).callbacks
    assert isinstance(adapter, StepResultAdapter)
    assert adapter.policy.log_loss is not None and adapter.policy.log_loss.train == "train_loss"


@pytest.mark.parametrize("injector", ["off"], indirect=True)
def test_off_mode_counts_trainers_and_adds_nothing(injector: Any) -> None:
    assert _trainer(enable_checkpointing=False).callbacks == []
    assert (injector.trainers_built, injector.trainers_with_adapter) == (1, 0)


def test_uninstall_restores_lightnings_init() -> None:
    original = pl.Trainer.__init__
    injector = step_adapter_plugin._Injector("default")
    injector.install()
    injector.uninstall()
    assert pl.Trainer.__init__ is original


_INNER_TEST = """
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from pytorch_lightning.trainer.trainer import Trainer  # another import path, the same class


class Plain(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_fit():
    data = DataLoader(TensorDataset(torch.ones(4, 3)), batch_size=2)
    trainer = Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Plain(), data)
    print("LOGGED", sorted(trainer.callback_metrics))
"""


@pytest.mark.parametrize(
    ("mode", "logged", "with_adapter"),
    [("off", [], 0), ("log_loss", ["train_loss", "train_loss_epoch", "train_loss_step"], 1)],
)
def test_plugin_injects_the_adapter_into_a_pytest_run(
    tmp_path: Path, mode: str, logged: list[str], with_adapter: int
) -> None:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(_INNER_TEST), encoding="utf-8")
    results = tmp_path / "results.json"
    env = dict(os.environ, STEP_ADAPTER=mode, STEP_ADAPTER_RESULTS=str(results))
    env["PYTHONPATH"] = os.pathsep.join([str(CONFORMANCE), *filter(None, [os.environ.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "pytest", "test_inner.py", "-p", "step_adapter_plugin", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-s", "-q", "-c", os.devnull],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=60),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"LOGGED {logged}" in done.stdout
    assert f"step adapter ({mode}): 1 trainers built, {with_adapter} with StepResultAdapter" in done.stdout
    recorded = json.loads(results.read_text(encoding="utf-8"))
    assert recorded["outcomes"] == {"test_inner.py::test_fit": "passed"}
    assert (recorded["mode"], recorded["trainers_built"], recorded["trainers_with_adapter"]) == (mode, 1, with_adapter)


def _run(outcomes: dict[str, str], built: int = 2, with_adapter: int = 2) -> dict[str, Any]:
    causes = {node: f"AssertionError in {node}" for node, outcome in outcomes.items() if outcome == "failed"}
    return {
        "outcomes": outcomes,
        "causes": causes,
        "trainers_built": built,
        "trainers_with_adapter": with_adapter,
        "not_injected": [],
        "seconds": 60,
    }


def test_compare_counts_what_passes_plainly_and_fails_with_the_adapter(tmp_path: Path) -> None:
    plain = _run({"a.py::t1": "passed", "a.py::t2": "passed", "a.py::t3": "failed"}, with_adapter=0)
    adapter = _run({"a.py::t1": "failed", "a.py::t2": "passed", "a.py::t3": "passed"})
    lines, unexpected = conformance_run.compare({"off": plain, "default": adapter}, [])
    assert unexpected == 1
    assert "- `a.py::t1` (FAIL): AssertionError in a.py::t1" in lines
    allow = tmp_path / "allow.txt"
    allow.write_text("# comment\ndefault a.py::t*  # pins the callback list\n", encoding="utf-8")
    entries = conformance_run.load_allow_list(allow)
    lines, unexpected = conformance_run.compare({"off": plain, "default": adapter}, entries)
    assert unexpected == 0
    assert "- `a.py::t1` (allowed: pins the callback list): AssertionError in a.py::t1" in lines
    # the same entry does not cover another mode, and a trainer built without the adapter counts
    missing = _run({"a.py::t1": "failed"}, built=2, with_adapter=1)
    _, unexpected = conformance_run.compare({"off": plain, "log_loss": missing}, entries)
    assert unexpected == 2


def test_every_allow_list_entry_is_explained_in_the_readme() -> None:
    readme = (CONFORMANCE / "README.md").read_text(encoding="utf-8")
    for modes, pattern, _reason in conformance_run.load_allow_list(CONFORMANCE / "allowlist.txt"):
        assert f"`{pattern}`" in readme, f"{pattern} ({modes}) is on the allow-list, not in conformance/README.md"


@pytest.mark.skipif(not os.environ.get("LIGHTNING_CHECKOUT"), reason="set LIGHTNING_CHECKOUT to a clone of Lightning")
def test_prepare_converts_imports_as_lightnings_ci(tmp_path: Path) -> None:
    import prepare

    tests = prepare.prepare(Path(os.environ["LIGHTNING_CHECKOUT"]), prepare.DEFAULT_COMMIT, tmp_path / "lightning")
    source = (tests / "models" / "test_hooks.py").read_text(encoding="utf-8")
    assert (
        "from pytorch_lightning import Callback, LightningDataModule, LightningModule, Trainer, __version__" in source
    )
    assert "lightning.pytorch" not in source
    assert (tmp_path / "lightning" / "pyproject.toml").is_file()
