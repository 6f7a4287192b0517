"""The resume tests again, under the oldest Lightning that pyproject.toml allows.

The suite itself runs on the installed (newest) Lightning. Here a second virtual env sees the
running interpreter's packages (``tests/environments.py``, so torch is not installed again) with
pytorch-lightning 2.1.4 installed into it, first on its path, and ``tests/test_resume.py`` runs in it as a subprocess. There the
exact-resume tests skip (Lightning before 2.5 trains the checkpoint's batch again on resume) and
the test of the one-time "exact resume unavailable" warning runs instead.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from environments import make_venv
from limits import hang_limit

ROOT = Path(__file__).resolve().parents[1]
OLDEST = "2.1.4"  # the last release of the 2.1 series: pyproject allows pytorch-lightning>=2.1


def test_pyproject_still_allows_the_oldest_lightning_tested_here() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"pytorch-lightning>=2\.1,<2\.7"', pyproject)


@pytest.mark.slow
def test_resume_tests_pass_on_the_oldest_lightning(tmp_path: Path) -> None:
    python = str(make_venv(tmp_path / "oldest-lightning"))
    # --no-deps: 2.1.4's requirements are met by this machine's packages, and a resolver run would
    # replace torch (torch 2.13 needs setuptools>=77, while 2.1.4 imports pkg_resources, gone in
    # setuptools 70).
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", f"pytorch-lightning=={OLDEST}", "setuptools<70"],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    versions = subprocess.run(
        [python, "-c", "import torch, pytorch_lightning as pl; print(torch.__version__, pl.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert versions == [torch.__version__, OLDEST]
    run = subprocess.run(
        [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_resume.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=hang_limit(idle_s=75),
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "test_before_lightning_2_5_exact_resume_warns_once_and_restores_nothing PASSED" in run.stdout
