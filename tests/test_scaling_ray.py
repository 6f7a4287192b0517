"""docs/scaling.md's Ray Train recipe, ``examples/scaling/ray_train.py``, run as written: TorchTrainer with
RayDDPStrategy on two CPU workers, a callback reporting each mid-epoch checkpoint,
``FailureConfig(max_failures=1)``; rank 1 raises in epoch 1, batch 5, and Ray restarts both workers from the
last checkpoint reported. The resumed run against the uninterrupted one, bit for bit.

Skipped where Ray is absent: CI runs it in a fresh venv of its own (``pip install -e ".[test,ray]"``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("ray.train.lightning")

import scaling  # noqa: E402
from launching import TESTS, launch  # noqa: E402
from test_docs import DOCS, fenced_blocks  # noqa: E402
from test_scaling import LIMIT, assert_ok  # noqa: E402
from test_scaling_recipes import PLAIN, example_resumed_exactly, plain_figures  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "scaling" / "ray_train.py"
FAULT = {"kind": "raise", "ranks": [1], "epoch": 1, "batch": 5}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run on 2 DDP processes (Lightning's launcher): Ray's workers draw the same batches."""
    root = tmp_path_factory.mktemp("reference")
    assert_ok(launch(root, [{"root": str(root / "ddp"), "sampler": "stateful"}], limit=LIMIT))
    return root / "ddp"


def test_the_guide_shows_the_ray_script_whole() -> None:
    (block,) = [
        b.code for b in fenced_blocks(DOCS / "scaling.md") if b.marker == "example: examples/scaling/ray_train.py"
    ]
    assert block + "\n" == EXAMPLE.read_text()


def test_ray_train_restarts_from_a_mid_epoch_checkpoint(tmp_path: Path, reference: Path) -> None:
    job = launch(tmp_path, [], limit=LIMIT, script=EXAMPLE, arguments=["--fault"])
    assert job.returncode == 0, job.output[-6000:]
    assert "simulated fault on rank 1" in job.output
    assert sorted(path.name for path in (tmp_path / "csv").iterdir()) == ["version_0", "version_1"]
    # resumed from step 20's checkpoint, saved in that batch's on_train_batch_end: its row (step 19) first
    assert scaling.rows(tmp_path, 1)[0]["step"] == "19"
    example_resumed_exactly(tmp_path, reference, version=1)


# Plain Lightning on Ray ends as under torchrun (test_scaling_recipes.PLAIN: the weights right, epoch 1's
# values not): the recipe's callback and settings with tests/scaling.py's plain module. 90 s more, left out
# of CI's time: LIGHTNING_STEP_TYPES_RAY_PLAIN=1 runs it.
@pytest.mark.skipif(
    not os.environ.get("LIGHTNING_STEP_TYPES_RAY_PLAIN"), reason="90 s; set LIGHTNING_STEP_TYPES_RAY_PLAIN=1"
)
def test_plain_lightning_on_ray_keeps_the_weights_not_the_epoch_values(tmp_path: Path, reference: Path) -> None:
    run = {"root": str(tmp_path), "module": "plain", "sampler": "stateful", "fault": FAULT}
    job = launch(
        tmp_path / "driver",
        [run],
        limit=LIMIT,
        script=TESTS / "scaling_ray.py",
        env={"PYTHONPATH": os.pathsep.join([str(TESTS), str(EXAMPLE.parent)])},
    )
    assert job.returncode == 0, job.output[-6000:]
    assert "simulated fault on rank 1" in job.output
    assert plain_figures(tmp_path, reference, 1) == PLAIN
