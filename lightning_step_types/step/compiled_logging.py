"""``self.log`` inside a compiled typed step: noted while the compiled step runs, made as soon as it returns.

Lightning's ``self.log`` ends in ``_ResultCollection.log``, which Lightning marks
``torch.compiler.disable``: dynamo breaks a compiled step's graph at every such call (and traces
Lightning's checks before it, guarding on the Trainer's state), and ``fullgraph=True`` refuses the
step. Under ``trainer.fit(torch.compile(model))`` the typed module compiles its user's steps itself
(``wrapping.compile_inside_adapted_steps``) and runs each through ``logs_after``. While dynamo
traces such a step, ``TypedLightningModule.log`` does not call Lightning: it appends the call to a
list, a side effect dynamo replays after the graph, every time the compiled step runs. As soon as
the step returns, ``logs_after`` makes each call, in order, with Lightning's own ``self.log``: in
the same hook (``training_step``, ...), before the library's checks, ``log_loss`` and declared
metrics, with the tensors the graph computed.

An existing module under ``StepResultAdapter`` gets the same for the run: the adapter compiles its
user's steps alone (``wrapping.adapted_bound_step``) and sets ``log_after_compiled_step`` as the
instance's ``log``, which notes the call in the same way and otherwise calls the class's own ``log``.

A step that raises logs nothing of its call. Where dynamo runs a frame eagerly (it cannot compile
it), ``self.log`` there calls Lightning at once. A torch without ``torch.compiler.is_compiling``
notes nothing: every call goes to Lightning inside the compiled step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["log_after_compiled_step", "logs_after", "record_log", "recording_logs"]

_Call = tuple[Callable[..., None], tuple[Any, ...]]

_pending: list[_Call] = []  # the calls noted by the compiled step now running
_running = False  # a step run by `logs_after` is running
_is_compiling: Callable[[], bool] | None = getattr(torch.compiler, "is_compiling", None)


def recording_logs() -> bool:
    """Whether a ``self.log`` call now is traced by dynamo, inside a step run by ``logs_after``."""
    return _running and _is_compiling is not None and _is_compiling()


def record_log(log: Callable[..., None], *args: Any) -> None:
    """Note ``log(*args)``, to be made when the compiled step returns (a plain function: dynamo rebuilds it by name)."""
    _pending.append((log, args))


def logs_after(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``compiled`` with its ``self.log`` calls noted, then make them."""

    def step_then_log(*args: Any, **kwargs: Any) -> Any:
        global _running
        outer = _running
        start = len(_pending)  # 0, unless a compiled step runs inside another
        _running = True
        try:
            output = compiled(*args, **kwargs)
        except BaseException:
            del _pending[start:]
            raise
        finally:
            _running = outer
        calls = _pending[start:]
        del _pending[start:]
        for log, log_args in calls:
            log(*log_args)
        return output

    return step_then_log


def log_after_compiled_step(module: Any, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
    """An adapted module's ``self.log`` for a compiled run (set on the instance, bound to it): noted while
    dynamo traces a step run by ``logs_after``, otherwise (and when the step returns) the class's ``log``."""
    if recording_logs():
        record_log(_class_log, module, name, value, args, kwargs)
    else:
        _class_log(module, name, value, args, kwargs)


def _class_log(module: Any, name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    log: Any = module.__class__.log  # the class's own (the instance's is log_after_compiled_step)
    log(module, name, value, *args, **kwargs)
