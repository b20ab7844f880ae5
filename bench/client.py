"""An asyncio raw-socket HTTP/1.1 load client: N keep-alive connections, one request at a time each.

It parses just enough HTTP/1.1 (status, Content-Length, chunked) to know where a response ends,
and keeps the body only when asked (for checks). No pipelining.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER = range(6)


class HTTPError(Exception):
    """The server answered something the harness did not expect."""


@dataclass
class Response:
    status: int
    head: bytes
    body: bytes
    size: int  # body bytes received (after de-chunking)
    chunks: int  # number of chunks (0 for Content-Length)
    #: Seconds from writing the request to the first byte of the body (the first event of a
    #: stream); None for an empty body.
    first_byte_s: float | None = None


class Connection(asyncio.Protocol):
    """One keep-alive client connection."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reset(keep=False)

    def _reset(self, keep: bool) -> None:
        self.state = _HEAD
        self.buffer = bytearray()
        self.keep = keep
        self.body = bytearray()
        self.size = 0
        self.chunks = 0
        self.remaining = 0
        self.status = 0
        self.head = b""
        self.sent_at = 0.0
        self.first_byte_at: float | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(cls, host, port)
        return protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(HTTPError(f"connection closed mid-response ({exc})"))
        if not self.closed.done():
            self.closed.set_result(None)

    def request(self, data: bytes, *, keep_body: bool = False) -> asyncio.Future[Response]:
        """Send one whole request (head and body); the future is the response."""
        assert self.transport is not None
        if self.transport.is_closing():
            raise HTTPError("connection is closed")
        self._reset(keep_body)
        self.waiter = asyncio.get_running_loop().create_future()
        self.sent_at = time.perf_counter()
        self.transport.write(data)
        return self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.state == _HEAD:
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head = bytes(self.buffer[:end])
            data = bytes(self.buffer[end + 4 :])
            self.buffer.clear()
            if not self._parse_head():
                return
        pos = 0
        n = len(data)
        while True:
            state = self.state
            if state in (_LENGTH, _CHUNK_DATA):
                take = min(self.remaining, n - pos)
                self._arrived(data, pos, take)
                self.remaining -= take
                pos += take
                if self.remaining:
                    return
                if state == _LENGTH:
                    self._done()
                    return
                self.state = _CHUNK_END
                self.remaining = 2
            elif state == _CHUNK_END:
                take = min(self.remaining, n - pos)
                pos += take
                self.remaining -= take
                if self.remaining:
                    return
                self.state = _CHUNK_SIZE
            elif state in (_CHUNK_SIZE, _TRAILER):
                read = self._line(data, pos)
                if read is None:
                    return
                line, pos = read
                if state == _TRAILER:
                    if not line:
                        self._done()
                        return
                    continue
                size = int(line.split(b";", 1)[0], 16)
                if size == 0:
                    self.state = _TRAILER
                else:
                    self.chunks += 1
                    self.state = _CHUNK_DATA
                    self.remaining = size
            else:  # pragma: no cover
                return

    def _line(self, data: bytes, pos: int) -> tuple[bytes, int] | None:
        """The line (a chunk size, a trailer) that ends in ``data`` at or after ``pos``, and
        where the next begins; None: it goes on in the next read (held in ``buffer``)."""
        if self.buffer.endswith(b"\r") and data.startswith(b"\n", pos):
            end, skip = pos, 1  # its CRLF straddles two reads
            del self.buffer[-1:]
        else:
            end, skip = data.find(b"\r\n", pos), 2
        if end < 0:
            self.buffer += data[pos:]
            return None
        line = bytes(self.buffer) + data[pos:end] if self.buffer else data[pos:end]
        self.buffer.clear()
        return line, end + skip

    def _arrived(self, data: bytes, pos: int, take: int) -> None:
        """``take`` bytes of the body, at ``pos`` in ``data``, arrived."""
        if take and self.first_byte_at is None:
            self.first_byte_at = time.perf_counter()
        if self.keep:
            self.body += data[pos : pos + take]
        self.size += take

    def _parse_head(self) -> bool:
        status_line, _, headers = self.head.partition(b"\r\n")
        try:
            self.status = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError):
            self._fail(f"bad status line {status_line[:80]!r}")
            return False
        lowered = b"\r\n" + headers.lower()
        if b"\r\ntransfer-encoding: chunked" in lowered:
            self.state = _CHUNK_SIZE
            return True
        at = lowered.find(b"\r\ncontent-length:")
        if at < 0:
            self._fail("response without content-length or chunked encoding")
            return False
        end = lowered.find(b"\r\n", at + 2)
        self.remaining = int(lowered[at + 17 : end if end >= 0 else None].strip())
        self.state = _LENGTH
        if self.remaining == 0:
            self._done()
            return False
        return True

    def _done(self) -> None:
        first = None if self.first_byte_at is None else self.first_byte_at - self.sent_at
        response = Response(self.status, self.head, bytes(self.body), self.size, self.chunks, first)
        waiter, self.waiter = self.waiter, None
        self.state = _HEAD
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _fail(self, message: str) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(HTTPError(message))
        self.close()


def build_request(path: str, body: bytes | None, host: str = "api.bench.local") -> bytes:
    """A whole HTTP/1.1 request (POST with a JSON body, or GET)."""
    if body is None:
        return f"GET {path} HTTP/1.1\r\nhost: {host}\r\naccept: */*\r\n\r\n".encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"accept: application/json, text/event-stream\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class LoadResult:
    requests: int
    seconds: float
    latencies: list[float] = field(repr=False)
    body_bytes: int
    events: int  # SSE events seen (by the number of blank lines the workload is known to have)
    #: Seconds from each request to the first byte of its body (``Response.first_byte_s``).
    first_bytes: list[float] = field(default_factory=list, repr=False)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 4),
            "rps": self.rps,
            "events_per_s": self.events / self.seconds if self.seconds > 0 else 0.0,
            "mb_per_s": self.body_bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0,
            "p50_ms": percentile(self.latencies, 50) * 1e3,
            "p99_ms": percentile(self.latencies, 99) * 1e3,
        }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``; 0.0 for an empty list."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


async def run_load(
    host: str,
    port: int,
    request: bytes,
    *,
    connections: int,
    duration: float,
    events_per_response: int = 0,
    warmup: int = 1,
    max_requests: int | None = None,
    min_requests: int = 0,
) -> LoadResult:
    """Keep ``connections`` connections busy with ``request`` for ``duration`` seconds (and
    until at least ``min_requests`` were sent)."""
    conns = [await Connection.open(host, port) for _ in range(connections)]
    try:
        for _ in range(warmup):
            for response in await asyncio.gather(*(c.request(request) for c in conns)):
                _check(response)
        latencies: list[float] = []
        body_bytes = 0
        count = 0
        start = time.perf_counter()
        deadline = start + duration
        clock = time.perf_counter

        async def worker(conn: Connection) -> None:
            nonlocal body_bytes, count
            while (clock() < deadline or count < min_requests) and (
                max_requests is None or count < max_requests
            ):
                t0 = clock()
                count += 1
                response = await conn.request(request)
                latencies.append(clock() - t0)
                if response.status != 200:
                    _check(response)
                body_bytes += response.size

        await asyncio.wait_for(asyncio.gather(*(worker(c) for c in conns)), duration + 120)
        seconds = time.perf_counter() - start
    finally:
        for c in conns:
            c.close()
    return LoadResult(
        len(latencies), seconds, latencies, body_bytes, len(latencies) * events_per_response
    )


async def run_alternating(
    host: str,
    ports: list[int],
    request: bytes,
    *,
    duration: float,
    warmup: int = 1,
    min_requests: int = 0,
) -> list[LoadResult]:
    """One keep-alive connection to each of ``ports``, and ``request`` sent to them in turn,
    one at a time (A, B, A, B, ...; each turn starting one further), for ``duration``
    seconds per port (and until each port had ``min_requests``): side by side, so that
    whatever else the machine is doing weighs on them alike. One result per port, with the
    time to each response's first body byte as well (``LoadResult.first_bytes``)."""
    conns = [await Connection.open(host, port) for port in ports]
    try:
        for _ in range(warmup):
            for conn in conns:
                _check(await conn.request(request))
        latencies: list[list[float]] = [[] for _ in conns]
        first_bytes: list[list[float]] = [[] for _ in conns]
        body_bytes = [0] * len(conns)
        clock = time.perf_counter
        start = clock()
        deadline = start + duration * len(conns)
        turn = 0
        while clock() < deadline or min(map(len, latencies)) < min_requests:
            for k in range(len(conns)):
                index = (turn + k) % len(conns)
                t0 = clock()
                response = await asyncio.wait_for(conns[index].request(request), 120)
                latencies[index].append(clock() - t0)
                if response.status != 200:
                    _check(response)
                if response.first_byte_s is not None:
                    first_bytes[index].append(response.first_byte_s)
                body_bytes[index] += response.size
            turn += 1
        seconds = clock() - start
    finally:
        for conn in conns:
            conn.close()
    return [
        LoadResult(len(times), seconds, times, size, 0, first)
        for times, size, first in zip(latencies, body_bytes, first_bytes, strict=True)
    ]


async def fetch(host: str, port: int, request: bytes) -> Response:
    """One request on a fresh connection; the body is kept."""
    conn = await Connection.open(host, port)
    try:
        response = await asyncio.wait_for(conn.request(request, keep_body=True), 120)
    finally:
        conn.close()
    return response


def _check(response: Response) -> None:
    if response.status != 200:
        raise HTTPError(f"HTTP {response.status}: {response.head[:200]!r}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
