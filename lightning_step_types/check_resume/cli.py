"""``python -m lightning_step_types.check_resume --config config.yaml``: the check on a LightningCLI config."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_step_types.check_resume.check import check_setup
from lightning_step_types.check_resume.points import Interruption
from lightning_step_types.check_resume.runs import Built, Setup, is_mapping

__all__ = ["ConfigBuild", "main", "setup_from_config"]

_SET_BY_THE_CHECK = ("logger", "default_root_dir", "callbacks")


def _package_of(config: dict[str, Any]) -> str:
    """The Lightning package the config's model subclasses (by its ``class_path``)."""
    model = config.get("model")
    path = model.get("class_path") if is_mapping(model) else model
    if not isinstance(path, str) or "." not in path:
        raise SystemExit(
            "check_resume: the config's `model` has no class_path; expected `model: {class_path: package.Module,"
            " init_args: {...}}` as `LightningCLI(subclass_mode_model=True)` and `--print_config` write it;"
            " fix: name the model by its class_path"
        )
    module_name, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    for package in ("pytorch_lightning", "lightning.pytorch"):
        try:
            base = importlib.import_module(package).LightningModule
        except ModuleNotFoundError:
            continue
        if isinstance(cls, type) and issubclass(cls, base):
            return package
    raise SystemExit(f"check_resume: {path} is not a LightningModule of pytorch_lightning or lightning.pytorch")


class ConfigBuild:
    """A fit's objects from a LightningCLI config: each call instantiates its model, data and callbacks anew.

    Picklable: a fresh process parses the config again from its path."""

    def __init__(self, path: Path, package: str) -> None:
        self.path: Path = path
        self.package: str = package
        self._cli: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "package": self.package}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.package = state["path"], state["package"]
        self._cli = None

    @property
    def cli(self) -> Any:
        if self._cli is None:
            cli_class: Any = importlib.import_module(f"{self.package}.cli").LightningCLI
            self._cli = cli_class(
                args=["--config", str(self.path)],
                run=False,
                subclass_mode_model=True,
                subclass_mode_data=True,
                save_config_callback=None,
                auto_configure_optimizers=True,
            )
        return self._cli

    def __call__(self) -> Built:
        made: Any = self.cli.parser.instantiate_classes(self.cli.config)
        trainer: Any = made.get("trainer") or {}
        return Built(
            module=made.get("model"), datamodule=made.get("data"), callbacks=list(trainer.get("callbacks") or [])
        )


def setup_from_config(path: Path, exact_resume: bool = True, seed: int | None = None) -> Setup:
    """A setup built from a LightningCLI config: each fit instantiates the config's model, data and
    callbacks anew; its other ``trainer`` entries are the Trainer's arguments."""
    yaml: Any = importlib.import_module("yaml")  # PyYAML comes with jsonargparse, which LightningCLI needs
    config: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    build = ConfigBuild(path.resolve(), _package_of(config))
    parsed = build.cli.config
    trainer_args = {
        name: value
        for name, value in dict(parsed.get("trainer") or {}).items()
        if name not in _SET_BY_THE_CHECK and value is not None
    }
    configured_seed = parsed.get("seed_everything")
    chosen = seed if seed is not None else configured_seed if isinstance(configured_seed, int) else 0
    return Setup(build, trainer_args, exact_resume, chosen)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lightning_step_types.check_resume",
        description="Check that resuming the run a LightningCLI config defines is exact: the uninterrupted fit"
        " against the fit interrupted and resumed at each point, bit for bit. Exits 1 where a point differs"
        " silently.",
    )
    parser.add_argument("--config", required=True, type=Path, help="a LightningCLI config (model by class_path)")
    parser.add_argument("--plain", action="store_true", help="plain Lightning's resume (exact_resume=False)")
    parser.add_argument("--seed", type=int, default=None, help="the seed (default: the config's seed_everything, or 0)")
    parser.add_argument("--root", type=Path, default=None, help="where the fits write (default: a temporary folder)")
    parser.add_argument(
        "--fresh-processes", action="store_true", help="every fit in a process of its own, as a relaunched job runs"
    )
    parser.add_argument(
        "--batch",
        action="append",
        default=[],
        metavar="EPOCH:BATCH",
        help="interrupt inside this training batch (repeatable); without any point option, the default spread",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path.cwd()))  # the config names the user's modules as `python train.py` would find them
    setup = setup_from_config(args.config, exact_resume=not args.plain, seed=args.seed)
    points = [Interruption.in_batch(*map(int, text.split(":"))) for text in args.batch] or None
    report = check_setup(setup, points, args.root, args.fresh_processes)
    print(report)
    return 0 if report.ok else 1
