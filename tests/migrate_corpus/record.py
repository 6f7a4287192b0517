"""Records what today's codemod does to the corpus into ``expected.json`` and prints the table.

    PYTHONPATH=. python -m tests.migrate_corpus.record [--check] [FIXTURE...]

Review every changed verdict and digest before committing the file: ``unsafe`` (the
``fixture:Class.hook`` keys of rewrites that change behaviour) is kept from the old file and must
be edited by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .measure import migrated, outputs, table, verdicts
from .sources import FIXTURES
from .training import RECIPES

EXPECTED = Path(__file__).resolve().parent / "expected.json"


def load_expected() -> dict:
    return json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {"unsafe": [], "fixtures": {}}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")]
    expected = load_expected()
    results = {}
    for fixture in FIXTURES:
        if names and fixture.name not in names:
            continue
        run = migrated(fixture)
        results[fixture.name] = (fixture, run)
        entry = {
            "exit_code": run.exit_code,
            "report": list(run.report),
            "verdicts": verdicts(run),
            "outputs": outputs(run),
        }
        if expected["fixtures"].get(fixture.name) != entry:
            print(f"== {fixture.name}: {'differs' if fixture.name in expected['fixtures'] else 'new'}")
            for key, verdict in entry["verdicts"].items():
                print(f"   {key}: {verdict}")
        expected["fixtures"][fixture.name] = entry
    print(table(results, set(expected["unsafe"]), frozenset((r.fixture, r.owner) for r in RECIPES)))
    if not check:
        EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
