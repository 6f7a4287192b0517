"""Codemod: rewrite LightningModule steps that return a loss or a ``{"loss": ...}`` dict into typed results.

    python -m lightning_step_types.migrate [--diff] [--base-class] [--assume-lightning] [--strict-keys] PATH...

or from Python: ``migrate_source(text)`` gives a ``Migration``: the new module, and a ``Finding``
per step (a verdict: rewritten, already typed, returns nothing, not in a LightningModule, or
skipped with the reason), per note and per Lightning 1.x leftover; ``migrate_run`` does the same
for several files at once.

The files of one run are analyzed together: base classes, helpers and the code reading a step's
keys are looked up in all of them. In every class deriving from a LightningModule:

- ``training_step``: ``return loss`` becomes ``return TrainStepResult(loss=loss)`` and
  ``return {"loss": l, "acc": a}`` becomes ``return TrainStepResult(loss=l, metadata={"acc": a})``;
- ``validation_step`` / ``test_step``: a returned loss, or a dict with exactly one of the keys
  ``"loss"``, ``"val_loss"``, ``"test_loss"``, becomes ``ValStepResult(...)``;
- a dict built in a variable (``out = {...}; out["k"] = v; return out``) becomes a result too, and so
  does a helper's ``{"loss": loss}`` (``self._shared_step(batch, "train")["loss"]``; a literal
  argument decides the helper's branches on it);
- the Lightning 0.x ``"log"`` / ``"progress_bar"`` entries become ``self.log_dict(...)`` calls;
- return annotations become ``TrainStepResult`` / ``ValStepResult`` (``| None`` when the step can
  return None), the import is added and imports only the old annotation used are removed;
- with ``--base-class``, the Lightning import a switched base was read from goes when nothing else
  in the file uses it. The report names each switch and each such import, removed or kept.

A value is the loss only when the code shows it (``losses.py``): a loss function or module,
arithmetic on a loss, a reduction, a summed dict of losses, or a helper of the class or file each
of whose returns is one (followed three calls deep). Names decide nothing. Comments and
formatting outside the rewritten expressions are kept (libcst), every output is re-parsed before
it is written, and a second run changes nothing.

Exit status: 0 when every step found was converted or needs nothing, 1 when a file could not be
read, parsed or written, 2 when something is left for a manual migration (a step skipped, a
``--base-class`` switch not made, a Lightning 1.x leftover). See docs/migration.md.
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
from lightning_step_types.migrate.facts import Options
from lightning_step_types.migrate.report import Finding, Migration
from lightning_step_types.migrate.rewrite import migrate_module, migrate_run, migrate_source

__all__ = ["Finding", "Migration", "Options", "main", "migrate_module", "migrate_run", "migrate_source"]
