"""Check that resuming your own run is exact: ``check_resume(...)``, or ``python -m lightning_step_types.check_resume``.

The check runs your fit once uninterrupted and, for each interruption point, once interrupted there
and once resumed from the checkpoint that left, and compares the resumed chain with the
uninterrupted fit bit for bit: parameters and buffers, the module's plain attributes, optimizer and
LR scheduler states, ``global_step`` and the loop counters, ``callback_metrics`` and
``logged_metrics``, every callback's ``state_dict()`` and plain attributes, every row handed to the loggers (what
``CSVLogger`` writes), and the checkpoint files your ``ModelCheckpoint`` callbacks keep.
"""

from __future__ import annotations

from lightning_step_types.check_resume.check import check_resume
from lightning_step_types.check_resume.compare import Difference
from lightning_step_types.check_resume.points import Interruption
from lightning_step_types.check_resume.report import PointReport, ResumeReport

__all__ = [
    "Difference",
    "Interruption",
    "PointReport",
    "ResumeReport",
    "check_resume",
]
