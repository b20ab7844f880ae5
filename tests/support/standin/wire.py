"""HTTP/1.1 response framing, shared by the stand-in server and the bench's upstream."""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus


def head(status: int, headers: Sequence[tuple[str, str]], reason: str | None = None) -> bytes:
    """The status line and header block, with the blank line that ends it."""
    reason = HTTPStatus(status).phrase if reason is None else reason
    lines = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return (lines + "\r\n").encode("latin-1")


def chunk(piece: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(piece), piece)


LAST_CHUNK = b"0\r\n\r\n"


def whole(status: int, content_type: str, body: bytes) -> bytes:
    """A complete response with a Content-Length body."""
    headers = [("content-type", content_type), ("content-length", str(len(body)))]
    return head(status, headers) + body


def stream_head(content_type: str = "text/event-stream") -> bytes:
    """The head of a chunked SSE response."""
    return head(
        200,
        [
            ("content-type", content_type),
            ("cache-control", "no-cache"),
            ("transfer-encoding", "chunked"),
        ],
    )
