"""Real projects' own tests, plainly and with ``StepResultAdapter()`` in every Trainer: 0 pass -> fail.

    python conformance/real_projects.py PROJECT --source DIR [--out DIR] [--package PATH] [-- PYTEST_ARGS]

``PROJECT`` is one of ``PROJECTS`` below; ``DIR`` holds its source at the release's tag (the
folder ``--fetch`` names the command for: its sdist where the sdist carries the tests, else a
clone). The selected test files run twice from ``DIR``, in pytest processes of their own, with
``step_adapter_plugin``: plainly, then with ``StepResultAdapter()`` appended to every Trainer
(of the Lightning package the project imports). The report lists every test that passes plainly
and does not pass with the adapter; there is no allow-list here, so the exit status is 1 when any
does. Run it in a virtual environment of its own that keeps torch 2.13.0 (conformance/README.md,
"Real projects").
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import compare, run_mode  # noqa: E402


@dataclass(frozen=True)
class Project:
    version: str
    repository: str
    tag: str
    fetch: str  # the command that brings the release's tests into a folder of its own
    flavour: str  # the Lightning package the project's Trainer comes from
    tests: tuple[str, ...]  # relative to the source folder: the parts that train with Lightning


PROJECTS = {
    "darts": Project(
        version="0.46.1",
        repository="https://github.com/unit8co/darts",
        tag="0.46.1",
        # the sdist has no tests
        fetch="git clone --depth 1 --branch 0.46.1 https://github.com/unit8co/darts darts-0.46.1",
        flavour="pytorch_lightning",
        tests=(
            "darts/tests/models/forecasting/test_TFT.py",
            "darts/tests/models/forecasting/test_torch_forecasting_model.py",
            "darts/tests/models/forecasting/test_ptl_trainer.py",
            "darts/tests/models/forecasting/test_RNN.py",
            "darts/tests/models/forecasting/test_nbeats_nhits.py",
            "darts/tests/models/forecasting/test_tide_model.py",
            "darts/tests/models/forecasting/test_dlinear_nlinear.py",
        ),
    ),
    "neuralforecast": Project(
        version="3.3.0",
        repository="https://github.com/Nixtla/neuralforecast",
        tag="v3.3.0",
        fetch="pip download --no-deps --no-binary :all: neuralforecast==3.3.0 && tar xzf neuralforecast-3.3.0.tar.gz",
        flavour="pytorch_lightning",
        tests=("tests/test_core.py", "tests/test_sample_weight.py", "tests/test_categorical.py"),
    ),
    "pytorch-forecasting": Project(
        version="1.8.0",
        repository="https://github.com/sktime/pytorch-forecasting",
        tag="v1.8.0",
        fetch=(
            "pip download --no-deps --no-binary :all: pytorch-forecasting==1.8.0"
            " && tar xzf pytorch_forecasting-1.8.0.tar.gz"
        ),
        flavour="lightning.pytorch",
        tests=(
            "tests/test_models/test_temporal_fusion_transformer.py",
            "tests/test_models/test_deepar.py",
            "tests/test_models/test_nbeats.py",
            "tests/test_models/test_nhits.py",
            "tests/test_models/test_rnn_model.py",
            "tests/test_models/test_mlp.py",
            "tests/test_callbacks.py",
        ),
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", choices=sorted(PROJECTS))
    parser.add_argument("--source", type=Path, help="the project's source at the release's tag")
    parser.add_argument("--fetch", action="store_true", help="print the command that brings the source, and stop")
    parser.add_argument("--out", type=Path, help="where the reports go (default real-projects/PROJECT)")
    parser.add_argument(
        "--package", type=Path, help="a lightning_step_types checkout to test instead of the installed one"
    )
    parser.epilog = "Arguments after -- go to pytest (e.g. -- -k TFT)."
    given = sys.argv[1:] if argv is None else argv
    # split by hand: argparse takes `--` after a filled positional for an unknown argument
    pytest_args = given[given.index("--") + 1 :] if "--" in given else []
    args = parser.parse_args(given[: given.index("--")] if "--" in given else given)
    project = PROJECTS[args.project]
    if args.fetch:
        print(f"# {args.project} {project.version}: {project.repository}, tag {project.tag}\n{project.fetch}")
        return 0
    if args.source is None or not args.source.is_dir():
        raise SystemExit(f"--source: a folder with {args.project}'s source; bring it with: {project.fetch}")
    out = args.out or Path("real-projects") / args.project
    out.mkdir(parents=True, exist_ok=True)
    tests = [path for path in project.tests if (args.source / path).exists()]
    if not tests:
        raise SystemExit(f"none of {project.tests} is in {args.source}")
    runs = {
        # -o addopts=: the project's own options (coverage, its CI's reporting) stay out
        mode: run_mode(
            mode, args.source, out, args.package, tests, ["-o", "addopts=", *pytest_args], [], project.flavour
        )
        for mode in ("off", "default")
    }
    lines, unexpected = compare(runs, [])
    lines[0] = f"# {args.project} {project.version} ({project.repository}, tag {project.tag}) with StepResultAdapter()"
    (out / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"\n{out / 'summary.md'}: {unexpected} test(s) pass plainly and not with the adapter")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
