"""The package's imports run one way: no module imports, however indirectly, a module that imports it.

Every import statement of every module counts, wherever it stands: at the top, inside a function,
under ``if TYPE_CHECKING:``. The typed module and the callback import the adapter, the checks, the
metrics and the Lightning internals; nothing below imports back up.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lightning_step_types"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package upwards
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import submodule` imports the submodule; `from module import name` the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        found |= {target for target in targets if target in modules and target != name}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def test_the_walk_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    modules = {f"{PACKAGE}.a": Path(), f"{PACKAGE}.b": Path(), f"{PACKAGE}.c": Path()}
    path = tmp_path / "a.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from lightning_step_types.b import B\n"
        "def f():\n    from . import c\n    return c\n"
    )
    assert imports_of(f"{PACKAGE}.a", path, modules) == {f"{PACKAGE}.b", f"{PACKAGE}.c"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) >= 30, sorted(graph)
    found = circles(graph)
    shown = [
        " -> ".join(group) + "  (" + "; ".join(f"{m} imports {sorted(graph[m] & set(group))}" for m in group) + ")"
        for group in found
    ]
    assert found == [], "import circles in the package:\n" + "\n".join(shown)


# The parts, from the bottom: the contract's base (the results, their errors, the policy), Lightning's
# private names, the step path, the metrics, exact resume; the two ways in and the public modules
# (the flavours, `resume_options`, `compiling`); and above them `check_resume`, which uses the library
# as a user does. A module imports only its own part and
# the parts below it; nothing in `_lightning` imports the rest of the library.
PARTS = ["contract", "_lightning", "step", "metrics", "resume", "top", "check_resume"]
CONTRACT = {"errors", "policy", "results"}


def part_of(module: str) -> str:
    name = module.removeprefix(f"{PACKAGE}.")
    if name in CONTRACT:
        return "contract"
    head = name.split(".")[0]
    return head if head in PARTS else "top"


def test_every_subpackage_is_a_part() -> None:
    subpackages = {name.split(".")[1] for name in import_graph() if name.count(".") >= 2}
    assert subpackages == {"_lightning", "check_resume", "metrics", "migrate", "resume", "step"}


@pytest.mark.parametrize("module", sorted(m for m in import_graph() if part_of(m) != "top"))
def test_each_part_imports_only_itself_and_the_parts_below(module: str) -> None:
    below = PARTS[: PARTS.index(part_of(module)) + 1]
    upward = sorted(target for target in import_graph()[module] if part_of(target) not in below)
    assert upward == [], f"{module} ({part_of(module)}) imports {upward}, above it"


def test_the_lightning_internals_import_nothing_else_of_the_library() -> None:
    for module, imported in import_graph().items():
        if part_of(module) == "_lightning":
            assert {part_of(target) for target in imported} <= {"_lightning"}, (module, imported)


def test_nothing_imports_check_resume_but_itself() -> None:
    """`check_resume` sits above the two ways in: it uses the library as a user does, and no other part
    depends on it."""
    for module, imported in import_graph().items():
        if part_of(module) != "check_resume":
            assert {part_of(target) for target in imported} <= set(PARTS) - {"check_resume"}, (module, imported)
