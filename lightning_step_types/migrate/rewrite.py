"""Builds the new code from the analysis and applies it: typed results, log_dict calls, annotations,
base classes and the import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import libcst as cst
from libcst.metadata import MetadataWrapper

from lightning_step_types.migrate.analysis import Analyzer, resolve_run
from lightning_step_types.migrate.conventions import PACKAGE, TYPED_BASE
from lightning_step_types.migrate.facts import Options, RunFacts
from lightning_step_types.migrate.imports import (
    ImportChange,
    add_imports,
    bound_at_module_level,
    name_is_free,
    names_in,
    remove_unused_imports,
    remove_unused_lightning_imports,
    statement_text,
)
from lightning_step_types.migrate.layout import (
    keyword_arg,
    multiline_indent,
    newline_then,
    reindent,
    remove_elements,
    standalone,
)
from lightning_step_types.migrate.positions import Positions
from lightning_step_types.migrate.report import Finding, Migration
from lightning_step_types.migrate.steps import DictPlan, FileContext, Step, collect_classes, link_classes
from lightning_step_types.migrate.syntax import ImportTable


def build_result_from_dict(result_name: str, plan: DictPlan) -> tuple[cst.Call, list[cst.EmptyLine], str]:
    """``TrainStepResult(loss=..., metadata={...})`` from a returned dict, the comments that lose their
    place (to go above the statement) and the indentation of the dict's elements ("" if on one line)."""
    node = plan.node
    loss_element = node.elements[plan.loss_index]
    assert isinstance(loss_element, cst.DictElement)
    rest, owned = remove_elements(node, plan.removed)
    legacy_owned = [owned[i] for i in plan.removed if i != plan.loss_index]
    displaced = standalone((line for o in legacy_owned for line in o.above), (o.trailing for o in legacy_owned))
    displaced += plan.log_comments
    loss_owned = owned[plan.loss_index]
    unit = multiline_indent(node)
    if unit is None:  # one line, or a dict hugging its first element: keep it so
        displaced = standalone(loss_owned.above, [loss_owned.trailing]) + displaced
        args = [keyword_arg("loss", loss_element.value)]
        if rest.elements:
            args = [
                keyword_arg("loss", loss_element.value, cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                keyword_arg("metadata", rest),
            ]
        return cst.Call(cst.Name(result_name), args, lpar=node.lpar, rpar=node.rpar), displaced, ""
    rbrace_ws = node.rbrace.whitespace_before
    closing = rbrace_ws.last_line.value if isinstance(rbrace_ws, cst.ParenthesizedWhitespace) else ""
    args = [
        keyword_arg(
            "loss",
            loss_element.value,
            cst.Comma(whitespace_after=newline_then(unit if rest.elements else closing, loss_owned.trailing)),
        )
    ]
    if rest.elements:
        metadata = reindent(rest, prefix=unit)
        args.append(keyword_arg("metadata", metadata, cst.Comma(whitespace_after=newline_then(closing))))
    call = cst.Call(
        cst.Name(result_name),
        args,
        whitespace_before_args=newline_then(unit, above=loss_owned.above),
        lpar=node.lpar,
        rpar=node.rpar,
    )
    return call, displaced, unit


def build_log_calls(self_name: str, log_calls: list[tuple[cst.BaseExpression, bool]], unit: str) -> list[cst.Expr]:
    """``self.log_dict({...})`` / ``self.log_dict({...}, prog_bar=True)`` for the 0.x entries."""
    statements: list[cst.Expr] = []
    for expr, prog_bar in log_calls:
        value = reindent(expr, strip=unit)
        args = [cst.Arg(value)]
        if prog_bar:
            space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            args = [cst.Arg(value, comma=space), keyword_arg("prog_bar", cst.Name("True"))]
        call = cst.Call(cst.Attribute(cst.Name(self_name), cst.Name("log_dict")), args)
        statements.append(cst.Expr(call))
    return statements


_Inserted = tuple[list[cst.Expr], list[cst.EmptyLine]]


@dataclasses.dataclass
class Edits:
    """Every change to make, keyed by the original nodes."""

    return_values: dict[cst.Return, cst.BaseExpression] = dataclasses.field(default_factory=lambda: {})
    # return -> (log_dict statements to put before it, comments that lose their place)
    before_return: dict[cst.Return, _Inserted] = dataclasses.field(default_factory=lambda: {})
    annotations: dict[cst.FunctionDef, cst.Annotation] = dataclasses.field(default_factory=lambda: {})
    bases: dict[cst.Arg, str] = dataclasses.field(default_factory=lambda: {})
    imports: dict[str, set[str]] = dataclasses.field(default_factory=lambda: {})  # module -> names to import


def _suite_returns(module: cst.Module) -> set[int]:
    """id() of the returns written on the line of their ``if``/``for``/``with`` (``if x: return {...}``)."""

    class _Suites(cst.CSTVisitor):
        found: set[int] = set()

        def visit_SimpleStatementSuite(self, node: cst.SimpleStatementSuite) -> None:
            self.found.update(id(s) for s in node.body if isinstance(s, cst.Return))

    finder = _Suites()
    finder.found = set()
    module.visit(finder)
    return finder.found


def plan_step_edits(step: Step, edits: Edits, suite_returns: set[int]) -> str | None:
    """Add one rewritten step's changes to ``edits``; or, if they would lose comments, why not."""
    assert step.function is not None
    planned: dict[cst.Return, cst.BaseExpression] = {}
    inserted: dict[cst.Return, tuple[list[cst.Expr], list[cst.EmptyLine]]] = {}
    for plan in step.returns:
        if plan.kind == "loss" and plan.loss is not None:
            loss = plan.loss
            if isinstance(loss, cst.Name):  # `return(loss)`: the call's parentheses replace the redundant ones
                loss = loss.with_changes(lpar=[], rpar=[])
            planned[plan.node] = cst.Call(cst.Name(step.result_name), [keyword_arg("loss", loss)])
        elif plan.kind == "built" and plan.built is not None:
            planned[plan.node] = plan.built
            if plan.built_logs:
                inserted[plan.node] = (build_log_calls(step.self_name, plan.built_logs, ""), [])
        elif plan.kind == "dict" and plan.dict_plan is not None:
            call, displaced, unit = build_result_from_dict(step.result_name, plan.dict_plan)
            planned[plan.node] = call
            logs = build_log_calls(step.self_name, plan.dict_plan.log_calls, unit)
            if displaced and id(plan.node) in suite_returns:
                return (
                    "the comments inside the returned dict would have no line of their own"
                    " (the return shares its line with an `if`/`for`/`with`): put the return on a line of its own"
                )
            if logs or displaced:
                inserted[plan.node] = (logs, displaced)
    edits.return_values.update(planned)
    edits.before_return.update(inserted)
    if step.annotation is not None:
        edits.annotations[step.function] = step.annotation
    edits.imports.setdefault(PACKAGE, set()).add(step.result_name)
    return None


class _Rewriter(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        value = self.edits.return_values.get(original_node)
        if value is None:
            return updated_node
        space = updated_node.whitespace_after_return
        if isinstance(space, cst.SimpleWhitespace) and not space.value:  # `return{...}`
            space = cst.SimpleWhitespace(" ")
        return updated_node.with_changes(value=value, whitespace_after_return=space)

    def _inserted(
        self, original_body: Sequence[cst.BaseSmallStatement]
    ) -> list[tuple[int, list[cst.Expr], list[cst.EmptyLine]]]:
        found: list[tuple[int, list[cst.Expr], list[cst.EmptyLine]]] = []
        for index, small in enumerate(original_body):
            if isinstance(small, cst.Return) and small in self.edits.before_return:
                logs, comments = self.edits.before_return[small]
                found.append((index, logs, comments))
        return found

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine]:
        inserted = self._inserted(original_node.body)
        if not inserted:
            return updated_node
        comments = [c for _, _, cs in inserted for c in cs]
        if len(updated_node.body) == 1:  # `return {...}` alone on its line: one line per log_dict call
            _, logs, _ = inserted[0]
            lead = [*updated_node.leading_lines, *comments]
            lines = [cst.SimpleStatementLine([log]) for log in logs] + [updated_node.with_changes(leading_lines=[])]
            lines[0] = lines[0].with_changes(leading_lines=lead)
            return cst.FlattenSentinel(lines)
        body = self._insert_inline(updated_node.body, inserted)
        return updated_node.with_changes(body=body, leading_lines=[*updated_node.leading_lines, *comments])

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.SimpleStatementSuite:
        inserted = self._inserted(original_node.body)
        if not inserted:
            return updated_node
        return updated_node.with_changes(body=self._insert_inline(updated_node.body, inserted))

    @staticmethod
    def _insert_inline(
        body: Sequence[cst.BaseSmallStatement], inserted: list[tuple[int, list[cst.Expr], list[cst.EmptyLine]]]
    ) -> list[cst.BaseSmallStatement]:
        new_body = list(body)
        for index, logs, _ in sorted(inserted, key=lambda item: item[0], reverse=True):
            new_body[index:index] = logs
        return new_body

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        annotation = self.edits.annotations.get(original_node)
        return updated_node if annotation is None else updated_node.with_changes(returns=annotation)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        name = self.edits.bases.get(original_node)
        return updated_node if name is None else updated_node.with_changes(value=cst.Name(name))


def migrate_run(
    sources: Sequence[tuple[str, cst.Module]], options: Options, texts: Sequence[tuple[str, str]] = ()
) -> list[Migration]:
    """Migrate the files of one run together: bases, helpers and key readers are looked up in all of
    them (``texts``: files only searched for key readers). One ``Migration`` per source, in order."""
    run = RunFacts(options)
    run.texts = list(texts)
    files = [
        FileContext(path, module, ImportTable(module), Positions(MetadataWrapper(module, unsafe_skip_copy=True)))
        for path, module in sources
    ]
    for file in files:
        file.run = files
    classes = [collect_classes(file) for file in files]
    link_classes([c for found in classes for c in found], options.assume_lightning)
    analyzers = [Analyzer(file, found, run) for file, found in zip(files, classes)]
    steps_of = [analyzer.collect_steps() for analyzer in analyzers]  # after every file's facts are in `run`
    steps = [s for found in steps_of for s in found]
    resolve_run(analyzers, steps)
    bound = {id(f): bound_at_module_level(f.module) for f in files}
    suites = {id(f): _suite_returns(f.module) for f in files}
    blocked = True
    while blocked:  # skipping one step can make its overrides and delegates skip too
        blocked = False
        for step in steps:
            if step.status != "rewritten":
                continue
            file_id = id(step.owner.file)
            if not name_is_free(bound[file_id], step.result_name, PACKAGE):
                reason: str | None = f"`{step.result_name}` already names something else in this file"
            else:
                reason = plan_step_edits(step, Edits(), suites[file_id])
            if reason is not None:  # the step keeps its code
                step.status = "skipped"
                step.problems = [(step.line, reason)]
                blocked = True
        blocked = Analyzer.propagate_skips(steps) or blocked
    return [
        _migrate_file(analyzer, found, bound[id(analyzer.file)], suites[id(analyzer.file)])
        for analyzer, found in zip(analyzers, steps_of)
    ]


def _migrate_file(analyzer: Analyzer, steps: list[Step], bound: dict[str, str], suite_returns: set[int]) -> Migration:
    module = analyzer.module
    edits = Edits()
    for step in steps:
        if step.status == "rewritten":
            plan_step_edits(step, edits, suite_returns)
    analyzer.decide_base_classes(bound)
    for arg, source in analyzer.base_switches.items():
        edits.bases[arg] = TYPED_BASE
        edits.imports.setdefault(source, set()).add(TYPED_BASE)
    new_module = module
    import_changes: list[ImportChange] = []
    if edits.return_values or edits.annotations or edits.bases:
        new_module = cst.ensure_type(module.visit(_Rewriter(edits)), cst.Module)
        new_module = add_imports(new_module, edits.imports)
        replaced = {n for f in edits.annotations if f.returns is not None for n in names_in(f.returns.annotation)}
        new_module, import_changes = remove_unused_imports(new_module, replaced)
        if edits.bases:  # `pl` of `pl.LightningModule`, or `LightningModule` itself
            heads = {head for arg in edits.bases if (head := _head_name(arg.value)) is not None}
            new_module, lightning_changes = remove_unused_lightning_imports(new_module, heads)
            import_changes += lightning_changes
    findings = list(analyzer.findings)
    lines = _import_lines(analyzer)
    for change in import_changes:
        kind: Literal["import-removed", "import-kept"] = "import-removed" if change.removed else "import-kept"
        findings.append(Finding(kind, "", lines.get(statement_text(change.statement), 0), change.describe()))
    verdicts: dict[str, Literal["rewritten", "typed", "nothing", "ignored"]] = {
        "rewritten": "rewritten",
        "typed": "typed",
        "nothing": "nothing",
        "ignored": "ignored",
    }
    for step in steps:
        if step.status == "skipped":
            line, reason = step.problems[0]
            findings.append(Finding("skipped", step.qualname, line, reason))
        elif step.status in verdicts:
            findings.append(Finding(verdicts[step.status], step.qualname, step.line))
        if step.status in ("rewritten", "typed"):
            findings += [Finding("note", step.qualname, note_line, text) for note_line, text in step.notes]
    findings.sort(key=lambda f: (f.line, f.where, f.kind))
    return Migration(module, new_module, tuple(findings), analyzer.file.path)


def _import_lines(analyzer: Analyzer) -> dict[str, int]:
    """Each module-level import line of the file as it was (on one line) -> its line number."""
    lines: dict[str, int] = {}
    for statement in analyzer.module.body:
        if isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
        ):
            lines.setdefault(statement_text(statement), analyzer.positions.line(statement))
    return lines


def _head_name(expr: cst.BaseExpression) -> str | None:
    """The name a base expression is read from: ``pl`` in ``pl.LightningModule``."""
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def migrate_module(module: cst.Module, *, base_class: bool = False, path: str = "<string>") -> Migration:
    """Rewrite the steps of every LightningModule in ``module``; nothing else changes."""
    return migrate_run([(path, module)], Options(base_class=base_class))[0]


def migrate_source(source: str | bytes, *, base_class: bool = False) -> Migration:
    """Parse and migrate a source text; raises ``libcst.ParserSyntaxError`` if it does not parse."""
    return migrate_module(cst.parse_module(source), base_class=base_class)
