"""The real-world corpus: which released files the codemod is tried on, and where they come from.

No third-party text is stored in this repository. Each fixture names a release on PyPI (pinned),
the files to read out of its wheel, and the repository, path, tag and commit that release was
built from (each file was checked byte for byte against ``git show <commit>:<path>`` of that
repository when the fixture was added). The test downloads the wheel at test time
(``fetching.py``) and runs the codemod on the files as released.

A fixture is one run of the codemod: its files are migrated together, so a class whose base lives
in another file of the fixture (torchgeo's tasks and ``BaseTask``) is seen as a user sees it when
passing the package's folder.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Release:
    """One wheel on PyPI and the repository commit it was built from."""

    requirement: str  # pip requirement, pinned: "lightning==2.6.5"
    repository: str  # GitHub owner/name
    tag: str
    commit: str
    licence: str
    # where the wheel's files sit in the repository: a prefix the repository adds ("src/") or ""
    repository_prefix: str = ""

    @property
    def name(self) -> str:
        return self.requirement.split("==")[0]

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]


LIGHTNING_2 = Release(
    "lightning==2.6.5",
    "Lightning-AI/pytorch-lightning",
    "2.6.5",
    "be98784a1a03581b7051a355ae1084fd352d7cea",
    "Apache-2.0",
    "src/",
)
# 0.9.0 is the last release whose wheel carries Lightning's own examples (`pl_examples`), in the
# 0.x style (`{"loss": ..., "log": ...}` dicts, `validation_epoch_end`) that users still migrate from.
LIGHTNING_0_9 = Release(
    "pytorch-lightning==0.9.0",
    "Lightning-AI/pytorch-lightning",
    "0.9.0",
    "b40de5464a953ff5866a255f4670d318bd8fd65a",
    "Apache-2.0",
)
TORCHGEO = Release(
    "torchgeo==0.7.1",
    "microsoft/torchgeo",
    "v0.7.1",
    "c1b68abcd22220cf8b71bcd1b794a15a4c99aed9",
    "MIT",
)
BOLTS = Release(
    "lightning-bolts==0.7.0",
    "Lightning-Universe/lightning-bolts",
    "0.7.0",
    "9ae0581776ddfef4d9ccc2f3709499d00e22be2e",
    "Apache-2.0",
    "src/",
)
FORECASTING = Release(
    "pytorch-forecasting==1.8.0",
    "sktime/pytorch-forecasting",
    "v1.8.0",
    "4d8d97cd3e85a15a9b90a38dfb0afc819d8e8aa4",
    "MIT",
)
ASTEROID = Release(
    "asteroid==0.7.0",
    "asteroid-team/asteroid",
    "v0.7.0",
    "5fe95b74dfd53186e74ba7d9b85ca4c27f0d9c09",
    "MIT",
)
TABULAR = Release(
    "pytorch-tabular==1.1.1",
    "manujosephv/pytorch_tabular",
    "v1.1.1",
    "3457a3401521be0a9af2e089476cbfc01b3fbbfe",
    "MIT",
    "src/",
)

RELEASES = (LIGHTNING_2, LIGHTNING_0_9, TORCHGEO, BOLTS, FORECASTING, ASTEROID, TABULAR)


@dataclasses.dataclass(frozen=True)
class Fixture:
    """One codemod run over ``files`` (paths inside the wheel, as the repository has them less its
    ``repository_prefix``)."""

    name: str
    release: Release
    files: tuple[str, ...]
    shows: str  # what this fixture brings to the corpus
    # what the command line is given (default: every file); the other files only lie beside them,
    # as in a checkout where the user passes one file
    paths: tuple[str, ...] = ()
    args: tuple[str, ...] = ()  # extra command-line options
    # False for a variant run over steps another fixture already counts (kept out of the table)
    counted: bool = True

    @property
    def run_paths(self) -> tuple[str, ...]:
        return self.paths or self.files

    def repository_path(self, file: str) -> str:
        return self.release.repository_prefix + file


_DEMOS = "lightning/pytorch/demos/"
_PL_EXAMPLES = "pl_examples/domain_templates/"
_TRAINERS = "torchgeo/trainers/"

FIXTURES = (
    Fixture(
        "lightning-boring-classes",
        LIGHTNING_2,
        (_DEMOS + "boring_classes.py",),
        "same-class helper (`self.step(batch)`), manual optimization, dicts without a loss key, "
        "`STEP_OUTPUT` annotations",
    ),
    Fixture("lightning-lstm", LIGHTNING_2, (_DEMOS + "lstm.py",), "a returned loss from `F.nll_loss`"),
    Fixture("lightning-transformer", LIGHTNING_2, (_DEMOS + "transformer.py",), "a returned loss from `F.nll_loss`"),
    Fixture(
        "lightning-lstm-base-class",
        LIGHTNING_2,
        (_DEMOS + "lstm.py",),
        "--base-class: every step converted, so the class becomes a TypedLightningModule (trained, checked strictly)",
        args=("--base-class",),
        counted=False,
    ),
    Fixture(
        "pl-examples-template",
        LIGHTNING_0_9,
        ("pl_examples/models/lightning_template.py",),
        "0.x `log` dict, `val_loss` / `test_loss` keys read by `validation_epoch_end`",
    ),
    Fixture(
        "pl-examples-segmentation",
        LIGHTNING_0_9,
        (_PL_EXAMPLES + "semantic_segmentation.py",),
        "0.x `log` and `progress_bar` holding the same variable",
    ),
    Fixture(
        "pl-examples-gan",
        LIGHTNING_0_9,
        (_PL_EXAMPLES + "generative_adversarial_net.py",),
        "two optimizers through `optimizer_idx` (Lightning 1.x), 0.x `OrderedDict` outputs",
    ),
    Fixture("pl-examples-dqn", LIGHTNING_0_9, (_PL_EXAMPLES + "reinforce_learn_Qnet.py",), "0.x `OrderedDict` output"),
    Fixture(
        "pl-examples-fine-tuning",
        LIGHTNING_0_9,
        (_PL_EXAMPLES + "computer_vision_fine_tuning.py",),
        "0.x output built in a variable",
    ),
    Fixture(
        "pl-examples-imagenet",
        LIGHTNING_0_9,
        (_PL_EXAMPLES + "imagenet.py",),
        "`test_step` delegating to `validation_step`",
    ),
    Fixture(
        "torchgeo-trainers",
        TORCHGEO,
        tuple(
            _TRAINERS + f
            for f in (
                "__init__.py",
                "base.py",
                "byol.py",
                "classification.py",
                "detection.py",
                "instance_segmentation.py",
                "iobench.py",
                "moco.py",
                "regression.py",
                "segmentation.py",
                "simclr.py",
                "utils.py",
            )
        ),
        "bases in another file (`BaseTask` in base.py), detection loss dicts summed, "
        "`dataloader_idx` (several loaders)",
    ),
    # the user's first try on torchgeo: one task file, its base class in a file not given
    Fixture(
        "torchgeo-classification-alone",
        TORCHGEO,
        (_TRAINERS + "base.py", _TRAINERS + "classification.py"),
        "a base class in a file not given: reported by name with the fix",
        paths=(_TRAINERS + "classification.py",),
        counted=False,
    ),
    Fixture(
        "torchgeo-classification-assume-lightning",
        TORCHGEO,
        (_TRAINERS + "base.py", _TRAINERS + "classification.py"),
        "the same with --assume-lightning",
        paths=(_TRAINERS + "classification.py",),
        args=("--assume-lightning",),
        counted=False,
    ),
    Fixture(
        "bolts-faster-rcnn",
        BOLTS,
        ("pl_bolts/models/detection/faster_rcnn/faster_rcnn_module.py",),
        "detection-style loss dict: `sum(loss for loss in loss_dict.values())`",
    ),
    Fixture(
        "bolts-basic-ae",
        BOLTS,
        ("pl_bolts/models/autoencoders/basic_ae/basic_ae_module.py",),
        "`loss, logs = self.step(batch, batch_idx)` from a same-class helper",
    ),
    Fixture(
        "bolts-basic-ae-base-class",
        BOLTS,
        ("pl_bolts/models/autoencoders/basic_ae/basic_ae_module.py",),
        "--base-class on `pytorch_lightning` code (trained, checked strictly)",
        args=("--base-class",),
        counted=False,
    ),
    Fixture(
        "bolts-linear-regression",
        BOLTS,
        ("pl_bolts/models/regression/linear_regression.py",),
        "0.x `log` / `progress_bar` dicts, `val_loss` read by `validation_epoch_end`",
    ),
    Fixture(
        "bolts-basic-gan",
        BOLTS,
        ("pl_bolts/models/gans/basic/basic_gan_module.py",),
        "`optimizer_idx` (Lightning 1.x) with same-class generator / discriminator steps",
    ),
    Fixture(
        "bolts-vae",
        BOLTS,
        ("pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py",),
        "`loss, logs = self.step(...)`; a `validation_step` returning the bare loss tensor",
    ),
    Fixture(
        "bolts-vae-base-class",
        BOLTS,
        ("pl_bolts/models/autoencoders/basic_vae/basic_vae_module.py",),
        "--base-class: `LightningModule` leaves `from pytorch_lightning import LightningModule, Trainer, ...`",
        args=("--base-class",),
        counted=False,
    ),
    Fixture(
        "bolts-yolo",
        BOLTS,
        ("pl_bolts/models/detection/yolo/yolo_module.py",),
        "`STEP_OUTPUT` annotations, evaluation steps that only log",
    ),
    Fixture(
        "bolts-yolo-base-class",
        BOLTS,
        ("pl_bolts/models/detection/yolo/yolo_module.py",),
        "--base-class: `from pytorch_lightning import LightningModule` is then unused and goes",
        args=("--base-class",),
        counted=False,
    ),
    Fixture(
        "bolts-logistic-regression",
        BOLTS,
        ("pl_bolts/models/regression/logistic_regression.py",),
        'a shared step branching on a literal stage (`self._shared_step(batch, "train")`), its dict only logged',
    ),
    Fixture(
        "forecasting-base-model",
        FORECASTING,
        ("pytorch_forecasting/models/base/_base_model.py",),
        "`log, out = self.step(...)`: a helper returning a tuple whose first item is a dict",
    ),
    Fixture(
        "asteroid-system",
        ASTEROID,
        ("asteroid/engine/system.py",),
        "same-class helper called with a stage argument (`self.common_step(batch, batch_nb, train=True)`)",
    ),
    Fixture(
        "tabular-base-model",
        TABULAR,
        ("pytorch_tabular/models/base_model.py",),
        "a loss from a same-class `calculate_loss`; evaluation steps returning tuples",
    ),
)

FIXTURES_BY_NAME = {fixture.name: fixture for fixture in FIXTURES}
