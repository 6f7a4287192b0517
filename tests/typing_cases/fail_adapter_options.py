"""Wrong options for the StepResultAdapter callback: a misspelled policy, a metric name where LossLogging is expected."""

from lightning_step_types import LossLogging, StepResultAdapter

lenient = StepResultAdapter(nonfinite_loss="skipp")  # E: mypy[arg-type] pyright[reportArgumentType]
logging = StepResultAdapter(log_loss="train_loss")  # E: mypy[arg-type] pyright[reportArgumentType]
named = StepResultAdapter(log_loss=LossLogging(train="loss/train", prog_bar="yes"))  # E: mypy[arg-type] pyright[reportArgumentType]
