"""Training runs for the corpus: the released module and its migrated text train under plain Lightning,
from the same seed on the same synthetic batches, and must end with identical parameters.

The module text is executed as it was released or migrated, in a fresh module object named as in
its package (so relative imports resolve). Imports that are not installed here (torchvision, a
package's own model components) are satisfied by tiny substitute modules placed in
``sys.modules`` for the duration of the load: the codemod only sees the file's text, which is not
changed, and the substitutes stand only for layers and data the steps call into, never for the
step methods or same-class helpers under test. Dataset downloads are replaced by random tensors
of the shapes the real data has.

Lightning 1.x hooks that Lightning 2 refuses to run (``validation_epoch_end`` and friends) are
removed from the class before both runs alike: the codemod reports them and does not change
them, and without removing them neither the original nor the migrated module can start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import shutil
import sys
import tempfile
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

LEGACY_HOOKS = ("training_epoch_end", "validation_epoch_end", "test_epoch_end")


# Imported for real before any substitute is in place: torchmetrics (imported lazily by Lightning)
# probes for torchvision and matplotlib when first imported, and must see what is installed.
_REAL_FIRST = (
    "pytorch_lightning",
    "lightning.pytorch",
    "torchmetrics",
    "torchmetrics.classification",
    "torchmetrics.regression",
)


@contextlib.contextmanager
def substitutes(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    for name in _REAL_FIRST:
        importlib.import_module(name)
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def fake_module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so submodules can be substituted too
    module.__dict__.update(attributes)
    return module


def load(text: bytes, qualified_name: str, stubs: dict[str, types.ModuleType]) -> types.ModuleType:
    """Execute ``text`` as the module ``qualified_name`` (with its parent packages substituted)."""
    module = types.ModuleType(qualified_name)
    module.__package__ = qualified_name.rpartition(".")[0]
    module.__file__ = f"<corpus {qualified_name}>"
    parents = {}
    parts = qualified_name.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name in stubs:
            continue
        try:  # a real package (lightning.pytorch) stays real; one not installed here is an empty one
            importlib.import_module(name)
        except ImportError:
            parents[name] = fake_module(name)
    with substitutes({**parents, **stubs, qualified_name: module}):
        exec(compile(text, module.__file__, "exec"), module.__dict__)
    return module


def loader(*tensors: torch.Tensor, batch_size: int = 4) -> DataLoader:
    return DataLoader(TensorDataset(*tensors), batch_size=batch_size)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to train one class of a fixture file on synthetic data."""

    fixture: str
    file: str  # the fixture file that defines the class
    qualified_name: str  # the module's name in its package
    owner: str  # the LightningModule class
    # class -> (module, Trainer.fit keyword arguments, and "test_dataloaders" for Trainer.test when
    # they are not the validation ones)
    build: Callable[[type], tuple[Any, dict[str, Any]]]
    stubs: Callable[[], dict[str, types.ModuleType]] = dict
    test: bool = False  # also run Trainer.test
    # data hooks that download or read datasets: replaced by no-ops in both runs (the loaders come from build)
    data_hooks: tuple[str, ...] = ()
    # other files of the fixture the module imports (a base class in another file): (file, module name),
    # loaded from the same run's text (released or migrated) before the module
    siblings: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.fixture}:{self.owner}"


def trainer_for(cls: type, log_dir: str, adapter: bool = False, **settings: Any) -> Any:
    """A Lightning Trainer of the class's own flavour (``lightning.pytorch`` or ``pytorch_lightning``):
    plain, or with that flavour's ``StepResultAdapter()`` as its one callback."""
    import lightning.pytorch as lightning_pytorch
    import pytorch_lightning

    import lightning_step_types.lightning_pytorch
    import lightning_step_types.pytorch_lightning

    if issubclass(cls, lightning_pytorch.LightningModule):
        flavour, ours = lightning_pytorch, lightning_step_types.lightning_pytorch
    else:
        flavour, ours = pytorch_lightning, lightning_step_types.pytorch_lightning
    return flavour.Trainer(
        accelerator="cpu", devices=1, logger=flavour.loggers.CSVLogger(log_dir), enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        callbacks=[ours.StepResultAdapter()] if adapter else [], **settings,
    )  # fmt: skip


def train(recipe: Recipe, files: dict[str, bytes], adapter: bool = False) -> dict[str, torch.Tensor]:
    """Train the recipe's class from the fixture's ``files`` (released or migrated), under plain
    Lightning or under ``StepResultAdapter()``, and return its final parameters and buffers."""
    stubs = recipe.stubs()
    for file, qualified_name in recipe.siblings:
        stubs[qualified_name] = load(files[file], qualified_name, stubs)
    namespace = load(files[recipe.file], recipe.qualified_name, stubs)
    cls = getattr(namespace, recipe.owner)
    for klass in cls.__mro__:
        for hook in LEGACY_HOOKS:
            if hook in vars(klass):
                delattr(klass, hook)
    for hook in recipe.data_hooks:
        setattr(cls, hook, lambda self, *args, **kwargs: None)
    torch.manual_seed(0)
    model, fit_kwargs = recipe.build(cls)
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    test_loaders = fit_kwargs.pop("test_dataloaders", fit_kwargs.get("val_dataloaders"))
    log_dir = tempfile.mkdtemp(prefix="corpus-train-")
    trainer = trainer_for(
        cls, log_dir, adapter, max_epochs=2, limit_train_batches=2, limit_val_batches=2, limit_test_batches=2
    )
    cwd = os.getcwd()
    os.chdir(log_dir)  # whatever a module writes relative to the working folder lands in the temporary one
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model, **fit_kwargs)
            if recipe.test:
                trainer.test(model, dataloaders=test_loaders, verbose=False)
    finally:
        os.chdir(cwd)
        shutil.rmtree(log_dir, ignore_errors=True)
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if all(torch.equal(initial[k], final[k]) for k in final):  # equal results must come from real training
        raise AssertionError(f"{recipe.id}: no parameter changed in training")
    return final


# --- recipes -------------------------------------------------------------------------------------

_DEMOS = "lightning/pytorch/demos/"


def _own_loaders(cls: type) -> tuple[Any, dict[str, Any]]:
    # BoringModel and its subclasses bring their own random-tensor loaders
    return cls(), {}


def _demo_model(cls: type) -> tuple[Any, dict[str, Any]]:
    # DemoModel's step takes the batch itself as its input: a loader over one plain tensor
    return cls(out_dim=10), {"train_dataloaders": DataLoader(torch.randn(16, 32), batch_size=4)}


def _tokens(vocab: int, length: int = 35, n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.randint(0, vocab, (n, length + 1))
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _lstm(cls: type) -> tuple[Any, dict[str, Any]]:
    # WikiText2 batches: (20, 35) token ids, target shifted by one
    inputs, target = _tokens(200, n=40)
    return cls(vocab_size=200), {"train_dataloaders": loader(inputs, target, batch_size=20)}


def _transformer(cls: type) -> tuple[Any, dict[str, Any]]:
    inputs, target = _tokens(200)
    return cls(vocab_size=200), {"train_dataloaders": loader(inputs, target, batch_size=4)}


def _torchvision() -> dict[str, types.ModuleType]:
    # pl_examples import torchvision for MNIST downloads and transforms, which the runs replace
    transforms = fake_module("torchvision.transforms", Compose=list, ToTensor=object, Normalize=object)
    datasets = fake_module("torchvision.datasets", MNIST=object)
    return {
        "torchvision": fake_module("torchvision", transforms=transforms, datasets=datasets),
        "torchvision.transforms": transforms,
        "torchvision.datasets": datasets,
    }


def _mnist(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(n, 1, 28, 28), torch.randint(0, 10, (n,))


def _template(cls: type) -> tuple[Any, dict[str, Any]]:
    model = cls(hidden_dim=32, batch_size=4)
    return model, {"train_dataloaders": loader(*_mnist()), "val_dataloaders": loader(*_mnist(8))}


def _bolts_stability() -> dict[str, types.ModuleType]:
    stability = fake_module("pl_bolts.utils.stability", under_review=lambda: lambda obj: obj)
    return {"pl_bolts.utils": fake_module("pl_bolts.utils", stability=stability), "pl_bolts.utils.stability": stability}


def _linear_regression(cls: type) -> tuple[Any, dict[str, Any]]:
    x, y = torch.randn(16, 5), torch.randn(16, 1)
    # SGD: a rewrite that scaled the loss would change the parameters (Adam, the default, would hide it)
    fit = {"train_dataloaders": loader(x, y), "val_dataloaders": loader(x[:8], y[:8])}
    return cls(input_dim=5, optimizer=torch.optim.SGD, learning_rate=0.1), fit


class _TinyEncoder(nn.Module):
    """Stands for bolts' resnet18 encoder: images to ``enc_out_dim`` features."""

    def __init__(self, first_conv: bool = False, maxpool1: bool = False) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 512))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _TinyDecoder(nn.Module):
    """Stands for bolts' resnet18 decoder: latent vectors to images."""

    def __init__(self, latent_dim: int, input_height: int, first_conv: bool = False, maxpool1: bool = False) -> None:
        super().__init__()
        self.input_height = input_height
        self.net = nn.Linear(latent_dim, 3 * input_height * input_height)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z).view(-1, 3, self.input_height, self.input_height)


def _bolts_autoencoder() -> dict[str, types.ModuleType]:
    components = fake_module(
        "pl_bolts.models.autoencoders.components",
        resnet18_decoder=_TinyDecoder,
        resnet18_encoder=_TinyEncoder,
        resnet50_decoder=_TinyDecoder,
        resnet50_encoder=_TinyEncoder,
    )
    return {
        "pl_bolts": fake_module("pl_bolts", _HTTPS_AWS_HUB="https://example.invalid"),
        "pl_bolts.models.autoencoders.components": components,
        **_bolts_stability(),
    }


def _basic_ae(cls: type) -> tuple[Any, dict[str, Any]]:
    x = torch.rand(16, 3, 8, 8)
    y = torch.zeros(16, dtype=torch.long)
    return cls(input_height=8), {"train_dataloaders": loader(x, y), "val_dataloaders": loader(x[:8], y[:8])}


def _basic_vae(cls: type) -> tuple[Any, dict[str, Any]]:
    x = torch.rand(16, 3, 8, 8)
    y = torch.zeros(16, dtype=torch.long)
    # SGD and a large KL coefficient: a rewrite that changed the loss would change the parameters
    model = cls(input_height=8, latent_dim=16, kl_coeff=1.0, lr=0.1)
    model.configure_optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.1)
    return model, {"train_dataloaders": loader(x, y), "val_dataloaders": loader(x[:8], y[:8])}


def _logistic_regression(cls: type) -> tuple[Any, dict[str, Any]]:
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    # l2_strength > 0: the training branch goes through `_regularization`, which adds to the loss in place
    model = cls(input_dim=4, num_classes=3, optimizer=torch.optim.SGD, learning_rate=0.1, l2_strength=0.01)
    return model, {"train_dataloaders": loader(x, y), "val_dataloaders": loader(x[:8], y[:8])}


def _asteroid_utils() -> dict[str, types.ModuleType]:
    def flatten_dict(d: dict, parent_key: str = "", sep: str = "_") -> dict:
        return dict(d)

    utils = fake_module("asteroid.utils", flatten_dict=flatten_dict)
    return {"asteroid.utils": utils}


def _asteroid_system(cls: type) -> tuple[Any, dict[str, Any]]:
    # a separation model on (batch, time) mixtures and (batch, sources, time) targets
    model = nn.Sequential(nn.Linear(64, 128), nn.Unflatten(1, (2, 64)))
    mixture, sources = torch.randn(16, 64), torch.randn(16, 2, 64)
    train, val = loader(mixture, sources), loader(mixture[:8], sources[:8])
    system = cls(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), train, val)
    return system, {}


class _TinyTimmModel(nn.Module):
    """Stands for a timm backbone with its classifier: (batch, channels, 8, 8) images to class scores."""

    def __init__(self, num_classes: int, in_chans: int) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(in_chans, 4, 3, padding=1), nn.ReLU(), nn.Flatten())
        self.head = nn.Linear(4 * 8 * 8, num_classes)

    def get_classifier(self) -> nn.Module:
        return self.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class _TinyFCN(nn.Module):
    """Stands for torchgeo's FCN: (batch, channels, H, W) images to (batch, classes, H, W) scores."""

    def __init__(self, in_channels: int, classes: int, num_filters: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, num_filters, 3, padding=1), nn.ReLU(), nn.Conv2d(num_filters, classes, 3, padding=1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _torchgeo_imports() -> dict[str, types.ModuleType]:
    """What torchgeo's task files import beyond torch, lightning and torchmetrics, none of which the
    steps under test reach (timm stands for the backbone; the rest serve plotting and weights)."""

    class _Placeholder:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("a substitute that these runs never call")

    def create_model(name: str, num_classes: int, in_chans: int, pretrained: bool = False, **kwargs: Any) -> nn.Module:
        return _TinyTimmModel(num_classes, in_chans)

    losses = fake_module("segmentation_models_pytorch.losses", FocalLoss=_Placeholder, JaccardLoss=_Placeholder)
    augmentation = fake_module("kornia.augmentation", AugmentationSequential=_Placeholder, Denormalize=_Placeholder)
    pyplot = fake_module("matplotlib.pyplot", close=lambda *args: None)
    figure = fake_module("matplotlib.figure", Figure=_Placeholder)
    api = fake_module("torchvision.models._api", WeightsEnum=type("WeightsEnum", (), {}))
    modules = {
        "timm": fake_module("timm", create_model=create_model),
        "segmentation_models_pytorch": fake_module("segmentation_models_pytorch", losses=losses),
        "segmentation_models_pytorch.losses": losses,
        "kornia": fake_module("kornia", augmentation=augmentation),
        "kornia.augmentation": augmentation,
        "matplotlib": fake_module("matplotlib", pyplot=pyplot, figure=figure),
        "matplotlib.pyplot": pyplot,
        "matplotlib.figure": figure,
        "torchvision": fake_module("torchvision"),
        "torchvision.models": fake_module("torchvision.models", _api=api),
        "torchvision.models._api": api,
        "torchgeo.datasets": fake_module(
            "torchgeo.datasets",
            RGBBandsMissingError=type("RGBBandsMissingError", (Exception,), {}),
            unbind_samples=_Placeholder,
        ),
        "torchgeo.models": fake_module("torchgeo.models", get_weight=_Placeholder, FCN=_TinyFCN),
        "torchgeo.trainers.utils": fake_module("torchgeo.trainers.utils"),
    }
    return modules


def _images(n: int, channels: int = 3) -> torch.Tensor:
    return torch.rand(n, channels, 8, 8)


class _Samples(torch.utils.data.Dataset):
    """torchgeo's sample dicts: ``{"image": (C, H, W), "label" or "mask": ...}``."""

    def __init__(self, image: torch.Tensor, target: torch.Tensor, key: str) -> None:
        self.image, self.target, self.key = image, target, key

    def __len__(self) -> int:
        return len(self.image)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"image": self.image[index], self.key: self.target[index]}


def _samples(image: torch.Tensor, target: torch.Tensor, key: str = "label") -> DataLoader:
    return DataLoader(_Samples(image, target, key), batch_size=4)


def _classification_task(cls: type) -> tuple[Any, dict[str, Any]]:
    task = cls(model="resnet18", in_channels=3, num_classes=5)
    train = _samples(_images(16), torch.randint(0, 5, (16,)))
    val = _samples(_images(8), torch.randint(0, 5, (8,)))
    # two test loaders: the steps take `dataloader_idx` (one validation loader: BaseTask's plateau
    # scheduler monitors `val_loss`, which several validation loaders would log per loader)
    test = [_samples(_images(8), torch.randint(0, 5, (8,))), _samples(_images(8), torch.randint(0, 5, (8,)))]
    return task, {"train_dataloaders": train, "val_dataloaders": val, "test_dataloaders": test}


def _regression_task(cls: type) -> tuple[Any, dict[str, Any]]:
    task = cls(model="resnet18", in_channels=3, num_outputs=1)
    train = _samples(_images(16), torch.randn(16, 1))
    val = _samples(_images(8), torch.randn(8, 1))
    test = [_samples(_images(8), torch.randn(8, 1)), _samples(_images(8), torch.randn(8, 1))]
    return task, {"train_dataloaders": train, "val_dataloaders": val, "test_dataloaders": test}


class _TinyBoxPredictor(nn.Module):
    """Stands for torchvision's FastRCNNPredictor."""

    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.cls_score = nn.Linear(in_features, num_classes)
        self.bbox_pred = nn.Linear(in_features, 4)


class _TinyDetector(nn.Module):
    """Stands for torchvision's Faster R-CNN: in training mode, ``model(images, targets)`` returns
    a dict of named loss tensors, as torchvision's detection models do."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 16, 3, padding=1)
        self.roi_heads = nn.Module()
        self.roi_heads.box_predictor = _TinyBoxPredictor(16, 91)

    def forward(self, images: Any, targets: Any = None) -> Any:
        features = torch.stack([self.body(image).mean(dim=(1, 2)) for image in images])
        predictor = self.roi_heads.box_predictor
        labels = torch.stack([t["labels"][0] for t in targets])
        boxes = torch.stack([t["boxes"][0] for t in targets])
        return {
            "loss_classifier": nn.functional.cross_entropy(predictor.cls_score(features), labels),
            "loss_box_reg": nn.functional.smooth_l1_loss(predictor.bbox_pred(features), boxes),
        }


def _bolts_detection() -> dict[str, types.ModuleType]:
    faster_rcnn = fake_module(
        "torchvision.models.detection.faster_rcnn",
        FasterRCNN=_TinyDetector,
        FastRCNNPredictor=_TinyBoxPredictor,
        fasterrcnn_resnet50_fpn=_TinyDetector,
    )
    ops = fake_module("torchvision.ops", box_iou=None)
    utils = fake_module("pl_bolts.utils", _TORCHVISION_AVAILABLE=True)
    stability = fake_module("pl_bolts.utils.stability", under_review=lambda: lambda obj: obj)
    return {
        "torchvision": fake_module("torchvision"),
        "torchvision.models": fake_module("torchvision.models"),
        "torchvision.models.detection": fake_module("torchvision.models.detection"),
        "torchvision.models.detection.faster_rcnn": faster_rcnn,
        "torchvision.ops": ops,
        "pl_bolts.models.detection.faster_rcnn": fake_module(
            "pl_bolts.models.detection.faster_rcnn", create_fasterrcnn_backbone=None
        ),
        "pl_bolts.utils": utils,
        "pl_bolts.utils.stability": stability,
        "pl_bolts.utils.warnings": fake_module("pl_bolts.utils.warnings", warn_missing_pkg=None),
    }


class _Detections(torch.utils.data.Dataset):
    """Pascal VOC-style samples: an image and ``{"boxes": (N, 4), "labels": (N,)}``."""

    def __init__(self, n: int) -> None:
        self.images = torch.rand(n, 3, 16, 16)
        corners = torch.rand(n, 2, 2) * 8
        self.boxes = torch.cat([corners, corners + 8], dim=2)
        self.labels = torch.randint(1, 91, (n, 2))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.images[index], {"boxes": self.boxes[index], "labels": self.labels[index]}


def _faster_rcnn(cls: type) -> tuple[Any, dict[str, Any]]:
    # detection loaders yield tuples of images and of target dicts
    train = DataLoader(_Detections(8), batch_size=4, collate_fn=lambda samples: tuple(zip(*samples)))
    return cls(pretrained_backbone=False), {"train_dataloaders": train}


def _segmentation_task(cls: type) -> tuple[Any, dict[str, Any]]:
    task = cls(model="fcn", in_channels=3, num_classes=4)

    def masks(n: int) -> DataLoader:
        return _samples(_images(n), torch.randint(0, 4, (n, 8, 8)), "mask")

    return task, {"train_dataloaders": masks(16), "val_dataloaders": masks(8), "test_dataloaders": [masks(8), masks(8)]}


_TORCHGEO_BASE = (("torchgeo/trainers/base.py", "torchgeo.trainers.base"),)

RECIPES = (
    Recipe(
        "lightning-boring-classes",
        _DEMOS + "boring_classes.py",
        "lightning.pytorch.demos.boring_classes",
        "BoringModel",
        _own_loaders,
        test=True,
    ),
    Recipe(
        "lightning-boring-classes",
        _DEMOS + "boring_classes.py",
        "lightning.pytorch.demos.boring_classes",
        "ManualOptimBoringModel",
        _own_loaders,
    ),
    Recipe(
        "lightning-boring-classes",
        _DEMOS + "boring_classes.py",
        "lightning.pytorch.demos.boring_classes",
        "DemoModel",
        _demo_model,
    ),
    Recipe(
        "lightning-lstm",
        _DEMOS + "lstm.py",
        "lightning.pytorch.demos.lstm",
        "LightningLSTM",
        _lstm,
        data_hooks=("prepare_data",),
    ),
    Recipe(
        "lightning-lstm-base-class",
        _DEMOS + "lstm.py",
        "lightning.pytorch.demos.lstm",
        "LightningLSTM",
        _lstm,
        data_hooks=("prepare_data",),
    ),
    Recipe(
        "lightning-transformer",
        _DEMOS + "transformer.py",
        "lightning.pytorch.demos.transformer",
        "LightningTransformer",
        _transformer,
        data_hooks=("prepare_data",),
    ),
    Recipe(
        "pl-examples-template",
        "pl_examples/models/lightning_template.py",
        "pl_examples.models.lightning_template",
        "LightningTemplateModel",
        _template,
        _torchvision,
        test=True,
        data_hooks=("prepare_data", "setup"),
    ),
    Recipe(
        "bolts-basic-ae-base-class",
        "pl_bolts/models/autoencoders/basic_ae/basic_ae_module.py",
        "pl_bolts.models.autoencoders.basic_ae.basic_ae_module",
        "AE",
        _basic_ae,
        _bolts_autoencoder,
    ),
    Recipe(
        "bolts-linear-regression",
        "pl_bolts/models/regression/linear_regression.py",
        "pl_bolts.models.regression.linear_regression",
        "LinearRegression",
        _linear_regression,
        _bolts_stability,
        test=True,
    ),
    Recipe(
        "bolts-faster-rcnn",
        "pl_bolts/models/detection/faster_rcnn/faster_rcnn_module.py",
        "pl_bolts.models.detection.faster_rcnn.faster_rcnn_module",
        "FasterRCNN",
        _faster_rcnn,
        _bolts_detection,
    ),
    Recipe(
        "bolts-basic-ae",
        "pl_bolts/models/autoencoders/basic_ae/basic_ae_module.py",
        "pl_bolts.models.autoencoders.basic_ae.basic_ae_module",
        "AE",
        _basic_ae,
        _bolts_autoencoder,
    ),
    Recipe(
        "bolts-vae",
        "pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py",
        "pl_bolts.models.autoencoders.basic_vae.basic_vae_module",
        "VAE",
        _basic_vae,
        _bolts_autoencoder,
    ),
    Recipe(
        "bolts-vae-base-class",
        "pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py",
        "pl_bolts.models.autoencoders.basic_vae.basic_vae_module",
        "VAE",
        _basic_vae,
        _bolts_autoencoder,
    ),
    Recipe(
        "bolts-logistic-regression",
        "pl_bolts/models/regression/logistic_regression.py",
        "pl_bolts.models.regression.logistic_regression",
        "LogisticRegression",
        _logistic_regression,
        _bolts_stability,
        test=True,
    ),
    Recipe(
        "torchgeo-trainers",
        "torchgeo/trainers/classification.py",
        "torchgeo.trainers.classification",
        "ClassificationTask",
        _classification_task,
        _torchgeo_imports,
        test=True,
        siblings=_TORCHGEO_BASE,
    ),
    Recipe(
        "torchgeo-classification-assume-lightning",
        "torchgeo/trainers/classification.py",
        "torchgeo.trainers.classification",
        "ClassificationTask",
        _classification_task,
        _torchgeo_imports,
        test=True,
        siblings=_TORCHGEO_BASE,
    ),
    Recipe(
        "torchgeo-trainers",
        "torchgeo/trainers/regression.py",
        "torchgeo.trainers.regression",
        "RegressionTask",
        _regression_task,
        _torchgeo_imports,
        test=True,
        siblings=_TORCHGEO_BASE,
    ),
    Recipe(
        "torchgeo-trainers",
        "torchgeo/trainers/segmentation.py",
        "torchgeo.trainers.segmentation",
        "SemanticSegmentationTask",
        _segmentation_task,
        _torchgeo_imports,
        test=True,
        siblings=_TORCHGEO_BASE,
    ),
    Recipe(
        "asteroid-system",
        "asteroid/engine/system.py",
        "asteroid.engine.system",
        "System",
        _asteroid_system,
        _asteroid_utils,
    ),
)
