"""Framing of a JSON array written element by element, sans I/O.

Gemini's ``:streamGenerateContent`` without ``?alt=sse`` answers ``application/json``: one
JSON array whose elements (each a whole GenerateContentResponse) are written as they are
made, ``[{...}\\r\\n,\\r\\n{...}\\r\\n]``. ``ElementFramer`` is fed the body in arbitrary pieces and
hands back each object element as soon as its closing brace has arrived, and every byte
between elements (the brackets, commas, whitespace) at once, so nothing is held but an
incomplete element. A top-level object that is no array's element (an error answer,
``{"error": ...}``) is an element too; any other value passes as bytes between elements.

It reads the bytes as JSON's structure only (brackets outside strings, strings with their
escapes), each byte once, so a body fed one byte at a time is still framed in linear time. It
never raises: bytes that are no JSON are still handed back, in order, every one of them.
"""

from __future__ import annotations

import re
from typing import Final

# Outside strings, what changes the structure; inside one, what may end it.
_STRUCTURE: Final = re.compile(rb'["\[\]{}]')
_STRING_END: Final = re.compile(rb'["\\]')
_QUOTE, _BACKSLASH, _OPEN_OBJECT = b'"'[0], b"\\"[0], b"{"[0]
_OPENING: Final = frozenset(b"{[")

type Piece = tuple[bytes, bool]  # (bytes, whether they are one whole element)


class ElementFramer:
    """Split a streamed JSON array into its object elements and the bytes between them."""

    def __init__(self) -> None:
        self._held = bytearray()  # the start of an element whose end has not arrived
        self._depth = 0  # brackets open, outside strings
        self._outer_array = False  # the top-level value is an array: its objects are elements
        self._in_string = False
        self._escaped = False  # in a string, the last byte was a backslash
        self._element = -1  # the depth outside the element being read (-1: none)
        self._passing = False  # the element being read is handed back as it comes

    def feed(self, data: bytes) -> list[Piece]:
        """Add ``data``; return, in order, the elements it completes and the bytes between."""
        pieces: list[Piece] = []
        start = 0  # the first byte of ``data`` not handed back or held yet
        at = 0
        size = len(data)
        while at < size:
            if self._in_string:
                at = self._string(data, at)
                continue
            hit = _STRUCTURE.search(data, at)
            if hit is None:
                break
            at = hit.end()
            byte = data[hit.start()]
            if byte == _QUOTE:
                self._in_string = True
            elif byte in _OPENING:
                if self._element < 0 and byte == _OPEN_OBJECT and self._at_element_level():
                    if hit.start() > start:
                        pieces.append((data[start : hit.start()], False))
                    start = hit.start()
                    self._element = self._depth
                elif self._depth == 0:
                    self._outer_array = True
                self._depth += 1
            elif self._depth > 0:  # a closing bracket (one too many is just a byte)
                self._depth -= 1
                if self._depth == self._element:
                    whole = self._held + data[start:at] if self._held else data[start:at]
                    pieces.append((bytes(whole), not self._passing))
                    self._held.clear()
                    self._element = -1
                    self._passing = False
                    start = at
                elif self._depth == 0:
                    self._outer_array = False
        if start < size:
            if self._element >= 0 and not self._passing:
                self._held += data[start:]
            else:
                pieces.append((data[start:], False))
        return pieces

    def _string(self, data: bytes, at: int) -> int:
        """Read on inside a string from ``at``; return where reading goes on."""
        if self._escaped:
            self._escaped = False
            return at + 1
        hit = _STRING_END.search(data, at)
        if hit is None:
            return len(data)
        if data[hit.start()] == _BACKSLASH:
            self._escaped = True
        else:
            self._in_string = False
        return hit.end()

    def _at_element_level(self) -> bool:
        """Whether an object opened now is an element: a top-level one, or one directly in
        the top-level array."""
        return self._depth == 0 or (self._depth == 1 and self._outer_array)

    def release(self) -> bytes:
        """Hand back the held start of an element and pass the rest of it as it comes (an
        element too large to hold); the framing goes on after it."""
        held = bytes(self._held)
        self._held.clear()
        if self._element >= 0:
            self._passing = True
        return held

    def take_tail(self) -> bytes:
        """Remove and return the held bytes (an element the body ended inside)."""
        tail = bytes(self._held)
        self._held.clear()
        self._element = -1
        self._passing = False
        return tail

    def __len__(self) -> int:
        return len(self._held)
