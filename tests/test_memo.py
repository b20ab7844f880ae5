"""toolid.memo: a memo of a function of one string, bounded in bytes: the bound holds, long
keys are never remembered, results are those of the function, recently used keys stay."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolid import codec, edit, pairing
from toolid.memo import DEFAULT_BUDGET, MAX_KEY, memo


class Counted:
    """A pure function of a string that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, key: str) -> str:
        self.calls += 1
        return "tid1_" + key.replace(".", "-2E")  # a new string, as encode makes


@pytest.mark.parametrize("length", [24, 120, MAX_KEY])
def test_the_bound_holds_in_bytes(length: int) -> None:
    """However many distinct keys pass, what the memo holds (keys, results, its dicts, as
    tracemalloc counts every allocation still alive) stays within its budget."""
    budget = 256 * 1024
    remember = memo(budget)(Counted())
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        peak = 0
        for n in range(40_000):
            remember(f"functions.tool_{n}:{n}".ljust(length, "x"))
            if n % 1000 == 999:
                peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    assert peak <= budget, f"{peak} bytes held, budget {budget}"
    assert peak >= budget // 4, f"{peak} bytes held: the budget is hardly used"


def test_long_keys_are_never_remembered() -> None:
    function = Counted()
    remember = memo()(function)
    long_id = "functions.search:" + "q" * 1300  # a 1.3 KB id
    assert remember(long_id) == remember(long_id) == Counted()(long_id)
    assert function.calls == 2
    short = "functions.search:0"
    assert remember(short) == remember(short)
    assert function.calls == 3


def test_recently_used_keys_stay() -> None:
    """A key used in every round survives any number of other keys between its uses."""
    function = Counted()
    remember = memo(16 * 1024)(function)
    remember("functions.hot:0")
    for n in range(10_000):
        remember(f"functions.cold_{n}:0")
        if n % 10 == 0:
            remember("functions.hot:0")
    calls = function.calls
    remember("functions.hot:0")
    assert function.calls == calls
    assert calls == 10_001  # the hot key was computed once


def test_exceptions_are_not_remembered() -> None:
    calls: list[str] = []

    def fails(key: str) -> str:
        calls.append(key)
        raise ValueError(key)

    remember = memo()(fails)
    for _ in range(2):
        with pytest.raises(ValueError, match="k"):
            remember("k")
    assert calls == ["k", "k"]


@given(st.lists(st.text(max_size=300), max_size=50))
def test_results_are_the_functions(keys: list[str]) -> None:
    remember = memo(4096)(codec.encode)
    for key in [*keys, *reversed(keys)]:
        assert remember(key) == codec.encode(key)


@given(st.text(max_size=400))
def test_the_librarys_memoized_functions_give_what_they_compute(value: str) -> None:
    """The same result the first time (computed) and the next (remembered)."""
    for function in (codec.decode, codec.parse, pairing.key_of, codec.encoder("safe")):
        assert function(value) == function(value)
    client = codec.encode(value)
    assert codec.decode(client) == codec.decode(client) == value
    try:
        literal = edit.literal_of(value)
    except edit.RewriteError:
        return
    assert edit.literal_of(value) == literal


def test_the_default_budget_keeps_the_ids_of_a_long_stream() -> None:
    """A stream of 2,000 calls (the bench's worst row) named again and again: each id is
    computed once. (A budget that held fewer would compute every one again each time.)"""
    computed: list[str] = []

    @memo()
    def client_id(raw: str) -> str:
        computed.append(raw)
        return codec.encode(raw)

    ids = [f"functions.tool_{number}:{number}" for number in range(2000)]
    for _ in range(3):
        for raw in ids:
            client_id(raw)
    assert computed == ids
    assert DEFAULT_BUDGET <= 2 * 1024 * 1024
