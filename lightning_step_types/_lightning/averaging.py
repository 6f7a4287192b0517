"""StochasticWeightAveraging: what its loading keeps for its set-up, and whether that set-up ran.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private; each function says which it reads and what it relies on.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["averaging_loaded", "averaging_set_up", "is_averaging", "put_back_averaging_loaded"]

# `StochasticWeightAveraging.load_state_dict` (pytorch-lightning 2.1 to 2.6) keeps the checkpoint's
# `n_averaged` in `_init_n_averaged` and its `scheduler_state` in `_scheduler_state`, for the set-up in
# its first `on_train_epoch_start` of the fit's averaging epochs (guarded by `_initialized`), which
# builds `n_averaged` and the SWALR scheduler from them (and `on_fit_start` reads `_scheduler_state`).
# Nothing clears them after: a fit keeps what the checkpoint it resumed from held (0 and None for a
# fit from the start). `state_dict()` holds neither.
_KEPT_BY_LOADING = ("_init_n_averaged", "_scheduler_state")
_SET_UP = "_initialized"


def is_averaging(callback: Any) -> bool:
    """Whether ``callback`` is Lightning's ``StochasticWeightAveraging`` (either flavour) or a subclass."""
    return any(
        cls.__name__ == "StochasticWeightAveraging" and cls.__module__.endswith("callbacks.stochastic_weight_avg")
        for cls in type(callback).__mro__
    )


def averaging_loaded(callback: Any) -> dict[str, Any]:
    """What the callback's loading kept for its set-up, as it holds it now (a copy), by attribute name;
    empty where it holds none of those names (another release)."""
    own: dict[str, Any] = getattr(callback, "__dict__", {})
    return {name: copy.deepcopy(own[name]) for name in _KEPT_BY_LOADING if name in own}


def averaging_set_up(callback: Any) -> bool:
    """Whether its set-up from what its loading kept has run in this fit (``_initialized``)."""
    return bool(getattr(callback, _SET_UP, False))


def put_back_averaging_loaded(callback: Any, kept: dict[str, Any]) -> None:
    """Set what `averaging_loaded` read (in the run that saved) on the callback, once its set-up ran."""
    for name, value in kept.items():
        if name in _KEPT_BY_LOADING:
            setattr(callback, name, copy.deepcopy(value))
