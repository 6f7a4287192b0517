"""LightningCLI (``pytorch_lightning.cli`` and ``lightning.pytorch.cli``) with typed modules and StepResultAdapter.

The configs in ``tests/cli_configs/`` name the callback and the modules by class path, as a user's would;
``--print_config`` must show the callback's init args, and ``fit --config`` must build and train with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch.cli
import pytest
import pytorch_lightning.cli
import yaml

from lightning_step_types import LossLogging
from lightning_step_types import lightning_pytorch as lst_lightning_pytorch
from lightning_step_types import pytorch_lightning as lst_pytorch_lightning
from lightning_step_types.policy import StepPolicy

CONFIGS = Path(__file__).resolve().parent / "cli_configs"

# package -> (its LightningCLI, the adapter class its configs name, the class path of that adapter)
PACKAGES: dict[str, tuple[Any, type[Any], str]] = {
    "pytorch_lightning": (
        pytorch_lightning.cli.LightningCLI,
        lst_pytorch_lightning.StepResultAdapter,
        "lightning_step_types.StepResultAdapter",
    ),
    "lightning_pytorch": (
        lightning.pytorch.cli.LightningCLI,
        lst_lightning_pytorch.StepResultAdapter,
        "lightning_step_types.lightning_pytorch.StepResultAdapter",
    ),
}
PLAIN_MODEL = {
    "pytorch_lightning": "cli_models.PlainRegressor",
    "lightning_pytorch": "cli_models.LightningPlainRegressor",
}
TYPED_MODEL = {
    "pytorch_lightning": "cli_models.TypedRegressor",
    "lightning_pytorch": "cli_models.LightningTypedRegressor",
}


@pytest.fixture(autouse=True)
def cli_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(CONFIGS))  # the configs name `cli_models.<Class>`
    monkeypatch.setattr("sys.argv", ["train.py"])  # LightningCLI warns when pytest's own arguments are there too


def run_cli(package: str, args: list[str], root: Path) -> Any:
    """``python train.py <args>`` where train.py is ``LightningCLI(subclass_mode_model=True)``."""
    cli_class = PACKAGES[package][0]
    return cli_class(
        args=[*args, "--seed_everything=0", f"--trainer.default_root_dir={root}"], subclass_mode_model=True
    )


def printed_config(package: str, args: list[str], root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(package, [*args, "--print_config"], root)
    assert exit_info.value.code in (None, 0)
    return yaml.safe_load(capsys.readouterr().out)


# --- StepResultAdapter given in a config ---------------------------------------------------------------


@pytest.mark.parametrize("package", list(PACKAGES))
def test_print_config_shows_the_adapter_and_its_init_args(
    package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = printed_config(package, ["fit", f"--config={CONFIGS / f'{package}_adapter.yaml'}"], tmp_path, capsys)

    assert config["model"] == {"class_path": PLAIN_MODEL[package], "init_args": {"lr": 0.05}}
    assert config["trainer"]["callbacks"] == [
        {
            "class_path": PACKAGES[package][2],
            # metrics: declared metrics (StepMetric objects) are given in code, not in a config
            "init_args": {
                "strict": True,
                "nonfinite_loss": "warn",
                "log_loss": True,
                "exact_resume": True,
                "metrics": None,
            },
        }
    ]


@pytest.mark.parametrize("package", list(PACKAGES))
def test_fit_from_the_config_trains_with_the_adapter(package: str, tmp_path: Path) -> None:
    cli = run_cli(package, ["fit", f"--config={CONFIGS / f'{package}_adapter.yaml'}"], tmp_path)

    assert cli.trainer.global_step == 8  # 2 epochs x 4 batches
    adapters = [cb for cb in cli.trainer.callbacks if isinstance(cb, PACKAGES[package][1])]
    assert len(adapters) == 1
    assert adapters[0].policy == StepPolicy(strict=True, nonfinite_loss="warn", log_loss=LossLogging())
    assert sorted(cli.trainer.callback_metrics) == ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss"]
    assert "training_step" not in vars(cli.model)  # the adapter restored the module after the run
    # SaveConfigCallback wrote the resolved config, callback included, next to the run
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["trainer"]["callbacks"][0]["init_args"] == {
        "strict": True, "nonfinite_loss": "warn", "log_loss": True, "exact_resume": True, "metrics": None
    }  # fmt: skip


# Each of the adapter's init arguments, spelled out alone in a config (the others left to their defaults), and none.
ONE_INIT_ARG: dict[str, tuple[dict[str, Any], StepPolicy, bool]] = {
    # id: (the config's init_args, the policy the adapter gets, its exact_resume)
    "bare": ({}, StepPolicy(strict=False, nonfinite_loss="warn"), True),
    "strict": ({"strict": True}, StepPolicy(strict=True, nonfinite_loss="warn"), True),
    "nonfinite_loss": ({"nonfinite_loss": "raise"}, StepPolicy(strict=False, nonfinite_loss="raise"), True),
    "log_loss": ({"log_loss": True}, StepPolicy(strict=False, nonfinite_loss="warn", log_loss=LossLogging()), True),
    "exact_resume": ({"exact_resume": False}, StepPolicy(strict=False, nonfinite_loss="warn"), False),
    "metrics": ({"metrics": None}, StepPolicy(strict=False, nonfinite_loss="warn"), True),
}


def adapter_config(package: str, init_args: dict[str, Any]) -> str:
    """A config as a user writes it: the adapter by class path, with ``init_args`` only where some are given."""
    callback = f"    - class_path: {PACKAGES[package][2]}\n"
    if init_args:
        callback += "      init_args:\n" + "".join(
            f"        {name}: {yaml.safe_dump(value).splitlines()[0]}\n" for name, value in init_args.items()
        )
    return (
        f"model:\n  class_path: {PLAIN_MODEL[package]}\n"
        "trainer:\n  max_epochs: 1\n  logger: false\n  enable_checkpointing: false\n"
        "  enable_progress_bar: false\n  enable_model_summary: false\n  num_sanity_val_steps: 0\n"
        f"  callbacks:\n{callback}"
    )


@pytest.mark.parametrize("package", list(PACKAGES))
@pytest.mark.parametrize("given", list(ONE_INIT_ARG))
def test_the_adapter_named_bare_or_with_one_init_arg(
    given: str, package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``callbacks: [{class_path: ...StepResultAdapter}]`` parses, prints its defaults, and trains; so does each
    init argument given alone. (The default ``nonfinite_loss`` is a plain ``"warn"``, which a config can hold.)"""
    init_args, policy, exact_resume = ONE_INIT_ARG[given]
    config = tmp_path / "config.yaml"
    config.write_text(adapter_config(package, init_args))
    printed = printed_config(package, ["fit", f"--config={config}"], tmp_path / "print", capsys)
    defaults = {"strict": False, "nonfinite_loss": "warn", "log_loss": False, "exact_resume": True, "metrics": None}
    assert printed["trainer"]["callbacks"] == [{"class_path": PACKAGES[package][2], "init_args": defaults | init_args}]

    cli = run_cli(package, ["fit", f"--config={config}"], tmp_path / "fit")
    [adapter] = [cb for cb in cli.trainer.callbacks if isinstance(cb, PACKAGES[package][1])]
    assert adapter.policy == policy and adapter.exact_resume is exact_resume
    assert cli.trainer.global_step == 4  # one epoch of 4 batches
    assert sorted(cli.trainer.callback_metrics) == (
        ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss"] if given == "log_loss" else []
    )
    assert "training_step" not in vars(cli.model)  # the adapter restored the module after the run


def test_log_loss_as_a_loss_logging_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", f"--config={CONFIGS / 'pytorch_lightning_custom_logging.yaml'}"]
    config = printed_config("pytorch_lightning", args, tmp_path / "print", capsys)
    assert config["trainer"]["callbacks"][0]["init_args"] == {
        "strict": False,
        "nonfinite_loss": None,
        "log_loss": {"train": "loss", "val": None, "test": "test_loss", "prog_bar": False, "sync_dist": False},
        "exact_resume": True,
        "metrics": None,
    }

    cli = run_cli("pytorch_lightning", args, tmp_path / "fit")
    adapter = cli.trainer.callbacks[0]
    assert adapter.policy == StepPolicy(
        strict=False, nonfinite_loss=None, log_loss=LossLogging(train="loss", val=None, prog_bar=False)
    )
    assert cli.trainer.global_step == 4
    assert sorted(cli.trainer.callback_metrics) == ["loss", "loss_epoch", "loss_step"]
    assert cli.trainer.progress_bar_metrics == {}


def test_adapter_args_on_the_command_line(tmp_path: Path) -> None:
    """The same settings without a config file; a LossLogging value is given as JSON."""
    cli = run_cli(
        "pytorch_lightning",
        [
            "fit",
            f"--model={PLAIN_MODEL['pytorch_lightning']}",
            "--trainer.max_epochs=1",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--trainer.callbacks+=lightning_step_types.StepResultAdapter",
            "--trainer.callbacks.nonfinite_loss=skip",
            '--trainer.callbacks.log_loss={"val": null, "test": "holdout"}',
        ],
        tmp_path,
    )
    assert cli.trainer.callbacks[0].policy == StepPolicy(
        strict=False, nonfinite_loss="skip", log_loss=LossLogging(val=None, test="holdout")
    )
    assert sorted(cli.trainer.callback_metrics) == ["train_loss", "train_loss_epoch", "train_loss_step"]


@pytest.mark.parametrize(
    ("init_arg", "value", "message_parts"),
    [
        (
            "nonfinite_loss",
            "ignore",
            ['Parser key "nonfinite_loss"', "Expected a typing.Literal['raise', 'warn', 'skip']"],
        ),
        ("log_loss", "sometimes", ['Parser key "log_loss"', "Expected a <class 'bool'>"]),
        ("strict", "maybe", ['Parser key "strict"', "Expected a <class 'bool'>"]),
    ],
)
def test_bad_adapter_args_are_rejected_by_the_cli(
    init_arg: str, value: str, message_parts: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "fit",
        f"--model={PLAIN_MODEL['pytorch_lightning']}",
        "--trainer.callbacks+=lightning_step_types.StepResultAdapter",
        f"--trainer.callbacks.{init_arg}={value}",
    ]
    with pytest.raises(SystemExit) as exit_info:
        run_cli("pytorch_lightning", args, tmp_path)
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert "Problem with given class_path 'lightning_step_types.StepResultAdapter'" in stderr
    for part in message_parts:
        assert part in stderr


def test_the_other_packages_adapter_is_rejected_by_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``lightning.pytorch.cli`` accepts only ``lightning.pytorch`` callbacks: the top-level name is the other one."""
    config = (CONFIGS / "lightning_pytorch_adapter.yaml").read_text()
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(config.replace(PACKAGES["lightning_pytorch"][2], "lightning_step_types.StepResultAdapter"))

    with pytest.raises(SystemExit) as exit_info:
        run_cli("lightning_pytorch", ["fit", f"--config={wrong}"], tmp_path)
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert 'Parser key "trainer.callbacks"' in stderr
    assert "Import path lightning_step_types.StepResultAdapter does not correspond to a subclass of Callback" in stderr


# --- a typed module configured by the CLI ------------------------------------------------------------------


@pytest.mark.parametrize("package", list(PACKAGES))
def test_typed_module_from_a_config(package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", f"--config={CONFIGS / f'{package}_typed.yaml'}"]
    config = printed_config(package, args, tmp_path / "print", capsys)
    assert config["model"] == {"class_path": TYPED_MODEL[package], "init_args": {"lr": 0.05, "log_loss": True}}
    assert config["trainer"]["callbacks"] is None

    cli = run_cli(package, args, tmp_path / "fit")
    assert type(cli.model).__qualname__ == TYPED_MODEL[package].removeprefix("cli_models.")
    assert cli.trainer.global_step == 8
    assert sorted(cli.trainer.callback_metrics) == ["train_loss", "train_loss_epoch", "train_loss_step", "val_loss"]


def test_typed_module_log_loss_given_as_loss_logging(tmp_path: Path) -> None:
    cli = run_cli(
        "pytorch_lightning",
        [
            "fit",
            f"--config={CONFIGS / 'pytorch_lightning_typed.yaml'}",
            '--model.log_loss={"train": "loss", "val": "vloss"}',
        ],
        tmp_path,
    )
    assert cli.model.log_loss == LossLogging(train="loss", val="vloss")
    assert sorted(cli.trainer.callback_metrics) == ["loss", "loss_epoch", "loss_step", "vloss"]
