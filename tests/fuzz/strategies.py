"""Hypothesis strategies for the fuzz tests: documents of every API spelled every legal way
(and a few illegal ones).

``chaos_dumps`` writes any parsed JSON value as valid JSON, choosing, for every token,
among the spellings a server or client could use: whitespace anywhere between tokens
(space, tab, CR, LF), every character of a string or member name raw or as a ``\\u``
escape (lower or upper case hex; astral characters as escaped surrogate pairs; lone
surrogates always escaped, or, on request, as raw surrogate bytes, which Python's json
module still reads), short escapes (``\\"`` ``\\/`` ``\\n`` ...), and duplicate members
(a decoy before the real member, which wins, or after it, which then wins).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SPACES = ["", "", "", "", " ", "  ", "\n", "\t", "\r\n", " \n\t "]
DECOYS: list[Any] = [
    "a:1",
    "tid1_a-3A1",
    "",
    None,
    0,
    1.5,
    True,
    [],
    {},
    {"id": "x:1"},
    ["functions.f:0"],
    {"functionCall": {"id": "x:1"}},  # a Gemini part, where another one stands
    [{"functionResponse": {"id": "a:1"}}],
]


@dataclass
class Chaos:
    """How wild one serialisation is, and what it ended up doing."""

    rng: random.Random
    space_rate: float = 0.3
    escape_rate: float = 0.1  # chance that a character is written as an escape
    dup_rate: float = 0.0  # chance that a member gets a duplicate
    raw_surrogates: bool = False  # write lone surrogates as (invalid UTF-8) raw bytes
    decoys: list[Any] = field(default_factory=lambda: list(DECOYS))
    # what happened
    duplicates: int = 0
    escaped_key_chars: int = 0
    wrote_raw_surrogates: bool = False

    def space(self) -> str:
        return self.rng.choice(_SPACES) if self.rng.random() < self.space_rate else ""

    def char(self, ch: str, key: bool) -> str:
        cp = ord(ch)
        surrogate = 0xD800 <= cp <= 0xDFFF
        if surrogate and self.raw_surrogates and self.rng.random() < 0.5:
            self.wrote_raw_surrogates = True
            return ch  # encoded with surrogatepass at the end
        forced = ch in _SHORT or cp < 0x20 or surrogate
        if not forced and ch != "/" and self.rng.random() >= self.escape_rate:
            return ch
        if key:
            self.escaped_key_chars += 1
        if ch in _SHORT and self.rng.random() < 0.7:
            return _SHORT[ch]
        if ch == "/" and self.rng.random() < 0.5:
            return "\\/" if self.rng.random() < 0.5 else "/"
        if cp > 0xFFFF:
            if self.rng.random() < 0.5:
                return ch
            high = 0xD800 + ((cp - 0x10000) >> 10)
            low = 0xDC00 + ((cp - 0x10000) & 0x3FF)
            return self.hex(high) + self.hex(low)
        return self.hex(cp)

    def hex(self, cp: int) -> str:
        text = f"\\u{cp:04x}"
        return text.upper().replace("\\U", "\\u") if self.rng.random() < 0.5 else text

    def string(self, value: str, key: bool = False) -> str:
        return '"' + "".join(self.char(ch, key) for ch in value) + '"'

    def dumps(self, value: Any) -> str:
        if isinstance(value, dict):
            members = []
            for key, item in value.items():
                if self.rng.random() < self.dup_rate:
                    self.duplicates += 1
                    decoy = self.member(key, self.rng.choice(self.decoys))
                    real = self.member(key, item)
                    # a decoy before the real member loses; after it, the decoy wins
                    pair = [decoy, real] if self.rng.random() < 0.7 else [real, decoy]
                    members.extend(pair)
                else:
                    members.append(self.member(key, item))
            inner = ",".join(members)
            return "{" + inner + self.space() + "}"
        if isinstance(value, list):
            inner = ",".join(self.space() + self.dumps(item) + self.space() for item in value)
            return "[" + inner + self.space() + "]"
        if isinstance(value, str):
            return self.string(value)
        return json.dumps(value)

    def member(self, key: str, value: Any) -> str:
        return (
            self.space()
            + self.string(key, key=True)
            + self.space()
            + ":"
            + self.space()
            + self.dumps(value)
            + self.space()
        )

    def encode(self, value: Any) -> bytes:
        return (self.space() + self.dumps(value) + self.space()).encode("utf-8", "surrogatepass")


@st.composite
def chaos(
    draw: st.DrawFn,
    *,
    dup_rate: st.SearchStrategy[float] | None = None,
    raw_surrogates: bool = False,
) -> Chaos:
    """A Chaos serialiser with random rates (seeded, so examples replay)."""
    return Chaos(
        rng=random.Random(draw(st.integers(min_value=0, max_value=2**32))),
        space_rate=draw(st.sampled_from([0.0, 0.3, 1.0])),
        escape_rate=draw(st.sampled_from([0.0, 0.0, 0.05, 0.5, 1.0])),
        dup_rate=draw(dup_rate if dup_rate is not None else st.sampled_from([0.0, 0.0, 0.2])),
        raw_surrogates=raw_surrogates,
    )


# Invalid UTF-8, as an upstream or a broken client could send it.
INVALID_UTF8 = [
    b"\xff",
    b"\xfe",
    b"\x80",  # a lone continuation byte
    b"\xc3(",  # a lead byte without its continuation
    b"\xe2\x82",  # a truncated 3-byte sequence
    b"\xc0\xaf",  # an overlong "/"
    b"\xf8\x88\x80\x80\x80",  # a 5-byte form
    b"\xf4\x90\x80\x80",  # above U+10FFFF
]
# UTF-8 spellings of lone surrogates: not UTF-8, but Python's json module reads them.
SURROGATE_BYTES = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80"]
