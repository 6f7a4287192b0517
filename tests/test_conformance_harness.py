"""The harness that runs Lightning's own tests with the adapter (conformance/): it really injects it,
records what each failure was, and allows a failure only when the allow-list's condition holds.

Lightning's tests themselves are not in this repository (conformance/README.md); the test that
converts a clone of Lightning is skipped unless ``LIGHTNING_CHECKOUT`` names one, and the test that
converts the archive CI reads is skipped where ``../shared/lightning-tests/`` is absent.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
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


def _inner_path() -> str:
    """The plugin's folder, then this checkout: the inner run imports the package this test imports."""
    return os.pathsep.join([str(CONFORMANCE), str(CONFORMANCE.parent), *filter(None, [os.environ.get("PYTHONPATH")])])


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


def test_the_lightning_pytorch_flavour_wraps_that_packages_trainer() -> None:
    import lightning.pytorch as lp

    from lightning_step_types.lightning_pytorch import StepResultAdapter as LightningPytorchAdapter

    injector = step_adapter_plugin._Injector("default", "lightning.pytorch")
    injector.install()
    try:
        trainer = lp.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, max_steps=1)
        plain = _trainer(enable_checkpointing=False)  # pytorch_lightning's Trainer is left alone
    finally:
        injector.uninstall()
    assert [type(c) for c in trainer.callbacks if isinstance(c, LightningPytorchAdapter)] == [LightningPytorchAdapter]
    assert plain.callbacks == []
    assert (injector.trainers_built, injector.trainers_with_adapter) == (1, 1)
    with pytest.raises(pytest.UsageError, match="STEP_ADAPTER_FLAVOUR must be one of"):
        step_adapter_plugin._Injector("default", "lightning")


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
    env["PYTHONPATH"] = _inner_path()
    command = [sys.executable, "-m", "pytest", "test_inner.py", "-p", "step_adapter_plugin", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-s", "-q", "-c", os.devnull, "--rootdir", str(tmp_path)],
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


def _failure(differences: list[dict[str, Any]]) -> dict[str, Any]:
    comparison = {"op": "==", "left": "[...]", "right": "[...]", "differences": differences, "complete": True}
    return {"phase": "call", **step_adapter_plugin.failure_record(AssertionError("assert"), comparison)}


def test_compare_counts_what_passes_plainly_and_fails_with_the_adapter(tmp_path: Path) -> None:
    plain = _run({"a.py::t1": "passed", "a.py::t2": "passed", "a.py::t3": "failed"}, with_adapter=0)
    adapter = _run({"a.py::t1": "failed", "a.py::t2": "passed", "a.py::t3": "passed"})
    adapter["failures"] = {"a.py::t1": _failure(step_adapter_plugin.differences([1, "x"], [1])[0])}
    lines, unexpected = conformance_run.compare({"off": plain, "default": adapter}, [])
    assert unexpected == 1
    assert "- `a.py::t1` (FAIL, not on the allow-list): AssertionError in a.py::t1" in lines
    allow = tmp_path / "allow.txt"
    allow.write_text("# comment\ndefault a.py::t*  extra: x  # pins the callback list\n", encoding="utf-8")
    entries = conformance_run.load_allow_list(allow)
    lines, unexpected = conformance_run.compare({"off": plain, "default": adapter}, entries)
    assert unexpected == 0
    assert "- `a.py::t1` (allowed by line 2, `extra: x`: pins the callback list)" in lines
    assert "1 fail plainly and pass under the adapter: `a.py::t3`" in lines
    # the same entry does not cover another mode, and a trainer built without the adapter counts
    missing = _run({"a.py::t1": "failed", "a.py::t2": "passed"}, built=2, with_adapter=1)
    _, unexpected = conformance_run.compare({"off": plain, "log_loss": missing}, entries)
    assert unexpected == 2
    # a stored baseline stands for the plain run; a test of it that did not run here is a difference
    skipped = _run({"a.py::t1": "passed", "a.py::t2": "skipped"})
    lines, unexpected = conformance_run.compare({"default": skipped}, entries, baseline={"a.py::t1", "a.py::t2"})
    assert unexpected == 1
    start = lines.index("1 pass in the baseline and did not pass or fail here (FAIL):")
    assert lines[start + 1] == "- `a.py::t2`: skipped"


def test_a_failure_not_allowed_is_run_again_alone_and_only_a_repeated_one_counts() -> None:
    plain = _run({"tests/tests_pytorch/a.py::t1": "passed", "tests/tests_pytorch/a.py::t2": "passed"}, with_adapter=0)
    adapter = _run({"tests/tests_pytorch/a.py::t1": "failed", "tests/tests_pytorch/a.py::t2": "failed"})
    runs = {"off": plain, "default": adapter}
    assert conformance_run.not_allowed(runs, [], None) == {
        "default": ["tests/tests_pytorch/a.py::t1", "tests/tests_pytorch/a.py::t2"]
    }
    asked: list[tuple[list[str], str]] = []

    def run(paths: list[str], label: str) -> dict[str, Any]:  # t1 passes alone, t2 fails again
        asked.append((paths, label))
        return _run({"tests/tests_pytorch/a.py::t1": "passed", "tests/tests_pytorch/a.py::t2": "failed"})

    runs["default"] = conformance_run.run_again(
        "default", adapter, conformance_run.not_allowed(runs, [], None)["default"], run
    )
    assert asked == [(["a.py::t1", "a.py::t2"], "default-again")]
    lines, unexpected = conformance_run.compare(runs, [])
    assert unexpected == 1
    assert (
        "- `tests/tests_pytorch/a.py::t2` (FAIL, not on the allow-list): AssertionError in tests/tests_pytorch/a.py::t2"
        in lines
    )
    start = lines.index("1 failed once and passed when run again alone (not counted):")
    assert (
        lines[start + 1]
        == "- `tests/tests_pytorch/a.py::t1`: the first time, AssertionError in tests/tests_pytorch/a.py::t1"
    )
    assert adapter["outcomes"]["tests/tests_pytorch/a.py::t1"] == "failed"  # the first run's record is kept as it was


_DISPOSITION = (
    "import os, signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_DFL, os.getsid(0) == os.getpid())"
)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_pytest_starts_with_sighups_default_away_from_hangups_under_nohup() -> None:
    def disposition() -> str:
        command = [sys.executable, "-c", _DISPOSITION]
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, **conformance_run._away_from_hangups()
        )
        return done.stdout.strip()

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        assert disposition() == "True True"  # the default, in a session of its own (as setsid starts it)
    finally:
        signal.signal(signal.SIGHUP, before)
    if before == signal.SIG_DFL:
        assert disposition() == "True False"  # as this process is


def test_every_allow_list_entry_is_explained_in_the_readme() -> None:
    readme = (CONFORMANCE / "README.md").read_text(encoding="utf-8")
    for entry in conformance_run.load_allow_list(CONFORMANCE / "allowlist.txt"):
        assert f"`{entry.pattern}`" in readme, f"{entry.pattern} is on the allow-list, not in conformance/README.md"
        assert f"`{entry.condition}`" in readme, f"{entry.pattern}: its condition is not in conformance/README.md"


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


_FAILING_TESTS = """
class StepResultError(TypeError):
    pass


def test_only_the_key():
    assert [{"name": "fit"}, {"ckpt": {"epoch": 0, "lightning_step_types": {}}}] == [{"name": "fit"}, {"ckpt": {"epoch": 0}}]


def test_the_key_and_a_call_more():
    called = [{"name": "fit"}, {"name": "state_dict"}, {"ckpt": {"epoch": 0, "lightning_step_types": {}}}]
    assert called == [{"name": "fit"}, {"ckpt": {"epoch": 0}}]


def test_raises_the_library_error():
    raise StepResultError("Model.training_step: return value")


def test_raises_another_error():
    raise ValueError("Model.training_step: return value")


def test_counters():
    assert {"total": {"ready": 8, "started": 8, "completed": 8}} == {"total": {"ready": 9, "started": 9, "completed": 8}}


def test_counters_and_more():
    assert {"total": {"ready": 8, "started": 7}} == {"total": {"ready": 9, "started": 9}}


def test_a_sum():
    assert 41 + 105 == 105


def test_a_sum_otherwise():
    assert 41 + 106 == 105


def checks_the_key():
    try:
        assert {"lightning_step_types": 1} == {}
    except AssertionError:
        pass


def test_caught_then_another_failure():
    checks_the_key()
    assert False, "the sum"
"""

_FAILING_ALLOW_LIST = """
# comment
default a/test_f.py::test_only_the_key  extra: lightning_step_types  # the checkpoint key
default a/test_f.py::test_the_key_and_a_call_more  extra: lightning_step_types  # the checkpoint key
default a/test_f.py::test_raises_*  raises: StepResultError "training_step: return value"  # the library's error
default a/test_f.py::test_counters*  value: "$['total']['ready']" "$['total']['started']" delta=-1  # one lower
default a/test_f.py::test_caught_then_another_failure  extra: lightning_step_types  # the key
default a/test_f.py::test_a_sum*  value: $ left=146 right=105  # the restored count
"""


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The plugin's record of a pytest run whose tests fail for allowed and for other reasons."""
    root = tmp_path_factory.mktemp("failing")
    (root / "a").mkdir()
    (root / "a" / "test_f.py").write_text(textwrap.dedent(_FAILING_TESTS), encoding="utf-8")
    results = root / "results.json"
    env = dict(os.environ, STEP_ADAPTER="default", STEP_ADAPTER_RESULTS=str(results))
    env["PYTHONPATH"] = _inner_path()
    command = [sys.executable, "-m", "pytest", "a/test_f.py", "-p", "step_adapter_plugin", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-q", "-c", os.devnull, "--rootdir", str(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=60),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    recorded = json.loads(results.read_text(encoding="utf-8"))
    assert set(recorded["outcomes"].values()) == {"failed"}, recorded["outcomes"]
    return {**recorded, "trainers_built": 1, "trainers_with_adapter": 1, "seconds": 1}  # no Trainer here


def test_a_failure_is_allowed_only_when_the_entrys_condition_holds(failing_run: dict[str, Any], tmp_path: Path) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text(_FAILING_ALLOW_LIST, encoding="utf-8")
    entries = conformance_run.load_allow_list(allow)
    baseline = set(failing_run["outcomes"])
    lines, unexpected = conformance_run.compare({"default": failing_run}, entries, baseline)
    assert lines[lines.index("## default: 9 pass in the baseline and fail under the adapter, 5 not allowed") + 2 :] == [
        "- `a/test_f.py::test_a_sum` (allowed by line 8, `value: $ left=146 right=105`: the restored count)",
        "- `a/test_f.py::test_a_sum_otherwise` (FAIL, for another reason than allow-list line 8 allows,"
        " `value: $ left=146 right=105`: $: 147 != 105, not left=146)",
        "- `a/test_f.py::test_caught_then_another_failure` (FAIL, for another reason than allow-list line 7"
        " allows, `extra: lightning_step_types`: it did not fail on an `assert x == y` but with AssertionError:"
        " the sum)",
        "- `a/test_f.py::test_counters` (allowed by line 6, `value: \"$['total']['ready']\" \"$['total']['started']\""
        " delta=-1`: one lower)",
        "- `a/test_f.py::test_counters_and_more` (FAIL, for another reason than allow-list line 6 allows,"
        " `value: \"$['total']['ready']\" \"$['total']['started']\" delta=-1`: $['total']['started']: 7 != 9:"
        " left - right is -2, not -1)",
        "- `a/test_f.py::test_only_the_key` (allowed by line 3, `extra: lightning_step_types`: the checkpoint key)",
        "- `a/test_f.py::test_raises_another_error` (FAIL, for another reason than allow-list line 5 allows,"
        ' `raises: StepResultError "training_step: return value"`: it raised ValueError:'
        " Model.training_step: return value)",
        "- `a/test_f.py::test_raises_the_library_error` (allowed by line 5, `raises: StepResultError"
        ' "training_step: return value"`: the library\'s error)',
        "- `a/test_f.py::test_the_key_and_a_call_more` (FAIL, for another reason than allow-list line 4 allows,"
        " `extra: lightning_step_types`: the comparison differs by more: item {'name': 'state_dict'} only on the"
        " left at $[1])",
    ]
    assert unexpected == 5


def test_the_plugin_records_what_each_failure_was(failing_run: dict[str, Any]) -> None:
    failures = failing_run["failures"]
    assert failures["a/test_f.py::test_the_key_and_a_call_more"]["comparison"]["differences"] == [
        {"path": "$[1]", "kind": "extra", "side": "left", "of": "item", "names": ["dict", "state_dict"],
         "repr": "{'name': 'state_dict'}"},
        {"path": "$[2]['ckpt']['lightning_step_types']", "kind": "extra", "side": "left", "of": "key",
         "names": ["lightning_step_types"], "repr": "'lightning_step_types'"},
    ]  # fmt: skip
    library_error = failures["a/test_f.py::test_raises_the_library_error"]
    assert library_error["bases"] == ["StepResultError", "TypeError", "Exception", "BaseException", "object"]
    assert library_error["statement"] == 'raise StepResultError("Model.training_step: return value")'
    assert library_error["comparison"] is None
    # an assert caught by the test itself is not the failure's comparison
    assert failures["a/test_f.py::test_caught_then_another_failure"]["comparison"] is None


def test_differences_align_lists_and_pair_items_that_differ_by_keys() -> None:
    from unittest.mock import ANY

    differences = step_adapter_plugin.differences
    assert differences([1, 2, 3], [1, 2, 4]) == ([{"path": "$[2]", "kind": "value", "left": "3", "right": "4"}], True)
    assert differences({"a", "train_loss_step"}, {"a"})[0] == [
        {"path": "$", "kind": "extra", "side": "left", "of": "member", "names": ["train_loss_step"],
         "repr": "'train_loss_step'"}
    ]  # fmt: skip
    # ANY on the expected side matches whatever the actual side holds
    assert differences([{"state_dict": torch_ones()}], [{"state_dict": ANY}]) == ([], True)
    # a class and an instance are named by the class
    assert differences([StepResultAdapter], [])[0][0]["names"] == ["StepResultAdapter"]
    assert differences([Callback()], [])[0][0]["names"] == ["Callback"]
    # past the limit the record says it is cut, and no condition can hold on it
    many, complete = differences(list(range(100)), [-1] * 100)
    assert not complete and len(many) == 40


def torch_ones() -> Any:
    import torch

    return torch.ones(2)


def test_a_spawned_process_exception_and_statement_are_read_from_its_traceback() -> None:
    text = textwrap.dedent(
        """

        -- Process 1 terminated with the following error:
        Traceback (most recent call last):
          File "/x/spawn.py", line 87, in _wrap
            fn(i, *args)
          File "/x/test_model_checkpoint.py", line 386, in on_train_end
            assert torch.save.call_count == 0
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^
        AssertionError
        """
    )
    assert step_adapter_plugin.spawned_exception(text) == {
        "exception": "AssertionError",
        "name": "AssertionError",
        "message": "",
        "statement": "assert torch.save.call_count == 0",
    }
    record = {"bases": ["ProcessRaisedException"], "message": text,
              "spawned": step_adapter_plugin.spawned_exception(text)}  # fmt: skip
    entry = conformance_run.Entry(("default",), "t", "fails-at", ("torch.save.call_count == 0",), "why", 1)
    assert conformance_run.check(entry, record) is None
    other = conformance_run.Entry(("default",), "t", "fails-at", ("state_dict_count",), "why", 1)
    assert conformance_run.check(other, record) == (
        "it failed at `assert torch.save.call_count == 0` (ProcessRaisedException (a spawned process raised"
        " AssertionError))"
    )
    raises = conformance_run.Entry(("default",), "t", "raises", ("AssertionError",), "why", 1)
    assert conformance_run.check(raises, record) is None


def test_an_allow_list_line_without_a_known_condition_is_refused(tmp_path: Path) -> None:
    allow = tmp_path / "allow.txt"
    allow.write_text("default a.py::t  # a reason, no condition\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"allow.txt:1: expected 'MODES NODE_ID_PATTERN KIND: ARGUMENTS  # reason'"):
        conformance_run.load_allow_list(allow)
    allow.write_text("default a.py::t  differs: x  # a reason\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="KIND one of extra, value, raises, fails-at, matches"):
        conformance_run.load_allow_list(allow)


def test_the_baseline_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "baseline.txt"
    plain = _run({"a.py::t1": "passed", "a.py::t2": "failed", "a.py::t0": "passed", "a.py::t3": "skipped"})
    assert conformance_run.write_baseline(path, plain) == 2
    assert path.read_text(encoding="utf-8").endswith("\na.py::t0\na.py::t1\n")
    assert conformance_run.read_baseline(path) == {"a.py::t0", "a.py::t1"}
    # --paths: the baseline's tests under those paths alone
    path.write_text(
        "# header\ntests/tests_pytorch/loops/test_a.py::t\ntests/tests_pytorch/loops_x/test_b.py::t\n"
        "tests/tests_pytorch/models/test_hooks.py::t[1]\ntests/tests_pytorch/models/test_restore.py::t\n",
        encoding="utf-8",
    )
    assert conformance_run.read_baseline(path, ["loops", "models/test_hooks.py"]) == {
        "tests/tests_pytorch/loops/test_a.py::t",
        "tests/tests_pytorch/models/test_hooks.py::t[1]",
    }


def _fake_lightning_archive(path: Path, commit: str | None, with_converter: bool = True) -> None:
    """A git-archive-like tarball: Lightning's paths under one top folder, a converter that rewrites imports."""
    files = {
        "tests/tests_pytorch/test_a.py": "from lightning.pytorch import Trainer\n",
        "pyproject.toml": "[tool.pytest.ini_options]\n",
    }
    if with_converter:
        files[".actions/assistant.py"] = textwrap.dedent(
            """
            from pathlib import Path

            def copy_replace_imports(source_dir, source_imports, target_imports):
                for path in Path(source_dir).rglob("*.py"):
                    text = path.read_text()
                    for source, target in zip(source_imports, target_imports):
                        text = text.replace(source, target)
                    path.write_text(text)
            """
        )
    with tarfile.open(path, "w:gz", pax_headers={"comment": commit} if commit else {}) as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"lightning-x/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_prepare_extracts_and_converts_an_archive(tmp_path: Path) -> None:
    import prepare

    archive = tmp_path / "lightning.tar.gz"
    _fake_lightning_archive(archive, prepare.DEFAULT_COMMIT)
    tests = prepare.prepare(archive, prepare.DEFAULT_COMMIT, tmp_path / "out")
    assert tests == tmp_path / "out" / "tests" / "tests_pytorch"
    assert (tests / "test_a.py").read_text(encoding="utf-8") == "from pytorch_lightning import Trainer\n"
    assert (tmp_path / "out" / "pyproject.toml").is_file()
    assert not (tmp_path / "out" / ".actions").exists()  # the converter is used, not kept
    assert (tmp_path / "out" / "LIGHTNING_COMMIT").read_text(encoding="utf-8") == prepare.DEFAULT_COMMIT + "\n"


def test_prepare_refuses_an_archive_of_another_commit_or_without_the_converter(tmp_path: Path) -> None:
    import prepare

    other = tmp_path / "other.tar.gz"
    _fake_lightning_archive(other, "0" * 40)
    with pytest.raises(SystemExit, match=f"is git archive of commit {'0' * 40}, not of --commit"):
        prepare.prepare(other, prepare.DEFAULT_COMMIT, tmp_path / "out1")
    bare = tmp_path / "bare.tgz"
    _fake_lightning_archive(bare, None, with_converter=False)
    with pytest.raises(SystemExit, match=r"bare.tgz lacks .actions/assistant.py \(under lightning-x\)"):
        prepare.prepare(bare, prepare.DEFAULT_COMMIT, tmp_path / "out2")


_SHARED_ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "lightning-tests" / "lightning-2.6.5-tests.tar.gz"


@pytest.mark.skipif(not _SHARED_ARCHIVE.is_file(), reason=f"{_SHARED_ARCHIVE} is absent")
def test_prepare_converts_the_archive_ci_reads(tmp_path: Path) -> None:
    import prepare

    tests = prepare.prepare(_SHARED_ARCHIVE, prepare.DEFAULT_COMMIT, tmp_path / "lightning")
    source = (tests / "models" / "test_hooks.py").read_text(encoding="utf-8")
    assert (
        "from pytorch_lightning import Callback, LightningDataModule, LightningModule, Trainer, __version__" in source
    )
    assert "lightning.pytorch" not in source
    # every path the ci subset names is there
    assert all((tests / path).exists() for path in conformance_run.SUBSETS["ci"])
