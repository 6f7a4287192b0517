"""Shared pytest setup for the test suite.

``tests/models.py`` holds the tiny models and helpers every runtime test uses; test modules import
it as ``models``. Putting this directory on ``sys.path`` here keeps that import working whatever
pytest's import mode, and in the processes that ``ddp_spawn`` starts (they inherit ``sys.path``
and unpickle the test models by module name).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

# Lightning's advice for real workloads, which says nothing about these 4-batch CPU runs.
_LIGHTNING_NOISE = (
    "ignore:.*does not have many workers.*",
    "ignore:.*number of training batches.*is smaller than the logging interval.*",
    "ignore:.*GPU available but not used.*",
    "ignore:You defined a `validation_step` but have no `val_dataloader`.*",
    "ignore:.*`isinstance\\(treespec, LeafSpec\\)` is deprecated.*",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in _LIGHTNING_NOISE:
        config.addinivalue_line("filterwarnings", line)
