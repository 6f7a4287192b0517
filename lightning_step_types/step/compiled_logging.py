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

A step that raises logs nothing of its call. Where dynamo runs a frame eagerly (it cannot compile
it), ``self.log`` there calls Lightning at once. A torch without ``torch.compiler.is_compiling``
notes nothing: every call goes to Lightning inside the compiled step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["logs_after", "record_log", "recording_logs"]

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
