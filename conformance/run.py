"""Run Lightning's own tests plainly and with ``StepResultAdapter()`` in every Trainer, and compare.

    python conformance/run.py --tests DIR [--modes off,default,log_loss] [--package PATH] [--out DIR]
    python conformance/run.py --lightning CLONE [--commit REV] ...   # prepares DIR first (prepare.py)

``DIR`` is the output of ``prepare.py`` (it holds ``tests/tests_pytorch``). Each mode runs the subset
below in a pytest process of its own, one after the other, from ``tests/tests_pytorch`` as
Lightning's CI runs it, with ``step_adapter_plugin`` loaded. ``lightning_step_types`` is the one
the active Python imports, or the checkout given with ``--package`` (put first on ``PYTHONPATH``).

Each run leaves ``MODE.json`` (every test's outcome), ``MODE.xml`` (junit) and ``MODE.log`` in
``--out``; ``summary.md`` gives the counts and every test that passes plainly and fails under the
adapter. A mode left out of ``--modes`` is not run again: ``off.json`` from an earlier run into the
same ``--out`` is the baseline (``--modes default,log_loss`` reruns the adapter alone). The exit status is 1 when such a test is not on the allow-list (``allowlist.txt``), or when
a Trainer was built without the adapter in an adapter mode; 0 otherwise.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from prepare import DEFAULT_COMMIT, prepare  # noqa: E402

# Relative to tests/tests_pytorch: the parts of Lightning's suite that exercise what the adapter
# touches (loops, logging, checkpoints and resume, callbacks, hooks, the Trainer's flags).
SUBSET = [
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
]
# downloads every released Lightning's checkpoints
IGNORED = ["checkpointing/test_legacy_checkpoints.py"]
PLAIN = "off"
FAILED = ("failed", "error")


def load_allow_list(path: Path) -> list[tuple[str, str, str]]:
    """``(modes, node id pattern, reason)`` per entry; a line is ``MODES PATTERN  # reason``."""
    entries = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        rule, _, reason = line.partition("#")
        fields = rule.split()
        if len(fields) != 2 or not reason.strip():
            raise SystemExit(f"{path}:{number}: expected 'MODES NODE_ID_PATTERN  # reason', got {raw!r}")
        modes, pattern = fields
        entries.append((modes, pattern, reason.strip()))
    return entries


def allowed(entries: list[tuple[str, str, str]], mode: str, node_id: str) -> str | None:
    for modes, pattern, reason in entries:
        matches = node_id == pattern or fnmatch.fnmatchcase(node_id, pattern)
        if (modes == "all" or mode in modes.split(",")) and matches:
            return reason
    return None


def run_mode(mode: str, tests: Path, out: Path, package: Path | None, extra: list[str]) -> dict:
    results, junit, log = out / f"{mode}.json", out / f"{mode}.xml", out / f"{mode}.log"
    env = dict(os.environ, STEP_ADAPTER=mode, STEP_ADAPTER_RESULTS=str(results), PYTHONDONTWRITEBYTECODE="1")
    paths = [str(HERE)] + ([str(package.resolve())] if package else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])
    command = [
        sys.executable, "-m", "pytest", *SUBSET, *(f"--ignore={path}" for path in IGNORED),
        "-p", "step_adapter_plugin", "-p", "no:cacheprovider", "-q", "-rA", "--color=no",
        "--timeout=300", f"--junitxml={junit}", *extra,
    ]  # fmt: skip
    print(f"== {mode}: {' '.join(command)}", flush=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as stream:
        subprocess.run(command, cwd=tests, env=env, stdout=stream, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    if not results.exists():
        raise SystemExit(f"{mode}: pytest wrote no results; see {log}")
    data = json.loads(results.read_text(encoding="utf-8"))
    data["seconds"] = round(seconds)
    results.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    print(f"   {mode}: {_count_line(data)}; {seconds / 60:.1f} min", flush=True)
    return data


def _count_line(data: dict) -> str:
    counts = Counter(data["outcomes"].values())
    parts = [f"{len(data['outcomes'])} tests"] + [f"{counts[k]} {k}" for k in sorted(counts)]
    return (
        ", ".join(parts)
        + f"; {data['trainers_built']} trainers built, {data['trainers_with_adapter']} with the adapter"
    )


def compare(runs: dict[str, dict], entries: list[tuple[str, str, str]]) -> tuple[list[str], int]:
    """The summary's lines, and how many failures are not on the allow-list."""
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
    plain = runs.get(PLAIN)
    for mode, data in runs.items():
        if mode == PLAIN:
            continue
        if data["trainers_with_adapter"] != data["trainers_built"] or data["trainers_built"] == 0:
            unexpected += 1
            lines += ["", f"{mode}: {data['trainers_built']} trainers built, only {data['trainers_with_adapter']} "
                      f"with the adapter ({data['not_injected'][:5]})"]  # fmt: skip
        if plain is None:
            continue
        broken = sorted(
            node for node, outcome in data["outcomes"].items()
            if outcome in FAILED and plain["outcomes"].get(node) == "passed"
        )  # fmt: skip
        fixed = sorted(
            node for node, outcome in data["outcomes"].items()
            if outcome == "passed" and plain["outcomes"].get(node) in FAILED
        )  # fmt: skip
        listed = [(node, allowed(entries, mode, node)) for node in broken]
        new = [node for node, reason in listed if reason is None]
        unexpected += len(new)
        lines += ["", f"## {mode}: {len(broken)} pass plainly and fail under the adapter, {len(new)} not allowed", ""]
        for node, reason in listed:
            mark = f"allowed: {reason}" if reason else "FAIL"
            lines.append(f"- `{node}` ({mark}): {data['causes'].get(node, '')}")
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
        "--lightning", type=Path, help="a clone of Lightning-AI/pytorch-lightning (prepared into --out)"
    )
    parser.add_argument("--commit", default=DEFAULT_COMMIT, help="with --lightning: the commit to test against")
    parser.add_argument("--modes", default="off,default,log_loss", help="comma-separated: off, default, log_loss")
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
            runs[mode] = run_mode(mode, tests, args.out, args.package, extra)
    plain_results = args.out / f"{PLAIN}.json"
    if PLAIN not in runs and plain_results.exists():  # the baseline from an earlier run into the same --out
        runs = {PLAIN: json.loads(plain_results.read_text(encoding="utf-8")), **runs}
    if PLAIN not in runs:
        raise SystemExit(f"no plain run to compare with: run --modes {PLAIN} into {args.out} first")
    lines, unexpected = compare(runs, load_allow_list(args.allow_list))
    summary = args.out / "summary.md"
    summary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"\n{summary}: {unexpected} unexpected difference(s)")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
