"""The build backend: setuptools' own, with editable installs in strict mode unless asked otherwise.

setuptools' default editable mode serves this flat layout through an import hook, which mypy and
pyright cannot follow, so a plain ``pip install -e .`` would hide the typed contract from them.
Strict mode lays the package out as a tree of links, stubs included (``build_stubs.py``), that both
checkers read like an installed package. A mode given explicitly
(``--config-settings editable_mode=lenient``) is kept.

Strict mode links the files that exist at install time: after adding a module, install again.
"""

from __future__ import annotations

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook exactly as setuptools defines it

_MODE_KEYS = ("editable_mode", "editable-mode")


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    settings = dict(config_settings or {})
    if not any(key in settings for key in _MODE_KEYS):
        settings["editable_mode"] = "strict"
    return _setuptools.build_editable(wheel_directory, settings, metadata_directory)
