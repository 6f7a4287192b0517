"""A pytest plugin that adds ``StepResultAdapter()`` to every ``pytorch_lightning.Trainer``.

Loaded with ``-p step_adapter_plugin`` (this folder on ``PYTHONPATH``), it wraps
``Trainer.__init__`` so that the callbacks argument gets one more callback, the way a user adds it
to existing code: ``Trainer(callbacks=[..., StepResultAdapter()])``. ``pytorch_lightning.Trainer``
and ``pytorch_lightning.trainer.trainer.Trainer`` are the same class, so every import path and
every subclass that calls ``super().__init__`` goes through the wrapper.

The mode comes from ``--step-adapter=off|default|log_loss`` or, when the option is absent, the
environment variable ``STEP_ADAPTER``:

- ``off``: nothing is added (the plain baseline); trainers are still counted.
- ``default``: ``StepResultAdapter()``.
- ``log_loss``: ``StepResultAdapter(log_loss=True)``.

The Trainer wrapped is ``pytorch_lightning``'s, or with ``STEP_ADAPTER_FLAVOUR=lightning.pytorch``
the ``lightning`` package's (a project that imports ``lightning.pytorch``), with the library's
adapter of that flavour.

At the end of the session the plugin prints how many trainers were built and how many hold an
adapter, and, with ``STEP_ADAPTER_RESULTS=path.json``, writes the counts and every test's outcome
(with the first line of each failure) to that file for ``run.py`` to compare. For each failed test
it also records what the failure was, so that ``run.py`` can check an allow-list entry's condition
against it (``failure_record``): the exception's class and its bases, its message, the exception a
spawned process raised (torch's ``ProcessRaisedException``), and, when the test failed on an
``assert a == b`` that pytest rewrote, what differs between the two sides (``differences``: a dict
key, a set member or a list item on one side only, or a value).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any

import pytest

MODES = ("off", "default", "log_loss")
_ENV_MODE = "STEP_ADAPTER"
_ENV_RESULTS = "STEP_ADAPTER_RESULTS"
_ENV_FLAVOUR = "STEP_ADAPTER_FLAVOUR"
# the Lightning package whose Trainer is wrapped -> the library's module of that flavour
FLAVOURS = {"pytorch_lightning": "pytorch_lightning", "lightning.pytorch": "lightning_pytorch"}
# at most this many differences are recorded for one comparison; past it the record says it is cut
_MAX_DIFFERENCES = 40
# the alignment of two lists compares every item with every item: larger lists are compared by position
_MAX_ALIGNED_CELLS = 40_000
_REPR_CHARS = 200


class _Injector:
    """Wraps ``Trainer.__init__`` for one session and counts what it did."""

    def __init__(self, mode: str, flavour: str = "pytorch_lightning") -> None:
        if mode not in MODES:
            raise pytest.UsageError(f"--step-adapter / {_ENV_MODE} must be one of {MODES}, got {mode!r}")
        if flavour not in FLAVOURS:
            raise pytest.UsageError(f"{_ENV_FLAVOUR} must be one of {sorted(FLAVOURS)}, got {flavour!r}")
        self.mode = mode
        self.flavour = flavour
        self.trainers_built = 0
        self.trainers_with_adapter = 0
        self.not_injected: list[str] = []  # why an argument was left as it was
        self._trainer_class: Any = None
        self._original_init: Any = None

    def _adapter_class(self) -> Any:
        return importlib.import_module(f"lightning_step_types.{FLAVOURS[self.flavour]}").StepResultAdapter

    def new_adapter(self) -> Any:
        adapter = self._adapter_class()
        return adapter(log_loss=True) if self.mode == "log_loss" else adapter()

    def with_adapter(self, callbacks: Any) -> Any:
        """The callbacks argument as a user who adds the adapter writes it."""
        callback_class = importlib.import_module(f"{self.flavour}.callbacks").Callback
        adapter_class = self._adapter_class()
        if callbacks is None:
            return [self.new_adapter()]
        if isinstance(callbacks, callback_class):
            return [callbacks, self.new_adapter()]
        if isinstance(callbacks, list):
            # Lightning keeps the list it is given as `trainer.callbacks` and appends its own
            # defaults to it, so a test may read its list afterwards: append in place, as
            # Lightning does. A list that already holds an adapter (the same list passed to a
            # second Trainer) keeps the one it has, as it keeps its other callbacks.
            if not any(isinstance(callback, adapter_class) for callback in callbacks):
                callbacks.append(self.new_adapter())
            return callbacks
        self.not_injected.append(f"callbacks={callbacks!r}")
        return callbacks  # anything else Lightning refuses on its own; leave the error to it

    def install(self) -> None:
        trainer_class = importlib.import_module(self.flavour).Trainer
        adapter_class = self._adapter_class()
        original = trainer_class.__init__
        injector = self

        @functools.wraps(original)
        def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
            if injector.mode != "off":
                kwargs["callbacks"] = injector.with_adapter(kwargs.get("callbacks"))
            original(trainer, *args, **kwargs)
            injector.trainers_built += 1
            if any(isinstance(callback, adapter_class) for callback in trainer.callbacks):
                injector.trainers_with_adapter += 1

        self._trainer_class, self._original_init = trainer_class, original
        trainer_class.__init__ = __init__

    def uninstall(self) -> None:
        if self._trainer_class is not None:
            self._trainer_class.__init__ = self._original_init

    def counts(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "flavour": self.flavour,
            "trainers_built": self.trainers_built,
            "trainers_with_adapter": self.trainers_with_adapter,
            "not_injected": self.not_injected,
        }


class _Recorder:
    """Every test's outcome by node id, for ``run.py`` to compare runs, and what each failure was."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.causes: dict[str, str] = {}
        self.failures: dict[str, dict[str, Any]] = {}
        # the test's last failing `assert x == y` that pytest rewrote: its frame and what differed
        self._comparison: tuple[FrameType | None, dict[str, Any]] | None = None

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._comparison = None

    @pytest.hookimpl
    def pytest_assertrepr_compare(self, op: str, left: object, right: object) -> None:
        """Called for the first false comparison of a failing rewritten ``assert``; adds no text."""
        self._comparison = (_asserting_frame(), comparison_record(op, left, right))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        report = yield
        if report.failed and call.excinfo is not None and item.nodeid not in self.failures:
            comparison = None
            if self._comparison is not None and isinstance(call.excinfo.value, AssertionError):
                frame, record = self._comparison
                if frame is not None and _raising_frame(call.excinfo.tb) is frame:
                    comparison = record
            record = failure_record(call.excinfo.value, comparison)
            record["statement"] = _statement(call.excinfo)
            self.failures[item.nodeid] = {"phase": call.when, **record}
        if call.when == "teardown":
            self._comparison = None  # drops the frame (and the test's locals) it holds
        return report

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = _outcome(report)
        if outcome is None:
            return
        previous = self.outcomes.get(report.nodeid)
        if previous in ("failed", "error"):  # a teardown error after a failed call keeps the failure
            return
        self.outcomes[report.nodeid] = outcome
        if outcome in ("failed", "error"):
            self.causes[report.nodeid] = _first_line(report)
        elif outcome == "passed":  # a flaky test's rerun passed
            self.failures.pop(report.nodeid, None)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[report.nodeid] = "error"
            self.causes[report.nodeid] = _first_line(report)


def _asserting_frame() -> FrameType | None:
    """The frame of the ``assert`` whose comparison pytest is explaining (outside pytest and pluggy)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename.replace(os.sep, "/")
        if "/_pytest/" not in name and "/pluggy/" not in name and name != __file__.replace(os.sep, "/"):
            return frame
        frame = frame.f_back
    return None


def _statement(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """The source of the statement that raised (the traceback's last entry)."""
    try:
        return " ".join(line.strip() for line in str(excinfo.traceback[-1].statement).splitlines())[:500]
    except Exception:  # no source at hand (compiled code, a removed file)
        return ""


def _raising_frame(tb: Any) -> FrameType | None:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None else None


def failure_record(error: BaseException, comparison: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``run.py`` checks an allow-list condition against: the exception, and the comparison."""
    kind = type(error)
    record: dict[str, Any] = {
        "exception": f"{kind.__module__}.{kind.__qualname__}",
        "bases": [cls.__name__ for cls in kind.__mro__],
        "message": str(error)[:4000],
        "statement": "",
        "spawned": None,
        "comparison": comparison,
    }
    if kind.__name__ == "ProcessRaisedException":  # torch.multiprocessing: the process's traceback, as text
        record["spawned"] = spawned_exception(str(error))
    return record


def spawned_exception(text: str) -> dict[str, str] | None:
    """The exception a spawned process raised, and the statement that raised it, from the traceback text."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    source: list[str] = []
    for i in range(starts[-1] + 1, len(lines)):
        line = lines[i]
        if line.lstrip().startswith('File "'):
            source = []
        elif line and line[0].isspace():
            if line.strip() and set(line.strip()) - set("^~"):  # not the carets under the statement
                source.append(line.strip())
        elif line:
            name, _, message = line.partition(":")
            rest = "\n".join([message.strip(), *lines[i + 1 :]]).strip()
            return {
                "exception": name.strip(),
                "name": name.strip().rpartition(".")[2],
                "message": rest[:4000],
                "statement": " ".join(source)[:500],
            }
    return None


def comparison_record(op: str, left: object, right: object) -> dict[str, Any]:
    record: dict[str, Any] = {"op": op, "left": _short(left), "right": _short(right)}
    if op == "==":
        try:
            record["differences"], record["complete"] = differences(left, right)
        except Exception as error:  # never hide the test's own failure; the record says it is incomplete
            record["differences"], record["complete"] = [], False
            record["error"] = _short(error)
    return record


def differences(left: object, right: object) -> tuple[list[dict[str, Any]], bool]:
    """What differs between ``left`` and ``right``, and whether that list is complete (not cut).

    Each difference is ``{"path", "kind": "extra", "side", "of", "names", "repr"}`` for a dict key
    (``of: "key"``), a set member (``"member"``) or a list or tuple item (``"item"``) that only one
    side holds (``names``: the string itself, or a class's name, or the class name of an instance,
    or a mapping's ``"name"`` entry), or ``{"path", "kind": "value", "left", "right"}``. Lists are
    aligned first (the longest common subsequence), so one item more in a list is one difference;
    between aligned items, those that differ only by keys are paired, and where the rest are as
    many on each side, they are paired in order (each pair's differences are recorded). A path
    starts at ``$`` (the compared value) and adds ``[key]`` or ``[index]`` (the left side's index).
    """
    found: list[dict[str, Any]] = []
    complete = _differences(left, right, "$", found)
    return found, complete


def _equal(left: object, right: object) -> bool:
    if left is right:
        return True
    try:
        result = left == right
        if isinstance(result, bool):
            return result
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
            return left.shape == right.shape and bool(torch.equal(left, right))
        return bool(result)
    except Exception:
        return False


def _is_sequence(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _differences(left: object, right: object, path: str, found: list[dict[str, Any]]) -> bool:
    """Appends what differs to ``found``; False once ``_MAX_DIFFERENCES`` cut it."""
    if len(found) >= _MAX_DIFFERENCES:
        return False
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        for key in left:
            if key not in right:
                found.append(_extra(f"{path}[{key!r}]", "left", "key", key))
        for key in right:
            if key not in left:
                found.append(_extra(f"{path}[{key!r}]", "right", "key", key))
        for key in left:
            if key in right and not _equal(left[key], right[key]):
                if not _differences(left[key], right[key], f"{path}[{key!r}]", found):
                    return False
        return len(found) <= _MAX_DIFFERENCES
    if isinstance(left, (set, frozenset)) and isinstance(right, (set, frozenset)):
        for member in left - right:
            found.append(_extra(path, "left", "member", member))
        for member in right - left:
            found.append(_extra(path, "right", "member", member))
        return len(found) <= _MAX_DIFFERENCES
    if _is_sequence(left) and _is_sequence(right):
        return _sequence_differences(list(left), list(right), path, found)  # type: ignore[call-overload]
    found.append({"path": path, "kind": "value", "left": _short(left), "right": _short(right)})
    return len(found) <= _MAX_DIFFERENCES


def _sequence_differences(left: list[Any], right: list[Any], path: str, found: list[dict[str, Any]]) -> bool:
    if len(left) == len(right) and all(_similar(a, b) for a, b in zip(left, right)):
        pairs = list(zip(range(len(left)), range(len(right))))
    elif len(left) * len(right) <= _MAX_ALIGNED_CELLS:
        # the exact common subsequence first, then items that differ only by keys paired within each gap
        pairs = []
        start_left = start_right = 0
        for i, j in [*_align(left, right, _equal), (len(left), len(right))]:
            gap = _align(left[start_left:i], right[start_right:j], _similar)
            rest_left = [a for a in range(i - start_left) if a not in {a for a, _ in gap}]
            rest_right = [b for b in range(j - start_right) if b not in {b for _, b in gap}]
            if len(rest_left) == len(rest_right):  # as many items on each side: they changed in place
                gap += zip(rest_left, rest_right)
            pairs += [(start_left + a, start_right + b) for a, b in gap]
            if i < len(left):
                pairs.append((i, j))
            start_left, start_right = i + 1, j + 1
    else:
        pairs = list(zip(range(min(len(left), len(right))), range(min(len(left), len(right)))))
    paired_left = {i for i, _ in pairs}
    paired_right = {j for _, j in pairs}
    for i, item in enumerate(left):
        if i not in paired_left:
            found.append(_extra(f"{path}[{i}]", "left", "item", item))
    for j, item in enumerate(right):
        if j not in paired_right:
            found.append(_extra(f"{path}[{j}]", "right", "item", item))
    for i, j in pairs:
        if len(found) > _MAX_DIFFERENCES:
            return False
        if not _equal(left[i], right[j]) and not _differences(left[i], right[j], f"{path}[{i}]", found):
            return False
    return len(found) <= _MAX_DIFFERENCES


def _similar(left: object, right: object) -> bool:
    """Equal, or two mappings (or lists of them) that share a key and differ only by keys one side holds."""
    if _equal(left, right):
        return True
    if type(left) is not type(right) or not isinstance(left, (Mapping, list, tuple)):
        return False
    if isinstance(left, Mapping) and isinstance(right, Mapping) and not set(left) & set(right):
        return False
    found: list[dict[str, Any]] = []
    complete = _differences(left, right, "$", found)
    return complete and all(d["kind"] == "extra" and d["of"] == "key" for d in found)


def _align(left: list[Any], right: list[Any], same: Callable[[Any, Any], bool]) -> list[tuple[int, int]]:
    """The index pairs of a longest common subsequence of ``left`` and ``right`` under ``same``."""
    if not left or not right:
        return []
    rows, cols = len(left), len(right)
    length = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        for j in range(cols - 1, -1, -1):
            if same(left[i], right[j]):
                length[i][j] = length[i + 1][j + 1] + 1
            else:
                length[i][j] = max(length[i + 1][j], length[i][j + 1])
    pairs, i, j = [], 0, 0
    while i < rows and j < cols:
        if same(left[i], right[j]) and length[i][j] == length[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif length[i + 1][j] >= length[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _extra(path: str, side: str, of: str, value: object) -> dict[str, Any]:
    return {"path": path, "kind": "extra", "side": side, "of": of, "names": _names(value), "repr": _short(value)}


def _names(value: object) -> list[str]:
    """The names an allow-list condition may give for ``value``."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, type):
        return [value.__name__]
    names = [type(value).__name__]
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        names.append(value["name"])
    return names


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception as error:  # a repr that fails must not hide the test's failure
        text = f"<{type(value).__name__}, repr failed: {error!r}>"
    return text if len(text) <= _REPR_CHARS else text[: _REPR_CHARS - 3] + "..."


def _outcome(report: pytest.TestReport) -> str | None:
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        return report.outcome
    if report.failed:  # setup or teardown
        return "error"
    if report.when == "setup" and report.skipped:
        return "skipped"
    return None


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if first.endswith("ProcessRaisedException:"):  # a spawned process failed: its own exception says why
        raised = re.findall(r"^(?:E\s+)?([\w.]+(?:Error|Exception)\b.*)$", str(report.longrepr), re.M)
        first = f"{first} {raised[-1].strip()}" if raised else first
    return first[:300]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--step-adapter",
        choices=MODES,
        default=None,
        help=f"add StepResultAdapter() to every Trainer: off, default, or log_loss (default: ${_ENV_MODE} or off)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("rerunfailures"):  # -p no:rerunfailures: Lightning's tests still use it
        config.addinivalue_line("markers", "flaky(reruns, reruns_delay): rerun a failed test (pytest-rerunfailures)")
    mode = config.getoption("--step-adapter") or os.environ.get(_ENV_MODE, "off")
    injector = _Injector(mode, os.environ.get(_ENV_FLAVOUR, "pytorch_lightning"))
    injector.install()
    config.stash[_INJECTOR] = injector
    recorder = _Recorder()
    config.stash[_RECORDER] = recorder
    config.pluginmanager.register(recorder, "step_adapter_recorder")


def pytest_report_header(config: pytest.Config) -> str:
    import lightning_step_types

    injector = config.stash[_INJECTOR]
    lightning = importlib.import_module(injector.flavour)
    return (
        f"step adapter: {injector.mode}; lightning_step_types from "
        f"{os.path.dirname(lightning_step_types.__file__)}; {injector.flavour} {lightning.__version__}"
    )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    injector = config.stash[_INJECTOR]
    terminalreporter.write_line(
        f"step adapter ({injector.mode}): {injector.trainers_built} trainers built, "
        f"{injector.trainers_with_adapter} with StepResultAdapter"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    injector = config.stash.get(_INJECTOR, None)
    if injector is None:
        return
    injector.uninstall()
    path = os.environ.get(_ENV_RESULTS)
    if path:
        recorder = config.stash[_RECORDER]
        import lightning_step_types

        with open(path, "w", encoding="utf-8") as file:
            json.dump(
                {
                    **injector.counts(),
                    "package": os.path.dirname(lightning_step_types.__file__),
                    "outcomes": recorder.outcomes,
                    "causes": recorder.causes,
                    "failures": recorder.failures,
                },
                file,
                indent=1,
                sort_keys=True,
            )


_INJECTOR = pytest.StashKey[_Injector]()
_RECORDER = pytest.StashKey[_Recorder]()
