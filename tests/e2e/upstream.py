"""A real local upstream LLM server for the end-to-end tests.

It behaves like Kimi K2 served by vLLM: the first turn of a conversation returns tool
calls whose ids are configurable raw ids (``functions.get_weather:0`` by default), the
turn that carries the tool results returns a final text answer. It speaks OpenAI Chat
Completions, OpenAI Responses and Anthropic Messages, buffered and as SSE streams.

The server is a hand-written asyncio HTTP/1.1 server running in a background thread, so
the tests control every byte written: Content-Length, chunked or read-until-close
framing, tiny random writes with flushes (ids split across TCP segments), CRLF or LF SSE
line endings, gzip bodies and streams (also when the client did not ask for them), TLS
with a self-signed certificate, and a pause after the first events of a stream.

Each test registers a :class:`Scenario` and gets a :class:`ScenarioHandle`; requests are
routed by the path prefix ``/s/<key>/`` (the API is recognised by the path suffix, as
the proxy does), so one server serves the whole test session while every test sees only
its own :class:`Exchange` records.

Responses are built from *templates*: JSON documents in which every tool-call id is a
placeholder string literal (``"@@CALL0@@"``). The bytes sent replace each placeholder by
the JSON literal of the raw id; the bytes a client should receive through the proxy
replace it by ``"<encode(raw)>"``. Every other byte must be identical.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import itertools
import json
import random
import re
import socket
import ssl
import tempfile
import threading
import traceback
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

API = Literal["chat", "responses", "anthropic"]
Framing = Literal["length", "chunked", "close"]
Writes = Literal["whole", "events", "random"]

MODEL = "moonshotai/Kimi-K2-Instruct"
CREATED = 1760000000
DEFAULT_RAW_ID = "functions.get_weather:0"
TOOL_NAMES = ("get_weather", "get_time", "get_news", "get_tide")
TOOL_ARGS = '{"city": "Paris", "unit": "celsius"}'
ARG_FRAGMENTS = ('{"city', '": "Par', 'is", "un', 'it": "cel', 'sius"}')
FINAL_TEXT = "It is sunny in Paris: 22 °C, light wind — enjoy your walk!"
FINAL_FRAGMENTS = ("It is sunny", " in Paris: 22 °C", ", light wind", " — enjoy your walk!")
assert "".join(ARG_FRAGMENTS) == TOOL_ARGS
assert "".join(FINAL_FRAGMENTS) == FINAL_TEXT

PLACEHOLDER = re.compile(rb'"@@(CALL|ITEM|SRV)(\d+)@@"')


def call_ph(i: int) -> str:
    return f"@@CALL{i}@@"


def item_ph(i: int) -> str:
    return f"@@ITEM{i}@@"


def srv_ph(i: int) -> str:
    return f"@@SRV{i}@@"


def json_literal(value: str, ensure_ascii: bool = False) -> bytes:
    """The JSON string literal of ``value``, as a server would write it."""
    if not ensure_ascii:
        try:
            return json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: only the escaped form is valid JSON
            pass
    return json.dumps(value, ensure_ascii=True).encode("ascii")


def dumps(obj: Any) -> str:
    # vLLM (pydantic) writes compact JSON with raw UTF-8.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# ----------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    """How the upstream answers the requests of one test."""

    raw_ids: list[str] = field(default_factory=lambda: [DEFAULT_RAW_ID])
    # Responses API item ids (``output[].id``); default: "fc_" + call id (so they need
    # encoding exactly when the call id does).
    item_ids: list[str] | None = None
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
    # Anthropic only: server tool ids. Turn 1 then also carries server_tool_use blocks with
    # these ids, web_search_tool_result blocks pointing at them (tool_use_id), and the
    # tool_use blocks name the first as their caller (caller.tool_id). When streamed, the
    # first server_tool_use block comes inside message_start.message.content.
    server_tool_ids: list[str] = field(default_factory=list)
    # Fault injection: a coroutine that writes the whole response itself (anything, even
    # broken HTTP) instead of the Kimi-like answer; see "custom responders" below. It returns
    # whether the connection may be reused.
    responder: Responder | None = None

    def __post_init__(self) -> None:
        if self.item_ids is None:
            self.item_ids = ["fc_" + raw for raw in self.raw_ids]
        assert len(self.item_ids) == len(self.raw_ids)
        assert len(self.raw_ids) <= len(TOOL_NAMES)

    def placeholders(self) -> dict[str, str]:
        """placeholder -> raw id, for every id this scenario's responses carry."""
        assert self.item_ids is not None
        out = {call_ph(i): raw for i, raw in enumerate(self.raw_ids)}
        out.update({item_ph(i): raw for i, raw in enumerate(self.item_ids)})
        out.update({srv_ph(i): raw for i, raw in enumerate(self.server_tool_ids)})
        return out


@dataclass
class Exchange:
    """One request the upstream received and the response it sent."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    api: API | None = None
    turn: int = 0
    stream: bool = False
    status: int = 0
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
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self) -> Any:
        return json.loads(self.body)

    def expected_client_bytes(self, client_id: Callable[[str], str]) -> bytes:
        """The response entity a client should receive: every id literal replaced by
        ``"client_id(raw)"``, every other byte as sent."""

        def sub(m: re.Match[bytes]) -> bytes:
            raw = self.placeholders[f"@@{m.group(1).decode()}{m.group(2).decode()}@@"]
            return b'"' + client_id(raw).encode("utf-8", "surrogatepass") + b'"'

        return PLACEHOLDER.sub(sub, self.template)


class ScenarioHandle:
    def __init__(self, server: UpstreamServer, key: str, scenario: Scenario) -> None:
        self.server = server
        self.key = key
        self.scenario = scenario
        self.exchanges: list[Exchange] = []
        self.release = threading.Event()  # ends a ``pause_after_events`` pause

    @property
    def prefix(self) -> str:
        return f"{self.server.base_url}/s/{self.key}"

    def base_url(self, api: API) -> str:
        """The SDK base URL for ``api`` (openai adds /chat/completions, /responses;
        anthropic adds /v1/messages)."""
        return self.prefix if api == "anthropic" else f"{self.prefix}/v1"

    def url(self, api: API) -> str:
        return f"{self.prefix}/v1/{API_SUFFIX[api]}"

    def turn(self, n: int) -> Exchange:
        found = [e for e in self.exchanges if e.turn == n]
        assert len(found) == 1, f"expected one turn-{n} request, got {self.exchanges!r}"
        return found[0]


Responder = Callable[[Exchange, asyncio.StreamWriter, ScenarioHandle], Awaitable[bool]]


API_SUFFIX: dict[API, str] = {
    "chat": "chat/completions",
    "responses": "responses",
    "anthropic": "messages",
}


def api_of(path: str) -> API | None:
    path = path.split("?", 1)[0]
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/v1/messages"):
        return "anthropic"
    return None


def is_second_turn(api: API, req: dict[str, Any]) -> bool:
    if api == "chat":
        return any(m.get("role") == "tool" for m in req.get("messages", []))
    if api == "responses":
        items = req.get("input")
        return isinstance(items, list) and any(
            isinstance(i, dict) and i.get("type") == "function_call_output" for i in items
        )
    for m in req.get("messages", []):
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return True
    return False


# ----------------------------------------------------------------------------- payloads
#
# Each builder returns a list of "events": for a buffered response one element (the JSON
# document), for a stream one element per SSE event. Ids are placeholders.


def _chat_base(obj: str) -> dict[str, Any]:
    return {"id": "chatcmpl-9f1c2e7ab3d84c0e", "object": obj, "created": CREATED, "model": MODEL}


def chat_buffered(sc: Scenario, turn: int) -> list[Any]:
    if turn == 1:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [
                {
                    "id": call_ph(i),
                    "type": "function",
                    "function": {"name": TOOL_NAMES[i], "arguments": TOOL_ARGS},
                }
                for i in range(len(sc.raw_ids))
            ],
            "reasoning_content": None,
        }
        finish, usage = "tool_calls", (61, 23)
    else:
        message = {
            "role": "assistant",
            "content": FINAL_TEXT,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": [],
            "reasoning_content": None,
        }
        finish, usage = "stop", (102, 17)
    return [
        {
            **_chat_base("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {
                "prompt_tokens": usage[0],
                "total_tokens": sum(usage),
                "completion_tokens": usage[1],
                "prompt_tokens_details": None,
            },
            "prompt_logprobs": None,
            "kv_transfer_params": None,
        }
    ]


def chat_stream(sc: Scenario, turn: int) -> list[Any]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **_chat_base("chat.completion.chunk"),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    events: list[Any] = [chunk({"role": "assistant", "content": ""})]
    if turn == 1:
        for i in range(len(sc.raw_ids)):
            # the id, type and name come only in the first delta of each index
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "id": call_ph(i),
                                "type": "function",
                                "index": i,
                                "function": {"name": TOOL_NAMES[i], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            events.extend(
                chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]})
                for frag in ARG_FRAGMENTS
            )
        events.append(chunk({}, "tool_calls"))
    else:
        events.extend(chunk({"content": frag}) for frag in FINAL_FRAGMENTS)
        events.append(chunk({}, "stop"))
    events.append("[DONE]")
    return events


def _resp_usage(turn: int) -> dict[str, Any]:
    i, o = (61, 23) if turn == 1 else (102, 17)
    return {
        "input_tokens": i,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": i + o,
    }


def _resp_obj(status: str, output: list[Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": "resp_8c3f0a51e2b94d7f",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "store": False,
        "temperature": 0.6,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def _fc_item(i: int, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_ph(i),
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call_ph(i),
        "name": TOOL_NAMES[i],
    }


MSG_ID = "msg_5b0e6c1d9a2f4e83"


def _msg_item(status: str, text: str | None) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text)]
    return {
        "id": MSG_ID,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def responses_buffered(sc: Scenario, turn: int) -> list[Any]:
    if turn == 1:
        output = [_fc_item(i, "completed", TOOL_ARGS) for i in range(len(sc.raw_ids))]
    else:
        output = [_msg_item("completed", FINAL_TEXT)]
    return [_resp_obj("completed", output, _resp_usage(turn))]


def responses_stream(sc: Scenario, turn: int) -> list[Any]:
    seq = itertools.count()
    events: list[Any] = []

    def ev(type_: str, **fields: Any) -> None:
        events.append((type_, {"type": type_, "sequence_number": next(seq), **fields}))

    ev("response.created", response=_resp_obj("in_progress", [], None))
    ev("response.in_progress", response=_resp_obj("in_progress", [], None))
    if turn == 1:
        n = len(sc.raw_ids)
        for i in range(n):
            ev("response.output_item.added", output_index=i, item=_fc_item(i, "in_progress", ""))
            for frag in ARG_FRAGMENTS:
                ev(
                    "response.function_call_arguments.delta",
                    item_id=item_ph(i),
                    output_index=i,
                    delta=frag,
                )
            ev(
                "response.function_call_arguments.done",
                item_id=item_ph(i),
                output_index=i,
                name=TOOL_NAMES[i],
                arguments=TOOL_ARGS,
            )
            ev(
                "response.output_item.done",
                output_index=i,
                item=_fc_item(i, "completed", TOOL_ARGS),
            )
        output = [_fc_item(i, "completed", TOOL_ARGS) for i in range(n)]
    else:
        ev("response.output_item.added", output_index=0, item=_msg_item("in_progress", None))
        where = {"item_id": MSG_ID, "output_index": 0, "content_index": 0}
        ev("response.content_part.added", **where, part=_text_part(""))
        for frag in FINAL_FRAGMENTS:
            ev("response.output_text.delta", **where, delta=frag, logprobs=[])
        ev("response.output_text.done", **where, text=FINAL_TEXT, logprobs=[])
        ev("response.content_part.done", **where, part=_text_part(FINAL_TEXT))
        ev("response.output_item.done", output_index=0, item=_msg_item("completed", FINAL_TEXT))
        output = [_msg_item("completed", FINAL_TEXT)]
    ev("response.completed", response=_resp_obj("completed", output, _resp_usage(turn)))
    return events


def _ant_usage(turn: int) -> dict[str, Any]:
    return {
        "input_tokens": 61 if turn == 1 else 102,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 23 if turn == 1 else 17,
        "service_tier": "standard",
    }


ANT_MSG_ID = "msg_01XFDUDYJgAACzvnptvVoYEL"
ANT_PREAMBLE = "Let me check the weather in Paris."


def _ant_message(content: list[Any], stop: str | None, usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": ANT_MSG_ID,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _ant_tool_use(sc: Scenario, i: int, whole: bool) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_use",
        "id": call_ph(i),
        "name": TOOL_NAMES[i],
        "input": json.loads(TOOL_ARGS) if whole else {},
    }
    if sc.server_tool_ids:
        block["caller"] = {"type": "code_execution_20250825", "tool_id": srv_ph(0)}
    return block


def _ant_server_use(j: int, whole: bool) -> dict[str, Any]:
    return {
        "type": "server_tool_use",
        "id": srv_ph(j),
        "name": "web_search",
        "input": {"query": "Paris weather"} if whole else {},
    }


def _ant_search_result(j: int) -> dict[str, Any]:
    return {
        "type": "web_search_tool_result",
        "tool_use_id": srv_ph(j),
        "content": [
            {
                "type": "web_search_result",
                "title": "Paris weather",
                "url": "https://example.com/paris",
                "encrypted_content": "RW5jcnlwdGVk",
                "page_age": None,
            }
        ],
    }


def anthropic_buffered(sc: Scenario, turn: int) -> list[Any]:
    if turn == 1:
        content: list[Any] = [_ant_server_use(j, True) for j in range(len(sc.server_tool_ids))]
        content += [_ant_search_result(j) for j in range(len(sc.server_tool_ids))]
        content.append({"type": "text", "text": ANT_PREAMBLE})
        content += [_ant_tool_use(sc, i, True) for i in range(len(sc.raw_ids))]
        return [_ant_message(content, "tool_use", _ant_usage(1))]
    return [_ant_message([{"type": "text", "text": FINAL_TEXT}], "end_turn", _ant_usage(2))]


def anthropic_stream(sc: Scenario, turn: int) -> list[Any]:
    events: list[Any] = []

    def ev(type_: str, **fields: Any) -> None:
        events.append((type_, {"type": type_, **fields}))

    n_srv = len(sc.server_tool_ids) if turn == 1 else 0
    start_usage = {**_ant_usage(turn), "output_tokens": 1}
    early = [_ant_server_use(0, True)] if n_srv else []
    ev("message_start", message=_ant_message(early, None, start_usage))
    ev("ping")
    idx = len(early)
    for j in range(1, n_srv):
        ev("content_block_start", index=idx, content_block=_ant_server_use(j, False))
        ev(
            "content_block_delta",
            index=idx,
            delta={"type": "input_json_delta", "partial_json": '{"query": "Paris weather"}'},
        )
        ev("content_block_stop", index=idx)
        idx += 1
    for j in range(n_srv):
        ev("content_block_start", index=idx, content_block=_ant_search_result(j))
        ev("content_block_stop", index=idx)
        idx += 1
    ev("content_block_start", index=idx, content_block={"type": "text", "text": ""})
    text_frags = ANT_PREAMBLE.split(" ") if turn == 1 else list(FINAL_FRAGMENTS)
    if turn == 1:
        text_frags = [w if j == 0 else " " + w for j, w in enumerate(text_frags)]
    for frag in text_frags:
        ev("content_block_delta", index=idx, delta={"type": "text_delta", "text": frag})
    ev("content_block_stop", index=idx)
    idx += 1
    if turn == 1:
        for i in range(len(sc.raw_ids)):
            ev("content_block_start", index=idx, content_block=_ant_tool_use(sc, i, False))
            ev(
                "content_block_delta",
                index=idx,
                delta={"type": "input_json_delta", "partial_json": ""},
            )
            for frag in ARG_FRAGMENTS:
                ev(
                    "content_block_delta",
                    index=idx,
                    delta={"type": "input_json_delta", "partial_json": frag},
                )
            ev("content_block_stop", index=idx)
            idx += 1
    usage = _ant_usage(turn)
    ev(
        "message_delta",
        delta={"stop_reason": "tool_use" if turn == 1 else "end_turn", "stop_sequence": None},
        usage={"output_tokens": usage["output_tokens"]},
    )
    ev("message_stop")
    return events


BUILDERS: dict[tuple[API, bool], Callable[[Scenario, int], list[Any]]] = {
    ("chat", False): chat_buffered,
    ("chat", True): chat_stream,
    ("responses", False): responses_buffered,
    ("responses", True): responses_stream,
    ("anthropic", False): anthropic_buffered,
    ("anthropic", True): anthropic_stream,
}


def render_template(sc: Scenario, api: API, stream: bool, turn: int) -> list[bytes]:
    """The response entity as a list of byte templates (one per SSE event)."""
    events = BUILDERS[(api, stream)](sc, turn)
    if not stream:
        return [dumps(events[0]).encode("utf-8")]
    nl = sc.newline
    trail = " " if sc.sse_extras else ""
    out: list[bytes] = []

    def data_lines(obj: Any) -> str:
        if isinstance(obj, str):
            return f"data: {obj}{trail}{nl}"
        if sc.multiline_data:  # JSON allows a newline between tokens; SSE joins with \n
            lines = json.dumps(obj, ensure_ascii=False, indent=1).split("\n")
            return "".join(f"data: {line}{trail}{nl}" for line in lines)
        return f"data: {dumps(obj)}{trail}{nl}"

    for n, event in enumerate(events):
        if isinstance(event, tuple):
            name, data = event
            text = f"event: {name}{nl}{data_lines(data)}{nl}"
        else:
            text = f"{data_lines(event)}{nl}"
        if sc.sse_extras and n % 3 == 1:
            text = f": keep-alive{nl}{nl}" + text
        out.append(text.encode("utf-8"))
    return out


def fill(template: bytes, placeholders: dict[str, str], ensure_ascii: bool) -> bytes:
    def sub(m: re.Match[bytes]) -> bytes:
        raw = placeholders[f"@@{m.group(1).decode()}{m.group(2).decode()}@@"]
        return json_literal(raw, ensure_ascii)

    return PLACEHOLDER.sub(sub, template)


# ----------------------------------------------------------------------------- TLS


def make_self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost (made with ``cryptography``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toolid e2e upstream")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "upstream-cert.pem"
    key_path = directory / "upstream-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


# ----------------------------------------------------------------------------- server


class UpstreamServer:
    """The asyncio HTTP/1.1 server, run in a daemon thread."""

    def __init__(self, tls: bool = False, cert_dir: Path | None = None) -> None:
        self.tls = tls
        self.cert_dir = cert_dir
        self.cert_path: Path | None = None
        self.port = 0
        self.handles: dict[str, ScenarioHandle] = {}
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
                headers = [
                    (k.strip(), v.strip())
                    for k, v in (line.split(":", 1) for line in lines[1:] if line)
                ]
                hmap = {k.lower(): v for k, v in headers}
                if "chunked" in hmap.get("transfer-encoding", "").lower():
                    body = await self._read_chunked(reader)
                else:
                    body = await reader.readexactly(int(hmap.get("content-length", "0")))
                ex = Exchange(method=method, path=target, headers=headers, body=body)
                keep_alive = await self._respond(ex, writer)
                ex.done.set()
                if not keep_alive or hmap.get("connection", "").lower() == "close":
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

    async def _simple(
        self, ex: Exchange, writer: asyncio.StreamWriter, status: int, text: str
    ) -> bool:
        body = json.dumps({"error": {"message": text, "type": "e2e_upstream"}}).encode()
        ex.status = status
        ex.sent = ex.wire = body
        writer.write(
            f"HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        return True

    async def _respond(self, ex: Exchange, writer: asyncio.StreamWriter) -> bool:
        m = re.match(r"/s/([^/]+)/", ex.path)
        handle = self.handles.get(m.group(1)) if m else None
        if handle is None:
            self.unrouted.append(ex)
            return await self._simple(ex, writer, 404, f"no scenario for {ex.path}")
        handle.exchanges.append(ex)
        sc = handle.scenario
        api = api_of(ex.path)
        ex.api = api
        if sc.responder is not None:
            try:
                return await sc.responder(ex, writer, handle)
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
                ex.aborted.set()
                raise
        if api is None or ex.method != "POST":
            return await self._simple(ex, writer, 404, f"unknown API path {ex.path}")
        try:
            req = json.loads(ex.body)
        except ValueError as e:
            return await self._simple(ex, writer, 400, f"request body is not JSON: {e}")
        ex.stream = bool(req.get("stream"))
        ex.turn = 2 if is_second_turn(api, req) else 1
        ex.placeholders = sc.placeholders()
        parts = render_template(sc, api, ex.stream, ex.turn)
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
        head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in rh) + "\r\n"
        writer.write(head.encode("latin-1"))
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
            writer.write(b"0\r\n\r\n")
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
            if framing == "chunked":
                writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            else:
                writer.write(piece)
            await writer.drain()
            if sc.writes != "whole" and (sc.writes == "events" or n % sc.sleep_every == 0):
                await asyncio.sleep(0.001)


# ----------------------------------------------------------------------------- custom responders
#
# Building blocks for ``Scenario.responder`` coroutines (fault injection: broken framing,
# corrupt compression, error pages, huge events, connections closed mid-body). A responder
# gets the Exchange (request already read), the writer and the handle; it records what it
# sent in ``ex.sent`` / ``ex.wire`` (or a digest in ``ex.extra``) and counts ``ex.written``.


def kimi_parts(
    sc: Scenario, api: API, stream: bool, turn: int = 1
) -> tuple[list[bytes], list[bytes], dict[str, str]]:
    """The usual Kimi-like answer: (templates, filled bytes) per event, and placeholders."""
    placeholders = sc.placeholders()
    parts = render_template(sc, api, stream, turn)
    return parts, [fill(p, placeholders, sc.ensure_ascii) for p in parts], placeholders


def client_bytes(
    template: bytes, placeholders: dict[str, str], client_id: Callable[[str], str]
) -> bytes:
    """``template`` with every placeholder replaced by the literal ``"client_id(raw)"``."""

    def sub(m: re.Match[bytes]) -> bytes:
        raw = placeholders[f"@@{m.group(1).decode()}{m.group(2).decode()}@@"]
        return b'"' + client_id(raw).encode("utf-8", "surrogatepass") + b'"'

    return PLACEHOLDER.sub(sub, template)


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
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    writer.write((head + "\r\n").encode("latin-1"))
    await writer.drain()


async def write_body(
    writer: asyncio.StreamWriter, ex: Exchange, data: bytes, chunked: bool = False
) -> None:
    """Write (and drain) one piece of the body, chunk-framed if asked; count it."""
    if not data:
        return
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data)
    await writer.drain()
    ex.written += len(data)


async def end_chunked(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")
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
