"""Decides, step by step, what the codemod may rewrite: classifies every return, follows delegations
between steps, and picks the classes whose base can become ``TypedLightningModule``.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import libcst as cst

from lightning_step_types.migrate.annotations import annotation_shape, new_annotation
from lightning_step_types.migrate.conventions import (
    BATCH_END_FOR_HOOK,
    NEUTRAL_DECORATORS,
    RESULT_FOR_HOOK,
    RESULT_MODULES,
    STEP_HOOKS,
    TYPED_BASE,
    TYPED_BASE_MODULES,
)
from lightning_step_types.migrate.dicts import DictRules
from lightning_step_types.migrate.facts import FactCollector, FileFacts, RunFacts
from lightning_step_types.migrate.imports import name_is_free
from lightning_step_types.migrate.leftovers import leftovers
from lightning_step_types.migrate.losses import LossRules, scope_of
from lightning_step_types.migrate.positions import Positions
from lightning_step_types.migrate.report import Finding
from lightning_step_types.migrate.scan import BodyScan, always_leaves, block_statements, scan_body
from lightning_step_types.migrate.steps import ClassInfo, FileContext, ReturnPlan, Step, delegate_targets
from lightning_step_types.migrate.syntax import ImportTable, container_kind, is_none, short

# The note on an evaluation step that returned a bare Tensor: what its batch-end hooks receive changes.
_BARE_TENSOR_NOTE = "returned a Tensor"


def _tensor_note(hook_name: str, result_name: str, through: str | None = None) -> str:
    via = f" (through {through})" if through else ""
    return (
        f"{_BARE_TENSOR_NOTE}{via}: callbacks' `{hook_name}` now receive a mapping, the {result_name}"
        " (`{'loss': ...}`), instead of the Tensor; no hook of this file receives it (a callback elsewhere"
        " calling `outputs.item()` must read `outputs['loss']`; --strict-keys leaves such steps alone)"
    )


class Analyzer:
    """Decides, step by step, what can be rewritten in one file of the run; rewrites nothing itself."""

    def __init__(self, file: FileContext, classes: list[ClassInfo], run: RunFacts) -> None:
        self.file: FileContext = file
        self.module: cst.Module = file.module
        self.positions: Positions = file.positions
        self.base_class: bool = run.options.base_class
        self.run: RunFacts = run
        self.imports: ImportTable = file.imports
        self.all_classes: list[ClassInfo] = classes
        self.classes: list[ClassInfo] = [c for c in classes if c.is_lightning]
        self.facts: FileFacts = FileFacts(file.module, file.positions)
        file.module.visit(FactCollector(self.facts, {id(c.node): c for c in self.classes}))
        run.files.append((file.path, self.facts))
        self.losses: LossRules = LossRules(file.positions)
        self.dicts: DictRules = DictRules(file.positions, self.facts, self.imports, self.losses, run, file.path)
        self.delegate_calls: set[int] = set()  # id() of calls a step returns as its own result
        self.findings: list[Finding] = []
        self.base_switches: dict[cst.Arg, str] = {}  # base argument -> module to import TypedLightningModule from

    # -- the steps of one class --

    def collect_steps(self) -> list[Step]:
        steps: list[Step] = []
        for info in self.all_classes:
            if not info.is_lightning:
                steps += self._unexamined_steps(info)
                continue
            self.findings += [
                Finding("leftover", where, line, text) for where, line, text in leftovers(info, self.positions)
            ]
            for statement in info.node.body.body:
                step: Step | None
                if isinstance(statement, cst.FunctionDef) and statement.name.value in STEP_HOOKS:
                    step = Step(info, statement, statement.name.value, self.positions.line(statement.name))
                    self.analyze(step)
                elif isinstance(statement, cst.SimpleStatementLine):
                    step = self._assigned_step(info, statement)
                    if step is None:
                        continue
                else:
                    continue
                info.steps[step.hook] = step  # a later definition replaces an earlier one, as in Python
                steps.append(step)
        return steps

    def _unexamined_steps(self, info: ClassInfo) -> list[Step]:
        """The steps of a class not known to be a LightningModule: each skipped, saying why."""
        steps: list[Step] = []
        unresolved = info.unresolved_in_hierarchy()
        for hook in STEP_HOOKS:
            function = info.defines(hook)
            if function is None:
                continue
            step = Step(info, function, hook, self.positions.line(function.name))
            if unresolved:
                base = unresolved[0]
                name = base.split(".")[-1]
                shown = f"`{name}` (`{base}`)" if base != name else f"`{name}`"
                reason = (
                    f"{info.qualname} derives from {shown}, which is not defined in the files given:"
                    f" pass the file that defines `{name}`, or use --assume-lightning"
                )
                step.problems.append((step.line, reason))
                step.status = "skipped"
            else:  # a plain class (no base the run cannot see): its steps are not Lightning's
                step.status = "ignored"
            info.steps[hook] = step
            steps.append(step)
        return steps

    def _assigned_step(self, info: ClassInfo, line: cst.SimpleStatementLine) -> Step | None:
        for small in line.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if isinstance(target.target, cst.Name) and target.target.value in STEP_HOOKS:
                        hook = target.target.value
                        step = Step(info, None, hook, self.positions.line(small))
                        fix = "rewrite the function it names"
                        if isinstance(small.value, cst.Name) and info.defines(small.value.value) is not None:
                            # a method of the class: a step that calls it is followed like any helper
                            fix = (
                                f"define it instead (`def {hook}(self, batch, batch_idx):"
                                f" return self.{small.value.value}(batch, batch_idx)`)"
                            )
                        step.problems.append((step.line, f"is assigned (`{short(small)}`), not defined: {fix}"))
                        return step
        return None

    def analyze(self, step: Step) -> None:
        function = step.function
        assert function is not None
        params = function.params.params
        step.self_name = params[0].name.value if params else "self"
        if isinstance(function.asynchronous, cst.Asynchronous):
            step.problems.append((step.line, "is async"))
        for decorator in function.decorators:
            target = decorator.decorator
            if isinstance(target, cst.Call):
                target = target.func
            if self.imports.qualify(target) not in NEUTRAL_DECORATORS:
                step.problems.append(
                    (step.line, f"decorated with `@{short(decorator.decorator)}`, which may change what it returns")
                )
        scan = scan_body(function)
        if scan.yields:
            word = "yield" if isinstance(scan.yields[0], cst.Yield) else "await"
            step.problems.append((self.positions.line(scan.yields[0]), f"uses `{word}`"))
        for nested in scan.nested_functions:
            nested_returns = [r for r in scan_body(nested).returns if not is_none(r.value)]
            if nested_returns:
                step.notes.append(
                    (
                        self.positions.line(nested_returns[0]),
                        f"return inside the nested function `{nested.name.value}` ignored"
                        " (it is not the step's return)",
                    )
                )
        step.falls_off_end = not always_leaves(block_statements(function.body))
        for node in scan.returns:
            step.returns.append(self.classify_return(step, node, scan))

    # -- one return statement --

    def classify_return(self, step: Step, node: cst.Return, scan: BodyScan) -> ReturnPlan:
        line = self.positions.line(node)
        value = node.value
        if is_none(value):
            return ReturnPlan(node, "none", line)
        assert value is not None

        def problem(text: str) -> ReturnPlan:
            return ReturnPlan(node, "problem", line, problem=text)

        result_class = self._result_class_of(value)
        if result_class is not None:
            if result_class != step.result_name:
                return problem(f"returns {result_class} from {step.hook}; {step.hook} returns {step.result_name}")
            return ReturnPlan(node, "typed", line)
        delegate = self._delegate_of(step, value)
        if delegate is not None:
            return ReturnPlan(node, "delegate", line, delegate=delegate)
        assert step.function is not None
        scope = dataclasses.replace(scope_of(step.function, step.owner, self.file, scan=scan), at=node)
        value = self.dicts.unwrap_ordered_dict(value)
        if isinstance(value, cst.Dict):
            return self.dicts.classify(step, node, value, scope)
        local_dict = self.dicts.local_dict(step, node, value, scope)
        if local_dict is not None:
            return local_dict
        kind = container_kind(value)
        if kind is not None:
            return problem(f"returns {kind}")
        if isinstance(value, cst.Call) and self.losses.is_helper_loss_dict(value, scope, "loss"):
            # `return self._shared_step(batch, "train")` returning `{"loss": loss}`: its one key is the loss
            item = cst.SubscriptElement(cst.Index(cst.SimpleString('"loss"')))
            return ReturnPlan(node, "loss", line, loss=cst.Subscript(value, [item]))
        trouble = self.losses.problem(value, scope)
        if trouble is not None:
            return problem(trouble)
        if step.hook in BATCH_END_FOR_HOOK:
            hook_name = BATCH_END_FOR_HOOK[step.hook]
            if hook_name in self.facts.hook_defs:
                return problem(
                    f"`{hook_name}` (line {self.facts.hook_defs[hook_name]}) receives this tensor;"
                    f" returning {step.result_name} would change what it gets"
                )
            if self.run.options.strict_keys:
                return problem(
                    f"returns a Tensor, and callbacks' `{hook_name}` would receive a mapping"
                    f" ({step.result_name}) instead (--strict-keys)"
                )
            if not any(n[1].startswith(_BARE_TENSOR_NOTE) for n in step.notes):
                step.notes.append((line, _tensor_note(hook_name, step.result_name)))
        return ReturnPlan(node, "loss", line, loss=value)

    def _result_class_of(self, value: cst.BaseExpression) -> str | None:
        if not isinstance(value, cst.Call):
            return None
        qualified = self.imports.qualify(value.func) or ""
        for name in ("TrainStepResult", "ValStepResult"):
            if qualified == name or qualified in (f"{m}.{name}" for m in RESULT_MODULES):
                return name
        return None

    def _delegate_of(self, step: Step, value: cst.BaseExpression) -> tuple[str, str] | None:
        """``return super().training_step(...)`` / ``return self.validation_step(...)`` in a test_step."""
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
            return None
        hook = value.func.attr.value
        receiver = value.func.value
        if hook not in STEP_HOOKS or RESULT_FOR_HOOK[hook] != step.result_name:
            return None
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super":
            self.delegate_calls.add(id(value))
            return ("super", hook)
        if isinstance(receiver, cst.Name) and receiver.value == step.self_name and hook != step.hook:
            self.delegate_calls.add(id(value))
            return ("self", hook)
        return None

    @staticmethod
    def propagate_skips(steps: list[Step]) -> bool:
        """Skip what depends on a skipped step; True if anything changed (call again until False).

        An override and the step it overrides (in this file) keep compatible return types only if
        both are rewritten; a step returning ``super().training_step(...)`` is typed only if that is.
        """
        changed = False
        for step in steps:
            if step.status not in ("rewritten", "typed"):
                continue
            reason: str | None = None
            for plan in step.returns:
                if plan.kind == "delegate" and plan.delegate is not None:
                    skipped = [t for t in delegate_targets(step, plan.delegate)[0] if t.status == "skipped"]
                    if skipped:
                        returned = short(plan.node.value or plan.node)
                        reason = f"returns `{returned}`, and {skipped[0].qualname} was skipped"
            if reason is None and step.status == "rewritten":
                family = [*step.owner.ancestors(), *step.owner.descendants()]
                related = [c.steps[step.hook] for c in family if step.hook in c.steps]
                skipped = [r for r in related if r.status == "skipped"]
                if skipped:
                    reason = (
                        f"{skipped[0].qualname} was skipped, and an override must keep a return type"
                        " compatible with the step it overrides"
                    )
            if reason is not None:
                step.status = "skipped"
                step.problems = [(step.line, reason)]
                changed = True
        return changed

    def mark_used_results(self, steps: list[Step]) -> None:
        """A step whose return value other code of the file uses keeps returning what it returned."""
        for call, owner, receiver, hook, built in self.facts.step_calls:
            if id(call) in self.delegate_calls:
                continue
            line = self.positions.line(call)
            classes = {id(s.owner): s.owner for s in steps if s.owner.node.name.value == built}
            if receiver == "super" and owner is not None:
                targets = [a.steps[hook] for a in owner.ancestors() if hook in a.steps]
            elif receiver == "self" and owner is not None:
                family = [owner, *owner.ancestors(), *owner.descendants()]
                targets = [c.steps[hook] for c in family if hook in c.steps]
            elif classes:  # the receiver is built from a class of the run: the steps it may run
                family = [f for c in classes.values() for f in (c, *c.ancestors())]
                targets = list({id(c.steps[hook]): c.steps[hook] for c in family if hook in c.steps}.values())
            else:  # any step of the run may be the one called
                targets = [s for s in steps if s.hook == hook]
            for target in targets:
                where = f"line {line}" if target.owner.file is self.file else f"{self.file.path} line {line}"
                target.problems.append((target.line, f"its return value is used at {where} (`{short(call)}`)"))

    @staticmethod
    def delegate_state(step: Step) -> Literal["ready", "wait"]:
        for plan in step.returns:
            if plan.kind != "delegate" or plan.delegate is None:
                continue
            targets, missing = delegate_targets(step, plan.delegate)
            if missing:
                plan.kind = "problem"
                plan.problem = f"returns `{short(plan.node.value or plan.node)}`, defined outside the files given"
                continue
            if any(t.status == "pending" for t in targets if t is not step):
                return "wait"
            skipped = [t for t in targets if t.status == "skipped"]
            if skipped:
                plan.kind = "problem"
                plan.problem = f"returns `{short(plan.node.value or plan.node)}`, and {skipped[0].qualname} was skipped"
        return "ready"

    def check_annotation(self, step: Step) -> None:
        if step.function is None:
            return
        returns = step.function.returns
        valued = [r for r in step.returns if r.kind != "none"]
        if not valued:
            return
        if returns is not None and annotation_shape(returns.annotation, self.imports) is None:
            step.problems.append(
                (step.line, f"return annotation `{short(returns.annotation)}` is not one the codemod knows")
            )

    def finish(self, step: Step) -> None:
        problems = list(step.problems) + [(r.line, r.problem) for r in step.returns if r.kind == "problem"]
        converted = [r for r in step.returns if r.kind in ("loss", "dict", "built", "typed", "delegate")]
        if problems:
            step.status = "skipped"
            line, reason = min(problems, key=lambda p: p[0])
            if converted and any(r.kind == "problem" for r in step.returns):
                other = converted[0]
                reason = f"several return shapes: {reason} here, {other.shape()} at line {other.line}"
            step.problems = [(line, reason)]
            return
        if not converted:
            step.status = "nothing"
            return
        assert step.function is not None
        annotation = new_annotation(step.function.returns, step.result_name, step.may_return_none(), self.imports)
        step.annotation = annotation
        rewrites = any(r.kind in ("loss", "dict", "built") for r in step.returns)
        step.status = "rewritten" if rewrites or annotation is not None else "typed"
        self._note_delegated_tensor(step)

    def _note_delegated_tensor(self, step: Step) -> None:
        """``return self.validation_step(...)`` in a test_step whose target returned a Tensor: the
        test_step's batch-end hooks get the mapping too."""
        hook_name = BATCH_END_FOR_HOOK.get(step.hook)
        if hook_name is None or any(n[1].startswith(_BARE_TENSOR_NOTE) for n in step.notes):
            return
        for plan in step.returns:
            if plan.kind != "delegate" or plan.delegate is None:
                continue
            for target in delegate_targets(step, plan.delegate)[0]:
                if target is not step and any(n[1].startswith(_BARE_TENSOR_NOTE) for n in target.notes):
                    step.notes.append((plan.line, _tensor_note(hook_name, step.result_name, target.qualname)))
                    return

    def decide_base_classes(self, bound: dict[str, str]) -> None:
        """With --base-class: which LightningModule bases become ``TypedLightningModule`` (``base_switches``)."""
        if not self.base_class:
            return
        chosen: str | None = None  # the file can hold one TypedLightningModule name, of one flavour
        for info in self.classes:
            for arg, flavour in info.lightning_bases:
                if flavour == "typed":
                    continue
                family = [info, *info.descendants()]
                steps = [s for c in family for s in c.steps.values()]
                if not any(s.status in ("rewritten", "typed") for s in steps):
                    continue  # nothing typed to adapt: leave the class as it is

                def keep(reason: str) -> None:  # called in this iteration only, with its `info`
                    line = self.positions.line(info.node.name)  # noqa: B023
                    self.findings.append(Finding("kept-base", info.qualname, line, reason))  # noqa: B023

                skipped = [s for s in steps if s.status == "skipped"]
                if flavour not in TYPED_BASE_MODULES:
                    keep(f"cannot tell which Lightning package `{short(arg.value)}` comes from")
                elif skipped:
                    keep(f"{skipped[0].qualname} was skipped")
                elif not name_is_free(bound, TYPED_BASE, TYPED_BASE_MODULES[flavour][0]):
                    keep(f"`{TYPED_BASE}` already names something else in this file")
                elif chosen is not None and chosen != TYPED_BASE_MODULES[flavour][0]:
                    keep(f"another class of this file derives from the other Lightning package's {TYPED_BASE}")
                else:
                    chosen = TYPED_BASE_MODULES[flavour][0]
                    self.base_switches[arg] = chosen
                    line = self.positions.line(info.node.name)
                    switch = f"{short(arg.value)} -> {TYPED_BASE} (from {chosen})"
                    self.findings.append(Finding("switched-base", info.qualname, line, switch))


def resolve_run(analyzers: list[Analyzer], steps: list[Step]) -> None:
    """Decide every step of the run: delegations and overrides may cross files."""
    by_file = {id(a.file): a for a in analyzers}
    analyzer_of = {id(step): by_file[id(step.owner.file)] for step in steps}
    for analyzer in analyzers:
        analyzer.mark_used_results(steps)
    for step in steps:
        analyzer_of[id(step)].check_annotation(step)
    pending = [s for s in steps if s.status == "pending"]
    while pending:  # delegates depend on their targets' outcome
        progressed = False
        for step in list(pending):
            if Analyzer.delegate_state(step) == "wait":
                continue
            analyzer_of[id(step)].finish(step)
            pending.remove(step)
            progressed = True
        if not progressed:
            for step in pending:
                step.problems.append((step.line, "delegates in a cycle to other steps"))
                analyzer_of[id(step)].finish(step)
            pending = []
    while Analyzer.propagate_skips(steps):
        pass
