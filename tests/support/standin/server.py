"""The stand-in server: a hand-written asyncio HTTP/1.1 server in a daemon thread.

It answers like Kimi K2 served by vLLM: a tool turn returns one tool call per id (several
ids: parallel calls; an id may repeat), the request that carries their results gets the
next tool turn or, after ``turns`` tool turns, a final text. It is stateless: it counts the
tool results in the request's history. Ids are ``reuse``d every turn (as Kimi K3, Ollama or
servers that send ``call_0`` every time do) or fresh per turn (Kimi's counter goes on).

Each test registers a :class:`Scenario` and gets a :class:`ScenarioHandle`; requests are
routed by the path prefix ``/s/<key>/`` (the API is recognised by the path suffix, as the
proxy does), so one server serves a whole session while every test sees only its own
:class:`Exchange` records. A server made with a ``default`` scenario answers every other
path with it (``agent.ReuseUpstream``: one server per test, at the root).

The tests control every byte written: Content-Length, chunked or read-until-close framing,
tiny random writes with flushes (ids split across TCP segments), CRLF or LF SSE line
endings, gzip bodies and streams (also when the client did not ask for them), TLS with a
self-signed certificate, a pause after the first events of a stream, or a ``responder``
that writes the whole response itself (``responders``). Answers are rendered as templates
(``placeholders``), so ``Exchange.expected_client_bytes`` is exactly what was sent, with
the client's ids.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import math
import random
import re
import socket
import ssl
import tempfile
import threading
import traceback
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from . import sse, wire
from .apis import API, api_of, count_tool_results, endpoint, error_body, render, sdk_url
from .placeholders import call_ph, client_bytes, fill, item_ph, srv_ph
from .replies import MODEL, Call, Reply, dumps, thirds, words
from .tls import make_self_signed_cert

Framing = Literal["length", "chunked", "close"]
Writes = Literal["whole", "events", "random"]

DEFAULT_RAW_ID = "functions.get_weather:0"
TOOL_NAMES = ("get_weather", "get_time", "get_news", "get_tide")
TOOL_ARGS = '{"city": "Paris", "unit": "celsius"}'
ARG_FRAGMENTS = ('{"city', '": "Par', 'is", "un', 'it": "cel', 'sius"}')
WEATHER_TEXT = "It is sunny in Paris: 22 °C, light wind — enjoy your walk!"
WEATHER_FRAGMENTS = ("It is sunny", " in Paris: 22 °C", ", light wind", " — enjoy your walk!")
PREAMBLE = "Let me check the weather in Paris."  # what Claude writes before its calls
TOOL_USAGE, FINAL_USAGE = (61, 23), (102, 17)
CAP_MESSAGE = "stand-in request cap reached"


def fresh_id(raw: str, step: int) -> str:
    """``raw`` as a server that numbers its calls mints it ``step`` calls later."""
    if step == 0:
        return raw
    m = re.fullmatch(r"(.*):([0-9]+)", raw)
    return f"{m[1]}:{int(m[2]) + step}" if m else f"{raw}_{step}"


# ----------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    """How the stand-in answers the requests of one test."""

    ids: list[str] = field(default_factory=lambda: [DEFAULT_RAW_ID])
    # Responses API item ids (``output[].id``); default: "fc_" + call id (so they need
    # encoding exactly when the call id does).
    item_ids: list[str] | None = None
    # Anthropic only: server tool ids (see ``messages``).
    server_tool_ids: list[str] = field(default_factory=list)
    names: Sequence[str] = TOOL_NAMES  # the i-th call's tool: names[i % len(names)]
    arguments: str = TOOL_ARGS
    argument_fragments: Sequence[str] = ARG_FRAGMENTS  # empty: in thirds
    final_text: str = WEATHER_TEXT
    final_fragments: Sequence[str] = WEATHER_FRAGMENTS  # empty: in thirds
    preamble: Mapping[API, str] = field(default_factory=lambda: {"anthropic": PREAMBLE})
    turns: int = 1  # tool turns before the final text
    reuse: bool = True  # the same ids every tool turn (else fresh ones, see fresh_id)
    needs_tools: bool = False  # only a request that offers tools gets tool calls
    echo_model: bool = False  # answer with the request's model (else MODEL)
    # a strict host: the error (400) a real host answers this request with, or None
    check: Callable[[Exchange], str | None] | None = None
    max_requests: int | None = None  # model requests beyond it get a 400 (CAP_MESSAGE)

    # transport
    framing: Framing | None = None  # default: "length" buffered, "chunked" streamed
    writes: Writes = "events"
    max_write: int = 7  # largest piece in "random" writes
    sleep_every: int = 8  # in "random" writes, sleep 1 ms after every n-th piece
    newline: str = "\n"  # SSE line ending: "\n", "\r\n" or "\r"
    gzip: Literal["auto", "force", "never"] = "auto"
    ensure_ascii: bool = False  # write the raw ids as \\uXXXX escapes
    sse_extras: bool = False  # comment lines (keep-alives) and trailing spaces on data lines
    multiline_data: bool = False  # each event's JSON pretty-printed over several data: lines
    pause_after_events: int = 0  # pause after this many SSE events (-1: the first with an id)
    pause_timeout: float = 3.0  # ... until ``release`` is set, or this many seconds
    seed: int = 0
    # Fault injection: a coroutine that writes the whole response itself (anything, even
    # broken HTTP) instead of the usual answer (see ``responders``). It returns whether the
    # connection may be reused.
    responder: Responder | None = None

    def __post_init__(self) -> None:
        assert self.ids
        if self.item_ids is None:
            self.item_ids = ["fc_" + raw for raw in self.ids]
        assert len(self.item_ids) == len(self.ids)

    @property
    def sse_style(self) -> sse.Style:
        return sse.Style(self.newline, self.sse_extras, self.multiline_data)

    def turn_of(self, req: dict[str, Any], api: API) -> int:
        """The turn a request asks for (1-based): a tool turn while fewer than ``turns``
        are done (a turn is done once a result of it is in the history), else the final."""
        if self.needs_tools and not req.get("tools"):
            return self.turns + 1
        done = math.ceil(count_tool_results(api, req) / len(self.ids))
        return min(done, self.turns) + 1

    def _ids(self, turn: int) -> tuple[list[str], list[str]]:
        step = 0 if self.reuse else max(0, min(turn, self.turns) - 1) * len(self.ids)
        assert self.item_ids is not None
        return [fresh_id(i, step) for i in self.ids], [fresh_id(i, step) for i in self.item_ids]

    def placeholders(self, turn: int = 1) -> dict[str, str]:
        """placeholder -> raw id, for every id the answer of ``turn`` carries."""
        ids, item_ids = self._ids(turn)
        out = {call_ph(i): raw for i, raw in enumerate(ids)}
        out.update({item_ph(i): raw for i, raw in enumerate(item_ids)})
        out.update({srv_ph(i): raw for i, raw in enumerate(self.server_tool_ids)})
        return out

    def reply(self, api: API, turn: int, model: str = MODEL) -> Reply:
        """The answer of ``turn`` (ids as placeholders)."""
        if turn > self.turns:
            return Reply(
                text=self.final_text,
                fragments=tuple(self.final_fragments) or thirds(self.final_text),
                model=model,
                usage=FINAL_USAGE,
            )
        calls = [
            Call(
                call_ph(i),
                item_ph(i),
                self.names[i % len(self.names)],
                self.arguments,
                tuple(self.argument_fragments),
            )
            for i in range(len(self.ids))
        ]
        text = self.preamble.get(api, "")
        return Reply(
            calls=calls,
            text=text,
            fragments=words(text) if text else (),
            model=model,
            usage=TOOL_USAGE,
            server_tool_ids=[srv_ph(j) for j in range(len(self.server_tool_ids))],
        )

    def templates(self, api: API, stream: bool, turn: int = 1, model: str = MODEL) -> list[bytes]:
        """The answer's entity as byte templates: one per SSE event, or the document."""
        doc = render(api, self.reply(api, turn, model), stream)
        if not stream:
            return [dumps(doc).encode("utf-8")]
        return sse.frames(doc, self.sse_style)


@dataclass(eq=False)
class Exchange:
    """One request the stand-in received and the response it sent."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    json: Any = None  # the parsed body, None when not JSON
    api: API | None = None
    turn: int = 0
    stream: bool = False
    status: int = 0
    error: str = ""  # the error message of a 4xx answer
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    template: bytes = b""  # response entity with placeholders
    sent: bytes = b""  # response entity as sent, before content-encoding
    wire: bytes = b""  # response body after content-encoding, without HTTP framing
    pieces: int = 0  # number of writes the body took
    placeholders: dict[str, str] = field(default_factory=dict)
    first_part_sent: threading.Event = field(default_factory=threading.Event)
    rest_sent: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    # custom responders: body bytes written (and drained) so far, whether the peer went away
    written: int = 0
    aborted: threading.Event = field(default_factory=threading.Event)
    extra: dict[str, Any] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def expected_client_bytes(self, client_id: Callable[[str], str]) -> bytes:
        """The response entity a client should receive: every id literal replaced by
        ``"client_id(raw)"``, every other byte as sent."""
        return client_bytes(self.template, self.placeholders, client_id)


class ScenarioHandle:
    """A registered scenario: its URLs and the exchanges it answered."""

    def __init__(self, server: UpstreamServer, key: str, scenario: Scenario) -> None:
        self.server = server
        self.key = key
        self.scenario = scenario
        self.exchanges: list[Exchange] = []
        self.release = threading.Event()  # ends a ``pause_after_events`` pause

    @property
    def prefix(self) -> str:
        return f"{self.server.base_url}/s/{self.key}" if self.key else self.server.base_url

    def base_url(self, api: API) -> str:
        """The SDK base URL for ``api`` (openai adds /chat/completions, /responses;
        anthropic adds /v1/messages)."""
        return sdk_url(api, self.prefix)

    def url(self, api: API) -> str:
        return endpoint(api, self.prefix)

    def turn(self, n: int) -> Exchange:
        found = [e for e in self.exchanges if e.turn == n]
        assert len(found) == 1, f"expected one turn-{n} request, got {self.exchanges!r}"
        return found[0]


Responder = Callable[[Exchange, asyncio.StreamWriter, ScenarioHandle], Awaitable[bool]]


# ----------------------------------------------------------------------------- server


class UpstreamServer:
    """The asyncio HTTP/1.1 server, run in a daemon thread."""

    def __init__(
        self, tls: bool = False, cert_dir: Path | None = None, default: Scenario | None = None
    ) -> None:
        self.tls = tls
        self.cert_dir = cert_dir
        self.cert_path: Path | None = None
        self.port = 0
        self.handles: dict[str, ScenarioHandle] = {}
        self.default = ScenarioHandle(self, "", default) if default is not None else None
        self.unrouted: list[Exchange] = []
        self.errors: list[str] = []
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # lifecycle

    def start(self) -> UpstreamServer:
        ssl_ctx = None
        if self.tls:
            directory = self.cert_dir or Path(tempfile.mkdtemp(prefix="toolid-e2e-cert-"))
            cert, key = make_self_signed_cert(directory)
            self.cert_path = cert
            ssl_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ssl_ctx.load_cert_chain(cert, key)
            ssl_ctx.set_alpn_protocols(["http/1.1"])
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=ssl_ctx), self._loop
        )
        self._server = fut.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def authority(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.authority}"

    def scenario(self, scenario: Scenario | None = None, **kwargs: Any) -> ScenarioHandle:
        sc = scenario or Scenario(**kwargs)
        with self._lock:
            key = f"t{next(self._counter)}"
            handle = ScenarioHandle(self, key, sc)
            self.handles[key] = handle
        return handle

    # protocol

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _version = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if line)
                }
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    body = await self._read_chunked(reader)
                else:
                    body = await reader.readexactly(int(headers.get("content-length", "0")))
                ex = Exchange(method=method, path=target, headers=headers, body=body)
                keep_alive = await self._respond(ex, writer)
                ex.done.set()
                if not keep_alive or headers.get("connection", "").lower() == "close":
                    return
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            return  # the peer went away (ECONNRESET, ENOTCONN, EPIPE ...): normal for a server
        except Exception:  # a bug in the harness: make it visible
            self.errors.append(traceback.format_exc())
            raise
        finally:
            self._writers.discard(writer)
            writer.close()

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        body = b""
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return body
            body += await reader.readexactly(size)
            await reader.readexactly(2)

    def _route(self, path: str) -> ScenarioHandle | None:
        m = re.match(r"/s/([^/]+)/", path)
        return self.handles.get(m.group(1)) if m else self.default

    @staticmethod
    async def _simple(
        ex: Exchange,
        writer: asyncio.StreamWriter,
        status: int,
        content_type: str,
        body: bytes,
    ) -> bool:
        ex.status = status
        ex.sent = ex.wire = body
        ex.response_headers = [("content-type", content_type), ("content-length", str(len(body)))]
        writer.write(wire.head(status, ex.response_headers) + body)
        await writer.drain()
        return True

    async def _error(
        self, ex: Exchange, writer: asyncio.StreamWriter, status: int, message: str
    ) -> bool:
        ex.error = message
        body = dumps(error_body(ex.api, message)).encode()
        return await self._simple(ex, writer, status, "application/json", body)

    async def _respond(self, ex: Exchange, writer: asyncio.StreamWriter) -> bool:
        handle = self._route(ex.path)
        if handle is None:
            self.unrouted.append(ex)
            return await self._error(ex, writer, 404, f"no scenario for {ex.path}")
        with self._lock:
            before = [e for e in handle.exchanges if e.api is not None and e.method == "POST"]
            handle.exchanges.append(ex)
        sc = handle.scenario
        ex.api = api_of(ex.path)
        try:
            ex.json = json.loads(ex.body) if ex.body else None
        except ValueError:
            ex.json = None
        if sc.responder is not None:
            try:
                return await sc.responder(ex, writer, handle)
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
                ex.aborted.set()
                raise
        if ex.method == "HEAD":
            return await self._simple(ex, writer, 200, "text/plain", b"")
        if ex.method == "POST" and ex.path.split("?", 1)[0].endswith("/count_tokens"):
            return await self._simple(ex, writer, 200, "application/json", b'{"input_tokens": 1}')
        if ex.api is None or ex.method != "POST":
            return await self._error(ex, writer, 404, f"no route for {ex.method} {ex.path}")
        req = ex.json
        if not isinstance(req, dict):
            return await self._error(ex, writer, 400, "the request body is not a JSON object")
        if sc.max_requests is not None and len(before) >= sc.max_requests:
            return await self._error(ex, writer, 400, CAP_MESSAGE)
        if sc.check is not None and (problem := sc.check(ex)):
            return await self._error(ex, writer, 400, problem)
        ex.stream = req.get("stream") is True
        ex.turn = sc.turn_of(req, ex.api)
        model = req["model"] if sc.echo_model and isinstance(req.get("model"), str) else MODEL
        ex.placeholders = sc.placeholders(ex.turn)
        parts = sc.templates(ex.api, ex.stream, ex.turn, model)
        ex.template = b"".join(parts)
        filled = [fill(p, ex.placeholders, sc.ensure_ascii) for p in parts]
        ex.sent = b"".join(filled)

        await self._send(ex, writer, handle, parts, filled)
        return sc.framing != "close"  # read-until-close ends the connection

    async def _send(
        self,
        ex: Exchange,
        writer: asyncio.StreamWriter,
        handle: ScenarioHandle,
        parts: list[bytes],
        filled: list[bytes],
    ) -> None:
        sc = handle.scenario
        rng = random.Random(f"{sc.seed}:{handle.key}:{ex.turn}")
        accept = (ex.header("accept-encoding") or "").lower()
        use_gzip = sc.gzip == "force" or (sc.gzip == "auto" and "gzip" in accept)
        framing: Framing = sc.framing or ("chunked" if ex.stream else "length")

        # the entity split into writes, before and after the pause point
        pause_at = 0
        if ex.stream and sc.pause_after_events < 0:  # after the first event with an id
            pause_at = next((n + 1 for n, p in enumerate(parts) if b'"@@CALL' in p), 0)
        elif ex.stream:
            pause_at = min(sc.pause_after_events, len(filled))
        first = self._split(b"".join(filled[:pause_at]), sc, rng) if pause_at else []
        rest = self._split(b"".join(filled[pause_at:]), sc, rng)
        if use_gzip:
            comp = zlib.compressobj(wbits=31)
            if not ex.stream:
                first, rest = [], self._split(gzip.compress(ex.sent, mtime=0), sc, rng)
            else:
                first = [comp.compress(p) + comp.flush(zlib.Z_SYNC_FLUSH) for p in first]
                rest = [comp.compress(p) + comp.flush(zlib.Z_SYNC_FLUSH) for p in rest]
                rest.append(comp.flush())
        first = [p for p in first if p]
        rest = [p for p in rest if p]
        ex.wire = b"".join(first + rest)
        ex.pieces = len(first) + len(rest)

        rh = self._headers(ex, use_gzip, framing, f"req-{handle.key}-{ex.turn}")
        ex.status = 200
        ex.response_headers = rh
        writer.write(wire.head(200, rh))
        await writer.drain()

        await self._write_pieces(writer, first, framing, sc)
        ex.first_part_sent.set()
        if pause_at:
            for _ in range(int(sc.pause_timeout / 0.005)):
                if handle.release.is_set():
                    break
                await asyncio.sleep(0.005)
        await self._write_pieces(writer, rest, framing, sc)
        if framing == "chunked":
            writer.write(wire.LAST_CHUNK)
        await writer.drain()
        ex.rest_sent.set()
        if framing == "close" and writer.can_write_eof():
            writer.write_eof()

    @staticmethod
    def _headers(ex: Exchange, use_gzip: bool, framing: Framing, rid: str) -> list[tuple[str, str]]:
        ctype = "text/event-stream; charset=utf-8" if ex.stream else "application/json"
        rh: list[tuple[str, str]] = [
            ("date", "Wed, 01 Oct 2025 12:00:00 GMT"),
            ("server", "uvicorn"),
            ("content-type", ctype),
        ]
        if ex.stream:
            rh.append(("cache-control", "no-cache"))
        if use_gzip:
            rh.append(("content-encoding", "gzip"))
        if framing == "length":
            rh.append(("content-length", str(len(ex.wire))))
        elif framing == "chunked":
            rh.append(("transfer-encoding", "chunked"))
        else:
            rh.append(("connection", "close"))
        rh.append(("x-request-id", rid))
        return rh

    @staticmethod
    def _split(data: bytes, sc: Scenario, rng: random.Random) -> list[bytes]:
        if not data:
            return []
        if sc.writes == "whole":
            return [data]
        if sc.writes == "events":
            sep = (sc.newline * 2).encode()
            pieces = [p + sep for p in data.split(sep)]
            pieces[-1] = pieces[-1][: -len(sep)]
            return [p for p in pieces if p]
        out = []
        pos = 0
        while pos < len(data):
            n = rng.randint(1, sc.max_write)
            out.append(data[pos : pos + n])
            pos += n
        return out

    @staticmethod
    async def _write_pieces(
        writer: asyncio.StreamWriter, pieces: list[bytes], framing: Framing, sc: Scenario
    ) -> None:
        for n, piece in enumerate(pieces, 1):
            writer.write(wire.chunk(piece) if framing == "chunked" else piece)
            await writer.drain()
            if sc.writes != "whole" and (sc.writes == "events" or n % sc.sleep_every == 0):
                await asyncio.sleep(0.001)
