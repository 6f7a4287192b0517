"""A griffe extension for the API reference: docstrings assigned as ``__doc__ = Mixin.__doc__``.

Each Lightning flavour class (``lightning_step_types.pytorch_lightning.TypedLightningModule`` and
friends) shares its mixin's docstring by assignment, which static analysis cannot read; this
takes the docstring the class has at run time instead.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

import griffe


class FlavourDocstrings(griffe.Extension):
    def on_class_instance(self, *, node: ast.AST | griffe.ObjectNode, cls: griffe.Class, **kwargs: Any) -> None:
        if cls.docstring is not None or not isinstance(node, ast.ClassDef) or not _assigns_doc(node):
            return
        runtime_doc = griffe.dynamic_import(cls.path).__doc__
        if runtime_doc:
            cls.docstring = griffe.Docstring(inspect.cleandoc(runtime_doc), parent=cls)


def _assigns_doc(node: ast.ClassDef) -> bool:
    return any(
        isinstance(statement, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == "__doc__" for target in statement.targets)
        for statement in node.body
    )
