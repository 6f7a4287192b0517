"""The families of failures the generator has found and whose fixes are open.

``tests/test_generated_setups.py`` tolerates a failure of one of these families (and reports it);
any other fails it. Each family is kept as a shrunk test in ``tests/test_generated_regressions.py``,
marked as an expected failure: when its fix lands, that test passes, its mark goes, and so does the
family here. A family is matched by its name (``Verdict.family``, a regular expression here), so a
family's name must say what its failures have in common.
"""

from __future__ import annotations

import re

from setups.oracle import Verdict

__all__ = ["KNOWN", "known_family"]

_N = "[0-9N-]+"

# name -> the pattern of the verdicts' families it covers
KNOWN: dict[str, str] = {
    # the interrupted fit's configuration (a dict set in __init__) reaches the resumed fit: through
    # memory in the same process, or through the checkpoint in a fresh one
    "the interrupted fit's configuration reaches its resume": r"crash in the resumed fit.*: PlannedFault: planned fault",
    # a plain DataLoader resumed inside an epoch: Lightning restarts its iterator
    "a plain DataLoader inside an epoch": r".*\(Lightning warned: a loader it cannot resume inside the epoch\)$",
    # a resume from a checkpoint of the fit's end (a relaunch of the finished job, a save in the last
    # epoch's end): what the module and the callbacks hold is not put back
    "a resume with nothing left to train": r"(silent|unnamed): .*\(the resumed fit trained nothing\)$",
    # the warning for a callback's on_train_epoch_start fires where the hook only records or sets up
    # plain attributes, which come back
    "epoch-start hooks: a false alarm": r"false alarm: (.*, )?epoch-start hooks(, .*)?$",
    # the warnings about a sampler's order, the module's own checkpoint data and module attributes no
    # checkpoint holds fire where nothing differs
    "data order: a false alarm": r"false alarm: data order$",
    "module checkpoint data: a false alarm": r"false alarm: (.*, )?module checkpoint data(, .*)?$",
    "undeclared module state: a false alarm": r"false alarm: undeclared module state$",
    "batch-end callbacks: a false alarm": r"false alarm: batch-end callbacks(, .*)?$",
    # a checkpoint ModelCheckpoint saved itself: its _last_checkpoint_saved / _last_global_step_saved
    # are not put back, so the resumed fit keeps the file it resumed from, or skips a save
    "ModelCheckpoint's own save": r"silent: (checkpoint files|callback attributes|callback states|rows)$",
    # an exception in on_train_batch_end after the optimizer step: the warning says the weights are
    # exact, and they differ
    "batch-end callbacks: the weights": r"unnamed: (weights|optimizer|rows|metrics) \(warned: batch-end callbacks.*\)$",
    # the epoch-start warning, where what differs is something else
    "epoch-start hooks: what differs is not named": r"unnamed: .* \(warned: (.*, )?epoch-start hooks(, .*)?\)$",
    # the weights differ, silently: manual accumulation across an epoch's end, and others being shrunk
    "the weights, silently": r"silent: (weights|optimizer|scheduler|running statistics)$",
    "module attributes, silently": r"silent: module attributes( at the resume)?$",
    # under DDP, rank 1's callback attributes hold rank 0's after a restart from last.ckpt
    "rank 1's callback attributes": r"(silent|unnamed): rank 1's .*",
}


def known_family(verdict: Verdict) -> str | None:
    """The known family ``verdict``'s failure is of; None for a new one (or a verdict that did not fail)."""
    if not verdict.failed:
        return None
    for name, pattern in KNOWN.items():
        if re.fullmatch(pattern, verdict.family):
            return name
    return None
