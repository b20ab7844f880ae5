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

import logging

from toolid import body
from toolid.body import Direction, Policy
from toolid.jsonarray import ElementFramer
from toolid.occurrence import CallIds
from toolid.positions import Api, Doc
from toolid.stream import DEFAULT_MAX_EVENT_BYTES, PieceRewriter

logger = logging.getLogger(__name__)


class JsonArrayRewriter(PieceRewriter):
    """Rewrite the tool-call ids of one JSON-array response body streamed element by element."""

    def __init__(
        self,
        api: Api | None,
        policy: Policy,
        *,
        content_encoding: str = "",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        calls: CallIds | None = None,
    ) -> None:
        """``api``: the request's API (Gemini; None: recognised by the first element's shape).

        Raises ValueError for a content-encoding it cannot decode."""
        super().__init__(api, policy, content_encoding, calls)
        self.max_event_bytes = max_event_bytes
        self._markers = body.id_markers(api, Doc.EVENT)
        self._encodes = policy.direction is Direction.ENCODE
        self._framer = ElementFramer()

    @property
    def held(self) -> int:
        """How many bytes are held back now (the start of an incomplete element)."""
        return len(self._framer)

    def _take_held(self) -> bytes:
        return self._framer.take_tail()

    def _tail(self) -> bytes:
        tail = self._framer.take_tail()
        if tail:
            self.problems.append("the stream ended inside an array element (passed as is)")
        return tail

    def _frame(self, data: bytes) -> bytes:
        pieces = self._framer.feed(data)
        out: list[bytes] = []
        for index, (piece, element) in enumerate(pieces):
            try:
                out.append(self._element(piece) if element else piece)
            except Exception as exc:
                logger.debug("toolid JSON-array rewriter failed", exc_info=True)
                held = self._give_up(f"unexpected error ({exc!r})")
                return b"".join([*out, *(piece for piece, _ in pieces[index:]), held])
        if len(self._framer) > self.max_event_bytes:
            self._report_oversized()
            out.append(self._framer.release())
        return b"".join(out)

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
        self.problems.append(
            f"an array element larger than {self.max_event_bytes} bytes was forwarded unchanged"
        )
