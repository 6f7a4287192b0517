"""``python -m lightning_step_types.check_resume --config config.yaml``."""

from __future__ import annotations

import sys

from lightning_step_types.check_resume.cli import main

if __name__ == "__main__":
    sys.exit(main())
