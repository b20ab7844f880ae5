"""Rewrite the ids of an AWS eventstream body fed in arbitrary pieces, sans I/O.

``EventStreamRewriter`` = decompressor (if the server compressed anyway) + ``FrameSplitter`` +
``body.plan`` applied to each frame's JSON payload, the counterpart of ``stream.StreamRewriter``
for Bedrock's binary streams:

- a ConverseStream frame (``:message-type`` event, ``:event-type`` contentBlockStart, ...)
  holds one Converse stream event as its payload: planned with the Converse EVENT rows;
- an InvokeModelWithResponseStream ``chunk`` frame holds ``{"bytes": "<base64>"}``, the
  model's own stream event (for Claude, one Anthropic Messages event): the base64 decoded,
  planned with the model's API (Messages when the route names an Anthropic model, else by the
  event's shape), encoded again.

Each frame is forwarded as soon as its last byte arrives, byte for byte when nothing in it
changes; a frame whose id changes gets the new payload, its header block as it was, and its
lengths and CRCs computed again. One client id per call across all frames (``CallIds``).

It never raises from ``feed`` or ``finish``: a frame that does not check (a CRC, a length), a
frame larger than ``max_event_bytes``, or anything unexpected switches the rest of the stream
to pass-through, every byte as it came, and says so once in ``problems``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

from toolid import body, eventstream
from toolid.apis import apis_framed_as
from toolid.eventstream import FrameError, FrameSplitter
from toolid.positions import Doc
from toolid.problem import CHUNK_UNREADABLE, EVENT_TOO_LARGE, FRAME_CORRUPT
from toolid.stream import PieceRewriter

# A chunk's payload (botocore service-2.json PayloadPart: {"bytes": blob}); the base64 literal,
# which has no escapes to worry about, is replaced where it stands.
_CHUNK_BYTES: Final = re.compile(rb'"bytes"\s*:\s*"([A-Za-z0-9+/=]*)"')
_EVENT_TYPE: Final = b":event-type"
_CHUNK: Final = "chunk"
# The API whose streamed events are the payloads of eventstream frames themselves (Converse);
# chunk frames carry another API's events.
(_FRAMED,) = apis_framed_as("eventstream")


class EventStreamRewriter(PieceRewriter):
    """Rewrite the tool-call ids of one ``application/vnd.amazon.eventstream`` body."""

    _framer: FrameSplitter
    _ended_inside = "the stream ended inside an eventstream frame (passed as is)"

    def _start(self) -> None:
        # The API inside chunk frames: the request's is Converse for ConverseStream, the
        # model's (Messages, or None: recognised by each event's shape) for
        # InvokeModelWithResponseStream.
        self._inner = None if self.api is _FRAMED else self.api
        self._converse_markers = body.id_markers(_FRAMED, Doc.EVENT)
        self._framer = FrameSplitter()

    def _frame(self, data: bytes) -> bytes:
        splitter = self._framer
        out = self._each(splitter.feed(data), self._one_frame, bytes)
        if self._passthrough:
            return b"".join(out)
        if splitter.error is not None:
            out.append(
                self._give_up(
                    FRAME_CORRUPT, f"{splitter.error}: the rest of the stream passed as is"
                )
            )
        elif len(splitter) > self.max_event_bytes:
            out.append(
                self._give_up(
                    EVENT_TOO_LARGE,
                    f"an eventstream frame larger than {self.max_event_bytes} bytes: "
                    "the rest of the stream passed as is",
                )
            )
        return b"".join(out)

    def _one_frame(self, frame: bytes) -> bytes:
        """One checked frame: rewritten, or as it came."""
        if len(frame) > self.max_event_bytes:
            self._report(
                EVENT_TOO_LARGE,
                f"an eventstream frame larger than {self.max_event_bytes} bytes was forwarded "
                "unchanged",
            )
            return frame
        start = eventstream.headers_end(frame)
        header_block = frame[eventstream.PRELUDE : start]
        if header_block.find(_EVENT_TYPE) < 0:
            return frame  # not an event (an exception, an error): no id
        if header_block.find(b"\x05chunk") >= 0 and self._event_type(frame) == _CHUNK:
            return self._chunk(frame, start)
        payload = frame[start : len(frame) - eventstream.CRC]
        if not body.may_hold_ids(payload, self._converse_markers):
            return frame
        new, _ = self._rewrite(payload, _FRAMED)
        return frame if new is payload else eventstream.replace_payload(frame, new)

    def _event_type(self, frame: bytes) -> object:
        try:
            return eventstream.headers_of(frame).get(":event-type")
        except FrameError:
            return None

    def _chunk(self, frame: bytes, start: int) -> bytes:
        """A chunk frame: the model's event, base64 in ``bytes``, rewritten and put back."""
        payload = frame[start : len(frame) - eventstream.CRC]
        matches = list(_CHUNK_BYTES.finditer(payload))
        if len(matches) != 1:
            if b'"bytes"' in payload:
                problem = "chunk left unchanged: its bytes member is not plain"
                self._report(CHUNK_UNREADABLE, problem)
            return frame
        literal = matches[0]
        try:
            event = base64.b64decode(literal.group(1), validate=True)
        except (binascii.Error, ValueError):
            self._report(CHUNK_UNREADABLE, "chunk left unchanged: its bytes are not base64")
            return frame
        new_event, read_as = self._rewrite(event, self._inner)
        if self._inner is None and read_as is not _FRAMED:
            self._inner = read_as  # the model's API, recognised once
        if new_event is event:
            return frame
        text = base64.b64encode(new_event)
        new = payload[: literal.start(1)] + text + payload[literal.end(1) :]
        return eventstream.replace_payload(frame, new)
