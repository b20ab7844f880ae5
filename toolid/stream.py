"""Rewrite the ids of a Server-Sent-Events body fed in arbitrary pieces, sans I/O.

``StreamRewriter`` = decompressor (if the server compressed anyway) + ``EventReader`` +
the same plan per event: each piece is read (``sse_events.EventReader``: the events to look
at, and the ids located in them), the located ids decided and every other event with
something to look at planned whole (``body.plan`` of its data), and the edits spliced in.
Each event is forwarded as soon as its blank line arrives; only an incomplete event is held,
and never more than ``max_event_bytes`` of it. An event with nothing to change passes byte
for byte. The cost follows the events that may hold ids: each piece is searched for the id
markers first, and only the events around the hits are framed.

It never raises from ``feed`` or ``finish``: an event that cannot be rewritten is
forwarded unchanged and reported in ``problems``; anything unexpected switches the
rest of the stream to pass-through.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import ClassVar, Final, Protocol

from toolid import body, decompress
from toolid.body import Change, Direction, Edit, Policy, RewriteError
from toolid.decide import References, decide
from toolid.edit import shifted
from toolid.occurrence import CallIds
from toolid.positions import Api, Doc, Found
from toolid.problem import (
    COMPRESSED_CORRUPT,
    EVENT_TOO_LARGE,
    STREAM_ENDED_INSIDE,
    UNEXPECTED_ERROR,
    UNREWRITABLE,
    Problem,
)
from toolid.sse import Field, data_lines
from toolid.sse_events import EventReader, Read

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
    _ended_inside: ClassVar[str] = ""  # what a body ending inside one is reported as ("": none)

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
        self.problems: list[Problem] = []
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
            held = self._give_up(
                COMPRESSED_CORRUPT, f"cannot decompress the stream ({exc}); rest passed as is"
            )
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
                self._report(COMPRESSED_CORRUPT, f"compressed stream is corrupt at its end ({exc})")
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
            self._report(STREAM_ENDED_INSIDE, self._ended_inside)
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
                out.append(self._give_up(UNEXPECTED_ERROR, f"unexpected error ({exc!r})"))
                break
        return out

    def _rewrite(self, document: bytes, api: Api | None) -> tuple[bytes, Api | None]:
        """``document``, one event's JSON, with its ids rewritten (the very object when
        nothing changes; a problem says why when it cannot be), and the API it was read as
        (``api``, or the one its shape tells when ``api`` is None)."""
        try:
            plan = body.plan(document, api, Doc.EVENT, self.policy, self.calls)
        except RewriteError as exc:
            self._report(UNREWRITABLE, f"event left unchanged: {exc}")
            return document, api
        self.changes.extend(plan.changes)
        read_as = plan.api or api
        if not plan.edits:
            return document, read_as
        return body.apply(document, plan.edits), read_as

    def _report(self, code: str, message: str) -> None:
        """Report the problem ``code``, saying ``message``."""
        self.problems.append(Problem(code, message))

    def _give_up(self, code: str, message: str) -> bytes:
        """Switch to pass-through, reporting why (the problem ``code``, saying ``message``);
        return the held bytes, which come before any later input."""
        self._report(code, message)
        self._passthrough = True
        return self._take_held()


class StreamRewriter(PieceRewriter):
    """Rewrite the tool-call ids of one SSE response body."""

    _framer: EventReader

    def _start(self) -> None:
        encodes = self.policy.direction is Direction.ENCODE
        self._framer = EventReader(self.max_event_bytes, encodes=encodes)
        self._read_as(self.api)
        self._references = References()  # what the located references were given
        self._skipping = False  # inside an oversized event: forward as it comes

    def _read_as(self, api: Api | None) -> None:
        """Read the events as ``api``'s (None: not known yet): its id markers, and whether the
        data of an event with a marker may hold an id to change (``body.may_change``)."""
        self.api = api
        self._markers = body.id_markers(api, Doc.EVENT)
        wanted = None if api is None else body.marked_event_filter(api, self.policy, self.calls)
        self._framer.read_as(api, self._markers, wanted)

    def _frame(self, data: bytes) -> bytes:
        """Frame ``data``; each event with something to look at planned (its located ids
        decided, or its data planned whole), and the edits spliced in."""
        recorded = len(self.changes)
        read = None
        try:
            read = self._framer.read(data, skipping=self._skipping)
            out = self._rewrite_events(read)
        except Exception as exc:
            logger.debug("toolid stream rewriter failed", exc_info=True)
            del self.changes[recorded:]  # none of them reaches the client
            came = data if read is None else read.data[: read.end]
            return came + self._give_up(UNEXPECTED_ERROR, f"unexpected error ({exc!r})")
        if self._skipping or len(self._framer) > self.max_event_bytes:
            out += self._skip_oversized()
        return out

    def _rewrite_events(self, read: Read) -> bytes:
        """The whole events of ``read``, with the located ids decided (those of the events
        between two read whole in one batch, each event's in call order) and each event to read
        whole planned (``_event``), the edits spliced in at once."""
        joined, end, ids, unread, opens = read
        edits: list[Edit] = []
        if unread:
            decided = 0  # the ids decided so far
            for start, stop, before in unread:  # an event to read whole, after the ids before it
                self._decide(ids[decided:before], edits)
                decided = before
                self._event(joined, start, stop, opens and start == 0, edits)
            ids = ids[decided:] if decided else ids
        self._decide(ids, edits)
        out = body.apply(joined, edits) if edits else joined
        return out if end == len(joined) else out[: end - len(joined)]

    def _decide(self, batch: list[Found], edits: list[Edit]) -> None:
        """The client ids of the located ids of several events (each event's in call order),
        their changes recorded and their edits added to ``edits``."""
        if not batch:
            return
        assert self.api is not None  # ids are located only in a known API's events
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

    def _event(self, data: bytes, start: int, stop: int, at_start: bool, edits: list[Edit]) -> None:
        """Plan the event ``data[start:stop]`` whole: its data (its ``data:`` lines, joined)
        planned as one document, the edits added to ``edits``. ``at_start``: it opens the
        stream (a byte order mark may come first)."""
        if self._skipping:  # the end of an oversized event
            self._skipping = False
            return
        if stop - start > self.max_event_bytes:
            self._report_oversized()
            return
        event = data[start:stop]
        if (
            self._framer.encodes
            and not body.may_hold_ids(event, self._markers)
            and event.count(b"data") < 2
        ):  # no marker, no id position (unless split over data lines): as ``plan`` would find
            return
        if not at_start and event.startswith(_DATA) and _one_lf_line(event):
            fields = [_ONE_LINE]  # the common case: one "data: " line, LF line endings
            document = event[len(_DATA) : -2]
        else:
            fields = data_lines(event, stream_start=at_start)
            if not fields:
                return
            if len(fields) == 1:
                document = event[fields[0].start : fields[0].end]
            else:
                document = b"\n".join(event[field.start : field.end] for field in fields)
        try:
            plan = body.plan(document, self.api, Doc.EVENT, self.policy, self.calls)
        except RewriteError as exc:
            self._report(UNREWRITABLE, f"event left unchanged: {exc}")
            return
        if self.api is None and plan.api is not None:
            self._read_as(plan.api)
        self.changes.extend(plan.changes)
        if len(fields) == 1:  # no line to find for each edit
            edits.extend(shifted(plan.edits, start + fields[0].start))
            return
        # Map offsets in the joined data back to the event: literals never span a line.
        doc_starts = [0, *accumulate(field.end - field.start + 1 for field in fields)]
        for edit_start, edit_end, text in plan.edits:
            line = bisect.bisect_right(doc_starts, edit_start) - 1
            shift = start + fields[line].start - doc_starts[line]
            edits.append((edit_start + shift, edit_end + shift, text))

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
        self._report(
            EVENT_TOO_LARGE,
            f"an event larger than {self.max_event_bytes} bytes was forwarded unchanged",
        )


_DATA: Final = b"data: "
_ONE_LINE: Final = Field(len(_DATA), -2)  # where the data of b"data: ...\n\n" is


def _one_lf_line(event: bytes) -> bool:
    """Whether ``event`` is one line and its blank line, with LF line endings only."""
    return event.find(b"\n") == len(event) - 2 and event.find(b"\r") < 0
