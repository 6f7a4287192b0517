"""Codemod: rewrite LightningModule steps that return a loss or a ``{"loss": ...}`` dict into typed results.

    python -m lightning_step_types.migrate [--diff] [--base-class] PATH...

or from Python: ``migrate_source(text)`` gives a ``Migration``: the new module, and a ``Finding``
per step rewritten or skipped.

In every class deriving from a LightningModule (``pytorch_lightning``, ``lightning``,
``lightning.pytorch`` or ``TypedLightningModule``, directly or through a class of the same file):

- ``training_step``: ``return loss`` becomes ``return TrainStepResult(loss=loss)`` and
  ``return {"loss": l, "acc": a}`` becomes ``return TrainStepResult(loss=l, metadata={"acc": a})``;
- ``validation_step`` / ``test_step``: a returned loss tensor, or a dict with exactly one of the
  keys ``"loss"``, ``"val_loss"``, ``"test_loss"``, becomes ``ValStepResult(...)``;
- the Lightning 0.x ``"log"`` / ``"progress_bar"`` entries become ``self.log_dict(...)`` calls
  placed right before the return;
- return annotations become ``TrainStepResult`` / ``ValStepResult`` (``| None`` when the step can
  return None) and the import is added; ``--base-class`` also switches the base class to
  ``TypedLightningModule`` when every step of the class was converted.

The rewrite is syntactic, so it only touches what it can show is safe: a returned name counts
as a loss tensor when its name says so (``loss``, ``g_loss``, ``totalLoss``) and nothing in the
method makes it a dict, a container or a Python number; anything else is left as it was, with
one report line per method saying why. Comments and formatting outside the rewritten
expressions are kept (libcst), every output is re-parsed before it is written, and a second run
changes nothing.

Exit status: 0 when every step found was converted (or there was nothing to do), 1 when a file
could not be read, parsed or written, 2 when some steps (or ``--base-class`` switches) were left
for a manual migration.
"""

from __future__ import annotations

import importlib.util

_MISSING_LIBCST = (
    "lightning_step_types.migrate needs libcst, which is not installed:"
    " pip install 'lightning-step-types[migrate]'  (or: pip install 'libcst>=1.1')"
)
if importlib.util.find_spec("libcst") is None:  # checked first, so the error says what to install
    raise ModuleNotFoundError(_MISSING_LIBCST, name="libcst")

from lightning_step_types.migrate.cli import main
from lightning_step_types.migrate.report import Finding, Migration
from lightning_step_types.migrate.rewrite import migrate_module, migrate_source

__all__ = ["Finding", "Migration", "main", "migrate_module", "migrate_source"]
