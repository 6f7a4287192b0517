"""Lightning 1.x code that Lightning 2 refuses or ignores, found in a LightningModule, with its replacement.

The codemod does not rewrite these (the replacement changes where values are collected); it reports
each, so that no run is silent about code that will not work under Lightning 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from lightning_step_types.migrate.positions import Positions

if TYPE_CHECKING:
    from lightning_step_types.migrate.steps import ClassInfo

_EPOCH_END = (
    "removed in Lightning 2.0 (it raises NotImplementedError): use `on_{stage}_epoch_end(self)`, which gets no"
    " outputs; append what the step computes to a list attribute and clear it there"
)
_STEP_END = (
    "removed in Lightning 2.0: do its work at the end of `{hook}` (on several devices, gather with `self.all_gather`)"
)

# Hook defined in a LightningModule -> what replaces it in Lightning 2.
REMOVED_HOOKS = {
    "training_epoch_end": _EPOCH_END.format(stage="train"),
    "validation_epoch_end": _EPOCH_END.format(stage="validation"),
    "test_epoch_end": _EPOCH_END.format(stage="test"),
    "training_step_end": _STEP_END.format(hook="training_step"),
    "validation_step_end": _STEP_END.format(hook="validation_step"),
    "test_step_end": _STEP_END.format(hook="test_step"),
    "on_epoch_start": "removed in Lightning 2.0: use `on_train_epoch_start` (or `on_validation_epoch_start`...)",
    "on_epoch_end": "removed in Lightning 2.0: use `on_train_epoch_end` (or `on_validation_epoch_end`...)",
    "on_batch_start": "removed in Lightning 2.0: use `on_train_batch_start`",
    "on_batch_end": "removed in Lightning 2.0: use `on_train_batch_end`",
    "on_pretrain_routine_start": "removed in Lightning 2.0: use `on_fit_start`",
    "on_pretrain_routine_end": "removed in Lightning 2.0: use `on_fit_start`",
    "on_hpc_save": "removed in Lightning 2.0: use `on_save_checkpoint`",
    "on_hpc_load": "removed in Lightning 2.0: use `on_load_checkpoint`",
    "get_progress_bar_dict": "removed in Lightning 2.0: override `get_metrics` of a `ProgressBar` callback",
}
# training_step parameter -> what replaces it.
REMOVED_STEP_PARAMETERS = {
    "optimizer_idx": (
        "`optimizer_idx` was removed in Lightning 2.0 (several optimizers need manual optimization): set"
        " `self.automatic_optimization = False` and step each of `self.optimizers()` in training_step"
    ),
    "hiddens": (
        "`hiddens` (truncated backpropagation through time) was removed in Lightning 2.0: keep the hidden"
        " state on the module and split the sequence by hand with manual optimization"
    ),
}


# Hooks Lightning 2 refuses to run a module with (NotImplementedError), whoever calls them. The other
# removed hooks are merely never called by Lightning 2: one the class calls itself is its own helper.
REFUSED_HOOKS = {"training_epoch_end", "validation_epoch_end", "test_epoch_end"}


def leftovers(info: ClassInfo, positions: Positions) -> list[tuple[str, int, str]]:
    """``(Class.method, line, what replaces it)`` for each Lightning 1.x leftover in the class's own body."""
    found: list[tuple[str, int, str]] = []
    called: set[str] | None = None
    for statement in info.node.body.body:
        if not isinstance(statement, cst.FunctionDef):
            continue
        name = statement.name.value
        where = f"{info.qualname}.{name}"
        if name in REMOVED_HOOKS and name not in REFUSED_HOOKS:
            if called is None:
                called = {n for c in (info, *info.ancestors(), *info.descendants()) for n in _self_calls(c.node)}
            if name in called:  # `self.on_epoch_end(outputs)` from `on_train_epoch_end`: a helper of the class
                continue
        if name in REMOVED_HOOKS:
            found.append((where, positions.line(statement.name), REMOVED_HOOKS[name]))
        if name == "training_step":
            params = statement.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                if param.name.value in REMOVED_STEP_PARAMETERS:
                    found.append((where, positions.line(param.name), REMOVED_STEP_PARAMETERS[param.name.value]))
    return found


def _self_calls(node: cst.ClassDef) -> set[str]:
    """Names of the methods the class's own methods call on their first parameter (``self.name(...)``)."""

    class _Calls(cst.CSTVisitor):
        def __init__(self, self_name: str) -> None:
            super().__init__()
            self.self_name = self_name
            self.found: set[str] = set()

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            receiver = func.value if isinstance(func, cst.Attribute) else None
            if isinstance(func, cst.Attribute) and isinstance(receiver, cst.Name) and receiver.value == self.self_name:
                self.found.add(func.attr.value)

    found: set[str] = set()
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.params.params:
            visitor = _Calls(statement.params.params[0].name.value)
            statement.body.visit(visitor)
            found |= visitor.found
    return found
