"""The static typing contract, checked by mypy and pyright the way a user's project checks it.

Each module in ``tests/typing_cases`` is user-style code that imports the package; both checkers
see it through the stubs in ``stubs/`` (``mypy.ini``: ``mypy_path = stubs``; ``pyrightconfig.json``:
``stubPath``, strict for the cases). A line may end with a marker:

- ``# E: mypy[code,...] pyright[rule,...]``: the mistake on this line must be reported by each
  checker named, with exactly these codes. A checker left out of the marker must report nothing
  there (the case's docstring then says why that checker cannot catch it).
- ``# X: mypy[override]``: a known false positive on valid code, asserted exactly as well, so that
  the day a checker changes its behaviour the suite says so (see docs/typing.md, "mypy and the
  typed batch-end hooks").

Every line without a marker must be clean. ``pass_*`` cases carry no ``E`` marker, ``fail_*``
cases at least one, ``gap_*`` cases document a mistake neither checker can see.

A comment line ``# taught: docs/<guide>.md`` in a ``pass_*`` case says that the lines after it, up
to the next blank line, are written in that guide word for word: the guide's idiom type-checks as
it is written there.

Each checker runs once over all the cases; the runs (and the package checks: mypy --strict,
pyright strict, stubtest, --verifytypes) start together on first use and run concurrently.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from limits import hang_limit

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "tests" / "typing_cases"
PACKAGE_DIR = ROOT / "lightning_step_types"
STUBTEST_ALLOWLIST = ROOT / "stubs" / "stubtest_allowlist.txt"
MYPY_CACHE = ROOT / ".mypy_cache"
CHECKERS = ("mypy", "pyright")

HAS_LIGHTNING = importlib.util.find_spec("lightning") is not None
# Cases that need an optional package; without it they are skipped (and left out of the runs).
NEEDS = {"pass_lightning_pytorch_flavour.py": HAS_LIGHTNING}

ALL_CASES = sorted(CASES_DIR.glob("*.py"))
CASES = [case for case in ALL_CASES if NEEDS.get(case.name, True)]

_MARKER = re.compile(r"#\s*(?P<kind>[EX]):(?P<body>.*)$")
_TAUGHT = re.compile(r"^\s*# taught: (?P<guide>\S+)$")
_CHECKER_CODES = re.compile(r"\b(mypy|pyright)\[([^\]]*)\]")


@dataclass(frozen=True)
class Expected:
    line: int
    kind: str  # "E": a mistake the checker catches; "X": a known false positive
    codes: frozenset[str]


def expected_diagnostics(case: Path) -> dict[str, dict[int, Expected]]:
    """checker -> line -> what that checker must report on that line."""
    found: dict[str, dict[int, Expected]] = {checker: {} for checker in CHECKERS}
    for number, text in enumerate(case.read_text().splitlines(), start=1):
        marker = _MARKER.search(text)
        if marker is None:
            continue
        named = _CHECKER_CODES.findall(marker["body"])
        assert named, f"{case.name}:{number}: marker names no checker: {text.strip()!r}"
        for checker, codes in named:
            found[checker][number] = Expected(
                number, marker["kind"], frozenset(code.strip() for code in codes.split(",") if code.strip())
            )
    return found


@dataclass(frozen=True)
class Diagnostic:
    file: Path
    line: int
    code: str
    message: str


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=hang_limit(idle_s=110), env=env)


def _mypy(files: list[Path]) -> subprocess.CompletedProcess[str]:
    return _run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", str(MYPY_CACHE), "--output", "json"]
        + [str(f.relative_to(ROOT)) for f in files]
    )


def _pyright(*args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable, *args])


def parse_mypy(output: str, base: Path = ROOT) -> list[Diagnostic]:
    """mypy's ``--output json`` lines (file paths relative to where it ran, ``base``); errors only."""
    diagnostics = []
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        item = json.loads(line)
        if item["severity"] != "error":
            continue
        diagnostics.append(
            Diagnostic((base / item["file"]).resolve(), item["line"], item["code"] or "", item["message"])
        )
    return diagnostics


def parse_pyright(output: str) -> list[Diagnostic]:
    report = json.loads(output)
    return [
        Diagnostic(
            Path(item["file"]).resolve(), item["range"]["start"]["line"] + 1, item.get("rule", ""), item["message"]
        )
        for item in report["generalDiagnostics"]
        if item["severity"] in ("error", "warning")
    ]


def library_modules() -> list[Path]:
    """The runtime package's modules, each checked against the real sources of the others."""
    return sorted(PACKAGE_DIR.rglob("*.py"))


class StaticChecks:
    """Every checker run this suite needs, started together and run concurrently (2 cores in CI)."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._pool = ThreadPoolExecutor(max_workers=3)
        # mypy runs one after the other so that the second reuses the first's cache.
        self._mypy_lane = self._pool.submit(self._run_mypy_lane)
        self._pyright_lane = self._pool.submit(self._run_pyright_lane)
        self._stubtest: Future[subprocess.CompletedProcess[str]] = self._pool.submit(
            _run,
            [
                sys.executable, "-m", "mypy.stubtest", "lightning_step_types",
                "--mypy-config-file", "mypy.ini", "--allowlist", str(STUBTEST_ALLOWLIST),
            ],
        )  # fmt: skip

    @staticmethod
    def _run_mypy_lane() -> dict[str, subprocess.CompletedProcess[str]]:
        return {"cases": _mypy(CASES), "package": _mypy(library_modules())}

    def _run_pyright_lane(self) -> dict[str, subprocess.CompletedProcess[str]]:
        return {
            "cases": _pyright("--outputjson", "-p", "pyrightconfig.json", *[str(c) for c in CASES]),
            "package": _pyright("--outputjson", "-p", "pyrightconfig.json"),
            "verifytypes": self._verifytypes(),
        }

    def _verifytypes(self) -> subprocess.CompletedProcess[str]:
        """``pyright --verifytypes`` on the public contract: the stubs, laid out as an inline-typed package.

        The .pyi files alone, as the package itself: the public contract scores 100% on its own.
        (tests/test_wheel.py scores the installed package, where the stubs sit next to the
        modules.) It finds the package on the interpreter's sys.path (PYTHONPATH) and takes that
        interpreter from PATH.
        """
        package = self._tmp / "verifytypes" / "lightning_step_types"
        shutil.copytree(ROOT / "stubs" / "lightning_step_types", package)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(package.parent)
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return _run(
            [
                sys.executable,
                "-m",
                "pyright",
                "--outputjson",
                "--verifytypes",
                "lightning_step_types",
                "--ignoreexternal",
            ],
            env=env,
        )

    def mypy(self, name: str) -> subprocess.CompletedProcess[str]:
        return self._mypy_lane.result()[name]

    def pyright(self, name: str) -> subprocess.CompletedProcess[str]:
        return self._pyright_lane.result()[name]

    def stubtest(self) -> subprocess.CompletedProcess[str]:
        return self._stubtest.result()

    def case_diagnostics(self, checker: str) -> dict[Path, list[Diagnostic]]:
        parse: Callable[[str], list[Diagnostic]] = parse_mypy if checker == "mypy" else parse_pyright
        run = self.mypy("cases") if checker == "mypy" else self.pyright("cases")
        assert run.stdout.strip(), f"{checker} printed nothing; stderr:\n{run.stderr}"
        by_file: dict[Path, list[Diagnostic]] = defaultdict(list)
        for diagnostic in parse(run.stdout):
            by_file[diagnostic.file].append(diagnostic)
        return by_file

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticChecks]:
    runs = StaticChecks(tmp_path_factory.mktemp("static"))
    yield runs
    runs.close()


def _case_params() -> list[object]:
    params = []
    for case in ALL_CASES:
        marks = (
            [] if NEEDS.get(case.name, True) else [pytest.mark.skip(reason=f"{case.name} needs an optional package")]
        )
        params.append(pytest.param(case, id=case.stem, marks=marks))
    return params


def _format(diagnostics: list[Diagnostic]) -> str:
    return "\n".join(f"  line {d.line}: [{d.code}] {d.message.splitlines()[0]}" for d in diagnostics) or "  (none)"


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("case", _case_params())
def test_case_verdict(checks: StaticChecks, case: Path, checker: str) -> None:
    expected = expected_diagnostics(case)[checker]
    diagnostics = checks.case_diagnostics(checker).get(case.resolve(), [])
    got: dict[int, set[str]] = defaultdict(set)
    for diagnostic in diagnostics:
        got[diagnostic.line].add(diagnostic.code)
    want = {line: set(item.codes) for line, item in expected.items()}
    assert dict(got) == want, f"{checker} on {case.name}: expected {want or 'no errors'}, got:\n{_format(diagnostics)}"


@pytest.mark.parametrize("checker", CHECKERS)
def test_checkers_report_nothing_outside_the_cases(checks: StaticChecks, checker: str) -> None:
    # The stubs themselves, and anything the cases import, must be clean under the same settings.
    outside = {path: found for path, found in checks.case_diagnostics(checker).items() if path.parent != CASES_DIR}
    assert outside == {}, f"{checker} reported diagnostics outside tests/typing_cases: {outside}"


def test_suite_covers_the_contract() -> None:
    kinds: dict[str, list[str]] = defaultdict(list)
    for case in ALL_CASES:
        kind = case.name.split("_", 1)[0]
        assert kind in ("pass", "fail", "gap"), f"{case.name}: name it pass_*, fail_* or gap_*"
        expected = expected_diagnostics(case)
        errors = [item for checker in CHECKERS for item in expected[checker].values() if item.kind == "E"]
        if kind == "fail":
            # Each checker must catch the mistake, or the case must say why it cannot ("mypy gap: ...").
            for checker in CHECKERS:
                caught = any(item.kind == "E" for item in expected[checker].values())
                assert caught or f"{checker} gap" in case.read_text(), f"{case.name}: no {checker} error marked"
        else:
            assert not errors, f"{case.name}: {kind} cases mark no E errors"
        kinds[kind].append(case.name)
    assert len(kinds["fail"]) >= 25 and len(kinds["pass"]) >= 10, dict(kinds)


def taught_lines(case: Path) -> list[tuple[str, int, str]]:
    """(guide, line number, line) for each line a ``# taught:`` comment of ``case`` says a guide writes."""
    found: list[tuple[str, int, str]] = []
    guide: str | None = None
    for number, text in enumerate(case.read_text().splitlines(), start=1):
        taught = _TAUGHT.match(text)
        if taught is not None:
            guide = taught["guide"]
        elif not text.strip():
            guide = None
        elif guide is not None:
            found.append((guide, number, text.strip()))
    return found


def test_the_guides_idioms_type_check_as_written() -> None:
    """``trainer.fit(compiled(model))`` and ``self.net = compiled(self.net)`` (quick start), the
    resume guide's ``StatefulDataLoader`` import and its ignores: each as a pass case checks it."""
    taught = [(case, *line) for case in ALL_CASES for line in taught_lines(case)]
    assert all(case.name.startswith("pass_") for case, *_ in taught), "only pass cases teach"
    guides = {guide for _, guide, _, _ in taught}
    assert {"docs/quickstart.md", "docs/resume.md"} <= guides, guides
    for case, guide, number, text in taught:
        written = {line.strip() for line in (ROOT / guide).read_text().splitlines()}
        assert text in written, f"{case.name}:{number} is not written in {guide}: {text!r}"


def test_runtime_package_passes_mypy_strict(checks: StaticChecks) -> None:
    run = checks.mypy("package")
    assert run.returncode == 0, (
        f"mypy --strict on lightning_step_types:\n{_format(parse_mypy(run.stdout))}\n{run.stderr}"
    )


def test_runtime_package_and_stubs_pass_pyright_strict(checks: StaticChecks) -> None:
    run = checks.pyright("package")
    report = json.loads(run.stdout)
    problems = [d for d in report["generalDiagnostics"] if d["severity"] in ("error", "warning")]
    assert problems == [], "\n".join(
        f"{d['file']}:{d['range']['start']['line'] + 1}: [{d.get('rule', '')}] {d['message']}" for d in problems
    )
    assert report["summary"]["filesAnalyzed"] >= len(library_modules())


def test_stubs_agree_with_runtime(checks: StaticChecks) -> None:
    run = checks.stubtest()
    assert run.returncode == 0, f"stubtest:\n{run.stdout}\n{run.stderr}"


def test_public_api_is_fully_typed(checks: StaticChecks) -> None:
    # --ignoreexternal: torch and pytorch_lightning are only partly typed (Lightning scores about
    # 66%); what this package itself exposes must be complete.
    report = json.loads(checks.pyright("verifytypes").stdout)
    completeness = report["typeCompleteness"]
    assert completeness["packageRootDirectory"].endswith("lightning_step_types"), report["generalDiagnostics"]
    incomplete = {
        symbol["name"]: [d["message"] for d in symbol["diagnostics"]]
        for symbol in completeness["symbols"]
        if not symbol["isTypeKnown"]
    }
    assert incomplete == {}
    assert completeness["completenessScore"] == 1.0
    counts = completeness["exportedSymbolCounts"]
    assert counts["withKnownType"] > 100 and counts["withUnknownType"] == counts["withAmbiguousType"] == 0, counts


def test_typing_guide_quotes_what_the_checkers_print(checks: StaticChecks) -> None:
    """docs/typing.md shows real output: each quoted error is one the checkers give for the same code."""
    guide = (ROOT / "docs" / "typing.md").read_text()
    section = guide.split("## Static checking", 1)[1].split("\n## ", 1)[0]
    mypy_quote = re.search(r"^model\.py:\d+: error: (.*)  \[([a-z-]+)\]$", section, re.MULTILINE)
    pyright_quote = re.search(r"^  \S+model\.py:\d+:\d+ - error: (.*) \((\w+)\)$", section, re.MULTILINE)
    assert mypy_quote and pyright_quote, "the Static checking section quotes no mypy or pyright error"
    case = (CASES_DIR / "fail_train_returns_dict.py").resolve()
    mypy_found = {(d.message, d.code) for d in checks.case_diagnostics("mypy")[case]}
    pyright_found = {(d.message.splitlines()[0], d.code) for d in checks.case_diagnostics("pyright")[case]}
    assert (mypy_quote[1], mypy_quote[2]) in mypy_found, mypy_found
    assert (pyright_quote[1], pyright_quote[2]) in pyright_found, pyright_found

    # The mypy limitation on typed hooks, quoted with the case it comes from.
    override = re.search(r"^tests/typing_cases/(\w+\.py):(\d+): error: (.*)  \[override\]$", guide, re.MULTILINE)
    assert override, "the typing guide quotes no mypy override error"
    found = checks.case_diagnostics("mypy")[(CASES_DIR / override[1]).resolve()]
    assert (int(override[2]), override[3], "override") in {(d.line, d.message, d.code) for d in found}
