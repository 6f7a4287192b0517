"""Where the interrupted fit stops, and which checkpoint its resume starts from.

The setup's interruption says a place (``where``) and how far through the fit (``at``, a percent of
the uninterrupted fit's visits to that place); ``resolve`` turns it into a plan, the exact visit,
from the visits the uninterrupted fit made. A kill, and an exception no ``OnExceptionCheckpoint``
saves on, need a checkpoint saved before them: their plan lands only after the fit's first save.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_step_types.check_resume.runs import Fit
from setups.space import Setup

__all__ = ["resolve", "resume_source"]


def _needs_earlier_save(setup: Setup) -> bool:
    how = setup.interruption.how
    return how == "kill" or (how in ("exception", "sigterm") and not setup.checkpoint.on_exception)


def resolve(setup: Setup, visits: list[tuple[str, int, int, int]]) -> dict[str, Any] | None:
    """The plan for the interrupted fit; None where the uninterrupted fit never visits the place."""
    spec = setup.interruption
    if spec.how == "relaunch":  # the job ran to its end: no place to stop at
        return {"how": "relaunch", "hook": "", "epoch": -1, "batch": -1, "visit": 0}
    candidates = [index for index, visit in enumerate(visits) if visit[0] == spec.where]
    if _needs_earlier_save(setup):
        saves = [index for index, visit in enumerate(visits) if visit[0] == "save"]
        candidates = [index for index in candidates if saves and saves[0] < index]
    if not candidates:
        return None
    hook, epoch, batch, visit = visits[candidates[spec.at * len(candidates) // 100]]
    plan: dict[str, Any] = {"how": spec.how, "hook": hook, "epoch": epoch, "batch": batch, "visit": visit}
    if setup.processes > 1:
        plan["rank"] = spec.rank
    if hook.startswith("callback"):
        plan["callback"] = next(index for index, callback in enumerate(setup.callbacks) if callback.kind == "user")
    return plan


def resume_source(setup: Setup, fit: Fit) -> Path | str | None:
    """The checkpoint a user resumes ``fit``'s job from: ``"last"``, or the file the interruption left."""
    spec, checkpoint = setup.interruption, setup.checkpoint
    if spec.resume == "last":
        return "last"
    root = fit.root
    if spec.how == "save":
        chosen = root / "user" / "saved.ckpt"
    elif spec.how in ("exception", "sigterm") and checkpoint.on_exception:
        chosen = root / "on_exception" / "on_exception.ckpt"
    elif checkpoint.save_last is not False:
        chosen = root / "checkpoints" / "last.ckpt"
    else:
        saved = [path for path in (root / "checkpoints").glob("*.ckpt") if not path.name.startswith("last")]
        if not saved:
            return None
        chosen = max(saved, key=lambda path: path.stat().st_mtime_ns)
    return chosen if chosen.exists() else None
