"""Incremental Server-Sent-Events framing (WHATWG rules), sans I/O.

``EventFramer`` is fed bytes in arbitrary pieces and hands back each complete event (its
bytes up to and including the blank line that ends it) as soon as that blank line has
arrived. Like h11's receive buffer, it searches the held bytes again only where a blank
line may straddle their end, so a stream fed one byte at a time is still framed in linear
time. ``feed_marked`` frames the same events, but only around the hits of a regex: the
events between them come back in one piece, found by byte searches alone.

``data_lines`` reads the ``data:`` fields of one event, as offsets into the event bytes,
so a caller can rewrite a field's value without touching anything around it.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from toolid.markers import Markers

# A line ending (CRLF, a CR not followed by LF, or LF) followed by another: an empty line.
_BLANK_LINE: Final = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE: Final = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|$)")
BOM: Final = b"\xef\xbb\xbf"  # a byte order mark may open a stream
_LONGEST_BOUNDARY: Final = 4  # b"\r\n\r\n"


class EventFramer:
    """Split a byte stream into SSE events, holding back only the incomplete tail."""

    def __init__(self) -> None:
        self._buffer = bytearray()  # the start of an event: no blank line ends in it
        self._searched = 0  # while framing: no boundary starts before this offset
        self._seen_cr = False  # until a CR shows up, a blank line can only be b"\n\n"
        self._ended_on_cr = False  # the last event ended with a CR and nothing is held

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return every event it completes, in order."""
        return [event for event, _ in self.feed_marked(data, None)]

    def feed_marked(self, data: bytes, markers: Markers | None) -> list[tuple[bytes, bool]]:
        """Like ``feed``, for a caller that only needs the events in which ``markers`` finds
        something: a run of whole events in which it finds nothing comes back joined, as
        ``(run, True)``; every other event alone, as ``(event, False)``.

        Runs are cut only from new bytes whose line endings are all LF or all CRLF (there a
        blank line is one fixed string); anywhere else, and with no ``markers``, every event
        comes alone. The events are exactly those ``feed`` would return.
        """
        pieces: list[tuple[bytes, bool]] = []
        if self._ended_on_cr and data.startswith(b"\n"):
            # The LF completing the CRLF that ended the last event: its own piece, so it
            # never counts as the start of the next event.
            pieces.append((b"\n", False))
            data = data[1:]
        self._ended_on_cr = False
        self._seen_cr = self._seen_cr or data.find(b"\r") >= 0
        start = 0
        if self._buffer:
            # Complete the held event first: a blank line may straddle its end.
            self._searched = max(0, len(self._buffer) - _LONGEST_BOUNDARY + 1)
            self._buffer += data
            end = self._boundary_end(self._buffer)
            if end < 0:
                return pieces
            pieces.append((bytes(self._buffer[:end]), False))
            # The held bytes had no boundary, so the event ends inside ``data``.
            start = end - (len(self._buffer) - len(data))
            self._buffer.clear()
        if markers is not None:
            start = _runs(data, start, markers, pieces)
        self._searched = start
        while (end := self._boundary_end(data)) >= 0:
            pieces.append((data[start:end], False))
            start = self._searched = end
        self._buffer += data[start:]
        self._ended_on_cr = bool(pieces) and not self._buffer and pieces[-1][0].endswith(b"\r")
        return pieces

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

    @property
    def lf_only(self) -> bool:
        """Whether every line ending so far is an LF (then a blank line is b"\\n\\n")."""
        return not self._seen_cr

    def join_lf(self, data: bytes) -> bytes | None:
        """For a caller that frames the bytes itself while every line ending so far is an LF
        (``lf_only``): the held bytes and ``data``, from the held event's first byte, when
        ``data`` may complete it or holds a CR (or nothing is held; the caller looks for a CR
        in them); None when it completes nothing (then ``data`` is held too). Only ``data`` is
        searched for the blank line that ends the held event."""
        if not self._buffer:
            return data
        if (
            (self._buffer.endswith(b"\n") and data.startswith(b"\n"))
            or data.find(b"\n\n") >= 0
            or data.find(b"\r") >= 0  # searched only where nothing ends: mostly a short piece
        ):
            joined = bytes(self._buffer) + data  # data copied once (a held start is mostly short)
            self._buffer.clear()
            return joined
        self._buffer += data
        return None

    def hold(self, data: bytes) -> None:
        """Hold ``data``, the start of an event in which no blank line ends (for a caller that
        framed what came before it itself)."""
        self._buffer += data

    def take_tail(self) -> bytes:
        """Remove and return the held bytes (an incomplete event)."""
        tail = bytes(self._buffer)
        self._buffer.clear()
        self._ended_on_cr = False
        return tail

    def __len__(self) -> int:
        return len(self._buffer)


class Field(NamedTuple):
    """A ``data:`` field's value, as ``event[start:end]``."""

    start: int
    end: int


def data_lines(event: bytes, stream_start: bool = False) -> list[Field]:
    """The value spans of every ``data`` field in ``event``, in order.

    ``stream_start``: the event opens the stream, so a leading byte order mark is skipped.
    """
    at = len(BOM) if stream_start and event.startswith(BOM) else 0
    if (
        at == 0
        and event.startswith(b"data: ")
        and event.find(b"\n") == len(event) - 2
        and event.endswith(b"\n\n")
        and event.find(b"\r") < 0
    ):  # one "data: ..." line and the blank line: what servers send for almost every event
        return [Field(6, len(event) - 2)]
    if event.find(b"\r") >= 0:
        lines = [match.span(1) for match in _LINE.finditer(event, at)]
    else:  # LF only, as almost every server sends: plain byte searches
        lines = []
        while (end := event.find(b"\n", at)) >= 0:
            lines.append((at, end))
            at = end + 1
        lines.append((at, len(event)))
    fields: list[Field] = []
    for line_start, line_end in lines:
        if event.startswith(b"data", line_start, line_end):
            name_end = line_start + 4
            if line_end == name_end:  # "data" alone: an empty value
                fields.append(Field(line_end, line_end))
            elif event[name_end] == 0x3A:  # ":"
                start = name_end + 1
                if start < line_end and event[start] == 0x20:
                    start += 1
                fields.append(Field(start, line_end))
    return fields


def _runs(data: bytes, start: int, markers: Markers, pieces: list[tuple[bytes, bool]]) -> int:
    """Cut ``data`` from ``start`` (an event's first byte) into runs of whole events without
    a marker and the events with one, appended to ``pieces``; return where the rest, not
    cut, begins. Only where every line ending is LF, or every one is CRLF (else cut nothing).
    """
    stop = len(data)
    if data.find(b"\r", start) < 0:
        sep = b"\n\n"
    else:
        if data.endswith(b"\r"):
            stop -= 1  # may become a CRLF, or end an event alone: left to ``feed``
        crlf = data.count(b"\r\n", start, stop)
        if not crlf == data.count(b"\r", start, stop) == data.count(b"\n", start, stop):
            return start
        sep = b"\r\n\r\n"
    end, events = marked_events(data, start, stop, markers, sep)
    for event_start, event_end in events:
        if event_start > start:
            pieces.append((data[start:event_start], True))
        pieces.append((data[event_start:event_end], False))
        start = event_end
    if end > start:
        pieces.append((data[start:end], True))
    return end


def marked_events(
    data: bytes, start: int, stop: int, markers: Markers, sep: bytes = b"\n\n"
) -> tuple[int, list[tuple[int, int]]]:
    """The events of ``data[start:stop]`` (``start``: an event's first byte) in which
    ``markers`` find something, as (start, end) offsets, and where the whole events end (the
    rest begins an incomplete one), for a stream whose line endings are all ``sep``'s half.

    Events end where ``feed`` ends them: at the first ``sep`` (a blank line) from their start.
    A run of k line endings, wherever it begins, ends floor(k/2) events (the first two end the
    event they follow, or an empty one), and an odd one left over begins the next event: so
    the last event end at or before a marker is found searching backwards from it, and no
    byte before it needs framing.
    """
    eol = sep[: len(sep) // 2]
    find = markers.finder(data, stop)
    events: list[tuple[int, int]] = []
    while True:
        hit = find(start)
        limit = stop if hit < 0 else hit
        blank = data.rfind(sep, start, limit)
        if blank >= 0:
            first = blank  # the first line ending of the run that ends with this blank line
            while first - len(eol) >= start and data.startswith(eol, first - len(eol)):
                first -= len(eol)
            start = first + (blank + len(sep) - first) // len(sep) * len(sep)
        if hit < 0:
            return start, events
        blank = data.find(sep, start, stop)
        if blank < 0:
            return start, events  # the event with the marker is incomplete
        events.append((start, blank + len(sep)))
        start = blank + len(sep)
