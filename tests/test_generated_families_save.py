"""A save the user makes with ``trainer.save_checkpoint`` from inside a batch's ``on_train_batch_end`` hooks: the
callbacks whose hook has something left to run for that batch after the save (those after the saving callback, and
that one where anything follows the save in its hook) are named in one warning at a resume from that file (the
resumed run goes on after the batch; their hooks' arguments, the batch and the step's output, are not in the
checkpoint to run them again); nothing is named where nothing is left (a save as the last callback's last
statement, ``ModelCheckpoint``'s own). Generated family: setups ci 39 and 182."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from setups.space import CallbackSpec, InterruptionSpec, Setup
from test_generated_regressions import resumes_exactly_or_named
from test_resume import TypedResume, fit, no_step_result_warnings, one_step_result_warning

from lightning_step_types.resume.messages import batch_end_save_problem

PLAIN_USER = (("state_dict", False), ("per_rank", False), ("epoch_start", "none"), ("logs", False), ("deque", False))


def test_a_user_callback_that_saves_before_it_records_the_batch(tmp_path: Path) -> None:
    """The harness's user callback saves in batch N's on_train_batch_end before it appends N to its record: resumed
    from that file its record lacks N, silently before; now named (UserCallback)."""
    setup = Setup(
        callbacks=(CallbackSpec("user", PLAIN_USER),),
        interruption=InterruptionSpec(how="save", where="callback_batch_end"),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "warned"


class Saves(pl.Callback):
    """Saves in batch 2's on_train_batch_end, before or after it records the batch."""

    def __init__(self, path: Path, last: bool) -> None:
        self.path, self.last, self.seen = path, last, list[int]()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 2 and not self.last:
            trainer.save_checkpoint(self.path)
        self.seen.append(batch_idx)
        if batch_idx == 2 and self.last:
            trainer.save_checkpoint(self.path)


class Records(pl.Callback):
    def __init__(self) -> None:
        self.seen = list[int]()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(batch_idx)


def _message(batch: int, callbacks: list[str]) -> str:
    got, expected, fix = batch_end_save_problem(batch, callbacks)
    return f"  got:      {got}\n  expected: {expected}\n  fix:      {fix}"


def _resumed(tmp_path: Path, last: bool, after: bool) -> tuple[list[Any], list[Any], str | None]:
    path = tmp_path / "user.ckpt"

    def callbacks() -> list[Any]:
        return [Saves(path, last), *([Records()] if after else [])]

    full = callbacks()
    fit(tmp_path / "full", TypedResume, callbacks=full)
    resumed = callbacks()
    if last and not after:
        no_step_result_warnings(lambda: fit(tmp_path / "resumed", TypedResume, callbacks=resumed, ckpt_path=path))
        return full, resumed, None
    _, message = one_step_result_warning(
        lambda: fit(tmp_path / "resumed", TypedResume, callbacks=resumed, ckpt_path=path)
    )
    return full, resumed, message


def test_a_save_before_the_saving_callbacks_own_record_and_the_next_callbacks_names_both(tmp_path: Path) -> None:
    full, resumed, message = _resumed(tmp_path, last=False, after=True)
    assert message is not None and _message(2, ["Saves", "Records"]) in message
    # what it names: both records lack batch 2 after the resume
    assert [callback.seen for callback in full] == [list(range(11))] * 2
    assert [callback.seen for callback in resumed] == [[0, 1, *range(3, 11)]] * 2


def test_a_save_as_the_saving_callbacks_last_statement_names_only_the_callbacks_after_it(tmp_path: Path) -> None:
    _, resumed, message = _resumed(tmp_path, last=True, after=True)
    assert message is not None and _message(2, ["Records"]) in message
    assert not re.search(r"Saves\b", message.split("got:", 1)[1].split("\n", 1)[0])
    assert [callback.seen[:3] for callback in resumed] == [[0, 1, 2], [0, 1, 3]]


def test_a_save_as_the_last_callbacks_last_statement_is_not_warned(tmp_path: Path) -> None:
    """Nothing of the callbacks is left after the save: exact, no false alarm."""
    full, resumed, _ = _resumed(tmp_path, last=True, after=False)
    assert resumed[0].seen == full[0].seen == list(range(11))


# --- a save the user makes from inside the epoch's end hooks --------------------------------------------------------


def test_a_save_in_the_modules_epoch_end_before_modelcheckpoints(tmp_path: Path) -> None:
    """The module's on_train_epoch_end saves, then the job fails: ModelCheckpoint's save and EarlyStopping's check
    (Lightning calls them after the module's hook) and the epoch's row had not run. The file resumed at the next
    epoch, as after ModelCheckpoint's own save, and they were lost, silently; now it resumes at the epoch's end,
    which runs what had not run (setup ci 54)."""
    setup = Setup(interruption=InterruptionSpec(how="save", where="on_train_epoch_end"))
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact"


def test_a_save_in_a_user_callbacks_epoch_end(tmp_path: Path) -> None:
    """The same from a user callback's on_train_epoch_end (Lightning calls the module's hook and ModelCheckpoint's
    after it): exact."""
    setup = Setup(
        callbacks=(CallbackSpec("user", PLAIN_USER),),
        interruption=InterruptionSpec(how="save", where="callback_epoch_end"),
    )
    verdict = resumes_exactly_or_named(setup, tmp_path)
    assert verdict.outcome == "exact"


def test_modelcheckpoints_own_epoch_end_save_resumes_at_the_next_epoch(tmp_path: Path) -> None:
    """ModelCheckpoint's own save at an epoch's end, last of the hooks: its file still resumes at the next epoch (the
    run that saved goes on past it), exactly."""
    verdict = resumes_exactly_or_named(Setup(), tmp_path)
    assert verdict.outcome == "exact"
