"""The process's global random streams: torch's (CPU and CUDA), numpy's and Python's ``random``.

Part of the one place where the library reads names Lightning (or torch, torchmetrics) keeps
private, or relies on how another library lays out its state; each function says which it reads
and what it relies on.

A followed fit reads the streams at every batch's start (``GlobalStreams.batch_start``), so that read
copies bytes and builds no Python object: about 4,000 instructions a batch for all three streams
(``benchmarks/resume_costs.py``), where their public getters build one each (``Generator.get_state``
alone takes about 12,000 instructions inside a fit: a 5056-byte tensor, converted word by word, whose
allocation also makes glibc's malloc consolidate its free lists; ``random.getstate`` builds 625 ints,
``np.random.get_state`` a tuple). The bytes are copied only where a draw moved an engine since the last copy
(``_moved``: the engine's position in its block, relied on to move with every draw, as torch's ``mt19937``
and CPython's ``genrand_uint32`` move it, its first and last words and torch's cached normal samples,
compared in place). The states are converted to their getters' layouts only when they
are kept (``GlobalStreams.at_batch_start``, at a save) or read at the rarer moments (``read``):

- torch's CPU generator as a copy of the raw bytes of its C++ object: the ``at::mt19937`` engine
  (``seed_``, ``left_``, ``seeded_``, ``next_``, ``uint32_t state_[624]``) and the two cached normal
  samples after it (``std::optional<float>``, ``std::optional<double>``), which
  ``CPUGeneratorImpl::get_state`` writes into its ``CPUGeneratorImplState`` (private, torch's
  ``CPUGeneratorImpl.cpp``). The object is reached through the ``at::Generator`` right after the
  Python object's header (``THPGenerator``), and the engine found in it by a scratch generator's
  seed; the layout is checked against ``get_state()`` on that generator, fresh, after a regeneration
  of its state words and with both cached samples set, and then on the default generator. Wherever a
  check fails (another torch, another layout) torch's state is read through ``get_state()``. CUDA's
  through ``torch.cuda.get_rng_state_all()`` (public) once CUDA is initialized, on a machine that has it;
- Python's Mersenne Twister as a copy of the raw bytes of its C object (``_random.Random``: an
  ``int index`` followed by ``uint32_t state[624]`` right after the object header, CPython's layout),
  with the ``gauss_next`` attribute ``random.gauss`` keeps; the layout is checked against
  ``random.getstate()`` once, and the streams are read through ``random.getstate()`` wherever the
  check fails (another interpreter, another layout);
- numpy's legacy global generator only where it moved: its bit generator's state (through the
  public ctypes interface, ``BitGenerator.ctypes.state_address``: MT19937's ``uint32_t key[624]``
  and ``int pos``) is compared in place with a copy of it kept at the last read; where it differs,
  or where the last read holds a cached Gaussian (``has_gauss``: the one change that leaves the bits
  as they were), ``np.random.get_state()`` is read again. A step that draws from numpy pays that
  read (10-30 µs) at the next batch's start.

The copies are taken while no torch operation runs on the main thread (a batch's start); another
thread drawing from torch's default generator at that moment would tear the copy (``get_state``
takes the generator's lock).

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
from typing import Any

import torch

__all__ = [
    "GlobalStreams",
    "StreamsState",
    "lightning_states",
    "set_global_states",
    "torch_state",
    "torch_state_of_raw",
]

_MT_WORDS = 624
_PY_LAYOUT = struct.Struct(f"@i{_MT_WORDS}I")  # CPython's RandomObject after its header: index, state
_NP_LAYOUT = struct.Struct(f"@{_MT_WORDS}Ii")  # numpy's mt19937_state: key, pos
# torch's CPUGeneratorImpl from its engine on: `at::mt19937`'s data (seed_, left_, seeded_, next_, state_),
# then `std::optional<float> next_float_normal_sample_` and `std::optional<double> next_double_normal_sample_`
_TORCH_ENGINE = struct.Struct(f"=QiBxxxI{_MT_WORDS}I")
_TORCH_FLOAT_SAMPLE, _TORCH_DOUBLE_SAMPLE = struct.Struct("=f?"), struct.Struct("=d?")
_TORCH_FLOAT_AT, _TORCH_DOUBLE_AT, _TORCH_RAW_SIZE = 2520, 2528, 2544
# what `CPUGeneratorImpl::get_state` returns (`CPUGeneratorImplState`): the legacy THGeneratorState
# (the_initial_seed, left, seeded, next, state as uint64, normal_x, normal_y, normal_rho,
# normal_is_valid), then next_float_normal_sample and is_next_float_normal_sample_valid
_TORCH_STATE = struct.Struct(f"=QiiQ{_MT_WORDS}Qdddi4xf?3x")
_TORCH_SEARCHED = 256  # bytes of the CPUGeneratorImpl in which its engine is looked for
_TORCH_SEED = 0x243F6A8885A308D3  # a scratch generator's seed, found in its object's bytes
_cuda_initialized: Any = torch.cuda.is_initialized  # untyped in torch's stubs
_cuda_states: Any = torch.cuda.get_rng_state_all
_torch_state = torch.default_generator.get_state


# The global streams at one moment (a plain tuple): torch's CPU state, as the raw bytes of its engine
# (``_torch_raw_view``) or ``get_state()``'s tensor; Python's raw C state (index, state) as bytes, or
# ``random.getstate()``'s tuple; ``random.gauss``'s cached value with the raw state; numpy's
# ``np.random.get_state()`` (None without numpy); CUDA's per device (None before CUDA is initialized).
StreamsState = tuple[
    "bytes | torch.Tensor",
    "bytes | tuple[Any, ...]",
    "float | None",
    "tuple[Any, ...] | None",
    "list[torch.Tensor] | None",
]


def _view(address: int, size: int) -> memoryview:
    """The ``size`` bytes at ``address``, in place (the caller keeps the object that owns them alive).
    Its ``tobytes()`` copies them into a new ``bytes``, and ``target[:] = view`` into a buffer: a tenth
    of a microsecond each, where ``ctypes.string_at`` takes about 1 µs for its argument conversions."""
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")


def _python_raw_reader() -> tuple[Any, memoryview] | None:
    """The module ``random``'s own instance and its C state in place, where its layout is the one
    read here (checked against ``random.getstate()``); None elsewhere."""
    instance: Any = getattr(random.random, "__self__", None)
    base: Any = getattr(sys.modules.get("_random"), "Random", None)
    if instance is None or base is None or not isinstance(instance, base) or sys.implementation.name != "cpython":
        return None
    header = object.__basicsize__
    if base.__basicsize__ < header + _PY_LAYOUT.size:
        return None
    view = _view(id(instance) + header, _PY_LAYOUT.size)
    index, *words = _PY_LAYOUT.unpack(view)
    if (*words, index) != random.getstate()[1]:
        return None
    return instance, view


def torch_state_of_raw(raw: bytes) -> bytes:
    """torch's CPU generator state in ``get_state()``'s layout, from the raw bytes ``_torch_raw_view`` reads."""
    seed, left, seeded, next_word, *words = _TORCH_ENGINE.unpack_from(raw)
    float_sample, has_float = _TORCH_FLOAT_SAMPLE.unpack_from(raw, _TORCH_FLOAT_AT)
    double_sample, has_double = _TORCH_DOUBLE_SAMPLE.unpack_from(raw, _TORCH_DOUBLE_AT)
    return _TORCH_STATE.pack(
        seed,
        left,
        int(seeded),
        next_word,
        *words,
        0.0,  # normal_x, normal_rho: no longer used, written as 0 by get_state
        double_sample if has_double else 0.0,
        0.0,
        int(has_double),
        float_sample if has_float else 0.0,
        has_float,
    )


def _generator_object(generator: torch.Generator) -> int:
    """The address of a generator's C++ object: the ``at::Generator`` (one ``intrusive_ptr``) right after
    the Python object's header (``THPGenerator``)."""
    pointer = ctypes.c_void_p.from_address(id(generator) + object.__basicsize__).value
    return int(pointer or 0)


def _engine_offset(generator: torch.Generator, seed: int) -> int | None:
    """Where a generator seeded with ``seed`` holds its engine in its C++ object: the first 8-aligned
    place with the seed, followed by the state words ``get_state()`` reads."""
    address = _generator_object(generator)
    if not address:
        return None
    head = ctypes.string_at(address, _TORCH_SEARCHED)
    words = _TORCH_STATE.unpack(bytes(generator.get_state()))[4:20]
    first_words = struct.pack("=16I", *(word & 0xFFFFFFFF for word in words))
    offset = head.find(struct.pack("=Q", seed))
    while offset != -1:
        if offset % 8 == 0 and ctypes.string_at(address + offset + 20, len(first_words)) == first_words:
            return offset
        offset = head.find(struct.pack("=Q", seed), offset + 1)
    return None


def _reads_as_get_state(generator: torch.Generator, offset: int) -> bool:
    raw = ctypes.string_at(_generator_object(generator) + offset, _TORCH_RAW_SIZE)
    return torch_state_of_raw(raw) == bytes(generator.get_state())


def _torch_raw_view() -> memoryview | None:
    """torch's default CPU generator's engine and cached normal samples in place, where its C++ object
    is laid out as read here (see the module docstring); None elsewhere."""
    if sys.implementation.name != "cpython" or _TORCH_STATE.size != _torch_state().numel():
        return None
    if torch.Generator.__basicsize__ < object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        return None
    scratch = torch.Generator()
    scratch.manual_seed(_TORCH_SEED)
    offset = _engine_offset(scratch, _TORCH_SEED)
    if offset is None or not _reads_as_get_state(scratch, offset):
        return None
    torch.rand(_MT_WORDS + 1, generator=scratch)  # its state words regenerated
    if not _reads_as_get_state(scratch, offset):
        return None
    cached = bytearray(bytes(scratch.get_state()))  # both cached normal samples set: 0.5 and 0.25
    values = list(_TORCH_STATE.unpack(cached))
    values[-6:] = [0.0, 0.5, 0.0, 1, 0.25, True]
    scratch.set_state(torch.frombuffer(bytearray(_TORCH_STATE.pack(*values)), dtype=torch.uint8).clone())
    if not _reads_as_get_state(scratch, offset) or not _reads_as_get_state(torch.default_generator, offset):
        return None
    return _view(_generator_object(torch.default_generator) + offset, _TORCH_RAW_SIZE)


_TORCH_RAW: list[memoryview | None] = []  # the default generator's view, found once per process


def _default_torch_raw_view() -> memoryview | None:
    if not _TORCH_RAW:
        _TORCH_RAW.append(_torch_raw_view())
    return _TORCH_RAW[0]


# The parts of a Mersenne Twister engine that every draw moves: its position in its block of 624 words
# (torch's `left_` and `next_`, with its seed; Python's `index`) and, for a draw of whole blocks, which
# leaves the position as it was, the block's words, regenerated all at once (the first four and the last
# one are compared: equal after a regeneration with odds of 2**-160); and torch's cached normal samples.
# Where none moved, the engine is as it was at the last copy, and nothing is copied.
_TORCH_HEAD, _TORCH_TAIL = 36, 2512  # seed_, left_, seeded_, next_, state_[0:4]; state_[623] and the samples
_PYTHON_HEAD, _PYTHON_TAIL = 20, _PY_LAYOUT.size - 4  # index, state[0:4]; state[623]


def _torch_moving_parts(raw: memoryview | None) -> tuple[memoryview, ...]:
    return (raw[:_TORCH_HEAD], raw[_TORCH_TAIL:]) if raw is not None else ()


def _python_moving_parts(python: tuple[Any, memoryview] | None) -> tuple[memoryview, ...]:
    return (python[1][:_PYTHON_HEAD], python[1][_PYTHON_TAIL:]) if python is not None else ()


def _never_seen(parts: tuple[memoryview, ...]) -> tuple[bytearray, ...]:
    # no engine's parts are all 0xff bytes (its position is within its block): the first read copies
    return tuple(bytearray(b"\xff" * len(part)) for part in parts)


def _moved(parts: tuple[memoryview, ...], at_copy: tuple[bytearray, ...]) -> bool:
    """Whether an engine moved since its parts were ``at_copy`` (then kept as they are now): two
    comparisons by ``memcmp`` (a ``bytearray`` against a ``memoryview``) where nothing moved."""
    head, tail = parts
    # Any: typeshed's types see no overlap between a bytearray and a memoryview, which compare by content
    head_at: Any = at_copy[0]
    tail_at: Any = at_copy[1]
    if head_at == head and tail_at == tail:
        return False
    head_at[:] = head
    tail_at[:] = tail
    return True


class GlobalStreams:
    """Reads the global streams cheaply (see the module docstring); one per followed fit."""

    def __init__(self) -> None:
        self._python = _python_raw_reader()
        self._torch = _default_torch_raw_view()
        self._cuda = bool(torch.cuda.is_available())  # without it, CUDA is never initialized
        # the last batch start's streams (`batch_start`): torch's and Python's raw bytes copied into
        # these buffers, the rest as read
        self._torch_at: memoryview = memoryview(bytearray(_TORCH_RAW_SIZE))
        self._torch_state_at: torch.Tensor | None = None  # where torch's raw bytes cannot be read
        self._python_at: memoryview = memoryview(bytearray(_PY_LAYOUT.size))
        # the parts of each engine that every draw moves (`_moved`), in place, and as they were at the last copy
        self._torch_moves: tuple[memoryview, ...] = _torch_moving_parts(self._torch)
        self._python_moves: tuple[memoryview, ...] = _python_moving_parts(self._python)
        self._torch_moves_at: tuple[bytearray, ...] = _never_seen(self._torch_moves)
        self._python_moves_at: tuple[bytearray, ...] = _never_seen(self._python_moves)
        self._python_state_at: tuple[Any, ...] | None = None  # where Python's cannot
        self._gauss_at: float | None = None
        self._numpy_at: tuple[Any, ...] | None = None
        self._cuda_at: list[torch.Tensor] | None = None
        self._numpy: Any = None
        self._np_generator: Any = None
        self._np_bits_now: memoryview | None = None
        # the bit generator's state at the last full read: a bytearray, compared with the live memoryview by
        # memcmp (two memoryviews compare item by item, about 50 times slower); Any, as torch's and
        # typeshed's types see no overlap between a bytearray and a memoryview
        self._np_bits: Any = bytearray()
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
        """The streams now, in objects of their own (kept as long as the caller likes)."""
        python, raw = self._python, self._torch
        return (
            raw.tobytes() if raw is not None else _torch_state(),
            python[1].tobytes() if python is not None else random.getstate(),
            python[0].gauss_next if python is not None else None,
            self._read_numpy() if self._numpy is not None else None,
            _cuda_states() if self._cuda and _cuda_initialized() else None,
        )

    def batch_start(self) -> None:
        """The streams now, into this reader's buffers (``at_batch_start`` gives them back): at every
        batch's start, so that nothing is allocated where nothing but bytes needs copying, and nothing
        is copied where no draw moved an engine since the last copy (`_moved`)."""
        raw = self._torch
        if raw is not None:
            if _moved(self._torch_moves, self._torch_moves_at):
                self._torch_at[:] = raw
        else:
            self._torch_state_at = _torch_state()
        python = self._python
        if python is not None:
            if _moved(self._python_moves, self._python_moves_at):
                self._python_at[:] = python[1]
            self._gauss_at = python[0].gauss_next
        else:
            self._python_state_at = random.getstate()
        if self._numpy is not None:
            self._numpy_at = self._read_numpy()
        if self._cuda:
            self._cuda_at = _cuda_states() if _cuda_initialized() else None

    def at_batch_start(self) -> StreamsState:
        """What the last ``batch_start`` read, in objects of its own."""
        torch_state = self._torch_state_at
        python_state = self._python_state_at
        return (
            self._torch_at.tobytes() if torch_state is None else torch_state,
            self._python_at.tobytes() if python_state is None else python_state,
            self._gauss_at,
            self._numpy_at,
            self._cuda_at,
        )

    def _read_numpy(self) -> tuple[Any, ...]:
        np: Any = self._numpy
        generator: Any = self._np_global()
        if generator is not self._np_generator:  # a new global bit generator (np.random.set_bit_generator)
            self._np_generator, self._np_state = generator, None
            address = 0
            if generator is not None and generator.state.get("bit_generator") == "MT19937":
                address = int(generator.ctypes.state_address)
            self._np_bits_now = _view(address, _NP_LAYOUT.size) if address else None
            self._np_bits = bytearray(_NP_LAYOUT.size)
        bits_now = self._np_bits_now
        if bits_now is None:  # not MT19937 (or a numpy before 1.25): read in full every time
            return tuple(np.random.get_state())
        # compared in place (a bytearray compares with any buffer by memcmp): nothing is copied where
        # nothing moved
        if self._np_gauss or self._np_state is None or self._np_bits != bits_now:
            self._np_state = tuple(np.random.get_state())
            self._np_bits[:] = bits_now
            self._np_gauss = bool(self._np_state[3])
        return self._np_state


def torch_state(state: bytes | torch.Tensor) -> torch.Tensor:
    """A ``StreamsState``'s torch entry as ``get_state()`` gives it (what ``Generator.set_state`` takes)."""
    if isinstance(state, bytes):
        return torch.frombuffer(bytearray(torch_state_of_raw(state)), dtype=torch.uint8)
    return state


def lightning_states(state: StreamsState) -> dict[str, Any]:
    """``state`` in the layout ``_collect_rng_states`` writes (Lightning's private helper, see the module docstring)."""
    raw_torch, python, gauss, numpy_state, cuda = state
    torch_state_now = torch_state(raw_torch)
    if isinstance(python, bytes):
        index, *words = _PY_LAYOUT.unpack(python)
        python = (3, (*words, index), gauss)
    states: dict[str, Any] = {"torch": torch_state_now, "python": python}
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
