"""The oracle: one setup, uninterrupted against interrupted-and-resumed, each fit in a fresh process.

Outcomes: ``exact`` (nothing differs, nothing warned), ``warned`` (the library warned, and every item
that differs is one a warning names, or follows from what one names), ``skipped`` (the interruption
has no place in this fit, or left no checkpoint to resume from), or a failure:

- ``silent``: something differs and nothing warned;
- ``false alarm``: a ``StepResultWarning`` where nothing differs;
- ``unnamed``: warned, but an item differs that no warning names;
- ``crash``: a fit failed where plain Lightning's (the same chain with ``exact_resume=False``) does not;
- ``invalid``: the uninterrupted fit fails in plain Lightning too: the space drew a setup Lightning
  cannot run, a defect of the generator;
- ``harness error``: the check itself failed (``run.py`` reports it), a defect of the oracle.

A crash plain Lightning has too is ``lightning`` (not the library's, not counted as a failure).
Under DDP a fit is its ranks' records: each rank's module, callbacks and rows are compared with the
same rank's in the uninterrupted fit (``rank 1: ...``), the files once.

What "names" means, warning by warning (``COVERAGE``): a warning about the data order, the gradients,
a plain checkpoint, the ranks, or module attributes no checkpoint holds names a cause every value
downstream follows from, so it covers every item; the others name what they cover: the running
statistics (those buffers, and what the validation computes from them), the values a batch's end
hooks log, the callbacks whose attributes or epoch-start hooks are named (their state, their
attributes, what they log, the checkpoint files), the module's own checkpoint data (its attributes).
"""

from __future__ import annotations

import functools
import re
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lightning_step_types.check_resume.compare import Difference, differences
from lightning_step_types.check_resume.processes import FitJob, run_in_fresh_process, run_in_fresh_processes
from lightning_step_types.check_resume.runs import Fit
from lightning_step_types.check_resume.runs import Setup as CheckedSetup
from setups.build import ROOT, build, places_of, trainer_arguments
from setups.plan import resolve, resume_source
from setups.space import Setup

__all__ = ["FAILURES", "Verdict", "check", "covered", "warning_kind"]

FAILURES = ("silent", "false alarm", "unnamed", "crash", "invalid", "harness error")
FIT_LIMIT_S = 300.0  # a fit that runs longer hangs (each runs in about a second)
DDP_FIT_LIMIT_S = 120.0  # a rank whose peer died may wait in a collective until the process group's timeout


@dataclass
class Verdict:
    outcome: str
    family: str = ""
    detail: str = ""
    plan: dict[str, Any] | None = None
    differences: list[str] = field(default_factory=lambda: [])
    warnings: list[str] = field(default_factory=lambda: [])
    fits: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the fits' processes', together

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


# --- what a warning names ------------------------------------------------------------------------

_ALL = "all"
# (kind, a phrase of its message, what it covers)
KINDS: tuple[tuple[str, str, str], ...] = (
    ("data order", "whose order no checkpoint holds", _ALL),
    ("worker streams", "whose worker processes draw at random", _ALL),
    ("worker draws", "whose worker processes drew at random", _ALL),
    ("cycled order", "ran out and started again", _ALL),
    ("shared generator", "shares the loader's generator", _ALL),
    ("gradients", "after its backward added to .grad", _ALL),
    ("manual rest", "after an optimizer step inside training_step", _ALL),
    ("pruning", "ModelPruning with a checkpoint", _ALL),
    ("plain checkpoint", "a checkpoint without the running epoch state", _ALL),
    ("plain epoch end", "a checkpoint of plain Lightning saved inside epoch", _ALL),
    ("world size", "epoch state saved by", _ALL),
    ("ranks", "whose processes were not at one point", _ALL),
    ("diverged processes", "optimizer settings or LR schedulers differed", _ALL),
    ("changed module", "from before the module changed", _ALL),
    ("format", "from another version of lightning_step_types", _ALL),
    ("unavailable", "cannot be restored exactly", _ALL),
    ("gloo restarts", "torchrun restarts", _ALL),
    ("undeclared module state", "module attributes that changed during the fit", _ALL),
    ("rounded weights", "come back rounded to float32", _ALL),
    ("unended epoch", "Lightning runs none of that in a fit with nothing to train", _ALL),
    ("running statistics", "keep running statistics", "running statistics"),
    ("batch-end hooks", "before its on_train_batch_end hooks ended", "values"),
    ("module checkpoint data", "saved the module's own data", "module"),
    ("batch-end callbacks", "after an exception in batch", "callbacks"),
    ("batch-end callbacks", "saved from inside batch", "callbacks"),
    ("callback attributes", "callback attributes that changed during the fit", "callbacks"),
    ("epoch-start hooks", "does not run the on_train_epoch_start hooks again", "callbacks"),
)


def warning_kind(message: str) -> str:
    for kind, phrase, _ in KINDS:
        if phrase in message:
            return kind
    first = message.splitlines()[1] if len(message.splitlines()) > 1 else message
    return "unknown: " + first.strip()[:60]


def _coverage(message: str) -> str:
    for _, phrase, coverage in KINDS:
        if phrase in message:
            return coverage
    return "nothing"


def _named_callbacks(message: str) -> set[str]:
    """The callback classes a warning names: ``Cls.attribute (type)``, ``Cls.on_train_epoch_start``, or a list."""
    got = message.split("got:", 1)[-1].split("\n", 1)[0]
    tail = got.rsplit(": ", 1)[-1]
    return {name.split(".")[0].strip() for name in tail.split(",") if name.strip()}


def _named_values(message: str) -> set[str]:
    got = message.split("got:", 1)[-1].split("\n", 1)[0]
    return {name.strip() for name in got.rsplit(": ", 1)[-1].split(",") if name.strip()}


_EVALUATED = ("val_loss", "(validation)", "running_", "num_batches_tracked", ".ckpt", "checkpoint files")


def covered(difference: Difference, warnings: list[str], setup: Setup) -> bool:
    """Whether one of ``warnings`` names ``difference``'s item, or what it follows from (on any rank)."""
    difference = replace(difference, item=re.sub(r"^rank [0-9]+: ", "", difference.item))
    item = f"{difference.item} {difference.uninterrupted} {difference.resumed}"
    averaging = any(spec.kind in ("weight_averaging", "swa") for spec in setup.callbacks)
    for message in warnings:
        coverage = _coverage(message)
        if coverage == _ALL:
            return True
        if coverage == "running statistics":
            if averaging or any(part in item for part in _EVALUATED) or _monitor_state(item):
                return True
        elif coverage == "values":
            if any(name in item for name in _named_values(message)) or ".ckpt" in item or _monitor_state(item):
                return True
        elif coverage == "module":
            if "module attribute" in difference.item or ".ckpt" in item:
                return True
        elif coverage == "callbacks":
            names = _named_callbacks(message)
            own = difference.item.startswith(("callback state", "callback attribute")) and any(
                name in difference.item for name in names
            )
            logged = any("UserCallback" in name for name in names) and "callback_" in item
            if own or logged or ".ckpt" in item or "checkpoint files" in item:
                return True
    return False


def _monitor_state(item: str) -> bool:
    """A callback whose state follows a monitored value (a best score, a wait count)."""
    return item.startswith(("callback state", "callback attribute")) and any(
        name in item for name in ("ModelCheckpoint", "EarlyStopping")
    )


# --- families ------------------------------------------------------------------------------------

_CATEGORIES = (
    ("at the resume", "module attributes at the resume"),
    ("module attribute", "module attributes"),
    ("callback state", "callback states"),
    ("callback attribute", "callback attributes"),
    ("state_dict", "weights"),
    ("optimizer", "optimizer"),
    ("scheduler", "scheduler"),
    ("callback_metrics", "metrics"),
    ("logged_metrics", "metrics"),
    ("logged row", "rows"),
    ("checkpoint files kept", "checkpoint files"),
    (".ckpt", "checkpoint files"),
)


# upstream first: a difference in the weights makes the metrics, rows and files differ too
UPSTREAM = (
    "weights",
    "running statistics",
    "optimizer",
    "scheduler",
    "counters",
    "module attributes at the resume",
    "module attributes",
    "callback states",
    "callback attributes",
    "rows",
    "metrics",
    "checkpoint files",
)


def primary(categories: set[str]) -> str:
    """The most upstream of ``categories``: what a family of differences is named by (rank 0's first)."""

    def order(name: str) -> tuple[int, int]:
        ranked = re.match(r"^rank ([0-9]+)'s (.*)$", name)
        base, rank = (ranked.group(2), int(ranked.group(1))) if ranked else (name, 0)
        return UPSTREAM.index(base), rank

    return min(categories, key=order)


def category(item: str) -> str:
    """What kind of item differs: ``weights``, ``callback attributes``, ... (``rank 1's ...`` on another rank)."""
    ranked = re.match(r"^rank ([0-9]+): (.*)$", item)
    if ranked:
        return f"rank {ranked.group(1)}'s {category(ranked.group(2))}"
    if "running_" in item or "num_batches_tracked" in item:
        return "running statistics"
    for prefix, name in _CATEGORIES:
        if prefix in item:
            return name
    return "counters"


def _error_text(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    text = re.sub(r"/[^\s'\"]+", "<path>", text)
    return f"{type(error).__name__}: {re.sub(r'[0-9]+', 'N', text)[:90]}"


# --- the check -----------------------------------------------------------------------------------


def _job(setup: Setup, folder: Path, plan: dict[str, Any] | None, exact: bool, resume_from: Any = None) -> FitJob:
    checked = CheckedSetup(functools.partial(build, setup, plan), trainer_arguments(setup), exact, 0)
    return FitJob(checked, folder, None, resume_from, ((ROOT, str(folder)),))


Ranks = list[Fit]  # one fit: its record on each process (one, or two under DDP)
Runner = Callable[[Setup, list[FitJob]], list[Ranks]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _fresh(setup: Setup, jobs: list[FitJob]) -> list[Ranks]:
    """The jobs in one fresh process (each rank's in one of its own, with torchrun's environment, and one
    port per fit), its output in ``output*.txt`` beside the fits' folders."""
    output = jobs[0].root.parent / "output.txt"
    if setup.processes == 1:
        return [[fit] for fit in run_in_fresh_process(jobs, FIT_LIMIT_S, output)]
    (job,) = jobs  # under DDP every fit runs in processes of its own
    port = str(_free_port())
    chains = [
        [replace(job, environment=job.environment + _rank_environment(rank, port))] for rank in range(setup.processes)
    ]
    outputs: list[Path | None] = [output.with_name(f"output-rank-{rank}.txt") for rank in range(setup.processes)]
    by_rank = run_in_fresh_processes(chains, DDP_FIT_LIMIT_S, outputs)
    return [[fits[0] for fits in by_rank]]


def _rank_environment(rank: int, port: str) -> tuple[tuple[str, str], ...]:
    """What torchrun sets for each process of a 2-process job on one machine."""
    return (
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", port),
        ("WORLD_SIZE", "2"),
        ("RANK", str(rank)),
        ("LOCAL_RANK", str(rank)),
        ("LOCAL_WORLD_SIZE", "2"),
        ("NODE_RANK", "0"),
        ("GROUP_RANK", "0"),
    )


class _Counted:
    """A runner that adds up the CPU time of the fits it ran."""

    def __init__(self, run: Runner) -> None:
        self.run, self.cpu_seconds = run, 0.0

    def __call__(self, setup: Setup, jobs: list[FitJob]) -> list[Ranks]:
        fits = self.run(setup, jobs)
        self.cpu_seconds += sum(fit.cpu_seconds for ranks in fits for fit in ranks)
        return fits


def _stopped_as_planned(ranks: Ranks, plan: dict[str, Any]) -> bool:
    """Whether the interrupted fit stopped where and how its plan says (under DDP: on the planned rank;
    the other fails as its peer dies, or hangs and is killed)."""
    error, how = ranks[plan.get("rank", 0)].error, plan["how"]
    if how == "relaunch":
        return error is None
    names = {"exception": "PlannedFault", "save": "PlannedFault", "kill": "Killed", "sigterm": "SIGTERMException"}
    return error is not None and type(error).__name__ == names[how]


def _chain(setup: Setup, root: Path, plan: dict[str, Any], exact: bool, run: Runner) -> tuple[list[Ranks], str]:
    """The interrupted fit and its resume; or the fits and why the chain stopped short."""
    folder = root / ("chain" if exact else "plain-chain")
    interrupted_job = _job(setup, folder, plan, exact)
    if setup.interruption.process == "same":
        source: Any = functools.partial(resume_source, setup)
        fits = run(setup, [interrupted_job, _job(setup, folder, None, exact, source)])
        if not _stopped_as_planned(fits[0], plan):
            return fits[:1], "not as planned"
        if len(fits) == 1:
            return fits, "no checkpoint" if resume_source(setup, fits[0][0]) is None else "no resume"
        return fits, ""
    (interrupted,) = run(setup, [interrupted_job])
    if not _stopped_as_planned(interrupted, plan):
        return [interrupted], "not as planned"
    chosen = resume_source(setup, interrupted[0])
    if chosen is None:
        return [interrupted], "no checkpoint"
    return [interrupted, *run(setup, [_job(setup, folder, None, exact, chosen)])], ""


def _unexpected(fits: list[Ranks], plan: dict[str, Any]) -> BaseException | None:
    """The first failure that is not the planned interruption (nor, under DDP, what it does to the other rank)."""
    for index, ranks in enumerate(fits):
        if index == 0 and _stopped_as_planned(ranks, plan):
            continue
        for fit in ranks:
            if fit.error is not None:
                return fit.error
    return None


def check(setup: Setup, root: Path, run: Runner = _fresh) -> Verdict:
    """The verdict on ``setup``; its fits write under ``root`` (removed afterwards)."""
    started = time.perf_counter()
    counted = _Counted(run)
    try:
        verdict = _check(setup, root, counted)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    verdict.seconds, verdict.cpu_seconds = time.perf_counter() - started, counted.cpu_seconds
    return verdict


def _failure(ranks: Ranks) -> BaseException | None:
    return next((fit.error for fit in ranks if fit.error is not None), None)


def _check(setup: Setup, root: Path, run: Runner) -> Verdict:
    (reference,) = run(setup, [_job(setup, root / "uninterrupted", None, True)])
    failed = _failure(reference)
    if failed is not None:
        (plain,) = run(setup, [_job(setup, root / "plain", None, False)])
        plain_failed = _failure(plain)
        if plain_failed is not None:
            return Verdict("invalid", f"invalid: {_error_text(plain_failed)}", _error_text(plain_failed), fits=2)
        text = _error_text(failed)
        return Verdict("crash", f"crash in the uninterrupted fit: {text}", text, fits=2)
    plan = resolve(setup, places_of(root / "uninterrupted"))
    if plan is None:
        return Verdict("skipped", "skipped: the place is never visited", fits=1)
    fits, stopped = _chain(setup, root, plan, True, run)
    count = 1 + len(fits)
    if stopped == "no checkpoint":
        return Verdict("skipped", "skipped: no checkpoint to resume from", plan=plan, fits=count)
    failure = _unexpected(fits, plan)
    if stopped == "not as planned" and failure is None:
        return Verdict("crash", "crash: the interruption did not happen as planned", plan=plan, fits=count)
    if failure is not None or stopped == "no resume":
        return _crash(setup, root, plan, failure, fits, count, run)
    return _compare(setup, reference, fits, plan, count)


def _crash(
    setup: Setup,
    root: Path,
    plan: dict[str, Any],
    failure: BaseException | None,
    fits: list[Ranks],
    count: int,
    run: Runner,
) -> Verdict:
    text = _error_text(failure) if failure is not None else "the same-process chain stopped after its first fit"
    which = "the interrupted fit" if any(failure is fit.error for fit in fits[0]) else "the resumed fit"
    plain_fits, plain_stopped = _chain(setup, root, plan, False, run)
    count += len(plain_fits)
    plain_failure = _unexpected(plain_fits, plan)
    if plain_failure is not None or plain_stopped in ("no resume", "not as planned"):
        return Verdict("lightning", f"lightning: {text}", text, plan=plan, fits=count)
    where = " (same process)" if setup.interruption.process == "same" else ""
    return Verdict("crash", f"crash in {which}{where}: {text}", text, plan=plan, fits=count)


def _lightning_said(fits: list[Fit]) -> str:
    """What the family's name adds: Lightning's own warning that it cannot resume the loader inside the
    epoch, where it gave one; a resumed fit with nothing left to train (a checkpoint of the fit's end)."""
    said = any("ended before the epoch ended" in message for fit in fits for message in fit.lightning_warnings)
    if said:
        return " (Lightning warned: a loader it cannot resume inside the epoch)"
    return " (the resumed fit trained nothing)" if not fits[-1].trained else ""


def _rank_differences(reference: Ranks, fits: list[Ranks]) -> list[Difference]:
    """Rank 0's differences, then each other rank's (its module, callbacks, rows; the files are rank 0's)."""
    found = differences(reference[0], [ranks[0] for ranks in fits])
    for rank in range(1, len(reference)):
        for difference in differences(reference[rank], [ranks[rank] for ranks in fits]):
            if category(difference.item) != "checkpoint files":  # rank 0's files, compared once
                found.append(
                    Difference(f"rank {rank}: {difference.item}", difference.uninterrupted, difference.resumed)
                )
    return found


def _compare(setup: Setup, reference: Ranks, fits: list[Ranks], plan: dict[str, Any], count: int) -> Verdict:
    found = _rank_differences(reference, fits)
    messages = list(dict.fromkeys(message for ranks in fits for fit in ranks for message in fit.warnings))
    shown_found = [str(difference) for difference in found]
    kinds = sorted({warning_kind(message) for message in messages})
    verdict = Verdict("exact", plan=plan, differences=shown_found, warnings=messages, fits=count)
    zero = [ranks[0] for ranks in fits]
    if not found and not messages:
        return verdict
    if not messages:
        verdict.outcome = "silent"
        verdict.family = f"silent: {primary({category(d.item) for d in found})}{_lightning_said(zero)}"
    elif not found:
        verdict.outcome, verdict.family = "false alarm", f"false alarm: {', '.join(kinds)}"
    else:
        uncovered = {category(d.item) for d in found if not covered(d, messages, setup)}
        if uncovered:
            verdict.outcome = "unnamed"
            verdict.family = f"unnamed: {primary(uncovered)} (warned: {', '.join(kinds)}){_lightning_said(zero)}"
        else:
            verdict.outcome, verdict.family = "warned", f"warned: {', '.join(kinds)}"
    warned = [f"warned: {message.splitlines()[1].strip()[:200]}" for message in messages]
    verdict.detail = "\n".join(shown_found[:6] + warned)
    return verdict
