"""The files of a maintained package: the license pyproject.toml declares, a changelog for users,
and ruff's lint and format settings, which CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert text.rstrip().endswith("limitations under the License.")
    assert len(text.split()) > 1500  # the full text, appendix included


def test_the_source_distribution_carries_the_license_and_the_changelog() -> None:
    assert "include LICENSE CHANGELOG.md" in (REPO / "MANIFEST.in").read_text().splitlines()


def test_the_changelog_lists_the_current_release_for_users() -> None:
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "[Keep a Changelog](https://keepachangelog.com/en/1.1.0/)" in changelog
    releases = re.findall(r"^## (\S+)", changelog, re.M)
    assert releases[0] == "Unreleased" and PYPROJECT["project"]["version"] in releases
    sections = set(re.findall(r"^### (\w+)$", changelog, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections
    assert not re.search(r"\b(issue \d+|WIP|TODO)\b", changelog)  # written for users, not a work log


def test_ruff_lints_and_formats_and_ci_runs_it_pinned_as_the_test_extra() -> None:
    ruff = PYPROJECT["tool"]["ruff"]
    assert ruff["line-length"] == 120 and ruff["target-version"] == "py310"
    assert {"E", "F", "W", "I", "UP", "B"} <= set(ruff["lint"]["select"])
    (pin,) = [r for r in PYPROJECT["project"]["optional-dependencies"]["test"] if r.startswith("ruff")]
    script = (REPO / ".ci" / "run").read_text()
    assert f"lint_command='pip install {pin} && ruff check . && ruff format --check .'" in script
    assert 'in_fresh_venv lint "$lint_command"' in script
