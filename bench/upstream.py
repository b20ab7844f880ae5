"""A fast local HTTP/1.1 upstream that serves canned bodies (asyncio protocol, no framework).

Keep-alive; whole bodies with Content-Length; SSE with chunked transfer-encoding, one chunk per
piece of ``Canned.chunks`` (16 KiB pieces cut anywhere, see ``workloads.STREAM_CHUNK``), all
written at once. The request target's query picks the response:

- ``?w=<workload>``: ``bench.workloads.canned(<workload>)`` (a paced stream, ``sse.first``:
  the first chunk, then the others after the workload's pause);
- ``?w=mem&bytes=N``: an SSE stream of about N bytes, written with flow control;
- ``&echo=1``: answer with the request body itself (``application/octet-stream``), so the
  harness can check what reached the upstream; ``echo=json``: the same as ``application/json``
  (a body that is a response too: ``bench.soak``).

Run as ``python -m bench.upstream``: it prints ``READY <port>`` and serves until stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import sys
from urllib.parse import parse_qs, urlsplit

from standin import wire

from bench import workloads

_HEAD_END = b"\r\n\r\n"


@functools.cache
def _response_bytes(name: str) -> bytes:
    canned = workloads.canned(name)
    if not canned.streamed:
        return wire.whole(200, canned.content_type, canned.body)
    chunks = b"".join(wire.chunk(piece) for piece in canned.chunks)
    return wire.stream_head(canned.content_type) + chunks + wire.LAST_CHUNK


@functools.cache
def _paced_bytes(name: str) -> tuple[bytes, bytes, float]:
    """A paced stream's two writes (head and first chunk; the other chunks and the end) and the
    pause between them."""
    canned = workloads.canned(name)
    first, *rest = canned.chunks
    return (
        wire.stream_head(canned.content_type) + wire.chunk(first),
        b"".join(wire.chunk(piece) for piece in rest) + wire.LAST_CHUNK,
        canned.pause,
    )


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: parse requests, answer them in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.target: bytes | None = None  # request line target, while its body arrives
        self.remaining = 0
        self.echo = False
        self.body = bytearray()
        self.queue: list[tuple[bytes, bytes]] = []
        self.streaming: asyncio.Task[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.streaming:
            self.streaming.cancel()
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        while data:
            if self.target is None:
                self.buffer += data
                end = self.buffer.find(_HEAD_END)
                if end < 0:
                    return
                head = bytes(self.buffer[:end])
                data = bytes(self.buffer[end + 4 :])
                self.buffer.clear()
                if not self._start(head):
                    return
                if self.remaining == 0:
                    self._complete()
                continue
            take = min(self.remaining, len(data))
            if self.echo:
                self.body += data[:take]
            self.remaining -= take
            data = data[take:]
            if self.remaining == 0:
                self._complete()

    def _start(self, head: bytes) -> bool:
        request_line, _, headers = head.partition(b"\r\n")
        parts = request_line.split(b" ")
        if len(parts) != 3:
            self._fail(400)
            return False
        lowered = b"\r\n" + headers.lower()
        if b"\r\ntransfer-encoding:" in lowered:
            self._fail(501)  # request bodies come with Content-Length
            return False
        at = lowered.find(b"\r\ncontent-length:")
        length = 0
        if at >= 0:
            line_end = lowered.find(b"\r\n", at + 2)
            value = lowered[at + 17 : line_end if line_end >= 0 else None]
            length = int(value.strip())
        self.target = parts[1]
        self.remaining = length
        self.echo = b"echo=" in self.target
        self.body = bytearray()
        return True

    def _complete(self) -> None:
        assert self.target is not None
        request = (self.target, bytes(self.body))
        self.target = None
        self.body = bytearray()
        if self.streaming is not None:
            self.queue.append(request)
        else:
            self._answer(*request)

    def _answer(self, target: bytes, body: bytes) -> None:
        assert self.transport is not None
        query = parse_qs(urlsplit(target.decode("latin-1")).query)
        name = query.get("w", [""])[0]
        if query.get("echo"):
            json_echo = query["echo"][0] == "json"
            kind = "application/json" if json_echo else "application/octet-stream"
            self.transport.write(wire.whole(200, kind, body))
        elif name == "mem":
            size = int(query.get("bytes", ["0"])[0])
            self.streaming = asyncio.get_running_loop().create_task(self._stream(size))
        else:
            try:
                paced = workloads.canned(name).pause > 0
            except KeyError:
                self.transport.write(wire.whole(404, "text/plain", b"unknown workload"))
                return
            if paced:
                self.streaming = asyncio.get_running_loop().create_task(self._paced(name))
            else:
                self.transport.write(_response_bytes(name))

    async def _paced(self, name: str) -> None:
        assert self.transport is not None
        first, rest, pause = _paced_bytes(name)
        self.transport.write(first)
        await asyncio.sleep(pause)
        if self.transport.is_closing():
            return
        self.transport.write(rest)
        self._next()

    async def _stream(self, size: int) -> None:
        assert self.transport is not None
        self.transport.write(wire.stream_head("text/event-stream"))
        for piece in workloads.memory_stream(size):
            await self.can_write.wait()
            if self.transport.is_closing():
                return
            self.transport.write(wire.chunk(piece))
        self.transport.write(wire.LAST_CHUNK)
        self._next()

    def _next(self) -> None:
        """A stream is done: answer the requests that came meanwhile."""
        self.streaming = None
        while self.queue and self.streaming is None:
            self._answer(*self.queue.pop(0))

    def _fail(self, status: int) -> None:
        assert self.transport is not None
        self.transport.write(wire.whole(status, "text/plain", str(status).encode()))
        self.transport.close()


async def serve(host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Start the upstream; ``server.sockets[0].getsockname()[1]`` is its port."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(UpstreamProtocol, host, port, backlog=1024)


async def _main(port: int) -> None:
    server = await serve(port=port)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.buffer.read)
    with contextlib.suppress(asyncio.CancelledError):
        await stdin_closed
    server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port))


if __name__ == "__main__":
    main()
