"""A local stand-in for the OpenAI Responses API over WebSocket (Codex CLI's transport).

It accepts WebSocket upgrades on any path ending ``/responses`` and speaks the protocol:
each client text message is ``{"type": "response.create", ...}`` with the fields of a
Responses POST body (plus ``previous_response_id``, ``generate``); it answers each with the
events of one streamed response, one text message per event (the JSON an SSE ``data:`` line
would hold), or with ``{"type": "error", ...}``. ``generate: false`` (a prewarm) gets an empty
response.

Like Kimi K3 it reuses its tool-call ids: every tool turn calls ``exec_command`` with the SAME
raw ``call_id`` (``ids``), until ``turns`` tool turns are done, then a final text. It counts
the turns of a conversation through ``previous_response_id`` (the outputs sent since) or, in
a full history, from the ``function_call_output`` items.

It is a conforming upstream: every ``call_id`` a client sends (calls and outputs) must be one
it emitted, and a ``previous_response_id`` must name one of its responses on that connection;
otherwise it answers an error event, as the real API does, and records the violation. Other
HTTP requests (a fallback to ``POST /responses``, ``/models``) get 404 and are recorded.

    with ResponsesWsUpstream(ids=["functions.exec_command:0"]) as up:
        up.base_url            # http://127.0.0.1:PORT/v1
        up.connections         # each connection: handshake headers, messages both ways
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Self

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from . import responses
from .replies import Call, Reply
from .tls import make_self_signed_cert

FINAL_TEXT = "Done: the command printed hello."
ERROR_NOT_FOUND = "No tool call found for function call output with call_id {!r}."


@dataclass
class Message:
    from_client: bool
    text: str

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return None


@dataclass
class Connection:
    """One WebSocket connection: its handshake and every message, both ways, in order."""

    path: str
    headers: dict[str, str]  # lower-case names
    messages: list[Message] = field(default_factory=list)

    def requests(self) -> list[dict[str, Any]]:
        """The client's response.create messages (parsed)."""
        return [m.json for m in self.messages if m.from_client and isinstance(m.json, dict)]

    def events(self) -> list[dict[str, Any]]:
        return [m.json for m in self.messages if not m.from_client]


class ResponsesWsUpstream:
    """The stand-in, on 127.0.0.1 (a free port), in a daemon thread with its own event loop.

    ``ids``: the raw call ids of every tool turn (several: parallel calls); ``item_ids``: the
    items' own ids (default ``fc_<response>_<n>``, distinct; given: reused every turn too);
    ``turns``: tool turns before the final text; ``arguments``: the tool's arguments (JSON)."""

    def __init__(
        self,
        ids: Sequence[str] = ("functions.exec_command:0",),
        *,
        item_ids: Sequence[str] | None = None,
        turns: int = 2,
        arguments: str = '{"cmd": "echo hello"}',
        name: str = "exec_command",
        tls_dir: Path | None = None,
    ) -> None:
        """``tls_dir``: serve wss:// with a self-signed certificate for 127.0.0.1 made there."""
        self.ids = list(ids)
        self.tls_dir = tls_dir
        self.item_ids = list(item_ids) if item_ids is not None else None
        self.turns = turns
        self.arguments = arguments
        self.name = name
        self.connections: list[Connection] = []
        self.http_requests: list[tuple[str, str]] = []  # (method, path) of non-upgrades
        self.violations: list[str] = []  # what a conforming upstream rejected
        self._emitted: set[str] = set()  # every raw call id it sent
        self._emitted_items: set[str] = set()  # every call item id it sent
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls_dir else 'http'}://127.0.0.1:{self.port}/v1"

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.tls_dir else 'ws'}://127.0.0.1:{self.port}/v1/responses"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="responses-ws", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the WebSocket stand-in did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        context = None
        if self.tls_dir is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls_dir.mkdir(parents=True, exist_ok=True)
            context.load_cert_chain(*make_self_signed_cert(self.tls_dir))
        async with serve(
            self._handler, "127.0.0.1", 0, process_request=self._process_request, ssl=context
        ) as server:
            self._server = server
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await server.wait_closed()

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        upgrade = request.headers.get("upgrade", "").lower() == "websocket"
        if upgrade and request.path.split("?", 1)[0].endswith("/responses"):
            return None
        with self._lock:
            self.http_requests.append(("GET" if upgrade else "?", request.path))
        return connection.respond(HTTPStatus.NOT_FOUND, "no such route\n")

    # --- one connection ----------------------------------------------------------------------

    async def _handler(self, ws: ServerConnection) -> None:
        request = ws.request
        assert request is not None
        conn = Connection(request.path, {k.lower(): v for k, v in _items(request.headers)})
        with self._lock:
            self.connections.append(conn)
        turns_of: dict[str, int] = {}  # response id -> tool turns done when it was made
        with contextlib.suppress(ConnectionClosed):  # clients may go without a close frame
            async for data in ws:
                text = data if isinstance(data, str) else data.decode("utf-8", "replace")
                conn.messages.append(Message(True, text))
                for event in self._answer(conn, text, turns_of):
                    out = json.dumps(event)
                    conn.messages.append(Message(False, out))
                    await ws.send(out)

    def _answer(self, conn: Connection, text: str, turns_of: dict[str, int]) -> list[Any]:
        try:
            req = json.loads(text)
        except ValueError:
            return [self._error(400, "the message is not JSON")]
        if not isinstance(req, dict) or req.get("type") != "response.create":
            return [self._error(400, f"unsupported message type {req.get('type')!r}")]
        items = [i for i in req.get("input") or [] if isinstance(i, dict)]
        for item in items:
            call_id = item.get("call_id")
            if call_id is not None and call_id not in self._emitted:
                return [self._error(400, ERROR_NOT_FOUND.format(call_id))]
            item_id = item.get("id") if item.get("type") == "function_call" else None
            if item_id is not None and item_id not in self._emitted_items:
                return [self._error(400, f"Item with id {item_id!r} not found.")]
        outputs = sum(i.get("type") == "function_call_output" for i in items)
        previous = req.get("previous_response_id")
        if previous is not None:
            if previous not in turns_of:
                return [self._error(400, f"Previous response with id {previous!r} not found.")]
            done = turns_of[previous] + outputs // len(self.ids)
        else:
            done = outputs // len(self.ids)
        number = next(self._numbers)
        response_id = f"resp_ws{number}"
        turns_of[response_id] = done
        model = req["model"] if isinstance(req.get("model"), str) else "kimi-k3"
        if req.get("generate") is False:
            calls: list[Call] = []
            events = [e for _, e in responses.stream(Reply(model=model))]
            events = [e for e in events if e["type"] in ("response.created", "response.completed")]
        else:
            want = done < self.turns and bool(req.get("tools"))
            item_ids = self.item_ids or [f"fc_{number}_{i}" for i in range(len(self.ids))]
            calls = [
                Call(raw, item, self.name, self.arguments)
                for raw, item in zip(self.ids, item_ids, strict=True)
            ]
            calls = calls if want else []
            reply = Reply(calls=calls, text="" if calls else FINAL_TEXT, model=model)
            events = [e for _, e in responses.stream(reply)]
        with self._lock:
            self._emitted.update(c.id for c in calls)
            self._emitted_items.update(c.item_id for c in calls)
        for event in events:
            if isinstance(event.get("response"), dict):
                event["response"]["id"] = response_id
        return events

    def _error(self, status: int, message: str) -> dict[str, Any]:
        with self._lock:
            self.violations.append(message)
        return {
            "type": "error",
            "status": status,
            "error": {"type": "invalid_request_error", "code": None, "message": message},
        }


def _items(headers: Headers) -> list[tuple[str, str]]:
    return list(headers.raw_items())
