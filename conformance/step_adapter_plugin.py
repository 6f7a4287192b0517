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

At the end of the session the plugin prints how many trainers were built and how many hold an
adapter, and, with ``STEP_ADAPTER_RESULTS=path.json``, writes the counts and every test's outcome
(with the first line of each failure) to that file for ``run.py`` to compare.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

import pytest

MODES = ("off", "default", "log_loss")
_ENV_MODE = "STEP_ADAPTER"
_ENV_RESULTS = "STEP_ADAPTER_RESULTS"


class _Injector:
    """Wraps ``Trainer.__init__`` for one session and counts what it did."""

    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise pytest.UsageError(f"--step-adapter / {_ENV_MODE} must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.trainers_built = 0
        self.trainers_with_adapter = 0
        self.not_injected: list[str] = []  # why an argument was left as it was
        self._trainer_class: Any = None
        self._original_init: Any = None

    def new_adapter(self) -> Any:
        from lightning_step_types import StepResultAdapter

        return StepResultAdapter(log_loss=True) if self.mode == "log_loss" else StepResultAdapter()

    def with_adapter(self, callbacks: Any) -> Any:
        """The callbacks argument as a user who adds the adapter writes it."""
        from pytorch_lightning.callbacks import Callback

        from lightning_step_types import StepResultAdapter

        if callbacks is None:
            return [self.new_adapter()]
        if isinstance(callbacks, Callback):
            return [callbacks, self.new_adapter()]
        if isinstance(callbacks, list):
            # Lightning keeps the list it is given as `trainer.callbacks` and appends its own
            # defaults to it, so a test may read its list afterwards: append in place, as
            # Lightning does. A list that already holds an adapter (the same list passed to a
            # second Trainer) keeps the one it has, as it keeps its other callbacks.
            if not any(isinstance(callback, StepResultAdapter) for callback in callbacks):
                callbacks.append(self.new_adapter())
            return callbacks
        self.not_injected.append(f"callbacks={callbacks!r}")
        return callbacks  # anything else Lightning refuses on its own; leave the error to it

    def install(self) -> None:
        from pytorch_lightning import Trainer

        from lightning_step_types import StepResultAdapter

        original = Trainer.__init__
        injector = self

        @functools.wraps(original)
        def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
            if injector.mode != "off":
                kwargs["callbacks"] = injector.with_adapter(kwargs.get("callbacks"))
            original(trainer, *args, **kwargs)
            injector.trainers_built += 1
            if any(isinstance(callback, StepResultAdapter) for callback in trainer.callbacks):
                injector.trainers_with_adapter += 1

        self._trainer_class, self._original_init = Trainer, original
        Trainer.__init__ = __init__  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._trainer_class is not None:
            self._trainer_class.__init__ = self._original_init

    def counts(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "trainers_built": self.trainers_built,
            "trainers_with_adapter": self.trainers_with_adapter,
            "not_injected": self.not_injected,
        }


class _Recorder:
    """Every test's outcome by node id, for ``run.py`` to compare runs."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.causes: dict[str, str] = {}

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

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[report.nodeid] = "error"
            self.causes[report.nodeid] = _first_line(report)


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
    injector = _Injector(mode)
    injector.install()
    config.stash[_INJECTOR] = injector
    recorder = _Recorder()
    config.stash[_RECORDER] = recorder
    config.pluginmanager.register(recorder, "step_adapter_recorder")


def pytest_report_header(config: pytest.Config) -> str:
    import pytorch_lightning

    import lightning_step_types

    return (
        f"step adapter: {config.stash[_INJECTOR].mode}; lightning_step_types from "
        f"{os.path.dirname(lightning_step_types.__file__)}; pytorch_lightning {pytorch_lightning.__version__}"
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
                },
                file,
                indent=1,
                sort_keys=True,
            )


_INJECTOR = pytest.StashKey[_Injector]()
_RECORDER = pytest.StashKey[_Recorder]()
