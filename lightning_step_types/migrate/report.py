"""What the codemod reports: one ``Finding`` per step or class, and the ``Migration`` of one source."""

from __future__ import annotations

import dataclasses
from typing import Literal

import libcst as cst


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the report: a step rewritten or skipped, a class whose base was switched or kept,
    an import removed or kept, or a note."""

    kind: Literal[
        "rewritten", "typed", "nothing", "ignored", "skipped", "switched-base", "kept-base",
        "import-removed", "import-kept", "note", "leftover",
    ]  # fmt: skip
    where: str  # "MyModel.training_step", "MyModel" for a base-class decision, "" for an import
    line: int
    message: str = ""

    def describe(self) -> str:
        """``MyModel.training_step line 42: returns a tuple``."""
        if self.kind == "rewritten":
            return f"{self.where} line {self.line}: rewritten"
        if self.kind == "typed":
            return f"{self.where} line {self.line}: already typed"
        if self.kind == "ignored":
            return f"{self.where} line {self.line}: not in a LightningModule, left as it is"
        if self.kind == "nothing":
            return f"{self.where} line {self.line}: returns nothing to convert"
        if self.kind == "leftover":
            return f"{self.where} line {self.line}: Lightning 1.x: {self.message}"
        if self.kind == "switched-base":
            return f"{self.where} line {self.line}: base class switched: {self.message}"
        if self.kind == "kept-base":
            return f"{self.where} line {self.line}: base class kept: {self.message}"
        if self.kind in ("import-removed", "import-kept"):
            return f"line {self.line}: {self.message}"
        if self.kind == "note":
            return f"{self.where} line {self.line}: note: {self.message}"
        return f"{self.where} line {self.line}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Migration:
    """The outcome for one source: the rewritten module and what the codemod did or left alone."""

    original: cst.Module
    module: cst.Module
    findings: tuple[Finding, ...]
    path: str = "<string>"

    @property
    def changed(self) -> bool:
        return self.module.code != self.original.code

    @property
    def rewritten(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "rewritten"]

    @property
    def skipped(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "skipped"]

    def count(self, kind: str) -> int:
        return sum(1 for f in self.findings if f.kind == kind)
