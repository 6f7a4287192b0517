"""The families of failures the generator has found and whose fixes are open.

``tests/test_generated_setups.py`` tolerates a failure of one of these families (and reports it);
any other fails it. A family is what its failures have in common, found by shrinking them: the
verdict's name (its outcome and what differs first, a regular expression here) and, where the name
alone would cover other causes, what the setup has (``where``). A verdict ``unnamed: X (warned: ...)``
(a warning came, but not about X) is matched as ``silent: X`` would be: X's cause is the family's.

Each family is kept as a shrunk test in ``tests/test_generated_regressions.py``, marked as an
expected failure: when its fix lands, that test passes, its mark goes, and so does the family here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from setups.oracle import Verdict
from setups.space import Setup

__all__ = ["KNOWN", "Family", "known_family"]


@dataclass(frozen=True)
class Family:
    name: str
    pattern: str  # the verdict's family, in full
    where: Callable[[Setup, Verdict], bool] | None = None


def _finder(setup: Setup, verdict: Verdict) -> bool:
    return any(spec.kind in ("batch_size_finder", "lr_finder") for spec in setup.callbacks)


def _model_checkpoint_only(setup: Setup, verdict: Verdict) -> bool:
    """Every item that differs is a ModelCheckpoint's: its attributes, its state, its files."""
    return all(
        "ModelCheckpoint" in difference or difference.startswith(("checkpoint files kept", "<root>/"))
        for difference in verdict.differences
    )


def _inside_an_epoch(verdict: Verdict) -> bool:
    """The interrupted fit stopped after a batch of its epoch (not before its first batch's step)."""
    plan = verdict.plan
    return plan is not None and plan["batch"] >= 0 and (plan["batch"] > 0 or plan["hook"] != "training_step")


def _silent(what: str) -> str:
    """``silent: <what>``, or ``unnamed: <what> (warned: ...)``: a warning that named something else."""
    return rf"(silent: {what}|unnamed: {what} \(warned: [^)]*\))"


_DRAWS = r"(weights|running statistics|optimizer|scheduler|counters|rows|metrics|module attributes( at the resume)?)"

KNOWN: tuple[Family, ...] = (
    Family(
        "a finder's trial: the interrupted fit's configuration reaches its resume",
        r"crash in the resumed fit( \(same process\))?: (PlannedFault|Killed|SIGTERMException|ChildFailed): .*",
        _finder,
    ),
    Family(
        "a plain DataLoader inside an epoch (Lightning warns that it cannot resume it)",
        _silent(".*") + r".*\(Lightning warned: a loader it cannot resume inside the epoch\)",
    ),
    Family(
        "an IterableDataset in a plain DataLoader inside an epoch",
        _silent(_DRAWS),
        lambda setup, verdict: setup.data.loader == "plain" and setup.data.dataset == "iterable",
    ),
    Family(
        "a resume with nothing left to train: the module's and callbacks' attributes, the metrics",
        _silent(".*") + r".*\(the resumed fit trained nothing\)",
    ),
    Family(
        "a later checkpoint's record of the random streams or a sampler's generator, after a resume",
        _silent("checkpoint files"),
        lambda setup, verdict: all(
            "['random_streams']" in difference or "['generators']" in difference for difference in verdict.differences
        ),
    ),
    Family(
        "ModelCheckpoint's own save: _last_checkpoint_saved and _last_global_step_saved not put back",
        _silent("(checkpoint files|callback attributes|callback states)"),
        _model_checkpoint_only,
    ),
    Family(
        "a kill, resumed from the best file top-k kept (not the newest): ModelCheckpoint skips a save, rows shift",
        _silent("(callback states|callback attributes|rows|checkpoint files)"),
        lambda setup, verdict: (
            setup.interruption.how == "kill"
            and setup.checkpoint.monitor is not None
            and setup.checkpoint.save_last is False
        ),
    ),
    Family(
        "the epoch-start warning where the hook only records or sets up plain attributes",
        r"false alarm: (.*, )?epoch-start hooks(, .*)?",
    ),
    Family(
        "the sampler-order warning where the order is the uninterrupted run's",
        r"false alarm: data order(, .*)?",
    ),
    Family(
        "the module-checkpoint-data warning where what the module saves is not changed by what runs again",
        r"false alarm: (.*, )?module checkpoint data(, .*)?",
    ),
    Family(
        "the undeclared-module-state warning where nothing differs",
        r"false alarm: (.*, )?undeclared module state(, .*)?",
    ),
    Family(
        "the batch-end-callbacks warning where nothing differs",
        r"false alarm: (.*, )?batch-end callbacks(, .*)?",
    ),
    Family(
        "the running-statistics warning where nothing differs",
        r"false alarm: (.*, )?running statistics(, .*)?",
    ),
    Family(
        "a fault at an epoch's start: the callbacks' on_train_epoch_start that ran before it run again",
        _silent("(module attributes|callback attributes|callback states|rows|metrics)"),
        lambda setup, verdict: verdict.plan is not None and verdict.plan["batch"] == -1,
    ),
    Family(
        "a callback's collections.deque: lost at a resume, and not named",
        _silent("(callback attributes|callback states|rows|metrics)"),
        lambda setup, verdict: any("_recent" in difference for difference in verdict.differences),
    ),
    Family(
        "ModelPruning's _global_kwargs after a resume",
        _silent("(callback attributes|callback states|checkpoint files)"),
        lambda setup, verdict: any("ModelPruning" in difference for difference in verdict.differences),
    ),
    Family(
        "a fault in the module's on_train_batch_end after ModelCheckpoint's save there: the batch's row is lost",
        _silent("rows"),
        lambda setup, verdict: setup.interruption.where == "on_train_batch_end",
    ),
    Family(
        "an exception in a logger's write: the logger's step is one behind",
        _silent("(counters|rows)"),
        lambda setup, verdict: setup.interruption.where == "logger",
    ),
    Family(
        "manual optimization: a window of accumulation across an epoch's end",
        _silent(_DRAWS),
        lambda setup, verdict: setup.module.optimization == "manual" and setup.module.accumulate > 1,
    ),
    Family(
        "a generator the Dataset holds, in a plain DataLoader",
        _silent(_DRAWS),
        lambda setup, verdict: setup.data.augment == "held",
    ),
    Family(
        "a reload with a draw in train_dataloader(), a loader with a generator",
        _silent(_DRAWS),
        lambda setup, verdict: setup.data.reload,
    ),
    Family(
        "an exception in on_train_batch_end after the optimizer step: the warning names less than differs",
        r"unnamed: .* \(warned: (.*, )?batch-end callbacks(, .*)?\)",
        lambda setup, verdict: setup.interruption.where in ("on_train_batch_end", "callback_batch_end"),
    ),
    Family(
        "a draw in the module's on_train_epoch_start, resumed at that epoch's start: not from the restored stream",
        _silent(_DRAWS),
        lambda setup, verdict: setup.module.epoch_hook,
    ),
    Family(
        "manual optimization, a fault in on_train_epoch_start: dropout's draws differ",
        _silent(_DRAWS),
        lambda setup, verdict: (
            setup.module.optimization == "manual"
            and verdict.plan is not None
            and verdict.plan["hook"] == "on_train_epoch_start"
        ),
    ),
    Family(
        "loader workers that draw at random, resumed at an epoch's start: not named",
        _silent(_DRAWS),
        lambda setup, verdict: setup.data.workers > 0 and setup.data.augment == "torch",
    ),
    Family(
        "a numpy Generator the module holds: not put back, and not named",
        _silent(_DRAWS),
        lambda setup, verdict: setup.module.held_generator == "numpy",
    ),
    Family(
        "StochasticWeightAveraging's _init_n_averaged and _scheduler_state after a resume",
        _silent("(callback attributes|callback states|checkpoint files|weights)"),
        lambda setup, verdict: any("StochasticWeightAveraging" in difference for difference in verdict.differences),
    ),
    Family(
        "64-true: float64 weights pass through float32 at a resume",
        _silent(".*"),
        lambda setup, verdict: setup.trainer.precision == "64-true",
    ),
    Family(
        "GradientAccumulationScheduler: its window across the point",
        _silent(_DRAWS),
        lambda setup, verdict: any(spec.kind == "accumulation_scheduler" for spec in setup.callbacks),
    ),
    Family(
        "a plain DataLoader inside an epoch, where Lightning gives no warning",
        _silent(_DRAWS),
        lambda setup, verdict: setup.data.loader == "plain" and _inside_an_epoch(verdict),
    ),
    Family(
        "under DDP, a rank's callback attributes after a restart from last.ckpt",
        r"(silent|unnamed): rank [0-9]+'s .*",
    ),
)


def known_family(verdict: Verdict, setup: Setup) -> str | None:
    """The known family ``verdict``'s failure is of; None for a new one (or a verdict that did not fail)."""
    if not verdict.failed:
        return None
    for family in KNOWN:
        if re.fullmatch(family.pattern, verdict.family) and (family.where is None or family.where(setup, verdict)):
            return family.name
    return None
