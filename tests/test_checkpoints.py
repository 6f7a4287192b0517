"""Typed modules survive checkpoints, pickling, copying and compiling; the adapter leaves no trace.

- fit N epochs, checkpoint, resume: exactly the weights of an uninterrupted run;
- ``load_from_checkpoint``, ``pickle``, ``copy.deepcopy``: the copies keep their weights, their
  hyperparameters and their checked steps;
- ``torch.compile(module)`` handed to the Trainer (Lightning compiles ``forward`` and the steps):
  the typed results flow and the weights equal an eager run's;
- after a run under ``StepResultAdapter`` a plain module is byte for byte (``torch.save``) what the
  same run without the adapter leaves, and its steps are its own again.
"""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from models import (
    PlainRegressor,
    PlainTypedRegressor,
    RegressorParts,
    TypedRegressor,
    assert_same_params,
    make_loader,
    make_trainer,
)
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_step_types import (
    StepResultAdapter,
    StepResultError,
    TrainStepResult,
    TypedLightningModule,
    ValStepResult,
)


class CheckpointedTyped(TypedRegressor):
    """``TypedRegressor`` with momentum (optimizer state to restore) and saved hyperparameters."""

    def __init__(self, seed: int = 0, lr: float = 0.05, momentum: float = 0.9) -> None:
        super().__init__(seed=seed, lr=lr)
        self.save_hyperparameters()
        self.train_outputs: list[Any] = []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_outputs.append(outputs)


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`, callbacks used to create the checkpoint")
def test_resume_from_checkpoint_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    uninterrupted = CheckpointedTyped()
    make_trainer(tmp_path / "uninterrupted", max_epochs=4).fit(uninterrupted, make_loader())

    first = CheckpointedTyped()
    checkpoints = tmp_path / "checkpoints"
    trainer = make_trainer(
        tmp_path / "first",
        max_epochs=2,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=checkpoints, save_last=True)],
    )
    trainer.fit(first, make_loader())
    assert trainer.global_step == 8

    resumed = CheckpointedTyped(seed=5)  # other initial weights: all of them must come from the checkpoint
    resumed_trainer = make_trainer(tmp_path / "resumed", max_epochs=4)
    resumed_trainer.fit(resumed, make_loader(), ckpt_path=checkpoints / "last.ckpt")
    assert resumed_trainer.global_step == 16
    assert_same_params(resumed, uninterrupted)
    # the resumed steps still returned typed results, checked by the adapter
    assert [type(o) for o in resumed.train_outputs] == [TrainStepResult] * 8


def test_load_from_checkpoint_keeps_weights_hyperparameters_and_checks(tmp_path: Path) -> None:
    model = CheckpointedTyped(seed=1, lr=0.02, momentum=0.5)
    trainer = make_trainer(tmp_path, max_epochs=1)
    trainer.fit(model, make_loader())
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)

    loaded = CheckpointedTyped.load_from_checkpoint(path)
    assert type(loaded) is CheckpointedTyped
    assert dict(loaded.hparams) == {"seed": 1, "lr": 0.02, "momentum": 0.5}
    assert_same_params(loaded, model)
    metrics = make_trainer(tmp_path / "validate").validate(loaded, make_loader(), verbose=False)
    reference = make_trainer(tmp_path / "validate-original").validate(model, make_loader(), verbose=False)
    assert metrics == reference
    assert_step_is_still_checked(loaded, tmp_path / "checked")


class BadValidation(CheckpointedTyped):
    """The same module, whose validation returns a plain dict: the check must reject it."""

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        return {"loss": loss}


def assert_step_is_still_checked(module: CheckpointedTyped, root: Path) -> None:
    """A copy's class is the adapted class: swap in a bad step and the check fires."""
    bad = BadValidation(**module.hparams)
    bad.load_state_dict(module.state_dict())
    with pytest.raises(StepResultError, match=r"^BadValidation\.validation_step: return value\n"):
        make_trainer(root).validate(bad, make_loader(), verbose=False)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickle_and_deepcopy_of_a_fitted_typed_module(how: str, tmp_path: Path) -> None:
    model = CheckpointedTyped(seed=2)
    make_trainer(tmp_path / "fit").fit(model, make_loader())
    clone = pickle.loads(pickle.dumps(model)) if how == "pickle" else copy.deepcopy(model)
    assert type(clone) is CheckpointedTyped
    assert_same_params(clone, model)
    assert dict(clone.hparams) == dict(model.hparams)

    # both train on identically, with typed results
    clone.train_outputs.clear()
    model.train_outputs.clear()
    make_trainer(tmp_path / "clone").fit(clone, make_loader())
    make_trainer(tmp_path / "original").fit(model, make_loader())
    assert_same_params(clone, model)
    assert [type(o) for o in clone.train_outputs] == [TrainStepResult] * 4


class CompilableTyped(RegressorParts, TypedLightningModule):
    """Steps without ``self.log``: with torch 2.13 and Lightning 2.6, dynamo cannot trace ``self.log``
    (it inspects the step's signature), for plain LightningModules just the same."""

    def __init__(self) -> None:
        super().__init__()
        self.build(seed=0, lr=0.1)
        self.train_outputs: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        loss, preds = self.loss_and_preds(batch)
        return TrainStepResult(loss=loss, metadata={"preds": preds.detach()})

    def validation_step(self, batch: Any, batch_idx: int) -> ValStepResult:
        loss, preds = self.loss_and_preds(batch)
        return ValStepResult(loss=loss, metadata={"preds": preds})

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_outputs.append(outputs)


@pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo.*")
def test_torch_compile_of_a_typed_module(tmp_path: Path) -> None:
    """``aot_eager`` traces and runs the same graphs as inductor minus code generation, which takes
    about a minute on a 2-core CPU; inductor gives the same result (checked by hand, see docs)."""
    torch._dynamo.reset()
    model = CompilableTyped()
    compiled = torch.compile(model, backend="aot_eager")
    trainer = make_trainer(tmp_path / "compiled")
    trainer.fit(compiled, make_loader())
    assert trainer.global_step == 4
    assert [type(o) for o in model.train_outputs] == [TrainStepResult] * 4

    eager = CompilableTyped()
    make_trainer(tmp_path / "eager").fit(eager, make_loader())
    assert_same_params(model, eager)
    for compiled_output, eager_output in zip(model.train_outputs, eager.train_outputs, strict=True):
        assert torch.equal(compiled_output.loss, eager_output.loss)
        assert torch.equal(compiled_output.metadata["preds"], eager_output.metadata["preds"])

    # a wrong return is still caught inside the compiled step
    with pytest.raises(StepResultError, match=r"^BadCompiled\.training_step: return value"):
        make_trainer(tmp_path / "bad").fit(torch.compile(BadCompiled(), backend="aot_eager"), make_loader())
    torch._dynamo.reset()


class BadCompiled(CompilableTyped):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss, _ = self.loss_and_preds(batch)
        return loss  # a plain tensor: strict mode rejects it


# --- StepResultAdapter leaves no trace ---------------------------------------------------------


def saved_bytes(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def module_fingerprint(module: pl.LightningModule) -> tuple[list[str], bytes, bytes]:
    """Attribute names, weights, and the whole module as ``torch.save`` writes it."""
    return sorted(module.__dict__), saved_bytes(module.state_dict()), saved_bytes(module)


@pytest.mark.parametrize("strict", [False, True])
def test_adapter_leaves_the_module_as_plain_lightning_does(strict: bool, tmp_path: Path) -> None:
    module_class = PlainTypedRegressor if strict else PlainRegressor
    adapted, untouched = module_class(), module_class()
    assert module_fingerprint(adapted) == module_fingerprint(untouched)
    weights_before = saved_bytes(adapted.state_dict())

    adapter = StepResultAdapter(strict=strict)
    make_trainer(tmp_path / "adapted", callbacks=[adapter]).validate(adapted, make_loader(), verbose=False)
    make_trainer(tmp_path / "untouched").validate(untouched, make_loader(), verbose=False)

    assert module_fingerprint(adapted) == module_fingerprint(untouched)
    assert saved_bytes(adapted.state_dict()) == weights_before
    assert not {"training_step", "validation_step", "test_step"} & adapted.__dict__.keys()
    assert adapted.validation_step.__func__ is module_class.validation_step
    assert adapter._replaced == {}
    restored = pickle.loads(pickle.dumps(adapted))
    assert module_fingerprint(restored) == module_fingerprint(adapted)


def test_adapter_restores_instance_steps_and_cleans_up_after_an_error(tmp_path: Path) -> None:
    module = PlainRegressor()

    def own_validation_step(batch: Any, batch_idx: int) -> Any:
        return "not a result"  # lenient mode warns; strict mode rejects

    module.validation_step = own_validation_step  # an instance attribute the adapter must put back
    with pytest.raises(
        StepResultError, match=r"^PlainRegressor\.validation_step: return value\n  got:      str 'not a result'"
    ):
        make_trainer(tmp_path, callbacks=[StepResultAdapter(strict=True)]).validate(
            module, make_loader(), verbose=False
        )
    assert module.__dict__["validation_step"] is own_validation_step
    assert "training_step" not in module.__dict__ and "test_step" not in module.__dict__
