"""The resume promise on setups nobody listed: a fixed-seed draw of whole setups, each judged by the oracle.

Each setup (``tests/setups/space.py``) is one module, one data pipeline, one Trainer, one set of
callbacks and loggers, checkpointing and one interruption, drawn from seed ``ci``; the oracle
(``tests/setups/oracle.py``) runs it uninterrupted and interrupted-and-resumed, each fit in a fresh
process, two setups at a time, and fails it on a silent difference, a false alarm, a warning that
does not name what differs, or a crash plain Lightning does not have. A failure of a known family
(``tests/setups/families.py``: open, each kept as a shrunk test in test_generated_regressions.py)
is reported and tolerated; any other fails the test with the setup, what differs, and the command
that reruns and shrinks it. ``GENERATED_SETUPS`` sets how many (default 240); the long mode is
``python -m tests.setups --seed 7 --count 5000`` (docs/reliability.md).
"""

from __future__ import annotations

import collections
import math
import os
from typing import Any

import pytest
from setups.choices import Choices
from setups.families import known_family
from setups.oracle import covered, warning_kind
from setups.report import features
from setups.run import Checked, drawn, run_setups
from setups.shrink import shrink
from setups.space import CALLBACK_HOOKS, MODULE_HOOKS, VAL_ROWS, DataSpec, ModuleSpec, Setup, draw_setup, shown

from lightning_step_types.check_resume.compare import Difference

SEED = "ci"
COUNT = int(os.environ.get("GENERATED_SETUPS", "240"))
DDP_COUNT = int(os.environ.get("GENERATED_DDP_SETUPS", "12"))


# --- the machinery: a setup is a function of its choices, and shrinks to its simplest failing form -------


def test_under_ddp_a_batch_sampler_is_replaced_without_a_draw_of_its_own() -> None:
    """Lightning 2.6 rebuilds a loader given a ``BatchSampler`` under DDP with no batch size: plain Lightning cannot
    fit it, so the DDP tier draws a ``RandomSampler`` with a generator in its place, and every later draw as before."""
    single = [drawn(SEED, index).data.sampler for index in range(60)]
    ddp = [drawn(SEED, index, processes=2).data for index in range(60)]
    assert single.count("batch_sampler") > 0
    assert [data.sampler for data in ddp].count("batch_sampler") == 0
    # seed ci's DDP setups 7, 13 and 16 drew a batch sampler: the draws after it are those they had
    assert [(ddp[i].sampler, ddp[i].rows, ddp[i].batch_size, ddp[i].loader, ddp[i].val_order) for i in (7, 13, 16)] == [
        ("random_generator", 38, 5, "plain", "generator"),
        ("random_generator", 31, 4, "stateful", "sequential"),
        ("random_generator", 33, 6, "stateful", "sequential"),
    ]


def test_under_ddp_each_process_s_share_fits_batchnorm_and_the_validation_limit() -> None:
    """Each process trains and validates on its share (DistributedSampler): BatchNorm needs two rows in each of
    its training batches, and ``limit_val_batches=0.5`` at least two validation batches (seed ci's DDP setups 18
    and 31 had neither, and plain Lightning refused them)."""
    setups = [drawn(SEED, index, processes=2) for index in range(200)]
    batchnorm = [s.data for s in setups if s.module.batchnorm]
    halved = [s.data for s in setups if s.trainer.limit_val_batches == 0.5]
    assert batchnorm and halved
    assert [d.rows for d in batchnorm if math.ceil(d.rows / 2) % d.batch_size == 1] == []
    assert [d.batch_size for d in halved if math.ceil(math.ceil(VAL_ROWS / 2) / d.batch_size) < 2] == []
    assert (drawn(SEED, 18, processes=2).data.rows, drawn(SEED, 31, processes=2).trainer.limit_val_batches) == (
        33,
        None,
    )


def test_a_setup_is_drawn_from_its_seed_and_index_alone() -> None:
    assert drawn(SEED, 7) == drawn(SEED, 7) != drawn(SEED, 8)
    assert draw_setup(Choices(None)) == Setup(), "all choices 0: every dimension's simplest option"


def test_a_shrink_keeps_only_what_the_failure_needs() -> None:
    """A failure that needs dropout and a stateful loader, from a setup that has much else: the shrink
    sets every other choice to its simplest, and checks each setup it tries once."""
    index = next(i for i in range(200) if _needs(drawn(SEED, i)) and drawn(SEED, i).callbacks)
    made = Choices(f"{SEED}:1:{index}")
    draw_setup(made)
    tried: list[Setup] = []

    def fails(setup: Setup) -> bool:
        tried.append(setup)
        return _needs(setup)

    shrunk, _, checks = shrink(made.made, fails)
    assert shrunk == Setup(module=ModuleSpec(dropout=True), data=DataSpec(loader="stateful"))
    assert checks == len(tried) == len(set(tried))


def _needs(setup: Setup) -> bool:
    return setup.module.dropout and setup.data.loader == "stateful"


def test_a_warning_names_what_differs_only_where_it_covers_it() -> None:
    """The oracle's rule: a warning about the data order covers everything; one about a callback's
    epoch-start hook covers that callback's state and attributes and the checkpoint files, not the weights."""
    setup = Setup()
    order = "Typed: resuming epoch 0 at batch 3\n  got:      a training loader whose order no checkpoint holds: x"
    hook = (
        "Typed: resuming epoch 0 at batch 3\n  got:      a checkpoint saved inside epoch 0: Lightning does not run"
        " the on_train_epoch_start hooks again when it restarts inside an epoch, so what these set up for epoch 0 is"
        " not set up in the resumed run until epoch 1: EpochStartUserCallback.on_train_epoch_start"
    )
    weights = Difference("state_dict head.bias[0]", "0.1", "0.2")
    attribute = Difference("callback attribute 2: EpochStartUserCallback{'index': 0}.epoch_mark", "1", "0")
    other = Difference("callback attribute 3: UserCallback{'index': 1}.seen length", "4", "3")
    assert [covered(d, [order], setup) for d in (weights, attribute, other)] == [True, True, True]
    assert [covered(d, [hook], setup) for d in (weights, attribute, other)] == [False, True, False]
    assert [warning_kind(order), warning_kind(hook)] == ["data order", "epoch-start hooks"]


# --- the draw ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checked() -> list[Checked]:
    return run_setups(SEED, range(COUNT), lanes=2)


def _shown(item: Checked) -> str:
    verdict = item.verdict
    return "\n".join(
        [
            f"setup {item.index} ({verdict.family}):",
            f"  {shown(item.setup)}",
            f"  plan: {verdict.plan}",
            *(f"  {line}" for line in verdict.detail.splitlines()[:12]),
            f"  rerun and shrink: python -m tests.setups --seed {SEED} --index {item.index} --shrink",
        ]
    )


def test_every_generated_setup_is_exact_or_warned_with_its_cause_named(checked: list[Checked]) -> None:
    failed = [item for item in checked if item.verdict.failed]
    new = [item for item in failed if known_family(item.verdict, item.setup) is None]
    by_family = collections.Counter(known_family(item.verdict, item.setup) for item in failed if item not in new)
    print(f"{len(checked)} setups, {len(failed)} failed, of known families: {dict(by_family)}")
    assert not new, f"{len(new)} setups fail outside the known families:\n\n" + "\n\n".join(map(_shown, new))


# Each dimension's options, as the space offers them: every one is drawn at least once.
OPTIONS: dict[str, set[Any]] = {
    "module.way": {"typed", "adapter"},
    "module.dropout": {False, True},
    "module.batchnorm": {False, True},
    "module.global_draws": {"none", "torch", "numpy", "random"},
    "module.held_generator": {"none", "torch", "numpy", "random"},
    "module.optimization": {"automatic", "manual"},
    "module.optimizers": {1, 2},
    "module.optimizer": {"sgd", "adam"},
    "module.scheduler": {"none", "step", "plateau"},
    "module.interval": {"epoch", "step"},
    "module.frequency": {1, 2},
    "module.accumulate": {1, 2, 3},
    "module.clip": {False, True},
    "module.metric": {False, True},
    "module.step_metric": {False, True},
    "module.epoch_hook": {False, True},
    "module.saves_own": {False, True},
    "data.loader": {"plain", "stateful"},
    "data.sampler": {
        "sequential",
        "shuffle",
        "loader_generator",
        "random_generator",
        "random_global",
        "replacement",
        "weighted",
        "subset",
        "batch_sampler",
    },
    "data.workers": {0, 1, 2},
    "data.persistent": {False, True},
    "data.dataset": {"map", "iterable"},
    "data.augment": {"none", "torch", "held"},
    "data.via": {"loaders", "datamodule", "module"},
    "data.reload": {False, True},
    "data.train_loaders": {1, 2},
    "data.combine": {"max_size_cycle", "min_size", "max_size"},
    "data.val_order": {"sequential", "generator"},
    "data.val_loaders": {0, 1, 2},
    "trainer.precision": {"32-true", "64-true", "bf16-mixed", "bf16-true"},
    "trainer.max_epochs": {1, 2, 3},
    "trainer.max_time": {False, True},
    "trainer.num_sanity_val_steps": {0, 2},
    "trainer.log_every_n_steps": {1, 2, 50},
    "trainer.check_val_every_n_epoch": {1, 2, None},
    "checkpoint.every": {"none", "steps", "epochs", "time"},
    "checkpoint.save_last": {False, True, "link"},
    "checkpoint.top_k": {-1, 1, 2},
    "checkpoint.on_exception": {False, True},
    "interruption.how": {"exception", "kill", "sigterm", "save", "relaunch"},
    "interruption.where": {*MODULE_HOOKS, *CALLBACK_HOOKS, "logger"},
    "interruption.resume": {"path", "last"},
    "interruption.process": {"fresh", "same"},
    **{
        f"callbacks.{kind}": {False, True}
        for kind in (
            "early_stopping",
            "lr_monitor",
            "swa",
            "accumulation_scheduler",
            "batch_size_finder",
            "lr_finder",
            "pruning",
            "model_summary",
            "weight_averaging",
            "timer",
            "lambda",
            "user",
        )
    },
}


def test_the_draw_covers_every_option_of_every_dimension(checked: list[Checked]) -> None:
    drawn: dict[str, set[Any]] = collections.defaultdict(set)
    kinds: dict[str, set[Any]] = collections.defaultdict(set)
    for item in checked:
        for name, value in features(item.setup).items():
            drawn[name].add(value)
        for name in ("limit_train_batches", "limit_val_batches", "val_check_interval"):
            kinds[f"trainer.{name}"].add(type(getattr(item.setup.trainer, name)).__name__)
        kinds["loggers"].update(item.setup.loggers)
    missing = {name: sorted(map(repr, options - drawn[name])) for name, options in OPTIONS.items()}
    assert {name: options for name, options in missing.items() if options} == {}
    for name in ("trainer.limit_train_batches", "trainer.val_check_interval"):
        assert kinds[name] == {"NoneType", "int", "float"}, name
    assert kinds["trainer.limit_val_batches"] == {"NoneType", "int", "float"}
    assert kinds["loggers"] == {"csv", "tensorboard", "failing"}


def test_most_setups_reach_their_interruption_and_are_judged(checked: list[Checked]) -> None:
    """A setup is skipped where its interruption has no place in the fit (a kill needs a periodic save
    before it): the space is drawn so that few are."""
    outcomes = collections.Counter(item.verdict.outcome for item in checked)
    assert outcomes["skipped"] <= len(checked) // 10, dict(outcomes)
    assert outcomes["invalid"] == 0 and outcomes["harness error"] == 0, dict(outcomes)


@pytest.mark.slow
def test_generated_ddp_setups_on_two_gloo_processes() -> None:
    """The slower tier: two CPU processes under DDP on gloo, each rank a fresh process with torchrun's
    environment, a fault on one rank; every rank's module and callbacks compared with its own."""
    checked = run_setups(SEED, range(DDP_COUNT), lanes=1, processes=2)
    new = [item for item in checked if item.verdict.failed and known_family(item.verdict, item.setup) is None]
    assert not new, "\n\n".join(map(_shown, new))
    assert sum(item.verdict.outcome == "skipped" for item in checked) <= len(checked) // 10
