"""docs/scaling.md's Ray Train recipe (tests/scaling_ray.py): TorchTrainer with RayDDPStrategy on two CPU
workers, a callback reporting each mid-epoch checkpoint, ``FailureConfig(max_failures=1)``; rank 1
raises in epoch 1, batch 5, and Ray restarts both workers from the last checkpoint reported.

Skipped where Ray is absent: CI runs it in a fresh venv of its own (``pip install -e ".[test,ray]"``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.train.lightning")

import scaling  # noqa: E402
from launching import TESTS, launch  # noqa: E402
from test_docs import DOCS, fenced_blocks  # noqa: E402
from test_scaling import LIMIT, assert_ok, assert_resumed_exactly  # noqa: E402
from test_scaling_recipes import PLAIN, plain_figures  # noqa: E402

pytestmark = pytest.mark.slow

FAULT = {"kind": "raise", "ranks": [1], "epoch": 1, "batch": 5}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run on 2 DDP processes (Lightning's launcher): Ray's workers draw the same batches."""
    root = tmp_path_factory.mktemp("reference")
    assert_ok(launch(root, [{"root": str(root / "ddp"), "sampler": "stateful"}], limit=LIMIT))
    return root / "ddp"


def test_the_recipe_is_the_one_tested() -> None:
    (block,) = [b.code for b in fenced_blocks(DOCS / "scaling.md") if b.marker == "recipe: ray"]
    source = (TESTS / "scaling_ray.py").read_text()
    for line in (
        "strategy=RayDDPStrategy(),",
        "plugins=[RayLightningEnvironment()],",
        'ray.train.report({"step": trainer.global_step}, checkpoint=checkpoint)',
        "failure_config=FailureConfig(max_failures=1)",
        "ScalingConfig(num_workers=2",
    ):
        assert line in block and line in source, line


# Plain Lightning on Ray ends as under torchrun (test_scaling_recipes.PLAIN: the weights right, epoch 1's
# values not); ["typed", "plain"] runs it too, 90 s more, left out of CI's time.
@pytest.mark.parametrize("module", ["typed"])
def test_ray_train_restarts_from_a_mid_epoch_checkpoint(module: str, tmp_path: Path, reference: Path) -> None:
    run = {"root": str(tmp_path), "module": module, "sampler": "stateful", "fault": FAULT}
    job = launch(tmp_path / "driver", [run], limit=LIMIT, script=TESTS / "scaling_ray.py")
    assert job.returncode == 0, job.output[-6000:]
    assert "simulated fault on rank 1" in job.output
    assert scaling.record(tmp_path, 0, 1)["seen"][0][:2] == (1, 5)  # resumed at step 20's checkpoint
    if module == "typed":
        assert_resumed_exactly(tmp_path, reference, attempt=1)
    else:
        assert plain_figures(tmp_path, reference, 1) == PLAIN
