"""A local stand-in LLM server that reuses its tool-call ids in every turn.

Like Kimi K3, Moonshot's Anthropic endpoint, Ollama-style servers or OpenAI-compatible
servers that send ``call_0`` every time, it answers every tool turn with the SAME raw ids.
It is stateless: it counts the tool results in the request's history and, while fewer than
``turns`` tool turns are done (``results // len(ids)``), answers one tool call per id (all
ids in one response: parallel calls), else a final text. A request that offers no tools gets
the final text.

It speaks OpenAI Chat Completions (``.../chat/completions``), OpenAI Responses
(``.../responses``) and Anthropic Messages (``.../v1/messages``, query string ignored),
buffered or as SSE (``"stream": true``) in each API's event shapes; ``HEAD /`` answers 200
and ``.../count_tokens`` answers ``{"input_tokens": 1}`` (what Claude Code asks for).

``check`` makes it a strict host: a function of (API, request) that returns the error a
real host answers the request's history with (400), or None; ``strict_hosts.StrictHost``
passes the id rules of a destination. ``max_requests`` bounds a runaway agent: model
requests beyond it get a 400.

    with ReuseUpstream(ids=["functions.Glob:0"]) as up:
        openai.OpenAI(base_url=up.sdk_url("chat"), ...)
        up.requests  # every request: path, headers, parsed JSON, status
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from .upstream import API, API_SUFFIX, CREATED, MODEL, api_of, dumps, make_self_signed_cert

PATTERN_TEXT = "^[a-zA-Z0-9_-]+$"  # Anthropic's pattern for tool_use ids, in its error texts
SAFE_ID = re.compile(PATTERN_TEXT)
FINAL_TEXT = "There are 3 text files: a.txt, b.txt and c.txt."
CAP_MESSAGE = "stand-in request cap reached"

# A strict host's verdict on a request: the error text it answers with (400), or None.
type Check = Callable[[API, dict[str, Any]], str | None]


@dataclass(eq=False)
class Recorded:
    """One request the stand-in received, and the status it answered."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    json: Any = None  # the parsed body, None when not JSON
    api: API | None = None
    status: int = 0
    error: str = ""  # the error message of a 4xx answer


@dataclass(frozen=True)
class _Call:
    id: str
    item_id: str
    name: str
    arguments: str


def _fragments(text: str) -> list[str]:
    """``text`` in three pieces (streams send arguments in fragments)."""
    a, b = len(text) // 3, 2 * len(text) // 3
    return [p for p in (text[:a], text[a:b], text[b:]) if p]


# ----------------------------------------------------------------------------- payloads
# Each builder returns one JSON document (buffered) or a list of SSE events: (name, data)
# for named events, a bare string for a data-only line ("[DONE]").


def _usage_chat() -> dict[str, int]:
    return {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}


def chat_buffered(calls: Sequence[_Call], text: str, model: str) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": text if not calls else None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return {
        "id": "chatcmpl-reuse",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": _usage_chat(),
    }


def chat_stream(calls: Sequence[_Call], text: str, model: str) -> list[Any]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        doc = {
            "id": "chatcmpl-reuse",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "choices": [choice],
        }
        return (None, doc)

    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    for i, c in enumerate(calls):
        # the id, type and name come only in the first delta of each index
        first = {"index": i, "id": c.id, "type": "function"}
        events.append(
            chunk({"tool_calls": [{**first, "function": {"name": c.name, "arguments": ""}}]})
        )
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]})
            for frag in _fragments(c.arguments)
        ]
    if not calls:
        events += [chunk({"content": frag}) for frag in _fragments(text)]
    events.append(chunk({}, "tool_calls" if calls else "stop"))
    events.append("[DONE]")
    return events


def _fc_item(c: _Call, done: bool) -> dict[str, Any]:
    return {
        "id": c.item_id,
        "type": "function_call",
        "status": "completed" if done else "in_progress",
        "arguments": c.arguments if done else "",
        "call_id": c.id,
        "name": c.name,
    }


def _msg_item(text: str | None) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    status = "in_progress" if text is None else "completed"
    return {
        "id": "msg_reuse",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def _response(status: str, output: list[Any], model: str) -> dict[str, Any]:
    done = status == "completed"
    return {
        "id": "resp_reuse",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 12,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 52,
        }
        if done
        else None,
    }


def responses_buffered(calls: Sequence[_Call], text: str, model: str) -> Any:
    output = [_fc_item(c, True) for c in calls] if calls else [_msg_item(text)]
    return _response("completed", output, model)


def responses_stream(calls: Sequence[_Call], text: str, model: str) -> list[Any]:
    seq = itertools.count()
    events: list[Any] = []

    def ev(type_: str, **fields: Any) -> None:
        events.append((type_, {"type": type_, "sequence_number": next(seq), **fields}))

    ev("response.created", response=_response("in_progress", [], model))
    ev("response.in_progress", response=_response("in_progress", [], model))
    for i, c in enumerate(calls):
        ev("response.output_item.added", output_index=i, item=_fc_item(c, False))
        for frag in _fragments(c.arguments):
            ev(
                "response.function_call_arguments.delta",
                item_id=c.item_id,
                output_index=i,
                delta=frag,
            )
        ev(
            "response.function_call_arguments.done",
            item_id=c.item_id,
            output_index=i,
            name=c.name,
            arguments=c.arguments,
        )
        ev("response.output_item.done", output_index=i, item=_fc_item(c, True))
    if not calls:
        where = {"item_id": "msg_reuse", "output_index": 0, "content_index": 0}
        ev("response.output_item.added", output_index=0, item=_msg_item(None))
        ev("response.content_part.added", **where, part=_text_part(""))
        for frag in _fragments(text):
            ev("response.output_text.delta", **where, delta=frag)
        ev("response.output_text.done", **where, text=text)
        ev("response.content_part.done", **where, part=_text_part(text))
        ev("response.output_item.done", output_index=0, item=_msg_item(text))
    ev("response.completed", response=responses_buffered(calls, text, model))
    return events


def _ant_message(content: list[Any], stop: str | None, model: str, out_tokens: int) -> Any:
    return {
        "id": "msg_01ReuseStandIn",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 40,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": out_tokens,
        },
    }


def _tool_use(c: _Call, whole: bool) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": c.id,
        "name": c.name,
        "input": json.loads(c.arguments) if whole else {},
    }


def anthropic_buffered(calls: Sequence[_Call], text: str, model: str) -> Any:
    if calls:
        return _ant_message([_tool_use(c, True) for c in calls], "tool_use", model, 12)
    return _ant_message([{"type": "text", "text": text}], "end_turn", model, 12)


def anthropic_stream(calls: Sequence[_Call], text: str, model: str) -> list[Any]:
    events: list[Any] = []

    def ev(type_: str, **fields: Any) -> None:
        events.append((type_, {"type": type_, **fields}))

    ev("message_start", message=_ant_message([], None, model, 1))
    ev("ping")
    for i, c in enumerate(calls):
        ev("content_block_start", index=i, content_block=_tool_use(c, False))
        for frag in _fragments(c.arguments):
            ev(
                "content_block_delta",
                index=i,
                delta={"type": "input_json_delta", "partial_json": frag},
            )
        ev("content_block_stop", index=i)
    if not calls:
        ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
        for frag in _fragments(text):
            ev("content_block_delta", index=0, delta={"type": "text_delta", "text": frag})
        ev("content_block_stop", index=0)
    ev(
        "message_delta",
        delta={"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None},
        usage={"output_tokens": 12},
    )
    ev("message_stop")
    return events


BUILDERS = {
    ("chat", False): chat_buffered,
    ("chat", True): chat_stream,
    ("responses", False): responses_buffered,
    ("responses", True): responses_stream,
    ("anthropic", False): anthropic_buffered,
    ("anthropic", True): anthropic_stream,
}


def render_sse(events: Sequence[Any]) -> list[bytes]:
    """One SSE frame per event: ``event:`` line for named events, then ``data:``."""
    frames = []
    for event in events:
        if isinstance(event, str):
            frames.append(f"data: {event}\n\n")
            continue
        name, data = event
        head = f"event: {name}\n" if name else ""
        frames.append(f"{head}data: {dumps(data)}\n\n")
    return [f.encode("utf-8") for f in frames]


# ----------------------------------------------------------------------------- history


def dict_items(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """The (index, element) pairs of the objects in a JSON array (nothing for a non-array)."""
    return (
        [(i, v) for i, v in enumerate(value) if isinstance(v, dict)]
        if isinstance(value, list)
        else []
    )


def count_tool_results(api: API, req: dict[str, Any]) -> int:
    """The number of tool results (Chat tool messages, Responses function_call_output
    items, Anthropic tool_result blocks) in a request's history."""
    if api == "chat":
        return sum(m.get("role") == "tool" for _, m in dict_items(req.get("messages")))
    if api == "responses":
        return sum(i.get("type") == "function_call_output" for _, i in dict_items(req.get("input")))
    return sum(
        b.get("type") == "tool_result"
        for _, m in dict_items(req.get("messages"))
        for _, b in dict_items(m.get("content"))
    )


def error_body(api: API | None, message: str) -> Any:
    if api == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


# ----------------------------------------------------------------------------- server


class ReuseUpstream:
    """The stand-in: an HTTP/1.1 server on 127.0.0.1 (free port) in a daemon thread.

    ``ids``: the raw call ids of every tool turn (several: parallel calls; they may repeat);
    ``item_ids``: the Responses item ids (default ``fc_0``, ``fc_1``, ..., reused too);
    ``name``/``arguments``: the tool called (arguments as a JSON text); ``turns``: tool turns
    before the final text; ``check``: the strict host's verdict on a request (see the module
    docstring); ``max_requests``: model requests answered before every further one gets a
    400 (``CAP_MESSAGE``); ``tls_dir``: serve HTTPS with a self-signed certificate for
    127.0.0.1 made there."""

    def __init__(
        self,
        ids: Sequence[str] = ("functions.Glob:0",),
        *,
        item_ids: Sequence[str] | None = None,
        name: str = "Glob",
        arguments: str = '{"pattern": "*.txt"}',
        turns: int = 3,
        check: Check | None = None,
        max_requests: int | None = None,
        final_text: str = FINAL_TEXT,
        tls_dir: Path | None = None,
    ) -> None:
        item_ids = list(item_ids) if item_ids is not None else [f"fc_{i}" for i in range(len(ids))]
        assert ids and len(item_ids) == len(ids)
        self.calls = [_Call(i, it, name, arguments) for i, it in zip(ids, item_ids, strict=True)]
        self.turns = turns
        self.check = check
        self.max_requests = max_requests
        self.final_text = final_text
        self.tls_dir = tls_dir
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()

    # public API

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls_dir else 'http'}://127.0.0.1:{self.port}"

    def sdk_url(self, api: API) -> str:
        """The SDK's base URL for ``api`` (openai appends /chat/completions or /responses,
        anthropic /v1/messages)."""
        return self.base_url if api == "anthropic" else f"{self.base_url}/v1"

    def url(self, api: API) -> str:
        """The endpoint of ``api``."""
        return f"{self.base_url}/v1/{API_SUFFIX[api]}"

    def model_requests(self, api: API | None = None) -> list[Recorded]:
        """The POSTs to a model endpoint (of ``api`` if given), in order."""
        with self._lock:
            found = list(self.requests)
        return [r for r in found if r.api is not None and (api is None or r.api == api)]

    def start(self) -> Self:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.standin = self
        if self.tls_dir is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls_dir.mkdir(parents=True, exist_ok=True)
            context.load_cert_chain(*make_self_signed_cert(self.tls_dir))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # keep-alive connections still waiting for a request
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(10)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # answering

    def _answer(self, rec: Recorded) -> tuple[int, str, list[bytes]]:
        """(status, content type, body pieces) for one request."""
        if rec.method == "HEAD":
            return 200, "text/plain", []
        if rec.method == "POST" and rec.path.split("?", 1)[0].endswith("/count_tokens"):
            return 200, "application/json", [b'{"input_tokens": 1}']
        if rec.method != "POST" or rec.api is None:
            return self._error(rec, 404, f"no route for {rec.method} {rec.path}")
        if not isinstance(rec.json, dict):
            return self._error(rec, 400, "the request body is not a JSON object")
        with self._lock:
            before = self.requests[: self.requests.index(rec)]
        if (
            self.max_requests is not None
            and sum(r.api is not None for r in before) >= self.max_requests
        ):
            return self._error(rec, 400, CAP_MESSAGE)
        req = rec.json
        if self.check is not None and (problem := self.check(rec.api, req)):
            return self._error(rec, 400, problem)
        done = count_tool_results(rec.api, req) // len(self.calls)
        calls = self.calls if req.get("tools") and done < self.turns else []
        model = req["model"] if isinstance(req.get("model"), str) else MODEL
        stream = req.get("stream") is True
        built = BUILDERS[(rec.api, stream)](calls, self.final_text, model)
        rec.status = 200
        if stream:
            return 200, "text/event-stream; charset=utf-8", render_sse(built)
        return 200, "application/json", [dumps(built).encode("utf-8")]

    def _error(self, rec: Recorded, status: int, message: str) -> tuple[int, str, list[bytes]]:
        rec.status, rec.error = status, message
        return status, "application/json", [dumps(error_body(rec.api, message)).encode()]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    standin: ReuseUpstream


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.standin._lock:
            self.server.standin._conns.add(self.connection)

    def finish(self) -> None:
        with self.server.standin._lock:
            self.server.standin._conns.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            body = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return body
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _handle(self) -> None:
        standin = self.server.standin
        body = self._body() if self.command != "HEAD" else b""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        rec = Recorded(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            json=parsed,
            api=api_of(self.path) if self.command == "POST" else None,
        )
        with standin._lock:
            standin.requests.append(rec)
        status, ctype, pieces = standin._answer(rec)
        if not rec.status:
            rec.status = status
        stream = ctype.startswith("text/event-stream")
        self.send_response(status)
        self.send_header("content-type", ctype)
        if stream:
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
        else:
            self.send_header("content-length", str(sum(map(len, pieces))))
        self.end_headers()
        if self.command == "HEAD":
            return
        for piece in pieces:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if stream else piece)
        if stream:
            self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_HEAD = _handle
