"""The test suite's time limits, in one place: each guards against a hang and never times a correct run.

A limit is ``LOADED`` times what the run it guards takes on an idle two-core machine. At a load
average of 8 on 2 cores (four runnable processes per core) a run takes about four times as long;
a limit allows twice that. ``LIGHTNING_STEP_TYPES_TIME_FACTOR`` (a number, default 1) multiplies
every limit, for a slower or busier machine still. ``tests/test_limits.py`` checks that no test
sets a time limit of its own.
"""

from __future__ import annotations

import os

LOADED = 8
FACTOR = float(os.environ.get("LIGHTNING_STEP_TYPES_TIME_FACTOR", "1"))


def hang_limit(idle_s: float) -> float:
    """Seconds to wait for a run that takes ``idle_s`` seconds on an idle machine before calling it hung."""
    return LOADED * idle_s * FACTOR
