"""The README: a first-time user's page whose commands, snippets and messages are all true.

Its set-up commands are the ones CI runs (each in a fresh venv, ``.ci/run``); every command that
installs this checkout, here or in ``docs/``, keeps the typed contract; its snippets compose into
one module that trains; its messages are the catalogue's, which ``tests/test_docs.py`` proves.
"""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from test_docs import DOCS, QUIET, REPO, fenced_blocks
from torch.utils.data import DataLoader, TensorDataset

README = REPO / "README.md"
README_MAX_LINES = 250  # a first-time user's page; the full catalogue and design notes live in docs/


def _readme_section(heading_start: str) -> str:
    """The README's ``## `` section whose heading starts with ``heading_start``, up to the next one."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading_start}")
    following = text.find("\n## ", start + 1)
    return text[start : following if following != -1 else len(text)]


def _catalogue_kinds() -> dict[str, list[str]]:
    """docs/errors.md's ``## `` sections that quote messages: heading -> its ```text blocks."""
    lines = (DOCS / "errors.md").read_text(encoding="utf-8").splitlines()
    kinds: dict[str, list[str]] = {}
    for block in fenced_blocks(DOCS / "errors.md"):
        if block.lang == "text":
            heading = next(line[3:] for line in reversed(lines[: block.line]) if line.startswith("## "))
            kinds.setdefault(heading, []).append(block.code)
    return kinds


def _heading_anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as MkDocs' toc (and GitHub) make them."""
    from markdown.extensions.toc import slugify

    anchors = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (match := re.match(r"^#{1,6} (.*)$", line)):
            anchors.add(slugify(match[1].replace("`", ""), "-"))
    return anchors


def test_readme_is_short_and_says_how_long_the_tests_take_and_how_to_run_the_fast_subset() -> None:
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    headings = re.findall(r"^## (.*)$", readme, re.M)
    order = ["What it does", "Quick start", "Two ways in", "Metrics", "Resuming a run", "Errors"]
    positions = [next(i for i, h in enumerate(headings) if h.startswith(name)) for name in order]
    assert positions == sorted(positions), headings
    # as a new user measures them: a fresh venv, torch's install included
    assert (
        "Command 1 takes about 100 s in a fresh venv on two CPU cores: installing torch about 55 s, the\n"
        "project 35 s, the demo 15 s"
    ) in readme
    assert "Command 2 takes 20 to 35 minutes in a fresh venv on 2 cores, installs included" in " ".join(readme.split())
    assert '`python -m pytest -m "not slow"`' in readme
    # The fast subset leaves something out: the marker is declared and used.
    assert "slow:" in (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "pytestmark = pytest.mark.slow" in (REPO / "tests" / "test_ddp.py").read_text(encoding="utf-8")


def test_readme_shows_one_checked_message_of_each_kind_and_links_to_it() -> None:
    """Each README message is one the docs' catalogue proves by triggering it, and every kind of
    message in the catalogue has an example in the README, next to a link to that kind's section."""
    section = _readme_section("Errors")
    blocks = re.findall(r"```text\n(.*?)\n```", section, re.S)
    assert len(blocks) >= 5
    kinds = _catalogue_kinds()
    kind_of = {code: kind for kind, codes in kinds.items() for code in codes}
    assert [block for block in blocks if block not in kind_of] == [], "README quotes a message docs/errors.md lacks"
    assert {kind_of[block] for block in blocks} == set(kinds), "README lacks an example of some kind"
    from markdown.extensions.toc import slugify

    for kind in kinds:
        assert f"(docs/errors.md#{slugify(kind.replace('`', ''), '-')})" in section, kind


def test_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # links only in prose, not in code
    prose = re.sub(r"`[^`]*`", "", prose)
    links = re.findall(r"\]\(([^)\s]+)\)", prose)
    assert len(links) >= 10
    for link in links:
        assert not link.startswith(("http:", "https:")), f"{link}: the README links into this repository only"
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.is_file(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in _heading_anchors(target), f"README links to {link}: no such heading"
    assert "docs/metrics.md" in _readme_section("Metrics")
    assert "docs/resume.md" in _readme_section("Resuming a run")
    assert "(docs/resume.md#stopping-a-run)" in _readme_section("Resuming a run")


def _python_blocks() -> list[str]:
    return [block.code for block in fenced_blocks(README) if block.lang == "python"]


def _block_with(text: str) -> str:
    (code,) = [code for code in _python_blocks() if text in code]
    return code


def composed_readme_module() -> str:
    """The quick start's module with the Metrics section's method pasted into its class, and the
    result-hook callback: the README's snippets as one file, the way a reader assembles them."""
    quick_start = _block_with("class Classifier(TypedLightningModule):\n")
    metrics = _block_with("def configure_step_metrics")
    callback = _block_with("class CollectPredictions(TypedCallback)")
    imports, _, method = metrics.partition("class Classifier(TypedLightningModule):")
    method = method.split("\n    ...\n", 1)[1]
    anchor = "    def configure_optimizers"
    assert quick_start.count(anchor) == 1
    module = quick_start.replace(anchor, method.rstrip("\n") + "\n\n" + anchor)
    return "\n\n".join([imports.strip(), module, callback])


def test_readme_snippets_compose_into_one_module_that_trains_and_logs_the_declared_accuracy() -> None:
    namespace: dict[str, Any] = {"__name__": "readme_examples"}
    exec(compile(composed_readme_module(), "README.md (quick start + metrics + result hooks)", "exec"), namespace)
    torch.manual_seed(0)
    x, y = torch.randn(16, 32), torch.randint(0, 2, (16,))
    model, collect = namespace["Classifier"](), namespace["CollectPredictions"]()
    trainer = pl.Trainer(**QUIET, callbacks=[collect])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(does not have many workers|LeafSpec|smaller than the logging).*")
        trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4), DataLoader(TensorDataset(x, y), batch_size=8))
    assert trainer.global_step == 4
    assert {"train_loss", "val_loss", "train_acc", "val_acc"} <= set(trainer.callback_metrics)
    # Validation ran once, after training, on the final weights: the hook got each batch's predictions,
    # and the declared accuracy is theirs.
    with torch.no_grad():
        expected = model.net(x).argmax(dim=1)
    assert len(collect.preds) == 2
    assert torch.equal(torch.cat(collect.preds), expected)
    # MulticlassAccuracy's default average is "macro": the mean of the per-class recalls.
    recalls = [((expected == c) & (y == c)).sum() / (y == c).sum() for c in (0, 1)]
    assert trainer.callback_metrics["val_acc"].item() == pytest.approx(sum(recalls).item() / 2, abs=1e-7)


# --- the set-up commands ---------------------------------------------------------------------------


def readme_commands() -> list[str]:
    """The commands of the README's first bash block (its two setup commands)."""
    readme = README.read_text().splitlines()
    first_block = readme[readme.index("```bash") + 1 : readme.index("```", readme.index("```bash") + 1)]
    return [line for line in first_block if line.strip() and not line.lstrip().startswith("#")]


DOCS_COMMAND = 'pip install torch==2.13.0 && pip install -e ".[docs]" && mkdocs build --strict'


def test_readme_opens_with_the_two_setup_commands() -> None:
    assert readme_commands() == [
        "pip install torch==2.13.0 && pip install -e . && python -m lightning_step_types.demo",
        'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest',
    ]


def test_ci_runs_each_readme_command_as_written_in_a_fresh_venv_and_builds_the_docs() -> None:
    script = (REPO / ".ci" / "run").read_text()
    # The commands come from the README's first bash block itself, not from a copy that could drift ...
    assert "awk '/^```bash/{f=1; next} /^```/{if (f) exit} f && $0 !~ /^[[:space:]]*#/ && NF' README.md" in script
    # ... and each runs in a new venv, activated: the way a user runs them.
    assert 'python3 -m venv "$work/$name"' in script
    assert '(. "$work/$name/bin/activate" && bash -euo pipefail -c "$command")' in script
    runs = re.findall(r"^in_fresh_venv (\w+) (.+)$", script, re.M)
    assert runs == [
        ("demo", '"${commands[0]}"'),
        ("lint", '"$lint_command"'),
        ("docs", '"$docs_command"'),
        ("ray", '"$ray_command"'),
        ("conformance", '"$conformance_command"'),
        ("tests", '"${commands[1]}"'),
    ]
    assert f"docs_command='{DOCS_COMMAND}'" in script
    # Ray Train's tests (docs/scaling.md), in a venv with the `ray` extra; the suite's summary stays last.
    assert """ray_command='pip install torch==2.13.0 && pip install -e ".[test,ray]" &&""" in script
    assert "python -m pytest tests/test_scaling_ray.py -p no:cacheprovider'" in script
    # Lightning's own tests with the adapter (conformance/README.md), against the stored baseline.
    assert (
        'conformance_command="pip install torch==2.13.0 && pip install -e . && pip install -r conformance/requirements.txt'
        " && python conformance/run.py --lightning $lightning_tests --subset ci --modes default"
        ' --baseline conformance/baseline.txt --out $work/conformance-results"'
    ) in script
    # The documentation command CI runs is the one the README gives.
    assert f"`{DOCS_COMMAND}`" in _readme_section("More")


# --- every install of this checkout keeps the typed contract -------------------------------------

# A pip argument that names this checkout: `.`, `.[extra]`, quoted or not.
CHECKOUT = re.compile(r"""^["']?\.(\[[\w,-]+\])?["']?$""")
# The installs tests/test_wheel.py makes and checks with both type checkers.
CHECKED_FORMS = [["-e", "."], ["."]]


def checkout_installs() -> list[tuple[str, list[str]]]:
    """Every ``pip install`` of this checkout written in README.md or docs/: (where, its arguments)."""
    found = []
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for match in re.finditer(r"pip install ([^`#&;|\n]*)", line):
                args = shlex.split(match[1])
                if any(CHECKOUT.match(arg) for arg in args):
                    found.append((f"{page.relative_to(REPO)}:{number}", args))
    return found


def test_every_install_of_the_checkout_is_one_the_typing_tests_install() -> None:
    installs = checkout_installs()
    where = [place for place, _ in installs]
    # README's two commands, the migration extra in README and the guide, the quick start, the docs.
    assert len(installs) >= 6, where
    for place, args in installs:
        form = ["." if CHECKOUT.match(arg) else arg for arg in args]
        # No --config-settings/-C: `editable_mode=lenient` or `compat` would hide the stubs from
        # mypy and pyright; the build backend makes `-e .` strict by itself.
        assert form in CHECKED_FORMS, f"{place}: pip install {' '.join(args)}"


# --- one install story: torch pinned as the README pins it ---------------------------------------

TORCH_PIN = "torch==2.13.0"
# A pip argument naming torch: `torch`, `torch>=2.1`, `"torch==2.14.1"`, ...
TORCH_ARG = re.compile(r"""^["']?torch(?:[<>=!~;\[ ].*)?["']?$""")
# A pip argument naming this project: the checkout (`.`, `.[extra]`) or the package by name.
PROJECT_ARG = re.compile(r"""^["']?(\.|lightning[-_]step[-_]types)(\[[\w,-]+\])?["']?$""")
# Packages that depend on torch: installed into a venv holding the pinned torch, they keep it (say so).
ON_TORCH = re.compile(r"""^["']?(torchdata|pytorch-lightning|lightning|torchmetrics)\b""")
KEEPS_TORCH = "keeps the installed torch"
INSTALL_PAGES = [README, *sorted(DOCS.rglob("*.md")), REPO / "benchmarks" / "README.md", REPO / "mkdocs.yml"]


def install_problems(where: str, lines: list[str]) -> list[str]:
    """Each ``pip install`` of ``lines`` that does not pin torch as the README does, and says nothing of why.

    - torch itself is installed as ``torch==2.13.0``;
    - this project is installed after ``pip install torch==2.13.0``, on the same line (``&&``) or
      on the line before;
    - a package that depends on torch says that it keeps the installed torch.
    """
    problems = []
    for number, line in enumerate(lines, 1):
        previous = lines[number - 2] if number > 1 else ""
        for match in re.finditer(r"pip install ([^`#&;|\n]*)", line):
            args = shlex.split(match[1])
            before = line[: match.start()] + "\n" + previous  # what ran before this install
            shown = f"{where}:{number}: pip install {match[1].strip()}"
            if any(TORCH_ARG.match(arg) and arg.strip("\"'") != TORCH_PIN for arg in args):
                problems.append(f"{shown}: pin it: `pip install {TORCH_PIN}`")
            elif any(PROJECT_ARG.match(arg) for arg in args) and f"pip install {TORCH_PIN}" not in before:
                problems.append(f"{shown}: install `{TORCH_PIN}` first: `pip install {TORCH_PIN} && ...`")
            elif any(ON_TORCH.match(arg) for arg in args) and KEEPS_TORCH not in line:
                problems.append(f"{shown}: say that it {KEEPS_TORCH}, or pin torch before it")
    return problems


def page_lines(page: Path) -> list[str]:
    """The page's lines, with the quoted messages (```text blocks) blanked: they quote, not instruct."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for block in fenced_blocks(page) if page.suffix == ".md" else []:
        if block.lang == "text":
            for index in range(block.line - 1, block.line - 1 + len(block.code.splitlines())):
                lines[index] = ""
    return lines


def test_the_install_check_finds_an_unpinned_torch_and_a_project_install_before_it() -> None:
    assert install_problems(
        "page.md",
        [
            "pip install torch   # first: a 2.1+ build",
            "pip install -e .",
            'pip install torch==2.13.0 && pip install -e ".[migrate]"',
            "pip install torch>=2.1 && pip install -e .",
            "pip install torchdata==0.11.0",
            "pip install torchdata==0.11.0  # the tested release; it keeps the installed torch",
        ],
    ) == [
        "page.md:1: pip install torch: pin it: `pip install torch==2.13.0`",
        "page.md:2: pip install -e .: install `torch==2.13.0` first: `pip install torch==2.13.0 && ...`",
        "page.md:4: pip install torch>=2.1: pin it: `pip install torch==2.13.0`",
        "page.md:5: pip install torchdata==0.11.0: say that it keeps the installed torch, or pin torch before it",
    ]


def test_every_install_line_pins_torch_as_the_readme_does() -> None:
    problems = [
        problem for page in INSTALL_PAGES for problem in install_problems(str(page.relative_to(REPO)), page_lines(page))
    ]
    assert problems == []
    assert f"pip install {TORCH_PIN} && pip install -e ." in readme_commands()[0]
