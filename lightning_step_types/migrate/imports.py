"""The imports a rewrite changes: ``from lightning_step_types import ...`` added (merged into an existing
import from the same module, or as a new line where isort would put it), and the imports
it made unused removed (an old annotation's names, the Lightning import of a switched base class).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Sequence

import libcst as cst

from lightning_step_types.migrate.conventions import sources_of
from lightning_step_types.migrate.syntax import dotted_name

# Why an import goes or stays, as the report says it.
ONLY_THE_ANNOTATIONS = "only the replaced return annotations used it"
ONLY_THE_BASES = "its only use was a switched base class"


@dataclasses.dataclass(frozen=True)
class ImportChange:
    """An import line the rewrite removed names from, or kept although a switched base class was read from it."""

    statement: cst.SimpleStatementLine  # the line as it stood in the module given
    names: tuple[str, ...]  # the names it bound that went (removed) or stay (kept)
    removed: bool
    whole: bool  # the whole line went
    reason: str

    def describe(self) -> str:
        """``import removed: `import pytorch_lightning as pl` (its only use was a switched base class)``."""
        line = statement_text(self.statement)
        shown = f"`{line}`" if self.whole or not self.removed else f"{_listed(self.names)} of `{line}`"
        return f"import {'removed' if self.removed else 'kept'}: {shown} ({self.reason})"


def statement_text(statement: cst.SimpleStatementLine) -> str:
    """An import line on one line: ``from lightning.pytorch import (A, B)`` for a parenthesized one."""
    text = " ".join(cst.Module([]).code_for_node(statement.with_changes(leading_lines=[])).split())
    return text.replace("( ", "(").replace(", )", ")").replace(" )", ")")


def _listed(names: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def bound_at_module_level(module: cst.Module) -> dict[str, str]:
    """Module-level names -> the module they are imported from by ``from M import name``, or "" for
    any other binding (a class, a function, an assignment, an aliased import)."""
    bound: dict[str, str] = {}
    for statement in module.body:
        if isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
            bound[statement.name.value] = ""
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                source = dotted_name(small.module) if small.module is not None and not small.relative else None
                for alias in small.names:
                    local = alias.evaluated_alias or alias.evaluated_name
                    bound[local] = source or "" if alias.evaluated_name == local else ""
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    bound[(alias.evaluated_alias or alias.evaluated_name).split(".")[0]] = ""
            elif isinstance(small, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                for target in targets:
                    if isinstance(target, cst.Name):
                        bound[target.value] = ""
    return bound


def name_is_free(bound: dict[str, str], name: str, module: str) -> bool:
    """Whether ``from module import name`` may be added (or is there already) without shadowing anything."""
    return name not in bound or bound[name] in sources_of(name, module)


def add_imports(module: cst.Module, wanted: dict[str, set[str]]) -> cst.Module:
    """``from M import names`` for each module M: merged into an existing top-level import of M, else a new
    line where isort would put it. Names already imported from an equivalent module are skipped."""
    for source in sorted(wanted):
        bound = bound_at_module_level(module)
        missing = sorted(n for n in wanted[source] if bound.get(n) not in sources_of(n, source))
        if missing:
            module = _add_import(module, source, missing)
    return module


def _add_import(module: cst.Module, source: str, missing: list[str]) -> cst.Module:
    body = list(module.body)
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small_index, small in enumerate(statement.body):
            if (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and small.module is not None
                and dotted_name(small.module) == source
                and not isinstance(small.names, cst.ImportStar)
            ):
                new_small = list(statement.body)
                new_small[small_index] = _merge_import(small, missing)
                body[index] = statement.with_changes(body=new_small)
                return module.with_changes(body=body)
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    names = [cst.ImportAlias(cst.Name(n), comma=space) for n in missing]
    names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    line = cst.SimpleStatementLine([cst.ImportFrom(module=_dotted(source), names=names)])
    return module.with_changes(body=_with_import_line(body, line, source))


def _dotted(source: str) -> cst.Attribute | cst.Name:
    head, *rest = source.split(".")
    node: cst.Attribute | cst.Name = cst.Name(head)
    for part in rest:
        node = cst.Attribute(node, cst.Name(part))
    return node


def _merge_import(node: cst.ImportFrom, missing: list[str]) -> cst.ImportFrom:
    assert not isinstance(node.names, cst.ImportStar)
    aliases = list(node.names)
    names = [a.evaluated_name for a in aliases]
    keep_sorted = names == sorted(names)
    default = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    separator: cst.Comma = next((a.comma for a in aliases[:-1] if isinstance(a.comma, cst.Comma)), default)
    for name in missing:
        position = len(aliases)
        if keep_sorted:
            position = next((i for i, a in enumerate(aliases) if a.evaluated_name > name), len(aliases))
        if position < len(aliases):
            aliases.insert(position, cst.ImportAlias(cst.Name(name), comma=separator))
        else:
            last = aliases[-1]
            aliases[-1] = last.with_changes(comma=separator)
            aliases.append(cst.ImportAlias(cst.Name(name), comma=last.comma))
    if not node.lpar and isinstance(aliases[-1].comma, cst.Comma):  # a trailing comma needs parentheses
        aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(names=aliases)


def _is_import_line(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
    )


# Imported by the module a rewrite reads (a LightningModule): the section isort would put the library in.
_THIRD_PARTY_NEIGHBOURS = frozenset({"lightning", "lightning_fabric", "pytorch_lightning", "torch", "torchmetrics"})


def _with_import_line(
    body: Sequence[cst.BaseStatement], line: cst.SimpleStatementLine, source: str
) -> list[cst.BaseStatement]:
    """``body`` with ``line`` (``from <source> import ...``) where isort would put it: in the section of
    the third-party imports (the one that imports Lightning or torch), after its plain ``import`` lines,
    among its ``from`` lines by module name; a section of its own (a blank line on each side) before
    the relative imports, or after the standard library's, where there is no such section."""
    leading = _leading_imports(body)
    if not leading:
        position = 1 if body and _is_docstring(body[0]) else 0
        return [*body[:position], line, *body[position:]]
    sections = _sections(body, leading)
    third_party = next(
        (section for section in sections if any(_top_module(body[i]) in _THIRD_PARTY_NEIGHBOURS for i in section)),
        None,
    )
    if third_party is None:
        # no such section: a new one, after the standard library's and before the package's own imports
        later = next((section for section in sections if any(_is_relative(body[i]) for i in section)), None)
        blank = [cst.EmptyLine()]
        if later is not None:
            start = later[0]
            return [*body[:start], line.with_changes(leading_lines=blank), *body[start:]]
        position = leading[-1] + 1
        return [*body[:position], line.with_changes(leading_lines=blank), *body[position:]]
    position = third_party[-1] + 1
    for index in third_party:
        module = _from_module(body[index])
        if module is not None and module.lower() > source.lower():
            position = index
            break
    if position == third_party[0]:  # first in its section: it takes the blank lines above the section
        first = body[position]
        assert isinstance(first, cst.SimpleStatementLine)
        moved = [line.with_changes(leading_lines=first.leading_lines), first.with_changes(leading_lines=[])]
        return [*body[:position], *moved, *body[position + 1 :]]
    return [*body[:position], line, *body[position:]]


def _leading_imports(body: Sequence[cst.BaseStatement]) -> list[int]:
    """The indices of the import lines before the module's first class or function."""
    found: list[int] = []
    for index, statement in enumerate(body):
        if isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
            break
        if _is_import_line(statement):
            found.append(index)
    return found


def _sections(body: Sequence[cst.BaseStatement], leading: list[int]) -> list[list[int]]:
    """The import lines in sections, as isort separates them: by a blank line or other code."""
    sections: list[list[int]] = []
    for index in leading:
        statement = body[index]
        assert isinstance(statement, cst.SimpleStatementLine)
        blank_above = any(empty.comment is None for empty in statement.leading_lines)
        if sections and sections[-1][-1] == index - 1 and not blank_above:
            sections[-1].append(index)
        else:
            sections.append([index])
    return sections


def _top_module(statement: cst.BaseStatement) -> str | None:
    """The top-level package the line's first import reads (None for a relative import)."""
    assert isinstance(statement, cst.SimpleStatementLine)
    first = statement.body[0]
    if isinstance(first, cst.Import):
        module = dotted_name(first.names[0].name)
    else:
        assert isinstance(first, cst.ImportFrom)
        module = None if first.relative or first.module is None else dotted_name(first.module)
    return None if module is None else module.split(".")[0]


def _from_module(statement: cst.BaseStatement) -> str | None:
    """``M`` of a line ``from M import ...`` (absolute); None for any other import line."""
    assert isinstance(statement, cst.SimpleStatementLine)
    first = statement.body[0]
    if isinstance(first, cst.ImportFrom) and not first.relative and first.module is not None:
        return dotted_name(first.module)
    return None


def _is_relative(statement: cst.BaseStatement) -> bool:
    assert isinstance(statement, cst.SimpleStatementLine)
    return any(isinstance(small, cst.ImportFrom) and bool(small.relative) for small in statement.body)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(statement.body[0], cst.Expr):
        return False
    return isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def names_in(expr: cst.CSTNode) -> set[str]:
    """The names an expression mentions (``Optional``, ``STEP_OUTPUT`` in ``Optional[STEP_OUTPUT]``)."""

    class _Names(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.found: set[str] = set()

        def visit_Name(self, node: cst.Name) -> None:
            self.found.add(node.value)

    collector = _Names()
    expr.visit(collector)
    return collector.found


def remove_unused_imports(module: cst.Module, candidates: Iterable[str]) -> tuple[cst.Module, list[ImportChange]]:
    """Drop ``from M import name`` for each candidate (a name the rewrite removed from an annotation)
    that the module's text no longer mentions anywhere else; an import left empty goes too."""
    code = module.code
    unused = {n for n in candidates if len(re.findall(rf"(?<![\w.]){re.escape(n)}\b", code)) == 1}
    if not unused:
        return module, []
    body: list[cst.BaseStatement] = []
    changes: list[ImportChange] = []
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                kept = [a for a in small.names if a.asname is not None or a.evaluated_name not in unused]
                if len(kept) != len(small.names):
                    gone = tuple(a.evaluated_name for a in small.names if a not in kept)
                    if not kept:
                        if not any(line.comment is not None for line in statement.leading_lines):
                            changes.append(ImportChange(statement, gone, True, True, ONLY_THE_ANNOTATIONS))
                            continue
                        body.append(statement)  # its comments stay; so does the import
                        continue
                    changes.append(ImportChange(statement, gone, True, False, ONLY_THE_ANNOTATIONS))
                    last = kept[-1]
                    if not small.lpar:
                        kept[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    body.append(statement.with_changes(body=[small.with_changes(names=kept)]))
                    continue
        body.append(statement)
    return module.with_changes(body=body), changes


def _is_lightning_module_path(dotted: str) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in ("pytorch_lightning", "lightning"))


def _mentions(module: cst.Module, names: set[str]) -> set[str]:
    """Which of ``names`` the module still uses: as a name anywhere but an import, an attribute's or a
    keyword's name, or inside a string or type comment that reads as Python naming it (a forward
    reference ``"pl.Trainer"``, ``__all__ = ["LightningModule"]``)."""

    class _Uses(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.found: set[str] = set()

        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # `x.pl` does not use `pl`; `pl.Trainer` does
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)  # the keyword of `f(pl=1)` is not a use
            return False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value in names:
                self.found.add(node.value)

        def visit_SimpleString(self, node: cst.SimpleString) -> None:
            try:
                text = node.evaluated_value
            except (SyntaxError, ValueError):  # pragma: no cover - libcst parsed it
                return
            if isinstance(text, str):
                self.found |= _names_in_code(text, names)

        def visit_Comment(self, node: cst.Comment) -> None:
            if node.value.lstrip("# ").startswith("type:"):
                self.found |= _names_in_code(node.value.split(":", 1)[1], names)

    uses = _Uses()
    module.visit(uses)
    return uses.found


def _names_in_code(text: str, names: set[str]) -> set[str]:
    """The names of ``names`` that ``text``, read as a Python expression, mentions (none if it is not one)."""
    if not any(name in text for name in names):
        return set()
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names}


def remove_unused_lightning_imports(module: cst.Module, names: Iterable[str]) -> tuple[cst.Module, list[ImportChange]]:
    """Drop the module-level Lightning import binding each of ``names`` (what the base classes a
    ``--base-class`` switch replaced were read from: ``pl``, ``LightningModule``) that the module no
    longer uses; an import still used, bound more than once, or of another package stays. The
    changes name each Lightning import line that lost names, and each that keeps one of ``names``."""
    wanted = set(names)
    bound_twice = {n for n in wanted if _top_level_bindings(module).count(n) > 1}
    still_used = _mentions(module, wanted)
    unused = wanted - bound_twice - still_used
    body: list[cst.BaseStatement] = []
    changes: list[ImportChange] = []
    carried: list[cst.EmptyLine] = []  # comments above a removed import move to the next statement
    for original in module.body:
        statement = original
        if carried:
            statement = statement.with_changes(leading_lines=[*carried, *statement.leading_lines])
            carried = []
        if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(original, cst.SimpleStatementLine):
            body.append(statement)
            continue
        smalls: list[cst.BaseSmallStatement] = []
        for small in statement.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                kept = _drop_aliases(small, unused)
                if kept is not None:
                    smalls.append(kept)
                changes += _lightning_import_changes(original, small, kept, wanted - unused, bound_twice)
            else:
                smalls.append(small)
        if not smalls:
            carried = list(statement.leading_lines)
            continue
        if len(smalls) != len(statement.body) or any(a is not b for a, b in zip(smalls, statement.body)):
            last = smalls[-1]
            smalls[-1] = last.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            statement = statement.with_changes(body=smalls)
        body.append(statement)
    if carried:  # the last statement was removed: its comments stay at the end
        return module.with_changes(body=body, footer=[*carried, *module.footer]), changes
    return module.with_changes(body=body), changes


def _lightning_import_changes(
    statement: cst.SimpleStatementLine,
    small: cst.Import | cst.ImportFrom,
    kept: cst.Import | cst.ImportFrom | None,
    staying: set[str],
    bound_twice: set[str],
) -> list[ImportChange]:
    """What happened to one Lightning import of ``statement``: names dropped, or names of a switched base kept."""
    bound = _lightning_bindings(small)
    left = _lightning_bindings(kept) if kept is not None else []
    whole = kept is None and len(statement.body) == 1
    changes: list[ImportChange] = []
    gone = tuple(name for name in bound if name not in left)
    if gone:
        changes.append(ImportChange(statement, gone, True, whole, ONLY_THE_BASES))
    for name in (n for n in bound if n in staying):
        reason = "bound more than once in the file" if name in bound_twice else "still used in the file"
        changes.append(ImportChange(statement, (name,), False, False, f"`{name}` is {reason}"))
    return changes


def _lightning_bindings(small: cst.Import | cst.ImportFrom) -> list[str]:
    """The names a Lightning import binds (none for an import of another package)."""
    if isinstance(small, cst.ImportFrom):
        if isinstance(small.names, cst.ImportStar) or small.relative or small.module is None:
            return []
        if not _is_lightning_module_path(dotted_name(small.module) or ""):
            return []
        return [a.evaluated_alias or a.evaluated_name for a in small.names]
    return [
        a.evaluated_alias or a.evaluated_name.split(".")[0]
        for a in small.names
        if _is_lightning_module_path(a.evaluated_name)
    ]


def _drop_aliases(small: cst.Import | cst.ImportFrom, unused: set[str]) -> cst.Import | cst.ImportFrom | None:
    """The import without the Lightning names of ``unused`` it binds; None if nothing is left."""
    if isinstance(small, cst.ImportFrom):
        if isinstance(small.names, cst.ImportStar) or small.relative or small.module is None:
            return small
        source = dotted_name(small.module) or ""
        if not _is_lightning_module_path(source):
            return small
        aliases = list(small.names)
        kept = [a for a in aliases if (a.evaluated_alias or a.evaluated_name) not in unused]
    else:
        aliases = list(small.names)
        kept = [
            a
            for a in aliases
            if not (
                (a.evaluated_alias or a.evaluated_name.split(".")[0]) in unused
                and _is_lightning_module_path(a.evaluated_name)
            )
        ]
    if len(kept) == len(aliases):
        return small
    if not kept:
        return None
    if kept[-1] is not aliases[-1]:  # the last one went: the new last takes its comma (or none)
        kept[-1] = kept[-1].with_changes(comma=aliases[-1].comma)
    return small.with_changes(names=kept)


def _top_level_bindings(module: cst.Module) -> list[str]:
    """Every name a module-level statement binds, once per binding."""
    found: list[str] = []
    for statement in module.body:
        if isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
            found.append(statement.name.value)
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                found += [a.evaluated_alias or a.evaluated_name for a in small.names]
            elif isinstance(small, cst.Import):
                found += [a.evaluated_alias or a.evaluated_name.split(".")[0] for a in small.names]
            elif isinstance(small, cst.Assign):
                found += [t.target.value for t in small.targets if isinstance(t.target, cst.Name)]
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                found.append(small.target.value)
    return found
