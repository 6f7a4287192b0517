"""Documented gap: a stage name Lightning users write but the binding does not know ("validation" for "val").

``stages`` accepts any ``Sequence[str]``, so that stages read from a config (``tuple[str, ...]``)
or a list are no false positive; a type cannot accept those and refuse a literal typo, so neither
checker flags the line below. At run time it is a ``StepResultError`` at setup, before any step:
``write 'val' for 'validation': `stages=('train', 'val')``` (docs/errors.md, "An unknown stage").
"""

from torchmetrics.classification import MulticlassAccuracy

from lightning_step_types import StepMetric

accuracy = StepMetric(MulticlassAccuracy(3), update=lambda r, b: (r["logits"], b[1]), stages=("train", "validation"))
