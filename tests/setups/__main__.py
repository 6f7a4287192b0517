"""``python -m tests.setups --seed 7 --count 5000``: the long mode (see docs/reliability.md)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' folder: `setups` as the test suite imports it

from setups.report import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
