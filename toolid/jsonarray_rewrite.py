"""Rewrite the ids of a JSON array streamed element by element, fed in arbitrary pieces, sans I/O.

``JsonArrayRewriter`` = decompressor (if the server compressed anyway) + ``ElementFramer`` +
``body.plan`` applied to each element as one streamed event: Gemini's
``:streamGenerateContent`` without ``?alt=sse``, whose elements are GenerateContentResponse
chunks. The counterpart of ``stream.StreamRewriter`` for this framing.

Each element is forwarded as soon as its closing brace arrives, byte for byte when nothing in
it changes; the bytes between elements go out as they come. One client id per call across all
elements (``CallIds``). It never raises from ``feed`` or ``finish``: an element that cannot be
rewritten passes unchanged and is reported; an element larger than ``max_event_bytes`` passes
as it comes, reported; anything unexpected switches the rest of the stream to pass-through.
"""

from __future__ import annotations

from operator import itemgetter

from toolid import body
from toolid.body import Direction
from toolid.jsonarray import ElementFramer, Piece
from toolid.positions import Doc
from toolid.problem import EVENT_TOO_LARGE
from toolid.stream import PieceRewriter


class JsonArrayRewriter(PieceRewriter):
    """Rewrite the tool-call ids of one JSON-array response body streamed element by element."""

    _framer: ElementFramer
    _ended_inside = "the stream ended inside an array element (passed as is)"

    def _start(self) -> None:
        self._markers = body.id_markers(self.api, Doc.EVENT)
        self._encodes = self.policy.direction is Direction.ENCODE
        self._framer = ElementFramer()

    def _frame(self, data: bytes) -> bytes:
        out = self._each(self._framer.feed(data), self._piece, itemgetter(0))
        if self._passthrough:
            return b"".join(out)
        if len(self._framer) > self.max_event_bytes:
            self._report_oversized()
            out.append(self._framer.release())
        return b"".join(out)

    def _piece(self, piece: Piece) -> bytes:
        """A piece of the framer: an element, or bytes between elements (as they are)."""
        data, element = piece
        return self._element(data) if element else data

    def _element(self, element: bytes) -> bytes:
        """One whole element: rewritten, or as it came."""
        if len(element) > self.max_event_bytes:
            self._report_oversized()
            return element
        if self._encodes and not body.may_hold_ids(element, self._markers):
            return element
        new, read_as = self._rewrite(element, self.api)
        if self.api is None and read_as is not None:
            self.api, self._markers = read_as, body.id_markers(read_as, Doc.EVENT)
        return new

    def _report_oversized(self) -> None:
        self._report(
            EVENT_TOO_LARGE,
            f"an array element larger than {self.max_event_bytes} bytes was forwarded unchanged",
        )
