"""What the resume warnings say: each a (got, expected, fix) for ``errors.format_problem``.

One ``StepResultWarning`` at resume names the batch and each value that cannot equal the
uninterrupted run's; nothing here raises.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from lightning_step_types.errors import StepResultWarning, format_problem

__all__ = [
    "CHECKPOINT_KEY",
    "Problem",
    "batch_end_hooks_problem",
    "batch_end_callbacks_problem",
    "batch_end_save_problem",
    "callback_attributes_problem",
    "pruning_problem",
    "changed_module_problem",
    "diverged_processes_problem",
    "epoch_start_hooks_problem",
    "format_problem_of",
    "shared_generator_problem",
    "unended_epoch_problem",
    "gloo_restarts_problem",
    "gradients_problem",
    "manual_rest_problem",
    "module_checkpoint_problem",
    "plain_checkpoint_problem",
    "plain_epoch_end_problem",
    "ranks_problem",
    "rounded_weights_problem",
    "replayed_stream_problem",
    "restored_order_problem",
    "running_stats_problem",
    "sampler_order_problem",
    "unpositioned_loader_problem",
    "warn",
    "warn_unavailable",
    "worker_draws_problem",
    "worker_streams_problem",
    "world_size_problem",
]

# checkpoint[CHECKPOINT_KEY]["epoch_state"] holds the running state; a top-level key, beside Lightning's own.
CHECKPOINT_KEY = "lightning_step_types"

Problem = tuple[str, str, str]

_FIX_FRESH = (
    "nothing to do for this run; to resume exactly, resume from a checkpoint saved by TypedLightningModule"
    " or under StepResultAdapter() with the same module"
)


def plain_checkpoint_problem(epoch: int, batch_idx: int) -> Problem:
    return (
        "a checkpoint without the running epoch state of lightning_step_types (saved by plain Lightning, or with"
        f" exact_resume=False): every value logged with on_epoch=True in training, and every logged metric,"
        f" starts fresh, so epoch {epoch}'s aggregates cover batch {batch_idx} onwards only",
        f"checkpoint[{CHECKPOINT_KEY!r}], which TypedLightningModule and StepResultAdapter() save mid-epoch",
        "nothing to do for this run: checkpoints saved from now on resume exactly",
    )


def format_problem_of(found: Any, expected: int) -> Problem:
    return (
        f"epoch state of format {found!r} (from another version of lightning_step_types): it starts fresh",
        f"format {expected}",
        _FIX_FRESH,
    )


def world_size_problem(saved: int, now: int, names: list[str]) -> Problem:
    return (
        f"epoch state saved by {saved} processes, resumed on {now}: each process's running state belongs to its"
        f" own data, so these start fresh: {', '.join(names) or 'none'}",
        f"the world size the checkpoint was saved with ({saved})",
        f"resume on {saved} processes to continue the epoch exactly",
    )


def ranks_problem(ranks: list[int], where: str, names: list[str]) -> Problem:
    shown = ", ".join(str(rank) for rank in ranks)
    plural = "s" if len(ranks) > 1 else ""
    return (
        f"a checkpoint whose processes were not at one point when it was saved: rank 0 at {where.removeprefix('resuming ')},"
        f" rank{plural} {shown} elsewhere or at no save (a signal, an exception or a save_checkpoint call that"
        f" reached some processes only, or at different moments); the running state of rank{plural} {shown}"
        f" starts fresh: {', '.join(names) or 'none'}",
        "every process saving at the same point (ModelCheckpoint, or a save every process reaches)",
        "nothing to do for this run; checkpoints that ModelCheckpoint saves resume exactly",
    )


def diverged_processes_problem(differing: dict[int, list[str]]) -> Problem:
    ranks = sorted(differing)
    shown = "; ".join(
        f"rank {rank}'s "
        + ", ".join(differing[rank][:4])
        + (f" and {len(differing[rank]) - 4} more" if len(differing[rank]) > 4 else "")
        for rank in ranks
    )
    who = f"rank {ranks[0]} goes on from rank 0's, not from its own"
    if len(ranks) > 1:
        who = f"ranks {', '.join(map(str, ranks))} go on from rank 0's, not from their own"
    return (
        "a checkpoint whose processes' optimizer settings or LR schedulers differed when it was saved"
        f" ({shown}, not as rank 0's): the file holds rank 0's weights, optimizers and schedulers, which every"
        f" process loads, so {who}",
        "every process with the same optimizer settings and scheduler states: under DDP they train one model",
        "log the value a scheduler monitors with self.log(..., sync_dist=True), so that every process steps it alike",
    )


def changed_module_problem(names: list[str]) -> Problem:
    return (
        f"a checkpoint from before the module changed what it logs or declares; these start fresh: {', '.join(names)}",
        "the values and metrics the module logged when the checkpoint was saved, logged the same way",
        _FIX_FRESH,
    )


def gradients_problem(batch: int, window: int, manual: bool) -> Problem:
    held = (
        "gradients held over from earlier batches (manual optimization)"
        if manual
        else f"the gradients of the earlier batches of its window of accumulate_grad_batches={window}"
    )
    return (
        f"a checkpoint saved in batch {batch} after its backward added to .grad and before its optimizer step: .grad"
        f" held {held} together with batch {batch}'s, which no point can separate, so the resumed run trains batch"
        f" {batch} again without the earlier ones and the weights differ from the uninterrupted run's from that"
        " optimizer step on",
        "a checkpoint saved before a batch's backward, or between batches (each carries .grad)",
        "nothing restores those gradients; for an exact resume save between batches (ModelCheckpoint("
        "every_n_train_steps=...)), or before a batch's backward",
    )


def batch_end_hooks_problem(batch: int, names: list[str]) -> Problem:
    return (
        f"a checkpoint saved in batch {batch} after its optimizer step and before its on_train_batch_end hooks"
        f" ended: what they log for batch {batch} is not in it, and the resumed run goes on after batch {batch},"
        f" so these miss batch {batch}: {', '.join(names)}",
        "a checkpoint saved before a batch's optimizer step, or after its on_train_batch_end hooks (ModelCheckpoint"
        " saves after every callback's, but before the LightningModule's own)",
        "log these values in training_step (or a hook before the optimizer step), or save the checkpoint from"
        " the LightningModule's on_train_batch_end after they are logged",
    )


def manual_rest_problem(batch: int) -> Problem:
    return (
        f"a checkpoint saved in batch {batch} after an optimizer step inside training_step (manual optimization):"
        f" the weights hold that step, so the resumed run goes on after batch {batch}, and what training_step"
        " does after the save (other optimizers' steps, LR scheduler steps, values it logs) is not in it",
        "a checkpoint saved before a batch's first optimizer step, or between batches",
        "save from on_train_batch_end or with ModelCheckpoint(every_n_train_steps=...) rather than inside"
        " training_step after opt.step()",
    )


def running_stats_problem(batch: int, names: list[str]) -> Problem:
    return (
        f"a checkpoint saved inside batch {batch}, with modules in training mode that keep running statistics:"
        f" {', '.join(names)}; their running_mean, running_var and num_batches_tracked already count batch"
        f" {batch}'s forward if it ran before the save, and the resumed run forwards batch {batch} again, so they"
        " count it twice",
        "a checkpoint saved between batches, or a module without running statistics in training mode",
        "nothing to do for the weights and the epoch values, which are exact; the running statistics count one"
        " batch twice (num_batches_tracked is one higher); to avoid it save between batches (ModelCheckpoint("
        "every_n_train_steps=...)), or recompute the statistics after training with"
        " torch.optim.swa_utils.update_bn(loader, model)",
    )


_RUNS_AGAIN = {
    "batch": "the batch it was saved in runs again from its fetch (its training_step and hooks)",
    "validation": "the validation it was saved in runs again",
    "epoch_end": "the epoch's end it was saved in runs again (its on_train_epoch_end hooks)",
    "epoch_start": "the epoch's start it was saved in runs again (its on_train_epoch_start hooks)",
}


def module_checkpoint_problem(module: str, runs_again: str, loaded: list[tuple[str, list[str]]]) -> Problem:
    """``loaded``: each attribute the module's own loading put back as it was at the save, with the
    checkpoint entries that hold that value."""
    shown = "; ".join(f"{module}.{name}" + (f" (from {', '.join(keys)})" if keys else "") for name, keys in loaded)
    first = loaded[0][0]
    return (
        f"a checkpoint saved where {_RUNS_AGAIN[runs_again]}, and {module}.on_save_checkpoint saved the module's"
        f" own data as it was then, after what runs again had changed it: its on_load_checkpoint put it back as"
        f" it was at the save, not at the point, so what the module counts or collects there counts that part"
        f" twice: {shown}",
        f"{module}.on_save_checkpoint data that what runs again does not change, or a checkpoint saved between batches",
        f"leave {module}.{first} to the library (it saves plain attributes at the point: drop it from"
        f" {module}.on_save_checkpoint and on_load_checkpoint), keep the count in a torchmetrics Metric, or save"
        " between batches (ModelCheckpoint(every_n_train_steps=...))",
    )


def batch_end_callbacks_problem(batch: int, callbacks: list[str]) -> Problem:
    return (
        f"a checkpoint saved after an exception in batch {batch}'s on_train_batch_end hooks, before these"
        f" callbacks' hooks returned: the resumed run goes on after batch {batch} and does not run those hooks"
        f" again, so what these callbacks do there for batch {batch} may be missing (a ModelCheckpoint save that"
        f" failed is not written): {', '.join(callbacks)}",
        "a checkpoint saved before a batch's on_train_batch_end hooks, or after every callback's returned",
        "nothing to do for the batch's training, which the checkpoint holds; a ModelCheckpoint whose write"
        " failed writes its next checkpoint when it is due (or call trainer.save_checkpoint(path) once the"
        " resumed run starts)",
    )


def batch_end_save_problem(batch: int, callbacks: list[str]) -> Problem:
    return (
        f"a checkpoint saved from inside batch {batch}'s on_train_batch_end hooks (trainer.save_checkpoint in a"
        f" callback's hook), where these callbacks' hooks had yet to run for it (the saving callback's, where"
        f" anything follows the save in it, and those after it): the resumed run goes on after batch {batch} and"
        f" does not run those hooks again, so what they do there for batch {batch} is missing: {', '.join(callbacks)}",
        "a checkpoint saved before a batch's on_train_batch_end hooks, or after every callback's had run",
        "save from the module's own on_train_batch_end (Lightning calls it after every callback's) or as the last"
        " statement of the last callback's hook, or resume from a checkpoint saved elsewhere",
    )


def unended_epoch_problem(epoch: int) -> Problem:
    return (
        f"a relaunch with nothing left to train (max_steps reached) from a checkpoint saved inside epoch {epoch}:"
        f" after that save the run that saved ended epoch {epoch} (its on_train_epoch_end hooks, the epoch's"
        f" logged values, current_epoch {epoch + 1}), and Lightning runs none of that in a fit with nothing to"
        " train",
        "a finished job's checkpoint saved after its last epoch ended",
        "relaunch from a checkpoint the job saved after trainer.fit returned (trainer.save_checkpoint(path)),"
        " or give the relaunch a larger max_steps: it trains on from the point exactly",
    )


def rounded_weights_problem(owner: str, names: list[str]) -> Problem:
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (
        f"a float64 checkpoint (precision='64-true') loaded into a {owner} built in float32: Lightning loads the"
        " weights before it converts the module to float64, so they come back rounded to float32, and every"
        f" value from then on differs in its last digits: {shown}",
        "a module built in float64 before the checkpoint loads",
        f"build it under the Trainer's dtype (with trainer.init_module(): model = {owner}(...)), or call"
        " model.double() before trainer.fit",
    )


def callback_attributes_problem(attributes: list[tuple[str, str, str]]) -> Problem:
    """``attributes``: (callback class, attribute, its type) that changed in the fit and cannot be put back."""
    shown = ", ".join(f"{cls}.{name} ({kind})" for cls, name, kind in attributes)
    first_cls, first_name, _ = attributes[0]
    return (
        f"callback attributes that changed during the fit, that the callback's state_dict() does not hold, and"
        f" that are not plain data (numbers, strings, tensors, lists and dicts of those) or changed in place"
        f" after the point: the resumed run starts them from what __init__, setup and load_state_dict() give:"
        f" {shown}",
        "what a callback changes during a fit held in plain-data attributes (the library puts those back at"
        " the point) or returned from its state_dict()",
        f"return what {first_cls}.{first_name} must keep from {first_cls}.state_dict() and set it again in"
        f" {first_cls}.load_state_dict(), or keep it as plain data",
    )


def pruning_problem(epoch: int) -> Problem:
    return (
        f"ModelPruning with a checkpoint saved in epoch {epoch}: ModelPruning saves the weights with the pruning"
        " made permanent and without its masks (ModelPruning.on_save_checkpoint), so the resumed run trains the"
        " pruned weights unmasked until its next pruning, where the uninterrupted run kept them at zero",
        "ModelPruning's masks in the checkpoint, or a checkpoint saved before its first pruning",
        "resume from a checkpoint saved before ModelPruning's first pruning (it prunes at epoch ends), or prune"
        " once after training",
    )


def plain_epoch_end_problem(epoch: int) -> Problem:
    return (
        f"a checkpoint of plain Lightning saved inside epoch {epoch}'s end hooks: Lightning resumes it after them,"
        f" so what epoch {epoch}'s end had not done yet is not done (the epoch's logged row, the on_train_epoch_end"
        " hooks after the save, a ModelCheckpoint save that failed)",
        f"checkpoint[{CHECKPOINT_KEY!r}], which TypedLightningModule and StepResultAdapter() save, and which"
        " runs an interrupted epoch's end again",
        "nothing to do for this run: checkpoints saved from now on resume exactly",
    )


def epoch_start_hooks_problem(epoch: int, hooks: list[str]) -> Problem:
    """``hooks``: each hook, with what it changed that no checkpoint holds where the run that saved saw it."""
    return (
        f"a checkpoint saved inside epoch {epoch}: Lightning does not run the on_train_epoch_start hooks again"
        f" when it restarts inside an epoch, and no checkpoint holds what these changed for epoch {epoch} (or for"
        f" an earlier epoch), so the resumed run goes on without it: {', '.join(hooks)}",
        "on_train_epoch_start hooks that change only what a checkpoint holds (such as the callback's own plain"
        " attributes, which the library puts back at the point)",
        "set it up where a resumed run calls the callback too (in on_train_start, from trainer.current_epoch, or"
        " at the epoch's first batch in on_train_batch_start), or keep it in the callback's state_dict() and"
        " apply it in load_state_dict()",
    )


def gloo_restarts_problem(max_restarts: int) -> Problem:
    return (
        f"torchrun restarts (--max-restarts={max_restarts}) on the gloo backend, with the rendezvous store the"
        " workers share with torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True): after a fault the restarted"
        " ranks fail to connect (Gloo connectFullMesh failed ... Connection refused) or hang, so the run does"
        " not resume",
        "a rendezvous store of each attempt's own on gloo (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), or the nccl backend",
        "start the job as TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun ... (see Scaling out in the documentation)",
    )


def sampler_order_problem(samplers: list[str]) -> Problem:
    return (
        f"a training loader whose order no checkpoint holds: {', '.join(samplers)}, which Lightning puts around"
        " a sampler that is not a DistributedSampler under DDP; that sampler has no torch.Generator and no"
        " state_dict(), so its order comes from torch's global random state, and the resumed run's batches"
        " are not the uninterrupted run's",
        "a sampler whose order a checkpoint can hold: a DistributedSampler, torchdata's"
        " StatefulDistributedSampler, or a sampler with a torch.Generator (generator=...) or"
        " state_dict() / load_state_dict()",
        "give the sampler generator=torch.Generator().manual_seed(seed), or the loader"
        " sampler=StatefulDistributedSampler(dataset, shuffle=True) (torchdata.stateful_dataloader.sampler)",
    )


def restored_order_problem(loaders: list[str]) -> Problem:
    return (
        f"a training loader whose order torchdata's restore drew again from torch's global random state:"
        f" {', '.join(loaders)}; resumed inside an epoch, a StatefulDataLoader makes its sampler's iterator"
        " again and fast-forwards it, and its sampler drew from the global streams of that moment, not from"
        " those the uninterrupted run drew the epoch's order from, so the resumed run's batches are not the"
        " uninterrupted run's",
        "a sampler that draws its order from a torch.Generator of its own, or a plain torch DataLoader (whose"
        " order lightning_step_types draws again from the streams of the epoch's first draw)",
        "give the sampler generator=torch.Generator().manual_seed(seed) and draw from it, or build the training"
        " loader as a torch.utils.data.DataLoader",
    )


def worker_streams_problem(loaders: list[str]) -> Problem:
    return (
        f"a training loader whose worker processes draw at random: {', '.join(loaders)}; each worker seeds"
        " torch's, numpy's and Python's random streams from the loader's base seed when it starts, no checkpoint"
        " holds where they were, and the resumed workers start them again, so random draws in the workers"
        " (augmentation in Dataset.__getitem__) are not the uninterrupted run's",
        "a loader whose workers' streams a checkpoint can hold, or one that loads in the main process, whose"
        " streams the checkpoint holds",
        "nothing, where the dataset draws nothing at random; else draw the augmentation from a torch.Generator the"
        " dataset keeps, and return its get_state() from the dataset's state_dict() (StatefulDataLoader saves it"
        " for each worker), or set num_workers=0",
    )


def worker_draws_problem(loaders: list[str]) -> Problem:
    return (
        f"a training loader whose worker processes drew at random while they loaded the batches before the"
        f" point: {', '.join(loaders)}; each worker's random streams (torch's, numpy's, Python's) start where"
        " torch seeds them, and a generator the dataset holds is a copy in each worker, sent from the main"
        " process as the worker starts; no checkpoint holds how far the batches before the point moved them,"
        " and the resumed workers do not load those batches, so their random draws (augmentation in"
        " Dataset.__getitem__) are not the uninterrupted run's",
        "workers that draw nothing at random, or a loader that loads in the main process (num_workers=0),"
        " whose streams the checkpoint holds",
        "draw the augmentation from a torch.Generator seeded from the sample's index (and the epoch), so that"
        " a batch's draws do not depend on the batches a worker loaded before it; or set num_workers=0",
    )


def replayed_stream_problem(loader: str) -> Problem:
    return (
        f"a training loader over an IterableDataset without a state_dict(), replayed up to the point: {loader};"
        " it draws from the global random streams while it is iterated in the main process, and the replay"
        " draws the batches before the point one after another, where the uninterrupted run drew them between"
        " training steps, so the batches from the point on are not the uninterrupted run's",
        "an IterableDataset with state_dict() / load_state_dict() (what its iterator needs to go on from a"
        " point), or one that draws from a torch.Generator of its own",
        "give the dataset state_dict() and load_state_dict() returning and taking its position and its"
        " generator's get_state(), or draw from a torch.Generator the dataset keeps",
    )


def unpositioned_loader_problem(loaders: list[str]) -> Problem:
    return (
        f"a training loader that cannot be started inside an epoch: {', '.join(loaders)}; Lightning starts"
        " it again from its first batch, so the resumed epoch trains its first batches again and not its"
        " last ones",
        "a torch.utils.data.DataLoader (which lightning_step_types resumes at the batch), or a loader with"
        " state_dict() / load_state_dict() such as torchdata's StatefulDataLoader",
        "build the training data as a DataLoader, or torchdata.stateful_dataloader.StatefulDataLoader",
    )


def cycled_order_problem(loaders: list[str]) -> Problem:
    return (
        f"a training loader that ran out and started again inside the epoch before the save, in"
        f' CombinedLoader(mode="max_size_cycle"): {", ".join(loaders)} draws each pass\'s order from a'
        " torch.Generator, and the resumed run draws the pass it resumes in from the generator as it was at"
        " the epoch's start, so the rest of the resumed epoch's batches are not the uninterrupted run's",
        "a save before that loader starts again, a loader whose order a new pass does not draw,"
        " or loaders that load in the main process",
        'give the combined loaders the same number of batches, or combine them with mode="max_size"',
    )


def shared_generator_problem(samplers: list[str]) -> Problem:
    return (
        f"a training loader whose sampler shares the loader's generator=: {', '.join(samplers)} draws from the"
        " StatefulDataLoader's own torch.Generator, and torchdata's restore inside an epoch redraws its samples"
        " without the loader's draw between them, so the rest of the resumed epoch's batches are not the"
        " uninterrupted run's",
        "a sampler with a torch.Generator of its own (or replacement=False)",
        "give the sampler a generator of its own: RandomSampler(dataset, replacement=True,"
        " generator=torch.Generator().manual_seed(seed)), and the loader none or another",
    )


def warn(module: Any, where: str, problem: Problem) -> None:
    got, expected, fix = problem
    warnings.warn(StepResultWarning(format_problem(where, got, expected, fix, type(module).__qualname__)), stacklevel=3)


_unavailable_warned = False


def warn_unavailable(reason: str) -> None:
    """Once per process: this Lightning's internals are not the ones exact resume reads."""
    global _unavailable_warned
    if _unavailable_warned:
        return
    _unavailable_warned = True
    warnings.warn(
        StepResultWarning(
            format_problem(
                "exact resume",
                f"{reason}: the running epoch aggregates cannot be restored exactly, so they start fresh",
                "pytorch-lightning or lightning 2.5 to 2.6, which continue a mid-epoch resume at the next batch"
                " and keep their logging state where lightning_step_types reads it",
                "upgrade Lightning for exact epoch aggregates; until then runs resume as in plain Lightning",
            )
        ),
        stacklevel=3,
    )


def lightning_version(trainer: Any) -> str:
    """The version of the Lightning package the Trainer comes from (either flavour)."""
    package = sys.modules.get(type(trainer).__module__.split(".")[0])
    return str(getattr(package, "__version__", "?"))
