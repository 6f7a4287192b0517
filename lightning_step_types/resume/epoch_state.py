"""Exact resume: what the typed module and the callback call, at the hooks of a fit.

Lightning saves the weights, optimizers, loops and (with ``StatefulDataLoader``) the data order,
but not the running aggregates of the epoch in flight (2.0 removed that, PR #16516), nor the
torchmetrics states (kept out of ``state_dict()``), and a checkpoint saved inside a batch, a
validation or an epoch's end resumes with counters that disagree. With exact resume on (the
default), a checkpoint of a ``TypedLightningModule`` or under ``StepResultAdapter()`` resumes from
the last point whose every effect it holds, with each process's running state at that point:

- ``resume/fit_follower.py`` follows the fit through Lightning's loops;
- ``resume/points.py`` is the rule that picks the point;
- ``resume/save.py`` adds, under the library's key, Lightning's fit loop state set for the point and
  the running state (``resume/state.py``, for the metrics ``resume/metric_state.py`` finds; across
  processes, ``resume/rank_exchange.py``), leaving Lightning's own entries as Lightning wrote them;
- ``resume/load.py`` hands Lightning that fit loop state when the checkpoint loads, puts the state
  back and starts the resumed run at the point;
- ``resume/holders.py`` does the same for who else holds state: the callbacks' state and attributes, the rows
  the loggers already wrote, ``trainer.should_stop``, the epoch-start hooks Lightning skips;
- ``resume/undeclared_state.py`` does it for the module's own attributes that no checkpoint holds (a
  list ``training_step`` appends to, a counter, a cached tensor), and names those it cannot save;
- ``resume/plain_loaders.py`` starts a plain ``DataLoader`` inside an epoch at the point's batch, its
  order drawn again from the states its pass drew from;
- ``resume/data_order.py`` and ``resume/data_randomness.py`` put back the samplers' and the loaders'
  generators' states before the point's epoch draws its order again;
- ``resume/shared_settings.py`` gives each process its own schedulers' states back under DDP, and names
  optimizer settings the processes did not share;
- ``resume/messages.py`` says, in one ``StepResultWarning`` at resume, what cannot be exact.

One code path for both ways in; every private Lightning name is read in ``_lightning/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning_step_types.resume.rank_exchange as rank_exchange
from lightning_step_types._lightning.data import saved_inside_epoch
from lightning_step_types.resume.data_order import saved_part
from lightning_step_types.resume.fit_follower import any_resuming, follower_of, start_following, stop_following
from lightning_step_types.resume.load import load_running_state
from lightning_step_types.resume.messages import CHECKPOINT_KEY, lightning_version, warn_unavailable
from lightning_step_types.resume.save import STATE, save_running_state

__all__ = [
    "CHECKPOINT_KEY",
    "exact_resume_enabled",
    "fit_ends",
    "fit_starts",
    "load_epoch_state",
    "resuming",
    "save_epoch_state",
]


def exact_resume_enabled(owner: Any) -> bool:
    """The switch: ``exact_resume = False`` on a typed module, ``StepResultAdapter(exact_resume=False)``."""
    return bool(getattr(owner, "exact_resume", True))


def fit_starts(trainer: Any, module: Any, stage: Any) -> None:
    """At ``setup``: follow a fit (validate, test and predict save nothing mid-epoch)."""
    # TrainerFn is a str enum in both flavours; str.__eq__ skips its case-folding __eq__.
    if trainer is not None and str.__eq__(stage, "fit") is True:
        follower = start_following(trainer, module)
        if follower is not None:
            rank_exchange.fit_starts(trainer)
            rank_exchange.warn_if_restarts_cannot_connect(trainer, module)
            follower.data_order.follow(trainer)  # before the randomness, which runs right before its iterator too
            follower.randomness.follow(trainer)
            follower.streams.follow(trainer)
            follower.plain_loaders.follow(trainer)


def fit_ends(trainer: Any, module: Any) -> None:
    """At ``teardown``: the loops are Lightning's own again."""
    stop_following(trainer, module)
    if trainer is not None:
        rank_exchange.fit_ends(trainer)


def save_epoch_state(trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
    """``on_save_checkpoint``, on every process; a save that other processes may not reach waits for
    them a bounded time only (``rank_exchange``)."""
    already: Any = checkpoint.get(CHECKPOINT_KEY)
    if isinstance(already, dict) and STATE in already:  # saved already by this dump (a hook that calls super())
        return
    save_running_state(trainer, module, checkpoint)
    point: Any = saved_part(saved_part(checkpoint, CHECKPOINT_KEY), STATE).get("point")
    rank_exchange.settle_save(trainer, point)


def load_epoch_state(trainer: Any, module: Any, checkpoint: Mapping[str, Any]) -> None:
    """``on_load_checkpoint``: keep the state for the fit that resumes from it."""
    if follower_of(module) is None and trainer is not None and saved_inside_epoch(checkpoint):
        if str.__eq__(trainer.state.fn, "fit") is True:  # TrainerFn is a str enum: skip its case-folding __eq__
            warn_unavailable(
                f"Lightning {lightning_version(trainer)} resumes a checkpoint saved inside an epoch by training"
                " the batch it was saved at again"
            )
        return
    load_running_state(trainer, module, checkpoint)


def resuming(module: Any | None = None) -> bool:
    """Whether a resumed fit still has state to put back (``module``'s, or any module's)."""
    if module is not None:
        follower = follower_of(module)
        return follower is not None and follower.resume is not None
    return any_resuming()
