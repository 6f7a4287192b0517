"""Small read-only helpers over libcst nodes: names, literals, and the module's import aliases."""

from __future__ import annotations

import re

import libcst as cst

from lightning_step_types.migrate.conventions import LOSS_FUNCTIONS

EMPTY_MODULE = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    return EMPTY_MODULE.code_for_node(node)


def short(node: cst.CSTNode, limit: int = 48) -> str:
    """One-line source of a node for messages: "`self.shared_step(batch)`"."""
    text = " ".join(code_of(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dotted_name(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        head = dotted_name(expr.value)
        return None if head is None else f"{head}.{expr.attr.value}"
    return None


def tail_name(expr: cst.BaseExpression) -> str | None:
    """The last name of a callee: ``mse_loss`` for ``F.mse_loss``, ``criterion`` for ``self.criterion``."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _name_words(identifier: str) -> list[str]:
    """``total_loss`` -> [total, loss]; ``lossG`` -> [loss, g]; ``LossFn`` -> [loss, fn]."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", identifier)]


def says_loss(identifier: str) -> bool:
    """Whether a name says it holds one loss (``loss``, ``g_loss``, ``totalLoss``; not ``losses``)."""
    return "loss" in _name_words(identifier)


def says_loss_function(identifier: str) -> bool:
    words = _name_words(identifier)
    return "loss" in words or "criterion" in words or identifier in LOSS_FUNCTIONS


def string_key(expr: cst.BaseExpression) -> str | None:
    """The value of a plain string literal (no f-string, no implicit concatenation, no bytes)."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_none(expr: cst.BaseExpression | None) -> bool:
    return expr is None or (isinstance(expr, cst.Name) and expr.value == "None")


def container_kind(expr: cst.BaseExpression) -> str | None:
    """What a literal is when it cannot be a loss tensor: "a tuple", "a dict", "a Python number"..."""
    kinds: list[tuple[type[cst.BaseExpression], str]] = [
        (cst.Tuple, "a tuple"),
        (cst.List, "a list"),
        (cst.Set, "a set"),
        (cst.Dict, "a dict"),
        (cst.ListComp, "a list comprehension"),
        (cst.SetComp, "a set comprehension"),
        (cst.DictComp, "a dict comprehension"),
        (cst.GeneratorExp, "a generator"),
        (cst.Integer, "a Python number"),
        (cst.Float, "a Python number"),
        (cst.Imaginary, "a Python number"),
        (cst.SimpleString, "a string"),
        (cst.ConcatenatedString, "a string"),
        (cst.FormattedString, "a string"),
        (cst.Lambda, "a lambda"),
    ]
    for node_type, kind in kinds:
        if isinstance(expr, node_type):
            return kind
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return "a bool"
    return None


class ImportTable:
    """Local names bound by the module's imports -> the qualified names they stand for."""

    def __init__(self, module: cst.Module) -> None:
        self.aliases: dict[str, str] = {}
        module.visit(_ImportCollector(self.aliases))

    def qualify(self, expr: cst.BaseExpression) -> str | None:
        """``pl.LightningModule`` -> ``pytorch_lightning.LightningModule`` after ``import pytorch_lightning as pl``."""
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return dotted
        return f"{target}.{rest}" if rest else target


class _ImportCollector(cst.CSTVisitor):
    """Module-level imports (including those under ``if``/``try``), not those inside functions or classes."""

    def __init__(self, aliases: dict[str, str]) -> None:
        super().__init__()
        self.aliases = aliases

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.aliases[head] = head

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        source = (dotted_name(node.module) or "") if node.module is not None else ""
        module = "." * len(node.relative) + source
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{module}.{name}" if module else name


def name_mentions(node: cst.CSTNode, name: str) -> int:
    """How many times ``node`` mentions the plain name ``name`` (reads, writes, nested code)."""

    class _Names(cst.CSTVisitor):
        count = 0

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.count += 1

    counter = _Names()
    node.visit(counter)
    return counter.count
