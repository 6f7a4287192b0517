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
from lightning_step_types.migrate.facts import Options
from lightning_step_types.migrate.report import Migration
from lightning_step_types.migrate.rewrite import migrate_run


@dataclasses.dataclass
class _Totals:
    files: int = 0
    changed: int = 0
    rewritten: int = 0
    typed: int = 0
    nothing: int = 0
    ignored: int = 0
    skipped: int = 0
    switched_bases: int = 0
    kept_bases: int = 0
    imports_removed: int = 0
    imports_kept: int = 0
    leftovers: int = 0
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


# A file that may hold a step or a LightningModule must parse (else it is an error); the others are parsed
# for their helpers and key reads when they can be, else only searched as text for key readers.
_RELEVANT = (b"LightningModule", b"training_step", b"validation_step", b"test_step")


def _parse(path: Path, totals: _Totals) -> tuple[bytes, cst.Module | None] | None:
    """The file's bytes and tree (None: not relevant to the codemod), or None after reporting an error."""
    totals.files += 1
    try:
        data = path.read_bytes()
    except OSError as error:
        totals.errors += 1
        print(f"{path}: error: cannot read: {error.strerror}", file=sys.stderr)
        return None
    if not any(marker in data for marker in _RELEVANT):
        try:  # a helper module (losses, utils): parsed, to follow its functions; read as text if it fails
            return data, cst.parse_module(data)
        except (cst.ParserSyntaxError, UnicodeDecodeError, LookupError):
            return data, None
    try:
        return data, cst.parse_module(data)
    except cst.ParserSyntaxError as error:
        totals.errors += 1
        print(
            f"{path}: error: cannot parse: {error.message} (line {error.raw_line}); file left unchanged",
            file=sys.stderr,
        )
    except (UnicodeDecodeError, LookupError) as error:  # bytes that are not in the file's declared encoding
        totals.errors += 1
        print(f"{path}: error: cannot decode: {error}; file left unchanged", file=sys.stderr)
    return None


def migrate_paths(files: Sequence[Path], *, diff: bool, options: Options, totals: _Totals) -> None:
    """Migrate the files of one run together, then write each (or print its diff) with its report lines."""
    parsed: list[tuple[Path, cst.Module]] = []
    texts: list[tuple[str, str]] = []
    for path in files:
        found = _parse(path, totals)
        if found is None:
            continue
        data, module = found
        if module is None:
            texts.append((str(path), data.decode("utf-8", errors="replace")))
        else:
            parsed.append((path, module))
    sources = [(str(path), module) for path, module in parsed]
    try:
        migrations: list[Migration | None] = list(migrate_run(sources, options, texts))
    except Exception:  # a bug in the codemod: find the file that triggers it, keep it, go on with the others
        migrations = []
        for source in sources:
            try:
                migrations.append(migrate_run([source], options, texts)[0])
            except Exception as error:
                totals.errors += 1
                print(
                    f"{source[0]}: error: internal error ({type(error).__name__}: {error}); file left unchanged",
                    file=sys.stderr,
                )
                migrations.append(None)
    for (path, _), migration in zip(parsed, migrations):
        if migration is not None:
            _finish_file(path, migration, diff=diff, totals=totals)


def _finish_file(path: Path, migration: Migration, *, diff: bool, totals: _Totals) -> None:
    for finding in migration.findings:
        print(f"{path}: {finding.describe()}", file=sys.stderr)
    totals.rewritten += migration.count("rewritten")
    totals.typed += migration.count("typed")
    totals.nothing += migration.count("nothing")
    totals.ignored += migration.count("ignored")
    totals.skipped += migration.count("skipped")
    totals.switched_bases += migration.count("switched-base")
    totals.kept_bases += migration.count("kept-base")
    totals.imports_removed += migration.count("import-removed")
    totals.imports_kept += migration.count("import-kept")
    totals.leftovers += migration.count("leftover")
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


def _plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else words or word + 's'}"


def summary(totals: _Totals, diff: bool) -> str:
    changed = f"{_plural(totals.changed, 'file')} {'would change' if diff else 'changed'}"
    parts = [
        f"{_plural(totals.files, 'file')} checked",
        changed,
        f"{_plural(totals.rewritten, 'method')} {'to rewrite' if diff else 'rewritten'}",
    ]
    if totals.typed:
        parts.append(f"{_plural(totals.typed, 'method')} already typed")
    if totals.nothing:
        parts.append(f"{_plural(totals.nothing, 'method')} returning nothing to convert")
    if totals.ignored:
        parts.append(f"{_plural(totals.ignored, 'method')} not in a LightningModule")
    parts.append(f"{_plural(totals.skipped, 'method')} skipped")
    if totals.switched_bases:
        parts.append(
            f"{_plural(totals.switched_bases, 'base class', 'base classes')} {'to switch' if diff else 'switched'}"
        )
    if totals.kept_bases:
        parts.append(f"{_plural(totals.kept_bases, 'base class', 'base classes')} kept")
    if totals.imports_removed:
        parts.append(f"{_plural(totals.imports_removed, 'import')} {'to remove' if diff else 'removed'}")
    if totals.imports_kept:
        parts.append(f"{_plural(totals.imports_kept, 'import')} kept")
    if totals.leftovers:
        parts.append(f"{_plural(totals.leftovers, 'Lightning 1.x leftover')}")
    parts.append(_plural(totals.errors, "error"))
    return "lightning_step_types.migrate: " + ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_step_types.migrate",
        description="Rewrite LightningModule steps that return a loss tensor or a {'loss': ...} dict"
        " into TrainStepResult / ValStepResult.",
        epilog="Exit status: 0 every step converted, already typed or returning nothing (or no step found);"
        " 1 a file could not be read, parsed or written; 2 something is left for you: a step skipped"
        " (including steps of classes whose base is not in the files given), a base class kept,"
        " a Lightning 1.x leftover.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="Python files or folders")
    parser.add_argument("--diff", action="store_true", help="print a unified diff and change no file")
    parser.add_argument(
        "--base-class",
        action="store_true",
        help=f"also derive each fully converted class from {TYPED_BASE} (checks every step at run time)",
    )
    parser.add_argument(
        "--assume-lightning",
        action="store_true",
        help="treat a class whose base is not defined in the files given as a LightningModule"
        " (its helpers in that base stay unseen, so steps calling them are still skipped)",
    )
    parser.add_argument(
        "--strict-keys",
        action="store_true",
        help="skip every rewrite that renames or drops a key of a returned dict ('val_loss' -> 'loss', 0.x 'log')"
        " or turns the Tensor an evaluation step returned into a mapping, even when no code in the files given"
        " reads it",
    )
    args = parser.parse_args(argv)
    totals = _Totals()
    files: list[Path] = []
    for item in python_files(args.paths):
        if isinstance(item, str):
            totals.errors += 1
            print(item, file=sys.stderr)
            continue
        files.append(item)
    options = Options(base_class=args.base_class, assume_lightning=args.assume_lightning, strict_keys=args.strict_keys)
    migrate_paths(files, diff=args.diff, options=options, totals=totals)
    print(summary(totals, args.diff), file=sys.stderr)
    if totals.errors:
        return 1
    return 2 if totals.skipped or totals.kept_bases or totals.leftovers else 0
