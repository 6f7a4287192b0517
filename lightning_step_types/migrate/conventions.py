"""What the codemod knows: Lightning's step hooks and base classes, this package's names, and how
losses are usually named in user code.
"""

from __future__ import annotations

STEP_HOOKS = ("training_step", "validation_step", "test_step")
RESULT_FOR_HOOK = {"training_step": "TrainStepResult", "validation_step": "ValStepResult", "test_step": "ValStepResult"}
BATCH_END_FOR_HOOK = {"validation_step": "on_validation_batch_end", "test_step": "on_test_batch_end"}
TYPED_BASE = "TypedLightningModule"
PACKAGE = "lightning_step_types"

# Qualified name of each LightningModule spelling -> the package it belongs to.
LIGHTNING_BASES = {
    "pytorch_lightning.LightningModule": "pytorch_lightning",
    "pytorch_lightning.core.LightningModule": "pytorch_lightning",
    "pytorch_lightning.core.module.LightningModule": "pytorch_lightning",
    "pytorch_lightning.core.lightning.LightningModule": "pytorch_lightning",
    "lightning.LightningModule": "lightning",
    "lightning.pytorch.LightningModule": "lightning",
    "lightning.pytorch.core.LightningModule": "lightning",
    "lightning.pytorch.core.module.LightningModule": "lightning",
    f"{PACKAGE}.{TYPED_BASE}": "typed",
    f"{PACKAGE}.module.{TYPED_BASE}": "typed",
    f"{PACKAGE}.pytorch_lightning.{TYPED_BASE}": "typed",
    f"{PACKAGE}.lightning_pytorch.{TYPED_BASE}": "typed",
    # Spellings whose import the file does not show (star imports, re-exports): the usual aliases.
    "pl.LightningModule": "pytorch_lightning",
    "L.LightningModule": "lightning",
    "LightningModule": "unknown",
    TYPED_BASE: "typed",
}
# Bases known not to be LightningModules (torch.*, typing.*, abc.*, enum.* are recognized by their package).
NON_LIGHTNING_BASES = {"object", "Exception", "ABC", "Generic", "Protocol", "nn.Module", "Module", "NamedTuple", "dict"}
RESULT_MODULES = (PACKAGE, f"{PACKAGE}.results")
# Lightning package -> the modules TypedLightningModule of that flavour is imported from (the first is used).
TYPED_BASE_MODULES: dict[str, tuple[str, ...]] = {
    "pytorch_lightning": (PACKAGE, f"{PACKAGE}.pytorch_lightning"),
    "lightning": (f"{PACKAGE}.lightning_pytorch",),
}


# Lightning 1.x hooks given the steps' outputs, which Lightning 2 refuses to run (it raises on them).
HOOKS_GIVEN_OUTPUTS = {
    "training_epoch_end", "validation_epoch_end", "test_epoch_end",
    "training_step_end", "validation_step_end", "test_step_end",
}  # fmt: skip

# Keys the codemod may read as "the loss" of an evaluation step's dict.
EVAL_LOSS_KEYS = ("loss", "val_loss", "test_loss")
# Lightning 0.x keys: logged with self.log_dict (prog_bar for "progress_bar"), dropped from the result.
LEGACY_LOG_KEYS = {"log": False, "progress_bar": True}

# Decorators known not to change what a step returns.
NEUTRAL_DECORATORS = {
    "torch.no_grad",
    "torch.inference_mode",
    "torch.enable_grad",
    "typing.override",
    "typing_extensions.override",
    "override",
}
# torch.nn.functional losses whose names do not say "loss".
LOSS_FUNCTIONS = {"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}
# Tensor methods that keep a loss a loss (`loss.mean()`), and those that turn it into a Python number.
LOSS_PRESERVING_METHODS = {
    "mean", "sum", "squeeze", "float", "double", "clone", "detach", "contiguous", "reshape", "view", "abs",
}  # fmt: skip
NUMBER_METHODS = {"item", "tolist", "numpy"}
NUMBER_BUILTINS = {"float", "int", "round", "len", "sum", "max", "min", "abs", "bool", "str"}


def sources_of(name: str, module: str) -> tuple[str, ...]:
    """The modules an import of ``name`` may come from to mean what ``from module import name`` means."""
    if name == TYPED_BASE:
        return next((m for m in TYPED_BASE_MODULES.values() if module in m), (module,))
    return RESULT_MODULES if module in RESULT_MODULES else (module,)
