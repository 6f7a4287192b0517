"""The global random streams' reader (``_lightning/random_state.py``): what a followed fit reads at every
batch's start is exactly the state Lightning's own helper collects there, read without building objects.

The streams at a batch's start are copied as bytes into the reader's buffers (torch's CPU generator and
Python's ``random`` from their C objects' memory, numpy's compared in place) and converted only when a
save keeps them. Each test moves every stream in the ways a step does (torch's uniform and normal draws,
a cached normal sample, Python's ``random`` and ``gauss``, numpy's draws and its cached Gaussian) and
compares with ``_collect_rng_states`` (Lightning's, the layout ``_set_rng_states`` puts back).
The resume matrices (``tests/test_random_streams.py``) check the same states across real resumes.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from lightning_fabric.utilities.seed import _collect_rng_states

from lightning_step_types._lightning import random_state
from lightning_step_types._lightning.random_state import GlobalStreams, lightning_states, torch_state_of_raw


def collected() -> dict[str, Any]:
    states = _collect_rng_states()
    states.pop("torch.cuda", None)  # no CUDA here: the reader reads none before CUDA is initialized
    return states


def assert_same(read: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sorted(read) == sorted(expected) == ["numpy", "python", "torch"]
    assert read["torch"].dtype == torch.uint8 and torch.equal(read["torch"], expected["torch"])
    assert read["python"] == expected["python"]
    kind, key, position, has_gauss, cached = read["numpy"]
    assert (kind, position, has_gauss, cached) == tuple(expected["numpy"][i] for i in (0, 2, 3, 4))
    assert np.array_equal(key, expected["numpy"][1])


DRAWS: list[tuple[str, Callable[[], object]]] = [
    ("torch uniform", lambda: torch.rand(700)),  # past 624 words: its state words regenerated
    ("torch normal, float32", lambda: torch.randn(3)),
    ("torch normal, float64, one", lambda: torch.randn(1, dtype=torch.float64)),
    ("torch dropout", lambda: torch.nn.functional.dropout(torch.ones(16), 0.5)),
    ("random", random.random),
    ("random.gauss (a cached value)", lambda: random.gauss(0.0, 1.0)),
    ("numpy uniform", np.random.rand),
    ("numpy normal (a cached Gaussian)", np.random.randn),
    ("nothing", lambda: None),
]


@pytest.mark.parametrize("name, draw", DRAWS, ids=[name for name, _ in DRAWS])
def test_the_batch_start_read_is_lightnings_state_there_after_any_draw(name: str, draw: Callable[[], object]) -> None:
    torch.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    reader = GlobalStreams()
    for _ in range(3):
        draw()
        reader.batch_start()
        at_start = collected()
        for _, other in DRAWS:  # the batch draws from every stream after its start
            other()
        assert_same(lightning_states(reader.at_batch_start()), at_start)
        assert_same(lightning_states(reader.read()), collected())


def test_a_cached_torch_normal_sample_is_read() -> None:
    """torch keeps the second value of a Box-Muller pair for the next draw (set here through
    ``set_state``): the raw read holds it where ``get_state`` does."""
    state = bytearray(bytes(torch.default_generator.get_state()))
    layout = random_state._TORCH_STATE
    values = list(layout.unpack(state))
    values[-6:] = [0.0, 0.75, 0.0, 1, 1.5, True]
    torch.default_generator.set_state(torch.frombuffer(bytearray(layout.pack(*values)), dtype=torch.uint8).clone())
    reader = GlobalStreams()
    reader.batch_start()
    expected = collected()
    assert layout.unpack(bytes(expected["torch"]))[-6:] == (0.0, 0.75, 0.0, 1, 1.5, True)
    assert_same(lightning_states(reader.at_batch_start()), expected)
    torch.randn(1, dtype=torch.float64)  # takes the cached value
    assert_same(lightning_states(reader.read()), collected())


def test_torchs_generator_is_read_from_its_memory_on_this_torch() -> None:
    """The layout checks pass on the pinned torch: the batch-start read copies bytes, not ``get_state()``."""
    view = random_state._default_torch_raw_view()
    assert view is not None and len(view) == 2544
    assert torch_state_of_raw(view.tobytes()) == bytes(torch.default_generator.get_state())


def test_where_the_layouts_are_not_the_ones_read_the_getters_give_the_same_states() -> None:
    reader = GlobalStreams()
    reader._torch, reader._python = None, None  # another torch's or interpreter's layout
    reader.batch_start()
    at_start = collected()
    for _, draw in DRAWS:
        draw()
    assert_same(lightning_states(reader.at_batch_start()), at_start)
    assert_same(lightning_states(reader.read()), collected())


def test_the_batch_start_read_builds_no_objects() -> None:
    """Python's allocator hands out nothing per batch start beyond small bookkeeping: no copy of a
    stream's 2500 bytes (torch's own allocator, which ``get_state()`` would use, is not Python's; the
    test above shows its state is not read through ``get_state()``)."""
    reader = GlobalStreams()
    reader.batch_start()
    tracemalloc.start()
    try:
        for _ in range(10):
            random.random()
            reader.batch_start()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1000


def test_a_draw_of_whole_blocks_is_read_though_each_engines_position_is_as_it_was() -> None:
    """Draws of exactly 624 words between two batch starts leave each engine's position where it was
    and regenerate its state words: the read compares some of the words too, and copies the state."""
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    torch.rand(1)  # past the seeding's own position, which no draw comes back to
    reader = GlobalStreams()
    reader.batch_start()
    view = random_state._default_torch_raw_view()
    assert view is not None
    position, words = bytes(view[8:20]), bytes(view[20:2516])
    draws = 0
    while draws < 2000:  # one value at a time, to the next time the position is as it was
        torch.rand(1)
        draws += 1
        if bytes(view[8:20]) == position:
            break
    assert bytes(view[8:20]) == position and bytes(view[20:2516]) != words and draws in (312, 624)
    python_position = random.getstate()[1][-1]
    for _ in range(624):
        random.getrandbits(32)
    assert random.getstate()[1][-1] == python_position
    reader.batch_start()
    assert_same(lightning_states(reader.at_batch_start()), collected())


def test_nothing_is_copied_where_no_draw_moved_an_engine() -> None:
    """Where no stream moved since the last batch start, its bytes are not copied again: a buffer
    overwritten in between keeps what was written (the read compares the parts every draw moves)."""
    reader = GlobalStreams()
    reader.batch_start()
    expected = collected()
    reader._torch_at[2000:2004] = b"\x00\x01\x02\x03"  # a word no draw-free batch start writes again
    reader._python_at[2000:2004] = b"\x00\x01\x02\x03"
    reader.batch_start()
    assert bytes(reader._torch_at[2000:2004]) == bytes(reader._python_at[2000:2004]) == b"\x00\x01\x02\x03"
    torch.rand(1)
    random.random()
    reader.batch_start()
    assert bytes(reader._torch_at[2000:2004]) != b"\x00\x01\x02\x03"
    assert_same(lightning_states(reader.at_batch_start()), collected())
    assert collected()["python"] != expected["python"]
