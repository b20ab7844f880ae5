"""Rewrite the ids of a Server-Sent-Events body fed in arbitrary pieces, sans I/O.

``StreamRewriter`` = decompressor (if the server compressed anyway) + ``EventFramer`` +
``body.plan`` applied to each event's data. Each event is forwarded as soon as its blank
line arrives; only an incomplete event is held, and never more than ``max_event_bytes`` of
it. An event with nothing to change passes byte for byte. The cost follows the events that
may hold ids: each piece is searched for the id markers first, and only the events around
the hits are framed (``EventFramer.feed_marked``).

It never raises from ``feed`` or ``finish``: an event that cannot be rewritten is
forwarded unchanged and reported in ``problems``; anything unexpected switches the
rest of the stream to pass-through.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from itertools import accumulate
from operator import itemgetter
from typing import ClassVar, Final, Protocol

from toolid import body, decompress, locate
from toolid.body import Change, Direction, Edit, Policy, RewriteError
from toolid.decide import References, decide
from toolid.edit import shifted
from toolid.occurrence import CallIds
from toolid.positions import Api, Doc, Found
from toolid.sse import BOM, EventFramer, Field, data_lines

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
_BOUNDARY_CONTEXT = 3  # bytes kept back while skipping an oversized event

logger = logging.getLogger(__name__)


class Holder(Protocol):
    """A framer, as far as its rewriter's base reads it: what it holds of an incomplete event
    or frame."""

    def __len__(self) -> int: ...

    def take_tail(self) -> bytes:
        """Remove and return the held bytes."""
        ...


class PieceRewriter:
    """What every rewriter of a streamed body shares, whatever its framing: the decompressor in
    front of it (when a server compresses anyway), the changes and problems it reports, what
    its framer holds (``held``), rewriting the pieces a framer gives one by one (``_each``) and
    pass-through once anything unexpected happens. A framing sets up its framer
    (``_framer``) and its own state (``_start``), says how to frame and rewrite decompressed
    bytes (``_frame``) and what a body that ends inside an event or frame is
    (``_ended_inside``)."""

    _framer: Holder
    _ended_inside: ClassVar[str] = ""  # the problem a body ending inside one is ("": none)

    def __init__(
        self,
        api: Api | None,
        policy: Policy,
        *,
        content_encoding: str = "",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        calls: CallIds | None = None,
    ) -> None:
        """``api``: the request's API (None: recognised by the events' shape). ``calls``: the
        client ids of this response's tool calls, given once per call across all its events
        (with the ids its request takes; see ``toolid.occurrence``). An event or frame larger
        than ``max_event_bytes`` passes unchanged.

        Raises ValueError for a content-encoding it cannot decode."""
        self.api = api  # the API the stream is read as (None until recognised)
        self.policy = policy
        self.calls = calls or CallIds(policy.profile)
        self.max_event_bytes = max_event_bytes
        self.changes: list[Change] = []
        self.problems: list[str] = []
        self._decoder = decompress.for_encoding(content_encoding)
        self._passthrough = False  # after something unexpected: forward everything as is
        self._start()

    def _start(self) -> None:
        """Set up the framer and the framing's own state."""
        raise NotImplementedError

    @property
    def held(self) -> int:
        """How many bytes are held back now (the start of an incomplete event or frame)."""
        return len(self._framer)

    @property
    def decodes(self) -> bool:
        """Whether the output is decompressed (the caller must drop Content-Encoding)."""
        return self._decoder is not None

    def feed(self, data: bytes) -> bytes:
        """Take the next piece of the body; return the bytes that can be forwarded now."""
        if self._passthrough:
            return data
        try:
            if self._decoder is not None:
                data = self._decoder.decompress(data)
        except Exception as exc:
            held = self._give_up(f"cannot decompress the stream ({exc}); rest passed as is")
            return held + data
        return self._frame(data)

    def finish(self) -> bytes:
        """The body has ended: return everything still held (an incomplete event as is)."""
        if self._passthrough:
            return b""
        out = b""
        if self._decoder is not None:
            try:
                out = self._frame(self._decoder.flush())
            except Exception as exc:
                self.problems.append(f"compressed stream is corrupt at its end ({exc})")
        return out if self._passthrough else out + self._tail()

    def _frame(self, data: bytes) -> bytes:
        """Frame and rewrite the next decompressed bytes; return what goes out now."""
        raise NotImplementedError

    def _take_held(self) -> bytes:
        """Remove and return the held bytes."""
        return self._framer.take_tail()

    def _tail(self) -> bytes:
        """What is held when the body ends (forwarded as it is, reported if it is a problem)."""
        tail = self._take_held()
        if tail and self._ended_inside:
            self.problems.append(self._ended_inside)
        return tail

    def _each[P](
        self, pieces: Sequence[P], rewrite: Callable[[P], bytes], as_came: Callable[[P], bytes]
    ) -> list[bytes]:
        """Each of a framer's ``pieces`` rewritten, in order. On anything unexpected the rest of
        the stream passes as it comes: that piece and those after it ``as_came``, then what the
        framer holds."""
        out: list[bytes] = []
        for index, piece in enumerate(pieces):
            try:
                out.append(rewrite(piece))
            except Exception as exc:
                logger.debug("toolid stream rewriter failed", exc_info=True)
                out.extend(as_came(rest) for rest in pieces[index:])
                out.append(self._give_up(f"unexpected error ({exc!r})"))
                break
        return out

    def _rewrite(self, document: bytes, api: Api | None) -> tuple[bytes, Api | None]:
        """``document``, one event's JSON, with its ids rewritten (the very object when
        nothing changes; a problem says why when it cannot be), and the API it was read as
        (``api``, or the one its shape tells when ``api`` is None)."""
        try:
            plan = body.plan(document, api, Doc.EVENT, self.policy, self.calls)
        except RewriteError as exc:
            self.problems.append(f"event left unchanged: {exc}")
            return document, api
        self.changes.extend(plan.changes)
        read_as = plan.api or api
        if not plan.edits:
            return document, read_as
        return body.apply(document, plan.edits), read_as

    def _give_up(self, problem: str) -> bytes:
        """Switch to pass-through; return the held bytes, which come before any later input."""
        self.problems.append(problem)
        self._passthrough = True
        return self._take_held()


class StreamRewriter(PieceRewriter):
    """Rewrite the tool-call ids of one SSE response body."""

    _framer: EventFramer

    def _start(self) -> None:
        self._read_as(self.api)
        self._encodes = self.policy.direction is Direction.ENCODE  # ids made safe, not restored
        self._framer = EventFramer()
        self._references = References()  # what the located references were given
        self._at_start = True
        self._skipping = False  # inside an oversized event: forward as it comes

    def _read_as(self, api: Api | None) -> None:
        """Read the events as ``api``'s (None: not known yet): its id markers, and whether the
        data of an event with a marker may hold an id to change (``body.may_change``)."""
        self.api = api
        self._markers = body.id_markers(api, Doc.EVENT)
        self._may_change = (
            None if api is None else body.marked_event_filter(api, self.policy, self.calls)
        )

    def _frame(self, data: bytes) -> bytes:
        held = len(self._framer)
        if (
            not held
            and not self._skipping
            and self.api is not None
            and len(data) <= self.max_event_bytes  # else an event in it may be oversized
            and EventFramer.ends_an_event(data)
            and not body.may_hold_ids(data, self._markers)
        ):
            # Whole events, none of which can hold an id: the common case, at byte-search cost.
            self._at_start = False
            return data
        if self._located_in_pieces(data, held):
            return self._frame_located(data)
        return self._frame_marked(data)

    def _frame_marked(self, data: bytes) -> bytes:
        """``_frame`` for any data: framed by ``EventFramer.feed_marked``, each event with a
        marker rewritten on its own."""
        # Encoding, an event in which the markers find nothing has nothing to change
        # (``body.may_change``): only the events around the hits are framed and looked at.
        # (Decoding, ``may_change`` looks for client ids, not markers: every event is.)
        markers = self._markers if self.policy.direction is Direction.ENCODE else None
        try:
            pieces = self._framer.feed_marked(data, None if self._skipping else markers)
        except Exception as exc:  # pragma: no cover - defensive: the framer is total
            return self._give_up(f"framing failed ({exc!r})")
        out = self._each(pieces, self._marked_piece, itemgetter(0))
        if self._passthrough:
            return b"".join(out)
        if self._skipping or len(self._framer) > self.max_event_bytes:
            out.append(self._skip_oversized())
        return b"".join(out)

    def _marked_piece(self, piece: tuple[bytes, bool]) -> bytes:
        """A piece of ``feed_marked``: a run of events without a marker, or one event."""
        data, unmarked = piece
        return self._unmarked(data) if unmarked else self._event(data)

    def _located_in_pieces(self, data: bytes, held: int) -> bool:
        """Whether ``locate.events`` may frame ``data`` and locate its ids: encoding a known
        API, every line ending an LF so far (``locate.events`` finds a CR in ``data``), no
        event it completes or holds (with the ``held`` bytes before it) larger than
        ``max_event_bytes``, and (at the stream's start) no byte order mark."""
        return (
            self._encodes
            and self._markers is not None
            and not self._skipping
            and held + len(data) <= self.max_event_bytes
            and self._framer.lf_only
            and not (self._at_start and (held or BOM.startswith(data[: len(BOM)])))
        )

    def _frame_located(self, data: bytes) -> bytes:
        """``_frame`` for LF-only data, with the events located a piece at a time: once
        ``data`` completes the held event, ``locate.events`` frames it and what follows and
        gives the ids of each event with a marker (when it is one "data: " line; any other
        goes to ``_event``), and the start of an incomplete event is held. The ids of the
        events between two others are decided together and spliced in at once. The same
        bytes and changes as ``_frame``; data holding a CR goes (with what was held) to
        ``_frame_marked``."""
        at_start, self._at_start = self._at_start, False  # no byte order mark opens it
        framer = self._framer
        joined = framer.join_lf(data)
        if joined is None:
            return self._skip_oversized() if len(framer) > self.max_event_bytes else b""
        recorded = len(self.changes)
        try:
            # _located_in_pieces: the API is known
            assert self._markers is not None and self.api is not None and self._may_change
            located = locate.events(
                joined, self._markers, self.max_event_bytes, self.api, self._may_change
            )
            if located is not None:
                end, ids, unread = located
                # Most pieces have no marker: nothing to rewrite.
                out = self._rewrite_events(joined, ids, unread) if ids or unread else joined
        except Exception as exc:
            logger.debug("toolid stream rewriter failed", exc_info=True)
            del self.changes[recorded:]  # none of them reaches the client
            return joined + self._give_up(f"unexpected error ({exc!r})")
        if located is None:  # a CR: line endings may not all be LF
            self._at_start = at_start
            return self._frame_marked(joined)
        if end == len(joined):
            return out
        # The start of an incomplete event (no edit is in it): held.
        framer.hold(joined[end:])
        out = out[: end - len(joined)]
        if len(framer) > self.max_event_bytes:
            return out + self._skip_oversized()
        return out

    def _rewrite_events(
        self, joined: bytes, ids: list[Found], unread: list[tuple[int, int, int]]
    ) -> bytes:
        """``joined`` with the located ``ids`` and the ``unread`` events (read whole, after
        the ids before each) rewritten (``_frame_located``)."""
        edits: list[Edit] = []
        decided = 0  # the ids decided so far
        for start, stop, before in unread:  # an event to read whole, after the ids before it
            self._decide(ids[decided:before], edits)
            decided = before
            event = joined[start:stop]
            rewritten = self._event(event)
            if rewritten is not event:
                edits.append((start, stop, rewritten))
        self._decide(ids[decided:] if decided else ids, edits)
        return body.apply(joined, edits) if edits else joined

    def _decide(self, batch: list[Found], edits: list[Edit]) -> None:
        """The client ids of the located ids of several events (each event's in call order),
        their changes recorded and their edits added to ``edits``."""
        if not batch:
            return
        assert self.api is not None
        changes, targets = decide(
            batch,
            self.api,
            self.policy,
            self.calls,
            in_call_order=True,
            references=self._references,
        )
        self.changes.extend(changes)
        located = targets.edits
        if len(located) > 1:
            located.sort()
        edits.extend(located)

    def _unmarked(self, run: bytes) -> bytes:
        """Whole events without a marker: forwarded as they are; only their size can matter."""
        self._at_start = False
        if len(run) > self.max_event_bytes:
            for event in EventFramer().feed(run):  # a run starts and ends with an event
                if len(event) > self.max_event_bytes:
                    self._report_oversized()
        return run

    def _event(self, event: bytes) -> bytes:
        at_start, self._at_start = self._at_start, False
        if self._skipping:  # the end of an oversized event
            self._skipping = False
            return event
        if len(event) > self.max_event_bytes:
            self._report_oversized()
            return event
        if (
            self._encodes
            and not body.may_hold_ids(event, self._markers)
            and event.count(b"data") < 2
        ):  # no marker, no id position (unless split over data lines): as ``plan`` would find
            return event
        if not at_start and event.startswith(_DATA) and _one_lf_line(event):
            fields = [_ONE_LINE]  # the common case: one "data: " line, LF line endings
            document = event[len(_DATA) : -2]
        else:
            fields = data_lines(event, stream_start=at_start)
            if not fields:
                return event
            if len(fields) == 1:
                document = event[fields[0].start : fields[0].end]
            else:
                document = b"\n".join(event[field.start : field.end] for field in fields)
        try:
            plan = body.plan(document, self.api, Doc.EVENT, self.policy, self.calls)
        except RewriteError as exc:
            self.problems.append(f"event left unchanged: {exc}")
            return event
        if self.api is None and plan.api is not None:
            self._read_as(plan.api)
        if not plan.changes:
            return event
        self.changes.extend(plan.changes)
        if not plan.edits:
            return event
        if len(fields) == 1:  # no line to find for each edit
            return body.apply(event, shifted(plan.edits, fields[0].start))
        # Map offsets in the joined data back to the event: literals never span a line.
        doc_starts = [0, *accumulate(field.end - field.start + 1 for field in fields)]
        edits = []
        for start, end, text in plan.edits:
            line = bisect.bisect_right(doc_starts, start) - 1
            shift = fields[line].start - doc_starts[line]
            edits.append((start + shift, end + shift, text))
        return body.apply(event, edits)

    def _skip_oversized(self) -> bytes:
        if not self._skipping:
            self._skipping = True
            self._report_oversized()
        held = self._framer.take_tail()
        keep = held[-_BOUNDARY_CONTEXT:]  # a blank line may begin in them: frame them again
        # They held no blank line before, so they complete no event now; should they ever,
        # those bytes still go out, in order.
        return held[: len(held) - len(keep)] + b"".join(self._framer.feed(keep))

    def _report_oversized(self) -> None:
        self.problems.append(
            f"an event larger than {self.max_event_bytes} bytes was forwarded unchanged"
        )


_DATA: Final = b"data: "
_ONE_LINE: Final = Field(len(_DATA), -2)  # where the data of b"data: ...\n\n" is


def _one_lf_line(event: bytes) -> bool:
    """Whether ``event`` is one line and its blank line, with LF line endings only."""
    return event.find(b"\n") == len(event) - 2 and event.find(b"\r") < 0
