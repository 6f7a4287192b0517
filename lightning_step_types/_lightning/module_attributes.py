"""The names Lightning and torch keep on a LightningModule instance, a tensor's in-place version, and
the moments around Lightning's restore of the module from a checkpoint.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import torch

from lightning_step_types._lightning.instance_methods import put_on_instance, take_off_instance

__all__ = [
    "around_module_restore",
    "framework_names",
    "stop_around_module_restore",
    "tensor_version",
    "tensor_versions",
]

_NAMES: dict[type, frozenset[str]] = {}
# `HyperparametersMixin.save_hyperparameters` sets these (not `__init__`); the checkpoint holds them
# under "hyper_parameters"
_HPARAMS = frozenset(("_hparams", "_hparams_initial", "_hparams_name"))


def framework_names(module: Any) -> frozenset[str]:
    """The attribute names a fresh instance of the module's ``LightningModule`` base holds in its
    ``__dict__`` (``_trainer``, ``_current_fx_name``, ``training``, torch's ``_parameters`` ...), and
    those ``save_hyperparameters`` sets.

    Relies on Lightning and torch setting their per-instance state in ``__init__``: the names are
    read off a new ``LightningModule()`` of the module's flavour (its first base so named), once per
    flavour, and not listed here, so that a Lightning release that adds one needs no change.
    """
    base: Any = None
    for cls in type(module).__mro__:
        if cls.__name__ == "LightningModule" and cls.__module__.endswith("core.module"):
            base = cls
            break
    if base is None:
        base = torch.nn.Module
    names = _NAMES.get(base)
    if names is None:
        instance: object = base()
        fresh: dict[str, Any] = vars(instance)
        names = _NAMES[base] = frozenset(fresh) | _HPARAMS
    return names


def tensor_version(tensor: torch.Tensor) -> int:
    """The tensor's in-place version (`Tensor._version`, torch-private): every in-place operation on
    it (``self.total += loss``) moves it; a tensor rebound to the attribute is another object."""
    return int(tensor._version)


_VERSION = attrgetter("_version")


def tensor_versions(tensors: tuple[torch.Tensor, ...]) -> tuple[int, ...]:
    """Each tensor's in-place version (`Tensor._version`, as `tensor_version`), read in C."""
    return tuple(map(_VERSION, tensors))


def around_module_restore(trainer: Any, before: Callable[[], None], after: Callable[[Any], None]) -> None:
    """Call ``before()`` as Lightning reads the checkpoint a fit resumes from, before any hook sees it,
    and ``after(checkpoint)`` once the module's own restore is done, before ``on_fit_start`` and any
    other hook, with the checkpoint as the module's hooks saw it.

    Relies on `_CheckpointConnector.resume_start` reading the file through the strategy's public
    ``load_checkpoint``, and on `_CheckpointConnector.restore_model` calling the module's
    ``on_load_checkpoint`` and then the strategy's ``load_model_state_dict`` (the module's
    ``load_state_dict``), with nothing of the module's in between, and on that call passing the
    checkpoint dict first: the strategy's two methods are replaced on the instance for the fit (the
    module is left alone: it pickles as it is).
    """
    strategy = trainer.strategy
    read, restore = strategy.load_checkpoint, strategy.load_model_state_dict

    def load_checkpoint(*args: Any, **kwargs: Any) -> Any:
        take_off_instance(strategy, "load_checkpoint")
        before()
        return read(*args, **kwargs)

    def load_model_state_dict(*args: Any, **kwargs: Any) -> Any:
        take_off_instance(strategy, "load_model_state_dict")
        result = restore(*args, **kwargs)
        after(args[0] if args else kwargs.get("checkpoint"))
        return result

    put_on_instance(strategy, "load_checkpoint", load_checkpoint)
    put_on_instance(strategy, "load_model_state_dict", load_model_state_dict)


def stop_around_module_restore(trainer: Any) -> None:
    take_off_instance(trainer.strategy, "load_checkpoint")
    take_off_instance(trainer.strategy, "load_model_state_dict")
