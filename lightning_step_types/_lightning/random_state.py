"""The process's global random streams: torch's (CPU and CUDA), numpy's and Python's ``random``.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private, or relies on how another library lays out its state; each function says which it reads
and what it relies on.

A followed fit reads the streams at every batch's start, so the read has to be cheap. Copying
them through their public getters costs about 0.8 µs for torch (``Generator.get_state``, a 5056-byte
copy), 3-9 µs for Python (``random.getstate`` builds 625 ints) and 10-30 µs for numpy
(``np.random.get_state`` builds a dict and copies its key). ``GlobalStreams.read`` copies instead:

- torch's CPU generator through ``torch.default_generator.get_state()`` (public); CUDA's through
  ``torch.cuda.get_rng_state_all()`` (public) once CUDA is initialized;
- Python's Mersenne Twister as the raw bytes of its C object (``_random.Random``: an ``int index``
  followed by ``uint32_t state[624]`` right after the object header, CPython's layout since 3.x),
  with the ``gauss_next`` attribute ``random.gauss`` keeps; checked against ``random.getstate()``
  once, and read through ``random.getstate()`` wherever the check fails;
- numpy's legacy global generator only where it moved: its bit generator's state, read through the
  public ctypes interface (``BitGenerator.ctypes.state_address``: MT19937's ``uint32_t key[624]``
  and ``int pos``), is compared with the copy last read; where it differs, or where the last copy
  holds a cached Gaussian (``has_gauss``: the one change that leaves the bits as they were),
  ``np.random.get_state()`` is read again.

Putting a state back goes through Lightning's own building block,
``lightning_fabric.utilities.seed._set_rng_states`` (private; imported into the Trainer flavour's
``utilities/seed.py``), which sets torch's, CUDA's, numpy's and Python's streams from a dict of the
layout its ``_collect_rng_states`` writes.
"""

from __future__ import annotations

import ctypes
import importlib
import random
import struct
import sys
from typing import Any, NamedTuple

import torch

__all__ = ["GlobalStreams", "StreamsState", "lightning_states", "set_global_states"]

_MT_WORDS = 624
_PY_LAYOUT = struct.Struct(f"@i{_MT_WORDS}I")  # CPython's RandomObject after its header: index, state
_NP_LAYOUT = struct.Struct(f"@{_MT_WORDS}Ii")  # numpy's mt19937_state: key, pos
_cuda_initialized: Any = torch.cuda.is_initialized  # untyped in torch's stubs


class StreamsState(NamedTuple):
    """The global streams at one moment, as ``GlobalStreams.read`` copied them."""

    torch: torch.Tensor
    python: bytes | tuple[Any, ...]  # the raw C state (index, state), or random.getstate()'s tuple
    python_gauss: float | None  # random.gauss's cached value, with the raw state
    numpy: tuple[Any, ...] | None  # np.random.get_state(), or None without numpy
    cuda: list[torch.Tensor] | None  # per device, or None before CUDA is initialized


def _python_raw_reader() -> tuple[Any, int] | None:
    """The module ``random``'s own instance and the address of its C state, where its layout is the one
    read here (checked against ``random.getstate()``); None elsewhere."""
    instance: Any = getattr(random.random, "__self__", None)
    base: Any = getattr(sys.modules.get("_random"), "Random", None)
    if instance is None or base is None or not isinstance(instance, base) or sys.implementation.name != "cpython":
        return None
    header = object.__basicsize__
    if base.__basicsize__ < header + _PY_LAYOUT.size:
        return None
    address = id(instance) + header
    index, *words = _PY_LAYOUT.unpack(ctypes.string_at(address, _PY_LAYOUT.size))
    if (*words, index) != random.getstate()[1]:
        return None
    return instance, address


class GlobalStreams:
    """Reads the global streams cheaply (see the module docstring); one per followed fit."""

    def __init__(self) -> None:
        self._python = _python_raw_reader()
        self._numpy: Any = None
        self._np_generator: Any = None
        self._np_address = 0
        self._np_bits = b""
        self._np_state: tuple[Any, ...] | None = None
        self._np_gauss = False
        try:
            self._numpy = importlib.import_module("numpy")
        except ImportError:
            pass

    def read(self) -> StreamsState:
        python = self._python
        if python is not None:
            python_state: bytes | tuple[Any, ...] = ctypes.string_at(python[1], _PY_LAYOUT.size)
            gauss = python[0].gauss_next
        else:
            python_state, gauss = random.getstate(), None
        return StreamsState(
            torch.default_generator.get_state(),
            python_state,
            gauss,
            self._read_numpy() if self._numpy is not None else None,
            torch.cuda.get_rng_state_all() if _cuda_initialized() else None,
        )

    def _read_numpy(self) -> tuple[Any, ...]:
        np: Any = self._numpy
        generator: Any = np.random.get_bit_generator()  # the legacy global RandomState's (numpy >= 1.25)
        if generator is not self._np_generator:  # a new global bit generator (np.random.set_bit_generator)
            self._np_generator, self._np_state = generator, None
            state: Any = generator.state
            self._np_address = generator.ctypes.state_address if state.get("bit_generator") == "MT19937" else 0
        if not self._np_address:  # not MT19937: read in full every time
            return tuple(np.random.get_state())
        bits = ctypes.string_at(self._np_address, _NP_LAYOUT.size)
        if bits != self._np_bits or self._np_gauss or self._np_state is None:
            self._np_state = tuple(np.random.get_state())
            self._np_bits, self._np_gauss = bits, bool(self._np_state[3])
        return self._np_state


def lightning_states(state: StreamsState) -> dict[str, Any]:
    """``state`` in the layout ``_collect_rng_states`` writes (Lightning's private helper, see the module docstring)."""
    python: Any = state.python
    if isinstance(python, bytes):
        index, *words = _PY_LAYOUT.unpack(python)
        python = (3, (*words, index), state.python_gauss)
    states: dict[str, Any] = {"torch": state.torch, "python": python}
    if state.numpy is not None:
        states["numpy"] = state.numpy
    if state.cuda is not None:
        states["torch.cuda"] = state.cuda
    return states


def set_global_states(trainer: Any, states: dict[str, Any]) -> None:
    """Set the process's global streams from ``states`` (the layout ``lightning_states`` writes), through
    ``_set_rng_states`` in the Trainer's own flavour (``utilities/seed.py`` imports it from Fabric)."""
    package = type(trainer).__module__.split(".trainer")[0]  # "pytorch_lightning" or "lightning.pytorch"
    set_rng_states: Any = importlib.import_module(f"{package}.utilities.seed")._set_rng_states
    if "torch.cuda" in states and not torch.cuda.is_available():
        states = {name: value for name, value in states.items() if name != "torch.cuda"}
    set_rng_states(states)
