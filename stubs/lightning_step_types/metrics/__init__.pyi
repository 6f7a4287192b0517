"""Declared metrics: the static contract of ``lightning_step_types.metrics``.

``StepMetric`` is generic in the result its ``update`` reads, and the stages it runs in decide
which result that is:

- ``stages=("train",)``: ``update(result: TrainStepResult[M], batch)``;
- ``stages`` among ``"val"``/``"test"`` only: ``update(result: ValStepResult[M], batch)``;
- any other stages (the default: all three), and stages that are not literals (a
  ``tuple[str, ...]`` read from a config): ``update(result: StepResult[M], batch)``, since it may
  receive training and evaluation results alike. Unknown stage names are refused at setup.

Lists and other sequences work as tuples do.

``M`` is the binding's own metadata type (a ``TypedDict`` is checked in its body); a lambda's
``result.metadata`` is a ``Mapping[str, Any]``.

``update`` returns the positional arguments of ``metric.update`` as a tuple. A binding that
reads a key its metadata ``TypedDict`` lacks, returns something else, or expects the result of
another stage is an error for mypy and pyright. (``StepResultAdapter`` hands a legacy dict
return to ``update`` as a read-only ``Mapping``; a binding for those takes ``Any`` or a
``Mapping``.)
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, Literal, TypeAlias, overload

import torch
from torchmetrics import Metric, MetricCollection
from typing_extensions import TypeVar

from lightning_step_types.errors import StepResultError
from lightning_step_types.policy import StepPolicy
from lightning_step_types.results import StepResult, TrainStepResult, ValStepResult

__all__ = ["StepMetric", "declared_metric", "step_metric_objects"]

_Stage: TypeAlias = Literal["train", "val", "test"]
_EvaluationStage: TypeAlias = Literal["val", "test"]

ResultT = TypeVar("ResultT", contravariant=True, default=Any)

class StepMetric(Generic[ResultT]):
    """A torchmetrics metric fed by each step's checked result: declared once, copied per stage."""

    metric: Metric | MetricCollection
    update: Callable[[ResultT, Any], tuple[Any, ...]]
    stages: tuple[_Stage, ...]
    prog_bar: bool
    on_step: bool
    on_epoch: bool
    log_name: str
    @overload
    def __init__(
        self: StepMetric[TrainStepResult[Any]],
        metric: Metric | MetricCollection,
        update: Callable[[TrainStepResult[Any], Any], tuple[Any, ...]],
        stages: Sequence[Literal["train"]],
        *,
        prog_bar: bool = False,
        on_step: bool = False,
        on_epoch: bool = True,
        log_name: str = "{stage}_{name}",
    ) -> None: ...
    @overload
    def __init__(
        self: StepMetric[ValStepResult[Any]],
        metric: Metric | MetricCollection,
        update: Callable[[ValStepResult[Any], Any], tuple[Any, ...]],
        stages: Sequence[_EvaluationStage],
        *,
        prog_bar: bool = False,
        on_step: bool = False,
        on_epoch: bool = True,
        log_name: str = "{stage}_{name}",
    ) -> None: ...
    @overload
    def __init__(
        self: StepMetric[StepResult[Any]],
        metric: Metric | MetricCollection,
        update: Callable[[StepResult[Any], Any], tuple[Any, ...]],
        stages: Sequence[str] = ("train", "val", "test"),
        *,
        prog_bar: bool = False,
        on_step: bool = False,
        on_epoch: bool = True,
        log_name: str = "{stage}_{name}",
    ) -> None: ...

def step_metric_objects(module: Any) -> dict[str, Metric]:
    """The live copies of a module's declared metrics, by stable name (``"train/acc"``, ``"val/acc/dataloader_idx_1"``)."""

def declared_metric(
    module: Any, name: str, stage: Literal["train", "val", "test"] = "val", dataloader_idx: int = 0
) -> Any:
    """The live copy of the declared metric ``name`` for ``stage`` and ``dataloader_idx``: the
    object Lightning computes and resets at each epoch's end (read it in ``on_validation_epoch_end``).

    The ``Metric`` or the ``MetricCollection`` declared under ``name``. Only the declaration says
    which, and torchmetrics types ``Metric.compute`` as an untyped callable, so the result is
    ``Any``: ``self.log(name, declared_metric(self, name).compute())`` type-checks as it runs."""

# Internal: what the package's other modules import from this one. Declared here only because
# pyright reads the runtime's own modules through these stubs (stubPath); not part of the API.
STAGES: tuple[Literal["train"], Literal["val"], Literal["test"]]
CONTAINER_ATTRIBUTE: str

class StepMetricCopies(torch.nn.ModuleDict): ...

class MetricSet:
    declared_by: str
    def __init__(self, declared_by: str) -> None: ...
    def add(self, stage_copies: Any) -> None: ...
    def register(self, stage_copies: Any, dataloader_idx: int, metric: Metric | MetricCollection) -> None: ...
    def log_names(self) -> dict[str, str]: ...
    def objects(self) -> dict[str, Metric]: ...
    def update(self, module: Any, call: Any, result: Any, batch: Any) -> None: ...
    def explain(self, error: BaseException, call: Any) -> StepResultError | None: ...
    def skipped(self, call: Any, output: object) -> None: ...
    def end_of_stage(self, stage: str, hook: str) -> None: ...

def build_metric_set(
    declared_by: str, entries: object, taken_names: Mapping[str, str] | None = None, container: bool = False
) -> MetricSet: ...
def attach_metric_set(
    module: Any, owner: object, metric_set: MetricSet, device: torch.device | None = None
) -> None: ...
def detach_metric_set(module: Any, owner: object) -> None: ...
def loss_log_names(policy: StepPolicy) -> dict[str, str]: ...
def taken_log_names(module: Any, besides: object) -> dict[str, str]: ...
def metric_sets_of(module: Any) -> list[MetricSet]: ...
def iter_stage_copies(module: Any) -> Iterator[tuple[str, str, int, Metric | MetricCollection]]: ...
