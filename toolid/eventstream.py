"""AWS eventstream (``application/vnd.amazon.eventstream``) framing, sans I/O.

The binary framing of Bedrock's ConverseStream and InvokeModelWithResponseStream answers (and
of other AWS streaming APIs). One frame ("message") is::

    total length (4, big endian) | headers length (4) | prelude CRC32 (4)
    headers | payload | message CRC32 (4)

The prelude CRC covers the first 8 bytes, the message CRC every byte before it. A header is a
name (1 length byte, UTF-8), a type byte and a value (botocore ``eventstream.py``,
``EventStreamHeaderParser``): 0 true, 1 false (no value), 2 int8, 3 int16, 4 int32, 5 int64,
8 timestamp (fixed sizes), 6 bytes and 7 string (2 length bytes, then the value), 9 uuid (16).

``FrameSplitter`` is fed bytes in arbitrary pieces and hands back each complete frame, both
CRCs checked, as soon as its last byte has arrived; it holds back only the incomplete frame
(its length is known from the prelude, so nothing is ever searched twice). It never raises:
a frame that does not check is reported in ``error`` and, with everything after it, left in
the buffer for the caller to forward as it came. ``frame`` builds a frame, lengths and CRCs
computed; ``replace_payload`` gives a frame a new payload, its headers kept byte for byte.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Final

PRELUDE: Final = 12  # total length, headers length, prelude CRC
CRC: Final = 4
SMALLEST: Final = PRELUDE + CRC  # a frame with no headers and no payload
# botocore's own limits (eventstream.py: _MAX_HEADERS_LENGTH, _MAX_PAYLOAD_LENGTH).
MAX_HEADERS: Final = 128 * 1024
MAX_PAYLOAD: Final = 24 * 1024 * 1024
CONTENT_TYPE: Final = "application/vnd.amazon.eventstream"

_UINT32: Final = struct.Struct("!I")
_PRELUDE: Final = struct.Struct("!III")
# Header value sizes by type: fixed, or None for a 2-byte length followed by the value.
_VALUE_SIZES: Final[dict[int, int | None]] = {
    0: 0,
    1: 0,
    2: 1,
    3: 2,
    4: 4,
    5: 8,
    6: None,
    7: None,
    8: 8,
    9: 16,
}
_STRING: Final = 7

type HeaderValue = str | bytes | int | bool


class FrameError(ValueError):
    """A frame that is not well formed (lengths, CRCs, headers)."""


def crc32(data: bytes | bytearray | memoryview, start: int = 0) -> int:
    """CRC32 as eventstream uses it (zlib's, unsigned)."""
    return zlib.crc32(data, start) & 0xFFFFFFFF


def check_prelude(data: bytes | bytearray, at: int = 0) -> int:
    """The total length of the frame whose prelude starts at ``data[at]`` (12 bytes there).
    Raises FrameError when its CRC or its lengths are wrong."""
    total, headers, expected = _PRELUDE.unpack_from(data, at)
    if crc32(memoryview(data)[at : at + 8]) != expected:
        raise FrameError("eventstream prelude CRC mismatch")
    if (
        headers > MAX_HEADERS
        or total < SMALLEST + headers
        or total - SMALLEST - headers > (MAX_PAYLOAD)
    ):
        raise FrameError(f"eventstream frame lengths out of range ({total}, {headers})")
    return int(total)


def check_message(frame: bytes) -> None:
    """Raises FrameError when a whole frame's message CRC is wrong."""
    (expected,) = _UINT32.unpack_from(frame, len(frame) - CRC)
    if crc32(memoryview(frame)[: len(frame) - CRC]) != expected:
        raise FrameError("eventstream message CRC mismatch")


class FrameSplitter:
    """Split a byte stream into eventstream frames, holding back only the incomplete one."""

    def __init__(self) -> None:
        self._buffer = bytearray()  # the start of a frame
        self._total = 0  # the held frame's length, once its prelude is in (0: not yet)
        self.error: str | None = None  # set once: then every byte fed stays in the buffer

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return every frame it completes, in order, each checked. After an
        error (``error`` set) nothing more is returned: the bytes wait in the buffer."""
        if self.error is not None:
            self._buffer += data
            return []
        frames: list[bytes] = []
        at = 0
        if self._buffer:
            at = self._complete_held(data)
            if not self._total or len(self._buffer) < self._total:
                if self.error is None:
                    return frames
                self._buffer += data[at:]
                return frames
            frame = bytes(self._buffer)
            if self._checked(frame):
                frames.append(frame)
                self._buffer.clear()
                self._total = 0
            else:
                self._buffer += data[at:]
                return frames
        size = len(data)
        while size - at >= PRELUDE:
            try:
                total = check_prelude(data, at)
            except FrameError as exc:
                self.error = str(exc)
                break
            if size - at < total:
                self._total = total
                break
            frame = data[at : at + total]
            if not self._checked(frame):
                break
            frames.append(frame)
            at += total
        self._buffer += data[at:]
        return frames

    def _complete_held(self, data: bytes) -> int:
        """Move bytes of ``data`` into the held frame, no further than its end; return how
        many were taken."""
        taken = 0
        if not self._total:
            taken = min(PRELUDE - len(self._buffer), len(data))
            self._buffer += data[:taken]
            if len(self._buffer) < PRELUDE:
                return taken
            try:
                self._total = check_prelude(self._buffer)
            except FrameError as exc:
                self.error = str(exc)
                return taken
        more = min(self._total - len(self._buffer), len(data) - taken)
        self._buffer += data[taken : taken + more]
        return taken + more

    def _checked(self, frame: bytes) -> bool:
        try:
            check_message(frame)
        except FrameError as exc:
            self.error = str(exc)
            return False
        return True

    def take_tail(self) -> bytes:
        """Remove and return the held bytes (an incomplete frame, or after an error every byte
        from the frame that did not check on)."""
        tail = bytes(self._buffer)
        self._buffer.clear()
        self._total = 0
        return tail

    def __len__(self) -> int:
        return len(self._buffer)


def headers_end(frame: bytes) -> int:
    """Where a checked frame's headers end (its payload begins)."""
    (headers,) = _UINT32.unpack_from(frame, 4)
    return PRELUDE + int(headers)


def payload_of(frame: bytes) -> bytes:
    """A checked frame's payload."""
    return frame[headers_end(frame) : len(frame) - CRC]


def headers_of(frame: bytes) -> dict[str, HeaderValue]:
    """A checked frame's headers (timestamps as milliseconds, uuids as bytes). Raises
    FrameError for headers that are not well formed."""
    block = memoryview(frame)[PRELUDE : headers_end(frame)]
    headers: dict[str, HeaderValue] = {}
    at = 0
    try:
        while at < len(block):
            size = block[at]
            name = bytes(block[at + 1 : at + 1 + size]).decode()
            at += 1 + size
            kind = block[at]
            at += 1
            value_size = _VALUE_SIZES[kind]
            value: HeaderValue
            if value_size is None:
                (length,) = struct.unpack_from("!H", block, at)
                raw = bytes(block[at + 2 : at + 2 + length])
                if len(raw) != length:
                    raise FrameError("eventstream header value is cut short")
                value = raw.decode() if kind == _STRING else raw
                at += 2 + length
            elif kind in (0, 1):
                value = kind == 0
            else:
                raw = bytes(block[at : at + value_size])
                if len(raw) != value_size:
                    raise FrameError("eventstream header value is cut short")
                value = raw if kind == 9 else int.from_bytes(raw, "big", signed=True)
                at += value_size
            if name in headers:
                raise FrameError(f"eventstream header {name!r} given twice")
            headers[name] = value
    except (IndexError, KeyError, UnicodeDecodeError, struct.error) as exc:
        raise FrameError(f"eventstream headers are not well formed ({exc!r})") from None
    return headers


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """A header block of string headers (what AWS sends: ``:event-type`` and the like)."""
    out = bytearray()
    for name, value in headers.items():
        key, text = name.encode(), value.encode()
        out += bytes([len(key)]) + key + bytes([_STRING]) + struct.pack("!H", len(text)) + text
    return bytes(out)


def frame(headers: Mapping[str, str] | bytes, payload: bytes) -> bytes:
    """A whole frame: string headers (or a header block as is), ``payload``, lengths and both
    CRCs computed."""
    block = headers if isinstance(headers, bytes) else encode_headers(headers)
    total = SMALLEST + len(block) + len(payload)
    prelude = struct.pack("!II", total, len(block))
    prelude += _UINT32.pack(crc32(prelude))
    body = prelude + block + payload
    return body + _UINT32.pack(crc32(body))


def replace_payload(checked: bytes, payload: bytes) -> bytes:
    """``checked`` (a frame) with ``payload`` instead of its own: the header block kept byte
    for byte, the lengths and both CRCs computed again."""
    return frame(checked[PRELUDE : headers_end(checked)], payload)
