"""Every install gives a user's mypy and pyright the typed contract, with no configuration.

Two installs, each into a fresh virtual environment that sees this interpreter's packages
(``tests/environments.py``: torch, Lightning, mypy and pyright are not reinstalled, and the
environment's own copy of ``lightning_step_types`` comes first on its path):

- the built wheel (``pip install <wheel>``);
- the README's editable install (``pip install -e .``, strict by the project's build backend) of a
  copy of the checkout, so that its link tree is the copy's and not this checkout's ``build/``.

Then both checkers run from a directory holding nothing but user files, on a selection of the
typing cases. Their verdicts must be the ones the markers state, as in tests/test_static_typing.py
(each selected case uses only codes that the checkers' default settings report: no --strict, no
strict mode). Both read the stubs from the installed package (they ship inline, next to their
modules), and ``pyright --verifytypes`` scores that package at 100%.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import pytest
from environments import make_venv
from limits import hang_limit
from test_readme import readme_commands
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
INSTALLS = ["wheel", "editable"]


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=hang_limit(idle_s=190))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)], ROOT
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = dist.glob("lightning_step_types-*.whl")
    return path


def test_wheel_ships_runtime_with_inline_stubs(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for stub in sorted(p for p in STUBS.rglob("*") if p.is_file()):
            shipped = f"lightning_step_types/{stub.relative_to(STUBS).as_posix()}"
            assert shipped in names, f"{shipped} missing from {wheel.name}"
            assert archive.read(shipped) == stub.read_bytes(), f"{shipped} differs from {stub}"
        # One package: a `-stubs` package beside it would hide the inline types from --verifytypes.
        assert sorted({name.split("/")[0] for name in names if not name.startswith("lightning_step_types-0")}) == [
            "lightning_step_types"
        ]
    # The license pyproject.toml declares travels with the package.
    assert any(name.endswith((".dist-info/LICENSE", ".dist-info/licenses/LICENSE")) for name in names), sorted(names)
    # Every runtime module (the migrate subpackage too) is in the wheel.
    for module in (ROOT / "lightning_step_types").rglob("*.py"):
        assert module.relative_to(ROOT).as_posix() in names


def test_source_package_has_no_stubs() -> None:
    """mypy.ini checks the runtime .py files: a .pyi beside one would be checked in its place."""
    assert sorted(p.name for p in (ROOT / "lightning_step_types").rglob("*.pyi")) == []


class Install(NamedTuple):
    venv: Path
    env: dict[str, str]
    package_dir: Path  # the installed lightning_step_types directory the checkers must read


def _checkout_copy(destination: Path) -> Path:
    """The files of a fresh checkout (no build/, caches or installs of this one)."""
    ignored = shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", ".*", "site", "lightning_logs", "demo_outputs"
    )
    shutil.copytree(ROOT, destination, ignore=ignored)
    return destination


def _editable_install_args() -> list[str]:
    """The README's install command for the checkout, as pip arguments after `pip install`."""
    command = readme_commands()[0]
    (install,) = [part.strip() for part in command.split("&&") if part.strip().startswith("pip install -e")]
    args = install.split()[2:]
    assert args[:2] == ["-e", "."], install
    return args[2:]


@pytest.fixture(scope="module", params=INSTALLS)
def install(request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Install:
    """A fresh venv with the package installed one way, and the environment of a shell that activated it."""
    kind: str = request.param
    base = tmp_path_factory.mktemp(kind)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(base / "venv" / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(base / "venv")
    venv = base / "venv"
    # No pip of its own: this interpreter's pip and setuptools, which it sees, install into it.
    python = str(make_venv(venv))
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], base, env)
    site_packages = Path(purelib.stdout.strip())
    pip = [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    if kind == "wheel":
        installed = _run([*pip, str(wheel)], base, env)
        package_dir = site_packages / "lightning_step_types"
    else:
        checkout = _checkout_copy(base / "checkout")
        installed = _run([*pip, "-e", ".", *_editable_install_args()], checkout, env)
        (package_dir,) = (checkout / "build").glob("__editable__.*/lightning_step_types")
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return Install(venv, env, package_dir)


@pytest.fixture(scope="module")
def project(install: Install, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: the selected cases and the probe, and no configuration file."""
    directory = tmp_path_factory.mktemp("project")
    for name in WHEEL_CASES:
        shutil.copy(CASES_DIR / name, directory / name)
    (directory / "probe.py").write_text(PROBE)
    return directory


@pytest.fixture(scope="module")
def verdicts(install: Install, project: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    python = str(install.venv / "bin" / "python")
    files = [*WHEEL_CASES, "probe.py"]
    return {
        # -v logs the file each module is parsed from; --no-incremental so that it parses them all.
        "mypy": _run(
            [python, "-m", "mypy", "-v", "--no-incremental", "--output", "json", *files], project, install.env
        ),
        "pyright": _run([python, "-m", "pyright", "--outputjson", *files], project, install.env),
    }


def test_runtime_comes_from_the_install(install: Install, project: Path) -> None:
    where = _run(
        [str(install.venv / "bin" / "python"), "-c", "import lightning_step_types as p; print(p.__file__)"],
        project,
        install.env,
    )
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()) == install.package_dir / "__init__.py", where.stdout


def test_installed_package_holds_the_stubs(install: Install) -> None:
    stubs = sorted(STUBS.rglob("*.pyi"))
    assert STUBS / "metrics" / "__init__.pyi" in stubs  # a package's stub, in its folder
    for stub in stubs:
        assert (install.package_dir / stub.relative_to(STUBS)).read_bytes() == stub.read_bytes()


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
def test_checkers_read_the_installed_stubs(
    verdicts: dict[str, subprocess.CompletedProcess[str]], install: Install, checker: str
) -> None:
    output = verdicts[checker].stdout
    hook_type = {
        "mypy": "outputs: lightning_step_types.results.TrainStepResult[Any] | None",
        "pyright": "outputs: TrainStepResult[Any] | None",
    }[checker]
    assert "probe.py" in output and hook_type in output, output[-3000:]
    if checker == "mypy":
        parsed = re.findall(r"Parsing (\S+) \(lightning_step_types\)", verdicts["mypy"].stderr)
        assert parsed == [str(install.package_dir / "__init__.pyi")], verdicts["mypy"].stderr[-3000:]


@pytest.mark.parametrize("checker", ["mypy", "pyright"])
@pytest.mark.parametrize("name", WHEEL_CASES)
def test_installed_verdicts(
    verdicts: dict[str, subprocess.CompletedProcess[str]], project: Path, name: str, checker: str
) -> None:
    run = verdicts[checker]
    output = run.stdout
    diagnostics = parse_mypy(output, project) if checker == "mypy" else parse_pyright(output)
    got: dict[int, set[str]] = defaultdict(set)
    for diagnostic in diagnostics:
        if diagnostic.file == (project / name).resolve():
            got[diagnostic.line].add(diagnostic.code)
    want = {line: set(item.codes) for line, item in expected_diagnostics(CASES_DIR / name)[checker].items()}
    assert dict(got) == want, f"{checker} on installed {name}:\n{output[-4000:]}\n{run.stderr[-2000:]}"


def test_verifytypes_scores_the_installed_package(install: Install, project: Path) -> None:
    python = str(install.venv / "bin" / "python")
    command = [python, "-m", "pyright", "--outputjson", "--verifytypes", "lightning_step_types", "--ignoreexternal"]
    run = _run(command, project, install.env)
    report = json.loads(run.stdout)["typeCompleteness"]
    assert Path(report["packageRootDirectory"]) == install.package_dir, report["packageRootDirectory"]
    problems = [symbol["name"] for symbol in report["symbols"] if not symbol["isTypeKnown"]]
    assert (report["completenessScore"], problems) == (1.0, []), run.stdout[-4000:]
    assert report["exportedSymbolCounts"]["withKnownType"] > 400


BUILD_EDITABLE = """
import sys, zipfile
import build_backend
out, settings = sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])  # setuptools rewrites sys.argv
wheel = build_backend.build_editable(out, settings or None)
with zipfile.ZipFile(f"{out}/{wheel}") as archive:
    print(sorted(name for name in archive.namelist() if "dist-info" not in name))
"""


@pytest.mark.parametrize(
    ("settings", "shipped"),
    [
        # The default: a .pth naming the link tree, which both checkers read as a plain path entry.
        ([], ["__editable__.lightning_step_types-0.1.0.pth"]),
        # A mode asked for explicitly is setuptools' own: here, its import hook (a finder module).
        (
            ["editable_mode=lenient"],
            [
                "__editable__.lightning_step_types-0.1.0.pth",
                "__editable___lightning_step_types_0_1_0_finder.py",
            ],
        ),
    ],
)
def test_build_backend_makes_editable_installs_strict_unless_told_otherwise(
    tmp_path: Path, settings: list[str], shipped: list[str]
) -> None:
    checkout = _checkout_copy(tmp_path / "checkout")
    (tmp_path / "out").mkdir()
    built = _run([sys.executable, "-c", BUILD_EDITABLE, str(tmp_path / "out"), *settings], checkout)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert built.stdout.strip().splitlines()[-1] == repr(shipped)
    assert (checkout / "build").exists() == (not settings)
