"""Every time limit in the tests comes from ``limits.hang_limit``: none is a number of its own.

A number written at a call (``timeout=120``, ``limit=40``, ``signal.alarm(30)``, ``thread.join(10)``,
``timedelta(seconds=5)`` as a deadline, ``job.seconds < 60``) or in a module constant named for a
limit (``RUN_TIMEOUT = 600``) is a limit that nobody scales for a loaded machine.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
LIMIT_KEYWORDS = {"timeout", "limit", "deadline"}
LIMIT_NAMES = ("TIMEOUT", "LIMIT", "WATCHDOG", "DEADLINE")


def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value != 0  # alarm(0) cancels, a 0 s limit is no limit
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "timedelta":
        return any(_number(argument) for argument in [*node.args, *(k.value for k in node.keywords)])
    return False


def written_limits(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            found += [f"{where} {k.arg}=" for k in node.keywords if k.arg in LIMIT_KEYWORDS and _number(k.value)]
            if name in ("alarm", "join", "wait") and node.args and _number(node.args[0]):
                found.append(f"{where} {name}(...)")
        elif isinstance(node, ast.Assign) and _number(node.value):
            found += [
                f"{where} {t.id} =" for t in node.targets if isinstance(t, ast.Name) and t.id.endswith(LIMIT_NAMES)
            ]
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "seconds":
            if any(isinstance(op, (ast.Lt, ast.LtE)) for op in node.ops) and any(map(_number, node.comparators)):
                found.append(f"{where} .seconds < ...")
    return found


def test_every_time_limit_in_the_tests_comes_from_limits() -> None:
    files = sorted(path for path in TESTS.rglob("*.py") if path.name != "limits.py")
    assert len(files) > 50
    assert [limit for path in files for limit in written_limits(path)] == []


def test_the_check_finds_each_kind_of_written_limit(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "RUN_TIMEOUT = 600\n"
        "subprocess.run(command, timeout=120)\n"
        "launch(folder, runs, limit=40.0)\n"
        "signal.alarm(30)\n"
        "thread.join(10)\n"
        "settings(deadline=timedelta(seconds=5))\n"
        "assert job.seconds < 60\n"
        "signal.alarm(0)\n"
        "subprocess.run(command, timeout=hang_limit(idle_s=15))\n"
    )
    assert written_limits(sample) == [
        "sample.py:1 RUN_TIMEOUT =",
        "sample.py:2 timeout=",
        "sample.py:3 limit=",
        "sample.py:4 alarm(...)",
        "sample.py:5 join(...)",
        "sample.py:6 deadline=",
        "sample.py:7 .seconds < ...",
    ]
