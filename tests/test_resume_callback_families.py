"""Families the generator of setups found in Lightning's callbacks and the module's running statistics, each in
a focused form beside its shrunk setup (tests/test_generated_regressions.py):

1. ``StochasticWeightAveraging``: its ``load_state_dict`` keeps the checkpoint's ``n_averaged`` and scheduler
   state in ``_init_n_averaged`` and ``_scheduler_state`` for its set-up, and nothing clears them; a resumed
   fit ended with the checkpoint's (2 and SWALR's state) where the uninterrupted one holds what its own start
   left (0 and None). They go back once the resumed fit's set-up read them, inside an epoch and at its start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytorch_lightning.callbacks import Callback, ModelCheckpoint, StochasticWeightAveraging
from test_resume_regressions import WAYS, Fit, assert_same_fit, chain, fit, planned

# --- 1. StochasticWeightAveraging's values its loading keeps ------------------------------------------------


def _averaging(fitted: Fit) -> StochasticWeightAveraging:
    return next(c for c in fitted.trainer.callbacks if isinstance(c, StochasticWeightAveraging))


def _averaged(fitted: Fit) -> tuple[Any, ...]:
    swa = _averaging(fitted)
    return (swa._init_n_averaged, swa._scheduler_state, int(swa.n_averaged or 0), swa._latest_update_epoch)


@pytest.mark.parametrize("way", WAYS)
def test_stochastic_weight_averaging_keeps_what_its_own_start_loaded_after_a_resume_inside_an_epoch(
    way: str, tmp_path: Path
) -> None:
    """swa_epoch_start=1 (averaging from epoch 0), an exception in epoch 1's batch 3, resumed from
    OnExceptionCheckpoint's file: the averaging counts 2 models and ends as uninterrupted, with _init_n_averaged
    0 and _scheduler_state None (2 and SWALR's state before)."""

    def callbacks() -> list[Callback]:
        return [StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1)]

    full, interrupted, resumed = chain(way, tmp_path, callbacks, (1, 3))
    assert_same_fit(resumed, full)
    assert (interrupted.warned, resumed.warned) == ([], [])
    assert _averaged(full) == (0, None, 2, 1)
    assert _averaged(resumed) == _averaged(full)


@pytest.mark.parametrize("way", WAYS)
def test_stochastic_weight_averaging_keeps_what_its_own_start_loaded_after_a_resume_at_an_epochs_start(
    way: str, tmp_path: Path
) -> None:
    """Resumed from ModelCheckpoint's file of epoch 0's end: Lightning runs the set-up in epoch 1's
    on_train_epoch_start, from the checkpoint's values (1 model, SWALR's state); after it they are the
    uninterrupted fit's (0, None)."""

    def callbacks() -> list[Callback]:
        return [
            StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1),
            ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1),
        ]

    full = fit(way, tmp_path / "full", planned(way), callbacks())
    resumed = fit(
        way, tmp_path / "resumed", planned(way), callbacks(), ckpt_path=tmp_path / "ckpt" / "epoch=0-step=12.ckpt"
    )
    assert_same_fit(resumed, full)
    assert resumed.warned == []
    assert _averaged(resumed) == _averaged(full) == (0, None, 2, 1)
    assert "on_train_epoch_start" not in vars(_averaging(resumed))  # its own method again after the set-up
