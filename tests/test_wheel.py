"""The built wheel gives an installed user's mypy and pyright the typed contract, with no configuration.

Builds the wheel, installs it into a fresh virtual environment (no system site-packages: the
only copy of the package there is the wheel's) together with ``torch==2.13.0`` (the CPU build
this machine's pip resolves it to), pytorch-lightning, and the same mypy and pyright versions as
the test environment; then runs both checkers, from a directory holding nothing but user files,
on a selection of the typing cases. Their verdicts must be the ones the markers state, as in
tests/test_static_typing.py (each selected case uses only codes that the checkers' default
settings report: no --strict, no strict mode).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest
from test_static_typing import CASES_DIR, ROOT, expected_diagnostics, parse_mypy, parse_pyright

pytestmark = pytest.mark.slow

STUBS = ROOT / "stubs" / "lightning_step_types"
# Cases whose expected codes hold under the checkers' default settings.
WHEEL_CASES = [
    "pass_typed_module.py",
    "pass_plain_module_annotated.py",
    "pass_typeddict_metadata.py",
    "pass_typed_callback.py",
    "pass_result_hooks_module.py",
    "pass_result_hooks_callback.py",
    "fail_train_returns_dict.py",
    "fail_val_returns_train_result.py",
    "fail_loss_float.py",
    "fail_assign_loss.py",
    "fail_metadata_item_assignment_dict_literal.py",
    "fail_typeddict_key_misspelled_in_hook.py",
    "fail_hook_outputs_wrong_result.py",
    "fail_result_hook_wrong_result.py",
    "pass_step_metrics_module.py",
    "fail_step_metric_train_binding_expects_val_result.py",
]
# Which copy of the package the checkers read: only the stubs declare the typed hook.
PROBE = """\
from lightning_step_types import TypedLightningModule

reveal_type(TypedLightningModule.on_train_batch_end)
"""


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)], ROOT
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = dist.glob("lightning_step_types-*.whl")
    return path


def test_wheel_ships_runtime_and_stubs(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for stub in sorted(STUBS.iterdir()):
            shipped = f"lightning_step_types-stubs/{stub.name}"
            assert shipped in names, f"{shipped} missing from {wheel.name}"
            assert archive.read(shipped) == stub.read_bytes(), f"{shipped} differs from {stub}"
        assert "lightning_step_types/py.typed" in names
    # Every runtime package (the migrate subpackage too) is in the wheel.
    for init in (ROOT / "lightning_step_types").rglob("__init__.py"):
        assert init.relative_to(ROOT).as_posix() in names


@pytest.fixture(scope="module")
def user_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with the wheel installed, and the environment of a shell that activated it."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    created = _run([sys.executable, "-m", "venv", str(venv)], ROOT)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in ("mypy", "pyright")]
    # torch pinned in the same resolve: this machine's pip then takes the local CPU wheel.
    installed = _run([str(python), "-m", "pip", "install", "torch==2.13.0", str(wheel), *pins], ROOT)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    return venv, env


@pytest.fixture(scope="module")
def project(user_env: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: the selected cases and the probe, and no configuration file."""
    directory = tmp_path_factory.mktemp("project")
    for name in WHEEL_CASES:
        shutil.copy(CASES_DIR / name, directory / name)
    (directory / "probe.py").write_text(PROBE)
    return directory


@pytest.fixture(scope="module")
def verdicts(user_env: tuple[Path, dict[str, str]], project: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    venv, env = user_env
    files = [*WHEEL_CASES, "probe.py"]
    return {
        "mypy": _run([str(venv / "bin" / "mypy"), "--output", "json", *files], project, env),
        "pyright": _run([str(venv / "bin" / "pyright"), "--outputjson", *files], project, env),
    }


def test_runtime_comes_from_the_wheel(user_env: tuple[Path, dict[str, str]], project: Path) -> None:
    venv, env = user_env
    where = _run([str(venv / "bin" / "python"), "-c", "import lightning_step_types as p; print(p.__file__)"], project, env)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_checkers_read_the_installed_stubs(verdicts: dict[str, subprocess.CompletedProcess[str]], checker: str) -> None:
    output = verdicts[checker].stdout
    hook_type = {
        "mypy": "outputs: lightning_step_types.results.TrainStepResult[Any] | None",
        "pyright": "outputs: TrainStepResult[Any] | None",
    }[checker]
    assert "probe.py" in output and hook_type in output, output[-3000:]


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
@pytest.mark.parametrize("name", WHEEL_CASES)
def test_installed_verdicts(
    verdicts: dict[str, subprocess.CompletedProcess[str]], project: Path, name: str, checker: str
) -> None:
    run = verdicts[checker]
    diagnostics = parse_mypy(run.stdout, project) if checker == "mypy" else parse_pyright(run.stdout)
    got: dict[int, set[str]] = defaultdict(set)
    for diagnostic in diagnostics:
        if diagnostic.file == (project / name).resolve():
            got[diagnostic.line].add(diagnostic.code)
    want = {line: set(item.codes) for line, item in expected_diagnostics(CASES_DIR / name)[checker].items()}
    assert dict(got) == want, f"{checker} on installed {name}:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
