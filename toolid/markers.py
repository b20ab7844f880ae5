"""Marker strings: byte strings of which any document with an id position spells one.

Finding them is the first, cheapest check on every body and every streamed chunk, so they
are found with the fastest means there is. Natively, every word in one call, each with the C
library's memmem (several times faster than ``bytes.find`` on large bodies). Without the
accelerator, a single word is looked for with ``bytes.find``, whose search skips ahead by up
to the word's length and runs several times faster than a regex (which steps through every
byte); several words with one regex, their alternatives factored into a trie (measured on the
Messages markers: one regex beats a search per word).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from toolid import native


class Markers:
    """A set of marker words, searched for together."""

    __slots__ = ("_regex", "words")

    def __init__(self, words: Iterable[bytes]) -> None:
        self.words: tuple[bytes, ...] = tuple(dict.fromkeys(words))  # in the order given
        if not self.words or b"" in self.words:
            raise ValueError("markers must be non-empty words")
        self._regex = re.compile(alternatives(self.words)) if len(self.words) > 1 else None

    def in_(self, data: bytes) -> bool:
        """Whether ``data`` spells any of the words (natively in one pass, when built)."""
        return self.first(data) >= 0

    def first(self, data: bytes) -> int:
        """Where the first of the words in ``data`` begins, or -1 (natively in one pass, when
        built)."""
        if native.extension is not None and len(self.words) <= native.MAX_MARKERS:
            found: int = native.extension.first_marker(data, self.words)
            return found
        if self._regex is None:
            return data.find(self.words[0])
        hit = self._regex.search(data)
        return -1 if hit is None else hit.start()

    def finder(self, data: bytes, stop: int) -> Callable[[int], int]:
        """A function giving where the first word in ``data[start:stop]`` begins, or -1."""
        regex = self._regex
        if regex is None:
            word = self.words[0]
            return lambda start: data.find(word, start, stop)

        def first_match(start: int) -> int:
            hit = regex.search(data, start, stop)
            return -1 if hit is None else hit.start()

        return first_match


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
