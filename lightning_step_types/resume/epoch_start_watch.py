"""What a callback's ``on_train_epoch_start`` changed that a resume inside the epoch does not carry.

Lightning does not run the on_train_epoch_start hooks again when it restarts inside an epoch. Whether
skipping one leaves the resumed run different depends on what it did there: a hook that only records
into the callback's own attributes leaves nothing different, since those come back at the point
(``resume/attributes.py``); one that unfreezes layers and adds them to the optimizer
(``BackboneFinetuning``) does. So in the run that saves, each call of a callback's hook is watched
(once per epoch, never per batch), and what it changed is compared with what a resume carries:

- the callback's own attributes: where the library follows them (``resume/holders.py``), each comes
  back at the point, or is named by the warning on callback attributes (not plain data); a callback's
  whose attributes are not followed, it changed;
- the module: which parameters it has, their ``requires_grad``, its submodules' train/eval mode
  (none of which a checkpoint holds); its weights and its own attributes come back at the point;
- the optimizers' parameter groups and the LR schedulers (a checkpoint holds their states, not which
  parameters a group holds, nor a scheduler added);
- the Trainer's settings a checkpoint does not hold (``accumulate_grad_batches``, gradient clipping,
  the limits and the validation interval).

The rows it wrote to the loggers (``LearningRateMonitor``'s) are not among them: the call ran in the
run that saved, before the save, so that run wrote them and the resumed run goes on after them.

A checkpoint carries, per callback, what its last call changed that no resume carries, and what its
earlier calls in the fit (and in the fits it resumed from) changed that lasts past their epoch
(``BackboneFinetuning`` unfreezes the backbone once, and a resumed module is frozen again by its
``setup``). A run resumed inside an epoch names, in one warning, each hook whose
skipped call changed such state or whose earlier calls did, with what and in which epoch, and any hook
of which it knows nothing (a checkpoint of plain Lightning, a callback whose hook was not watched in
that epoch). What a hook changes elsewhere (a dataset's attribute, a global) is not seen.
"""

from __future__ import annotations

from typing import Any, cast

from lightning_step_types._lightning.instance_methods import pickled_as
from lightning_step_types.resume.marks import Mark, mark_of, same_mark

__all__ = ["EPOCH_START_HOOK", "EpochStartWatch", "changes_before"]

EPOCH_START_HOOK = "on_train_epoch_start"

# what a checkpoint of an earlier release notes for the rows a call wrote: not a change (the run that saved wrote them)
_EARLIER_ROWS = "rows written to the loggers"
# Trainer settings a callback may change at an epoch's start and a checkpoint does not hold
_SETTINGS = (
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "limit_train_batches",
    "limit_val_batches",
    "val_check_interval",
    "check_val_every_n_epoch",
)


class _Reading:
    """What the hook can change that a resume may not carry, read before and after its call."""

    def __init__(self, trainer: Any, module: Any, callback: Any, skip: frozenset[str] | None) -> None:
        parameters: list[tuple[str, Any]] = list(module.named_parameters()) if module is not None else []
        self.parameters = tuple((name, id(parameter)) for name, parameter in parameters)
        self.requires_grad = tuple(bool(parameter.requires_grad) for _, parameter in parameters)
        self.modes = tuple(bool(sub.training) for sub in module.modules()) if module is not None else ()
        optimizers: list[Any] = list(getattr(trainer, "optimizers", []) or [])
        self.groups = tuple(
            (id(optimizer), tuple(tuple(map(id, group["params"])) for group in optimizer.param_groups))
            for optimizer in optimizers
        )
        configs: list[Any] = list(getattr(trainer, "lr_scheduler_configs", []) or [])
        self.schedulers = tuple(id(config.scheduler) for config in configs)
        self.settings = tuple(getattr(trainer, name, None) for name in _SETTINGS)
        # the callback's own attributes, where the library does not follow them (``skip`` None: it does)
        own: dict[str, Any] = (
            cast("dict[str, Any]", vars(callback)) if skip is not None and hasattr(callback, "__dict__") else {}
        )
        self.attributes: dict[str, Mark] = {
            name: mark_of(value) for name, value in own.items() if name not in (skip or ())
        }


def _changes(before: _Reading, after: _Reading, callback: Any, carried: bool) -> list[str]:
    """What changed between the two readings that no resume carries, as the warning names it."""
    found: list[str] = []
    if before.parameters != after.parameters:
        found.append("the module's parameters")
    else:
        flipped = sum(a != b for a, b in zip(before.requires_grad, after.requires_grad))
        if flipped:
            found.append(f"requires_grad of {flipped} parameter{'s' if flipped > 1 else ''}")
    if before.modes != after.modes:
        found.append("the train/eval mode of the module's submodules")
    if before.groups != after.groups:
        found.append("the optimizers' parameter groups")
    if before.schedulers != after.schedulers:
        found.append("the LR schedulers")
    found += [f"Trainer.{name}" for name, a, b in zip(_SETTINGS, before.settings, after.settings) if a != b]
    if carried:  # its attributes come back at the point, or the warning on callback attributes names them
        return found
    now: dict[str, Any] = cast("dict[str, Any]", vars(callback)) if hasattr(callback, "__dict__") else {}
    for name in sorted({*before.attributes, *after.attributes}):
        old, new = before.attributes.get(name), after.attributes.get(name)
        if old is None or new is None or not same_mark(old, new):
            found.append(
                f"its attribute {name} ({type(now[name]).__name__})" if name in now else f"its attribute {name}"
            )
    return found


class EpochStartWatch:
    """In place of a callback's ``on_train_epoch_start`` for a fit: calls it, and notes in ``found``
    under the callback's state key the epoch, the hook's name and what the call changed that no
    resume carries. ``carried``: the callback's attributes are followed (and so come back)."""

    def __init__(
        self,
        found: dict[str, dict[str, Any]],
        key: str,
        callback: Any,
        skip: frozenset[str],
        carried: bool,
        original: Any,
    ) -> None:
        self.found: dict[str, dict[str, Any]] = found
        self.key: str = key
        self.callback: Any = callback
        self.skip: frozenset[str] = skip
        self.carried: bool = carried
        self.original: Any = original

    def __reduce__(self) -> tuple[Any, ...]:  # pickled or copied: what the callback had (`pickled_as`)
        return pickled_as(self.original)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        trainer: Any = args[0] if args else kwargs.get("trainer")
        module: Any = args[1] if len(args) > 1 else kwargs.get("pl_module", getattr(trainer, "lightning_module", None))
        skip = None if self.carried else self.skip
        before = _Reading(trainer, module, self.callback, skip)
        result = self.original(*args, **kwargs)
        after = _Reading(trainer, module, self.callback, skip)
        changed = _changes(before, after, self.callback, self.carried)
        last: Any = self.found.get(self.key)
        earlier: dict[str, int] = {}
        if isinstance(last, dict):  # what the earlier calls changed that lasts, by the last epoch it changed
            record = cast("dict[str, Any]", last)
            lasting: dict[str, int] = record.get("earlier") or {}
            changed_then: list[str] = record.get("changed") or []
            earlier.update(lasting)
            earlier.update({what: int(record["epoch"]) for what in changed_then if what != _EARLIER_ROWS})
        self.found[self.key] = {
            "hook": f"{type(self.callback).__name__}.{EPOCH_START_HOOK}",
            "epoch": int(getattr(trainer, "current_epoch", -1)),
            "changed": changed,
            "earlier": earlier,
        }
        return result


def changes_before(record: Any, epoch: int) -> list[str] | None:
    """What a callback's hook (its ``record``, as `EpochStartWatch` keeps it) changed that no resume inside
    ``epoch`` carries, in groups: its call in that epoch's, then its earlier calls' lasting changes, each
    epoch's (``... in epoch N``). None where its call in that epoch was not watched."""
    if not isinstance(record, dict) or cast("dict[str, Any]", record).get("epoch") != epoch:
        return None
    watched = cast("dict[str, Any]", record)
    changed: list[Any] = watched.get("changed") or []
    now = [str(what) for what in changed if what != _EARLIER_ROWS]
    earlier: dict[str, Any] = watched.get("earlier") or {}
    by_epoch: dict[int, list[str]] = {}
    for what, when in earlier.items():
        if what not in now and int(when) < epoch:
            by_epoch.setdefault(int(when), []).append(str(what))
    groups = [", ".join(now)] if now else []
    return groups + [f"{', '.join(whats)} in epoch {when}" for when, whats in sorted(by_epoch.items())]
