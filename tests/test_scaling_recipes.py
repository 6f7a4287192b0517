"""docs/scaling.md's recipes, each run as written: a fault in epoch 1, batch 5 on rank 1 (on both ranks:
SLURM's requeue signal), a restart, and the resumed run against the uninterrupted one, bit for bit;
plain Lightning the same way, with its figures asserted (the same weights, other epoch values).

Each recipe's command block is checked word for word and started on two CPU processes (gloo, loopback
only). The typed runs start the guide's own script, ``examples/scaling/train.py`` (which the guide shows
whole), with its ``--fault``; plain Lightning's start ``tests/scaling.py``, the same model and data.
"""

from __future__ import annotations

import shlex
import stat
from pathlib import Path
from typing import Any

import pytest
import scaling
import torch
from launching import Job, free_port, launch, launch_together, same_tensors, torchrun
from limits import hang_limit
from test_docs import DOCS, fenced_blocks
from test_resume import EXACT
from test_scaling import LIMIT, assert_ok, assert_resumed_exactly, largest_weight_difference

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not EXACT, reason="Lightning before 2.5 replays the checkpoint's batch on resume"),
]

FAULT = {"kind": "raise", "ranks": [1], "epoch": 1, "batch": 5}
RUN: dict[str, Any] = {"sampler": "stateful", "ckpt": "last"}


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "scaling" / "train.py"


def test_the_guide_shows_the_example_script_whole() -> None:
    (block,) = [b.code for b in fenced_blocks(DOCS / "scaling.md") if b.marker == "example: examples/scaling/train.py"]
    assert block + "\n" == EXAMPLE.read_text()


def example_resumed_exactly(root: Path, full: Path, version: int, last_checkpoint: bool = True) -> None:
    """The example's resumed run (rank 0's CSV version ``version``) against the uninterrupted reference
    (tests/scaling.py, the same model and data): the same rows from its start on, and the same weights in
    the last checkpoint (step 44) of a DDP run."""
    rows, reference_rows = scaling.rows(root, version), scaling.rows(full)
    assert len(rows) > 20 and rows == reference_rows[-len(rows) :]
    if last_checkpoint:
        done = torch.load(root / "ckpt" / "last.ckpt", weights_only=False)
        reference = torch.load(full / "ckpt" / "last.ckpt", weights_only=False)
        assert done["global_step"] == reference["global_step"] == 44
        assert same_tensors(done["state_dict"], reference["state_dict"])


def recipe(name: str) -> str:
    (block,) = [b.code for b in fenced_blocks(DOCS / "scaling.md") if b.marker == f"recipe: {name}"]
    return block


def command_of(name: str) -> tuple[dict[str, str], list[str]]:
    """A recipe's ``VAR=value torchrun ... train.py``: its variables, and the command to start."""
    words = shlex.split(recipe(name))
    env = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-"))
    command = [word for word in words if word not in [f"{k}={v}" for k, v in env.items()]]
    assert command[0] == "torchrun" and command[-1] == "train.py", command
    return env, torchrun(*command[1:-1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted runs on 2 processes (the same batches, whichever launcher), started by torchrun
    with restarts: no fault, so no restart. The DDP one without the gloo setting, so that it warns at the
    start; the FSDP2 one with it, as its recipe runs."""
    root = tmp_path_factory.mktemp("reference")
    launcher = torchrun("--nproc-per-node=2", "--max-restarts=1")
    assert_ok(
        launch(
            root,
            [{**RUN, "root": str(root / "ddp"), "ckpt": None}],
            limit=LIMIT,
            launcher=launcher,
            env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"},
        )
    )
    # With the shared store, the process groups a second fit's device mesh makes can fail to connect
    # too (Gloo connectFullMesh ... Connection refused, 1 of 22 runs): the setting, as the recipe says.
    assert_ok(
        launch(
            root,
            [{**RUN, "root": str(root / "fsdp2"), "ckpt": None, "strategy": "model_parallel"}],
            limit=LIMIT,
            launcher=launcher,
            env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        )
    )
    return root


def test_torchrun_restarts_on_gloo_without_the_setting_are_named_at_the_fit_start(reference: Path) -> None:
    from test_docs import catalogue_blocks

    assert scaling.record(reference / "ddp", 0)["warnings"] == [GLOO_WARNING]
    assert scaling.record(reference / "ddp", 1)["warnings"] == []  # global rank 0 only
    assert GLOO_WARNING in catalogue_blocks()


GLOO_WARNING = (
    "MyModel: torchrun's restarts\n"
    "  got:      torchrun restarts (--max-restarts=1) on the gloo backend, with the rendezvous store the workers"
    " share with torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True): after a fault the restarted ranks fail to"
    " connect (Gloo connectFullMesh failed ... Connection refused) or hang, so the run does not resume\n"
    "  expected: a rendezvous store of each attempt's own on gloo (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), or the"
    " nccl backend\n"
    "  fix:      start the job as TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun ... (see Scaling out in the"
    " documentation)"
)


def plain_figures(root: Path, reference: Path, attempt: int) -> dict[str, Any]:
    """What plain Lightning's resumed run ends with, beside the uninterrupted run: rank 0's epoch 1 values."""
    resumed, full = scaling.rows(root, attempt), scaling.rows(reference)
    return {
        "largest weight difference": round(largest_weight_difference_at(root, reference, attempt), 4),
        **{
            f"{name} (uninterrupted, resumed)": (
                round(scaling.epoch_value(full, name, 1), 5),
                round(scaling.epoch_value(resumed, name, 1), 5),
            )
            for name in ("train_loss_epoch", "train_max_epoch")
        },
    }


def largest_weight_difference_at(root: Path, reference: Path, attempt: int) -> float:
    done, full = scaling.record(root, 0, attempt)["params"], scaling.record(reference, 0)["params"]
    return max(float((done[name] - full[name]).abs().max()) for name in done)


# Plain Lightning after the same fault and restart: the weights are right, epoch 1's values are not.
PLAIN = {
    "largest weight difference": 0.0,
    "train_loss_epoch (uninterrupted, resumed)": (0.7009, 0.6945),
    "train_max_epoch (uninterrupted, resumed)": (1.33838, 1.33838),  # epoch 1's largest loss came after the resume
}


def restarted(job: Job) -> None:
    assert job.returncode == 0, job.output[-6000:]
    assert "simulated fault on rank 1" in job.output


@pytest.mark.parametrize("module", ["typed", "plain"])
def test_torchrun_with_restarts(module: str, tmp_path: Path, reference: Path) -> None:
    assert (
        recipe("torchrun")
        == "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nproc-per-node=2 --max-restarts=1 train.py"
    )
    env, command = command_of("torchrun")
    if module == "typed":
        restarted(launch(tmp_path, [], limit=LIMIT, launcher=command, env=env, script=EXAMPLE, arguments=["--fault"]))
        example_resumed_exactly(tmp_path, reference / "ddp", version=1)
        return
    run = {**RUN, "root": str(tmp_path), "module": module, "fault": FAULT}
    restarted(launch(tmp_path, [run], limit=LIMIT, launcher=command, env=env))
    check(module, tmp_path, reference / "ddp", attempt=1)


def check(module: str, root: Path, full: Path, attempt: int, plain: dict[str, Any] = PLAIN) -> None:
    if module == "typed":
        assert_resumed_exactly(root, full, attempt)
    else:
        assert plain_figures(root, full, attempt) == plain


@pytest.mark.parametrize("module", ["typed", "plain"])
def test_two_nodes_on_one_host(module: str, tmp_path: Path, reference: Path) -> None:
    assert recipe("nodes") == (
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d"
        " --rdzv-endpoint=localhost:29400 --rdzv-id=train --max-restarts=1 train.py"
    )
    env, command = command_of("nodes")
    command = [word.replace("29400", str(free_port())) for word in command]  # a port no other test holds
    if module == "typed":
        arguments = ["--nodes", "2", "--devices", "1", "--fault"]
        restarted(
            launch_together(
                tmp_path,
                [],
                limit=LIMIT,
                launchers=[command, command],
                envs=[env, env],
                script=EXAMPLE,
                arguments=arguments,
            )
        )
        example_resumed_exactly(tmp_path, reference / "ddp", version=1)
        return
    run = {**RUN, "root": str(tmp_path), "module": module, "fault": FAULT, "devices": 1, "num_nodes": 2}
    restarted(launch_together(tmp_path, [run], limit=LIMIT, launchers=[command, command], envs=[env, env]))
    check(module, tmp_path, reference / "ddp", attempt=1)


def slurm_tasks(tmp_path: Path, restart: int) -> list[dict[str, str]]:
    """Two tasks on two "nodes", as srun starts them from the recipe's batch script (``--nodes=2
    --ntasks-per-node=1``), with a fake ``scontrol`` that records the requeue."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "requeued"}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    job_id = str(4000 + free_port() % 1000)  # Lightning's port: 15000 + the job id's last 4 digits
    common = {
        "PATH": f"{bin_dir}:{__import__('os').environ['PATH']}",
        "SLURM_NTASKS": "2",
        "SLURM_NNODES": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_ID": job_id,
        "SLURM_NODELIST": "localhost",
        "SLURM_LOCALID": "0",
        "SLURM_RESTART_COUNT": str(restart),
    }
    return [{**common, "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank)} for rank in (0, 1)]


def test_the_slurm_batch_script_asks_for_the_requeue_signal() -> None:
    script = recipe("slurm").splitlines()
    assert "#SBATCH --signal=USR1@90" in script and "#SBATCH --requeue" in script
    assert script[-1] == "srun python train.py --nodes 2 --devices 1 --slurm"


@pytest.mark.parametrize("module", ["typed", "plain"])
def test_slurm_requeue_after_the_signal_on_both_nodes(module: str, tmp_path: Path, reference: Path) -> None:
    run = {
        **RUN,
        "root": str(tmp_path),
        "module": module,
        "ckpt": None,
        "devices": 1,
        "num_nodes": 2,
        "slurm": True,
        "fault": {**FAULT, "kind": "signal", "ranks": [0, 1]},
    }
    python = [__import__("sys").executable]
    # the recipe's `srun python train.py`: each task starts the script (the example for the typed module)
    started = {"script": EXAMPLE, "arguments": [*recipe("slurm").splitlines()[-1].split()[3:], "--fault"]}
    runs = [] if module == "typed" else [run]
    assert_ok(
        launch_together(
            tmp_path,
            runs,
            limit=LIMIT,
            launchers=[python, python],
            envs=slurm_tasks(tmp_path, 0),
            **(started if module == "typed" else {}),
        )
    )
    assert (tmp_path / "requeued").read_text().split()[0] == "requeue"
    assert (tmp_path / "hpc_ckpt_1.ckpt").exists()
    # the requeued job: Lightning finds hpc_ckpt_1.ckpt in its default_root_dir by itself
    assert_ok(
        launch_together(
            tmp_path,
            runs,
            limit=LIMIT,
            launchers=[python, python],
            envs=slurm_tasks(tmp_path, 1),
            **(started if module == "typed" else {}),
        )
    )
    if module == "typed":
        # it ran on after the save (SLURM ends the job later), so its last checkpoint is not the reference's
        example_resumed_exactly(tmp_path, reference / "ddp", version=1, last_checkpoint=False)
        return
    check(module, tmp_path, reference / "ddp", attempt=1, plain=SLURM_PLAIN)


# Plain Lightning resumed from the checkpoint of a signal inside epoch 1's batch 5: its loader state is
# past batch 5, which it never trains (docs/resume.md), so the weights differ too, and one batch fewer
# counts in epoch 1's values.
SLURM_PLAIN = {
    "largest weight difference": 0.0115,
    "train_loss_epoch (uninterrupted, resumed)": (0.7009, 0.70699),
    "train_max_epoch (uninterrupted, resumed)": (1.33838, 1.28859),
}


def test_slurms_signal_on_one_node_alone_never_blocks(tmp_path: Path, reference: Path) -> None:
    """The signal reaches rank 1 only: its save waits 10 s for rank 0 and goes on; nothing is written
    (rank 0 writes checkpoints) and nothing requeued, and the run ends as the uninterrupted one."""
    run = {
        **RUN,
        "root": str(tmp_path),
        "ckpt": None,
        "devices": 1,
        "num_nodes": 2,
        "slurm": True,
        "fault": {**FAULT, "kind": "signal", "ranks": [1]},
    }
    python = [__import__("sys").executable]
    job = launch_together(tmp_path, [run], limit=LIMIT, launchers=[python, python], envs=slurm_tasks(tmp_path, 0))
    assert_ok(job)
    assert job.seconds < hang_limit(idle_s=25), job.seconds  # one wait of 10 s, not the process group's 30 minutes
    assert not (tmp_path / "requeued").exists() and not (tmp_path / "hpc_ckpt_1.ckpt").exists()
    for rank in (0, 1):
        assert largest_weight_difference(tmp_path, reference / "ddp", rank) == 0.0


@pytest.mark.parametrize("module", ["typed", "plain"])
def test_model_parallel_with_fully_shard(module: str, tmp_path: Path, reference: Path) -> None:
    assert (
        recipe("fsdp2")
        == "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nproc-per-node=2 --max-restarts=1 train.py --strategy fsdp2"
    )
    assert (
        "ModelParallelStrategy(data_parallel_size=args.nodes * args.devices, tensor_parallel_size=1)"
        in EXAMPLE.read_text()
    )
    assert 'fully_shard(self.net, mesh=self.device_mesh["data_parallel"])' in EXAMPLE.read_text()
    env, command = command_of("torchrun")
    if module == "typed":
        restarted(
            launch(
                tmp_path,
                [],
                limit=LIMIT,
                launcher=command,
                env=env,
                script=EXAMPLE,
                arguments=["--strategy", "fsdp2", "--fault"],
            )
        )
        example_resumed_exactly(tmp_path, reference / "fsdp2", version=1, last_checkpoint=False)
        return
    run = {**RUN, "root": str(tmp_path), "module": module, "fault": FAULT, "strategy": "model_parallel"}
    restarted(launch(tmp_path, [run], limit=LIMIT, launcher=command, env=env))
    check(module, tmp_path, reference / "fsdp2", attempt=1, plain=FSDP2_PLAIN)


FSDP2_PLAIN = PLAIN  # the same figures as DDP's: fully_shard's reduce-scatter averages as DDP's all-reduce does
