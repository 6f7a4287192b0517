"""Build step: the wheel's ``lightning_step_types`` package carries the stubs as inline ``.pyi`` files.

``stubs/lightning_step_types/**/*.pyi`` is the one source of the public contract. The source tree's
package holds only the runtime ``.py`` files (``mypy.ini`` checks those in strict mode, and a
``.pyi`` beside them would be checked instead), so ``build_py`` places each stub next to its module
at build time. A checker then finds the contract in the installed package itself, with no
``-stubs`` package: ``pyright --verifytypes`` can score it, and an editable install in strict mode
links the stubs into its tree like every other file (``get_output_mapping``).
"""

from __future__ import annotations

from pathlib import Path

from setuptools.command.build_py import build_py as _build_py

STUBS = Path(__file__).parent / "stubs" / "lightning_step_types"
PACKAGE = "lightning_step_types"


class build_py(_build_py):  # noqa: N801 - setuptools' command name
    def _stub_mapping(self) -> dict[str, str]:
        """build path -> source path of each stub (py.typed comes with the runtime package itself)."""
        target_dir = Path(self.build_lib, PACKAGE)
        return {
            str(target_dir / stub.relative_to(STUBS)): str(stub.relative_to(STUBS.parents[1]))
            for stub in sorted(STUBS.rglob("*.pyi"))
        }

    def build_package_data(self) -> None:
        super().build_package_data()
        for target, source in self._stub_mapping().items():
            self.mkpath(str(Path(target).parent))
            self.copy_file(source, target)

    def get_output_mapping(self) -> dict[str, str]:
        return {**super().get_output_mapping(), **self._stub_mapping()}

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else [*outputs, *self._stub_mapping()]
