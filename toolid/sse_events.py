"""The events of an SSE stream that may hold ids, piece by piece, sans I/O.

``EventReader`` frames a stream fed in arbitrary pieces (``sse.EventFramer``) and answers, for
each piece, which events a rewriter must look at and, where it can tell at once, the ids in
them with the spans of their literals (``Read``). Every other byte passes as it is.

- A piece of whole events none of which spells a marker word is its own answer, after one
  byte search: nothing in it to look at.
- While every line ending is an LF (as servers send), the held start of an event and the
  piece that completes it are read together: the events with a marker are framed by byte
  searches alone (``sse.marked_events``) and the ids of each whose data is one ``data:`` line
  located (``locate.plainly``). The native ``event_ids`` answers the same in one call.
- Any other piece (a CR in it, a byte order mark opening the stream, an event too large to
  hold, restoring) is framed by ``EventFramer.feed_marked``; each event with a marker (or,
  with no markers, each event) is to be read whole.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import accumulate
from typing import Final, NamedTuple

from toolid import locate, native, prune
from toolid.decide import call_order
from toolid.markers import Markers
from toolid.positions import DEFINES, REFERS, Api, Doc, Found, positions
from toolid.sse import BOM, EventFramer, marked_events

_EVENT: Final = Doc.EVENT
_DATA: Final = b"data: "


class Read(NamedTuple):
    """What ``EventReader.read`` found in a piece; its spans count from ``data``'s start."""

    data: bytes  # the bytes read: the held start of an event, then the piece
    end: int  # where the whole events end: the rest, the start of an event, is held
    ids: list[Found]  # the located ids: events in order, each event's in call order
    unread: list[tuple[int, int, int]]  # (start, end, ids before it): each event to read whole
    opens: bool  # whether ``data`` begins the stream (a byte order mark may open it)


class EventReader:
    """Frame one SSE stream and say what in each piece may hold ids (see the module
    docstring). ``limit``: the largest event to hold or locate ids in; ``encodes``: whether
    ids are made safe (then only the events with a marker are looked at; restoring, every
    event is read whole)."""

    def __init__(self, limit: int, *, encodes: bool) -> None:
        self.limit = limit
        self.encodes = encodes
        self.api: Api | None = None
        self._markers: Markers | None = None
        self._wanted: Callable[[bytes], bool] | None = None
        self._framer = EventFramer()
        self._at_start = True  # nothing framed yet

    def read_as(
        self, api: Api | None, markers: Markers | None, wanted: Callable[[bytes], bool] | None
    ) -> None:
        """Read the events as ``api``'s (None: not known, then no id is located here):
        ``markers``, the words any event with an id position spells (None: every event is
        read whole); ``wanted``, whether an event's data may hold an id to change once a
        marker is found in it (``body.marked_event_filter``)."""
        self.api, self._markers, self._wanted = api, markers, wanted

    def read(self, data: bytes, *, skipping: bool = False) -> Read:
        """Frame ``data``, the next piece; hold the start of an event it leaves incomplete.
        ``skipping``: inside an event too large to hold, every event is read whole."""
        framer = self._framer
        held = len(framer)
        markers = None if skipping else self._markers
        if (
            not held
            and markers is not None
            and self.api is not None
            and len(data) <= self.limit  # else an event in it may be too large
            and EventFramer.ends_an_event(data)
            and not markers.in_(data)
        ):  # whole events, none of which can hold an id: the common case
            self._at_start = False
            return Read(data, len(data), [], [], False)
        if (
            self.encodes
            and markers is not None
            and self.api is not None
            and self._wanted is not None
            and held + len(data) <= self.limit
            and framer.lf_only
            and not (self._at_start and (held or BOM.startswith(data[: len(BOM)])))
        ):
            at_start, self._at_start = self._at_start, False
            joined = framer.join_lf(data)
            if joined is None:
                return Read(b"", 0, [], [], False)
            located = _located(joined, markers, self.limit, self.api, self._wanted)
            if located is not None:
                end, ids, unread = located
                framer.hold(joined[end:])
                return Read(joined, end, ids, unread, False)
            self._at_start = at_start  # a CR: framed below
            data = joined
        return self._framed(data, markers if self.encodes else None)

    def _framed(self, data: bytes, markers: Markers | None) -> Read:
        """``read`` of any piece: framed by ``EventFramer.feed_marked``."""
        opens = self._at_start
        pieces = self._framer.feed_marked(data, markers)
        if not pieces:
            return Read(b"", 0, [], [], False)
        self._at_start = False
        unread: list[tuple[int, int, int]] = []
        starts = [0, *accumulate(len(piece) for piece, _ in pieces)]
        for (piece, run), start in zip(pieces, starts, strict=False):
            if not run:
                unread.append((start, start + len(piece), 0))
            elif len(piece) > self.limit:  # events too large may be in it: read whole
                at = start
                for event in EventFramer().feed(piece):  # a run starts and ends with an event
                    if len(event) > self.limit:
                        unread.append((at, at + len(event), 0))
                    at += len(event)
        joined = pieces[0][0] if len(pieces) == 1 else b"".join(piece for piece, _ in pieces)
        return Read(joined, len(joined), [], unread, opens)

    def take_tail(self) -> bytes:
        """Remove and return the held bytes (an incomplete event)."""
        return self._framer.take_tail()

    def feed(self, data: bytes) -> list[bytes]:
        """Frame ``data`` and return the events it completes, whole (``EventFramer.feed``)."""
        return self._framer.feed(data)

    def __len__(self) -> int:
        return len(self._framer)


def _located(
    data: bytes, markers: Markers, limit: int, api: Api, wanted: Callable[[bytes], bool]
) -> tuple[int, list[Found], list[tuple[int, int, int]]] | None:
    """Where the whole events of ``data`` (LF line endings so far, from an event's first byte)
    end, the ids of those with a marker, and those to read whole (``Read``); None when
    ``data`` holds a CR (its line endings may not all be LF).

    An event's ids are located when it is at most ``limit`` bytes, its data is one "data: "
    line (``data_line``) and its literals are located for sure; any other event with a marker
    is read whole. Without the accelerator an event whose data ``wanted`` does not want has no
    ids; unless it spells the id of a call defined earlier in ``data``: ``wanted`` answers for
    the calls decided so far, and that call, not decided yet, may get an occurrence tag that
    its references follow, so such an event is read whole.
    """
    if native.extension is not None:
        return _natively(data, markers, limit, api)
    if data.find(b"\r") >= 0:
        return None
    ids: list[Found] = []
    unread: list[tuple[int, int, int]] = []
    end, marked = marked_events(data, 0, len(data), markers)
    refers = _refers(api)
    defined: list[bytes] | None = []  # the definitions' literals so far (None: not known)
    for start, stop in marked:
        at = data_line(data, start, stop) if stop - start <= limit else -1
        found: list[Found] | None = None
        if at >= 0:
            document = data[at : stop - 2]
            if wanted(document):
                found = locate.plainly(document, api, _EVENT, at=at)
            elif not refers or (
                defined is not None and not any(document.find(one) >= 0 for one in defined)
            ):
                found = []
        if found is None:
            unread.append((start, stop, len(ids)))
            defined = None
        else:
            ids.extend(call_order(found))
            if refers and defined is not None:
                for one in found:
                    if one.role is DEFINES:
                        defined.append(b'"' + one.value.encode() + b'"')
    return end, ids, unread


def _natively(
    data: bytes, markers: Markers, limit: int, api: Api
) -> tuple[int, list[Found], list[tuple[int, int, int]]] | None:
    """``_located`` by the native ``event_ids``: the same answer, in one call."""
    assert native.extension is not None
    located = native.extension.event_ids(data, markers.words, limit, prune.TABLES[(api, _EVENT)])
    if located is None:
        return None  # a CR
    end, rows, unread, groups = located
    ids: list[Found] = []
    done = 0  # the rows made Found so far
    for first, count in groups:  # an event of several ids: in call order
        locate.found_of(rows[done:first], api, _EVENT, into=ids)
        ids.extend(call_order(locate.spanned(rows[first : first + count], api, _EVENT)))
        done = first + count
    return end, locate.found_of(rows[done:], api, _EVENT, into=ids), unread


def data_line(data: bytes, start: int, end: int) -> int:
    """Where the data of the event ``data[start:end]`` (LF line endings, its blank line at
    ``end - 2``) starts when it is one "data: " line, the event's last, after lines none of
    which starts with "data" (other fields, such as a Responses stream's "event: ...", and
    comments); else -1. The data is then ``data[at:end - 2]``, as ``sse.data_lines`` reads it
    (the native ``event_ids`` reads the same events)."""
    newline = data.rfind(b"\n", start, end - 2)
    line = start if newline < 0 else newline + 1
    if not data.startswith(_DATA, line):
        return -1
    if line > start and (data.startswith(b"data", start) or data.find(b"\ndata", start, line) >= 0):
        return -1
    return line + len(_DATA)


@functools.cache
def _refers(api: Api) -> bool:
    """Whether the events of ``api`` may refer to a call (then whether an event may change
    depends on what the calls before it got)."""
    return any(position.role is REFERS for position in positions(api, _EVENT))
