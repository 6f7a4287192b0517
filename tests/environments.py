"""Fresh virtual environments, made by tests, that see the packages of the interpreter running them.

``python -m venv --system-site-packages`` is not that: run from inside a venv, it exposes the *base*
interpreter's packages, not the venv's, so the new environment lacks torch, Lightning, mypy and
pyright whenever the suite itself runs in a venv (the way users run it). Instead the new
environment gets no pip and no system packages of its own, and a ``.pth`` file naming this
interpreter's site directories: a venv's, a virtualenv's, a conda env's, the system's, the user
site, and a base interpreter's that a ``--system-site-packages`` venv sees.

Its own ``site-packages`` comes first on its path, so what is installed into it (with this
interpreter's pip, ``python -m pip``) shadows what it sees through the ``.pth`` file. The listed
directories are plain path entries: the ``.pth`` files inside them (an editable install of this
checkout among them) are not run, so the new environment never sees this checkout's package.
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path

# Processed after the environment's own .pth files (sorted by name), so its own installs come first.
PTH_NAME = "zz_running_interpreter_site.pth"


def running_site_dirs() -> list[str]:
    """This interpreter's site directories, in the order its ``sys.path`` holds them."""
    candidates = {*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    if site.ENABLE_USER_SITE:
        candidates.add(site.getusersitepackages())
    # A --system-site-packages venv, or a distribution's dist-packages: on sys.path, named so.
    candidates.update(entry for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages"))
    resolved = {str(Path(entry).resolve()) for entry in candidates if Path(entry).is_dir()}
    ordered = [str(Path(entry).resolve()) for entry in sys.path if entry]
    return [entry for entry in dict.fromkeys(ordered) if entry in resolved]


def make_venv(path: Path) -> Path:
    """A new venv at ``path`` that sees this interpreter's packages; returns its ``python``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / PTH_NAME).write_text("".join(f"{entry}\n" for entry in running_site_dirs()))
    return python
