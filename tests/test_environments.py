"""The environments that tests make (tests/environments.py) see the running interpreter's packages.

The suite runs wherever a user runs it: an activated venv, a virtualenv, a conda env or the system
Python. The wheel, editable-install and oldest-Lightning tests build environments of their own;
each must import the same torch, Lightning, mypy and pyright as the interpreter running the suite,
and what is installed into it must come first.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from environments import PTH_NAME, make_venv, running_site_dirs

SEEN = ["torch", "pytorch_lightning", "torchmetrics", "mypy", "pyright", "pip", "setuptools"]
PROBE = """
import importlib.util, json, sys, sysconfig
print(json.dumps({
    "origins": {name: importlib.util.find_spec(name).origin for name in %r},
    "prefix": sys.prefix,
    "purelib": sysconfig.get_path("purelib"),
    "path": sys.path,
}))
""" % (SEEN,)


def _origin(name: str) -> str:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return spec.origin


def test_site_dirs_hold_every_package_the_nested_environments_need() -> None:
    dirs = running_site_dirs()
    assert dirs, sys.path
    for name in SEEN:
        assert any(Path(_origin(name)).resolve().is_relative_to(entry) for entry in dirs), (name, dirs)


def test_a_made_venv_imports_the_running_interpreters_packages_after_its_own(tmp_path: Path) -> None:
    python = make_venv(tmp_path / "venv")
    run = subprocess.run([str(python), "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, check=True)
    seen = json.loads(run.stdout)
    assert Path(seen["prefix"]) == tmp_path / "venv"
    assert seen["origins"] == {name: str(Path(_origin(name)).resolve()) for name in SEEN}
    own = seen["purelib"]
    assert (Path(own) / PTH_NAME).read_text().splitlines() == running_site_dirs()
    # Its own site-packages precedes every directory it sees through the .pth file.
    assert seen["path"].index(own) < min(seen["path"].index(entry) for entry in running_site_dirs())
    # This checkout's editable install (a .pth inside the running site-packages) is not seen.
    assert not [entry for entry in seen["path"] if "__editable__" in entry]
