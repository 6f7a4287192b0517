"""Fills the corpus cache from git clones instead of PyPI, for machines without the package index.

    PYTHONPATH=. python -m tests.migrate_corpus.from_git FOLDER

``FOLDER`` holds one git directory per repository of ``sources.py``, named ``owner+name`` (a bare
clone, or a clone whose git directory is ``owner+name/repo`` or ``owner+name/.git``). For each release
the fixture files are read with ``git show <commit>:<repository path>``, the bytes each wheel file
was checked against, and written into an archive the cache takes for the release's wheel. Nothing
is downloaded.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from .fetching import _wheel_prefix, cache_dir
from .sources import FIXTURES, Release


def git_dir(folder: Path, release: Release) -> Path:
    base = folder / release.repository.replace("/", "+")
    for candidate in (base / "repo", base / ".git", base):
        if (candidate / "HEAD").is_file():
            return candidate
    raise FileNotFoundError(f"no git directory for {release.repository} under {folder}")


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    files: dict[Release, set[str]] = {}
    for fixture in FIXTURES:
        files.setdefault(fixture.release, set()).update(fixture.files)
    for release, names in files.items():
        git = git_dir(folder, release)
        target = cache_dir() / f"{_wheel_prefix(release)}py3-none-any.whl"
        with zipfile.ZipFile(target, "w") as archive:
            for name in sorted(names):
                shown = subprocess.run(
                    ["git", "--git-dir", str(git), "show", f"{release.commit}:{release.repository_prefix}{name}"],
                    capture_output=True, check=True,
                )  # fmt: skip
                archive.writestr(name, shown.stdout)
        print(f"{target}: {len(names)} files of {release.repository} at {release.commit[:10]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
