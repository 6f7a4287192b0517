"""``benchmarks/gpu_check.py`` in its reduced CPU mode: it runs, writes its report, and resumes exactly.

The script is what a lent GPU machine runs; here its ``--cpu-smoke`` mode (tiny images and net, a
few steps) runs as a user would start it, and the report's structure and its resume checks are
asserted, so the script cannot rot between the GPU runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmark_scripts import run_benchmark

VARIANTS = [
    "plain: return loss",
    "typed: TrainStepResult(loss), nonfinite_loss='raise'",
    "typed: TrainStepResult(loss), nonfinite_loss=None",
    "StepResultAdapter() on the plain module",
]
EPOCH_VALUES = ["train_acc", "train_loss", "train_loss_epoch", "train_max"]


def test_gpu_check_cpu_smoke_reports_every_figure_and_resumes_exactly(tmp_path: Path) -> None:
    out = tmp_path / "report" / "smoke.json"
    run_benchmark("gpu_check.py", "--cpu-smoke", "--out", str(out), idle_s=75)
    report = json.loads(out.read_text())
    assert list(report) == ["environment", "step_overhead", "host_sync", "bf16_mixed", "resume", "fsdp_resume"]
    # strategy="fsdp" needs CUDA: on a lent GPU the same resume check runs under it
    assert report["fsdp_resume"] == {"skipped": "Lightning's strategy='fsdp' needs CUDA"}
    assert report["environment"]["mode"] == "cpu-smoke"
    assert report["environment"]["device"] == "cpu"
    assert report["environment"]["settings"]["image_size"] == 32

    for key, precision in (("step_overhead", "32-true"), ("bf16_mixed", "bf16-mixed")):
        table = report[key]
        assert table["precision"] == precision
        assert list(table["variants"]) == VARIANTS
        for row in table["variants"].values():
            assert row["ms_per_step"] > 0
            assert len(row["ms_per_step_per_fit"]) == 1
        assert table["variants"]["plain: return loss"]["ratio_to_plain"] == 1.0

    sync = report["host_sync"]
    assert sorted(sync) == ["cost_fraction", "cost_ms", "ms_per_step_with_item", "ms_per_step_without_sync"]
    assert sync["ms_per_step_without_sync"] > 0 and sync["ms_per_step_with_item"] > 0

    resume = report["resume"]
    assert list(resume) == ["typed module", "StepResultAdapter()", "plain Lightning", "typed module, bf16-mixed"]
    for name, row in resume.items():
        assert row["checkpoint_after_step"] == 3 and row["steps_in_epoch"] == 6
        assert sorted(row["uninterrupted"]) == EPOCH_VALUES
        assert row["weights_equal"] is True, name  # StatefulDataLoader: the same batches, the same weights
    for name in ("typed module", "StepResultAdapter()", "typed module, bf16-mixed"):
        assert resume[name]["epoch_values_equal"] is True, name
        assert resume[name]["resumed"] == resume[name]["uninterrupted"], name
    # plain Lightning restarts its epoch aggregates at the resume: the contrast the check is there to show
    assert resume["plain Lightning"]["epoch_values_equal"] is False
    assert (
        resume["plain Lightning"]["resumed"]["train_loss_epoch"]
        != resume["plain Lightning"]["uninterrupted"]["train_loss_epoch"]
    )

    md = out.with_suffix(".md").read_text()
    assert md.startswith("# gpu_check (cpu-smoke)\n")
    for heading in (
        "## Step overhead, 32-true",
        "## Host synchronisation",
        "## Step overhead, bf16-mixed",
        "## Exact resume",
        '## Exact resume under strategy="fsdp"',
    ):
        assert heading in md
    assert "| typed module | True | True |" in md
    assert "| plain Lightning | True | False |" in md
