"""Layout-preserving edits of expressions: removing dict elements with their comments, moving
continuation lines left or right, and the whitespace of new arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import libcst as cst


@dataclasses.dataclass(frozen=True)
class Owned:
    """The comments that belonged to a dict element the rewrite removes: lines above it, and its trailing one."""

    above: tuple[cst.EmptyLine, ...]
    trailing: cst.TrailingWhitespace | None


def _comment_lines(ws: cst.BaseParenthesizableWhitespace) -> tuple[cst.EmptyLine, ...]:
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return tuple(line for line in ws.empty_lines if line.comment is not None)
    return ()


def _trailing(ws: cst.BaseParenthesizableWhitespace) -> cst.TrailingWhitespace | None:
    if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
        return ws.first_line
    return None


def _merge_gaps(
    before: cst.BaseParenthesizableWhitespace, after: cst.BaseParenthesizableWhitespace
) -> cst.BaseParenthesizableWhitespace:
    """The whitespace left where an element was: the line end before it, the layout after it."""
    if isinstance(before, cst.ParenthesizedWhitespace) and isinstance(after, cst.ParenthesizedWhitespace):
        return cst.ParenthesizedWhitespace(
            first_line=before.first_line, empty_lines=after.empty_lines, indent=after.indent, last_line=after.last_line
        )
    if isinstance(before, cst.ParenthesizedWhitespace):
        return before.with_changes(empty_lines=[])
    if isinstance(after, cst.ParenthesizedWhitespace) and _comment_lines(after):
        return after.with_changes(first_line=cst.TrailingWhitespace())
    return before


def remove_elements(node: cst.Dict, indices: Iterable[int]) -> tuple[cst.Dict, dict[int, Owned]]:
    """The dict without the given elements, its layout kept, and the comments each removed element owned."""
    elements = list(node.elements)
    lbrace_ws = node.lbrace.whitespace_after
    rbrace_ws = node.rbrace.whitespace_before
    owned: dict[int, Owned] = {}

    def gap(k: int) -> cst.BaseParenthesizableWhitespace:
        if k == 0:
            return lbrace_ws
        comma = elements[k - 1].comma
        return comma.whitespace_after if isinstance(comma, cst.Comma) else cst.SimpleWhitespace("")

    def set_gap(k: int, ws: cst.BaseParenthesizableWhitespace) -> None:
        nonlocal lbrace_ws
        if k == 0:
            lbrace_ws = ws
        else:
            comma = elements[k - 1].comma
            base = comma if isinstance(comma, cst.Comma) else cst.Comma()
            elements[k - 1] = elements[k - 1].with_changes(comma=base.with_changes(whitespace_after=ws))

    for i in sorted(set(indices), reverse=True):
        before = gap(i)
        comma = elements[i].comma
        if i < len(elements) - 1:
            assert isinstance(comma, cst.Comma)
            owned[i] = Owned(_comment_lines(before), _trailing(comma.whitespace_after))
            set_gap(i, _merge_gaps(before, comma.whitespace_after))
        else:  # the last element: what follows it is the whitespace before "}"
            trailing = _trailing(rbrace_ws)
            if trailing is None and isinstance(comma, cst.Comma):
                trailing = _trailing(comma.whitespace_after)
            owned[i] = Owned(_comment_lines(before), trailing)
            kept_comment = _trailing(before)  # the previous element's own trailing comment
            if isinstance(rbrace_ws, cst.ParenthesizedWhitespace):
                rbrace_ws = rbrace_ws.with_changes(first_line=kept_comment or cst.TrailingWhitespace())
                kept_comment = None
            if i > 0:
                prev_comma = elements[i - 1].comma
                assert isinstance(prev_comma, cst.Comma)
                if kept_comment is not None:  # `{"a": a,  # about a\n "loss": l}`: keep the line break
                    kept = prev_comma.with_changes(whitespace_after=before)
                    elements[i - 1] = elements[i - 1].with_changes(comma=kept)
                elif isinstance(comma, cst.Comma):  # keep the trailing comma
                    kept = prev_comma.with_changes(whitespace_after=cst.SimpleWhitespace(""))
                    elements[i - 1] = elements[i - 1].with_changes(comma=kept)
                else:
                    elements[i - 1] = elements[i - 1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        del elements[i]
    new = node.with_changes(
        elements=elements,
        lbrace=node.lbrace.with_changes(whitespace_after=lbrace_ws),
        rbrace=node.rbrace.with_changes(whitespace_before=rbrace_ws),
    )
    return new, owned


class _Reindent(cst.CSTTransformer):
    """Moves the continuation lines of an expression right (``prefix``) or left (``strip``)."""

    def __init__(self, prefix: str = "", strip: str = "") -> None:
        super().__init__()
        self.prefix = prefix
        self.strip = strip

    def _shift(self, ws: cst.SimpleWhitespace) -> cst.SimpleWhitespace:
        value = ws.value
        if self.strip and value.startswith(self.strip):
            value = value[len(self.strip) :]
        return cst.SimpleWhitespace(self.prefix + value)

    def leave_ParenthesizedWhitespace(
        self, original_node: cst.ParenthesizedWhitespace, updated_node: cst.ParenthesizedWhitespace
    ) -> cst.ParenthesizedWhitespace:
        if not updated_node.indent:
            return updated_node
        lines = [
            line.with_changes(whitespace=self._shift(line.whitespace)) if line.indent else line
            for line in updated_node.empty_lines
        ]
        return updated_node.with_changes(last_line=self._shift(updated_node.last_line), empty_lines=lines)


def reindent(node: cst.BaseExpression, prefix: str = "", strip: str = "") -> cst.BaseExpression:
    if not prefix and not strip:
        return node
    moved = node.visit(_Reindent(prefix, strip))
    assert isinstance(moved, cst.BaseExpression)  # a transformer that only edits whitespace keeps the node's type
    return moved


def _no_space() -> cst.AssignEqual:
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def keyword_arg(
    name: str, value: cst.BaseExpression, comma: cst.Comma | cst.MaybeSentinel = cst.MaybeSentinel.DEFAULT
) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name), equal=_no_space(), comma=comma)


def newline_then(
    indent: str, first_line: cst.TrailingWhitespace | None = None, above: Sequence[cst.EmptyLine] = ()
) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=first_line or cst.TrailingWhitespace(),
        empty_lines=list(above),
        indent=True,
        last_line=cst.SimpleWhitespace(indent),
    )


def standalone(
    lines: Iterable[cst.EmptyLine], trailing: Iterable[cst.TrailingWhitespace | None]
) -> list[cst.EmptyLine]:
    """Comments that lose their place, as comment lines above a statement."""
    out = [cst.EmptyLine(comment=line.comment) for line in lines if line.comment is not None]
    out += [cst.EmptyLine(comment=t.comment) for t in trailing if t is not None and t.comment is not None]
    return out


def multiline_indent(node: cst.Dict) -> str | None:
    """The indentation of a dict's elements when it opens with a line break (``{`` then a newline)."""
    ws = node.lbrace.whitespace_after
    if isinstance(ws, cst.ParenthesizedWhitespace) and ws.indent:
        return ws.last_line.value
    return None
