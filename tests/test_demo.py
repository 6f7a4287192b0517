"""The demo (``python -m lightning_step_types.demo``): its files, its metrics, its command line.

The demo runs a real Trainer with a CSVLogger, a ModelCheckpoint and the progress bar; these
tests check what it writes (every CSV row, the best checkpoint) against what it reports, and
recompute the reported test metrics from the reloaded checkpoint.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from limits import hang_limit

from lightning_step_types import demo
from lightning_step_types.demo import MoonsClassifier

REPO_ROOT = Path(__file__).resolve().parent.parent
STEPS_PER_EPOCH = demo.TRAIN_SIZE // demo.TRAIN_BATCH_SIZE
COLUMNS = ["epoch", "step", "test_acc", "test_loss", "train_loss_epoch", "train_loss_step", "val_acc", "val_loss"]
EPOCHS = 2


def expected_rows(epochs: int) -> list[tuple[int, int, set[str]]]:
    """(epoch, step, filled columns) of every metrics.csv row, in order, for a run of ``epochs``."""
    rows: list[tuple[int, int, set[str]]] = []
    for epoch in range(epochs):
        first = epoch * STEPS_PER_EPOCH
        for step in range(first + demo.LOG_EVERY_N_STEPS - 1, first + STEPS_PER_EPOCH, demo.LOG_EVERY_N_STEPS):
            rows.append((epoch, step, {"train_loss_step"}))
        last = first + STEPS_PER_EPOCH - 1
        rows.append((epoch, last, {"val_acc", "val_loss"}))  # validation runs before the training epoch ends
        rows.append((epoch, last, {"train_loss_epoch"}))
    rows.append((epochs, epochs * STEPS_PER_EPOCH, {"test_acc", "test_loss"}))
    return rows


def read_metrics(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[demo.DemoResult, str, Path]:
    """One demo run shared by the tests below: (returned dict, printed summary, output dir)."""
    output_dir = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()  # capsys is per test; this run is per module
    with contextlib.redirect_stdout(printed):
        result = demo.main(["--output-dir", str(output_dir), "--max-epochs", str(EPOCHS)])
    return result, summary_of(printed.getvalue()), output_dir


def summary_of(stdout: str) -> str:
    """The closing summary, without the progress bar that precedes it on stdout."""
    start = stdout.rfind("Trained and tested in ")
    assert start >= 0, stdout[-2000:]
    return stdout[start:]


def test_metrics_csv_has_one_row_per_logged_step_and_epoch(demo_run: tuple[demo.DemoResult, str, Path]) -> None:
    result, _, output_dir = demo_run
    assert result["log_dir"] == output_dir / "demo" / "version_0"
    assert result["metrics_csv"] == result["log_dir"] / "metrics.csv"
    columns, rows = read_metrics(result["metrics_csv"])
    assert columns == COLUMNS

    seen = [(int(row["epoch"]), int(row["step"]), {name for name in COLUMNS[2:] if row[name] != ""}) for row in rows]
    assert seen == expected_rows(EPOCHS)
    for row in rows:
        for name in COLUMNS[2:]:
            if row[name] != "":
                assert float(row[name]) >= 0.0
    accuracies = [float(row[name]) for row in rows for name in ("val_acc", "test_acc") if row[name] != ""]
    assert all(0.0 <= acc <= 1.0 for acc in accuracies)


def test_reported_validation_metrics_are_the_last_logged_ones(demo_run: tuple[demo.DemoResult, str, Path]) -> None:
    result, _, _ = demo_run
    _, rows = read_metrics(result["metrics_csv"])
    val_rows = [row for row in rows if row["val_loss"] != ""]
    assert len(val_rows) == EPOCHS
    assert result["val_metrics"] == {
        "val_acc": float(val_rows[-1]["val_acc"]),
        "val_loss": float(val_rows[-1]["val_loss"]),
    }
    # The model learns: validation loss falls from the first epoch to the last.
    assert float(val_rows[-1]["val_loss"]) < float(val_rows[0]["val_loss"])


def test_best_checkpoint_is_the_lowest_val_loss_and_reloads(demo_run: tuple[demo.DemoResult, str, Path]) -> None:
    result, _, _ = demo_run
    _, rows = read_metrics(result["metrics_csv"])
    val_rows = [row for row in rows if row["val_loss"] != ""]
    best = min(val_rows, key=lambda row: float(row["val_loss"]))

    path = result["best_checkpoint"]
    assert path.is_file()
    assert path.parent == result["log_dir"] / "checkpoints"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # save_top_k=1
    assert path.name == f"best-epoch={int(best['epoch']):02d}-val_loss={float(best['val_loss']):.4f}.ckpt"
    assert result["best_val_loss"] == pytest.approx(float(best["val_loss"]), rel=1e-6)

    model = MoonsClassifier.load_from_checkpoint(path)
    assert isinstance(model, MoonsClassifier)
    assert dict(model.hparams) == {"hidden": 32, "lr": 0.01}
    state = torch.load(path, weights_only=True)["state_dict"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_test_metrics_and_confusion_matrix_come_from_the_best_checkpoint(
    demo_run: tuple[demo.DemoResult, str, Path],
) -> None:
    result, _, _ = demo_run
    model = MoonsClassifier.load_from_checkpoint(result["best_checkpoint"])
    model.eval()
    _, _, test_loader = demo._dataloaders(demo.SEED)
    points = torch.cat([batch[0] for batch in test_loader])
    labels = torch.cat([batch[1] for batch in test_loader])
    with torch.no_grad():
        logits = model(points)
    preds = logits.argmax(dim=1)

    expected_confusion = [[int(((labels == t) & (preds == p)).sum()) for p in range(2)] for t in range(2)]
    assert result["confusion_matrix"] == expected_confusion
    assert sum(map(sum, expected_confusion)) == demo.TEST_SIZE
    assert result["test_metrics"]["test_acc"] == pytest.approx(float((preds == labels).float().mean()), abs=1e-6)
    # test_loss is the batch-size-weighted mean of per-batch losses: the mean over all test points.
    loss = float(torch.nn.functional.cross_entropy(logits, labels))
    assert result["test_metrics"]["test_loss"] == pytest.approx(loss, rel=1e-5)
    assert sorted(result["test_metrics"]) == ["test_acc", "test_loss"]

    _, rows = read_metrics(result["metrics_csv"])
    assert float(rows[-1]["test_acc"]) == result["test_metrics"]["test_acc"]


def test_printed_summary_names_the_outputs(demo_run: tuple[demo.DemoResult, str, Path]) -> None:
    result, printed, _ = demo_run
    lines = printed.strip().splitlines()
    assert lines[0].startswith("Trained and tested in ") and lines[0].endswith(" s. Outputs:")
    assert lines[1] == f"  metrics (CSV):       {result['metrics_csv']}"
    assert lines[2] == (f"  best checkpoint:     {result['best_checkpoint']}  (val_loss={result['best_val_loss']:.4f})")
    val = result["val_metrics"]
    assert lines[3] == f"  last validation:     val_acc={val['val_acc']:.4f}  val_loss={val['val_loss']:.4f}"
    test = result["test_metrics"]
    assert lines[4] == f"  test (best ckpt):    test_acc={test['test_acc']:.4f}  test_loss={test['test_loss']:.4f}"
    assert lines[5] == (f"  test confusion matrix (rows: true class, columns: predicted): {result['confusion_matrix']}")
    # It ends with one line on what to read next, naming files that exist.
    assert lines[6:] == [
        "Next: read this run's source, lightning_step_types/demo.py, then docs/quickstart.md to type your own module."
    ]
    repo = Path(__file__).resolve().parents[1]
    assert (repo / "lightning_step_types" / "demo.py").is_file() and (repo / "docs" / "quickstart.md").is_file()


def test_a_second_run_writes_a_new_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    threads = torch.get_num_threads()
    first = demo.main(["--output-dir", str(tmp_path), "--max-epochs", "1"])
    second = demo.main(["--output-dir", str(tmp_path), "--max-epochs", "1"])
    assert torch.get_num_threads() == threads  # the demo trains on one thread and restores the setting
    assert first["log_dir"] == tmp_path / "demo" / "version_0"
    assert second["log_dir"] == tmp_path / "demo" / "version_1"
    assert first["metrics_csv"].is_file() and second["metrics_csv"].is_file()
    assert first["best_checkpoint"].is_file() and second["best_checkpoint"].is_file()
    # Same seed, same data: the two runs log the same values.
    assert read_metrics(first["metrics_csv"]) == read_metrics(second["metrics_csv"])
    assert first["test_metrics"] == second["test_metrics"]
    capsys.readouterr()


def test_rejects_a_non_positive_epoch_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--max-epochs", "0"])
    assert exit_info.value.code == 2
    assert "error: --max-epochs must be at least 1" in capsys.readouterr().err


def test_command_line_run_from_another_directory(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-m", "lightning_step_types.demo", "--output-dir", "out", "--max-epochs", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=hang_limit(idle_s=30),  # about 15 s on an idle machine, imports included
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    # Not a terminal: one line per epoch in place of the progress bar's redraws (about 11 KB an epoch).
    (epoch_line,) = [line for line in completed.stdout.splitlines() if line.startswith("epoch ")]
    assert re.fullmatch(r"epoch 1/1  train_loss=0\.\d{4}  val_loss=0\.\d{4}  val_acc=0\.\d{4}", epoch_line), epoch_line
    assert len(completed.stdout) + len(completed.stderr) < 4000, completed.stdout + completed.stderr
    csv_match = re.search(r"^  metrics \(CSV\): +(\S.*)$", completed.stdout, re.MULTILINE)
    ckpt_match = re.search(r"^  best checkpoint: +(\S.*?\.ckpt)  \(val_loss=", completed.stdout, re.MULTILINE)
    assert csv_match is not None and ckpt_match is not None, completed.stdout[-3000:]
    metrics_csv, checkpoint = Path(csv_match.group(1)), Path(ckpt_match.group(1))
    # A relative --output-dir is resolved against the working directory.
    assert metrics_csv == tmp_path / "out" / "demo" / "version_0" / "metrics.csv"
    assert checkpoint.parent == tmp_path / "out" / "demo" / "version_0" / "checkpoints"
    assert metrics_csv.is_file() and checkpoint.is_file()
    _, rows = read_metrics(metrics_csv)
    assert [(int(row["epoch"]), int(row["step"])) for row in rows] == [(e, s) for e, s, _ in expected_rows(1)]
