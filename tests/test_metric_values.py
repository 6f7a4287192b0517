"""Reading declared metrics in hooks, step-only training values, and a batch-weighted mean: each
equal to the hand-written pattern it replaces, value for value.

- best-value tracking with ``MaxMetric`` over ``declared_metric(self, "acc", "val")``, as
  lightning-hydra-template's ``val_acc_best`` does over its own ``self.val_acc``;
- ``on_step=True, on_epoch=False``: training batch values under the bare name, as torchgeo's
  ``self.train_metrics(...)`` then ``self.log_dict(self.train_metrics)`` in ``training_step``;
- ``MeanMetric`` fed ``(loss, batch_size)``: Lightning's batch-weighted ``self.log`` mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch
import pytest
import pytorch_lightning
import torch
import torch.nn.functional as F
from metric_models import train_loader, val_loaders
from torchmetrics import MaxMetric, MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from lightning_step_types import StepMetric, StepResultError, TrainStepResult, ValStepResult, declared_metric
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning

FLAVOURS = {
    "pytorch_lightning": (pytorch_lightning, lst_pytorch_lightning),
    "lightning.pytorch": (lightning.pytorch, lst_lightning_pytorch),
}
WAYS = ("typed", "adapter")


def build_net(module: Any) -> None:
    module.net = torch.nn.Linear(4, 3)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        module.net.weight.copy_(torch.randn(module.net.weight.shape, generator=generator))
        module.net.bias.copy_(torch.randn(module.net.bias.shape, generator=generator))


def make_class(flavour: str, way: str, namespace: dict[str, Any]) -> type[Any]:
    pl, lst = FLAVOURS[flavour]
    base = lst.TypedLightningModule if way == "typed" else pl.LightningModule

    def configure_optimizers(self: Any) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)

    return type("MyModel", (base,), {"configure_optimizers": configure_optimizers, "__module__": __name__, **namespace})


def trainer(flavour: str, root: Path, callbacks: list[Any], **overrides: Any) -> Any:
    pl = FLAVOURS[flavour][0]
    settings: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        logger=pl.loggers.CSVLogger(root, name="", version=""),
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    settings.update(overrides)
    return pl.Trainer(callbacks=callbacks, **settings)


def fit(flavour: str, model: Any, root: Path, callbacks: list[Any], val: bool = True) -> dict[str, Any]:
    run = trainer(flavour, root, callbacks)
    run.fit(model, train_loader(), val_loaders()[0] if val else None)
    return {
        "callback_metrics": {k: float(v) for k, v in sorted(run.callback_metrics.items())},
        "csv": (Path(run.logger.log_dir) / "metrics.csv").read_text(),
        "params": [p.detach().clone() for p in model.parameters()],
    }


def assert_same(declared: dict[str, Any], hand: dict[str, Any]) -> None:
    assert all(torch.equal(a, b) for a, b in zip(declared.pop("params"), hand.pop("params"), strict=True))
    assert declared == hand


def step(self: Any, batch: Any, way: str, training: bool) -> Any:
    x, y = batch
    logits = self.net(x)
    loss = F.cross_entropy(logits, y)
    if way == "hand":
        return loss, logits
    if way == "typed":
        result = TrainStepResult if training else ValStepResult
        return result(loss=loss, metadata={"logits": logits.detach() if training else logits})
    return {"loss": loss, "logits": logits.detach() if training else logits}


# --- best-value tracking: lightning-hydra-template's val_acc_best ---------------------------------


def hydra_hand(flavour: str) -> type[Any]:
    def init(self: Any) -> None:
        super(cls, self).__init__()
        build_net(self)
        self.val_acc = MulticlassAccuracy(3)
        self.val_acc_best = MaxMetric()

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        return step(self, batch, "hand", True)[0]

    def validation_step(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits = step(self, batch, "hand", False)
        self.val_acc(logits, batch[1])
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_train_start(self: Any) -> None:
        self.val_acc_best.reset()  # the sanity check's value does not count

    def on_validation_epoch_end(self: Any) -> None:
        acc = self.val_acc.compute()
        self.val_acc_best(acc)
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    cls = make_class(flavour, "hand", {"__init__": init, "training_step": training_step, "validation_step": validation_step,
                                        "on_train_start": on_train_start, "on_validation_epoch_end": on_validation_epoch_end})  # fmt: skip
    return cls


def best_accuracy() -> dict[str, StepMetric[Any]]:
    return {
        "acc": StepMetric(
            MulticlassAccuracy(3),
            update=lambda r, b: (r["logits"], b[1]),
            stages=("val",),
            prog_bar=True,
            log_name="{stage}/{name}",
        )
    }


def hydra_declared(flavour: str, way: str) -> type[Any]:
    def init(self: Any) -> None:
        super(cls, self).__init__()
        build_net(self)
        self.val_acc_best = MaxMetric()

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        return step(self, batch, way, True)

    def validation_step(self: Any, batch: Any, batch_idx: int) -> Any:
        return step(self, batch, way, False)

    def on_train_start(self: Any) -> None:
        self.val_acc_best.reset()

    def on_validation_epoch_end(self: Any) -> None:
        acc = declared_metric(self, "acc", "val").compute()
        self.val_acc_best(acc)
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    namespace: dict[str, Any] = {"__init__": init, "training_step": training_step, "validation_step": validation_step,
                                 "on_train_start": on_train_start, "on_validation_epoch_end": on_validation_epoch_end}  # fmt: skip
    if way == "typed":
        namespace["configure_step_metrics"] = lambda self: best_accuracy()
    cls = make_class(flavour, way, namespace)
    return cls


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("way", WAYS)
def test_best_value_tracking_over_declared_metric_equals_the_hand_written_template(
    flavour: str, way: str, tmp_path: Path
) -> None:
    hand = fit(flavour, hydra_hand(flavour)(), tmp_path / "hand", [])
    callbacks = [] if way == "typed" else [FLAVOURS[flavour][1].StepResultAdapter(metrics=best_accuracy())]
    declared = fit(flavour, hydra_declared(flavour, way)(), tmp_path / "declared", callbacks)
    assert set(hand["callback_metrics"]) == {"val/acc", "val/acc_best"}
    assert hand["csv"].count("\n") == 4  # a header, then one row per epoch
    assert_same(declared, hand)


def test_declared_metric_names_the_entries_of_the_stage_and_the_closest(tmp_path: Path) -> None:
    seen: dict[str, str] = {}

    class Reads(pytorch_lightning.Callback):
        def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            for name, stage, idx in (("Acc", "val", 0), ("acc", "test", 0), ("acc", "val", 1)):
                with pytest.raises(StepResultError) as info:
                    declared_metric(pl_module, name, untyped(stage), idx)
                seen[f"{name} {stage} {idx}"] = str(info.value)

    model = make_class("pytorch_lightning", "adapter", {
        "__init__": lambda self: (pytorch_lightning.LightningModule.__init__(self), build_net(self))[0],
        "training_step": lambda self, batch, batch_idx: step(self, batch, "adapter", True),
        "validation_step": lambda self, batch, batch_idx: step(self, batch, "adapter", False),
    })()  # fmt: skip
    adapter = lst_pytorch_lightning.StepResultAdapter(metrics=best_accuracy())
    trainer("pytorch_lightning", tmp_path, [adapter, Reads()], max_epochs=1, num_sanity_val_steps=0).fit(
        model, train_loader(), val_loaders()[0]
    )
    assert seen == {
        "Acc val 0": (
            "MyModel: declared_metric('Acc', stage='val')\n"
            "  got:      no declared metric 'Acc' in stage 'val'; the stage's declared metrics are ['acc']\n"
            "  expected: the key of an entry declared for that stage (configure_step_metrics or StepResultAdapter(metrics=...))\n"
            "  fix:      read 'acc'"
        ),
        "acc test 0": (
            "MyModel: declared_metric('acc', stage='test')\n"
            "  got:      no declared metric 'acc' in stage 'test'; the stage's declared metrics are []\n"
            "  expected: the key of an entry declared for that stage (configure_step_metrics or StepResultAdapter(metrics=...))\n"
            "  fix:      declare 'acc' for stage 'test', or read one of []"
        ),
        "acc val 1": (
            "MyModel: declared_metric('acc', stage='val', dataloader_idx=1)\n"
            "  got:      no copy for dataloader 1 yet: copies [0] exist\n"
            "  expected: a dataloader that has run a batch: the copy of each further loader is made at its first batch\n"
            "  fix:      read it once that loader has run, e.g. in on_validation_epoch_end"
        ),
    }


# --- step-only training values: torchgeo's self.log_dict(self.train_metrics) ----------------------


def collection(prefix: str | None = None) -> MetricCollection:
    return MetricCollection(
        {"OverallAccuracy": MulticlassAccuracy(3, average="micro"), "F1": MulticlassF1Score(3)}, prefix=prefix
    )


def torchgeo_hand(flavour: str) -> type[Any]:
    def init(self: Any) -> None:
        super(cls, self).__init__()
        build_net(self)
        self.train_metrics = collection("train_")
        self.val_metrics = collection("val_")

    def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits = step(self, batch, "hand", True)
        self.train_metrics(logits.detach(), batch[1])
        self.log_dict(self.train_metrics)
        return loss

    def validation_step(self: Any, batch: Any, batch_idx: int) -> Any:
        loss, logits = step(self, batch, "hand", False)
        self.val_metrics(logits, batch[1])
        self.log_dict(self.val_metrics)

    cls = make_class(
        flavour, "hand", {"__init__": init, "training_step": training_step, "validation_step": validation_step}
    )
    return cls


def step_only_metrics() -> dict[str, StepMetric[Any]]:
    return {
        "scores": StepMetric(
            collection(), update=lambda r, b: (r["logits"], b[1]), stages=("train", "val"), on_step=True, on_epoch=False
        )
    }


def torchgeo_declared(flavour: str, way: str) -> type[Any]:
    def init(self: Any) -> None:
        super(cls, self).__init__()
        build_net(self)

    namespace: dict[str, Any] = {
        "__init__": init,
        "training_step": lambda self, batch, batch_idx: step(self, batch, way, True),
        "validation_step": lambda self, batch, batch_idx: step(self, batch, way, False),
    }
    if way == "typed":
        namespace["configure_step_metrics"] = lambda self: step_only_metrics()
    cls = make_class(flavour, way, namespace)
    return cls


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("way", WAYS)
def test_step_only_training_values_equal_torchgeos_log_dict(flavour: str, way: str, tmp_path: Path) -> None:
    hand = fit(flavour, torchgeo_hand(flavour)(), tmp_path / "hand", [])
    callbacks = [] if way == "typed" else [FLAVOURS[flavour][1].StepResultAdapter(metrics=step_only_metrics())]
    declared = fit(flavour, torchgeo_declared(flavour, way)(), tmp_path / "declared", callbacks)
    assert set(hand["callback_metrics"]) == {"train_OverallAccuracy", "train_F1", "val_OverallAccuracy", "val_F1"}
    header = hand["csv"].splitlines()[0].split(",")
    assert "train_F1" in header and "train_F1_step" not in header and "train_F1_epoch" not in header
    assert_same(declared, hand)


def test_on_epoch_false_without_step_values_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StepResultError) as info:
        lst_pytorch_lightning.StepResultAdapter(
            metrics={"acc": StepMetric(MulticlassAccuracy(3), update=lambda r, b: (r, b), on_epoch=False)}
        )
    assert str(info.value) == (
        "StepResultAdapter(metrics=...): ['acc'].on_epoch\n"
        "  got:      on_epoch=False with on_step=False: nothing would be logged in training\n"
        "  expected: on_epoch=False together with on_step=True: the training batch values only\n"
        "  fix:      log the batch values only with `on_step=True, on_epoch=False`, or drop `on_epoch=False`"
    )


# --- a mean of the loss: MeanMetric needs the batch size to equal Lightning's mean ---------------


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_mean_metric_fed_the_batch_size_equals_lightnings_batch_weighted_mean(flavour: str, tmp_path: Path) -> None:
    def hand_step(self: Any, batch: Any, batch_idx: int) -> Any:
        loss = step(self, batch, "hand", True)[0]
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def hand_init(self: Any) -> None:
        FLAVOURS[flavour][0].LightningModule.__init__(self)
        build_net(self)

    hand = fit(
        flavour,
        make_class(flavour, "hand", {"__init__": hand_init, "training_step": hand_step})(),
        tmp_path / "hand",
        [],
        val=False,
    )
    means = {
        "loss": StepMetric(MeanMetric(), update=lambda r, b: (r.loss.detach(), b[1].shape[0]), stages=("train",)),
        "unweighted": StepMetric(MeanMetric(), update=lambda r, b: (r.loss.detach(),), stages=("train",)),
    }
    typed = make_class(flavour, "typed", {
        "__init__": lambda self: (FLAVOURS[flavour][1].TypedLightningModule.__init__(self), build_net(self))[0],
        "training_step": lambda self, batch, batch_idx: step(self, batch, "typed", True),
        "configure_step_metrics": lambda self: means,
    })  # fmt: skip
    declared = fit(flavour, typed(), tmp_path / "declared", [], val=False)
    assert declared["callback_metrics"]["train_loss"] == hand["callback_metrics"]["train_loss"]
    # 21 samples in batches of 4: the last batch of 1 counts a quarter as much in Lightning's mean.
    assert declared["callback_metrics"]["train_unweighted"] != hand["callback_metrics"]["train_loss"]


def untyped(value: object) -> Any:
    return value
