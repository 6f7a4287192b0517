"""A griffe extension for the API reference: docstrings assigned as ``__doc__ = Mixin.__doc__``.

Each Lightning flavour class (``lightning_step_types.pytorch_lightning.TypedLightningModule`` and
friends) shares its mixin's docstring by assignment, which static analysis cannot read; this
takes the docstring the class has at run time instead.

The typed module's default ``nonfinite_loss`` is written ``DEFAULT_NONFINITE_LOSS`` in the sources (a
``"raise"`` told apart from one the user sets); signatures show the value, ``'raise'``.
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

    def on_function_instance(self, *, node: ast.AST | griffe.ObjectNode, func: griffe.Function, **kwargs: Any) -> None:
        for parameter in func.parameters:
            if str(parameter.default) == "DEFAULT_NONFINITE_LOSS":
                parameter.default = "'raise'"

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, **kwargs: Any
    ) -> None:
        if str(attr.value) == "DEFAULT_NONFINITE_LOSS":
            attr.value = "'raise'"


def _assigns_doc(node: ast.ClassDef) -> bool:
    return any(
        isinstance(statement, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == "__doc__" for target in statement.targets)
        for statement in node.body
    )
