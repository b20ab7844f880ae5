"""Rewrite the ids of a Server-Sent-Events body fed in arbitrary pieces, sans I/O.

``StreamRewriter`` = decompressor (if the server compressed anyway) + ``EventFramer`` +
the surgical rewriter of ``body`` applied to each event's data. Each event is forwarded
as soon as its blank line arrives; only an incomplete event is held, and never more than
``max_event_bytes`` of it. An event with nothing to change passes byte for byte. The cost
follows the events that may hold ids: each piece is searched for the id markers first, and
only the events around the hits are framed (``EventFramer.feed_marked``). With the native
accelerator, while every line ending is an LF (as servers send), the search, the framing and
the encoding of one-line events are native (``sse_feed``); any other event still goes
through ``_event``, so what comes out is the same.

It never raises from ``feed`` or ``finish``: an event that cannot be rewritten is
forwarded unchanged and reported in ``problems``; anything unexpected switches the
rest of the stream to pass-through.

``stream_function`` wraps a rewriter as the function an HTTP proxy calls with each piece
(mitmproxy's ``response.stream``); with the accelerator, the pieces on the native lane reach
``sse_feed`` with no Python frame in between.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from toolid import body, decompress, native
from toolid.body import Change, Direction, Edit, Policy, RewriteError
from toolid.occurrence import CallIds
from toolid.positions import Api, Doc, has_references
from toolid.sse import BOM, EventFramer, data_lines

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
_BOUNDARY_CONTEXT = 3  # bytes kept back while skipping an oversized event

logger = logging.getLogger(__name__)


class StreamRewriter:
    """Rewrite the tool-call ids of one SSE response body."""

    def __init__(
        self,
        api: Api | None,
        policy: Policy,
        *,
        content_encoding: str = "",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        calls: CallIds | None = None,
    ) -> None:
        """``calls``: the client ids of this response's tool calls, given once per call
        across all its events (with the ids its request takes; see ``toolid.occurrence``).

        Raises ValueError for a content-encoding it cannot decode."""
        self.api = api
        self._markers = body.id_markers(api, Doc.EVENT)
        self.policy = policy
        self._encodes = policy.direction is Direction.ENCODE  # ids made safe, not restored
        self.calls = calls or CallIds(policy.profile, references=has_references(api, Doc.EVENT))
        self.max_event_bytes = max_event_bytes
        self.changes: list[Change] = []
        self.problems: list[str] = []
        self._decoder = decompress.for_encoding(content_encoding)
        self._framer = EventFramer()
        self._at_start = True
        self._skipping = False  # inside an oversized event: forward as it comes
        self._passthrough = False  # after something unexpected: forward everything as is
        self._native_encoder = self._encoder_for(api)
        # While the next piece may go straight to the native framing: sse_feed and what it
        # takes after the piece but the fallback (see _lane_open).
        self._lane: tuple[Callable[..., bytes | None], tuple[Any, ...]] | None = None

    def _encoder_for(self, api: Api | None) -> tuple[Any, ...] | None:
        """What ``sse_feed`` takes to encode this stream's events (None: the API is not
        known, or the ids are restored, not encoded)."""
        if api is None or not self._encodes:
            return None
        return body.native_encoder(api, Doc.EVENT, self.calls)

    @property
    def decodes(self) -> bool:
        """Whether the output is decompressed (the caller must drop Content-Encoding)."""
        return self._decoder is not None

    def feed(self, data: bytes) -> bytes:
        """Take the next piece of the body; return the bytes that can be forwarded now."""
        lane = self._lane
        if lane is not None:  # the common case, in one native call
            try:
                feed, arguments = lane
                out: bytes | None = feed(data, *arguments, self._event)
            except Exception as exc:
                return self.lane_failed(exc)
            if out is not None:
                return out
        out = self._feed(data)
        self._lane = self._lane_open()
        return out

    def lane(self) -> tuple[Any, ...] | None:
        """While the next piece may go straight to ``sse_feed`` (see ``_lane_open``), what it
        takes after the piece, its fallback included; else None. For a native caller that
        hands it pieces itself (``stream_function``): each piece ``sse_feed`` gives None for
        goes to ``feed``, and when it raises, ``lane_failed`` gives what goes out."""
        if self._lane is None:
            return None
        return (*self._lane[1], self._event)

    def lane_failed(self, exc: Exception) -> bytes:
        """``sse_feed`` raised: all of the piece is held, no change recorded. Pass everything
        through from now on; return what it holds, to go out as it came."""
        logger.debug("toolid stream rewriter failed", exc_info=exc)
        return self._give_up(f"unexpected error ({exc!r})")

    def _lane_open(self) -> tuple[Callable[..., bytes | None], tuple[Any, ...]] | None:
        """``sse_feed`` and what it takes after the piece (but ``_event``), when ``feed`` may
        give the next piece to the native framing at once (``_natively``'s checks hold from
        now on): encoding natively, nothing to decompress, past the stream's start, no CR so
        far, not inside an oversized event, not passing through. Else None."""
        if (
            not self._native_ready()
            or self._decoder is not None
            or self._at_start
            or self._passthrough
        ):
            return None
        assert native.extension is not None
        return native.extension.sse_feed, self._native_arguments()

    def _native_arguments(self) -> tuple[Any, ...]:
        """What ``sse_feed`` takes after the piece, but its fallback (``_event``: held here,
        it would make the rewriter a reference cycle)."""
        assert self._native_encoder is not None and self._markers is not None
        return (
            self._framer.held,
            self.max_event_bytes,
            self._markers.words,
            self.changes,
            *self._native_encoder,
        )

    def _feed(self, data: bytes) -> bytes:
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
        return out + self._framer.take_tail()

    def _frame(self, data: bytes) -> bytes:
        if (
            not len(self._framer)
            and not self._skipping
            and self.api is not None
            and len(data) <= self.max_event_bytes  # else an event in it may be oversized
            and EventFramer.ends_an_event(data)
            and not body.may_hold_ids(data, self._markers)
        ):
            # Whole events, none of which can hold an id: the common case, at byte-search cost.
            self._at_start = False
            return data
        if self._natively(data) and (framed := self._frame_natively(data)) is not None:
            return framed
        # Encoding, an event in which the markers find nothing has nothing to change
        # (``body.may_change``): only the events around the hits are framed and looked at.
        # (Decoding, ``may_change`` looks for client ids, not markers: every event is.)
        markers = self._markers if self.policy.direction is Direction.ENCODE else None
        try:
            pieces = self._framer.feed_marked(data, None if self._skipping else markers)
        except Exception as exc:  # pragma: no cover - defensive: the framer is total
            return self._give_up(f"framing failed ({exc!r})")
        out: list[bytes] = []
        for index, (piece, unmarked) in enumerate(pieces):
            try:
                out.append(self._unmarked(piece) if unmarked else self._event(piece))
            except Exception as exc:
                logger.debug("toolid stream rewriter failed", exc_info=True)
                held = self._give_up(f"unexpected error ({exc!r})")
                return b"".join(out) + b"".join(piece for piece, _ in pieces[index:]) + held
        if self._skipping or len(self._framer) > self.max_event_bytes:
            out.append(self._skip_oversized())
        return b"".join(out)

    def _natively(self, data: bytes) -> bool:
        """Whether the native accelerator may frame and encode ``data``: encoding, the API
        known, no BOM opening the stream (the Python path reads it), not inside an oversized
        event, every line ending so far an LF (``_frame_natively`` checks the piece)."""
        return self._native_ready() and not (
            self._at_start and BOM.startswith((self._framer.head(3) + data)[:3])
        )

    def _native_ready(self) -> bool:
        """Encoding natively, not inside an oversized event, every line ending so far an LF."""
        return (
            self._native_encoder is not None
            and native.extension is not None
            and not self._skipping
            and not self._framer.seen_cr
        )

    def _frame_natively(self, data: bytes) -> bytes | None:
        """``_frame`` in native code (``sse_feed``; the same bytes out, the same changes):
        whole events without a marker go out as they are, each event with one is encoded
        (an event of one ``data:`` line there, any other by ``_event``). None: the piece is
        the Python framing's (a CR in it, an event that may be oversized, or far more held
        than it brings), and nothing was done."""
        assert native.extension is not None
        self._at_start = False  # no BOM opens the stream: no event reads differently at its start
        try:
            out: bytes | None = native.extension.sse_feed(
                data, *self._native_arguments(), self._event
            )
        except Exception as exc:
            return self.lane_failed(exc)
        return out

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
            self.api, self._markers = plan.api, body.id_markers(plan.api, Doc.EVENT)
            self._native_encoder = self._encoder_for(plan.api)
        self.changes.extend(plan.changes)
        if not plan.edits:
            return event
        if len(fields) == 1:  # the common case: no line to find for each edit
            shift = fields[0].start
            return body.apply(
                event, [Edit(e.start + shift, e.end + shift, e.text) for e in plan.edits]
            )
        # Map offsets in the joined data back to the event: literals never span a line.
        doc_starts = [0, *accumulate(field.end - field.start + 1 for field in fields)]
        edits = []
        for edit in plan.edits:
            line = bisect.bisect_right(doc_starts, edit.start) - 1
            shift = fields[line].start - doc_starts[line]
            edits.append(Edit(edit.start + shift, edit.end + shift, edit.text))
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

    def _give_up(self, problem: str) -> bytes:
        """Switch to pass-through; return the held bytes, which come before any later input."""
        self.problems.append(problem)
        self._passthrough = True
        self._lane = None
        return self._framer.take_tail()


def stream_function(
    rewriter: StreamRewriter,
    report: Callable[[StreamRewriter, bool], object],
    on_error: Callable[[Exception], object],
    *,
    drain_every: int,
    forward_input: bool = False,
) -> Callable[[bytes], bytes | tuple[()]]:
    """The function an HTTP proxy calls with each piece of a streamed body, and with b"" at its
    end (mitmproxy's ``response.stream``): it gives what goes out now, never b"" before the
    end (an empty piece would end a chunked body: ``()`` holds).

    ``report(rewriter, end)`` is called when the rewriter's changes reach ``drain_every``,
    when it has problems, and at the end (``end`` True): it takes them from the rewriter.
    Should it raise, ``on_error(exc)`` is told, and what the rewriter gave still goes out (no
    byte is lost or sent twice); should the rewriter raise (it never does), the piece goes out
    as it came. ``forward_input``: every piece goes out as it came (the rewriter still
    reports). After the end, pieces go out as they come, and the rewriter is let go (a proxy's
    flow, which holds this function, may outlive the stream by a garbage collection).

    With the native accelerator the common piece goes to ``sse_feed`` with no Python frame
    (``_native.Feeder``); the rest comes here.
    """
    current: StreamRewriter | None = rewriter

    def function(data: bytes) -> bytes | tuple[()]:
        nonlocal current
        rewriter = current
        if rewriter is None:  # called again after the end
            return data
        if not data:
            current = None
        try:
            out = rewriter.feed(data) if data else rewriter.finish()
        except Exception as exc:  # it never raises; should it, the piece as it came
            on_error(exc)
            return data
        try:
            if not data or rewriter.problems or len(rewriter.changes) >= drain_every:
                report(rewriter, not data)
        except Exception as exc:
            on_error(exc)
        if forward_input:
            return data
        return out if (out or not data) else ()

    if native.extension is None:
        return function
    feeder: Callable[[bytes], bytes | tuple[()]] = native.extension.Feeder(
        function, rewriter, report, on_error, drain_every, forward_input
    )
    return feeder
