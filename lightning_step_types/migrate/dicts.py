"""When a returned dict can become a typed result, and the ``self.log_dict`` calls for its 0.x entries."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from lightning_step_types.migrate.conventions import BATCH_END_FOR_HOOK, EVAL_LOSS_KEYS, LEGACY_LOG_KEYS
from lightning_step_types.migrate.facts import FileFacts, KeyReader, RunFacts
from lightning_step_types.migrate.layout import keyword_arg, remove_elements, standalone
from lightning_step_types.migrate.losses import LossRules, Scope, is_sum_idiom
from lightning_step_types.migrate.positions import Positions
from lightning_step_types.migrate.scan import has_effects
from lightning_step_types.migrate.steps import DictPlan, ReturnPlan, Step
from lightning_step_types.migrate.syntax import ImportTable, code_of, container_kind, name_mentions, short, string_key


class DictRules:
    """Checks a returned dict literal key by key; plans the result and the log_dict calls."""

    def __init__(
        self,
        positions: Positions,
        facts: FileFacts,
        imports: ImportTable,
        losses: LossRules,
        run: RunFacts | None = None,
        path: str = "<string>",
    ) -> None:
        self.positions = positions
        self.facts = facts
        self.imports = imports
        self.losses = losses
        self.run = run
        self.path = path

    def classify(self, step: Step, node: cst.Return, value: cst.Dict, scope: Scope) -> ReturnPlan:
        line = self.positions.line(node)

        def problem(text: str) -> ReturnPlan:
            return ReturnPlan(node, "problem", line, problem=text)

        keys = self._keys(value)
        if isinstance(keys, str):
            return problem(keys)
        trouble = self._keys_problem(step, keys, scope, value_of=lambda k: _value_in(value, k), line=line)
        if trouble is not None:
            return problem(trouble)
        loss_key = self._loss_key(step, keys)
        assert loss_key is not None
        loss_index = keys.index(loss_key)
        legacy = [(i, k) for i, k in enumerate(keys) if k in LEGACY_LOG_KEYS]
        log_calls, log_comments, trouble = self._log_calls(value, legacy, scope)
        if trouble is not None:
            return problem(trouble)
        trouble = self._order_problem(value, loss_index, legacy)
        if trouble is not None:
            return problem(trouble)
        trouble = self._loss_value_problem(loss_key, _value_in(value, loss_key), scope)
        if trouble is not None:
            return problem(trouble)
        self._note_renames(step, keys, loss_key, line)
        plan = DictPlan(value, loss_index, sorted([loss_index, *(i for i, _ in legacy)]), log_calls, log_comments)
        return ReturnPlan(node, "dict", line, dict_plan=plan)

    @staticmethod
    def _keys(value: cst.Dict) -> list[str] | str:
        """The literal keys of a dict, in order, or what keeps them from being known."""
        keys: list[str] = []
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return f"`**{short(element.value)}` in dict"
            key = string_key(element.key)
            if key is None:
                return f"dict has non-literal keys (`{short(element.key)}`)"
            if key in keys:
                return f"dict has the key {key!r} twice"
            keys.append(key)
        return keys

    @staticmethod
    def _loss_key(step: Step, keys: list[str]) -> str | None:
        if step.hook == "training_step":
            return "loss" if "loss" in keys else None
        found = [k for k in keys if k in EVAL_LOSS_KEYS]
        return found[0] if len(found) == 1 else None

    def _keys_problem(
        self,
        step: Step,
        keys: list[str],
        scope: Scope,
        value_of: Callable[[str], cst.BaseExpression | None],
        line: int,
    ) -> str | None:
        """Why a returned dict with these keys cannot become a result (keys, loss value, readers)."""
        if "hiddens" in keys:
            return (
                "dict has the Lightning 0.x 'hiddens' key (truncated backprop), which Lightning 2 ignores:"
                " keep the state on the module (`self.hiddens = ...`) and drop the key"
            )
        if step.hook == "training_step":
            if "loss" not in keys:
                return "dict has no 'loss' key"
        else:
            loss_keys = [k for k in keys if k in EVAL_LOSS_KEYS]
            if not loss_keys:
                return "dict has no loss key ('loss', 'val_loss' or 'test_loss')"
            if len(loss_keys) > 1:
                return f"dict has several loss keys ({', '.join(repr(k) for k in loss_keys)})"
        loss_key = self._loss_key(step, keys)
        assert loss_key is not None
        loss_value = value_of(loss_key)
        assert loss_value is not None
        number = self.losses.number_problem(loss_value)
        if number is None and isinstance(loss_value, cst.Name):
            for binding in scope.bindings(loss_value.value):
                if binding.value is not None and binding.kind == "assign" and not is_sum_idiom(binding.value):
                    number = self.losses.number_problem(binding.value)
                    if number is not None:
                        break
        kind = container_kind(loss_value)
        if number is not None or (kind is not None and kind != "a Python number"):
            what = number or kind
            return f"the {loss_key!r} value `{short(loss_value)}` is {what}, not a loss tensor"
        vanishing = [k for k in keys if k in LEGACY_LOG_KEYS] + ([loss_key] if loss_key != "loss" else [])
        for key in vanishing:
            new = "the result's `loss`" if key == loss_key else "self.log_dict"
            readers = self._readers(key)
            if readers:
                return f"the key {key!r} is read at {readers[0].where(self.path)}; after the rewrite it is {new}"
        hook_name = BATCH_END_FOR_HOOK.get(step.hook)
        if hook_name in self.facts.hook_defs and vanishing:
            return (
                f"`{hook_name}` (line {self.facts.hook_defs[hook_name]}) receives this dict;"
                f" the rewrite would change its keys ({', '.join(repr(k) for k in vanishing)})"
            )
        if vanishing and self.run is not None and self.run.options.strict_keys:
            return (
                f"the rewrite would change the keys {', '.join(repr(k) for k in vanishing)}"
                " of what the step returns (--strict-keys)"
            )
        return None

    def _readers(self, key: str) -> list[KeyReader]:
        if self.run is None:
            line = self.facts.key_reads.get(key)
            return [] if line is None else [KeyReader(self.path, line, key)]
        return self.run.readers(key, attributes=key not in LEGACY_LOG_KEYS)

    def _loss_value_problem(self, key: str, value: cst.BaseExpression | None, scope: Scope) -> str | None:
        assert value is not None
        trouble = self.losses.problem(value, scope)
        if trouble is None:
            return None
        return f"the {key!r} value: {trouble.removeprefix('returns ')}"

    def _note_renames(self, step: Step, keys: list[str], loss_key: str, line: int) -> None:
        """Say which keys the rewrite renames or drops, since readers outside the run cannot be seen."""
        changes = [f"{loss_key!r} -> the result's 'loss'"] if loss_key != "loss" else []
        changes += [f"{k!r} -> self.log_dict" for k in keys if k in LEGACY_LOG_KEYS]
        if not changes:
            return
        family = [step.owner, *step.owner.ancestors(), *step.owner.descendants()]
        readers = [
            (key, reader)
            for key in ([loss_key] if loss_key != "loss" else []) + [k for k in keys if k in LEGACY_LOG_KEYS]
            for reader in (self.run.removed_hook_readers(key, family) if self.run is not None else [])
        ]
        which = "no code of the files given that Lightning 2 runs" if readers else "nothing in the files given"
        step.notes.append(
            (
                line,
                f"keys changed: {', '.join(changes)}; {which} reads them"
                " (a callback elsewhere that does must follow; --strict-keys leaves such steps alone)",
            )
        )
        for key, reader in readers:
            new = "outputs['loss']" if key == loss_key else "what the step logs"
            step.notes.append(
                (
                    line,
                    f"{reader.how} reads {key!r} at {reader.where(self.path)}; Lightning 2 removed that hook:"
                    f" when you port it to on_*_epoch_end, read {new}",
                )
            )

    def unwrap_ordered_dict(self, value: cst.BaseExpression) -> cst.BaseExpression:
        """``OrderedDict({...})`` (Lightning 0.x examples) is the dict literal it copies; anything else itself."""
        if (
            isinstance(value, cst.Call)
            and self.imports.qualify(value.func) in ("collections.OrderedDict", "dict")
            and len(value.args) == 1
            and value.args[0].keyword is None
            and not value.args[0].star
            and isinstance(value.args[0].value, cst.Dict)
        ):
            return value.args[0].value
        return value

    def local_dict(self, step: Step, node: cst.Return, value: cst.BaseExpression, scope: Scope) -> ReturnPlan | None:
        """``out = {...}; out["k"] = v; return out``: a dict built in one block and returned, never aliased.
        None when the return is not of that form (the other rules then explain the skip)."""
        if not isinstance(value, cst.Name) or step.function is None:
            return None
        name = value.value
        bindings = scope.bindings(name)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
            return None
        if not isinstance(self.unwrap_ordered_dict(bindings[0].value), cst.Dict):
            return None
        built = _built_dict(step.function, name, bindings[0].node, node, self.unwrap_ordered_dict)
        if built is None:
            return None
        line = self.positions.line(node)
        entries = built
        keys = list(entries)
        trouble = self._keys_problem(step, keys, scope, value_of=entries.get, line=line)
        for key, entry in entries.items():
            if key in LEGACY_LOG_KEYS and trouble is None:
                literal = entry
                if isinstance(entry, cst.Name):  # `output["log"] = tqdm_dict`, a dict assigned once
                    found = self._dict_variable(entry.value, scope)
                    literal = found[1] if found is not None else entry
                if not isinstance(literal, cst.Dict):
                    trouble = f"the {key!r} value `{short(entry)}` is not a dict literal"
                else:
                    trouble = self._flat_dict_keys(literal, key, scope)[1]
        loss_key = self._loss_key(step, keys)
        if trouble is None and loss_key is not None:
            trouble = self._loss_value_problem(loss_key, entries[loss_key], scope)
        if trouble is not None:
            return ReturnPlan(node, "problem", line, problem=f"returns `{name}`, a dict built in the method: {trouble}")
        assert loss_key is not None
        self._note_renames(step, keys, loss_key, line)

        def item(key: str) -> cst.Subscript:
            return cst.Subscript(cst.Name(name), [cst.SubscriptElement(cst.Index(_string(key)))])

        rest = [k for k in keys if k != loss_key and k not in LEGACY_LOG_KEYS]
        args = [keyword_arg("loss", item(loss_key))]
        if rest:
            space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            elements = [
                cst.DictElement(_string(k), item(k), comma=space if i < len(rest) - 1 else cst.MaybeSentinel.DEFAULT)
                for i, k in enumerate(rest)
            ]
            args = [args[0].with_changes(comma=space), keyword_arg("metadata", cst.Dict(elements))]
        logs: list[tuple[cst.BaseExpression, bool]] = [
            (item(k), LEGACY_LOG_KEYS[k]) for k in LEGACY_LOG_KEYS if k in entries
        ]
        if "log" in entries and "progress_bar" in entries:
            return ReturnPlan(
                node,
                "problem",
                line,
                problem=f"returns `{name}`, a dict built in the method with both 'log' and 'progress_bar'",
            )
        return ReturnPlan(node, "built", line, built=cst.Call(cst.Name(step.result_name), args), built_logs=logs)

    def _dict_variable(self, name: str, scope: Scope, seen: int = 0) -> tuple[str, cst.Dict] | None:
        """The variable a name stands for and its dict literal, when it is assigned once, a dict
        literal or another such name (``shown = logs``), and neither is changed in place."""
        bindings = scope.bindings(name)
        if len(bindings) != 1 or bindings[0].kind != "assign" or name in scope.scan.mutations or seen > 3:
            return None
        value = bindings[0].value
        if isinstance(value, cst.Dict):
            return name, value
        if isinstance(value, cst.Name):
            return self._dict_variable(value.value, scope, seen + 1)
        return None

    @staticmethod
    def _loss_dict_variable(name: str, scope: Scope) -> bool:
        """A dict of losses returned by a model (``loss_dict = self.model(images, targets)``), as in
        the summed-losses idiom: assigned once from a call, never changed."""
        bindings = scope.bindings(name)
        return (
            "loss" in name.lower()
            and len(bindings) == 1
            and bindings[0].kind == "assign"
            and isinstance(bindings[0].value, cst.Call)
            and name not in scope.scan.mutations
        )

    def _log_calls(
        self, value: cst.Dict, legacy: list[tuple[int, str]], scope: Scope
    ) -> tuple[list[tuple[cst.BaseExpression, bool]], list[cst.EmptyLine], str | None]:
        """The ``self.log_dict`` calls that replace the 0.x 'log' / 'progress_bar' entries."""
        contents: dict[str, tuple[cst.BaseExpression, dict[str, str] | None]] = {}
        for index, key in legacy:
            element = value.elements[index]
            assert isinstance(element, cst.DictElement)
            entry = element.value
            if isinstance(entry, cst.Dict):
                inner, trouble = self._flat_dict_keys(entry, key, scope)
                if trouble is not None:
                    return [], [], trouble
                contents[key] = (entry, inner)
            elif isinstance(entry, cst.Name):
                found = self._dict_variable(entry.value, scope)
                if found is None and self._loss_dict_variable(entry.value, scope):
                    contents[key] = (entry, None)  # `"log": loss_dict`, the dict of losses the loss sums
                    continue
                if found is None:
                    why = f"the {key!r} value `{entry.value}` is not a dict literal assigned once in the method"
                    return [], [], why
                inner, trouble = self._flat_dict_keys(found[1], key, scope)
                if trouble is not None:
                    return [], [], trouble
                contents[key] = (cst.Name(found[0]), inner)
            else:
                return [], [], f"the {key!r} value `{short(entry)}` is not a dict literal"
        calls: list[tuple[cst.BaseExpression, bool]] = []
        comments: list[cst.EmptyLine] = []
        log = contents.get("log")
        bar = contents.get("progress_bar")
        if log is not None and bar is not None:
            same = isinstance(log[0], cst.Name) and isinstance(bar[0], cst.Name) and log[0].value == bar[0].value
            if same:  # `"log": logs, "progress_bar": logs`: logged once, with prog_bar=True
                return [(bar[0], True)], [], None
            for key, (expr, keys) in (("log", log), ("progress_bar", bar)):
                if keys is None:  # `"log": loss_dict`, a dict a call returned: its keys are not in the code
                    other = "progress_bar" if key == "log" else "log"
                    prog_bar = ", prog_bar=True" if key == "progress_bar" else ""
                    return (
                        [],
                        [],
                        (
                            f"the {key!r} value `{short(expr)}` is a dict a call returns, whose keys the code does not"
                            f" show, so they cannot be compared with the {other!r} dict's; log it in the step with"
                            f" self.log_dict({short(expr)}{prog_bar}) and drop the {key!r} key"
                        ),
                    )
            assert log[1] is not None and bar[1] is not None
            shared = set(log[1]) & set(bar[1])
            for key in sorted(shared):
                if log[1][key] != bar[1][key]:
                    return (
                        [],
                        [],
                        (
                            f"'log' and 'progress_bar' both have {key!r}, with different values; give one of them"
                            " another name (self.log_dict logs each name once per step)"
                        ),
                    )
            if shared and not isinstance(log[0], cst.Dict):
                names = ", ".join(repr(key) for key in sorted(shared))
                return (
                    [],
                    [],
                    (
                        f"'log' (the dict `{short(log[0])}`) and 'progress_bar' both have {names}, which self.log_dict"
                        f" would log twice; remove {'it' if len(shared) == 1 else 'them'} from `{short(log[0])}`"
                        " (the progress bar's values are logged to the logger as well)"
                    ),
                )
            if shared:  # logged once, with prog_bar=True (logger=True is self.log's default)
                log_dict = log[0]
                assert isinstance(log_dict, cst.Dict)
                drop = [
                    i
                    for i, e in enumerate(log_dict.elements)
                    if isinstance(e, cst.DictElement) and string_key(e.key) in shared
                ]
                remaining, owned = remove_elements(log_dict, drop)
                ordered = [owned[i] for i in sorted(owned)]
                comments = standalone([line for o in ordered for line in o.above], [o.trailing for o in ordered])
                if remaining.elements:
                    calls.append((remaining, False))
            else:
                calls.append((log[0], False))
            calls.append((bar[0], True))
        elif log is not None:
            calls.append((log[0], False))
        elif bar is not None:
            calls.append((bar[0], True))
        calls = [(expr, prog_bar) for expr, prog_bar in calls if not (isinstance(expr, cst.Dict) and not expr.elements)]
        return calls, comments, None

    def _flat_dict_keys(self, entry: cst.Dict, key: str, scope: Scope) -> tuple[dict[str, str], str | None]:
        keys: dict[str, str] = {}
        for element in entry.elements:
            if not isinstance(element, cst.DictElement):
                return keys, f"`**{short(element.value)}` in the {key!r} dict"
            inner = string_key(element.key)
            if inner is None:
                return keys, f"the {key!r} dict has non-literal keys (`{short(element.key)}`)"
            if isinstance(element.value, (cst.Dict, cst.List, cst.Tuple, cst.Set)):
                return keys, f"the {key!r} dict nests a container under {inner!r}; log_dict takes scalars"
            why = self.losses.scalar_problem(element.value, scope)
            if why is not None:  # self.log_dict raises on a tensor of several values, a string...
                return keys, f"the {key!r} dict's {inner!r}: {why}; self.log_dict takes one value per key"
            keys[inner] = code_of(element.value).strip()
        return keys, None

    def _order_problem(self, value: cst.Dict, loss_index: int, legacy: list[tuple[int, str]]) -> str | None:
        """The rewrite evaluates the 0.x entries first, then the loss, then the rest: calls must keep their order."""
        legacy_order = sorted(legacy, key=lambda item: list(LEGACY_LOG_KEYS).index(item[1]))
        new_order = [i for i, _ in legacy_order] + [loss_index]
        new_order += [i for i in range(len(value.elements)) if i not in new_order]
        values = [element.value for element in value.elements]
        effects = [i for i, v in enumerate(values) if has_effects(v, self.imports)]
        for a in effects:
            for b in effects:
                if a < b and new_order.index(a) > new_order.index(b):
                    return (
                        f"the rewrite would evaluate `{short(values[b], 32)}` before `{short(values[a], 32)}`;"
                        " both call code that may have side effects"
                    )
        return None

    # -- across steps --


def _string(key: str) -> cst.SimpleString:
    """A string literal for a key, double-quoted unless the key needs otherwise."""
    plain = '"' not in key and "\\" not in key and key.isprintable()
    return cst.SimpleString(f'"{key}"' if plain else repr(key))


def _value_in(value: cst.Dict, key: str) -> cst.BaseExpression | None:
    for element in value.elements:
        if isinstance(element, cst.DictElement) and string_key(element.key) == key:
            return element.value
    return None


def _built_dict(
    function: cst.FunctionDef,
    name: str,
    assignment: cst.CSTNode,
    ret: cst.Return,
    unwrap: Callable[[cst.BaseExpression], cst.BaseExpression],
) -> dict[str, cst.BaseExpression] | None:
    """The keys and values of ``name = {...}`` followed by ``name["k"] = v`` lines and ``return name``, all
    in one block, when nothing else in the function mentions ``name`` (``self.log_dict(name)`` aside); else None."""

    class _Blocks(cst.CSTVisitor):
        found: list[cst.BaseStatement] | None = None

        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            for statement in node.body:
                if isinstance(statement, cst.SimpleStatementLine) and assignment in statement.body:
                    self.found = list(node.body)

    finder = _Blocks()
    function.visit(finder)
    block = finder.found
    if block is None:
        return None
    start = next(i for i, st in enumerate(block) if isinstance(st, cst.SimpleStatementLine) and assignment in st.body)
    if isinstance(assignment, cst.Assign):
        if len(assignment.targets) != 1:
            return None
        value = assignment.value
    elif isinstance(assignment, cst.AnnAssign) and assignment.value is not None:
        value = assignment.value  # `out: dict[str, Any] = {}`
    else:
        return None
    literal = unwrap(value)
    if not isinstance(literal, cst.Dict):
        return None
    entries: dict[str, cst.BaseExpression] = {}
    for element in literal.elements:
        key = string_key(element.key) if isinstance(element, cst.DictElement) else None
        if key is None or key in entries:
            return None
        entries[key] = element.value
    for statement in block[start + 1 :]:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            if _aliases(statement, name):
                return None
            continue
        small = statement.body[0]
        if small is ret:
            break
        target = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
        if (
            isinstance(small, cst.Assign)
            and isinstance(target, cst.Subscript)
            and isinstance(target.value, cst.Name)
            and target.value.value == name
            and len(target.slice) == 1
            and isinstance(target.slice[0].slice, cst.Index)
        ):
            key = string_key(target.slice[0].slice.value)
            if key is None or _aliases(small.value, name):
                return None
            entries[key] = small.value
            continue
        if _logs_it(small, name, function):
            continue  # `self.log_dict(out, ...)` logs copies of its values: `out` is still only read
        if _aliases(small, name):
            return None
    else:
        return None
    if any(name_mentions(inner, name) for inner in _nested_functions(function)):
        return None  # a closure may read or change it at any time
    return entries


def _logs_it(small: cst.BaseSmallStatement, name: str, function: cst.FunctionDef) -> bool:
    """``self.log_dict(name, ...)`` as a statement of its own, ``name`` in no other argument."""
    params = function.params.params
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call) or not params:
        return False
    call = small.value
    func = call.func
    if not (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == params[0].name.value
        and func.attr.value == "log_dict"
        and call.args
    ):
        return False
    first = call.args[0]
    if first.star or first.keyword is not None or not isinstance(first.value, cst.Name) or first.value.value != name:
        return False
    return not any(name_mentions(arg, name) for arg in call.args[1:])


def _nested_functions(function: cst.FunctionDef) -> list[cst.CSTNode]:
    class _Nested(cst.CSTVisitor):
        found: list[cst.CSTNode] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.found.append(node)
            return False

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            self.found.append(node)
            return False

    finder = _Nested()
    finder.found = []
    function.body.visit(finder)
    return finder.found


def _count_item_reads(node: cst.CSTNode, name: str) -> int:
    """``name["k"]`` read with a literal key (not assigned to, not deleted): reads that alias nothing."""

    class _Reads(cst.CSTVisitor):
        count = 0
        skip: set[int] = set()

        def visit_Assign(self, node: cst.Assign) -> None:
            self.skip.update(id(t.target) for t in node.targets)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            self.skip.add(id(node.target))

        def visit_Del(self, node: cst.Del) -> None:
            self.skip.add(id(node.target))

        def visit_Subscript(self, node: cst.Subscript) -> None:
            if (
                id(node) not in self.skip
                and isinstance(node.value, cst.Name)
                and node.value.value == name
                and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index)
                and string_key(node.slice[0].slice.value) is not None
            ):
                self.count += 1

    reads = _Reads()
    reads.skip = set()
    node.visit(reads)
    return reads.count


def _aliases(node: cst.CSTNode, name: str) -> bool:
    """Whether ``node`` uses ``name`` other than by reading one of its keys (``name["k"]``)."""
    return name_mentions(node, name) != _count_item_reads(node, name)
