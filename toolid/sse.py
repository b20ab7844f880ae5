"""Incremental Server-Sent-Events framing (WHATWG rules), sans I/O.

``EventFramer`` is fed bytes in arbitrary pieces and hands back each complete event (its
bytes up to and including the blank line that ends it) as soon as that blank line has
arrived. Like h11's receive buffer, it remembers how far it has searched, so a stream
fed one byte at a time is still framed in linear time.

``data_lines`` reads the ``data:`` fields of one event, as offsets into the event bytes,
so a caller can rewrite a field's value without touching anything around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# A line ending (CRLF, a CR not followed by LF, or LF) followed by another: an empty line.
_BLANK_LINE: Final = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE: Final = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|$)")
_BOM: Final = b"\xef\xbb\xbf"
_LONGEST_BOUNDARY: Final = 4  # b"\r\n\r\n"


class EventFramer:
    """Split a byte stream into SSE events, holding back only the incomplete tail."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._searched = 0  # no boundary starts before this offset
        self._seen_cr = False  # until a CR shows up, a blank line can only be b"\n\n"
        self._ended_on_cr = False  # the last event ended with a CR and nothing is held

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return every event it completes, in order."""
        events: list[bytes] = []
        if self._ended_on_cr and data.startswith(b"\n"):
            # The LF completing the CRLF that ended the last event: its own piece, so it
            # never counts as the start of the next event.
            events.append(b"\n")
            data = data[1:]
        self._ended_on_cr = False
        self._seen_cr = self._seen_cr or b"\r" in data
        if self._buffer:
            self._buffer += data
            source: bytes | bytearray = self._buffer
        else:
            source = data  # nothing held: cut events straight from the new bytes
        start = 0
        while (end := self._boundary_end(source)) >= 0:
            events.append(bytes(source[start:end]))
            start = self._searched = end
        if source is self._buffer:
            del self._buffer[:start]
        else:
            self._buffer += data[start:]
        # A boundary may straddle the end: resume just before it next time.
        self._searched = max(0, len(self._buffer) - _LONGEST_BOUNDARY + 1)
        self._ended_on_cr = bool(events) and not self._buffer and events[-1].endswith(b"\r")
        return events

    def _boundary_end(self, source: bytes | bytearray) -> int:
        """Where the next event after ``self._searched`` ends, or -1."""
        if not self._seen_cr:
            found = source.find(b"\n\n", self._searched)
            return found + 2 if found >= 0 else -1
        match = _BLANK_LINE.search(source, self._searched)
        return match.end() if match else -1

    @staticmethod
    def ends_an_event(data: bytes) -> bool:
        """Whether ``data`` ends with a blank line whose line ending is complete (so, if it
        started at an event's beginning, it holds only whole events and no LF can follow that
        belongs to them)."""
        if data.endswith(b"\n\n"):
            return True
        if not data.endswith(b"\n"):
            return False
        match = _BLANK_LINE.search(data, max(0, len(data) - _LONGEST_BOUNDARY))
        return match is not None and match.end() == len(data)

    def take_tail(self) -> bytes:
        """Remove and return the held bytes (an incomplete event)."""
        tail = bytes(self._buffer)
        self._buffer.clear()
        self._searched = 0
        self._ended_on_cr = False
        return tail

    def __len__(self) -> int:
        return len(self._buffer)


@dataclass(frozen=True, slots=True)
class Field:
    """A ``data:`` field's value, as ``event[start:end]``."""

    start: int
    end: int


def data_lines(event: bytes, stream_start: bool = False) -> list[Field]:
    """The value spans of every ``data`` field in ``event``, in order.

    ``stream_start``: the event opens the stream, so a leading byte order mark is skipped.
    """
    fields: list[Field] = []
    at = len(_BOM) if stream_start and event.startswith(_BOM) else 0
    for match in _LINE.finditer(event, at):
        line_start, line_end = match.span(1)
        if match.group(1).startswith(b"data"):
            name_end = line_start + 4
            if line_end == name_end:  # "data" alone: an empty value
                fields.append(Field(line_end, line_end))
            elif event[name_end] == 0x3A:  # ":"
                start = name_end + 1
                if start < line_end and event[start] == 0x20:
                    start += 1
                fields.append(Field(start, line_end))
        if not match.group(2):
            break
    return fields
