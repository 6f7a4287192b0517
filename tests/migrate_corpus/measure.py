"""Runs the codemod's command line on a fixture and turns what it did into one verdict per step.

A step is a ``training_step``, ``validation_step`` or ``test_step`` defined in a class of the
fixture's files. Its verdict comes from what the run did, not from what it says about itself:

- ``rewritten``: the method's code changed (``rewritten; reported: ...`` when a report line also
  names it, such as a Lightning 1.x note);
- ``skipped: <reason>``: unchanged, and a report line ``Class.hook line N: <reason>`` names it;
- ``unreported``: unchanged and never named, though it returns a value (the failure the corpus
  exists to catch: a user takes silence and exit 0 as "nothing left to do");
- ``no value``: unchanged and never named, and every ``return`` is bare or ``None``.

``unsafe`` is not a verdict the run can give: a rewrite is unsafe when the migrated module behaves
differently. The training test (``training.py``) catches it for the fixtures it trains, and the
expected verdicts (``expected.json``) were reviewed by hand for the others.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .fetching import hang_limit, released_files, write_tree
from .sources import Fixture

REPO = Path(__file__).resolve().parents[2]
STEP_HOOKS = ("training_step", "validation_step", "test_step")


@dataclasses.dataclass(frozen=True)
class Run:
    exit_code: int
    report: tuple[str, ...]  # stderr lines, the summary last
    stdout: str
    before: dict[str, bytes]
    after: dict[str, bytes]


def run_codemod(root: Path, files: tuple[str, ...], *args: str) -> tuple[int, str, str]:
    env = dict(os.environ)
    # LST_CORPUS_CODEMOD: measure another copy of the package (the "before" table of docs/migration.md)
    codemod_root = env.get("LST_CORPUS_CODEMOD", str(REPO))
    env["PYTHONPATH"] = os.pathsep.join([codemod_root, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, "-m", "lightning_step_types.migrate", *args, *files],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=40),
    )
    return done.returncode, done.stdout, done.stderr


def migrate(fixture: Fixture, root: Path, *args: str, before: dict[str, bytes] | None = None) -> Run:
    """Lay the fixture's released files under ``root`` (unless already there) and run the codemod."""
    if before is None:
        before = released_files(fixture)
        write_tree(before, root)
    code, stdout, stderr = run_codemod(root, fixture.run_paths, *fixture.args, *args)
    after = {file: (root / file).read_bytes() for file in fixture.files}
    return Run(code, tuple(stderr.splitlines()), stdout, before, after)


def migrated(fixture: Fixture) -> Run:
    with tempfile.TemporaryDirectory(prefix=f"corpus-{fixture.name}-") as folder:
        return migrate(fixture, Path(folder))


# --- verdicts ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    file: str
    owner: str  # Class
    hook: str
    returns_value: bool

    @property
    def key(self) -> str:
        return f"{self.owner}.{self.hook}"


def _own_returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Return]:
    """The function's own ``return`` statements (not those of nested functions or classes)."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _step_methods(source: bytes) -> dict[tuple[str, str], ast.FunctionDef | ast.AsyncFunctionDef]:
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in STEP_HOOKS:
                    found[(node.name, item.name)] = item
    return found


def steps(files: dict[str, bytes]) -> list[Step]:
    found = []
    for file, source in files.items():
        for (owner, hook), function in _step_methods(source).items():
            returns_value = any(
                r.value is not None and not (isinstance(r.value, ast.Constant) and r.value.value is None)
                for r in _own_returns(function)
            )
            found.append(Step(file, owner, hook, returns_value))
    return found


def _reasons(run: Run, step: Step) -> list[str]:
    pattern = re.compile(rf"^{re.escape(step.file)}: {re.escape(step.key)} line \d+: (?!note: )(.*)$")
    return [m.group(1) for line in run.report if (m := pattern.match(line))]


def verdicts(run: Run) -> dict[str, str]:
    """``Class.hook`` -> verdict, for every step of the fixture."""
    out = {}
    for step in steps(run.before):
        before = _step_methods(run.before[step.file])[(step.owner, step.hook)]
        after = _step_methods(run.after[step.file]).get((step.owner, step.hook))
        changed = after is None or ast.dump(before) != ast.dump(after)
        reasons = [r for r in _reasons(run, step) if r != "rewritten"]  # the codemod may list its rewrites
        if changed and not reasons:
            verdict = "rewritten"
        elif changed:
            verdict = "rewritten; reported: " + "; ".join(reasons)
        elif reasons:
            verdict = "skipped: " + "; ".join(reasons)
        else:
            verdict = "unreported" if step.returns_value else "no value"
        out[step.key] = verdict
    return out


def unbound_names(source: bytes) -> set[str]:
    """Names the module reads that nothing in it binds and that are not builtins (an over-approximate
    binding set: any assignment, parameter, import, definition or loop target anywhere). Comparing
    the released and migrated text shows a name the rewrite left without its import."""
    import builtins

    tree = ast.parse(source)
    bound: set[str] = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__"}
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
    return read - bound


def digest(data: bytes) -> str:
    """sha256 of a file's text with line endings normalised to LF."""
    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()


def outputs(run: Run) -> dict[str, str]:
    """file -> digest of the migrated text, or "unchanged"."""
    return {file: "unchanged" if run.after[file] == run.before[file] else digest(run.after[file]) for file in run.after}


# --- the corpus table ----------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    with_value: int = 0
    rewritten: int = 0
    skipped: int = 0
    unreported: int = 0
    unsafe: int = 0
    trained: int = 0  # rewritten steps whose class the training test trains

    def add(self, verdict: str, returns_value: bool, unsafe: bool, trained: bool = False) -> None:
        if not returns_value:
            return
        self.with_value += 1
        if verdict.startswith("rewritten"):
            self.rewritten += 1
            self.trained += trained
        elif verdict.startswith("skipped"):
            self.skipped += 1
        else:
            self.unreported += 1
        self.unsafe += unsafe

    @property
    def share(self) -> str:
        return f"{100 * self.rewritten / self.with_value:.0f}%" if self.with_value else "-"


def table(
    results: dict[str, tuple[Fixture, Run]], unsafe: set[str], trained: frozenset[tuple[str, str]] = frozenset()
) -> str:
    """The per-repository table (markdown); ``unsafe`` holds ``fixture:Class.hook`` keys, ``trained``
    the (fixture, Class) pairs that the training test trains."""
    by_repository: dict[str, Tally] = {}
    total = Tally()
    for name, (fixture, run) in results.items():
        if not fixture.counted:
            continue
        found = verdicts(run)
        for step in steps(run.before):
            tally = by_repository.setdefault(fixture.release.repository, Tally())
            bad = f"{name}:{step.key}" in unsafe
            was_trained = (name, step.owner) in trained
            tally.add(found[step.key], step.returns_value, bad, was_trained)
            total.add(found[step.key], step.returns_value, bad, was_trained)
    lines = [
        "| repository | steps returning a value | rewritten | of them trained | skipped, with a reason | unreported "
        "| unsafe |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def row(label: str, t: Tally) -> str:
        return (
            f"| {label} | {t.with_value} | {t.rewritten} ({t.share}) | {t.trained} | {t.skipped} | {t.unreported} "
            f"| {t.unsafe} |"
        )

    lines += [row(repository, t) for repository, t in sorted(by_repository.items())]
    lines.append(row("**all**", total))
    return "\n".join(lines)


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, dirs_exist_ok=True)
