"""Verification by generation: whole training setups drawn at random, each resumed and judged.

``choices.py`` (a setup is a function of small choices), ``space.py`` (the dimensions and how a
setup is drawn), ``build.py`` (a setup's objects, built in each fit's own process), ``plan.py``
(where the interrupted fit stops, what its resume starts from), ``oracle.py`` (the verdict),
``families.py`` (the known failures), ``shrink.py``, ``run.py`` (many setups side by side) and
``report.py`` (the long mode: ``python -m tests.setups``). See docs/reliability.md.
"""
