"""Two CPU processes under DDP: a typed module trains exactly as the equivalent plain-Lightning module.

Each run spawns two processes (``start_method="spawn"``, which works inside pytest); rank 0 saves
its final weights to a file, and Lightning also copies them back into the parent's model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import (
    PlainRegressor,
    PlainTypedRegressor,
    TypedRegressor,
    assert_same_params,
    make_loader,
    make_trainer,
    params_of,
    spawn_with_teardown_retry,
)
from pytorch_lightning.strategies import DDPStrategy
from torch.multiprocessing.spawn import ProcessRaisedException

from lightning_step_types import StepResultAdapter, TrainStepResult

pytestmark = pytest.mark.slow


class RecordRun(pl.Callback):
    """Rank 0 writes its final parameters (the file is how a child's result reaches the test), and
    every rank marks the end of its run in ``teardown``, the last hook Lightning calls."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            torch.save(
                {**params_of(pl_module), "global_step": torch.tensor(trainer.global_step)}, self.root / "rank0.pt"
            )

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        (self.root / f"finished-rank{trainer.global_rank}").touch()


STRATEGIES: dict[str, Callable[[], Any]] = {
    "ddp_spawn": lambda: "ddp_spawn",
    # find_unused_parameters makes DDP route the step's output through its pytree-based sink
    "ddp-find-unused": lambda: DDPStrategy(find_unused_parameters=True, start_method="spawn"),
}


def fit_on_two_processes(
    model: pl.LightningModule, root: Path, make_strategy: Callable[[], Any], callbacks: list[pl.Callback] | None = None
) -> dict[str, torch.Tensor]:
    """Fit on two spawned CPU processes; return rank 0's final parameters and global step (a gloo
    teardown abort after both ranks' end markers is repeated: ``models.spawn_with_teardown_retry``)."""

    def fit(run_root: Path) -> None:
        strategy = make_strategy()
        trainer = make_trainer(
            run_root, devices=2, strategy=strategy, callbacks=[*(callbacks or []), RecordRun(run_root)]
        )
        trainer.fit(model, make_loader())

    run_root = spawn_with_teardown_retry(
        fit, root, lambda r: all((r / f"finished-rank{rank}").exists() for rank in (0, 1))
    )
    return torch.load(run_root / "rank0.pt")


PlainRun = Callable[[str], dict[str, torch.Tensor]]


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> PlainRun:
    """The plain-Lightning reference per strategy, run once for this module (each run spawns twice)."""
    runs: dict[str, dict[str, torch.Tensor]] = {}

    def run(strategy_name: str) -> dict[str, torch.Tensor]:
        if strategy_name not in runs:
            plain = PlainRegressor()
            root = tmp_path_factory.mktemp(f"plain-{strategy_name}")
            runs[strategy_name] = fit_on_two_processes(plain, root, STRATEGIES[strategy_name])
            assert_same_params(plain, params_of_rank0(runs[strategy_name]))  # copied back into the parent
        return runs[strategy_name]

    return run


def params_of_rank0(saved: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: value for name, value in saved.items() if name != "global_step"}


@pytest.mark.parametrize("strategy_name", list(STRATEGIES))
def test_typed_module_matches_plain_lightning_under_ddp(
    tmp_path: Path, strategy_name: str, plain_run: PlainRun
) -> None:
    typed = TypedRegressor()
    initial = params_of(typed)
    plain_rank0 = plain_run(strategy_name)
    typed_rank0 = fit_on_two_processes(typed, tmp_path, STRATEGIES[strategy_name])

    # 8 samples over 2 processes: 2 batches of 2 per process, so 2 optimizer steps.
    assert int(typed_rank0["global_step"]) == int(plain_rank0["global_step"]) == 2
    assert not torch.equal(typed_rank0["net.weight"], initial["net.weight"])
    assert_same_params(params_of_rank0(typed_rank0), params_of_rank0(plain_rank0))
    # Lightning copies rank 0's weights back into the parent's model.
    assert_same_params(typed, params_of_rank0(typed_rank0))


def test_adapter_on_a_plain_module_matches_plain_lightning_under_ddp(tmp_path: Path, plain_run: PlainRun) -> None:
    typed = PlainTypedRegressor()
    typed_rank0 = fit_on_two_processes(
        typed, tmp_path, STRATEGIES["ddp-find-unused"], callbacks=[StepResultAdapter(strict=True)]
    )
    assert_same_params(params_of_rank0(typed_rank0), params_of_rank0(plain_run("ddp-find-unused")))
    assert_same_params(typed, params_of_rank0(typed_rank0))
    assert "training_step" not in typed.__dict__  # the adapter only ever touched the children's copies


class TypedSkippingBatch1(TypedRegressor):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult | None:
        return None if batch_idx == 1 else super().training_step(batch, batch_idx)


def test_none_from_training_step_is_an_error_under_ddp(tmp_path: Path) -> None:
    model = TypedSkippingBatch1()
    with pytest.raises(ProcessRaisedException) as info:
        make_trainer(tmp_path, devices=2, strategy="ddp_spawn").fit(model, make_loader())
    # The child's traceback text is all that crosses the process boundary.
    message = str(info.value)
    assert "lightning_step_types.errors.StepResultError: TypedSkippingBatch1.training_step: return value\n" in message
    assert "  got:      None\n" in message
    assert (
        "  expected: a TrainStepResult on every process: skipping a batch with None is not supported"
        " under distributed training (the other processes would wait for its gradients)\n"
    ) in message
    assert (
        "  fix:      return a zero loss that keeps the graph instead, e.g. `return TrainStepResult(loss=loss * 0.0)`"
        in message
    )
