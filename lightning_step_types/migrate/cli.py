"""The command line: walks the paths, migrates each file, verifies and writes it (or prints a diff),
and prints the report and a summary.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import libcst as cst

from lightning_step_types.migrate.conventions import TYPED_BASE
from lightning_step_types.migrate.rewrite import migrate_source


@dataclasses.dataclass
class _Totals:
    files: int = 0
    changed: int = 0
    rewritten: int = 0
    skipped: int = 0
    kept_bases: int = 0
    errors: int = 0


_SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


def python_files(paths: Sequence[Path]) -> Iterator[Path | str]:
    """The .py files under ``paths``, each once (sorted; hidden folders, caches and virtualenvs left
    out), or an error message for a path that does not exist."""
    seen: set[Path] = set()

    def first_time(file: Path) -> bool:
        resolved = file.resolve()
        if resolved in seen:
            return False
        seen.add(resolved)
        return True

    for path in paths:
        if path.is_file():
            if first_time(path):
                yield path
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(
                    d
                    for d in dirs
                    if not d.startswith(".") and d not in _SKIPPED_DIRS and not (Path(root, d) / "pyvenv.cfg").exists()
                )
                yield from (Path(root, f) for f in sorted(files) if f.endswith(".py") and first_time(Path(root, f)))
        else:
            yield f"{path}: error: no such file or directory"


def verify(data: bytes) -> str | None:
    """Why ``data`` is not valid Python for both libcst and this interpreter's ``ast``, or None."""
    try:
        cst.parse_module(data)
        ast.parse(data)
    except (cst.ParserSyntaxError, SyntaxError, ValueError) as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None


def migrate_file(path: Path, *, diff: bool, base_class: bool, totals: _Totals) -> None:
    """Migrate one file: write it back (or print its diff), and print its report lines."""
    totals.files += 1
    try:
        data = path.read_bytes()
    except OSError as error:
        totals.errors += 1
        print(f"{path}: error: cannot read: {error.strerror}", file=sys.stderr)
        return
    if b"LightningModule" not in data:  # no class of the file can derive from a LightningModule
        return
    try:
        migration = migrate_source(data, base_class=base_class)
    except cst.ParserSyntaxError as error:
        totals.errors += 1
        print(f"{path}:{error.raw_line}: error: cannot parse: {error.message}; file left unchanged", file=sys.stderr)
        return
    except (UnicodeDecodeError, LookupError) as error:  # bytes that are not in the file's declared encoding
        totals.errors += 1
        print(f"{path}: error: cannot decode: {error}; file left unchanged", file=sys.stderr)
        return
    except Exception as error:  # a bug in the codemod: report it, keep the file, go on with the others
        totals.errors += 1
        print(f"{path}: error: internal error ({type(error).__name__}: {error}); file left unchanged", file=sys.stderr)
        return
    for finding in migration.findings:
        if finding.kind != "rewritten":
            print(f"{path}: {finding.describe()}", file=sys.stderr)
    totals.rewritten += len(migration.rewritten)
    totals.skipped += len(migration.skipped)
    totals.kept_bases += sum(1 for f in migration.findings if f.kind == "kept-base")
    if not migration.changed:
        return
    new_data = migration.module.bytes
    problem = verify(new_data)
    if problem is not None:
        totals.errors += 1
        print(f"{path}: error: the rewritten file would not parse ({problem}); file left unchanged", file=sys.stderr)
        return
    totals.changed += 1
    if diff:
        sys.stdout.writelines(
            difflib.unified_diff(
                migration.original.code.splitlines(keepends=True),
                migration.module.code.splitlines(keepends=True),
                fromfile=str(path),
                tofile=str(path),
            )
        )
        return
    try:
        path.write_bytes(new_data)
    except OSError as error:
        totals.changed -= 1
        totals.errors += 1
        print(f"{path}: error: cannot write: {error.strerror}", file=sys.stderr)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def summary(totals: _Totals, diff: bool) -> str:
    changed = f"{_plural(totals.changed, 'file')} {'would change' if diff else 'changed'}"
    parts = [
        f"{_plural(totals.files, 'file')} checked",
        changed,
        f"{_plural(totals.rewritten, 'method')} {'to rewrite' if diff else 'rewritten'}",
        f"{_plural(totals.skipped, 'method')} skipped",
    ]
    if totals.kept_bases:
        parts.append(f"{_plural(totals.kept_bases, 'base class')} kept")
    parts.append(_plural(totals.errors, "error"))
    return "lightning_step_types.migrate: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_step_types.migrate",
        description="Rewrite LightningModule steps that return a loss tensor or a {'loss': ...} dict"
        " into TrainStepResult / ValStepResult.",
        epilog="Exit status: 0 all converted (or nothing to do), 1 errors, 2 some steps left for a manual migration.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="Python files or folders")
    parser.add_argument("--diff", action="store_true", help="print a unified diff and change no file")
    parser.add_argument(
        "--base-class",
        action="store_true",
        help=f"also derive each fully converted class from {TYPED_BASE} (checks every step at run time)",
    )
    args = parser.parse_args(argv)
    totals = _Totals()
    for item in python_files(args.paths):
        if isinstance(item, str):
            totals.errors += 1
            print(item, file=sys.stderr)
            continue
        migrate_file(item, diff=args.diff, base_class=args.base_class, totals=totals)
    print(summary(totals, args.diff), file=sys.stderr)
    if totals.errors:
        return 1
    return 2 if totals.skipped or totals.kept_bases else 0

