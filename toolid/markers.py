"""Marker strings: byte strings of which any document with an id position spells one.

Finding them is the first, cheapest check on every body and every streamed chunk, so they
are found with the fastest means Python has. A few words are looked for with ``bytes.find``,
whose search skips ahead by up to a needle's length and runs many times faster than a regex
(which steps through every byte); many words with one regex, its alternatives factored into
a trie.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

_FIND_AT_MOST: Final = 3  # more words than this: one regex beats a search per word


class Markers:
    """A set of marker words, searched for together."""

    __slots__ = ("_regex", "words")

    def __init__(self, words: Iterable[bytes]) -> None:
        self.words: tuple[bytes, ...] = tuple(dict.fromkeys(words))  # in the order given
        if not self.words or b"" in self.words:
            raise ValueError("markers must be non-empty words")
        self._regex = re.compile(alternatives(self.words)) if self._by_regex else None

    @property
    def _by_regex(self) -> bool:
        return len(self.words) > _FIND_AT_MOST

    def in_(self, data: bytes) -> bool:
        """Whether ``data`` spells any of the words (tried in the order given: put the most
        common first)."""
        if self._regex is not None:
            return self._regex.search(data) is not None
        return any(word in data for word in self.words)

    def finder(self, data: bytes, stop: int) -> _Finder:
        """A function giving the first word in ``data[start:stop]`` for ever larger ``start``
        (each word's next occurrence is remembered, so no byte is searched twice)."""
        return _Finder(data, stop, self.words, self._regex)


class _Finder:
    __slots__ = ("_data", "_next", "_regex", "_stop")

    def __init__(
        self, data: bytes, stop: int, words: tuple[bytes, ...], regex: re.Pattern[bytes] | None
    ) -> None:
        self._data, self._stop, self._regex = data, stop, regex
        # Each word's next occurrence at or after the last start (-1: none left), or None.
        self._next: dict[bytes, int | None] = dict.fromkeys(words)

    def __call__(self, start: int) -> int:
        """Where the first word at or after ``start`` begins (``start`` never decreases),
        or -1."""
        if self._regex is not None:
            hit = self._regex.search(self._data, start, self._stop)
            return -1 if hit is None else hit.start()
        first = -1
        for word, known in self._next.items():
            at = known
            if at is None or 0 <= at < start:
                at = self._next[word] = self._data.find(word, start, self._stop)
            if at >= 0 and (first < 0 or at < first):
                first = at
        return first


def alternatives(words: Iterable[bytes]) -> bytes:
    """A regex matching any of ``words``, shared prefixes factored out (a trie: ``(?:ab(?:c|d)?|
    b)`` for ab, abc, abd, b). Python's regex engine tries a flat alternation word by word at
    every position, a factored one mostly once."""
    tails: dict[bytes, list[bytes]] = {}
    ends = False
    for word in sorted(set(words)):
        if word:
            tails.setdefault(word[:1], []).append(word[1:])
        else:
            ends = True
    branches = [re.escape(head) + alternatives(rest) for head, rest in tails.items()]
    if not branches:
        return b""
    if len(branches) == 1 and not ends:
        return branches[0]
    return b"(?:" + b"|".join(branches) + (b")?" if ends else b")")
