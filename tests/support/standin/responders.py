"""Building blocks for ``Scenario.responder`` coroutines (fault injection: broken framing,
corrupt compression, error pages, huge events, connections closed mid-body).

A responder gets the Exchange (request already read), the writer and the handle; it records
what it sent in ``ex.sent`` / ``ex.wire`` (or a digest in ``ex.extra``) and counts
``ex.written``.
"""

from __future__ import annotations

import asyncio

from . import wire
from .apis import API
from .placeholders import fill
from .server import Exchange, Scenario


def kimi_parts(
    sc: Scenario, api: API, stream: bool, turn: int = 1
) -> tuple[list[bytes], list[bytes], dict[str, str]]:
    """The usual answer: (templates, filled bytes) per event, and placeholders."""
    placeholders = sc.placeholders(turn)
    parts = sc.templates(api, stream, turn)
    return parts, [fill(p, placeholders, sc.ensure_ascii) for p in parts], placeholders


async def write_head(
    writer: asyncio.StreamWriter,
    headers: list[tuple[str, str]],
    status: int = 200,
    reason: str = "OK",
    ex: Exchange | None = None,
) -> None:
    if ex is not None:
        ex.status = status
        ex.response_headers = headers
    writer.write(wire.head(status, headers, reason))
    await writer.drain()


async def write_body(
    writer: asyncio.StreamWriter, ex: Exchange, data: bytes, chunked: bool = False
) -> None:
    """Write (and drain) one piece of the body, chunk-framed if asked; count it."""
    if not data:
        return
    writer.write(wire.chunk(data) if chunked else data)
    await writer.drain()
    ex.written += len(data)


async def end_chunked(writer: asyncio.StreamWriter) -> None:
    writer.write(wire.LAST_CHUNK)
    await writer.drain()


async def abort(writer: asyncio.StreamWriter) -> bool:
    """Close the connection at once (mid-body: the response is truncated)."""
    writer.close()
    return False


def sse_headers(extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    return [
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-cache"),
        *(extra or []),
        ("transfer-encoding", "chunked"),
    ]
