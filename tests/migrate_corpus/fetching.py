"""Obtains the released text of a fixture's files: the pinned wheel from PyPI, downloaded once into a
cache folder with ``pip download --no-deps`` (nothing is installed, so no dependency and never torch
changes), then read out of the archive.

The cache is ``$LST_CORPUS_CACHE``, or ``~/.cache/lightning-step-types/migrate-corpus``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from .sources import Fixture, Release

try:
    from limits import hang_limit
except ImportError:  # run as tests.migrate_corpus.record, from the repository's root
    from tests.limits import hang_limit


class RegistryUnreachable(RuntimeError):
    """pip could not reach the package index (no network): the corpus tests skip with this reason."""


_NETWORK_SIGNS = (
    "Could not fetch URL",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
    "ConnectionError",
    "ReadTimeoutError",
)


def cache_dir() -> Path:
    configured = os.environ.get("LST_CORPUS_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "lightning-step-types" / "migrate-corpus"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _wheel_prefix(release: Release) -> str:
    # wheel file names normalise the project name: "pytorch-lightning" -> "pytorch_lightning-0.9.0-..."
    return f"{release.name.replace('-', '_')}-{release.version}-"


def wheel(release: Release) -> Path:
    """The release's wheel in the cache, downloaded first if it is not there."""
    folder = cache_dir()
    found = sorted(folder.glob(_wheel_prefix(release) + "*.whl"))
    if found:
        return found[0]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--no-input",
        "--timeout",
        "30",
        "--dest",
        str(folder),
        release.requirement,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=hang_limit(idle_s=75))
    found = sorted(folder.glob(_wheel_prefix(release) + "*.whl"))
    if done.returncode == 0 and found:
        return found[0]
    output = done.stdout + done.stderr
    if any(sign in output for sign in _NETWORK_SIGNS):
        raise RegistryUnreachable(
            f"cannot download {release.requirement} from the package index: {output.strip()[-300:]}"
        )
    raise RuntimeError(f"`{' '.join(command)}` failed ({done.returncode}):\n{output}")


def released_files(fixture: Fixture) -> dict[str, bytes]:
    """The fixture's files as released: path inside the wheel -> bytes."""
    with zipfile.ZipFile(wheel(fixture.release)) as archive:
        return {file: archive.read(file) for file in fixture.files}


def write_tree(files: dict[str, bytes], root: Path) -> None:
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
