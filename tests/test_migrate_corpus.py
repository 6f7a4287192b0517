"""The codemod on real-world LightningModules (issue 11's corpus; see ``migrate_corpus/sources.py``).

Each fixture is a set of files from a pinned PyPI release of a public project (Lightning's own
demos and 0.9 examples, torchgeo, lightning-bolts, pytorch-forecasting, asteroid, pytorch-tabular),
downloaded at test time into a cache (``$LST_CORPUS_CACHE``) and migrated together through the
command line. ``migrate_corpus/expected.json`` pins, per fixture: the exit code, every report
line, one verdict per step, and the sha256 of each migrated file (no third-party text, original
or rewritten, is stored here). Per fixture the tests check that output, that a second run changes
nothing, that every output parses, and that ``--diff`` prints exactly the change and writes
nothing. The training tests train the released and the migrated class under plain Lightning on
synthetic batches and require identical final parameters.

After a change to the codemod: ``PYTHONPATH=. python -m tests.migrate_corpus.record``, review the
printed verdicts, and commit ``expected.json``.
"""

from __future__ import annotations

import ast
import difflib
import json
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("libcst", reason="the codemod needs libcst (the `migrate` / `test` extras)")

import torch  # noqa: E402
from migrate_corpus import fetching, measure, training  # noqa: E402
from migrate_corpus.sources import FIXTURES, FIXTURES_BY_NAME, RELEASES  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
EXPECTED = json.loads((Path(__file__).resolve().parent / "migrate_corpus" / "expected.json").read_text())
FIXTURE_NAMES = [fixture.name for fixture in FIXTURES]


@pytest.fixture(scope="module")
def runs() -> dict[str, measure.Run]:
    """Every fixture migrated once (the download is cached across sessions)."""
    done = {}
    try:
        for fixture in FIXTURES:
            done[fixture.name] = measure.migrated(fixture)
    except fetching.RegistryUnreachable as error:
        pytest.skip(str(error))
    return done


def test_every_fixture_has_expectations() -> None:
    assert sorted(EXPECTED["fixtures"]) == sorted(FIXTURE_NAMES)
    # issue 11: at least 12 LightningModules over at least 6 repositories
    assert len({release.repository for release in RELEASES}) >= 6
    classes = {(name, key.split(".")[0]) for name, entry in EXPECTED["fixtures"].items() for key in entry["verdicts"]}
    assert len(classes) >= 12


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_report_verdicts_and_output(runs: dict[str, measure.Run], name: str) -> None:
    run, expected = runs[name], EXPECTED["fixtures"][name]
    assert list(run.report) == expected["report"]
    assert run.exit_code == expected["exit_code"]
    assert measure.verdicts(run) == expected["verdicts"]
    assert measure.outputs(run) == expected["outputs"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_output_parses_and_second_run_changes_nothing(runs: dict[str, measure.Run], name: str) -> None:
    run, fixture = runs[name], FIXTURES_BY_NAME[name]
    for file, data in run.after.items():
        ast.parse(data, filename=file)
        # every name the migrated file reads is still bound (an import the rewrite added, or kept)
        assert measure.unbound_names(data) - measure.unbound_names(run.before[file]) == set(), file
    with tempfile.TemporaryDirectory() as folder:
        fetching.write_tree(run.after, Path(folder))
        again = measure.migrate(fixture, Path(folder), before=run.after)
    assert again.after == run.after
    assert again.exit_code in (0, 2)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_diff_prints_the_change_and_writes_nothing(runs: dict[str, measure.Run], name: str) -> None:
    run, fixture = runs[name], FIXTURES_BY_NAME[name]
    with tempfile.TemporaryDirectory() as folder:
        fetching.write_tree(run.before, Path(folder))
        dry = measure.migrate(fixture, Path(folder), "--diff", before=run.before)
    assert dry.after == run.before
    assert dry.exit_code == run.exit_code
    expected_diff = "".join(
        "".join(
            difflib.unified_diff(
                run.before[file].decode().splitlines(keepends=True),
                run.after[file].decode().splitlines(keepends=True),
                fromfile=file,
                tofile=file,
            )
        )
        for file in fixture.files
    )
    assert dry.stdout == expected_diff


def test_no_step_is_left_unreported(runs: dict[str, measure.Run]) -> None:
    # issue 11's target: every step that returns a value gets a verdict from the run
    unreported = [
        f"{name}:{key}"
        for name, run in runs.items()
        for key, verdict in measure.verdicts(run).items()
        if verdict == "unreported"
    ]
    assert unreported == []


def test_migration_guide_shows_the_measured_table(runs: dict[str, measure.Run]) -> None:
    guide = (REPO / "docs" / "migration.md").read_text(encoding="utf-8")
    shown = guide.split("<!-- corpus: after -->\n", 1)[1].split("\n\n", 1)[0]
    results = {name: (FIXTURES_BY_NAME[name], run) for name, run in runs.items()}
    trained = frozenset((recipe.fixture, recipe.owner) for recipe in training.RECIPES)
    assert shown == measure.table(results, set(EXPECTED["unsafe"]), trained)


@pytest.mark.parametrize("recipe", training.RECIPES, ids=lambda r: r.id)
def test_migrated_module_trains_to_the_same_parameters(runs: dict[str, measure.Run], recipe: training.Recipe) -> None:
    run = runs[recipe.fixture]
    original = training.train(recipe, run.before)
    migrated = training.train(recipe, run.after)
    assert original.keys() == migrated.keys()
    different = [key for key in original if not torch.equal(original[key], migrated[key])]
    assert different == []


@pytest.mark.parametrize("recipe", training.RECIPES, ids=lambda r: r.id)
def test_released_module_trains_alike_under_the_adapter(runs: dict[str, measure.Run], recipe: training.Recipe) -> None:
    """``StepResultAdapter()`` on the module as released, unchanged: no error or warning stops it,
    and it ends with the parameters plain Lightning gives it."""
    run = runs[recipe.fixture]
    plain = training.train(recipe, run.before)
    adapted = training.train(recipe, run.before, adapter=True)
    assert plain.keys() == adapted.keys()
    assert [key for key in plain if not torch.equal(plain[key], adapted[key])] == []
