"""Marker search: finds exactly what a regex over the same words finds, by either means."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.test_jsonparse import stdlib_only
from toolid import native
from toolid.markers import Markers, alternatives


def _bytes(alphabet: bytes, min_size: int, max_size: int) -> st.SearchStrategy[bytes]:
    return st.lists(st.sampled_from(alphabet), min_size=min_size, max_size=max_size).map(bytes)


WORDS = st.lists(_bytes(b'ab"c', 1, 4), min_size=1, max_size=6)
DATA = _bytes(b'ab"cd', 0, 200)


@given(words=WORDS, data=DATA, starts=st.lists(st.integers(0, 210), max_size=8))
def test_finder_agrees_with_a_regex(words: list[bytes], data: bytes, starts: list[int]) -> None:
    markers = Markers(words)
    regex = re.compile(b"|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)))
    find = markers.finder(data, len(data))
    for start in sorted(starts):
        hit = regex.search(data, start)
        assert find(start) == (-1 if hit is None else hit.start())
    assert markers.in_(data) == (regex.search(data) is not None)
    hit = regex.search(data)
    assert markers.first(data) == (-1 if hit is None else hit.start())
    with stdlib_only():
        assert Markers(words).first(data) == (-1 if hit is None else hit.start())


@given(words=WORDS, data=DATA)
def test_a_stop_bounds_the_search(words: list[bytes], data: bytes) -> None:
    stop = len(data) // 2
    hit = re.compile(alternatives(words)).search(data, 0, stop)
    assert Markers(words).finder(data, stop)(0) == (-1 if hit is None else hit.start())


# Long words too (the native search groups words by their common stem), and longer data.
LONG_WORDS = st.lists(_bytes(b'ab"c', 1, 24), min_size=1, max_size=6)
LONG_DATA = _bytes(b'ab"cd', 0, 600)


@pytest.mark.skipif(not native.accelerated(), reason="the native accelerator is not built")
@given(words=LONG_WORDS | WORDS, data=LONG_DATA | DATA, padding=st.integers(0, 40))
def test_the_native_search_agrees_with_a_regex(
    words: list[bytes], data: bytes, padding: int
) -> None:
    data = b"d" * padding + data
    regex = re.compile(b"|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)))
    hit = regex.search(data)
    assert native.extension.first_marker(data, tuple(words)) == (-1 if hit is None else hit.start())
    assert Markers(words).in_(data) == (hit is not None)
    with stdlib_only():
        assert Markers(words).in_(data) == (hit is not None)
    for end in range(max(0, len(data) - 40), len(data)):  # a hit in the last bytes
        found = regex.search(data, 0, end)  # (a view: the bytes after end are there, unread)
        assert native.extension.first_marker(memoryview(data)[:end], tuple(words)) == (
            -1 if found is None else found.start()
        )


@pytest.mark.skipif(not native.accelerated(), reason="the native accelerator is not built")
@pytest.mark.parametrize("size", range(1, 24))
def test_the_native_search_reads_no_byte_past_the_end(size: int) -> None:
    word = b'"' + b"w" * (size - 2) + b'"' if size > 1 else b"w"
    for padding in range(40):
        data = b"d" * padding + word
        view = memoryview(data)
        assert native.extension.first_marker(view, (word,)) == padding
        assert native.extension.first_marker(view[:-1], (word,)) == -1  # the word's last byte
        assert native.extension.first_marker(view[1:-1], (word,)) == -1  # is past the end


@given(data=DATA, start=st.integers(0, 210))
def test_a_word_given_twice_is_one_word(data: bytes, start: int) -> None:
    twice, once = Markers([b"a", b"a"]), Markers([b"a"])
    assert twice.words == once.words == (b"a",)
    assert twice.first(data) == once.first(data) == data.find(b"a")
    assert twice.finder(data, len(data))(start) == data.find(b"a", start)
    with stdlib_only():
        assert Markers([b"a", b"a"]).first(data) == data.find(b"a")


def test_words_must_not_be_empty() -> None:
    with pytest.raises(ValueError):
        Markers([])
    with pytest.raises(ValueError):
        Markers([b"a", b""])
