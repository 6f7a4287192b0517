"""Run Lightning's own tests plainly and with ``StepResultAdapter()`` in every Trainer, and compare.

    python conformance/run.py --tests DIR [--modes off,default,log_loss] [--package PATH] [--out DIR]
    python conformance/run.py --lightning CLONE_OR_ARCHIVE [--commit REV] ...   # prepares DIR first (prepare.py)
    python conformance/run.py --lightning ARCHIVE --subset ci --modes default --baseline conformance/baseline.txt

``DIR`` is the output of ``prepare.py`` (it holds ``tests/tests_pytorch``). Each mode runs the subset
(``--subset``: ``full``, or ``ci``, the part ``.ci/run`` runs) in a pytest process of its own, one
after the other, from ``tests/tests_pytorch`` as Lightning's CI runs it, with ``step_adapter_plugin``
loaded. ``lightning_step_types`` is the one the active Python imports, or the checkout given with
``--package`` (put first on ``PYTHONPATH``).

Each run leaves ``MODE.json`` (every test's outcome, and what each failure was), ``MODE.xml``
(junit) and ``MODE.log`` in ``--out``; ``summary.md`` gives the counts and every test that passes
plainly and does not pass under the adapter. What passes plainly comes from the ``off`` mode's
run, or from ``--baseline FILE`` (the node ids, one a line, that ``--write-baseline FILE`` wrote
after a plain run). A mode left out of ``--modes`` is not run again: ``off.json`` from an earlier
run into the same ``--out`` is the baseline (``--modes default,log_loss`` reruns the adapter alone).

The exit status is 1 when a test that passes plainly fails under the adapter, and again when run
alone in a second pytest process, and no entry of the allow-list (``allowlist.txt``) allows it, or
an entry names it but its condition does not hold for the failure (the test fails for another
reason than the one allowed); when such a test is not run under the adapter (skipped, or gone); or
when a Trainer was built without the adapter in an adapter mode. 0 otherwise.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from prepare import DEFAULT_COMMIT, prepare  # noqa: E402

# Relative to tests/tests_pytorch: the parts of Lightning's suite that exercise what the adapter
# touches (loops, logging, checkpoints and resume, callbacks, hooks, the Trainer's flags).
SUBSETS = {
    "full": [
        "trainer/logging_",
        "loops",
        "checkpointing",
        "callbacks",
        "models/test_hooks.py",
        "models/test_restore.py",
        "trainer/test_trainer.py",
        "trainer/flags",
        "trainer/optimization",
        "trainer/connectors",
        "core",
        "tuner",
    ],
    # .ci/run: the most signal per minute (conformance/README.md, "In CI")
    "ci": [
        "models/test_hooks.py",
        "loops",
        "checkpointing",
        "callbacks",
        "trainer/logging_",
        "trainer/test_trainer.py",
        "trainer/connectors",
        "core/test_metric_result_integration.py",
        "models/test_restore.py",
    ],
}
# downloads every released Lightning's checkpoints
IGNORED = ["checkpointing/test_legacy_checkpoints.py"]
PLAIN = "off"
FAILED = ("failed", "error")
BASELINE_HEADER = """\
# Lightning's tests (tag 2.6.5) in the `ci` subset of conformance/run.py that pass plainly: the
# baseline .ci/run compares the adapter's run with. One pytest node id a line. Regenerate it, in
# an environment made as .ci/run makes its conformance one, with:
#   python conformance/run.py --lightning ../shared/lightning-tests/lightning-2.6.5-tests.tar.gz \\
#       --subset ci --modes off --out /tmp/conformance-baseline --write-baseline conformance/baseline.txt
"""


@dataclass(frozen=True)
class Entry:
    """One allow-list line: the tests it names, in which modes, what may differ, and why."""

    modes: tuple[str, ...]
    pattern: str
    kind: str
    args: tuple[str, ...]
    reason: str
    line: int
    written: str = ""  # the arguments as the line writes them

    @property
    def condition(self) -> str:
        return f"{self.kind}: {self.written or shlex.join(self.args)}"

    def names(self, mode: str, node_id: str) -> bool:
        matches = node_id == self.pattern or fnmatch.fnmatchcase(node_id, self.pattern)
        return matches and ("all" in self.modes or mode in self.modes)


def _check_extra(args: tuple[str, ...], failure: dict[str, Any]) -> str | None:
    comparison = _equality(failure)
    if isinstance(comparison, str):
        return comparison
    names = [name for arg in args for name in arg.split(",") if name]
    for difference in comparison["differences"]:
        if difference["kind"] != "extra" or not any(
            fnmatch.fnmatchcase(str(name), pattern) for name in difference["names"] for pattern in names
        ):
            return f"the comparison differs by more: {_difference_text(difference)}"
    return None


def _check_value(args: tuple[str, ...], failure: dict[str, Any]) -> str | None:
    comparison = _equality(failure)
    if isinstance(comparison, str):
        return comparison
    paths = [arg for arg in args if "=" not in arg]
    settings = dict(arg.split("=", 1) for arg in args if "=" in arg)
    for difference in comparison["differences"]:
        text = _difference_text(difference)
        if difference["kind"] != "value" or difference["path"] not in paths:
            return f"the comparison differs elsewhere: {text}"
        for side in ("left", "right"):
            if side in settings and difference[side] != settings[side]:
                return f"{text}, not {side}={settings[side]}"
        if "delta" in settings:
            try:
                delta = float(difference["left"]) - float(difference["right"])
            except ValueError:
                return f"{text}: not numbers"
            if delta != float(settings["delta"]):
                return f"{text}: left - right is {delta:g}, not {settings['delta']}"
    return None


def _check_raises(args: tuple[str, ...], failure: dict[str, Any]) -> str | None:
    name, texts = args[0], args[1:]
    spawned = failure.get("spawned")
    if name in failure["bases"]:
        message = failure["message"]
    elif spawned is not None and spawned["name"] == name:
        message = spawned["message"]
    else:
        return f"it raised {_exception_text(failure)}"
    missing = [text for text in texts if text not in message]
    if missing:
        return f"the {name}'s message lacks {missing[0]!r}: {message.splitlines()[0] if message else ''}"[:400]
    return None


def _check_fails_at(args: tuple[str, ...], failure: dict[str, Any]) -> str | None:
    spawned = failure.get("spawned")
    statement = spawned["statement"] if spawned is not None else failure.get("statement", "")
    if args[0] not in statement:
        return f"it failed at `{statement}` ({_exception_text(failure)})"
    return None


def _check_matches(args: tuple[str, ...], failure: dict[str, Any]) -> str | None:
    if re.search(args[0], failure["message"], re.S) is None:
        return f"its message does not match: {failure['message'].splitlines()[0] if failure['message'] else ''}"[:400]
    return None


# kind -> (its arguments, what holds when the check passes, the check); README.md's table says the same
CONDITIONS = {
    "extra": ("NAME[,NAME...]", "the test failed on an `assert x == y` whose only differences are dict keys, set members or list items one side holds, each named (fnmatch) by a NAME", _check_extra),
    "value": ("PATH... [left=REPR] [right=REPR] [delta=N]", "the test failed on an `assert x == y` whose only differences are values at the PATHs ($ is the compared value), with these reprs or left - right = N", _check_value),
    "raises": ("EXCEPTION [TEXT...]", "the test failed with EXCEPTION (the class or a base, or what a spawned process raised), its message holding each TEXT", _check_raises),
    "fails-at": ("TEXT", "the statement that raised (in a spawned process: its) holds TEXT", _check_fails_at),
    "matches": ("REGEX", "the failure's message matches REGEX (re.search)", _check_matches),
}  # fmt: skip


def _equality(failure: dict[str, Any]) -> dict[str, Any] | str:
    comparison = failure.get("comparison")
    if comparison is None:
        return f"it did not fail on an `assert x == y` but with {_exception_text(failure)}"
    if comparison["op"] != "==":
        return f"it failed on `{comparison['left']} {comparison['op']} {comparison['right']}`"
    if not comparison["complete"]:
        return f"the comparison differs in more than the {len(comparison['differences'])} recorded places"
    if not comparison["differences"]:
        return "the comparison's sides differ where no difference was recorded"
    return comparison


def _difference_text(difference: dict[str, Any]) -> str:
    if difference["kind"] == "extra":
        return f"{difference['of']} {difference['repr']} only on the {difference['side']} at {difference['path']}"
    return f"{difference['path']}: {difference['left']} != {difference['right']}"


def _exception_text(failure: dict[str, Any]) -> str:
    spawned = failure.get("spawned")
    text = failure["bases"][0] + (f" (a spawned process raised {spawned['name']})" if spawned else "")
    message = (spawned or failure)["message"]
    return f"{text}: {message.splitlines()[0]}"[:400] if message else text


def check(entry: Entry, failure: dict[str, Any] | None) -> str | None:
    """None when ``entry``'s condition holds for ``failure`` (a plugin record); else what was found."""
    if failure is None:
        return "no record of the failure (an error while collecting, or the plugin did not see it)"
    return CONDITIONS[entry.kind][2](entry.args, failure)


def load_allow_list(path: Path) -> list[Entry]:
    """The entries; a line is ``MODES NODE_ID_PATTERN KIND: ARGUMENTS  # reason`` (``allowlist.txt``)."""
    entries = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        rule, separator, reason = line.partition(" # ")
        fields = rule.split(None, 2)
        kind, colon, arguments = fields[2].partition(":") if len(fields) == 3 else ("", "", "")
        try:
            args = tuple(shlex.split(arguments))
        except ValueError as error:
            raise SystemExit(f"{path}:{number}: {error} in {arguments!r}") from None
        if not separator or not reason.strip() or not colon or kind.strip() not in CONDITIONS or not args:
            kinds = ", ".join(CONDITIONS)
            raise SystemExit(
                f"{path}:{number}: expected 'MODES NODE_ID_PATTERN KIND: ARGUMENTS  # reason' with KIND one of"
                f" {kinds}, got {raw!r}"
            )
        modes, pattern = fields[0], fields[1]
        entry = Entry(tuple(modes.split(",")), pattern, kind.strip(), args, reason.strip(), number, arguments.strip())
        entries.append(entry)
    return entries


def read_baseline(path: Path, paths: list[str] | None = None) -> set[str]:
    """The node ids in ``path``; with ``paths`` (under tests/tests_pytorch), those of tests under them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    nodes = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    if paths is not None:
        prefixes = tuple(f"tests/tests_pytorch/{p.rstrip('/')}{end}" for p in paths for end in ("/", "::"))
        nodes = {node for node in nodes if node.startswith(prefixes)}
    return nodes


def write_baseline(path: Path, plain: dict[str, Any]) -> int:
    passed = sorted(node for node, outcome in plain["outcomes"].items() if outcome == "passed")
    path.write_text(BASELINE_HEADER + "".join(f"{node}\n" for node in passed), encoding="utf-8")
    return len(passed)


def run_mode(
    mode: str,
    tests: Path,
    out: Path,
    package: Path | None,
    subset: list[str],
    extra: list[str],
    ignored: list[str] = IGNORED,
    flavour: str = "pytorch_lightning",
    label: str = "",
) -> dict:
    """One pytest process over ``subset`` (paths relative to ``tests``, its working folder) in ``mode``.

    Its reports are named after ``label`` (``mode`` where not given).
    """
    label = label or mode
    results, junit, log = out / f"{label}.json", out / f"{label}.xml", out / f"{label}.log"
    env = dict(os.environ, STEP_ADAPTER=mode, STEP_ADAPTER_RESULTS=str(results), PYTHONDONTWRITEBYTECODE="1")
    env["STEP_ADAPTER_FLAVOUR"] = flavour
    paths = [str(HERE)] + ([str(package.resolve())] if package else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    command = [
        sys.executable, "-m", "pytest", *subset, *(f"--ignore={path}" for path in ignored),
        "-p", "step_adapter_plugin", "-p", "no:cacheprovider", "-q", "-rA", "--color=no",
        "--timeout=300", f"--junitxml={junit}", *extra,
    ]  # fmt: skip
    print(f"== {label}: {' '.join(command)}", flush=True)
    started, cpu_before = time.monotonic(), _children_cpu()
    with log.open("w", encoding="utf-8") as stream:
        done = subprocess.run(
            command, cwd=tests, env=env, stdout=stream, stderr=subprocess.STDOUT, check=False, **_away_from_hangups()
        )
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1) or not results.exists():  # 0: all passed, 1: some failed
        print(log.read_text(encoding="utf-8")[-3000:])
        raise SystemExit(f"{label}: pytest exited with {done.returncode} (interrupted, or no tests); see {log}")
    data = json.loads(results.read_text(encoding="utf-8"))
    data["seconds"] = round(seconds)
    data["cpu_seconds"] = round(_children_cpu() - cpu_before)
    results.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    print(
        f"   {label}: {_count_line(data)}; {seconds / 60:.1f} min, {data['cpu_seconds'] / 60:.1f} CPU min", flush=True
    )
    return data


def _away_from_hangups() -> dict[str, Any]:
    """How pytest starts where this process ignores SIGHUP (``nohup``), which pytest would inherit.

    Lightning's signal-connector tests expect SIGHUP's default disposition
    (``test_auto_requeue_custom_signal_flag[1-*]`` fail plainly under ``nohup``), so pytest starts as
    ``setsid`` starts a command instead: in a session of its own, which no terminal's hangup reaches,
    with SIGHUP's default. Elsewhere, as this process is.
    """
    if not hasattr(signal, "SIGHUP") or signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        return {}
    return {"start_new_session": True, "preexec_fn": partial(signal.signal, signal.SIGHUP, signal.SIG_DFL)}


def _children_cpu() -> float:
    """User and system CPU seconds of the finished child processes (pytest and what it spawned)."""
    usage = os.times()
    return usage.children_user + usage.children_system


def _count_line(data: dict) -> str:
    counts = Counter(data["outcomes"].values())
    parts = [f"{len(data['outcomes'])} tests"] + [f"{counts[k]} {k}" for k in sorted(counts)]
    return (
        ", ".join(parts)
        + f"; {data['trainers_built']} trainers built, {data['trainers_with_adapter']} with the adapter"
    )


def _passing(runs: dict[str, dict], baseline: set[str] | None) -> tuple[set[str] | None, str]:
    """What passes plainly (``baseline`` where given, else the ``off`` run's passed tests), and its source."""
    if baseline is not None:
        return baseline, "in the baseline"
    if PLAIN in runs:
        return {n for n, o in runs[PLAIN]["outcomes"].items() if o == "passed"}, "plainly"
    return None, ""


def _judge(
    mode: str, data: dict, broken: list[str], entries: list[Entry]
) -> list[tuple[str, Entry | None, str | None]]:
    """Each broken test, the allow-list entry that names it (or None), and what differs from its condition."""
    failures, judged = data.get("failures", {}), []
    for node in broken:
        # a test may have several entries (one per outcome it can end with): the first that allows it
        named = [(e, check(e, failures.get(node))) for e in entries if e.names(mode, node)]
        entry, found = next((item for item in named if item[1] is None), named[0] if named else (None, None))
        judged.append((node, entry, found))
    return judged


def not_allowed(runs: dict[str, dict], entries: list[Entry], baseline: set[str] | None) -> dict[str, list[str]]:
    """Per adapter mode, the tests that pass plainly and fail under the adapter with no entry allowing it."""
    passing, _ = _passing(runs, baseline)
    found: dict[str, list[str]] = {}
    for mode, data in runs.items():
        if mode == PLAIN or passing is None:
            continue
        broken = sorted(node for node in passing if data["outcomes"].get(node) in FAILED)
        bad = [node for node, entry, differs in _judge(mode, data, broken, entries) if entry is None or differs]
        if bad:
            found[mode] = bad
    return found


def run_again(mode: str, data: dict, nodes: list[str], run: Callable[..., dict[str, Any]]) -> dict:
    """``data`` with each of ``nodes`` that passes when run again alone (``run(paths, label=...)``) counted as passed.

    A difference the adapter causes fails each time; a test that fails once and passes in a second
    process (a spawned process killed by a signal on a loaded machine: ``ProcessExitedException``) is
    kept apart from the differences, listed with its first failure's cause under ``passed_again``.
    """
    prefix = "tests/tests_pytorch/"  # node ids are relative to Lightning's root; pytest runs from tests_pytorch
    again = run([node.removeprefix(prefix) for node in nodes], label=f"{mode}-again")
    outcomes, causes, failures = dict(data["outcomes"]), dict(data["causes"]), dict(data.get("failures", {}))
    passed_again = dict(data.get("passed_again", {}))
    for node in nodes:
        if again["outcomes"].get(node) == "passed":
            passed_again[node] = causes.pop(node, "")
            outcomes[node] = "passed"
            failures.pop(node, None)
    return {**data, "outcomes": outcomes, "causes": causes, "failures": failures, "passed_again": passed_again}


def compare(runs: dict[str, dict], entries: list[Entry], baseline: set[str] | None = None) -> tuple[list[str], int]:
    """The summary's lines, and how many differences are not allowed.

    What passes plainly is ``baseline`` where given, else the ``off`` run's passed tests.
    """
    lines = ["# Lightning's tests with StepResultAdapter()", ""]
    lines += ["| mode | tests | passed | failed | error | skipped | xfailed | trainers (with adapter) | minutes |"]
    lines += ["| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mode, data in runs.items():
        c = Counter(data["outcomes"].values())
        lines.append(
            f"| {mode} | {len(data['outcomes'])} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} "
            f"| {c['xfailed']} | {data['trainers_built']} ({data['trainers_with_adapter']}) | {data['seconds'] / 60:.1f} |"
        )
    unexpected = 0
    passing, source = _passing(runs, baseline)
    for mode, data in runs.items():
        if mode == PLAIN:
            continue
        if data["trainers_with_adapter"] != data["trainers_built"] or data["trainers_built"] == 0:
            unexpected += 1
            lines += ["", f"{mode}: {data['trainers_built']} trainers built, only {data['trainers_with_adapter']} "
                      f"with the adapter ({data['not_injected'][:5]})"]  # fmt: skip
        if passing is None:
            continue
        outcomes = data["outcomes"]
        broken = sorted(node for node in passing if outcomes.get(node) in FAILED)
        not_run = sorted(node for node in passing if outcomes.get(node) not in (*FAILED, "passed"))
        fixed = sorted(node for node, o in outcomes.items() if o == "passed" and node not in passing and
                       (baseline is not None or runs[PLAIN]["outcomes"].get(node) in FAILED))  # fmt: skip
        judged = _judge(mode, data, broken, entries)
        bad = [item for item in judged if item[1] is None or item[2] is not None]
        unexpected += len(bad) + len(not_run)
        lines += ["", f"## {mode}: {len(broken)} pass {source} and fail under the adapter, {len(bad)} not allowed", ""]
        for node, entry, found in judged:
            if entry is None:
                lines.append(f"- `{node}` (FAIL, not on the allow-list): {data['causes'].get(node, '')}")
            elif found is None:
                lines.append(f"- `{node}` (allowed by line {entry.line}, `{entry.condition}`: {entry.reason})")
            else:
                lines.append(
                    f"- `{node}` (FAIL, for another reason than allow-list line {entry.line} allows,"
                    f" `{entry.condition}`: {found})"
                )
        passed_again = data.get("passed_again", {})
        if passed_again:
            lines += ["", f"{len(passed_again)} failed once and passed when run again alone (not counted):"]
            lines += [f"- `{node}`: the first time, {cause}" for node, cause in sorted(passed_again.items())]
        if not_run:
            lines += ["", f"{len(not_run)} pass {source} and did not pass or fail here (FAIL):"]
            lines += [f"- `{node}`: {outcomes.get(node, 'not run')}" for node in not_run]
        unused = [e for e in entries if ("all" in e.modes or mode in e.modes)
                  and not any(e.names(mode, node) for node in broken)
                  and any(e.names(mode, node) for node in outcomes)]  # fmt: skip
        if unused:
            lines += [
                "",
                f"{len(unused)} allow-list entries name tests that ran here and none failed (no longer needed?):",
            ]
            lines += [f"- line {e.line}: `{e.pattern}`" for e in unused]
        if fixed:
            lines += [
                "",
                f"{len(fixed)} fail plainly and pass under the adapter: " + ", ".join(f"`{n}`" for n in fixed),
            ]
    return lines, unexpected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--tests", type=Path, help="a folder prepare.py wrote")
    source.add_argument(
        "--lightning",
        type=Path,
        help="a clone of Lightning-AI/pytorch-lightning, or a git archive of one (prepared into --out/lightning)",
    )
    parser.add_argument("--commit", default=DEFAULT_COMMIT, help="with --lightning: the commit to test against")
    parser.add_argument("--modes", default="off,default,log_loss", help="comma-separated: off, default, log_loss")
    parser.add_argument("--subset", choices=sorted(SUBSETS), default="full", help="which tests (default full)")
    parser.add_argument(
        "--paths",
        nargs="+",
        help="instead of the subset, these paths under tests/tests_pytorch; a --baseline is read for them alone",
    )
    parser.add_argument("--baseline", type=Path, help="the node ids that pass plainly (instead of an off run)")
    parser.add_argument("--write-baseline", type=Path, help="after the off run: write the node ids that passed here")
    parser.add_argument(
        "--package", type=Path, help="a lightning_step_types checkout to test instead of the installed one"
    )
    parser.add_argument("--out", type=Path, default=Path("conformance-results"), help="where the reports go")
    parser.add_argument("--allow-list", type=Path, default=HERE / "allowlist.txt")
    parser.add_argument(
        "--no-reruns",
        action="store_true",
        help="do not rerun a failed test marked flaky (Lightning's CI reruns them up to 3 times; a failure"
        " that the adapter causes fails every time, so this saves time when many fail)",
    )
    parser.add_argument("--compare-only", action="store_true", help="compare the MODE.json already in --out")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -k or --deselect")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    modes = args.modes.split(",")
    runs: dict[str, dict] = {}
    if args.compare_only:
        runs = {m: json.loads((args.out / f"{m}.json").read_text(encoding="utf-8")) for m in modes}
    else:
        tests_root = args.tests if args.tests else args.out / "lightning"
        if args.lightning and not (tests_root / "tests").exists():
            prepare(args.lightning, args.commit, tests_root)
        tests = tests_root / "tests" / "tests_pytorch"
        if not tests.is_dir():
            raise SystemExit(f"{tests} is missing: run conformance/prepare.py first")
        for mode in modes:
            extra = (["-p", "no:rerunfailures"] if args.no_reruns else []) + args.pytest_args
            runs[mode] = run_mode(mode, tests, args.out, args.package, args.paths or SUBSETS[args.subset], extra)
    entries = load_allow_list(args.allow_list)
    if args.write_baseline:
        if PLAIN not in runs:
            raise SystemExit(f"--write-baseline needs the plain run: --modes {PLAIN}")
        print(f"{args.write_baseline}: {write_baseline(args.write_baseline, runs[PLAIN])} tests pass plainly")
    baseline = read_baseline(args.baseline, args.paths) if args.baseline else None
    plain_results = args.out / f"{PLAIN}.json"
    if baseline is None and PLAIN not in runs and plain_results.exists():  # from an earlier run into --out
        runs = {PLAIN: json.loads(plain_results.read_text(encoding="utf-8")), **runs}
    if baseline is None and PLAIN not in runs:
        raise SystemExit(f"no plain run to compare with: run --modes {PLAIN} into {args.out} first, or give --baseline")
    if not args.compare_only:
        for mode, nodes in not_allowed(runs, entries, baseline).items():
            rerun = partial(run_mode, mode, tests, args.out, args.package, extra=extra, ignored=[])
            runs[mode] = run_again(mode, runs[mode], nodes, rerun)
    lines, unexpected = compare(runs, entries, baseline)
    summary = args.out / "summary.md"
    summary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"\n{summary}: {unexpected} unexpected difference(s)")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
