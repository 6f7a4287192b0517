"""What a step may return, and the message for every way it can be wrong.

Each check takes the value a step returned and either gives back what Lightning's loops
should receive, or raises ``StepResultError`` before any backward or optimizer step runs.
Returns that Lightning accepts but silently ignores produce a ``StepResultWarning`` instead
(in the lenient mode of ``StepResultAdapter``).
"""

from __future__ import annotations

import difflib
import math
import warnings
import weakref
from collections.abc import Mapping
from typing import Any, cast

import torch

from lightning_step_types._lightning.trainer import trainer_of
from lightning_step_types.errors import (
    StepResultError,
    StepResultWarning,
    describe,
    describe_tensor,
    format_problem,
    short_repr,
)
from lightning_step_types.policy import LossLogging, NonFiniteLoss, StepPolicy
from lightning_step_types.results import (
    LOSS_DTYPES,
    FrozenMetadata,
    StepResult,
    TrainStepResult,
    ValStepResult,
    is_loss_tensor,
    loss_error,
)

__all__ = [
    "StepCall",
    "accept_training_result",
    "check_evaluation_return",
    "check_training_return",
    "new_run",
    "warn_loss_logged_by_the_step",
]

# Keys that Lightning 0.x read from a step's dict; Lightning 1.0+ keeps them as plain extras and
# reads nothing from them. Key -> (what does that job now, the fix).
_LOGGED = "metrics logged with `self.log` / `self.log_dict`"
LEGACY_KEYS = {
    "log": (_LOGGED, "log them with `self.log_dict(...)` inside the step and drop the 'log' key"),
    "progress_bar": (
        _LOGGED,
        "log them with `self.log_dict(..., prog_bar=True)` inside the step and drop the 'progress_bar' key",
    ),
    "hiddens": (
        "hidden state kept on the module: Lightning 2.x passes no hiddens between steps",
        "keep hidden state on the module (e.g. `self.hiddens = ...`) and drop the 'hiddens' key",
    ),
}


class StepCall:
    """Where a return value came from (module, hook, mode), for the checks and their messages.

    Built once per module and hook by the adapter; it reads the module's live state when asked.
    """

    __slots__ = (
        "module",
        "hook",
        "hook_name",
        "policy",
        "strict",
        "nonfinite_loss",
        "source",
        "loss_logged_by_adapter",
        "fetches_its_batches",
        "adapter",
        "step_args",
        "_warned",
    )

    def __init__(
        self,
        module: torch.nn.Module,
        hook_name: str,
        policy: StepPolicy,
        source: tuple[str, int] | None = None,
        adapter: bool = False,
    ) -> None:
        self.module: torch.nn.Module = module
        self.hook_name: str = hook_name
        self.hook: str = f"{type(module).__qualname__}.{hook_name}"  # "MyModel.training_step"
        self.policy: StepPolicy = policy
        self.strict: bool = policy.strict
        self.nonfinite_loss: NonFiniteLoss = policy.nonfinite_loss
        self.source: tuple[str, int] | None = source  # (file, line) of the user's step, where warnings point
        # log_loss has logged this hook's loss name itself (so the name's key in Lightning's results is its own)
        self.loss_logged_by_adapter: bool = False
        # `training_step(self, dataloader_iter)`: Lightning needs `self.log(..., batch_size=...)` (found at the first log_loss)
        self.fetches_its_batches: bool | None = None
        # set by a StepResultAdapter (the fix names its argument), not a typed module (its class attribute)
        self.adapter: bool = adapter
        # the arguments of the step now being checked (its batch index, for a message), () between steps
        self.step_args: tuple[Any, ...] = ()
        self._warned: set[str] = set()

    @property
    def automatic_optimization(self) -> bool:
        return bool(getattr(self.module, "automatic_optimization", True))

    def world_size(self) -> int:
        trainer = trainer_of(self.module)
        return int(trainer.world_size) if trainer is not None else 1

    def warn(self, kind: str, where: str, got: str, expected: str, fix: str) -> None:
        """Warn once per kind of problem and hook, so a wrong return does not flood every step."""
        if kind in self._warned:
            return
        self._warned.add(kind)
        self.emit(StepResultWarning(format_problem(where, got, expected, fix, self.hook)))

    def emit(self, warning: StepResultWarning) -> None:
        if self.source is None:
            warnings.warn(warning, stacklevel=2)
        else:  # the step has returned, so no frame of the user's is on the stack: point at its definition
            warnings.warn_explicit(warning, StepResultWarning, *self.source)


def check_training_return(output: object, call: StepCall) -> tuple[Any, StepResult[Any] | None]:
    """Check a ``training_step`` return; give back (what Lightning receives, the typed result or None).

    The two usual returns are checked inline with no call that can be avoided (no ``typing.cast``,
    whose call costs as much at runtime as any other): they run on every batch.
    """
    kind = type(output)
    if kind is TrainStepResult:  # the path of every typed step
        result: TrainStepResult[Any] = output  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
        return accept_training_result(result, call)
    if kind is dict and not call.strict:  # a legacy step's usual return
        returned: dict[object, Any] = output  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
        loss = returned["loss"] if "loss" in returned else None
        if (
            type(loss) is torch.Tensor
            and loss.grad_fn is not None
            and loss.dtype in LOSS_DTYPES
            and (loss.ndim == 0 or loss.numel() == 1)  # one value (a 0-d tensor, with no call)
        ):
            for key in returned:
                if type(key) is not str or key in LEGACY_KEYS:  # a warning to give: the full check
                    break
            else:
                if call.nonfinite_loss is None or math.isfinite(loss.item()):  # see accept_training_result
                    return output, None
    try:  # only StepResultError leaves a check, whatever the returned object does when inspected
        return _check_training_return(output, call)
    except StepResultError:
        raise
    except Exception as error:
        raise _uninspectable(output, error, call) from error


def check_evaluation_return(output: object, call: StepCall) -> tuple[Any, StepResult[Any] | None]:
    """Check a ``validation_step``/``test_step`` return; give back (what Lightning receives, the typed result)."""
    try:  # as above; written out in both rather than in a shared helper, which would cost a call per step
        return _check_evaluation_return(output, call)
    except StepResultError:
        raise
    except Exception as error:
        raise _uninspectable(output, error, call) from error


def _uninspectable(output: object, error: Exception, call: StepCall) -> StepResultError:
    """A hostile ``__len__``/``__eq__``/``__iter__``/``__repr__`` in what the step returned raised while it was checked."""
    return StepResultError(
        "return value",
        f"{describe(output)}, which raised {type(error).__name__}: {error} when inspected",
        "TrainStepResult / ValStepResult, a Tensor, a dict, or None",
        "return a plain dict or a typed result instead of this object",
        call.hook,
    )


# What Lightning's own steps return, tested by exact type before any isinstance against the
# Mapping ABC (StepResult is one): an ABC check costs a Python-level call on every step.
_PLAIN_RETURN_TYPES = (dict, torch.Tensor)


def _check_training_return(output: object, call: StepCall) -> tuple[Any, StepResult[Any] | None]:
    if output is None:
        if call.world_size() > 1:
            raise StepResultError(
                "return value",
                "None",
                "a TrainStepResult on every process: skipping a batch with None is not supported"
                " under distributed training (the other processes would wait for its gradients)",
                "return a zero loss that keeps the graph instead, e.g. `return TrainStepResult(loss=loss * 0.0)`",
                call.hook,
            )
        return None, None
    if type(output) not in _PLAIN_RETURN_TYPES and isinstance(output, StepResult):
        output = cast(
            "StepResult[Mapping[str, Any]]", output
        )  # isinstance leaves the type arguments unknown to pyright
        if not isinstance(output, TrainStepResult):
            raise _wrong_result_class(output, TrainStepResult, call)
        return accept_training_result(output, call)
    if call.strict:
        raise _not_a_result(output, TrainStepResult, call)
    return _check_legacy_training_return(output, call), None


def _check_evaluation_return(output: object, call: StepCall) -> tuple[Any, StepResult[Any] | None]:
    if output is None:
        return None, None
    if type(output) is ValStepResult or isinstance(output, StepResult):  # the common case first
        output = cast(
            "StepResult[Mapping[str, Any]]", output
        )  # isinstance leaves the type arguments unknown to pyright
        if not isinstance(output, ValStepResult):
            raise _wrong_result_class(output, ValStepResult, call)
        _skip_nonfinite(output.loss, "return value.loss", call)
        return _as_lightning_dict(output), output
    if call.strict:
        raise _not_a_result(output, ValStepResult, call)
    if isinstance(output, Mapping):
        output = cast("Mapping[object, Any]", output)  # isinstance leaves the type arguments unknown to pyright
        _warn_about_keys(output, call)
        if "loss" in output:
            if is_loss_tensor(output["loss"]):
                _skip_nonfinite(output["loss"], "return value['loss']", call)
            else:
                _warn_malformed_evaluation_loss(output["loss"], call)
    elif isinstance(output, torch.Tensor):
        if is_loss_tensor(output):
            _skip_nonfinite(output, "return value", call)
    else:
        call.warn(
            "malformed",
            "return value",
            describe(output),
            "ValStepResult, a Tensor, a dict, or None; Lightning passes anything else unchecked"
            f" to `on_{_stage(call)}_batch_end` and nothing else reads it",
            "return `ValStepResult(loss=loss, metadata={...})`, or a dict such as `{'preds': preds}`",
        )
    return output, None


def _warn_malformed_evaluation_loss(loss: object, call: StepCall) -> None:
    """An evaluation dict's 'loss' that is no loss: nothing in Lightning reads it, so it warns."""
    error = loss_error("return value['loss']", loss)
    fix = error.fix
    if isinstance(loss, torch.Tensor) and loss.numel() > 1:
        fix += "; or return the per-sample values under another key, e.g. `{'losses': losses}`"
    call.warn(
        "malformed loss",
        error.where,
        error.got,
        f"{error.expected}: Lightning passes an evaluation step's 'loss' unchecked to"
        f" `on_{_stage(call)}_batch_end`, where a callback reads it as the step's loss",
        fix,
    )


def warn_loss_logged_by_the_step(call: StepCall, name: str, logging: LossLogging) -> None:
    """log_loss beside the step's own ``self.log`` of the same name: the step's call wins."""
    stage = {"training_step": "train", "validation_step": "val"}.get(call.hook_name, "test")
    call.warn(
        "log_loss clash",
        "log_loss",
        f"`self.log({name!r}, ...)` in {call.hook}, and log_loss logging {name!r} as well",
        "one `self.log` per name and hook: Lightning raises on a second call with other arguments"
        " and counts a second identical one twice",
        f"the step's own `self.log({name!r}, ...)` is kept and log_loss skips {name!r}; to silence this,"
        f" remove that call from the step, or turn this stage of log_loss off:"
        f" `log_loss=LossLogging({stage}=None{_other_settings(logging, stage)})`",
    )


def no_batch_size_for_log_loss(call: StepCall, name: str) -> StepResultError:
    """log_loss under ``training_step(self, dataloader_iter)``, where no batch size can be found."""
    return StepResultError(
        "log_loss",
        f"no batch size for `self.log({name!r}, ...)`: {call.hook} takes `dataloader_iter` and fetches its own"
        " batches, the result states no `batch_size`, and the batch it fetched last has no size Lightning can read",
        "a batch size: with `dataloader_iter`, Lightning requires `self.log(..., batch_size=...)`",
        "return `TrainStepResult(loss, batch_size=n)` with the number of samples the loss averages over,"
        f" or turn this stage of log_loss off (`log_loss=LossLogging(train=None)`) and call"
        f" `self.log({name!r}, loss, batch_size=n)` in the step",
        call.hook,
    )


def _other_settings(logging: LossLogging, stage: str) -> str:
    """The LossLogging fields other than ``stage`` that differ from the defaults, as the user would write them."""
    default = LossLogging()
    fields = [field for field in ("train", "val", "test", "prog_bar", "sync_dist") if field != stage]
    return "".join(
        f", {field}={getattr(logging, field)!r}"
        for field in fields
        if getattr(logging, field) != getattr(default, field)
    )


def accept_training_result(
    output: StepResult[Any], call: StepCall
) -> tuple[torch.Tensor | dict[str, Any] | None, StepResult[Any] | None]:
    """Check a ``TrainStepResult`` (its construction checked the rest) and give back what Lightning receives.

    ``run_step`` calls it directly for a result of exactly that class, as ``check_training_return`` would.
    """
    loss = output.loss
    if loss.is_leaf:  # usually it has a grad_fn (is_leaf is the cheaper read): only then look closer
        _check_loss_graph(loss, "return value.loss", call)
    # A finite loss is told apart here, without calling _skip_nonfinite: this runs on every step.
    nonfinite = call.nonfinite_loss is not None and not math.isfinite(loss.item())  # .item(): the one host sync
    if nonfinite and _skip_nonfinite(loss, "return value.loss", call):
        return None, None
    # Without metadata Lightning's loops make of a bare loss exactly what they make of {"loss": loss}.
    metadata: FrozenMetadata = output.metadata  # pyright: ignore[reportAssignmentType]  # always one (StepResult.__init__)
    return (_as_lightning_dict(output) if metadata._data else loss), output


def _as_lightning_dict(result: StepResult[Any]) -> dict[str, Any]:
    """The plain dict Lightning's loops receive: ``{"loss": loss, **metadata}``."""
    metadata: FrozenMetadata = result.metadata  # pyright: ignore[reportAssignmentType]  # always one (StepResult.__init__)
    return {"loss": result.loss, **metadata._data}


def _check_legacy_training_return(output: object, call: StepCall) -> object:
    """Lightning's own returns (a Tensor, or a Mapping with 'loss'): checked, passed on unchanged."""
    if isinstance(output, torch.Tensor):
        _check_returned_loss(output, "return value", call)
        nonfinite = call.nonfinite_loss is not None and not math.isfinite(output.item())  # see accept_training_result
        return None if nonfinite and _skip_nonfinite(output, "return value", call) else output
    if type(output) is dict or isinstance(output, Mapping):
        output = cast("Mapping[object, Any]", output)  # isinstance leaves the type arguments unknown to pyright
        _warn_about_keys(output, call)
        if "loss" in output:
            loss = output["loss"]
            _check_returned_loss(loss, "return value['loss']", call)
            nonfinite = call.nonfinite_loss is not None and not math.isfinite(loss.item())  # see accept_training_result
            if nonfinite and _skip_nonfinite(loss, "return value['loss']", call):
                return None
        elif call.automatic_optimization:
            raise StepResultError(
                "return value",
                describe(output),
                "a 'loss' key: automatic optimization calls backward on it",
                _missing_loss_fix(output),
                call.hook,
            )
        if not isinstance(output, dict) and not call.automatic_optimization:
            return dict(output)  # Lightning's manual loop calls `.copy()`, which a Mapping need not have
        return output
    raise StepResultError(
        "return value",
        describe(output),
        "TrainStepResult, a loss Tensor, a dict with a 'loss' key, or None",
        _rewrite_hint(output, TrainStepResult),
        call.hook,
    )


def _check_returned_loss(loss: object, where: str, call: StepCall) -> None:
    if not is_loss_tensor(loss):
        error = loss_error(where, loss)
        error.hook = call.hook
        raise error
    if loss.is_leaf:  # usually it has a grad_fn: only then look closer
        _check_loss_graph(loss, where, call)


def _check_loss_graph(loss: torch.Tensor, where: str, call: StepCall) -> None:
    """Under automatic optimization Lightning calls backward on the loss: it must be part of a graph."""
    if loss.grad_fn is not None or not call.automatic_optimization:
        return
    if not loss.requires_grad:
        cause = (
            "the step ran with gradients disabled (torch.no_grad() or torch.inference_mode())"
            if not torch.is_grad_enabled()
            else "it was cut from the graph, e.g. by `.item()`, `.detach()`, `torch.tensor(...)` or `torch.no_grad()`"
        )
        raise StepResultError(
            where,
            f"{describe_tensor(loss)}: {cause}",
            "a loss computed from the model's parameters (requires_grad=True):"
            " automatic optimization calls backward on it",
            "return the loss tensor as computed from `self(...)`, without `.detach()`, `.item()` or"
            " `torch.no_grad()`; to step optimizers yourself, set `self.automatic_optimization = False`",
            call.hook,
        )
    if loss.grad_fn is None and not isinstance(loss, torch.nn.Parameter):
        got = f"{describe_tensor(loss)}: a leaf tensor, not computed from any parameter"
        expected = "a loss computed from the model's parameters: backward on a leaf leaves every gradient empty"
        fix = (
            "compute the loss from the model's output, e.g. `loss = F.mse_loss(self(x), y)`, instead of"
            " creating it with `torch.tensor(..., requires_grad=True)` or `.requires_grad_()`"
        )
        if call.strict:
            raise StepResultError(where, got, expected, fix, call.hook)
        # Backward on a leaf runs and trains nothing, as in plain Lightning: a no-op some steps mean
        # (an I/O benchmark), so the lenient adapter warns.
        call.warn(
            "leaf loss",
            where,
            got,
            expected + ", so the step trains nothing",
            fix + "; if training nothing is intended (an I/O benchmark, say), set"
            " `self.automatic_optimization = False` in `__init__`: Lightning then calls no backward and"
            " this check is off",
        )


def _skip_nonfinite(loss: torch.Tensor, where: str, call: StepCall) -> bool:
    """Apply the non-finite loss policy; True when the training batch must be skipped."""
    if call.nonfinite_loss is None or math.isfinite(loss.item()):  # .item(): the one host sync
        return False
    got = f"{describe_tensor(loss)} with value {loss.item()}"
    expected = "a finite loss"
    diagnose = (
        "find where training diverges: lower the learning rate, clip gradients"
        " (`Trainer(gradient_clip_val=1.0)`), check the batch for NaN/inf, or locate the op with"
        " `Trainer(detect_anomaly=True)`"
    )
    fix = diagnose + "; `nonfinite_loss='skip'` skips such training batches"
    if call.nonfinite_loss == "raise":
        raise StepResultError(where, got, expected + " (nonfinite_loss='raise')", fix, call.hook)
    if call.nonfinite_loss == "warn":
        _warn_nonfinite_once_per_run(where, got, diagnose, call)
        return False
    training = call.hook_name == "training_step"
    if call.nonfinite_loss == "skip" and training:
        if call.world_size() > 1:
            raise StepResultError(
                where,
                got,
                expected + ": nonfinite_loss='skip' cannot skip a batch under distributed training,"
                " where every process must step",
                diagnose,
                call.hook,
            )
        call.warn("nonfinite skip", where, got, expected, "skipping this batch (nonfinite_loss='skip'); " + diagnose)
        return True
    call.warn("nonfinite", where, got, expected, fix)
    return False


# The modules whose current run has reported a non-finite loss under "warn" (new_run forgets them).
_reported_nonfinite: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def new_run(module: torch.nn.Module) -> None:
    """At a run's setup: its first non-finite loss under ``"warn"`` is reported again."""
    _reported_nonfinite.discard(module)


def _warn_nonfinite_once_per_run(where: str, got: str, diagnose: str, call: StepCall) -> None:
    """``"warn"`` (the adapter's default): one warning per run, for its first non-finite loss, and train on."""
    module = call.module
    if module in _reported_nonfinite:
        return
    _reported_nonfinite.add(module)
    batch_idx = _batch_index(call)
    at = f" at batch_idx={batch_idx}" if batch_idx is not None else ""
    setting = (
        '`StepResultAdapter(nonfinite_loss="raise")`'
        if call.adapter
        else '`nonfinite_loss = "raise"` on the module class (or drop `nonfinite_loss = "warn"`: raising is its default)'
    )
    call.emit(
        StepResultWarning(
            format_problem(
                where,
                f"{got}{at} (epoch {_epoch(call)})",
                "a finite loss; training goes on as plain Lightning's does (the value reaches backward and the"
                " weights), and later non-finite losses in this run are not reported (nonfinite_loss='warn')",
                f"to stop the run at the first one, before backward, set {setting}; {diagnose};"
                " `nonfinite_loss='skip'` skips such training batches",
                call.hook,
            )
        )
    )


def _batch_index(call: StepCall) -> int | None:
    """The ``batch_idx`` Lightning passed to the step now checked: its second argument (after ``self``
    for a step wrapped on the class), or, for a training step that takes ``dataloader_iter``, the loop's."""
    args = call.step_args
    if args and args[0] is call.module:
        args = args[1:]
    if len(args) >= 2 and type(args[1]) is int:
        return args[1]
    trainer = trainer_of(call.module)
    if call.hook_name == "training_step" and trainer is not None:
        return int(trainer.fit_loop.epoch_loop.batch_idx)
    return None


def _epoch(call: StepCall) -> int:
    trainer = trainer_of(call.module)
    return int(trainer.current_epoch) if trainer is not None else 0


def _warn_about_keys(output: Mapping[Any, Any], call: StepCall) -> None:
    for key in output:
        if not isinstance(key, str):
            call.warn(
                "non-str key",
                "return value",
                f"key {describe(key)} in {describe(output)}",
                "str keys: Lightning and loggers address outputs by name",
                f"use a string key, e.g. '{_short_str(key)}'",
            )
        elif key in LEGACY_KEYS:
            call.warn(
                f"legacy key {key}",
                f"return value[{key!r}]",
                f"{describe(output)}: the Lightning 0.x {key!r} key, which Lightning 1.0+ ignores",
                *LEGACY_KEYS[key],
            )


def _wrong_result_class(output: StepResult[Any], expected: type[StepResult[Any]], call: StepCall) -> StepResultError:
    right_hooks = "training_step" if expected is TrainStepResult else "validation_step and test_step"
    return StepResultError(
        "return value",
        f"{type(output).__name__} (loss {describe_tensor(output.loss)}, metadata keys {list(output.metadata)})",
        f"{expected.__name__} from {call.hook_name} ({type(output).__name__} is for the other loop)",
        f"return `{expected.__name__}(loss=..., metadata=...)`; {expected.__name__} is the result type of {right_hooks}",
        call.hook,
    )


def _not_a_result(output: object, expected: type[StepResult[Any]], call: StepCall) -> StepResultError:
    return StepResultError(
        "return value",
        describe(output),
        f"{expected.__name__} (or None to skip the batch)",
        _rewrite_hint(output, expected),
        call.hook,
    )


def _rewrite_hint(output: object, expected: type[StepResult[Any]]) -> str:
    name = expected.__name__
    if isinstance(output, torch.Tensor):
        return f"wrap the loss: `return {name}(loss=loss)`"
    if isinstance(output, Mapping):
        output = cast("Mapping[object, Any]", output)  # isinstance leaves the type arguments unknown to pyright
        keys = [k for k in output]  # not list(): a mapping's __len__ may fail where iterating does not
        loss_key = _loss_key(output)
        # The 0.x keys are not metadata: their fix is the warning's (and the migration guide's).
        legacy = [LEGACY_KEYS[k][1] for k in keys if isinstance(k, str) and k in LEGACY_KEYS]
        # Only str keys are compared: a user's key object may fail its __eq__.
        others = [k for k in keys if not (isinstance(k, str) and (k == loss_key or k in LEGACY_KEYS))]
        metadata = ", ".join(f"{short_repr(k)}: ..." for k in others[:4]) + (", ..." if len(others) > 4 else "")
        result = f"{name}(loss=..., metadata={{{metadata}}})" if others else f"{name}(loss=...)"
        misspelt = f", with the {loss_key!r} value as the loss" if loss_key not in (None, "loss") else ""
        return "; ".join([*legacy, f"return `{result}`{misspelt}"])
    if isinstance(output, (tuple, list)):
        return f"name the parts: `return {name}(loss=loss, metadata={{'logits': logits}})`"
    if isinstance(output, (float, int)):
        return f"return the loss tensor, not a Python number: `return {name}(loss=loss)` without `.item()`"
    return f"return `{name}(loss=loss, metadata={{...}})` with `loss` a tensor computed from the model's output"


def _loss_key(output: Mapping[Any, Any]) -> str | None:
    """The key a dict holds its loss under: 'loss', a misspelling of it, or the one key ending in
    'loss' ('val_loss'); None where there is none, and the fix's `loss=...` is the step's loss."""
    if "loss" in output:
        return "loss"
    suffixed = [k for k in output if isinstance(k, str) and k.endswith("loss")]
    return _misspelt_loss_key(output) or (suffixed[0] if len(suffixed) == 1 else None)


def _misspelt_loss_key(output: Mapping[Any, Any]) -> str | None:
    names = [k for k in output if isinstance(k, str)]
    # 0.7: catches "Loss", "losss", "los" but not "logits" (0.6)
    close = [k for k in names if k.lower() == "loss"] or difflib.get_close_matches("loss", names, n=1, cutoff=0.7)
    return close[0] if close else None


def _missing_loss_fix(output: Mapping[Any, Any]) -> str:
    close = _misspelt_loss_key(output)
    if close is not None:
        return f"rename the key {close!r} to 'loss' (keys are case-sensitive), or return TrainStepResult(loss=...)"
    return "add the loss under 'loss', or return `TrainStepResult(loss=loss, metadata={...})`"


def _short_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return "name"


def _stage(call: StepCall) -> str:
    return "validation" if call.hook_name == "validation_step" else "test"
