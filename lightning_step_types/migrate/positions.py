"""The line of every node of a file, as the report gives it."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider


class Positions:
    def __init__(self, wrapper: MetadataWrapper) -> None:
        self._ranges: dict[cst.CSTNode, CodeRange] = dict(wrapper.resolve(PositionProvider))

    def line(self, node: cst.CSTNode) -> int:
        code_range = self._ranges.get(node)
        return code_range.start.line if code_range is not None else 0
