"""Stage isolation: one torchmetrics object that training and validation share in a fit is named in one warning.

The mix-up first, measured under plain Lightning: a shared ``Accuracy`` with ``val_check_interval=5``
over 10 training batches gives ``train_acc`` 0.0 and a ``val_acc`` that counts training batches,
where one object per stage gives the accuracy over the epoch's samples. Then the warning, its
exact text for each place a metric can live (an attribute, a ``ModuleList`` or ``ModuleDict``
item, a ``MetricCollection``, one object whether or not torchmetrics groups its members), under
``TypedLightningModule`` and ``StepResultAdapter``, in both Lightning flavours, and on rank 0 only
under DDP; and what must stay silent: validation and test sharing an object, one object (or
collection) per stage, and a second warning for the same object.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from limits import hang_limit
from metric_models import CLASSES, CLASSES_BY_FLAVOUR, Parts, declared, loader
from models import trainer_kwargs
from test_flavours import FLAVOUR_IDS, FLAVOURS
from torchmetrics import Accuracy, Metric, MetricCollection
from torchmetrics.classification import MulticlassPrecision

from lightning_step_types import StepResultError, StepResultWarning, TrainStepResult, ValStepResult

WAYS = ["typed", "adapter"]
WHERE = {  # how the module keeps the metric -> the path the warning names
    "attribute": "self.acc",
    "ModuleList": "self.metrics[0]",
    "ModuleDict": "self.metrics['acc']",
    "MetricCollection": "self.collection",
    "compute groups": "self.collection",  # a MetricCollection whose two members torchmetrics groups
}


def accuracy() -> Accuracy:
    return Accuracy(task="multiclass", num_classes=CLASSES)  # micro average: hits / samples


def two_grouped_members() -> MetricCollection:
    """Accuracy and precision keep the same states: torchmetrics updates the first, the second shares them."""
    return MetricCollection({"acc": accuracy(), "precision": MulticlassPrecision(num_classes=CLASSES, average="micro")})


# --- one classifier, built per flavour and way, named MyModel as in the catalogue ----------------------


def init(self: Any, where: str = "attribute", shared: bool = True, test_shares_val: bool = False) -> None:
    super(self._own_class, self).__init__()
    self.build("acc", False)
    self.where, self.hits = where, {"train": [], "val": []}
    if where == "attribute":
        self.acc = accuracy()
        self.val_acc = self.acc if shared else accuracy()
    elif where == "ModuleList":
        self.metrics = torch.nn.ModuleList([accuracy()])
    elif where == "ModuleDict":
        self.metrics = torch.nn.ModuleDict({"acc": accuracy()})
    elif where == "MetricCollection":
        self.collection = MetricCollection({"acc": accuracy()})
    elif where == "compute groups":
        self.collection = two_grouped_members()
    if test_shares_val:
        self.test_acc = self.val_acc


def metric_for(self: Any, stage: str) -> Any:
    if self.where == "attribute":
        return {"train": self.acc, "val": self.val_acc, "test": getattr(self, "test_acc", None)}[stage]
    if self.where == "ModuleList":
        return self.metrics[0]
    if self.where == "ModuleDict":
        return self.metrics["acc"]
    return self.collection


def use_metric(self: Any, stage: str, logits: torch.Tensor, y: torch.Tensor) -> None:
    """The hand-written pattern: update, then log the object for its epoch value."""
    self.hits.setdefault(stage, []).append((logits.argmax(dim=1) == y).tolist())
    metric = metric_for(self, stage)
    metric.update(logits, y)
    if isinstance(metric, MetricCollection):
        self.log_dict(
            {f"{stage}_{name}": member for name, member in metric.items(keep_base=True)}, on_step=False, on_epoch=True
        )
    else:
        self.log(f"{stage}_acc", metric, on_step=False, on_epoch=True)


def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
    loss, logits, y = self.forward_batch(batch)
    use_metric(self, "train", logits.detach(), y)
    return TrainStepResult(loss=loss) if self.typed else loss


def validation_step(self: Any, batch: Any, batch_idx: int) -> Any:
    loss, logits, y = self.forward_batch(batch)
    use_metric(self, "val", logits, y)
    return ValStepResult(loss=loss) if self.typed else None


def final_step(self: Any, batch: Any, batch_idx: int) -> Any:
    loss, logits, y = self.forward_batch(batch)
    use_metric(self, "test", logits, y)
    return ValStepResult(loss=loss) if self.typed else None


STEPS = {"__init__": init, "training_step": training_step, "validation_step": validation_step, "test_step": final_step}


def model_class(flavour: str, way: str, name: str = "MyModel", **namespace: Any) -> type[Any]:
    """``way``: "plain" (no adapter), "typed" (a TypedLightningModule), "adapter" (for StepResultAdapter())."""
    package, lst = FLAVOURS[flavour]
    base = lst.TypedLightningModule if way == "typed" else package.LightningModule
    body = {**STEPS, "typed": way != "plain", "_own_class": None, **namespace}
    cls = types.new_class(
        name, (Parts, base), exec_body=lambda ns: ns.update(body, __module__=__name__, __qualname__=name)
    )
    cls._own_class = cls
    return cls


def fit(
    flavour: str,
    way: str,
    model: Any,
    root: Path,
    strict: bool = False,
    callbacks_before: list[Any] | None = None,
    **overrides: Any,
) -> Any:
    """Fit on 10 training batches of 4 with validation (10 batches of 4) after batches 5 and 10."""
    callbacks = [*(callbacks_before or [])]
    callbacks += [FLAVOURS[flavour][1].StepResultAdapter(strict=strict)] if way == "adapter" else []
    settings = {"val_check_interval": 5, **overrides}
    trainer = FLAVOURS[flavour][0].Trainer(**trainer_kwargs(root, **settings), callbacks=callbacks)
    trainer.fit(model, loader(0, 40, 4), loader(1, 40, 4))
    return trainer


@contextmanager
def step_result_warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield messages
    messages.extend(str(w.message) for w in caught if issubclass(w.category, StepResultWarning))


def shared_warning(path: str, fix_for: str, declare: str) -> str:
    return (
        f"MyModel.training_step and MyModel.validation_step: {path}\n"
        "  got:      one torchmetrics.classification.accuracy.MulticlassAccuracy object updated or logged in both"
        " training and validation: validation updates and resets it in the middle of the training epoch, so the"
        " training value is wrong and the validation value counts training batches\n"
        "  expected: one metric object per stage (validation and test may share one)\n"
        f"  fix:      give validation its own object, {fix_for}, and use it in MyModel.validation_step; or declare"
        f" the metric once {declare}, which keeps one copy per stage"
    )


def shared_collection_warning(declare: str) -> str:
    return (
        "MyModel.training_step and MyModel.validation_step: self.collection\n"
        "  got:      one torchmetrics.MetricCollection object updated or logged in both training and validation:"
        " validation updates and resets it in the middle of the training epoch, so the training values are wrong"
        " and the validation values count training batches\n"
        "  expected: one metric object per stage (validation and test may share one)\n"
        '  fix:      give validation its own object, `self.val_collection = self.collection.clone(prefix="val_")` in'
        f" `__init__`, and use it in MyModel.validation_step; or declare the collection once {declare}, which keeps"
        " one copy per stage"
    )


def expected_warning(way: str, where: str, val_acc_taken: bool = False) -> str:
    path = WHERE[where]
    declare = "in `configure_step_metrics`" if way == "typed" else "with `StepResultAdapter(metrics=...)`"
    if path == "self.collection":
        return shared_collection_warning(declare)
    if where == "attribute" and not val_acc_taken:  # the fix names the attribute to add
        fix_for = "`self.val_acc = self.acc.clone()` in `__init__`"
    else:
        fix_for = f"a `{path}.clone()` made in `__init__`"
    return shared_warning(path, fix_for, declare)


def accuracy_of(hits: list[list[bool]]) -> float:
    flat = [hit for batch in hits for hit in batch]
    return sum(flat) / len(flat)


# --- the mix-up, measured --------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
def test_a_shared_metric_gives_a_wrong_training_value_under_plain_lightning(flavour: str, tmp_path: Path) -> None:
    values: dict[bool, dict[str, float]] = {}
    models: dict[bool, Any] = {}
    for shared in (False, True):
        models[shared] = model_class(flavour, "plain")(shared=shared)
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r"The ``compute`` method of metric MulticlassAccuracy was called before the ``update`` method",
            )
            trainer = fit(flavour, "plain", models[shared], tmp_path / str(shared))
        values[shared] = {name: float(value) for name, value in trainer.callback_metrics.items()}
    # One object per stage: the accuracy over the epoch's 40 training samples, and over the last validation.
    separate = models[False].hits
    assert values[False] == {"train_acc": pytest.approx(0.35), "val_acc": pytest.approx(0.4)}
    assert values[False]["train_acc"] == pytest.approx(accuracy_of(separate["train"]), abs=1e-7)
    assert values[False]["val_acc"] == pytest.approx(accuracy_of(separate["val"][10:]), abs=1e-7)
    # One shared object: validation reset it at the end of the epoch, so training computes nothing (0.0),
    # and the last validation counted the 20 training samples since the previous validation.
    shared_hits = models[True].hits
    assert values[True]["train_acc"] == 0.0
    assert values[True]["val_acc"] == pytest.approx(
        accuracy_of(shared_hits["train"][5:] + shared_hits["val"][10:]), abs=1e-7
    )
    assert values[True]["val_acc"] != values[False]["val_acc"]


# --- the warning -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("where", list(WHERE))
def test_a_metric_shared_by_training_and_validation_is_named_once(
    flavour: str, way: str, where: str, tmp_path: Path
) -> None:
    model = model_class(flavour, way)(where=where)
    # Two epochs, validation twice in each: four validation runs, one warning.
    with step_result_warnings() as messages:
        trainer = fit(flavour, way, model, tmp_path, max_epochs=2)
    assert messages == [expected_warning(way, where)]
    assert trainer.callback_metrics["train_acc"] == 0.0  # the warning changes nothing
    if where == "compute groups":  # the case is what it says: one group, its second member updated through the first
        assert model.collection.compute_groups == {0: ["acc", "precision"]}


@pytest.mark.parametrize("way", WAYS)
def test_a_shared_collection_validation_only_updates_is_named_once(way: str, tmp_path: Path) -> None:
    """Validation updates the grouped collection without logging it: its count moved, so it is named, once."""

    def updates_only(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits, y = self.forward_batch(batch)
        self.collection.update(logits, y)
        return ValStepResult(loss=loss) if self.typed else None

    model = model_class("pytorch_lightning", way, validation_step=updates_only)(where="compute groups")
    with step_result_warnings() as messages:
        fit("pytorch_lightning", way, model, tmp_path, max_epochs=2)
    assert messages == [expected_warning(way, "compute groups")]


@pytest.mark.parametrize("way", WAYS)
def test_each_shared_object_is_named_once_and_the_warning_points_at_the_validation_step(
    way: str, tmp_path: Path
) -> None:
    def two_members(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, "MetricCollection")
        self.collection.add_metrics({"top2": Accuracy(task="multiclass", num_classes=CLASSES, top_k=2)})
        self.acc = self.val_acc = accuracy()  # updated by hand in both steps, next to the collection

    def training(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits, y = self.forward_batch(batch)
        self.acc(logits.detach(), y)  # forward updates it too
        self.log("hand_acc", self.acc, on_step=False, on_epoch=True)  # its epoch value absorbs validation's updates
        use_metric(self, "train", logits.detach(), y)
        return TrainStepResult(loss=loss) if self.typed else loss

    def validation(self: Any, batch: Any, batch_idx: int) -> Any:
        self.acc.update(*self.forward_batch(batch)[1:])
        return validation_step(self, batch, batch_idx)

    model = model_class(
        "pytorch_lightning", way, __init__=two_members, training_step=training, validation_step=validation
    )()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit("pytorch_lightning", way, model, tmp_path, max_epochs=2)
    shared = [w for w in caught if issubclass(w.category, StepResultWarning)]
    assert [str(w.message).splitlines()[0] for w in shared] == [
        "MyModel.training_step and MyModel.validation_step: self.collection",  # one warning for its two members
        "MyModel.training_step and MyModel.validation_step: self.acc",
    ]
    assert {(w.filename, w.lineno) for w in shared} == {(__file__, validation.__code__.co_firstlineno)}


def test_a_training_metric_logged_by_validation_without_an_update_is_named(tmp_path: Path) -> None:
    """A typo: validation updates its own metric but logs the training one (``self.log('val_acc', self.acc)``)."""

    def logs_the_training_metric(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits, y = self.forward_batch(batch)
        self.val_acc.update(logits, y)
        self.log("val_acc", self.acc)
        return ValStepResult(loss=loss)

    model = model_class("pytorch_lightning", "typed", validation_step=logs_the_training_metric)(shared=False)
    with step_result_warnings() as messages:
        fit("pytorch_lightning", "typed", model, tmp_path)
    assert messages == [expected_warning("typed", "attribute", val_acc_taken=True)]


def _record_warnings(self: Any) -> None:
    self.catcher = warnings.catch_warnings(record=True)
    self.caught = self.catcher.__enter__()
    warnings.simplefilter("always")


def _write_warnings(self: Any) -> None:
    self.catcher.__exit__(None, None, None)
    shared = [str(w.message) for w in self.caught if issubclass(w.category, StepResultWarning)]
    Path(self.record_dir, f"rank{self.global_rank}.txt").write_text("\n\n".join(shared))


def fit_on_two_ranks(way: str, record_dir: str) -> None:
    """Two CPU processes (``ddp_fork``: the test's classes need no pickling); each rank records its own warnings."""
    model = model_class("pytorch_lightning", way, on_fit_start=_record_warnings, on_fit_end=_write_warnings)()
    model.record_dir = record_dir
    fit("pytorch_lightning", way, model, Path(record_dir), devices=2, strategy="ddp_fork", max_epochs=2)


@pytest.mark.slow
@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="ddp_fork needs fork")
@pytest.mark.parametrize("way", WAYS)
def test_under_ddp_the_warning_is_given_on_rank_0_only(way: str, tmp_path: Path) -> None:
    # In a fresh interpreter: forking the test process, whose threads earlier tests started, could hang.
    code = f"import test_stage_isolation as t; t.fit_on_two_ranks({way!r}, {str(tmp_path)!r})"
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=40),
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert (tmp_path / "rank0.txt").read_text() == expected_warning(way, "attribute")
    assert (tmp_path / "rank1.txt").read_text() == ""


def test_overridden_boundary_hooks_without_super_still_check(tmp_path: Path) -> None:
    def nothing(self: Any) -> None:
        pass

    hooks = {name: nothing for name in ("on_train_epoch_start", "on_validation_start", "on_validation_end")}
    model = model_class("lightning.pytorch", "typed", **hooks)()
    with step_result_warnings() as messages:
        fit("lightning.pytorch", "typed", model, tmp_path)
    assert messages == [expected_warning("typed", "attribute")]


def test_strict_adapter_warns_too(tmp_path: Path) -> None:
    """strict=True is about what steps return; a shared metric is a warning in every mode (docs/metrics.md)."""
    model = model_class("pytorch_lightning", "adapter")()
    with step_result_warnings() as messages:
        trainer = fit("pytorch_lightning", "adapter", model, tmp_path, strict=True)
    assert messages == [expected_warning("adapter", "attribute")]
    assert trainer.global_step == 10
    with pytest.raises(StepResultError):  # strict is on: a loss tensor from training_step is refused
        fit(
            "pytorch_lightning",
            "adapter",
            model_class("pytorch_lightning", "plain")(shared=False),
            tmp_path,
            strict=True,
        )


# --- what stays silent -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
@pytest.mark.parametrize("way", WAYS)
def test_one_object_per_stage_and_validation_sharing_with_test_give_no_warning(
    flavour: str, way: str, tmp_path: Path
) -> None:
    model = model_class(flavour, way)(shared=False, test_shares_val=True)
    with step_result_warnings() as messages:
        trainer = fit(flavour, way, model, tmp_path, max_epochs=2, num_sanity_val_steps=2)
        validated = trainer.validate(model, loader(1, 40, 4), verbose=False)
        tested = trainer.test(model, loader(2, 40, 4), verbose=False)
    assert messages == []
    assert validated[0]["val_acc"] == pytest.approx(accuracy_of(model.hits["val"][-10:]), abs=1e-7)
    assert tested[0]["test_acc"] == pytest.approx(accuracy_of(model.hits["test"]), abs=1e-7)


@pytest.mark.parametrize("way", WAYS)
def test_a_collection_per_stage_gives_no_warning(way: str, tmp_path: Path) -> None:
    """Training's grouped collection and validation's clone: neither, nor any member, is named."""

    def two_collections(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, "compute groups")
        self.val_collection = self.collection.clone(prefix="val_")

    def own_collection(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits, y = self.forward_batch(batch)
        self.hits["val"].append((logits.argmax(dim=1) == y).tolist())
        self.val_collection.update(logits, y)
        self.log_dict(self.val_collection)  # the members, under "val_acc" and "val_precision"
        return ValStepResult(loss=loss) if self.typed else None

    model = model_class("pytorch_lightning", way, __init__=two_collections, validation_step=own_collection)()
    with step_result_warnings() as messages:
        trainer = fit("pytorch_lightning", way, model, tmp_path, max_epochs=2)
    assert messages == []
    assert sorted(trainer.callback_metrics) == ["train_acc", "train_precision", "val_acc", "val_precision"]
    assert float(trainer.callback_metrics["train_acc"]) == pytest.approx(
        accuracy_of(model.hits["train"][10:]), abs=1e-7
    )
    assert float(trainer.callback_metrics["val_acc"]) == pytest.approx(accuracy_of(model.hits["val"][-10:]), abs=1e-7)


@pytest.mark.parametrize("way", WAYS)
def test_a_validation_metric_kept_across_runs_without_logging_gives_no_warning(way: str, tmp_path: Path) -> None:
    """A validation-only metric that is never logged or reset keeps its count between validation runs:
    training did not move it, so it is not shared. Nor is a metric only training uses."""

    def counts_all_validation(self: Any, batch: Any, batch_idx: int) -> Any:
        self.seen.update(*self.forward_batch(batch)[1:])
        return validation_step(self, batch, batch_idx)

    def with_seen(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, shared=False)
        self.seen = accuracy()
        self.train_only = accuracy()

    def also_train_only(self: Any, batch: Any, batch_idx: int) -> Any:
        self.train_only.update(*self.forward_batch(batch)[1:])
        return training_step(self, batch, batch_idx)

    model = model_class(
        "pytorch_lightning",
        way,
        __init__=with_seen,
        validation_step=counts_all_validation,
        training_step=also_train_only,
    )()
    with step_result_warnings() as messages:
        fit("pytorch_lightning", way, model, tmp_path, max_epochs=2, num_sanity_val_steps=2)
    assert messages == []
    assert model.seen.update_count == 2 + 4 * 10  # the sanity check's 2 batches, then 4 validation runs


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
@pytest.mark.parametrize("way", WAYS)
def test_declared_metrics_give_no_warning(flavour: str, way: str, tmp_path: Path) -> None:
    """Declared metrics keep one copy per stage (the typed module's are its child module)."""
    prefix = "" if flavour == "pytorch_lightning" else "Lightning"
    lst = FLAVOURS[flavour][1]
    if way == "typed":
        model, callbacks = CLASSES_BY_FLAVOUR[flavour][f"{prefix}Typed"](), []
    else:
        model, callbacks = (
            CLASSES_BY_FLAVOUR[flavour][f"{prefix}Plain"](),
            [lst.StepResultAdapter(metrics=declared("acc", False))],
        )
    trainer = FLAVOURS[flavour][0].Trainer(
        **trainer_kwargs(tmp_path, val_check_interval=5, max_epochs=2), callbacks=callbacks
    )
    with step_result_warnings() as messages:
        trainer.fit(model, loader(0, 40, 4), loader(1, 40, 4))
    assert messages == []
    assert sorted(trainer.callback_metrics) == ["train_acc", "val_acc"]


# --- pytorch-forecasting's pattern: one metric object per role, used in every stage by its batch values ---------
#
# pytorch-forecasting 1.8.0 (github.com/sktime/pytorch-forecasting, tag v1.8.0),
# pytorch_forecasting/models/base/_base_model.py: ``BaseModel.step`` computes ``loss = self.loss(prediction, y)``
# and logs ``self.log(f"{self.current_stage}_loss", detach(loss), on_step=self.training, on_epoch=True,
# prog_bar=True, batch_size=len(x["decoder_target"]))``; ``BaseModel.log_metrics`` does the same with each of
# ``self.logging_metrics`` (``loss_value = metric(y_point, y_true)``, logged as
# ``f"{self.current_stage}_{metric.name}"``). ``training_step`` and ``validation_step`` both call ``step`` and
# return ``{"loss": loss, "n_samples": ...}``. The metrics are torchmetrics ``Metric``s with
# ``full_state_update = False`` (pytorch_forecasting/metrics/base_metrics/_base_metrics.py,
# ``MultiHorizonMetric``: ``losses`` and ``lengths`` summed in ``update``, ``compute`` their ratio), so each call
# returns its batch's value while the object accumulates every stage's batches; nothing reads or resets that
# accumulated state. Reproduced here with a regression of the label on the classifier's first score.


class MultiHorizonMAE(Metric):
    """pytorch-forecasting's ``MAE`` (a ``MultiHorizonMetric``): summed absolute errors over summed lengths."""

    full_state_update = False
    higher_is_better = False
    is_differentiable = True

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.add_state("losses", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("lengths", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, y_pred: torch.Tensor, target: torch.Tensor) -> None:
        losses = (y_pred - target).abs()
        self.losses = self.losses + losses.sum()
        self.lengths = self.lengths + torch.full((target.size(0),), target.size(1)).sum()

    def compute(self) -> torch.Tensor:
        return self.losses / self.lengths


def forecasting_init(self: Any, log_objects: bool = False) -> None:
    super(self._own_class, self).__init__()
    self.build("acc", False)
    self.loss = MultiHorizonMAE("MAE")
    self.logging_metrics = torch.nn.ModuleList([MultiHorizonMAE("SMAPE"), MultiHorizonMAE("RMSE")])
    self.log_objects = log_objects  # the real mistake instead: log each object, not the value its call returned


def forecasting_step(self: Any, batch: Any, batch_idx: int) -> Any:
    """``BaseModel.step`` and ``log_metrics``, for ``training_step`` and ``validation_step`` alike."""
    x, y = batch
    prediction = self.net(x)[:, :1]
    target = y.float().unsqueeze(1)
    stage = "train" if self.training else "val"
    loss = self.loss(prediction, target)
    self.log(
        f"{stage}_loss",
        self.loss if self.log_objects else loss.detach(),
        on_step=self.training,
        on_epoch=True,
        prog_bar=True,
        batch_size=len(x),
    )
    for metric in self.logging_metrics:
        value = metric(prediction.detach(), target)
        self.log(
            f"{stage}_{metric.name}",
            metric if self.log_objects else value,
            on_step=self.training,
            on_epoch=True,
            batch_size=len(x),
        )
    return {"loss": loss, "n_samples": len(x)}


def forecasting_model(flavour: str, log_objects: bool = False) -> Any:
    steps = {"__init__": forecasting_init, "training_step": forecasting_step, "validation_step": forecasting_step}
    return model_class(flavour, "plain", name="Forecaster", **steps)(log_objects=log_objects)


class LoggedRows(pl.Callback):
    """Lightning's logged values after every training batch and validation run, in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        self.rows.append({name: float(value) for name, value in trainer.logged_metrics.items()})

    def on_validation_end(self, trainer: Any, *args: Any) -> None:
        self.rows.append({name: float(value) for name, value in trainer.callback_metrics.items()})


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
def test_pytorch_forecastings_shared_metrics_log_right_values_and_give_no_warning(flavour: str, tmp_path: Path) -> None:
    """Each metric object is updated in training and validation (validation twice per epoch), and every value
    logged is its call's batch value: the same, bit for bit, with and without the adapter, and no warning."""
    runs: dict[str, list[dict[str, float]]] = {}
    for way in ("plain", "adapter"):
        model, rows = forecasting_model(flavour), LoggedRows()
        with step_result_warnings() as messages:
            fit(flavour, way, model, tmp_path / way, max_epochs=2, callbacks_before=[rows])
        assert messages == []
        runs[way] = rows.rows
        assert model.loss.update_count == 2 * 10 + 4 * 10  # the object accumulates both stages' batches
    assert runs["adapter"] == runs["plain"]
    assert len(runs["plain"]) == 2 * 10 + 4
    assert sorted(runs["plain"][-1]) == sorted(
        ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss", "val_SMAPE", "val_RMSE"]
        + ["train_SMAPE_epoch", "train_RMSE_epoch", "train_SMAPE_step", "train_RMSE_step", "train_SMAPE", "train_RMSE"]
    )


@pytest.mark.parametrize("flavour", FLAVOUR_IDS)
def test_the_same_metrics_logged_as_objects_are_named(flavour: str, tmp_path: Path) -> None:
    """The same module logging each metric object itself (``self.log(name, metric)``): Lightning computes it from
    state that holds both stages' batches and resets it in the middle of the epoch. Each object is named once."""
    model = forecasting_model(flavour, log_objects=True)
    with step_result_warnings() as messages:
        fit(flavour, "adapter", model, tmp_path, max_epochs=2)
    assert [message.splitlines()[0] for message in messages] == [
        "Forecaster.training_step and Forecaster.validation_step: self.loss",
        "Forecaster.training_step and Forecaster.validation_step: self.logging_metrics[0]",
        "Forecaster.training_step and Forecaster.validation_step: self.logging_metrics[1]",
    ]


@pytest.mark.parametrize("way", WAYS)
def test_a_shared_metric_computed_and_reset_by_hand_in_validation_is_named(way: str, tmp_path: Path) -> None:
    """Updated in both steps and logged by neither as an object, but validation computes and resets it at its
    epoch's end (``self.log("val_acc", self.acc.compute()); self.acc.reset()``): training's state is lost."""

    def training(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits, y = self.forward_batch(batch)
        self.acc.update(logits.detach(), y)
        return TrainStepResult(loss=loss) if self.typed else loss

    def validation(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits, y = self.forward_batch(batch)
        self.acc.update(logits, y)
        return ValStepResult(loss=loss) if self.typed else None

    def computes_and_resets(self: Any) -> None:
        self.log("val_acc", self.acc.compute())
        self.acc.reset()

    model = model_class(
        "pytorch_lightning",
        way,
        training_step=training,
        validation_step=validation,
        on_validation_epoch_end=computes_and_resets,
    )()
    with step_result_warnings() as messages:
        fit("pytorch_lightning", way, model, tmp_path, max_epochs=2)
    assert messages == [expected_warning(way, "attribute")]
