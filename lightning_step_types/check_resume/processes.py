"""Fits in fresh processes: nothing of one fit reaches the next through memory.

A relaunched job starts in a new process: the interrupted fit's module configuration, module-level
globals and any registry a library keeps are gone, and only the checkpoint carries state over. Here
each fit (or each chain of fits that a setup runs in one process, as a retry loop does) runs in a
process of its own, forked from a server process that imported torch, Lightning and this library
and ran no fit (``multiprocessing``'s forkserver; spawn where the platform has none), so a fresh
process costs a fork rather than the imports.

What crosses into the child is pickled: the setup's factories must be importable (module-level
functions or classes, or ``functools.partial`` of them), as for ``ddp_spawn``. A kill really ends
the child (SIGKILL) once it has sent the check its record: no hook runs after it, nothing saves.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import resource
import signal
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

from lightning_step_types.check_resume.points import Interruption
from lightning_step_types.check_resume.runs import Fit, Killed, Setup, run_fit

__all__ = ["ChildFailed", "FitJob", "check_importable", "run_in_fresh_process", "run_in_fresh_processes"]


class ChildFailed(RuntimeError):
    """A fresh process that ended without sending its fit's record: it crashed, hung, or could not start."""


@dataclass(frozen=True)
class FitJob:
    """One fit for a fresh process: ``run_fit``'s arguments, and the environment it runs under.

    ``resume_from`` may be a function of the fit before it in the same process (its record), which
    picks the checkpoint that fit left (importable, as the setup's factories are)."""

    setup: Setup
    root: Path
    point: Interruption | None = None
    resume_from: Path | str | Callable[[Fit], Path | str | None] | None = None
    environment: tuple[tuple[str, str], ...] = ()


def _preloaded() -> list[str]:
    """What the server imports once: torch, the Lightning packages the caller imported, this library,
    and torchdata's loader where the caller uses it."""
    names = ["torch", "lightning_step_types", "lightning_step_types.check_resume.processes"]
    lightning = [name for name in ("pytorch_lightning", "lightning.pytorch") if name in sys.modules]
    names += lightning or ["pytorch_lightning"]
    names += [name for name in ("torchdata.stateful_dataloader",) if name in sys.modules]
    return names


@functools.cache
def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_preloaded())  # no effect once the server runs: then each child imports
    return context


def _where(factory: Any) -> str:
    code = getattr(factory, "__code__", None)
    return f" (defined at {code.co_filename}:{code.co_firstlineno})" if isinstance(code, types.CodeType) else ""


_FIXES = {
    "module": "module=functools.partial(MyModel, lr=0.05), or the class itself: module=MyModel",
    "datamodule": "datamodule=functools.partial(MyDataModule, batch_size=32)",
    "callbacks": "callbacks=[functools.partial(EarlyStopping, monitor='val_loss')]",
}


def _fix(name: str) -> str:
    return _FIXES.get(
        name,
        f"define it at module level (`def make_{name}(): return DataLoader(...)`) and pass `{name}=make_{name}`",
    )


def check_importable(name: str, factory: Any) -> None:
    """Raises ``TypeError`` naming ``name`` where ``factory`` cannot reach a fresh process."""
    target = factory.func if isinstance(factory, functools.partial) else factory
    qualname = getattr(target, "__qualname__", type(target).__name__)
    if "<lambda>" in qualname or "<locals>" in qualname:
        kind = "a lambda" if "<lambda>" in qualname else "a function defined inside another"
        raise TypeError(
            f"check_resume(fresh_processes=True): {name}={qualname}{_where(target)} is {kind}, which a fresh"
            " process cannot import; expected a module-level function or class, or functools.partial of one;"
            f" fix: {_fix(name)}"
        )
    module = getattr(target, "__module__", None)
    main = sys.modules.get("__main__")
    if module == "__main__" and not getattr(main, "__file__", None):
        raise TypeError(
            f"check_resume(fresh_processes=True): {name}={qualname} is defined in an interactive session"
            " (a notebook, `python -c`), which a fresh process cannot import; expected a function or class"
            " of an importable module; fix: move it into a .py file next to the notebook and import it from there"
        )
    try:
        pickle.dumps(factory)
    except Exception as error:
        raise TypeError(
            f"check_resume(fresh_processes=True): {name}={qualname} cannot be pickled for a fresh process"
            f" ({type(error).__name__}: {error}); expected a module-level function or class, or"
            f" functools.partial of one with picklable arguments; fix: {_fix(name)}"
        ) from error


def run_in_fresh_process(jobs: Iterable[FitJob], limit_s: float, output: Path | None = None) -> list[Fit]:
    """Runs ``jobs`` one after another in one fresh process; returns each one's record.

    A job whose process died (a kill) ends the chain with its record, and so does a job whose
    ``resume_from`` function finds nothing to resume from (the records end before it). A process that
    hangs past ``limit_s``, or ends without a record, gives a record whose ``error`` is a ``ChildFailed``.
    ``output``: a file the process writes its standard output and error to (default: this process's)."""
    (fits,) = run_in_fresh_processes([list(jobs)], limit_s, [output])
    return fits


def run_in_fresh_processes(
    chains: list[list[FitJob]], limit_s: float, outputs: list[Path | None] | None = None
) -> list[list[Fit]]:
    """Runs each chain of jobs in a fresh process of its own, all at once (the ranks of one distributed
    fit, each with its environment); returns each chain's records, as ``run_in_fresh_process`` does."""
    context = _context()
    # a child starts its own processes (DataLoader workers) as this process would, not through the server
    method = multiprocessing.get_start_method()
    started: list[tuple[Any, Connection]] = []
    for chain, output in zip(chains, outputs or [None] * len(chains)):
        receiving, sending = context.Pipe(duplex=False)
        process = context.Process(target=_run_jobs, args=(sending, chain, method, output), name="check_resume fit")
        process.start()
        sending.close()
        started.append((process, receiving))
    try:
        return [_records(process, receiving, chain, limit_s) for (process, receiving), chain in zip(started, chains)]
    finally:
        for process, receiving in started:
            receiving.close()
            process.join(timeout=limit_s)
            if process.is_alive():
                process.kill()
                process.join()


def _records(process: Any, receiving: Connection, chain: list[FitJob], limit_s: float) -> list[Fit]:
    fits: list[Fit] = []
    while len(fits) < len(chain):
        if not receiving.poll(limit_s):
            process.kill()
            fits.append(_failed(chain[len(fits)], f"no record after {limit_s:.0f} s: killed as hung"))
            break
        try:
            fit: Fit = pickle.loads(receiving.recv_bytes())
        except EOFError:
            process.join()
            if process.exitcode != 0 or not callable(chain[len(fits)].resume_from):
                why = f"the process ended ({_exit(process.exitcode)}) without sending its record"
                fits.append(_failed(chain[len(fits)], why))
            break
        fits.append(fit)
        if isinstance(fit.error, Killed):
            break
    return fits


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _failed(job: FitJob, why: str) -> Fit:
    return Fit(
        root=job.root,
        state={},
        attributes={},
        attributes_at={},
        optimizers=[],
        schedulers=[],
        counters={},
        callback_metrics={},
        logged_metrics={},
        callbacks={},
        checkpoint_dirs=[],
        rows=[],
        warnings=[],
        lightning_warnings=[],
        error=ChildFailed(f"check_resume: the fit's process failed: {why}"),
        seconds=0.0,
        fired=False,
        resume_from=None,
    )


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _sent(fit: Fit) -> bytes:
    """The record, pickled; an exception that does not pickle travels as a ``RuntimeError`` of its text."""
    fit.cpu_seconds = _cpu_seconds() - sum(_SPENT)
    _SPENT.append(fit.cpu_seconds)
    try:
        return pickle.dumps(fit)
    except Exception:
        error = fit.error
        fit.error = RuntimeError(f"{type(error).__name__}: {error}") if error is not None else None
        return pickle.dumps(fit)


_SPENT: list[float] = []  # the CPU time of the fits this process sent before


def _run_jobs(connection: Connection, jobs: list[FitJob], start_method: str, output: Path | None) -> None:
    """The fresh process: each job's fit, its record sent as soon as it ends."""
    multiprocessing.set_start_method(start_method, force=True)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        with output.open("a", encoding="utf-8") as written:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
                os.dup2(written.fileno(), stream.fileno())
    previous: Fit | None = None

    def kill(record: Callable[[], Fit]) -> NoReturn:
        connection.send_bytes(_sent(record()))
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: SIGKILL ends the process")

    for job in jobs:
        os.environ.update(dict(job.environment))
        resume_from = job.resume_from
        if callable(resume_from):
            resume_from = resume_from(previous) if previous is not None else None
            if resume_from is None:  # the fit before left nothing to resume from: the chain ends
                break
        previous = run_fit(job.setup, job.root, job.point, resume_from, kill=kill)
        connection.send_bytes(_sent(previous))
    connection.close()
