"""Every case of the bad-return corpus (tests/corpus.py), run through a real Trainer.

Each case runs three ways: a ``TypedLightningModule`` subclass, and a plain ``LightningModule`` under
``StepResultAdapter(strict=True, nonfinite_loss="raise")`` (the typed module's settings; both held to
the case's strict outcome) and under
``StepResultAdapter()`` (its lenient outcome). The run must end exactly as the table says:
a ``StepResultError`` whose message names the class and hook, what came back, what was expected
and the fix, raised before any optimizer step of automatic optimization; or one
``StepResultWarning`` with those parts, and training ran; or acceptance, and training ran.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import corpus
import pytest
import pytorch_lightning as pl
import torch
from corpus import CASES, Case, Outcome, StepValues
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_step_types import StepResultAdapter, StepResultError, StepResultWarning, TypedLightningModule

REPO = Path(__file__).resolve().parent.parent
RELIABILITY_DOC = REPO / "docs" / "reliability.md"
N_BATCHES = 2


def corpus_loader() -> DataLoader[Any]:
    """Inputs of 1, targets of 0, three samples per batch: with weight 0.5 every squared error is 0.25."""
    n = 3 * N_BATCHES
    return DataLoader(TensorDataset(torch.ones(n, 1), torch.zeros(n, 1)), batch_size=3, shuffle=False)


# The step bodies, shared by both module classes below; assigned in each class body so that
# TypedLightningModule adapts them (it adapts the steps a subclass defines itself).


def _init(self: Any, case: Case) -> None:
    self.case = case
    self.net = nn.Linear(1, 1)
    with torch.no_grad():
        self.net.weight.fill_(0.5)
        self.net.bias.fill_(0.0)
    self.automatic_optimization = case.optimization != "manual"
    self.batch_end_calls = 0


def _values(self: Any, batch: Any) -> StepValues:
    x, y = batch
    preds = self.net(x)
    losses = ((preds - y) ** 2).squeeze(1)
    return StepValues(loss=losses.mean(), losses=losses, preds=preds, x=x)


def _training_step(self: Any, batch: Any, batch_idx: int) -> Any:
    values = self.values(batch)
    if not self.automatic_optimization:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(values.loss)
        optimizer.step()
    return self.case.make_return(values)


def _evaluation_step(self: Any, batch: Any, batch_idx: int) -> Any:
    return self.case.make_return(self.values(batch))


def _count_batch_end(self: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
    self.batch_end_calls += 1


def _configure_optimizers(self: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(self.parameters(), lr=0.1)


class TypedCorpusModel(TypedLightningModule):
    def __init__(self, case: Case) -> None:
        super().__init__()
        _init(self, case)

    values = _values
    training_step = _training_step
    validation_step = _evaluation_step
    test_step = _evaluation_step
    on_validation_batch_end = _count_batch_end
    on_test_batch_end = _count_batch_end
    configure_optimizers = _configure_optimizers


class PlainCorpusModel(pl.LightningModule):
    def __init__(self, case: Case) -> None:
        super().__init__()
        _init(self, case)

    values = _values
    training_step = _training_step
    validation_step = _evaluation_step
    test_step = _evaluation_step
    on_validation_batch_end = _count_batch_end
    on_test_batch_end = _count_batch_end
    configure_optimizers = _configure_optimizers


KINDS = ("typed", "adapter-strict", "adapter")


def build(case: Case, kind: str) -> tuple[pl.LightningModule, list[pl.Callback], Outcome]:
    if kind == "typed":
        return TypedCorpusModel(case), [], case.strict
    # the strict adapter with the typed module's settings; the lenient one at its defaults
    adapter = (
        StepResultAdapter(strict=True, nonfinite_loss="raise") if kind == "adapter-strict" else StepResultAdapter()
    )
    return PlainCorpusModel(case), [adapter], case.strict if kind == "adapter-strict" else case.lenient


def assert_message(message: str, hook: str, outcome: Outcome) -> None:
    """The four lines of ``format_problem``: location, got, expected, fix."""
    lines = message.split("\n")
    assert len(lines) == 4, message
    location, got, expected, fix = lines
    assert location == f"{hook}: {outcome.where}", message
    assert got.startswith("  got:      ") and outcome.got in got, message
    assert expected.startswith("  expected: ") and outcome.expected in expected, message
    assert fix.startswith("  fix:      ") and outcome.fix in fix, message


def params_of(module: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def same_params(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


SINGLE_DEVICE_CASES = [case for case in CASES if case.world_size == 1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", SINGLE_DEVICE_CASES, ids=corpus.case_id)
def test_corpus_case(case: Case, kind: str, tmp_path: Path) -> None:
    model, callbacks, outcome = build(case, kind)
    hook = f"{type(model).__qualname__}.{case.hook}"
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    initial = params_of(model)
    raised: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if case.hook == "training_step":
                trainer.fit(model, train_dataloaders=corpus_loader())
            elif case.hook == "validation_step":
                trainer.validate(model, dataloaders=corpus_loader(), verbose=False)
            else:
                trainer.test(model, dataloaders=corpus_loader(), verbose=False)
        except Exception as error:  # asserted below: only StepResultError, and only when expected
            raised = error
    step_warnings = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    training = case.hook == "training_step"
    manual = case.optimization == "manual"

    if outcome.kind == "error":
        assert type(raised) is StepResultError, f"expected StepResultError, got {raised!r}"
        assert_message(str(raised), hook, outcome)
        assert step_warnings == []
        if training and not manual:
            # rejected before backward: no optimizer step, the weights are as they were
            assert trainer.global_step == 0
            assert same_params(params_of(model), initial)
        elif training:
            # manual optimization: the step stepped its optimizer itself before returning
            assert trainer.global_step == 1
        return

    assert raised is None, f"expected the run to complete, got {raised!r}"
    if outcome.kind == "warning":
        assert len(step_warnings) == 1, step_warnings  # once per hook, not once per batch
        assert_message(step_warnings[0], hook, outcome)
    else:
        assert step_warnings == []
    if outcome.kind == "skipped":
        # Lightning still calls optimizer.step (and counts it in global_step), with no gradients
        assert trainer.global_step == N_BATCHES
        assert same_params(params_of(model), initial)
    elif training:
        assert trainer.global_step == N_BATCHES
        assert same_params(params_of(model), initial) is not outcome.params_change
    else:
        assert model.batch_end_calls == N_BATCHES


def test_corpus_size_and_coverage() -> None:
    """The corpus is wide: every hook, both optimization modes, and each kind of outcome."""
    n = corpus.counts()
    assert n["cases"] >= 40
    assert n["runs"] == n["errors"] + n["warnings"] + n["accepted"]
    assert {(c.hook, c.optimization) for c in CASES} == {
        ("training_step", "automatic"),
        ("training_step", "manual"),
        ("validation_step", "-"),
        ("test_step", "-"),
    }
    kinds = {o.kind for c in CASES for o in (c.strict, c.lenient)}
    assert kinds == {"error", "warning", "accepted", "skipped"}
    assert len({corpus.case_id(c) for c in CASES}) == len(CASES)


def test_reliability_doc_table_is_generated_from_the_corpus() -> None:
    document = RELIABILITY_DOC.read_text(encoding="utf-8")
    assert corpus.extract_table(document) == corpus.render_markdown_table(), (
        "docs/reliability.md's corpus table differs from tests/corpus.py; regenerate it with"
        " `python -m tests.corpus --update docs/reliability.md`"
    )
