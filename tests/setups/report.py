"""The long mode's command and report: how many setups ran, how many failed, and the failures by family.

``python -m tests.setups --seed 7 --count 5000`` draws setups ``0..4999`` of seed 7 (the same ones on
every machine), checks them two at a time, prints each failure as it comes, then a summary: the
outcomes, and each family of failures with its size, what its setups have in common (every field
all of them share, where fewer than half of all setups have that value), one example and the
command that reruns it. ``--shrink`` shrinks one example of each family to its simplest form and
prints it as the ``Setup(...)`` a regression test holds.
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

from setups.families import known_family
from setups.oracle import check
from setups.run import Checked, run_setups
from setups.shrink import shrink
from setups.space import Setup, shown

__all__ = ["features", "in_common", "main", "summary"]


def features(setup: Setup) -> dict[str, Any]:
    """The setup's fields, flattened (``data.loader``), with one ``callbacks.<kind>`` per callback kind."""
    found: dict[str, Any] = {}
    for part in fields(setup):
        value = getattr(setup, part.name)
        if is_dataclass(value):
            for item in fields(value):
                found[f"{part.name}.{item.name}"] = getattr(value, item.name)
        elif part.name == "callbacks":
            kinds = collections.Counter(spec.kind for spec in value)
            for kind in ("early_stopping", "lr_monitor", "swa", "accumulation_scheduler", "batch_size_finder"):
                found[f"callbacks.{kind}"] = kinds[kind] > 0
            for kind in ("lr_finder", "pruning", "model_summary", "weight_averaging", "timer", "lambda", "user"):
                found[f"callbacks.{kind}"] = kinds[kind] > 0
            for spec in value:
                if spec.kind == "user":
                    for name, option in spec.options:
                        found[f"callbacks.user.{name}"] = found.get(f"callbacks.user.{name}", ()) + (option,)
        else:
            found[part.name] = value
    return found


def in_common(members: list[Setup], everyone: list[Setup]) -> list[str]:
    """``field=value`` for each field all ``members`` share, where fewer than half of ``everyone`` have that value."""
    shared = [features(setup) for setup in members]
    overall = [features(setup) for setup in everyone]
    found = []
    for name, value in shared[0].items():
        if all(other.get(name) == value for other in shared[1:]):
            share = sum(other.get(name) == value for other in overall) / len(overall)
            if share < 0.5:
                found.append(f"{name}={value!r}")
    return found


def summary(checked: list[Checked], seconds: float, cpu_seconds: float, own_cpu_seconds: float = 0.0) -> list[str]:
    """The report's lines: ``cpu_seconds`` the fits' processes used, ``own_cpu_seconds`` this one (the comparisons)."""
    outcomes = collections.Counter(item.verdict.outcome for item in checked)
    failed = [item for item in checked if item.verdict.failed]
    count = max(len(checked), 1)
    lines = [
        f"{len(checked)} setups in {seconds:.0f} s ({len(checked) / max(seconds, 1e-9):.2f}/s;"
        f" {cpu_seconds / count:.2f} CPU s each in the fits' processes, {own_cpu_seconds / count:.2f} in this one),"
        f" {len(failed)} failed",
        "outcomes: " + ", ".join(f"{name} {number}" for name, number in outcomes.most_common()),
    ]
    families: dict[str, list[Checked]] = collections.defaultdict(list)
    for item in failed:  # a known family by its name, a new one by its verdict's
        known = known_family(item.verdict, item.setup)
        families[f"known: {known}" if known else f"NEW: {item.verdict.family}"].append(item)
    everyone = [item.setup for item in checked]
    for family, members in sorted(families.items(), key=lambda entry: -len(entry[1])):
        first = members[0]
        lines.append(f"\n{len(members):4d}  {family}")
        common = in_common([item.setup for item in members], everyone) if len(members) > 1 else []
        if common:
            lines.append("      in common: " + ", ".join(common))
        processes = f" --processes {first.setup.processes}" if first.setup.processes > 1 else ""
        lines.append(
            f"      first: setup {first.index}: python -m tests.setups --seed {first.seed}{processes} --index {first.index}"
        )
    return lines


def _show(item: Checked) -> str:
    verdict = item.verdict
    known = known_family(verdict, item.setup)
    family = f"{verdict.family} (known: {known})" if known else f"{verdict.family} (NEW)"
    lines = [f"setup {item.index}: {family}", f"  {shown(item.setup)}"]
    lines += [f"  plan: {verdict.plan}"] if verdict.plan else []
    lines += [f"  {line}" for line in verdict.detail.splitlines()]
    return "\n".join(lines)


def _shrunk(item: Checked, processes: int) -> str:
    from setups.choices import Choices
    from setups.space import draw_setup

    choices = Choices(f"{item.seed}:{processes}:{item.index}")
    draw_setup(choices, processes)
    family = item.verdict.family
    root = Path(f"/tmp/generated-setups-shrink-{item.seed}-{item.index}")

    def fails(setup: Setup) -> bool:
        return check(setup, root).family == family

    setup, _, checks = shrink(choices.made, fails, processes)
    return f"shrunk in {checks} checks:\n  {shown(setup)}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.setups", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", default="7", help="the seed the setups are drawn from (default 7)")
    parser.add_argument("--count", type=int, default=100, help="how many setups (default 100)")
    parser.add_argument("--start", type=int, default=0, help="the first setup's index (default 0)")
    parser.add_argument("--index", type=int, action="append", default=[], help="check this setup only (repeatable)")
    parser.add_argument("--lanes", type=int, default=2, help="setups checked at a time (default 2)")
    parser.add_argument("--processes", type=int, choices=(1, 2), default=1, help="2: the DDP tier")
    parser.add_argument("--shrink", action="store_true", help="shrink one example of each family")
    parser.add_argument("--quiet", action="store_true", help="print the summary only")
    args = parser.parse_args(argv)
    indices = args.index or list(range(args.start, args.start + args.count))
    started, own = time.perf_counter(), time.process_time()

    def each(item: Checked) -> None:
        if item.verdict.failed and not args.quiet:
            print(_show(item), flush=True)

    checked = run_setups(str(args.seed), indices, args.lanes, args.processes, each)
    cpu = sum(item.verdict.cpu_seconds for item in checked)
    print("\n".join(summary(checked, time.perf_counter() - started, cpu, time.process_time() - own)))
    if args.shrink:
        firsts: dict[str, Checked] = {}
        for item in checked:
            if item.verdict.failed:
                firsts.setdefault(item.verdict.family, item)
        for family, item in firsts.items():
            print(f"\n{family}\n  {_shrunk(item, args.processes)}", flush=True)
    return 1 if any(item.verdict.failed and known_family(item.verdict, item.setup) is None for item in checked) else 0
