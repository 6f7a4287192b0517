"""``python -m lightning_step_types.migrate``: see the package docstring."""

import sys

from lightning_step_types.migrate.cli import main

sys.exit(main())
