"""When the code shows that an expression is a loss tensor, and why not when it does not.

Names decide nothing: ``compute_loss(batch)`` is a loss only if every return of ``compute_loss``
shows one. The evidence is, recursively (to ``MAX_DEPTH`` calls deep):

- a call to a ``torch.nn.functional`` loss (``F.mse_loss(...)``, ``F.cross_entropy(...)``) or to a
  loss module (an instance of a class named ``*Loss``, as ``torch.nn``'s: ``nn.MSELoss()(a, b)``,
  ``self.criterion(a, b)`` after ``self.criterion = nn.CrossEntropyLoss()``), without
  ``reduction="none"``;
- arithmetic with at least one loss (``loss + 0.1 * reg``), a reduction of a loss (``loss.mean()``),
  the sum of a dict of losses (``sum(loss_dict.values())``, ``sum(l for l in losses.values())``);
- a local variable every assignment of which shows a loss, including one element of a tuple a
  helper returns (``loss, logs = self.compute_loss(batch)``) or one key of a dict;
- a call to a method of the class (or of its bases in the run) or to a module-level function of the
  file, every return of which shows a loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import libcst as cst

from lightning_step_types.migrate.conventions import (
    LOSS_FUNCTIONS,
    LOSS_PRESERVING_METHODS,
    NUMBER_BUILTINS,
    NUMBER_METHODS,
)
from lightning_step_types.migrate.positions import Positions
from lightning_step_types.migrate.scan import Binding, BodyScan, scan_body
from lightning_step_types.migrate.stages import Literals, call_arguments, call_literals, reachable_returns
from lightning_step_types.migrate.steps import ClassInfo, FileContext
from lightning_step_types.migrate.syntax import container_kind, is_none, name_mentions, short, string_key, tail_name

MAX_DEPTH = 3  # helper calls followed from a step: step -> helper -> helper -> helper

_BOUND_BY = {
    "for": "bound by a for loop",
    "with": "bound by a with statement",
    "except": "bound by an except clause",
    "global": "declared global or nonlocal",
    "def": "bound to a nested function",
    "class": "bound to a nested class",
    "del": "deleted",
}
# Methods (and torch functions) that map one value to one value: a scalar stays a scalar.
_ONE_TO_ONE = {"detach", "clone", "float", "double", "cpu", "compute", "sqrt", "exp", "log", "abs", "neg", "square"}
_TORCH_ONE_TO_ONE = {f"torch.{name}" for name in ("sqrt", "exp", "log", "abs", "neg", "square")}
# Where a hint names the call the step makes (filled in at the step's own call, however deep the dict is).
_STEP_CALL = "`out = <the step's call>`"
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power, cst.FloorDivide)


@dataclasses.dataclass(frozen=True)
class Scope:
    """The function an expression is read in: its bindings, parameters, class and file."""

    function: cst.FunctionDef
    scan: BodyScan
    params: frozenset[str]
    self_name: str | None  # None in a module-level function
    owner: ClassInfo | None
    file: FileContext
    depth: int = 0
    at: cst.Return | None = None  # the return being classified: bindings that cannot reach it are ignored
    visiting: frozenset[str] = frozenset()  # names whose assignments are being followed (`loss = loss + x`)
    literals: Literals = ()  # parameters the call being followed binds to a literal (`stage="train"`)
    # parameter -> what the call being followed passes for it, and the caller's scope to read that in
    arguments: tuple[tuple[str, cst.BaseExpression, Scope], ...] = ()
    current: cst.CSTNode | None = None  # the binding whose value is being read (`loss = self.reg(loss)`)
    before: cst.CSTNode | None = None  # read the next name from its bindings above this one only

    @property
    def positions(self) -> Positions:
        return self.file.positions

    def bindings(self, name: str) -> list[Binding]:
        """The bindings of ``name`` that may reach the return ``at``: after a plain ``name = ...`` in the
        return's own block, the earlier ones are overwritten (``output = self(x); ...; output = {...}``)."""
        found = self.scan.bindings.get(name, [])
        if self.at is None or len(found) < 2:
            return found
        block = _block_of(self.function, self.at)
        if block is None:
            return found
        last: cst.CSTNode | None = None
        for statement in block:
            if isinstance(statement, cst.SimpleStatementLine) and self.at in statement.body:
                break
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                small = statement.body[0]
                target = None
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    target = small.target
                if isinstance(target, cst.Name) and target.value == name:
                    last = small
        if last is None:
            return found
        start = self.positions.line(last)
        end = self.positions.line(self.at)
        return [b for b in found if b.node is last or start < self.positions.line(b.node) <= end]


def _block_of(function: cst.FunctionDef, ret: cst.Return) -> Sequence[cst.BaseStatement] | None:
    """The statements of the block that holds ``ret`` directly."""

    class _Finder(cst.CSTVisitor):
        found: Sequence[cst.BaseStatement] | None = None

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            if any(isinstance(st, cst.SimpleStatementLine) and ret in st.body for st in node.body):
                self.found = node.body

    finder = _Finder()
    function.visit(finder)
    return finder.found


def parameters(function: cst.FunctionDef) -> frozenset[str]:
    params = function.params
    names = {p.name.value for p in (*params.params, *params.kwonly_params, *params.posonly_params)}
    for extra in (params.star_arg, params.star_kwarg):
        if isinstance(extra, cst.Param):
            names.add(extra.name.value)
    return frozenset(names)


def scope_of(
    function: cst.FunctionDef,
    owner: ClassInfo | None,
    file: FileContext,
    depth: int = 0,
    scan: BodyScan | None = None,
    closure_self: str | None = None,
    literals: Literals = (),
) -> Scope:
    """The scope of a method (``owner`` set), a module function, or (``closure_self``) a function
    nested in a method, which sees the method's ``self``."""
    params = function.params.params
    self_name = params[0].name.value if owner is not None and params else None
    if closure_self is not None:
        self_name = closure_self if closure_self not in parameters(function) else None
    return Scope(
        function, scan or scan_body(function), parameters(function), self_name, owner, file, depth, literals=literals
    )


def is_loss_module_constructor(value: cst.BaseExpression) -> bool:
    """``nn.CrossEntropyLoss(...)``, ``smp.losses.JaccardLoss(...)``: a loss module, one value per call."""
    return isinstance(value, cst.Call) and (tail_name(value.func) or "").endswith("Loss") and not _unreduced(value)


class LossRules:
    """Whether the code shows an expression to be a loss tensor; why not when it does not."""

    def __init__(self, positions: Positions) -> None:
        self.positions = positions

    def problem(self, expr: cst.BaseExpression, scope: Scope) -> str | None:
        """None if the code shows ``expr`` to be a loss tensor, else why it does not."""
        kind = container_kind(expr)
        if kind is not None:
            return f"returns {kind}"
        if isinstance(expr, cst.Name):
            return self._name_problem(expr.value, scope)
        if isinstance(expr, cst.Call):
            return self._call_problem(expr, scope)
        if isinstance(expr, cst.Subscript):
            return self._item_problem(expr, scope)
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ARITHMETIC):
            for side in (expr.left, expr.right):
                side_kind = container_kind(side)
                if side_kind is not None and side_kind != "a Python number":
                    return f"returns `{short(expr)}`, which involves {side_kind}"
            if self.problem(expr.left, scope) is None or self.problem(expr.right, scope) is None:
                return None
            return f"returns `{short(expr)}`, which the code does not show to be a loss tensor"
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            return self.problem(expr.expression, scope)
        return f"returns `{short(expr)}`, which the code does not show to be a loss tensor"

    # -- names --

    def _name_problem(self, name: str, scope: Scope) -> str | None:
        if name in scope.params:
            # `return loss` in `_regularization(self, loss)`, after `loss += ...` at most: what the call passes
            passed = next(((e, s) for p, e, s in scope.arguments if p == name), None)
            rebound = [b for b in scope.scan.bindings.get(name, []) if b.kind != "augassign"]
            if passed is None or rebound or self.problem(*passed) is not None:
                return f"returns its parameter `{name}`"
            return None
        if scope.before is not None:  # an argument of `loss = self.reg(loss)`: the `loss` bound above it
            limit = self.positions_of(scope).line(scope.before)
            found = scope.scan.bindings.get(name, [])
            bindings = [b for b in found if self.positions_of(scope).line(b.node) < limit]
            scope = dataclasses.replace(scope, visiting=scope.visiting | {name}, before=None)
        else:
            if name in scope.visiting:  # `loss = loss * 2`: no evidence from itself (`loss + F.l1_loss(...)` has some)
                return f"returns a variable `{name}` computed from itself"
            scope = dataclasses.replace(scope, visiting=scope.visiting | {name})
            bindings = scope.bindings(name)
        if not bindings:
            return f"returns a variable `{name}` built elsewhere"
        evidence: list[str | None] = []
        for binding in bindings:
            line = self.positions_of(scope).line(binding.node)
            how = _BOUND_BY.get(binding.kind)
            if how is not None:
                return f"returns a variable `{name}` {how} at line {line}"
            value = binding.value
            if binding.kind == "augassign":
                continue  # `loss += 0.1 * reg` keeps a loss a loss (the first assignment decides)
            if value is None:
                return f"returns a variable `{name}` whose value the code does not show (line {line})"
            if is_none(value):
                return f"returns a variable `{name}` that is None on some paths (line {line}): return None there"
            if binding.kind == "unpack":
                evidence.append(self._element_problem(value, binding.index, scope, name, line))
                continue
            value_kind = container_kind(value)
            if isinstance(value, cst.Dict):
                if scope.depth > 0:  # in a helper: the step builds its result from what the helper returns
                    return (
                        f"returns a variable `{name}` holding a dict built at line {line}; in the step, build the"
                        f" result from the dict its call returns ({_STEP_CALL}, then {_loss_item(value)})"
                    )
                return (
                    f"returns a variable `{name}` holding a dict built at line {line}, which the method also uses"
                    " otherwise than by setting and reading its keys; return the dict itself"
                )
            if value_kind is not None:
                shown = short(value, 32)
                return f"returns a variable `{name}` that is assigned {value_kind} (`{shown}`) at line {line}"
            number = self.number_problem(value)
            if number is not None and not is_sum_idiom(value):
                return f"returns a variable `{name}` that is assigned {number} at line {line}"
            if _unreduced(value):
                how, why = _reduction(value)
                return f"returns a variable `{name}` computed with {how} at line {line} ({why})"
            inner = self.problem(value, dataclasses.replace(scope, current=binding.node))
            if inner is not None:
                why = (
                    _strip_returns(inner).removeprefix(f"`{short(value)}`").removeprefix(":").removeprefix(",").strip()
                )
                joint = ", " if why.startswith("which") else ": "
                inner = f"returns a variable `{name}` (from `{short(value)}`, line {line}){joint}{why}"
            evidence.append(inner)
        if not evidence:
            return f"returns a variable `{name}` that is only updated in place, never assigned"
        return next((e for e in evidence if e is not None), None)

    def _element_problem(
        self, value: cst.BaseExpression, index: int | None, scope: Scope, name: str, line: int
    ) -> str | None:
        """``name`` is element ``index`` of an unpacked ``value`` (``loss, logs = self.compute_loss(batch)``)."""
        if index is None:
            return f"returns a variable `{name}` unpacked with `*` at line {line}"
        if isinstance(value, (cst.Tuple, cst.List)):
            if index < len(value.elements) and not isinstance(value.elements[index], cst.StarredElement):
                return self.problem(value.elements[index].value, scope)
            return f"returns a variable `{name}` unpacked from `{short(value)}` at line {line}"
        if isinstance(value, cst.Call):
            found = self._callee(value, scope)
            if isinstance(found, str):
                return f"returns a variable `{name}` unpacked from `{short(value)}` at line {line}: {found}"
            for function, owner, file in found:
                helper = scope_of(function, owner, file, scope.depth + 1)
                for ret in helper.scan.returns:
                    returned = ret.value
                    ret_line = file.positions.line(ret)
                    if not isinstance(returned, cst.Tuple) or index >= len(returned.elements):
                        return (
                            f"returns a variable `{name}` unpacked from `{short(value)}` at line {line}, and"
                            f" `{function.name.value}` returns `{short(returned or ret)}` at line {ret_line}"
                        )
                    element = returned.elements[index]
                    inner = None if isinstance(element, cst.StarredElement) else self.problem(element.value, helper)
                    if isinstance(element, cst.StarredElement) or inner is not None:
                        return (
                            f"returns a variable `{name}`: element {index} of what `{function.name.value}` returns"
                            f" at line {ret_line}, `{short(element.value)}`, which the code does not show"
                            " to be a loss tensor"
                        )
            return None
        return f"returns a variable `{name}` unpacked from `{short(value)}` at line {line}"

    def _item_problem(self, expr: cst.Subscript, scope: Scope) -> str | None:
        """``out["loss"]``: a key of a dict literal of this function, or of the dicts a helper returns."""
        key = (
            string_key(expr.slice[0].slice.value)
            if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index)
            else None
        )
        fail = f"returns `{short(expr)}`, which the code does not show to be a loss tensor"
        if key is None or not isinstance(expr.value, cst.Name):
            return fail
        bindings = scope.bindings(expr.value.value)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
            return fail
        if expr.value.value in scope.scan.mutations:
            return fail
        source = bindings[0].value
        if isinstance(source, cst.Dict):
            return self._dict_key_problem(source, key, scope) and fail
        if isinstance(source, cst.Call):
            found = self._callee(source, scope)
            if isinstance(found, str):
                return f"{fail}: {found}"
            for function, owner, file in found:
                helper = scope_of(function, owner, file, scope.depth + 1)
                for ret in helper.scan.returns:
                    if not isinstance(ret.value, cst.Dict) or self._dict_key_problem(ret.value, key, helper):
                        return fail
            return None
        return fail

    def _dict_key_problem(self, value: cst.Dict, key: str, scope: Scope) -> str | None:
        for element in value.elements:
            if isinstance(element, cst.DictElement) and string_key(element.key) == key:
                return self.problem(element.value, scope)
        return f"no key {key!r}"

    # -- values to log --

    def scalar_problem(self, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> str | None:
        """None when the code shows ``expr`` to be one value ``self.log`` accepts: a number, a loss, a
        full reduction, a torchmetrics metric or its value; else why not."""
        fail = f"`{short(expr)}` is not shown to be one value"
        if depth > MAX_DEPTH:
            return fail
        if isinstance(expr, (cst.Integer, cst.Float)) or self.number_problem(expr) is not None:
            return None
        if isinstance(expr, cst.Name):
            if self.problem(expr, scope) is None:
                return None  # a loss: one value (`"log": {"train_loss": loss}`, `loss += reg` included)
            bindings = scope.bindings(expr.value)
            if expr.value in scope.params or not bindings:
                return fail
            for binding in bindings:
                if binding.kind != "assign" or binding.value is None:
                    return fail
                if self.scalar_problem(binding.value, scope, depth + 1) is not None:
                    return fail
            return None
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ARITHMETIC):
            if all(self.scalar_problem(side, scope, depth + 1) is None for side in (expr.left, expr.right)):
                return None
            return fail
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
            return self.scalar_problem(expr.expression, scope, depth + 1)
        if self._is_metric(expr, scope):
            return None
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _ONE_TO_ONE:
            return self.scalar_problem(expr.func.value, scope, depth + 1)  # loss.sqrt(), acc.detach()
        qualified = scope.file.imports.qualify(expr.func) if isinstance(expr, cst.Call) else None
        if isinstance(expr, cst.Call) and qualified in _TORCH_ONE_TO_ONE and expr.args:
            return self.scalar_problem(expr.args[0].value, scope, depth + 1)  # torch.exp(loss)
        if isinstance(expr, cst.Call) and self._is_metric(expr.func, scope):
            return None  # self.train_acc(preds, y): a metric's value for the batch
        if self.problem(expr, scope) is None:
            return None  # a loss, or a full reduction
        return fail

    @staticmethod
    def _is_metric(expr: cst.BaseExpression, scope: Scope) -> bool:
        """A torchmetrics metric: ``self.acc`` after ``self.acc = torchmetrics.Accuracy(...)``, or a call of
        ``torchmetrics.functional``."""
        metrics = ("torchmetrics.", "pytorch_lightning.metrics.")
        if isinstance(expr, cst.Call):
            return (scope.file.imports.qualify(expr.func) or "").startswith(tuple(m + "functional." for m in metrics))
        if not (
            isinstance(expr, cst.Attribute)
            and isinstance(expr.value, cst.Name)
            and expr.value.value == scope.self_name
            and scope.owner is not None
        ):
            return False
        found: list[bool] = []
        for info in (scope.owner, *scope.owner.ancestors(), *scope.owner.descendants()):
            for value in info.attribute_values().get(expr.attr.value, []):
                qualified = info.file.imports.qualify(value.func) if info.file and isinstance(value, cst.Call) else None
                found.append((qualified or "").startswith(metrics))
        return bool(found) and all(found)

    # -- calls --

    def number_problem(self, value: cst.BaseExpression) -> str | None:
        """Values that are Python numbers: ``x.item()``, ``float(x)``."""
        if isinstance(value, cst.Call):
            func = value.func
            if isinstance(func, cst.Attribute) and func.attr.value in NUMBER_METHODS:
                return f"a Python number (`{short(value)}`)"
            if isinstance(func, cst.Name) and func.value in NUMBER_BUILTINS:
                return f"a Python number (`{short(value)}`)"
        if isinstance(value, (cst.Integer, cst.Float)):
            return f"a Python number (`{short(value)}`)"
        return None

    def _call_problem(self, call: cst.Call, scope: Scope) -> str | None:
        if is_sum_idiom(call):
            return self._sum_problem(call, scope)
        number = self.number_problem(call)
        if number is not None:
            return f"returns {number}"
        if _unreduced(call):
            how, why = _reduction(call)
            return f"returns `{short(call)}`, computed with {how} ({why})"
        func = call.func
        qualified = scope.file.imports.qualify(func) or ""
        if _full_reduction(call, qualified):
            return None  # `x.mean()`, `torch.sum(x)`: one value (x is a tensor whenever the step ran before)
        if qualified == "torch.tensor" and call.args and isinstance(call.args[0].value, (cst.Integer, cst.Float)):
            return None  # torch.tensor(0.0, requires_grad=True): a scalar tensor
        if isinstance(func, cst.Attribute) and func.attr.value in LOSS_PRESERVING_METHODS:
            inner = self.problem(func.value, scope)
            if inner is None:
                return None
            return f"returns `{short(call)}`, which the code does not show to be a loss tensor"
        if _is_loss_function(func, scope.file):
            return None
        if isinstance(func, cst.Call) and is_loss_module_constructor(func):
            return None  # nn.MSELoss()(a, b)
        found = self._callee(call, scope)
        if isinstance(found, str):
            return f"returns `{short(call)}`: {found}"
        for function, owner, file in found:
            nested = function in scope.scan.nested_functions
            closure = scope.self_name if nested else None
            is_method = owner is not None and not nested
            literals = self.literals_for(call, function, is_method, scope)
            # what the call passes, read where the call is (above the assignment it is part of)
            passed = dataclasses.replace(scope, before=scope.current)
            arguments = tuple((p, e, passed) for p, e in call_arguments(call, function, is_method))
            trouble = self.function_problem(
                function, owner, file, scope.depth + 1, closure, scope.file, literals, arguments
            )
            if trouble is not None:
                if scope.depth == 0:  # the step's own call: the one to build its result from
                    trouble = trouble.replace(_STEP_CALL, f"`out = {short(call.func)}(...)`")
                return f"returns what `{short(call.func)}` returns: {trouble}"
        return None

    @staticmethod
    def literals_for(call: cst.Call, function: cst.FunctionDef, is_method: bool, scope: Scope) -> Literals:
        """The helper's parameters this call binds to literals (``stage="train"``)."""
        return call_literals(call, function, is_method, dict(scope.literals), scan_body(function))

    def _callee(
        self, call: cst.Call, scope: Scope
    ) -> list[tuple[cst.FunctionDef, ClassInfo | None, FileContext]] | str:
        """The functions a call may run (a method with its overrides, a module function), or why
        the code of the callee cannot be seen. An empty list means a loss module (no code to follow)."""
        if scope.depth >= MAX_DEPTH:
            return f"helpers are followed {MAX_DEPTH} calls deep, no further"
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and scope.self_name is not None
            and func.value.value == scope.self_name
            and scope.owner is not None
        ):
            return self._method(scope.owner, func.attr.value)
        if isinstance(func, cst.Name) and scope.owner is not None and func.value == scope.self_name:
            return self._method(scope.owner, "forward")  # self(x) runs forward
        if isinstance(func, cst.Name):
            bindings = scope.scan.bindings.get(func.value, [])
            if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, cst.FunctionDef):
                return [(bindings[0].node, scope.owner, scope.file)]  # a function nested in this one
            if bindings:
                values = [b.value for b in bindings]
                if all(
                    b.kind == "assign" and v is not None and is_loss_module_constructor(v)
                    for b, v in zip(bindings, values)
                ):
                    return []
                return f"`{func.value}` is a local variable the code does not show to be a loss function"
            function = scope.file.functions.get(func.value)
            if function is not None:
                return [(function, None, scope.file)]
            qualified = scope.file.imports.qualify(func) or ""
            if "." in qualified:  # `from .utils import compute_loss`: a function of another file of the run
                module, name = qualified.rsplit(".", 1)
                found: list[tuple[cst.FunctionDef, ClassInfo | None, FileContext]] = [
                    (f.functions[name], None, f) for f in scope.file.modules_named(module) if name in f.functions
                ]
                if len(found) == 1:
                    return found
            return f"`{func.value}` is not defined in the files given"
        return f"`{short(func)}` is not a function the codemod can follow"

    def _method(self, owner: ClassInfo, name: str) -> list[tuple[cst.FunctionDef, ClassInfo | None, FileContext]] | str:
        """``self.name(...)``: the definition the class runs, and those of its subclasses in the run."""
        found: list[tuple[cst.FunctionDef, ClassInfo | None, FileContext]] = []
        for info in (owner, *owner.ancestors()):
            function = info.defines(name)
            if function is not None and info.file is not None:
                found.append((function, info, info.file))
                break
        if found:
            for info in owner.descendants():
                function = info.defines(name)
                if function is not None and info.file is not None:
                    found.append((function, info, info.file))
            return found
        assigned: list[tuple[cst.BaseExpression, FileContext | None]] = []
        for info in (owner, *owner.ancestors(), *owner.descendants()):
            assigned += [(value, info.file) for value in info.attribute_values().get(name, [])]
        unresolved = owner.unresolved_in_hierarchy()
        if assigned:
            if all(is_loss_module_constructor(v) or _is_loss_function(v, file) for v, file in assigned):
                return []
            shown = next(v for v, file in assigned if not (is_loss_module_constructor(v) or _is_loss_function(v, file)))
            return f"`self.{name}` is assigned `{short(shown, 40)}`, which the code does not show to be a loss function"
        if unresolved:
            base = unresolved[0].split(".")[-1]
            return (
                f"`self.{name}` is not defined in the files given (it may come from `{base}`;"
                f" pass the file that defines `{base}`)"
            )
        return f"`self.{name}` is not defined in the files given"

    def function_problem(
        self,
        function: cst.FunctionDef,
        owner: ClassInfo | None,
        file: FileContext,
        depth: int,
        closure_self: str | None = None,
        caller: FileContext | None = None,
        literals: Literals = (),
        arguments: tuple[tuple[str, cst.BaseExpression, Scope], ...] = (),
    ) -> str | None:
        """Why not every return of a helper (that a call with ``literals`` reaches) shows a loss tensor,
        or None if each does. ``arguments``: what the call passes for each parameter."""
        scope = scope_of(function, owner, file, depth, closure_self=closure_self, literals=literals)
        scope = dataclasses.replace(scope, arguments=arguments)
        name = function.name.value
        place = "line" if caller is None or caller is file else f"{file.path} line"
        if scope.scan.yields:
            return f"`{name}` is a generator"
        if function.decorators:
            return f"`{name}` is decorated (`@{short(function.decorators[0].decorator)}`)"
        returns, leaves = reachable_returns(function, scope.scan, literals)
        if not returns or not leaves:
            return f"`{name}` ({place} {file.positions.line(function.name)}) may return None"
        for ret in returns:
            line = file.positions.line(ret)
            if is_none(ret.value):
                return f"`{name}` returns None at {place} {line}"
            assert ret.value is not None
            kind = container_kind(ret.value)
            if kind is not None:
                fix = ""
                callee = f"self.{name}" if owner is not None and closure_self is None else name
                if kind == "a tuple":
                    fix = f"; unpack it (`loss, ... = {callee}(...)`) and return the loss"
                elif kind == "a dict":
                    fix = f"; build the result from it ({_STEP_CALL}, then {_loss_item(ret.value)})"
                return f"{kind} ({place} {line}){fix}"
            trouble = self.problem(ret.value, dataclasses.replace(scope, at=ret))
            if trouble is not None:
                return f"`{name}` {place} {line} {trouble}"
        return None

    def is_helper_loss_dict(self, call: cst.Call, scope: Scope, key: str) -> bool:
        """Whether every return the helper ``call`` runs may reach (the branches its literals take:
        ``self._shared_step(batch, "train")``) is a dict holding only ``key``, a loss: ``{"loss": loss}``,
        or a variable bound once to such a dict that the helper otherwise only logs
        (``self.log_dict(metrics)``) or reads keys of. Then ``call[key]`` is the loss."""
        found = self._callee(call, scope)
        if isinstance(found, str) or not found:
            return False
        for function, owner, file in found:
            if function in scope.scan.nested_functions or function.decorators:
                return False
            literals = self.literals_for(call, function, owner is not None, scope)
            helper = scope_of(function, owner, file, scope.depth + 1, literals=literals)
            passed = dataclasses.replace(scope, before=scope.current)
            arguments = tuple((p, e, passed) for p, e in call_arguments(call, function, owner is not None))
            helper = dataclasses.replace(helper, arguments=arguments)
            returns, leaves = reachable_returns(function, helper.scan, literals)
            if helper.scan.yields or not returns or not leaves:
                return False
            for ret in returns:
                at = dataclasses.replace(helper, at=ret)
                literal = ret.value if isinstance(ret.value, cst.Dict) else _logged_dict(ret.value, at)
                if literal is None or len(literal.elements) != 1:
                    return False
                element = literal.elements[0]
                if not isinstance(element, cst.DictElement) or string_key(element.key) != key:
                    return False
                if self.problem(element.value, at) is not None:
                    return False
        return True

    def _sum_problem(self, call: cst.Call, scope: Scope) -> str | None:
        """``sum(loss_dict.values())`` / ``sum(l for l in loss_dict.values())``: the sum of the losses."""
        target = _summed_dict(call)
        fail = f"returns `{short(call)}`, which the code does not show to be a sum of losses"
        if target is None:
            return fail
        bindings = scope.bindings(target)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
            return fail
        value = bindings[0].value
        if isinstance(value, cst.Dict):
            for element in value.elements:
                if not isinstance(element, cst.DictElement) or self.problem(element.value, scope) is not None:
                    return fail
            return None if value.elements else fail
        if isinstance(value, cst.Call) and "loss" in target.lower() and target not in scope.scan.mutations:
            # torchvision's detection models: `loss_dict = self.model(images, targets)`, a dict of loss tensors
            return None
        return fail

    def positions_of(self, scope: Scope) -> Positions:
        return scope.file.positions


def _logged_dict(value: cst.BaseExpression | None, scope: Scope) -> cst.Dict | None:
    """The dict literal a returned variable holds when it is assigned once, never changed, and
    otherwise only read by key or given to ``self.log_dict`` (which logs copies of its values)."""
    if not isinstance(value, cst.Name) or scope.self_name is None:
        return None
    name = value.value
    bindings = scope.bindings(name)
    if len(bindings) != 1 or bindings[0].kind != "assign" or name in scope.scan.mutations:
        return None
    if not isinstance(bindings[0].value, cst.Dict) or len(scope.scan.bindings.get(name, [])) != 1:
        return None
    self_name = scope.self_name

    class _Mentions(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.other = 0  # mentions that are none of the allowed ones

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.other += 1

        def visit_Assign(self, node: cst.Assign) -> bool:
            if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                if node.targets[0].target.value == name:
                    node.value.visit(self)
                    return False
            return True

        def visit_Return(self, node: cst.Return) -> bool:
            return not (isinstance(node.value, cst.Name) and node.value.value == name)

        def visit_Subscript(self, node: cst.Subscript) -> bool:
            key = node.slice[0].slice if len(node.slice) == 1 else None
            if isinstance(node.value, cst.Name) and node.value.value == name and isinstance(key, cst.Index):
                if string_key(key.value) is not None:
                    return False  # `metrics["loss"]`, read (a write would be a mutation)
            return True

        def visit_Call(self, node: cst.Call) -> bool:
            func = node.func
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == self_name
                and func.attr.value == "log_dict"
                and node.args
            ):
                for index, arg in enumerate(node.args):
                    if index == 0 and isinstance(arg.value, cst.Name) and arg.value.value == name and not arg.star:
                        continue  # `self.log_dict(metrics, ...)` logs copies of its values
                    arg.visit(self)
                return False
            return True

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.other += name_mentions(node, name)  # a closure may keep or change it at any time
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            self.other += name_mentions(node, name)
            return False

    mentions = _Mentions()
    scope.function.body.visit(mentions)
    return bindings[0].value if mentions.other == 0 else None


def _loss_item(value: cst.BaseExpression) -> str:
    """How a hint reads the loss out of a returned dict: ``loss=out["val_loss"]`` by its literal key."""
    elements = value.elements if isinstance(value, cst.Dict) else ()
    keys = [string_key(e.key) for e in elements if isinstance(e, cst.DictElement)]
    key = next((k for k in ("loss", "val_loss", "test_loss") if k in keys), None)
    return f'`loss=out["{key}"]`' if key is not None else "`loss=out[...]` (the key that holds the loss)"


def _is_loss_function(func: cst.BaseExpression, file: FileContext | None) -> bool:
    """``F.mse_loss``, ``torch.nn.functional.cross_entropy``: a loss function of torch (its default
    reduction gives one value)."""
    if file is None:
        return False
    qualified = file.imports.qualify(func) or ""
    if qualified.startswith("F.") and "F" not in file.imports.aliases:  # the usual alias, import unseen
        qualified = "torch.nn.functional." + qualified.removeprefix("F.")
    if not qualified.startswith("torch.nn.functional."):
        return False
    tail = qualified.rsplit(".", 1)[1]
    return tail.endswith("_loss") or tail in LOSS_FUNCTIONS


def _full_reduction(call: cst.Call, qualified: str) -> bool:
    """``x.mean()`` / ``x.sum()`` (no argument), ``torch.mean(x)`` / ``torch.sum(x)`` (one, no dim)."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in ("mean", "sum") and not call.args:
        return True
    return (
        qualified in ("torch.mean", "torch.sum")
        and len(call.args) == 1
        and call.args[0].keyword is None
        and not call.args[0].star
    )


def _summed_dict(call: cst.Call) -> str | None:
    """The name ``d`` in ``sum(d.values())`` or ``sum(x for x in d.values())``, else None."""
    if len(call.args) != 1:
        return None
    arg = call.args[0].value
    source: cst.BaseExpression = arg
    if isinstance(arg, cst.GeneratorExp):
        comp = arg.for_in
        if (
            comp.inner_for_in is not None
            or comp.ifs
            or not isinstance(comp.target, cst.Name)
            or not isinstance(arg.elt, cst.Name)
            or arg.elt.value != comp.target.value
        ):
            return None
        source = comp.iter
    if (
        isinstance(source, cst.Call)
        and isinstance(source.func, cst.Attribute)
        and source.func.attr.value == "values"
        and not source.args
        and isinstance(source.func.value, cst.Name)
    ):
        return source.func.value.value
    return None


def is_sum_idiom(value: cst.BaseExpression) -> bool:
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Name)
        and value.func.value == "sum"
        and _summed_dict(value) is not None
    )


def _strip_returns(text: str) -> str:
    return text.removeprefix("returns ")


def _reduction(call: cst.BaseExpression) -> tuple[str, str]:
    """How an unreduced loss call says it, and why that is not one value: for the report."""
    assert isinstance(call, cst.Call)
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in ("reduction", "reduce"):
            if string_key(arg.value) == "none":
                return "reduction='none'", "not one value"
            return f"`{arg.keyword.value}={short(arg.value, 32)}`", "maybe not one value"
    return "reduction='none'", "not one value"


def _unreduced(value: cst.BaseExpression) -> bool:
    """A loss call that may give one value per sample: ``reduction`` other than a literal "mean" or
    "sum" (``"none"``, or a variable), or the old ``reduce=False``."""
    if not isinstance(value, cst.Call):
        return False
    for arg in value.args:
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword == "reduction" and string_key(arg.value) not in ("mean", "sum", "batchmean"):
            return True
        if keyword == "reduce" and not (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
            return True
    return False
