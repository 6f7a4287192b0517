"""The process's global random streams: torch's (CPU and CUDA), numpy's and Python's ``random``.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private, or relies on how another library lays out its state; each function says which it reads
and what it relies on.

A followed fit reads the streams at every batch's start, so the read has to be cheap. Through their
public getters it costs about 0.8 µs for torch (``Generator.get_state``, a 5056-byte copy), 3-9 µs
for Python (``random.getstate`` builds 625 ints) and 10-30 µs for numpy (``np.random.get_state``
builds a tuple and copies its key). ``GlobalStreams.read`` takes about 1.8 µs for all three:

- torch's CPU generator through ``torch.default_generator.get_state()`` (public); CUDA's through
  ``torch.cuda.get_rng_state_all()`` (public) once CUDA is initialized;
- Python's Mersenne Twister as a copy of the raw bytes of its C object (``_random.Random``: an
  ``int index`` followed by ``uint32_t state[624]`` right after the object header, CPython's layout),
  with the ``gauss_next`` attribute ``random.gauss`` keeps; the layout is checked against
  ``random.getstate()`` once, and the streams are read through ``random.getstate()`` wherever the
  check fails (another interpreter, another layout);
- numpy's legacy global generator only where it moved: its bit generator's state, copied through
  the public ctypes interface (``BitGenerator.ctypes.state_address``: MT19937's ``uint32_t key[624]``
  and ``int pos``), is compared with the copy last read; where it differs, or where the last read
  holds a cached Gaussian (``has_gauss``: the one change that leaves the bits as they were),
  ``np.random.get_state()`` is read again. A step that draws from numpy pays that read (10-30 µs)
  at the next batch's start.

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
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["GlobalStreams", "StreamsState", "lightning_states", "set_global_states"]

_MT_WORDS = 624
_PY_LAYOUT = struct.Struct(f"@i{_MT_WORDS}I")  # CPython's RandomObject after its header: index, state
_NP_LAYOUT = struct.Struct(f"@{_MT_WORDS}Ii")  # numpy's mt19937_state: key, pos
_cuda_initialized: Any = torch.cuda.is_initialized  # untyped in torch's stubs
_cuda_states: Any = torch.cuda.get_rng_state_all
_torch_state = torch.default_generator.get_state


# The global streams at one moment, as ``GlobalStreams.read`` copied them (a plain tuple: it is built at
# every batch's start): torch's CPU state; Python's raw C state (index, state) as bytes, or
# ``random.getstate()``'s tuple; ``random.gauss``'s cached value with the raw state; numpy's
# ``np.random.get_state()`` (None without numpy); CUDA's per device (None before CUDA is initialized).
StreamsState = tuple[
    torch.Tensor, "bytes | tuple[Any, ...]", "float | None", "tuple[Any, ...] | None", "list[torch.Tensor] | None"
]


def _python_raw_reader() -> tuple[Any, Callable[[], bytes]] | None:
    """The module ``random``'s own instance and what copies its C state, where its layout is the one
    read here (checked against ``random.getstate()``); None elsewhere."""
    instance: Any = getattr(random.random, "__self__", None)
    base: Any = getattr(sys.modules.get("_random"), "Random", None)
    if instance is None or base is None or not isinstance(instance, base) or sys.implementation.name != "cpython":
        return None
    header = object.__basicsize__
    if base.__basicsize__ < header + _PY_LAYOUT.size:
        return None
    copy = _copier(id(instance) + header, _PY_LAYOUT.size)
    index, *words = _PY_LAYOUT.unpack(copy())
    if (*words, index) != random.getstate()[1]:
        return None
    return instance, copy


def _copier(address: int, size: int) -> Callable[[], bytes]:
    """What copies ``size`` bytes at ``address`` into a new ``bytes``: a memoryview's ``tobytes`` (a
    tenth of a microsecond; ``ctypes.string_at`` takes about 1 µs for its argument conversions). The
    caller keeps the object that owns the memory alive."""
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B").tobytes


class GlobalStreams:
    """Reads the global streams cheaply (see the module docstring); one per followed fit."""

    def __init__(self) -> None:
        self._python = _python_raw_reader()
        self._numpy: Any = None
        self._np_generator: Any = None
        self._np_bits_now: Callable[[], bytes] | None = None
        self._np_bits = b""
        self._np_state: tuple[Any, ...] | None = None
        self._np_gauss = False
        self._np_global: Any = lambda: None
        try:
            self._numpy = importlib.import_module("numpy")
        except ImportError:
            pass
        else:  # the legacy global RandomState's bit generator (numpy >= 1.25)
            self._np_global = getattr(self._numpy.random, "get_bit_generator", self._np_global)

    def __deepcopy__(self, memo: dict[int, Any]) -> GlobalStreams:
        # it reads this process's streams (it holds the numpy module, which cannot be copied): a deep copy
        # of what holds it (`copy.deepcopy(trainer.callbacks)`, a progress bar's trainer) shares it
        return self

    def read(self) -> StreamsState:
        python = self._python
        return (
            _torch_state(),
            python[1]() if python is not None else random.getstate(),
            python[0].gauss_next if python is not None else None,
            self._read_numpy() if self._numpy is not None else None,
            _cuda_states() if _cuda_initialized() else None,
        )

    def _read_numpy(self) -> tuple[Any, ...]:
        np: Any = self._numpy
        generator: Any = self._np_global()
        if generator is not self._np_generator:  # a new global bit generator (np.random.set_bit_generator)
            self._np_generator, self._np_state = generator, None
            address = 0
            if generator is not None and generator.state.get("bit_generator") == "MT19937":
                address = int(generator.ctypes.state_address)
            self._np_bits_now = _copier(address, _NP_LAYOUT.size) if address else None
        bits_now = self._np_bits_now
        if bits_now is None:  # not MT19937 (or a numpy before 1.25): read in full every time
            return tuple(np.random.get_state())
        bits = bits_now()
        if bits != self._np_bits or self._np_gauss or self._np_state is None:
            self._np_state = tuple(np.random.get_state())
            self._np_bits, self._np_gauss = bits, bool(self._np_state[3])
        return self._np_state


def lightning_states(state: StreamsState) -> dict[str, Any]:
    """``state`` in the layout ``_collect_rng_states`` writes (Lightning's private helper, see the module docstring)."""
    torch_state, python, gauss, numpy_state, cuda = state
    if isinstance(python, bytes):
        index, *words = _PY_LAYOUT.unpack(python)
        python = (3, (*words, index), gauss)
    states: dict[str, Any] = {"torch": torch_state, "python": python}
    if numpy_state is not None:
        states["numpy"] = numpy_state
    if cuda is not None:
        states["torch.cuda"] = cuda
    return states


def set_global_states(trainer: Any, states: dict[str, Any]) -> None:
    """Set the process's global streams from ``states`` (the layout ``lightning_states`` writes), through
    ``_set_rng_states`` in the Trainer's own flavour (``utilities/seed.py`` imports it from Fabric)."""
    package = type(trainer).__module__.split(".trainer")[0]  # "pytorch_lightning" or "lightning.pytorch"
    set_rng_states: Any = importlib.import_module(f"{package}.utilities.seed")._set_rng_states
    if "torch.cuda" in states and not torch.cuda.is_available():
        states = {name: value for name, value in states.items() if name != "torch.cuda"}
    set_rng_states(states)
