"""Declared-metric mistakes are never silent: each is a StepResultError or one StepResultWarning.

Unfed metrics (a stage ran, its steps fed a declared copy nothing), a batch-key typo, a
``log_name`` typo, ``on_step=True`` without training, metrics that give more than one value, and
``predict`` (no copies, no ``configure_step_metrics``). Each runs a real Trainer, under both
Lightning flavours, through the typed module and through ``StepResultAdapter(metrics=...)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import lightning.pytorch
import pytest
import pytorch_lightning
import torch
import torch.nn.functional as F
from models import trainer_kwargs
from torch.utils.data import DataLoader, Dataset
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from lightning_step_types import StepMetric, StepResultError, StepResultWarning, TrainStepResult, ValStepResult
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning
from lightning_step_types.metrics import step_metric_objects

FLAVOURS = {
    "pytorch_lightning": (pytorch_lightning, lst_pytorch_lightning),
    "lightning.pytorch": (lightning.pytorch, lst_lightning_pytorch),
}
WAYS = ("typed", "adapter")


class DictBatches(Dataset[dict[str, torch.Tensor]]):
    """8 samples as ``{"image": (4,), "label": ()}``: batches are dicts, as in image pipelines."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(8, 4, generator=generator)
        self.y = torch.randint(0, 3, (8,), generator=generator)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"image": self.x[index], "label": self.y[index]}


def loader() -> DataLoader[Any]:
    return DataLoader(DictBatches(), batch_size=4)


def model_class(flavour: str, way: str, val_returns_none: bool = False) -> type[Any]:
    """``MyModel``: typed (``TrainStepResult``/``ValStepResult``) or plain (dicts), whose
    ``configure_step_metrics`` (typed) returns ``self.declared``."""
    pl, lst = FLAVOURS[flavour]

    def init(self: Any, declared: Any = None) -> None:
        super(cls, self).__init__()
        self.net = torch.nn.Linear(4, 3)
        self.declared = declared
        self.configured = 0

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        logits = self.net(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        if way == "typed":
            return TrainStepResult(loss=loss, metadata={"logits": logits.detach()})
        return {"loss": loss, "logits": logits.detach()}

    def validation_step(self: Any, batch: Any, batch_idx: int) -> Any:
        logits = self.net(batch["image"])
        loss = F.cross_entropy(logits, batch["label"])
        if val_returns_none:  # the common legacy form: log the loss, return nothing
            self.log("val_loss", loss)
            return None
        if way == "typed":
            return ValStepResult(loss=loss, metadata={"logits": logits})
        return {"loss": loss, "logits": logits}

    def predict_step(self: Any, batch: Any, batch_idx: int) -> Any:
        return self.net(batch["image"])

    def configure_step_metrics(self: Any) -> Any:
        self.configured += 1
        return self.declared

    def configure_optimizers(self: Any) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    namespace: dict[str, Any] = {
        "__init__": init,
        "training_step": training_step,
        "validation_step": validation_step,
        "predict_step": predict_step,
        "configure_optimizers": configure_optimizers,
        "__module__": __name__,
    }
    if way == "typed":
        namespace["configure_step_metrics"] = configure_step_metrics
    base = lst.TypedLightningModule if way == "typed" else pl.LightningModule
    cls: type[Any] = type("MyModel", (base,), namespace)
    return cls


def trainer(flavour: str, callbacks: list[Any] | None = None, **overrides: Any) -> Any:
    # logger and checkpoints are off: nothing is written under the root
    return FLAVOURS[flavour][0].Trainer(callbacks=callbacks or [], **trainer_kwargs(".", **overrides))


def fit(flavour: str, way: str, declared: Any, val_returns_none: bool = False, validate: bool = False) -> Any:
    """Fit ``MyModel`` with ``declared`` (the module's own, or the adapter's); the model."""
    model = model_class(flavour, way, val_returns_none)(declared if way == "typed" else None)
    callbacks = [] if way == "typed" else [FLAVOURS[flavour][1].StepResultAdapter(metrics=declared)]
    trainer(flavour, callbacks).fit(model, loader(), loader() if validate else None)
    return model


def declared_by(way: str) -> str:
    return "MyModel.configure_step_metrics" if way == "typed" else "StepResultAdapter(metrics=...)"


def step_warnings(run: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]


def accuracy(update: Callable[[Any, Any], Any] | None = None, **options: Any) -> StepMetric[Any]:
    read = update or (lambda r, b: (r["logits"], b["label"]))  # a typed result reads like its metadata
    return StepMetric(MulticlassAccuracy(3), update=read, **options)


# --- unfed declared metrics ------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("way", WAYS)
def test_a_validation_step_returning_none_warns_once_that_the_metric_is_unfed(flavour: str, way: str) -> None:
    declared = {"acc": accuracy(stages=("train", "val"))}
    messages = step_warnings(lambda: fit(flavour, way, declared, val_returns_none=True, validate=True))
    feed = (
        "return a `ValStepResult(loss=..., metadata={...})` holding what its update reads"
        if way == "typed"
        else "return what its update reads, e.g. `return {'loss': loss, 'logits': logits}` for `result['logits']`"
    )
    assert messages == [
        f"MyModel.validation_step: {declared_by(way)}['acc'] in stage 'val'\n"
        "  got:      no update in an epoch of this stage: every step returned None, so 'acc' logs nothing\n"
        "  expected: a step result each step, which update(result, batch) reads to feed 'acc'\n"
        f"  fix:      {feed}; or drop 'val' from its stages: `stages=('train',)`"
    ]


@pytest.mark.parametrize("way", WAYS)
def test_fed_metrics_and_stages_that_never_ran_do_not_warn(way: str) -> None:
    """Validation feeds its copy; "test" is declared but never runs in a fit."""
    declared = {"acc": accuracy()}
    assert step_warnings(lambda: fit("pytorch_lightning", way, declared, validate=True)) == []


# --- messages -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("way", WAYS)
def test_a_batch_key_typo_names_the_batch_keys_and_the_closest(flavour: str, way: str) -> None:
    declared = {"acc": accuracy(lambda r, b: (r["logits"], b["labels"]), stages=("train",))}
    with pytest.raises(StepResultError) as info:
        fit(flavour, way, declared)
    assert str(info.value) == (
        f"MyModel.training_step: {declared_by(way)}['acc'] in stage 'train': update(result, batch)\n"
        "  got:      KeyError 'labels': the batch holds {'image': Tensor(shape=(4, 4), dtype=float32, requires_grad=False),"
        " 'label': Tensor(shape=(4,), dtype=int64, requires_grad=False)}\n"
        "  expected: a key the batch holds: ['image', 'label']\n"
        "  fix:      read 'label': `batch['label']` (keys are case-sensitive)"
    )


def test_a_key_in_neither_the_result_nor_the_batch_shows_both() -> None:
    declared = {"acc": accuracy(lambda r, b: (r["scores"], b["label"]), stages=("train",))}
    with pytest.raises(StepResultError) as info:
        fit("pytorch_lightning", "typed", declared)
    assert (
        info.value.expected == "a key the step's result holds: ['logits'], or one the batch holds: ['image', 'label']"
    )
    assert (
        info.value.fix == "read one of those keys, or put 'scores' in the step's metadata (`metadata={'scores': ...}`)"
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_log_name_typo_is_refused_at_setup(flavour: str) -> None:
    declared = {"acc": accuracy(log_name="{stag}_{name}")}
    expected = (
        "['acc'].log_name\n"
        "  got:      '{stag}_{name}': unknown field {stag}\n"
        "  expected: a template whose fields are {stage} (the stage: 'train', 'val', 'test') and {name} (the entry's key)\n"
        "  fix:      write {stage} for {stag}: `log_name='{stage}_{name}'`"
    )
    with pytest.raises(StepResultError) as info:
        fit(flavour, "typed", declared)
    assert str(info.value) == "MyModel.configure_step_metrics: " + expected
    with pytest.raises(StepResultError) as info:  # the adapter checks its declaration when built
        FLAVOURS[flavour][1].StepResultAdapter(metrics=declared)
    assert str(info.value) == "StepResultAdapter(metrics=...): " + expected


@pytest.mark.parametrize(
    ("log_name", "got", "fix"),
    [
        ("{}_{name}", "'{}_{name}': unknown field {}", "use only {stage} and {name}, e.g. `log_name='{stage}_{name}'`"),
        (
            "{stage}_{name",
            "'{stage}_{name': ValueError: expected '}' before end of string",
            "balance the braces, e.g. `log_name='{stage}_{name}'`",
        ),
        (
            "{stage:d}_{name}",
            "'{stage:d}_{name}': ValueError: Unknown format code 'd' for object of type 'str'",
            "pass e.g. `log_name='{stage}_{name}'`",
        ),
    ],
)
def test_other_log_name_templates_that_cannot_be_filled_are_refused(log_name: str, got: str, fix: str) -> None:
    with pytest.raises(StepResultError) as info:
        fit("pytorch_lightning", "typed", {"acc": accuracy(log_name=log_name)})
    assert (info.value.where, info.value.got, info.value.fix) == ("['acc'].log_name", got, fix)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("way", WAYS)
def test_on_step_without_training_is_refused_at_setup(flavour: str, way: str) -> None:
    declared = {"acc": accuracy(stages=("val",), on_step=True)}
    with pytest.raises(StepResultError) as info:
        if way == "typed":
            fit(flavour, way, declared, validate=True)
        else:
            FLAVOURS[flavour][1].StepResultAdapter(metrics=declared)
    assert str(info.value) == (
        f"{declared_by(way)}: ['acc'].on_step\n"
        "  got:      on_step=True with stages=('val',)\n"
        "  expected: on_step=True in an entry that runs in 'train': validation and test log one value per epoch\n"
        "  fix:      drop `on_step=True`, or add the training stage: `stages=('train', 'val')`"
    )


SETUP_MANY_VALUES = {
    "confusion matrix": (
        lambda: MulticlassConfusionMatrix(3),
        "MulticlassConfusionMatrix (a confusion matrix): its compute() gives more than one value",
        "keep it out of the declared metrics: update it in the step and read its compute() in on_validation_epoch_end (e.g. to plot it)",
    ),
    "average=None": (
        lambda: MulticlassAccuracy(3, average=None),
        "MulticlassAccuracy (average=None: one value per class): its compute() gives more than one value",
        "pass `average='macro'` (or 'micro', 'weighted') for one value",
    ),
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("kind", SETUP_MANY_VALUES)
def test_a_metric_whose_kind_gives_many_values_is_refused_at_setup(flavour: str, kind: str) -> None:
    make, got, fix = SETUP_MANY_VALUES[kind]
    declared = {"cm": StepMetric(make(), update=lambda r, b: (r["logits"], b["label"]))}
    with pytest.raises(StepResultError) as info:
        fit(flavour, "typed", declared)
    assert (info.value.hook, info.value.where, info.value.got, info.value.fix) == (
        "MyModel.configure_step_metrics",
        "['cm'].metric",
        got,
        fix,
    )
    assert info.value.expected == "a metric whose compute() gives one value: Lightning logs one number per name"


class PerClassHits(Metric):
    """Counts correct predictions per class: compute() gives one value per class (3)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("hits", torch.zeros(3), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        self.hits += torch.bincount(target[logits.argmax(-1) == target], minlength=3).float()

    def compute(self) -> torch.Tensor:
        return self.hits


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("way", WAYS)
def test_a_metric_that_turns_out_to_give_many_values_is_refused_at_its_first_compute(flavour: str, way: str) -> None:
    declared = {"hits": StepMetric(PerClassHits(), update=lambda r, b: (r["logits"], b["label"]), stages=("train",))}
    with pytest.raises(StepResultError) as info:
        fit(flavour, way, declared)
    hook = "MyModel.on_train_epoch_end" if way == "typed" else "StepResultAdapter.on_train_epoch_end"
    assert str(info.value) == (
        f"{hook}: {declared_by(way)}['hits'] in stage 'train': PerClassHits.compute\n"
        "  got:      compute() gave Tensor(shape=(3,), dtype=float32, requires_grad=False)\n"
        "  expected: one number: Lightning logs one value per name\n"
        "  fix:      make it compute one value (e.g. `average='macro'` for a per-class metric), or keep it out of the"
        " declared metrics: update it in the step and read its compute() in on_validation_epoch_end"
    )


def test_step_values_that_are_not_one_number_are_refused_at_the_first_step() -> None:
    declared = {
        "hits": StepMetric(
            PerClassHits(), update=lambda r, b: (r["logits"], b["label"]), stages=("train",), on_step=True
        )
    }
    with pytest.raises(StepResultError) as info:
        fit("pytorch_lightning", "typed", declared)
    assert (info.value.hook, info.value.where) == (
        "MyModel.training_step",
        "MyModel.configure_step_metrics['hits'] in stage 'train': PerClassHits.forward",
    )
    assert info.value.got == "forward() gave Tensor(shape=(3,), dtype=float32, requires_grad=False)"


# --- predict ------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_predict_calls_no_configure_step_metrics_and_builds_no_copies(flavour: str) -> None:
    model = model_class(flavour, "typed")(untyped({"acc": "not a StepMetric"}))  # would fail at any other setup
    predictions = trainer(flavour).predict(model, loader())
    assert [p.shape for p in predictions] == [torch.Size([4, 3]), torch.Size([4, 3])]
    assert model.configured == 0
    assert step_metric_objects(model) == {}
    assert "_step_metric_copies" not in model._modules


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_adapter_builds_no_copies_for_predict(flavour: str) -> None:
    model = model_class(flavour, "adapter")()
    adapter = FLAVOURS[flavour][1].StepResultAdapter(metrics={"acc": accuracy()})
    seen: list[dict[str, Any]] = []

    class Watch(FLAVOURS[flavour][0].Callback):  # type: ignore[name-defined,misc]
        def on_predict_batch_end(self, *args: Any) -> None:
            seen.append(step_metric_objects(model))

    trainer(flavour, [adapter, Watch()]).predict(model, loader())
    assert seen == [{}, {}]


def untyped(value: object) -> Any:
    return value
