"""Extract Lightning's ``tests/tests_pytorch`` at a commit, with imports converted for ``pytorch_lightning``.

    python conformance/prepare.py --lightning PATH [--commit REV] --out DIR

``PATH`` is a clone of https://github.com/Lightning-AI/pytorch-lightning (a bare git directory or a
checkout), or an archive of one made with ``git archive`` (``.tar``, ``.tar.gz``, ``.tgz``; one
top-level folder or none) that holds at least ``tests/tests_pytorch``, ``pyproject.toml`` and
``.actions/assistant.py``, as ``../shared/lightning-tests/lightning-2.6.5-tests.tar.gz`` does. An
archive's commit is the one ``git archive`` records in its header; it must be ``--commit``.
``DIR`` receives ``pyproject.toml`` (Lightning's pytest settings) and ``tests/``, with the
imports rewritten by Lightning's own ``.actions/assistant.py`` from the same commit, called as
Lightning's CI calls it for the ``pytorch_lightning`` package (``.github/workflows/ci-tests-pytorch.yml``,
step "Adjust tests / env. -> PL"):

    python .actions/assistant.py copy_replace_imports --source_dir="./tests" \\
        --source_import="lightning.fabric,lightning.pytorch" --target_import="lightning_fabric,pytorch_lightning"

Nothing here copies Lightning's code into this repository; ``DIR`` should lie outside it.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# Lightning 2.6.5, the head of `release/stable` when this check was set up; pytorch-lightning 2.6.6
# on PyPI is built from it plus packaging changes only.
DEFAULT_COMMIT = "be98784a1a03581b7051a355ae1084fd352d7cea"
_SOURCE_IMPORTS = ["lightning.fabric", "lightning.pytorch"]
_TARGET_IMPORTS = ["lightning_fabric", "pytorch_lightning"]
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# what a run needs from Lightning's tree: the tests, their pytest settings, the converter
_TESTS = ["tests/tests_pytorch", "pyproject.toml"]
_CONVERTER = ".actions/assistant.py"


def is_archive(path: Path) -> bool:
    return path.is_file() and path.name.endswith(_ARCHIVE_SUFFIXES)


def _archive(lightning: Path, commit: str, paths: list[str], into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(lightning), "archive", "--format=tar", commit, *paths],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def _from_archive(archive: Path, commit: str, into: Path) -> Path:
    """Extract ``archive`` into ``into``; returns the folder that holds Lightning's tree."""
    with tarfile.open(archive) as tar:
        recorded = tar.pax_headers.get("comment")  # git archive of a commit records it here
        if recorded is not None and not commit.startswith(recorded) and not recorded.startswith(commit):
            raise SystemExit(f"{archive} is git archive of commit {recorded}, not of --commit {commit}")
        tar.extractall(into, filter="data")
    tops = list(into.iterdir())
    root = tops[0] if len(tops) == 1 and tops[0].is_dir() and not (into / "tests").exists() else into
    missing = [path for path in [*_TESTS, _CONVERTER] if not (root / path).exists()]
    if missing:
        raise SystemExit(f"{archive} lacks {', '.join(missing)} (under {root.name if root != into else 'its top'})")
    return root


def _convert(tests: Path, converter: Path) -> None:
    spec = importlib.util.spec_from_file_location("lightning_assistant", converter)
    assert spec is not None and spec.loader is not None
    assistant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(assistant)
    # CI runs it from the repository root with --source_dir="./tests"
    assistant.copy_replace_imports(str(tests), _SOURCE_IMPORTS, _TARGET_IMPORTS)


def prepare(lightning: Path, commit: str, out: Path) -> Path:
    """Write the converted tests under ``out``; returns ``out / "tests" / "tests_pytorch"``.

    ``lightning`` is a clone of Lightning or an archive of one (``is_archive``).
    """
    if not lightning.exists():
        raise SystemExit(f"{lightning} does not exist: give a clone of Lightning or an archive of one")
    if (out / "tests").exists():
        raise SystemExit(f"{out}/tests exists already: give an empty or new --out")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        if is_archive(lightning):
            root = _from_archive(lightning, commit, Path(scratch))
            (out / "tests").mkdir()
            shutil.copytree(root / _TESTS[0], out / _TESTS[0])
            shutil.copy2(root / _TESTS[1], out / _TESTS[1])
        else:
            _archive(lightning, commit, _TESTS, out)
            _archive(lightning, commit, [_CONVERTER], Path(scratch))
            root = Path(scratch)
        _convert(out / "tests", root / _CONVERTER)
    (out / "LIGHTNING_COMMIT").write_text(commit + "\n", encoding="utf-8")
    return out / "tests" / "tests_pytorch"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lightning",
        type=Path,
        required=True,
        help="a clone of Lightning-AI/pytorch-lightning, or a git archive of one (.tar.gz)",
    )
    parser.add_argument("--commit", default=DEFAULT_COMMIT, help=f"commit or tag (default {DEFAULT_COMMIT}, 2.6.5)")
    parser.add_argument("--out", type=Path, required=True, help="a new folder, outside this repository")
    args = parser.parse_args(argv)
    tests = prepare(args.lightning, args.commit, args.out)
    print(f"Lightning's tests at {args.commit}, imports converted for pytorch_lightning: {tests}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
