"""neuralforecast's models, fitted through ``NeuralForecast(...).fit(df)``, resumed inside an epoch.

    python conformance/real_resume_more.py [--model NHITS|MLP|LSTM] [--same-process]

A companion to ``conformance/real_resume.py`` (which fits neuralforecast's models through ``model.fit(dataset)``):
here every fit goes through the project's user-facing entry point, ``NeuralForecast(models=[...],
freq=1).fit(df)``, on a tiny synthetic panel (8 series of 40 steps) on CPU: 4 batches of 2 series an
epoch, ``max_steps=8`` (2 epochs), fixed seeds (the model's ``random_seed``; neuralforecast reseeds in
``BaseModel.__init__``, ``_fit`` and ``on_fit_start`` and draws its windows in ``training_step``). The
training loader is neuralforecast's own: ``TimeSeriesDataModule.train_dataloader`` builds a
``TimeSeriesLoader``, a plain ``torch.utils.data.DataLoader`` subclass with ``shuffle=True`` and no
generator (the file and line are printed from the installed source).

Callbacks reach the project's Trainer the way neuralforecast documents: extra keyword arguments of the
model go to ``pl.Trainer`` (``callbacks=[...]``, ``enable_checkpointing=True``). Per mode (plain
Lightning, then ``StepResultAdapter()`` in every Trainer) the script runs the fit uninterrupted, the
same fit interrupted by an exception raised after global step 6 (epoch 1, batch 1 of 0..3;
``OnExceptionCheckpoint`` saves), then a fresh ``NeuralForecast`` resumed from that checkpoint, and
compares the resumed model's final ``state_dict()`` with the uninterrupted one's (max |difference|).

neuralforecast has no resume API: ``NeuralForecast.fit`` and ``BaseModel._fit`` take no checkpoint.
The resume runs the project's whole ``NeuralForecast.fit(df)`` unchanged and only adds
``ckpt_path=`` (and ``weights_only=False``: the checkpoint's hyperparameters hold neuralforecast's
loss objects) to the one ``pl.Trainer.fit`` call ``BaseModel._fit`` makes (``_fit`` below).

Each fit runs in a process of its own, as a relaunched job does (``--same-process``: all in this one).
Exit status 1 where the adapter's resume differs without a ``StepResultWarning``, where the adapter
gives a ``StepResultWarning`` on an exact resume, or where the adapter changes the uninterrupted fit.
Needs neuralforecast 3.3.0 installed beside this package, keeping torch (conformance/README.md);
skipped (exit 0) where it is not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import logging
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

SERIES, LENGTH, BATCH, EPOCHS = 8, 40, 2, 2
BATCHES = SERIES // BATCH  # the training loader's batches an epoch: one series each sample
MAX_STEPS = EPOCHS * BATCHES
AT_STEP = BATCHES + BATCHES // 2  # the interruption: after this global step, inside epoch 1
MODELS = ("NHITS", "MLP", "LSTM")

TRAINER = dict(
    accelerator="cpu",
    devices=1,
    deterministic=True,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    enable_checkpointing=True,  # neuralforecast's default is False, which refuses OnExceptionCheckpoint
)


class Stop(RuntimeError):
    """The interruption: raised after global step ``AT_STEP``."""


def frame() -> Any:
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = [
        {"unique_id": f"s{series}", "ds": t, "y": float(np.sin(t / 3 + series) + rng.normal() * 0.1)}
        for series in range(SERIES)
        for t in range(LENGTH)
    ]
    return pd.DataFrame(rows)


def model(name: str, callbacks: list[Any], root: Path) -> Any:
    import neuralforecast.models as nm

    common: dict[str, Any] = dict(
        h=2, input_size=8, max_steps=MAX_STEPS, batch_size=BATCH, windows_batch_size=8, random_seed=1
    )
    kwargs = {**common, **TRAINER, "default_root_dir": str(root), "callbacks": callbacks}
    if name == "NHITS":
        return nm.NHITS(mlp_units=[[16, 16]] * 3, n_pool_kernel_size=[2, 1, 1], **kwargs)
    if name == "MLP":
        return nm.MLP(num_layers=2, hidden_size=16, **kwargs)
    return nm.LSTM(encoder_hidden_size=8, decoder_hidden_size=8, encoder_n_layers=1, **kwargs)


def loader_line() -> str:
    """``neuralforecast/tsdataset.py:LINE`` where ``TimeSeriesDataModule.train_dataloader`` builds its loader."""
    from neuralforecast.tsdataset import TimeSeriesDataModule, TimeSeriesLoader

    lines, start = inspect.getsourcelines(TimeSeriesDataModule.train_dataloader)
    line = next(start + i for i, text in enumerate(lines) if "TimeSeriesLoader(" in text)
    base = TimeSeriesLoader.__mro__[1]
    assert base is torch.utils.data.DataLoader, base
    return f"neuralforecast/tsdataset.py:{line}"


@contextlib.contextmanager
def resumed_from(ckpt: Path | None) -> Iterator[None]:
    """``pl.Trainer.fit`` given ``ckpt_path=ckpt`` while the project's own fit runs (see the module's doc)."""
    if ckpt is None:
        yield
        return
    original = pl.Trainer.fit

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        assert "ckpt_path" not in kwargs, kwargs
        return original(self, *args, ckpt_path=str(ckpt), weights_only=False, **kwargs)

    pl.Trainer.fit = fit  # type: ignore[method-assign]
    try:
        yield
    finally:
        pl.Trainer.fit = original  # type: ignore[method-assign]


class Interrupt(pl.Callback):
    """Raises ``Stop`` after global step ``AT_STEP``. At module level: neuralforecast keeps the model's
    ``callbacks`` in its hyperparameters when they pickle, and so in each checkpoint."""

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == AT_STEP:
            raise Stop(f"interrupted after global step {AT_STEP}")


class LastStep(pl.Callback):
    """Notes the global step the fit ended at (neuralforecast drops the model's Trainer after the fit)."""

    def __init__(self) -> None:
        self.global_step = -1

    def on_train_end(self, trainer: Any, *args: Any) -> None:
        self.global_step = trainer.global_step


def batches_per_epoch() -> int:
    """The length of the training loader neuralforecast builds for ``frame()``."""
    from neuralforecast.tsdataset import TimeSeriesDataModule, TimeSeriesDataset

    dataset, *_ = TimeSeriesDataset.from_df(frame())
    return len(TimeSeriesDataModule(dataset=dataset, batch_size=BATCH).train_dataloader())


@dataclass
class Outcome:
    state: dict[str, torch.Tensor]
    global_step: int
    messages: list[str]  # StepResultWarning messages
    lightning_warned: bool  # Lightning's "your dataloader is not resumable" (neuralforecast filters it)


def one_fit(name: str, with_adapter: bool, kind: str, folder: Path) -> Outcome:
    """One fit through ``NeuralForecast.fit``: ``kind`` is uninterrupted, interrupted or resumed."""
    from neuralforecast import NeuralForecast

    from lightning_step_types.errors import StepResultWarning
    from lightning_step_types.pytorch_lightning import StepResultAdapter

    callbacks: list[Any] = [StepResultAdapter(), LastStep()] if with_adapter else [LastStep()]
    ckpt = folder / "interrupted.ckpt"
    if kind == "interrupted":
        callbacks += [Interrupt(), pl.callbacks.OnExceptionCheckpoint(dirpath=str(folder), filename="interrupted")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nf = NeuralForecast(models=[model(name, callbacks, folder)], freq=1)
        with resumed_from(ckpt if kind == "resumed" else None):
            try:
                nf.fit(df=frame())
            except Stop:
                assert kind == "interrupted"
            else:
                assert kind != "interrupted", f"{name}: not interrupted at step {AT_STEP}"
    fitted = nf.models[0]
    (last,) = [c for c in fitted.trainer_kwargs["callbacks"] if isinstance(c, LastStep)]  # NeuralForecast's copy
    step = last.global_step
    assert kind == "interrupted" or step == MAX_STEPS, (name, kind, step)
    state = {k: v.detach().clone() for k, v in fitted.state_dict().items()}
    messages = [str(w.message) for w in caught if issubclass(w.category, StepResultWarning)]
    lightning_warned = any("dataloader is not resumable" in str(w.message) for w in caught)
    return Outcome(state, step, messages, lightning_warned)


FRESH = True


def fit(name: str, with_adapter: bool, kind: str, folder: Path) -> Outcome:
    folder.mkdir(parents=True, exist_ok=True)
    if not FRESH:
        return one_fit(name, with_adapter, kind, folder)
    out = folder / f"{kind}.pt"
    subprocess.run(
        [sys.executable, __file__, "--fit", name, str(int(with_adapter)), kind, str(folder), str(out)], check=True
    )
    return Outcome(**torch.load(out, weights_only=False))


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    worst = 0.0
    for key, value in a.items():
        if value.is_floating_point():
            if value.numel():
                worst = max(worst, (value.double() - b[key].double()).abs().max().item())
        elif not torch.equal(value, b[key]):
            worst = float("inf")
    return worst


@dataclass
class Row:
    model: str
    plain: float
    plain_lightning_warned: bool
    exact: float
    messages: list[str]  # the interrupted and resumed fits' StepResultWarnings the uninterrupted fit did not give
    every_fit: list[str]  # those the uninterrupted fit gave as well
    same_uninterrupted: float  # the adapter's uninterrupted fit against plain Lightning's


def measure(name: str, root: Path) -> Row:
    results: dict[bool, tuple[Outcome, Outcome, list[str], bool]] = {}
    for with_adapter in (False, True):
        mode = root / ("adapter" if with_adapter else "plain")
        reference = fit(name, with_adapter, "uninterrupted", mode / "uninterrupted")
        interrupted = fit(name, with_adapter, "interrupted", mode / "resumed")
        resumed = fit(name, with_adapter, "resumed", mode / "resumed")
        messages = [m for m in dict.fromkeys(interrupted.messages + resumed.messages) if m not in reference.messages]
        warned = interrupted.lightning_warned or resumed.lightning_warned
        results[with_adapter] = (reference, resumed, messages, warned)
    plain_reference, plain_resumed, _, plain_warned = results[False]
    reference, resumed, messages, _ = results[True]
    return Row(
        name,
        max_difference(plain_reference.state, plain_resumed.state),
        plain_warned,
        max_difference(reference.state, resumed.state),
        messages,
        list(dict.fromkeys(reference.messages)),
        max_difference(plain_reference.state, reference.state),
    )


def quiet() -> None:
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "neuralforecast"):
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(1)


def main(argv: list[str] | None = None) -> int:
    global FRESH
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", action="append", choices=MODELS)
    parser.add_argument("--same-process", action="store_true", help="every fit in this process (faster)")
    parser.add_argument("--fit", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quiet()
    if args.fit:
        name, with_adapter, kind, folder, out = args.fit
        torch.save(vars(one_fit(name, with_adapter == "1", kind, Path(folder))), out)
        return 0
    FRESH = not args.same_process
    try:
        import neuralforecast
    except ImportError as error:
        print(f"neuralforecast: not installed ({error}); skipped", file=sys.stderr)
        return 0
    version, loader = neuralforecast.__version__, loader_line()
    assert batches_per_epoch() == BATCHES, batches_per_epoch()
    root = Path(tempfile.mkdtemp(prefix="real_resume_more-"))
    rows: list[Row] = []
    try:
        for name in args.model or MODELS:
            rows.append(measure(name, root / name))
            print(f"measured neuralforecast {name}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        "| project | version | model | the project's training loader | batches/epoch | interrupted after step | plain max abs diff | adapter max abs diff | StepResultWarning at the resume |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    for row in rows:
        plain = f"{row.plain:.3g}" + (
            " (Lightning's warning, filtered by neuralforecast)" if row.plain_lightning_warned else " (silent)"
        )
        said = "; ".join(" ".join(m.split())[:160] for m in row.messages) or "none"
        if row.every_fit:
            said += " (every fit: " + "; ".join(" ".join(m.split())[:160] for m in row.every_fit) + ")"
        print(
            f"| neuralforecast | {version} | {row.model} via NeuralForecast.fit | `{loader}` | {BATCHES} | {AT_STEP} | {plain} | {row.exact:.3g} | {said} |"
        )
        failed |= row.exact != 0.0 and not row.messages
        failed |= row.exact == 0.0 and bool(row.messages)
        if row.same_uninterrupted != 0.0:
            failed = True
            print(
                f"  {row.model}: the adapter's uninterrupted fit differs from plain Lightning's by {row.same_uninterrupted:.3g}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
