"""When a returned dict can become a typed result, and the ``self.log_dict`` calls for its 0.x entries.
"""

from __future__ import annotations

import libcst as cst

from lightning_step_types.migrate.conventions import BATCH_END_FOR_HOOK, EVAL_LOSS_KEYS, LEGACY_LOG_KEYS
from lightning_step_types.migrate.facts import FileFacts, Positions
from lightning_step_types.migrate.layout import remove_elements, standalone
from lightning_step_types.migrate.losses import LossRules
from lightning_step_types.migrate.scan import BodyScan, has_effects
from lightning_step_types.migrate.steps import DictPlan, ReturnPlan, Step
from lightning_step_types.migrate.syntax import ImportTable, code_of, container_kind, short, string_key


class DictRules:
    """Checks a returned dict literal key by key; plans the result and the log_dict calls."""

    def __init__(self, positions: Positions, facts: FileFacts, imports: ImportTable, losses: LossRules) -> None:
        self.positions = positions
        self.facts = facts
        self.imports = imports
        self.losses = losses

    def classify(self, step: Step, node: cst.Return, value: cst.Dict, scan: BodyScan) -> ReturnPlan:
        line = self.positions.line(node)

        def problem(text: str) -> ReturnPlan:
            return ReturnPlan(node, "problem", line, problem=text)

        keys: list[str] = []
        for element in value.elements:
            if not isinstance(element, cst.DictElement):
                return problem(f"`**{short(element.value)}` in dict")
            key = string_key(element.key)
            if key is None:
                return problem(f"dict has non-literal keys (`{short(element.key)}`)")
            if key in keys:
                return problem(f"dict has the key {key!r} twice")
            keys.append(key)
        if "hiddens" in keys:
            return problem("dict has the Lightning 0.x 'hiddens' key (truncated backprop); migrate it by hand")
        if step.hook == "training_step":
            loss_keys = ["loss"] if "loss" in keys else []
            if not loss_keys:
                return problem("dict has no 'loss' key")
        else:
            loss_keys = [k for k in keys if k in EVAL_LOSS_KEYS]
            if not loss_keys:
                return problem("dict has no loss key ('loss', 'val_loss' or 'test_loss')")
            if len(loss_keys) > 1:
                return problem(f"dict has several loss keys ({', '.join(repr(k) for k in loss_keys)})")
        loss_key = loss_keys[0]
        loss_index = keys.index(loss_key)
        loss_element = value.elements[loss_index]
        assert isinstance(loss_element, cst.DictElement)
        number = self.losses.number_problem(loss_element.value)
        if number is None and isinstance(loss_element.value, cst.Name):
            for binding in scan.bindings.get(loss_element.value.value, []):
                if binding.value is not None:
                    number = self.losses.number_problem(binding.value)
                    if number is not None:
                        break
        kind = container_kind(loss_element.value)
        if number is not None or (kind is not None and kind != "a Python number"):
            what = number or kind
            return problem(f"the {loss_key!r} value `{short(loss_element.value)}` is {what}, not a loss tensor")
        legacy = [(i, k) for i, k in enumerate(keys) if k in LEGACY_LOG_KEYS]
        vanishing = [k for k in keys if k in LEGACY_LOG_KEYS] + ([loss_key] if loss_key != "loss" else [])
        for key in vanishing:
            if key in self.facts.key_reads:
                new = "the result's `loss`" if key == loss_key else "self.log_dict"
                return problem(
                    f"the key {key!r} is read at line {self.facts.key_reads[key]}; after the rewrite it is {new}"
                )
        hook_name = BATCH_END_FOR_HOOK.get(step.hook)
        if hook_name in self.facts.hook_defs and vanishing:
            return problem(
                f"`{hook_name}` (line {self.facts.hook_defs[hook_name]}) receives this dict;"
                f" the rewrite would change its keys ({', '.join(repr(k) for k in vanishing)})"
            )
        log_calls, log_comments, trouble = self._log_calls(value, legacy, scan)
        if trouble is not None:
            return problem(trouble)
        trouble = self._order_problem(value, loss_index, legacy)
        if trouble is not None:
            return problem(trouble)
        plan = DictPlan(value, loss_index, sorted([loss_index, *(i for i, _ in legacy)]), log_calls, log_comments)
        return ReturnPlan(node, "dict", line, dict_plan=plan)

    def _log_calls(
        self, value: cst.Dict, legacy: list[tuple[int, str]], scan: BodyScan
    ) -> tuple[list[tuple[cst.BaseExpression, bool]], list[cst.EmptyLine], str | None]:
        """The ``self.log_dict`` calls that replace the 0.x 'log' / 'progress_bar' entries."""
        contents: dict[str, tuple[cst.BaseExpression, dict[str, str] | None]] = {}
        for index, key in legacy:
            element = value.elements[index]
            assert isinstance(element, cst.DictElement)
            entry = element.value
            if isinstance(entry, cst.Dict):
                inner, trouble = self._flat_dict_keys(entry, key)
                if trouble is not None:
                    return [], [], trouble
                contents[key] = (entry, inner)
            elif isinstance(entry, cst.Name):
                bindings = scan.bindings.get(entry.value, [])
                if (
                    len(bindings) != 1
                    or bindings[0].kind != "assign"
                    or not isinstance(bindings[0].value, cst.Dict)
                    or entry.value in scan.mutations
                ):
                    why = f"the {key!r} value `{entry.value}` is not a dict literal assigned once in the method"
                    return [], [], why
                _, trouble = self._flat_dict_keys(bindings[0].value, key)
                if trouble is not None:
                    return [], [], trouble
                contents[key] = (entry, None)
            else:
                return [], [], f"the {key!r} value `{short(entry)}` is not a dict literal"
        calls: list[tuple[cst.BaseExpression, bool]] = []
        comments: list[cst.EmptyLine] = []
        log = contents.get("log")
        bar = contents.get("progress_bar")
        if log is not None and bar is not None:
            if log[1] is None or bar[1] is None:
                return [], [], "'log' and 'progress_bar' are variables; cannot tell whether they share keys"
            shared = set(log[1]) & set(bar[1])
            for key in sorted(shared):
                if log[1][key] != bar[1][key]:
                    return [], [], f"'log' and 'progress_bar' both have {key!r}, with different values"
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

    @staticmethod
    def _flat_dict_keys(entry: cst.Dict, key: str) -> tuple[dict[str, str], str | None]:
        keys: dict[str, str] = {}
        for element in entry.elements:
            if not isinstance(element, cst.DictElement):
                return keys, f"`**{short(element.value)}` in the {key!r} dict"
            inner = string_key(element.key)
            if inner is None:
                return keys, f"the {key!r} dict has non-literal keys (`{short(element.key)}`)"
            if isinstance(element.value, (cst.Dict, cst.List, cst.Tuple, cst.Set)):
                return keys, f"the {key!r} dict nests a container under {inner!r}; log_dict takes scalars"
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
