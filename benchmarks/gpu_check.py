"""The GPU story, measured in one run: what typed step results cost on a step of realistic size.

Run on a machine with a CUDA device (about 3-5 minutes on one H200)::

    python benchmarks/gpu_check.py --out gpu_check.json    # also writes gpu_check.md

or anywhere, in a reduced mode (tiny images and net, a few steps, CPU; about 30 s)::

    python benchmarks/gpu_check.py --cpu-smoke --out smoke.json

It measures, on a ResNet-18-like net built from ``torch.nn`` (224-pixel batches of 64):

1. **Step overhead**: plain Lightning returning the loss, a ``TypedLightningModule`` returning
   ``TrainStepResult(loss)`` with ``nonfinite_loss="raise"`` (the default) and with
   ``nonfinite_loss=None``, and ``StepResultAdapter()`` on the plain module. Fits take turns in a
   rotating order; a fit's figure is the time of its steps after a warm-up, between two
   ``torch.cuda.synchronize()`` calls; each ratio is the median of the repetitions' own ratios to
   plain Lightning.
2. **The host synchronisation**: the same net trained by a bare torch loop, with and without a
   ``loss.item()`` per step (what the non-finite check adds: the host waits for the step's kernels
   instead of queueing the next step's).
3. **bf16-mixed**: table 1 again under ``precision="bf16-mixed"``.
4. **Exact resume**: a fit of one epoch that saves a checkpoint mid-epoch, then a fresh fit resumed
   from it (``StatefulDataLoader``, shuffled); the resumed run's weights and buffers and its epoch
   values (``self.log(..., on_epoch=True)`` and a logged torchmetrics metric) against the
   uninterrupted run's, bit for bit, for the typed module, the adapter, plain Lightning (whose epoch
   values restart at the resume), and the typed module under bf16-mixed. Deterministic cuDNN and
   ``torch.use_deterministic_algorithms`` are on for this part only.
5. **Exact resume under FSDP**: part 4's check with ``strategy="fsdp"`` (one device), for the typed
   module and plain Lightning. Lightning's FSDP needs CUDA: the CPU smoke run reports it as skipped
   (on CPU, FSDP2 runs under ``ModelParallelStrategy``, tested by tests/test_scaling_recipes.py).

Figures go to ``--out`` as JSON and, beside it, as Markdown (same name, ``.md``). Nothing beyond
the package's ``test`` extra is needed.
"""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torchmetrics  # noqa: E402
from pytorch_lightning.callbacks import ModelCheckpoint  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from lightning_step_types import StepResultAdapter, TrainStepResult, TypedLightningModule  # noqa: E402

NUM_CLASSES = 10


@dataclass(frozen=True)
class Settings:
    device: str
    image_size: int
    width: int  # channels of the first stage (64 in ResNet-18)
    batch_size: int
    steps: int  # per timed fit
    warmup: int  # steps not timed
    repeats: int
    resume_batches: int  # one epoch of the resume check
    resume_batch_size: int
    resume_image_size: int
    checkpoint_step: int


FULL = Settings("cuda", 224, 64, 64, 60, 15, 5, 12, 16, 224, 5)
SMOKE = Settings("cpu", 32, 8, 4, 8, 3, 1, 6, 4, 32, 3)


# --- the net: ResNet-18's layout from torch.nn ------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, channels_in: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def resnet18_like(width: int) -> nn.Module:
    """ResNet-18's stages (two basic blocks each, widths w, 2w, 4w, 8w). The stem's max-pool is a
    stride-2 convolution and the head's pooling a mean, whose CUDA backward passes are deterministic
    (the resume check compares bit for bit)."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 7, 2, 3, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.Conv2d(width, width, 3, 2, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
    ]
    channels = width
    for stage, stride in enumerate((1, 2, 2, 2)):
        out = width * 2**stage
        layers += [BasicBlock(channels, out, stride), BasicBlock(out, out, 1)]
        channels = out
    return nn.Sequential(*layers, nn.Flatten(2), _Mean(), nn.Linear(channels, NUM_CLASSES))


class _Mean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=2)


# --- the modules ---------------------------------------------------------------------------------


class NetParts:
    """The same seeded net and SGD for every variant (a mixin before the Lightning base)."""

    width = 64
    log_epoch_values = False

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = resnet18_like(self.width)
        if self.log_epoch_values:
            self.acc = torchmetrics.classification.MulticlassAccuracy(num_classes=NUM_CLASSES)

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        logits = self.net(x)
        loss = F.cross_entropy(logits, y)
        if self.log_epoch_values:
            log: Any = getattr(self, "log")
            log("train_loss", loss, on_step=True, on_epoch=True)
            log("train_max", loss, on_step=False, on_epoch=True, reduce_fx="max")
            self.acc(logits, y)
            log("train_acc", self.acc, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)


class PlainNet(NetParts, pl.LightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)


class TypedNet(NetParts, TypedLightningModule):
    def training_step(self, batch: Any, batch_idx: int) -> TrainStepResult:
        return TrainStepResult(loss=self.loss(batch))


class TypedNetUnchecked(TypedNet):
    nonfinite_loss = None


def module_class(base: type[NetParts], width: int, log_epoch_values: bool = False) -> type[pl.LightningModule]:
    return type(base.__name__, (base,), {"width": width, "log_epoch_values": log_epoch_values})  # type: ignore[return-value]


# --- data ----------------------------------------------------------------------------------------


class Batches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``steps`` batches drawn from a few fixed ones (building 60 batches of 224-pixel images would
    take longer than training on them)."""

    def __init__(self, settings: Settings, steps: int) -> None:
        generator = torch.Generator().manual_seed(0)
        shape = (settings.batch_size, 3, settings.image_size, settings.image_size)
        self.batches = [
            (
                torch.randn(shape, generator=generator),
                torch.randint(0, NUM_CLASSES, (settings.batch_size,), generator=generator),
            )
            for _ in range(4)
        ]
        if (
            settings.device == "cuda"
        ):  # pinned once: each step's copy to the device is asynchronous, as from a pinning loader
            self.batches = [(x.pin_memory(), y.pin_memory()) for x, y in self.batches]
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[index % len(self.batches)]


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class StepWindow(pl.Callback):
    """The time from the start of step ``warmup`` to the end of the last step, both synchronised."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.start = self.end = 0.0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == self.settings.warmup:
            synchronize(self.settings.device)
            self.start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if batch_idx == self.settings.steps - 1:
            synchronize(self.settings.device)
            self.end = time.perf_counter()

    def ms_per_step(self) -> float:
        return (self.end - self.start) * 1e3 / (self.settings.steps - self.settings.warmup)


def trainer(
    settings: Settings, root: Path, precision: str, callbacks: list[pl.Callback], **overrides: Any
) -> pl.Trainer:
    kwargs: dict[str, Any] = dict(
        accelerator=settings.device,
        devices=1,
        max_epochs=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(root),
        callbacks=callbacks,
    )
    kwargs.update(overrides)
    return pl.Trainer(**kwargs)


def release_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


# --- 1 and 3: the step overhead ------------------------------------------------------------------

PLAIN = "plain: return loss"
VARIANTS: dict[str, tuple[type[NetParts], bool]] = {  # name -> (module base, under StepResultAdapter())
    PLAIN: (PlainNet, False),
    "typed: TrainStepResult(loss), nonfinite_loss='raise'": (TypedNet, False),
    "typed: TrainStepResult(loss), nonfinite_loss=None": (TypedNetUnchecked, False),
    "StepResultAdapter() on the plain module": (PlainNet, True),
}


def step_overhead(settings: Settings, root: Path, precision: str) -> dict[str, Any]:
    data = Batches(settings, settings.steps)
    loader = DataLoader(data, batch_size=None, shuffle=False)
    names = list(VARIANTS)
    times: dict[str, list[float]] = {name: [] for name in names}

    def fit(name: str) -> float:
        base, adapter = VARIANTS[name]
        window = StepWindow(settings)
        callbacks: list[pl.Callback] = [window, StepResultAdapter()] if adapter else [window]
        model = module_class(base, settings.width)()
        trainer(settings, root, precision, callbacks).fit(model, loader)
        del model
        release_memory(settings.device)
        return window.ms_per_step()

    fit(PLAIN)  # not counted: warms up the allocator, cuDNN's algorithm choice and Lightning's imports
    for repeat in range(settings.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            times[name].append(fit(name))
    variants = {}
    for name in names:
        ratios = [t / p for t, p in zip(times[name], times[PLAIN])]
        variants[name] = {
            "ms_per_step": statistics.median(times[name]),
            "ratio_to_plain": statistics.median(ratios),
            "ms_per_step_per_fit": times[name],
        }
    return {"precision": precision, "variants": variants}


# --- 2: the host synchronisation -----------------------------------------------------------------


def host_sync(settings: Settings) -> dict[str, Any]:
    """A bare torch training loop on the device, with and without a ``loss.item()`` per step."""
    device = torch.device(settings.device)
    torch.manual_seed(0)
    net = resnet18_like(settings.width).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batches = [(x.to(device), y.to(device)) for x, y in Batches(settings, 4).batches]

    def run(read_loss: bool) -> float:
        for i in range(settings.warmup):
            step(batches[i % len(batches)], read_loss)
        synchronize(settings.device)
        start = time.perf_counter()
        timed = settings.steps - settings.warmup
        for i in range(timed):
            step(batches[i % len(batches)], read_loss)
        synchronize(settings.device)
        return (time.perf_counter() - start) * 1e3 / timed

    def step(batch: tuple[torch.Tensor, torch.Tensor], read_loss: bool) -> None:
        loss = F.cross_entropy(net(batch[0]), batch[1])
        if read_loss:
            loss.item()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    without: list[float] = []
    with_item: list[float] = []
    for _ in range(settings.repeats):
        without.append(run(False))
        with_item.append(run(True))
    del net, optimizer, batches
    release_memory(settings.device)
    a, b = statistics.median(without), statistics.median(with_item)
    return {"ms_per_step_without_sync": a, "ms_per_step_with_item": b, "cost_ms": b - a, "cost_fraction": (b - a) / a}


# --- 4: exact resume -----------------------------------------------------------------------------


def resume_loader(settings: Settings) -> StatefulDataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    n = settings.resume_batches * settings.resume_batch_size
    size = settings.resume_image_size
    x = torch.randn(n, 3, size, size, generator=generator)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=generator)
    return StatefulDataLoader(
        TensorDataset(x, y),
        batch_size=settings.resume_batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(2),
    )


def resume_fit(
    settings: Settings,
    root: Path,
    make: Callable[[], pl.LightningModule],
    adapter: bool,
    precision: str,
    ckpt: Path | None,
    **overrides: Any,
) -> tuple[pl.Trainer, pl.LightningModule]:
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(
            dirpath=root / "ckpt", every_n_train_steps=settings.checkpoint_step, save_top_k=-1, filename="{step}"
        )
    ]
    if adapter:
        callbacks.append(StepResultAdapter())
    fit_trainer = trainer(settings, root, precision, callbacks, enable_checkpointing=True, **overrides)
    module = make()
    fit_trainer.fit(module, resume_loader(settings), ckpt_path=ckpt)
    return fit_trainer, module


def exact_resume(
    settings: Settings, root: Path, base: type[NetParts], adapter: bool, precision: str, **overrides: Any
) -> dict[str, Any]:
    make = module_class(base, settings.width, log_epoch_values=True)
    full_trainer, full = resume_fit(settings, root / "full", make, adapter, precision, None, **overrides)
    ckpt = root / "full" / "ckpt" / f"step={settings.checkpoint_step}.ckpt"
    resumed_trainer, resumed = resume_fit(settings, root / "resumed", make, adapter, precision, ckpt, **overrides)
    full_state, resumed_state = full.state_dict(), resumed.state_dict()
    weights_equal = list(full_state) == list(resumed_state) and all(
        torch.equal(full_state[k], resumed_state[k]) for k in full_state
    )
    full_values = {
        k: v.detach().float().cpu() for k, v in full_trainer.callback_metrics.items() if k != "train_loss_step"
    }
    resumed_values = {
        k: v.detach().float().cpu() for k, v in resumed_trainer.callback_metrics.items() if k != "train_loss_step"
    }
    values_equal = sorted(full_values) == sorted(resumed_values) and all(
        torch.equal(full_values[k], resumed_values[k]) for k in full_values
    )
    del full, resumed
    release_memory(settings.device)
    return {
        "precision": precision,
        "checkpoint_after_step": settings.checkpoint_step,
        "steps_in_epoch": settings.resume_batches,
        "weights_equal": weights_equal,
        "epoch_values_equal": values_equal,
        "uninterrupted": {k: v.item() for k, v in sorted(full_values.items())},
        "resumed": {k: v.item() for k, v in sorted(resumed_values.items())},
    }


def resume_checks(settings: Settings, root: Path) -> dict[str, Any]:
    with deterministic_algorithms():
        return {
            "typed module": exact_resume(settings, root / "typed", TypedNet, False, "32-true"),
            "StepResultAdapter()": exact_resume(settings, root / "adapter", PlainNet, True, "32-true"),
            "plain Lightning": exact_resume(settings, root / "plain", PlainNet, False, "32-true"),
            "typed module, bf16-mixed": exact_resume(settings, root / "typed_bf16", TypedNet, False, "bf16-mixed"),
        }


FSDP_SKIPPED = "Lightning's strategy='fsdp' needs CUDA"


def fsdp_resume_checks(settings: Settings, root: Path) -> dict[str, Any]:
    """Part 4 under ``strategy="fsdp"`` on one device (full state-dict checkpoints)."""
    if settings.device != "cuda":
        return {"skipped": FSDP_SKIPPED}
    with deterministic_algorithms():
        return {
            "typed module": exact_resume(settings, root / "typed", TypedNet, False, "32-true", strategy="fsdp"),
            "plain Lightning": exact_resume(settings, root / "plain", PlainNet, False, "32-true", strategy="fsdp"),
        }


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    benchmark, deterministic = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = benchmark, deterministic


# --- the report ----------------------------------------------------------------------------------


def environment(settings: Settings, mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "torch": torch.__version__,
        "pytorch_lightning": pl.__version__,
        "device": torch.cuda.get_device_name() if settings.device == "cuda" else "cpu",
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "settings": asdict(settings),
    }


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    s = env["settings"]
    lines = [
        f"# gpu_check ({env['mode']})",
        "",
        f"torch {env['torch']}, pytorch-lightning {env['pytorch_lightning']}, {env['device']};"
        f" ResNet-18-like (width {s['width']}), batches of {s['batch_size']} at {s['image_size']} px,"
        f" {s['steps'] - s['warmup']} timed steps per fit after {s['warmup']}, {s['repeats']} fits per variant.",
        "",
    ]
    for key, title in (("step_overhead", "Step overhead, 32-true"), ("bf16_mixed", "Step overhead, bf16-mixed")):
        lines += [f"## {title}", "", "| variant | ms/step | ratio to plain |", "| --- | --- | --- |"]
        for name, row in report[key]["variants"].items():
            lines.append(f"| {name} | {row['ms_per_step']:.3f} | {row['ratio_to_plain']:.4f} |")
        lines.append("")
    sync = report["host_sync"]
    lines += [
        "## Host synchronisation (bare torch loop)",
        "",
        "| without `loss.item()` | with `loss.item()` per step | cost |",
        "| --- | --- | --- |",
        f"| {sync['ms_per_step_without_sync']:.3f} ms | {sync['ms_per_step_with_item']:.3f} ms |"
        f" {sync['cost_ms']:+.3f} ms ({sync['cost_fraction']:+.2%}) |",
        "",
        "## Exact resume (checkpoint mid-epoch, resumed with StatefulDataLoader)",
        "",
        "| run | weights and buffers equal | epoch values equal | uninterrupted | resumed |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += resume_rows(report["resume"])
    lines += ["", '## Exact resume under strategy="fsdp"', ""]
    if "skipped" in report["fsdp_resume"]:
        lines.append(f"Skipped: {report['fsdp_resume']['skipped']}.")
    else:
        lines += [
            "| run | weights and buffers equal | epoch values equal | uninterrupted | resumed |",
            "| --- | --- | --- | --- | --- |",
            *resume_rows(report["fsdp_resume"]),
        ]
    lines.append("")
    return "\n".join(lines)


def resume_rows(table: dict[str, Any]) -> list[str]:
    rows = []
    for name, row in table.items():
        full = ", ".join(f"{k} {v:.6g}" for k, v in row["uninterrupted"].items())
        resumed = ", ".join(f"{k} {v:.6g}" for k, v in row["resumed"].items())
        rows.append(f"| {name} | {row['weights_equal']} | {row['epoch_values_equal']} | {full} | {resumed} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, required=True, help="the JSON report; the Markdown one goes beside it (.md)"
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny images and net, a few steps, on CPU")
    args = parser.parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU machine, or pass --cpu-smoke for the reduced CPU run")
    settings = SMOKE if args.cpu_smoke else FULL
    warnings.filterwarnings("ignore")  # Lightning's advice about workers and log intervals
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if settings.device == "cpu":
        torch.set_num_threads(1)  # steadier on a shared machine; the smoke run's figures only show it works
    if settings.device == "cuda":
        torch.set_float32_matmul_precision("high")  # TF32, as real training on this GPU runs
        torch.backends.cudnn.benchmark = True

    started = time.perf_counter()
    seconds: dict[str, float] = {}

    def timed(part: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        start = time.perf_counter()
        result = run()
        seconds[part] = time.perf_counter() - start
        print(f"{part}: {seconds[part]:.1f} s", flush=True)
        return result

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        report: dict[str, Any] = {"environment": environment(settings, "cpu-smoke" if args.cpu_smoke else "full")}
        report["step_overhead"] = timed("step_overhead", lambda: step_overhead(settings, root / "overhead", "32-true"))
        report["host_sync"] = timed("host_sync", lambda: host_sync(settings))
        report["bf16_mixed"] = timed("bf16_mixed", lambda: step_overhead(settings, root / "bf16", "bf16-mixed"))
        report["resume"] = timed("resume", lambda: resume_checks(settings, root / "resume"))
        report["fsdp_resume"] = timed("fsdp_resume", lambda: fsdp_resume_checks(settings, root / "fsdp"))
    report["environment"]["seconds"] = {"total": time.perf_counter() - started, **seconds}

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
