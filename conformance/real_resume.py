"""Real projects' models and loaders, resumed inside an epoch: plainly and with ``StepResultAdapter()``.

    python conformance/real_resume.py [--project pytorch-forecasting|darts|neuralforecast] [--model NAME]

Each case trains one of the project's own models through the project's own data code, which builds a
plain ``torch.utils.data.DataLoader``, on a tiny synthetic series on CPU: 2 epochs of a few batches,
after ``seed_everything(0, workers=True)``, under ``deterministic=True``. Per mode (plain Lightning,
then ``StepResultAdapter()`` in every Trainer) it runs the fit uninterrupted, then the same fit
interrupted by an exception raised after a batch in the middle of epoch 1 (``OnExceptionCheckpoint``
saves), then a fresh model resumed from that checkpoint with ``ckpt_path=``, and compares the resumed
model's final ``state_dict()`` with the uninterrupted one's (max |difference| over every entry).
Where the project's fit takes a Trainer (pytorch-forecasting), ``check_resume`` also checks the adapter's
resume inside epochs 0 and 1 (optimizer states, logged rows, the module's attributes, kept files too).
It prints one row per case, with the ``StepResultWarning`` messages the interrupted and resumed fits gave
(those the uninterrupted fit gave as well, about the project's own steps, apart). Each fit runs in a
process of its own, as a relaunched job does (``--same-process``: all in this one, faster).
Exit status 1 where the adapter's resume differs without a ``StepResultWarning``, where
``check_resume`` reports a difference, or where the adapter changes the uninterrupted fit.

Needs the projects installed beside this package, keeping torch 2.13.0 (conformance/README.md,
"Real projects' loaders, resumed"); a project that is not installed is skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import logging
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

BATCH = 16
EPOCHS = 2


class Stop(RuntimeError):
    """The interruption: raised after a chosen batch, inside epoch 1."""


@dataclass
class Outcome:
    state: dict[str, torch.Tensor]
    batches: int  # batches per epoch
    messages: list[str]  # StepResultWarning messages
    lightning_warned: bool  # Lightning's "your dataloader is not resumable" reached the user


@dataclass(frozen=True)
class Case:
    project: str
    distribution: str
    model: str
    loader: str  # where the project's code builds the training DataLoader
    fit: Callable[[Path, list[Any], Path | None], tuple[dict[str, torch.Tensor], int]]
    package: str  # the Lightning package the project's Trainer comes from


def source_line(obj: Any, needle: str) -> str:
    """``path/in/site-packages.py:LINE`` of the first line holding ``needle`` in ``obj``'s source."""
    lines, start = inspect.getsourcelines(obj)
    path = Path(inspect.getsourcefile(obj) or "?")
    parts = path.parts
    top = obj.__module__.split(".")[0]
    relative = "/".join(parts[parts.index(top) :]) if top in parts else str(path)
    for offset, line in enumerate(lines):
        if needle in line:
            return f"{relative}:{start + offset}"
    return f"{relative}:{start}"


class _Interrupt:
    """Raises ``Stop`` once ``global_step`` reaches ``at_step`` after a batch."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.at_step:
            raise Stop(f"interrupted after global step {self.at_step}")


def interrupter_class(package: str) -> type:
    """``_Interrupt`` as a Callback of ``package``, a module-level class (darts pickles its callbacks)."""
    name = "Interrupt_" + package.replace(".", "_")
    if name not in globals():
        cls = type(name, (_Interrupt, importlib.import_module(package).Callback), {})
        cls.__qualname__ = name
        globals()[name] = cls
    return globals()[name]  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:  # unpickling the class in a fresh process (PEP 562)
    packages = {"Interrupt_pytorch_lightning": "pytorch_lightning", "Interrupt_lightning_pytorch": "lightning.pytorch"}
    if name in packages:
        return interrupter_class(packages[name])
    raise AttributeError(name)


def interrupter(package: str, at_step: int) -> Any:
    return interrupter_class(package)(at_step)


def adapter(package: str) -> Any:
    flavour = "lightning_pytorch" if package == "lightning.pytorch" else "pytorch_lightning"
    return importlib.import_module(f"lightning_step_types.{flavour}").StepResultAdapter()


TRAINER = dict(
    accelerator="cpu",
    devices=1,
    deterministic=True,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)


# --- pytorch-forecasting: TimeSeriesDataSet(...).to_dataloader(train=True) --------------------------


def forecasting_frame() -> Any:
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for series in range(3):
        level = float(rng.normal()) * 3
        for t in range(40):
            rows.append(
                {"series": str(series), "time_idx": t, "value": float(level + np.sin(t / 3) + rng.normal() * 0.1)}
            )
    return pd.DataFrame(rows)


def forecasting_parts(model_name: str, batch_sampler: str | None) -> tuple[Any, Any]:
    """The project's model and training loader, built from one ``TimeSeriesDataSet``."""
    import pytorch_forecasting as pf

    covariates = {} if model_name == "NBeats" else {"static_categoricals": ["series"]}
    dataset = pf.TimeSeriesDataSet(
        forecasting_frame(),
        time_idx="time_idx",
        target="value",
        group_ids=["series"],
        max_encoder_length=8,
        max_prediction_length=2,
        time_varying_unknown_reals=["value"],
        add_relative_time_idx=model_name != "NBeats",
        **covariates,  # type: ignore[arg-type]
    )
    loader = dataset.to_dataloader(train=True, batch_size=BATCH, num_workers=0, batch_sampler=batch_sampler)
    if model_name == "TemporalFusionTransformer":
        model = pf.TemporalFusionTransformer.from_dataset(
            dataset, hidden_size=8, attention_head_size=1, dropout=0.1, hidden_continuous_size=4, learning_rate=0.01
        )
    elif model_name == "DeepAR":
        model = pf.DeepAR.from_dataset(dataset, hidden_size=8, rnn_layers=2, dropout=0.1, learning_rate=0.01)
    else:
        model = pf.NBeats.from_dataset(
            dataset, widths=[16, 16], backcast_loss_ratio=0.1, dropout=0.1, learning_rate=0.01
        )
    return model, loader


def forecasting_fit(model_name: str, batch_sampler: str | None = None) -> Callable[..., Any]:
    def fit(root: Path, callbacks: list[Any], ckpt: Path | None) -> tuple[dict[str, torch.Tensor], int]:
        import lightning.pytorch as pl

        pl.seed_everything(0, workers=True, verbose=False)
        model, loader = forecasting_parts(model_name, batch_sampler)
        trainer = pl.Trainer(max_epochs=EPOCHS, default_root_dir=str(root), callbacks=callbacks, **TRAINER)  # type: ignore[arg-type]
        # pytorch-forecasting's hyperparameters hold its normalizers: torch's weights_only load refuses them
        trainer.fit(model, train_dataloaders=loader, ckpt_path=str(ckpt) if ckpt else None, weights_only=False)
        assert trainer.global_step == EPOCHS * len(loader), (trainer.global_step, len(loader))
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, len(loader)

    fit.parts = lambda: forecasting_parts(model_name, batch_sampler)  # type: ignore[attr-defined]
    return fit


def checked(case: Case, batches: int) -> str:
    """``check_resume``'s verdicts, under the adapter, inside batch ``batches // 2`` of epochs 0 and 1: it
    compares more than the weights (optimizer states, logged rows, the module's attributes, kept files)."""
    parts = getattr(case.fit, "parts", None)
    if parts is None:
        return "n/a"
    from lightning_step_types.check_resume import Interruption, check_resume

    report = check_resume(
        lambda: parts()[0],
        train_dataloaders=lambda: parts()[1],
        callbacks=[lambda: adapter(case.package)],
        trainer={"max_epochs": EPOCHS},
        points=[Interruption.in_batch(0, batches // 2), Interruption.in_batch(1, batches // 2)],
    )
    return ", ".join(point.verdict for point in report.points)


def forecasting_cases() -> list[Case]:
    import pytorch_forecasting as pf

    loader = source_line(pf.TimeSeriesDataSet.to_dataloader, "return DataLoader(")
    synchronized = source_line(pf.data.samplers.GroupedSampler.__iter__, "np.random.permutation")
    version = pf.__version__
    return [
        Case(
            "pytorch-forecasting",
            version,
            "TemporalFusionTransformer",
            loader,
            forecasting_fit("TemporalFusionTransformer"),
            "lightning.pytorch",
        ),
        Case("pytorch-forecasting", version, "DeepAR", loader, forecasting_fit("DeepAR"), "lightning.pytorch"),
        Case("pytorch-forecasting", version, "NBeats", loader, forecasting_fit("NBeats"), "lightning.pytorch"),
        Case(
            "pytorch-forecasting",
            version,
            "TemporalFusionTransformer, batch_sampler='synchronized'",
            synchronized,
            forecasting_fit("TemporalFusionTransformer", "synchronized"),
            "lightning.pytorch",
        ),
    ]


# --- darts: TorchForecastingModel.fit builds its DataLoader in TorchDataModule ------------------------


def darts_series() -> Any:
    from darts import TimeSeries

    t = np.arange(80, dtype=np.float32)
    values = np.sin(t / 4) + 0.1 * np.random.default_rng(0).normal(size=t.shape).astype(np.float32)
    return TimeSeries.from_values(values.astype(np.float32))


def darts_fit(model_name: str) -> Callable[..., Any]:
    def fit(root: Path, callbacks: list[Any], ckpt: Path | None) -> tuple[dict[str, torch.Tensor], int]:
        import darts.models as dm
        import pytorch_lightning as pl

        pl.seed_everything(0, workers=True, verbose=False)
        root.mkdir(parents=True, exist_ok=True)
        kwargs = dict(
            input_chunk_length=8,
            output_chunk_length=2,
            n_epochs=EPOCHS,
            batch_size=BATCH,
            random_state=0,
            model_name="m",
            work_dir=str(root),
            save_checkpoints=True,
            pl_trainer_kwargs={**TRAINER, "default_root_dir": str(root), "callbacks": callbacks},
        )
        if ckpt is None and model_name == "NBEATSModel":
            model = dm.NBEATSModel(num_stacks=2, num_blocks=1, num_layers=2, layer_widths=16, dropout=0.1, **kwargs)
        elif ckpt is None:
            model = dm.TiDEModel(hidden_size=16, decoder_output_dim=4, dropout=0.1, **kwargs)
        else:  # darts' own resume: the model saved at fit start, its weights from `ckpt`
            model = getattr(dm, model_name).load_from_checkpoint("m", work_dir=str(root), file_name=ckpt.name)
            # darts' own ModelCheckpoint as saved at fit start, with the fresh callbacks of this fit
            saved = model.trainer_params["callbacks"]
            model.trainer_params["callbacks"] = [
                c for c in saved if type(c) is pl.callbacks.ModelCheckpoint
            ] + callbacks
        model.fit(darts_series())
        batches = len(model.trainer.train_dataloader)
        assert model.trainer.global_step == EPOCHS * batches, (model.trainer.global_step, batches)
        return {k: v.detach().clone() for k, v in model.model.state_dict().items()}, batches

    return fit


def darts_cases() -> list[Case]:
    import darts
    from darts.utils.data.torch_datasets._data_module import TorchDataModule

    loader = source_line(TorchDataModule._create_dataloader, "return DataLoader(")
    return [
        Case("darts", darts.__version__, name, loader, darts_fit(name), "pytorch_lightning")
        for name in ("NBEATSModel", "TiDEModel")
    ]


# --- neuralforecast: a model's fit builds TimeSeriesDataModule, whose TimeSeriesLoader is a DataLoader ----


NF_SERIES, NF_BATCH, NF_STEPS = 6, 2, 6  # 3 batches an epoch, 2 epochs


def neuralforecast_frame() -> Any:
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = [
        {"unique_id": f"s{series}", "ds": t, "y": float(np.sin(t / 3 + series) + rng.normal() * 0.1)}
        for series in range(NF_SERIES)
        for t in range(40)
    ]
    return pd.DataFrame(rows)


def neuralforecast_fit(model_name: str) -> Callable[..., Any]:
    def fit(root: Path, callbacks: list[Any], ckpt: Path | None) -> tuple[dict[str, torch.Tensor], int]:
        import neuralforecast.models as nm
        import pytorch_lightning as pl
        from neuralforecast.tsdataset import TimeSeriesDataModule, TimeSeriesDataset

        pl.seed_everything(0, workers=True, verbose=False)
        dataset, *_ = TimeSeriesDataset.from_df(neuralforecast_frame())
        trainer_kwargs = {
            **TRAINER,
            "enable_checkpointing": True,
            "default_root_dir": str(root),
            "callbacks": callbacks,
        }
        common = dict(h=2, input_size=8, max_steps=NF_STEPS, batch_size=NF_BATCH, windows_batch_size=8, random_seed=1)
        if model_name == "NHITS":
            model = nm.NHITS(mlp_units=[[16, 16]] * 3, n_pool_kernel_size=[2, 1, 1], **common, **trainer_kwargs)
        else:
            model = nm.MLP(num_layers=2, hidden_size=16, **common, **trainer_kwargs)
        if ckpt is None:
            model.fit(dataset)  # the project's own fit: BaseModel._fit builds the data module and the Trainer
        else:  # neuralforecast's fit takes no checkpoint: BaseModel._fit's own steps, with ckpt_path
            model._restart_seed(None)
            model.val_size, model.test_size = 0, 0
            datamodule = TimeSeriesDataModule(
                dataset=dataset,
                batch_size=model.batch_size,
                valid_batch_size=model.valid_batch_size,
                drop_last=model.drop_last_loader,
                shuffle_train=True,
            )
            model.trainer_kwargs["val_check_interval"] = int(min(model.val_check_steps, model.max_steps))
            model.trainer_kwargs["check_val_every_n_epoch"] = None
            trainer = pl.Trainer(**model.trainer_kwargs)
            trainer.fit(model, datamodule=datamodule, ckpt_path=str(ckpt), weights_only=False)
            assert trainer.global_step == NF_STEPS, trainer.global_step
        batches = len(TimeSeriesDataModule(dataset=dataset, batch_size=NF_BATCH).train_dataloader())
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, batches

    return fit


def neuralforecast_cases() -> list[Case]:
    import neuralforecast
    from neuralforecast.tsdataset import TimeSeriesDataModule

    loader = source_line(TimeSeriesDataModule.train_dataloader, "TimeSeriesLoader(")
    return [
        Case("neuralforecast", neuralforecast.__version__, name, loader, neuralforecast_fit(name), "pytorch_lightning")
        for name in ("NHITS", "MLP")
    ]


# --- the runs ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        # every StepResultWarning; the rest as the project's own filters say (neuralforecast ignores
        # Lightning's PossibleUserWarning at import: its users never see "not resumable")
        from lightning_step_types.errors import StepResultWarning

        warnings.simplefilter("always", StepResultWarning)
        yield caught


def checkpoint_dir(case: Case, root: Path) -> Path:
    # darts' load_from_checkpoint reads WORK_DIR/MODEL_NAME/checkpoints
    return root / "m" / "checkpoints" if case.project == "darts" else root / "interrupted"


def one_fit(case: Case, with_adapter: bool, at_step: int | None, folder: Path, resume: bool) -> Outcome:
    """One fit: uninterrupted (``at_step`` None), interrupted after ``at_step``, or resumed from that."""
    from lightning_step_types.errors import StepResultWarning

    package = importlib.import_module(case.package)
    callbacks = [adapter(case.package)] if with_adapter else []
    ckpts = checkpoint_dir(case, folder)
    state: dict[str, torch.Tensor] = {}
    batches = 0
    with recorded() as caught:
        if at_step is None:
            state, batches = case.fit(folder, callbacks, None)
        elif resume:
            state, batches = case.fit(folder, callbacks, ckpts / "interrupted.ckpt")
        else:
            on_exception = package.callbacks.OnExceptionCheckpoint(dirpath=str(ckpts), filename="interrupted")
            try:
                case.fit(folder, [*callbacks, interrupter(case.package, at_step), on_exception], None)
            except Stop:
                pass
            else:
                raise AssertionError(f"{case.model}: the fit was not interrupted at step {at_step}")
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    lightning_warned = any("dataloader is not resumable" in str(w.message) for w in caught)
    return Outcome(state, batches, messages, lightning_warned)


CHECK = True  # check_resume's verdicts too, where the project's fit takes a Trainer (--no-check-resume: not)
FRESH = True  # each fit in a process of its own, as a relaunched job runs (--same-process: all in this one)


def fit(case: Case, with_adapter: bool, at_step: int | None, folder: Path, resume: bool = False) -> Outcome:
    if not FRESH:
        return one_fit(case, with_adapter, at_step, folder, resume)
    out = folder.parent / f"{folder.name}-{'resumed' if resume else 'fit'}.pt"
    job = [case.project, case.model, str(int(with_adapter)), str(at_step or 0), str(folder), str(int(resume)), str(out)]
    subprocess.run([sys.executable, __file__, "--fit", *job], check=True)
    return Outcome(**torch.load(out, weights_only=False))


def run(case: Case, with_adapter: bool, at_step: int | None, root: Path) -> Outcome:
    """The uninterrupted fit, or the interrupted fit and its resume (their StepResultWarnings together)."""
    if at_step is None:
        return fit(case, with_adapter, None, root / "uninterrupted")
    folder = root / f"resumed-{at_step}"
    interrupted = fit(case, with_adapter, at_step, folder)
    resumed = fit(case, with_adapter, at_step, folder, resume=True)
    resumed.messages = interrupted.messages + resumed.messages
    resumed.lightning_warned |= interrupted.lightning_warned
    return resumed


def fit_here(job: list[str]) -> None:
    """``--fit``: one fit in this fresh process; its outcome goes to the file the parent named."""
    project, model, with_adapter, at_step, folder, resume, out = job
    (case,) = [case for case in all_cases([project]) if case.model == model]
    outcome = one_fit(case, with_adapter == "1", int(at_step) or None, Path(folder), resume == "1")
    torch.save(vars(outcome), out)


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    worst = 0.0
    for key, value in a.items():
        if value.is_floating_point():
            worst = max(worst, (value.double() - b[key].double()).abs().max().item() if value.numel() else 0.0)
        elif not torch.equal(value, b[key]):
            worst = float("inf")
    return worst


@dataclass
class Row:
    case: Case
    batches: int
    at_step: int
    plain: float
    plain_lightning_warned: bool
    exact: float
    messages: list[str]  # StepResultWarnings of the interrupted and resumed fits the uninterrupted fit did not give
    every_fit: list[str]  # those the uninterrupted fit gave too (about the project's steps, not the resume)
    adapter_lightning_warned: bool
    same_uninterrupted: float  # the adapter's uninterrupted fit against plain Lightning's
    check: str  # check_resume's verdicts under the adapter


def measure(case: Case, root: Path) -> Row:
    plain_reference = run(case, False, None, root / "plain")
    at_step = plain_reference.batches + plain_reference.batches // 2  # inside epoch 1, mid-epoch
    plain = run(case, False, at_step, root / "plain")
    reference = run(case, True, None, root / "adapter")
    resumed = run(case, True, at_step, root / "adapter")
    return Row(
        case,
        plain_reference.batches,
        at_step,
        max_difference(plain_reference.state, plain.state),
        plain.lightning_warned,
        max_difference(reference.state, resumed.state),
        [m for m in dict.fromkeys(resumed.messages) if m not in reference.messages],
        list(dict.fromkeys(reference.messages)),
        resumed.lightning_warned,
        max_difference(plain_reference.state, reference.state),
        checked(case, plain_reference.batches) if CHECK else "not run",
    )


def all_cases(projects: list[str] | None) -> list[Case]:
    cases: list[Case] = []
    builders = (
        ("pytorch-forecasting", forecasting_cases),
        ("darts", darts_cases),
        ("neuralforecast", neuralforecast_cases),
    )
    for project, builder in builders:
        if projects and project not in projects:
            continue
        try:
            cases += builder()
        except ImportError as error:
            print(f"{project}: not installed ({error}); skipped", file=sys.stderr)
    return cases


def quiet() -> None:
    for name in (
        "lightning.pytorch",
        "lightning.fabric",
        "pytorch_lightning",
        "lightning_fabric",
        "darts",
        "neuralforecast",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(1)


def main(argv: list[str] | None = None) -> int:
    global FRESH, CHECK
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", choices=("pytorch-forecasting", "darts", "neuralforecast"), action="append")
    parser.add_argument("--model", action="append", help="only the cases whose model starts with this")
    parser.add_argument("--same-process", action="store_true", help="every fit in this process (faster)")
    parser.add_argument("--no-check-resume", action="store_true", help="leave out check_resume's verdicts")
    parser.add_argument("--fit", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quiet()
    if args.fit:
        fit_here(args.fit)
        return 0
    FRESH, CHECK = not args.same_process, not args.no_check_resume
    cases = all_cases(args.project)
    if args.model:
        cases = [case for case in cases if any(case.model.startswith(name) for name in args.model)]
    root = Path(tempfile.mkdtemp(prefix="real_resume-"))
    rows: list[Row] = []
    try:
        for number, case in enumerate(cases):
            rows.append(measure(case, root / str(number)))
            print(f"measured {case.project} {case.model}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        "| project | version | model | the project's training loader | batches/epoch | interrupted after step | plain max abs diff | adapter max abs diff | StepResultWarning at the resume | check_resume, adapter (epoch 0, epoch 1) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    for row in rows:
        plain = f"{row.plain:.3g}" + (" (Lightning warned)" if row.plain_lightning_warned else " (silent)")
        exact = f"{row.exact:.3g}" + (" (Lightning's warning shown)" if row.adapter_lightning_warned else "")
        said = "; ".join(message.split("\n")[0][:120] for message in row.messages) or "none"
        if row.every_fit:
            said += " (every fit: " + "; ".join(" ".join(m.split("\n")[:2]) for m in row.every_fit) + ")"
        print(
            f"| {row.case.project} | {row.case.distribution} | {row.case.model} | `{row.case.loader}` | {row.batches} | {row.at_step} | {plain} | {exact} | {said} | {row.check} |"
        )
        failed |= row.exact != 0.0 and not row.messages
        failed |= "differs" in row.check
        failed |= row.same_uninterrupted != 0.0
        if row.same_uninterrupted != 0.0:
            print(
                f"  {row.case.model}: the adapter's uninterrupted fit differs from plain Lightning's by {row.same_uninterrupted:.3g}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
