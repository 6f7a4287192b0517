"""The global random streams as a checkpoint holds them: tensors, bytes and numbers only (a checkpoint
loaded with ``torch.load(weights_only=True)`` reads them), and back in the layout Lightning's
``_set_rng_states`` sets (``_lightning.random_state.set_global_states``)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from lightning_step_types._lightning.random_state import StreamsState, lightning_states

__all__ = ["loaded_streams", "saved_streams"]


def saved_streams(state: StreamsState) -> dict[str, Any]:
    """``state`` as the checkpoint holds it: tensors, bytes and numbers only (a ``weights_only`` load reads it)."""
    states = lightning_states(state)
    version, words, gauss = states["python"]
    saved: dict[str, Any] = {
        "torch": states["torch"],
        "python": [version, struct.pack(f"@{len(words)}I", *words), gauss],
    }
    if "numpy" in states:
        kind, key, position, has_gauss, cached = states["numpy"]
        saved["numpy"] = [kind, key.tobytes(), int(position), int(has_gauss), float(cached)]
    if "torch.cuda" in states:
        saved["torch.cuda"] = list(states["torch.cuda"])
    return saved


def loaded_streams(saved: Mapping[str, Any]) -> dict[str, Any]:
    """A saved entry in the layout Lightning's ``_set_rng_states`` sets."""
    version, packed, gauss = saved["python"]
    states: dict[str, Any] = {
        "torch": saved["torch"],
        "python": (version, struct.unpack(f"@{len(packed) // 4}I", packed), gauss),
    }
    numpy_state = saved.get("numpy")
    if numpy_state is not None:
        import numpy as np

        kind, key, position, has_gauss, cached = numpy_state
        states["numpy"] = (kind, np.frombuffer(key, dtype=np.uint32).copy(), position, has_gauss, cached)
    if saved.get("torch.cuda") is not None:
        states["torch.cuda"] = saved["torch.cuda"]
    return states
