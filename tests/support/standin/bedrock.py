"""A stand-in for AWS Bedrock Runtime that verifies SigV4 and enforces Bedrock's id rules.

``BedrockStandIn`` is a real HTTP(S) server on 127.0.0.1 (free port, daemon thread) serving
Converse, ConverseStream, InvokeModel and InvokeModelWithResponseStream under
``/model/{modelId}/...``, as botocore's service model routes them:

- **SigV4**: a request with ``Authorization: AWS4-HMAC-SHA256 ...`` is signed again with
  botocore's own signer (``SigV4Auth``), the same credentials, the request's own timestamp,
  signed headers and bytes; a signature that differs is answered 403
  ``InvalidSignatureException`` with AWS's text. ``Authorization: Bearer`` must carry the
  stand-in's API key (else 403); a request with no ``Authorization`` is taken as it is.
- **Id rules**, answered 400 ``ValidationException`` as Bedrock words them: Converse
  ``toolUseId`` 1 to 64 characters of ``[a-zA-Z0-9_.:-]`` (service-2.json ``ToolUseId``);
  an InvokeModel Messages body Anthropic's ``^[a-zA-Z0-9_-]+$``; call ids distinct; every
  result answering a call of the message before it.
- **Answers**: a tool call whose id is Kimi-style (``functions.get_weather:N``, N the number
  of assistant turns in the history) or, for a model id containing ``reuse``, one
  Claude-shaped id every turn; streamed as eventstream frames (ConverseStream events, or InvokeModel
  ``chunk`` frames of Anthropic Messages events).

Every exchange is recorded (``exchanges``): the request's bytes and headers as they arrived,
and the response's bytes as they were sent.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from toolid.eventstream import frame

from . import messages
from .replies import Call, Reply, dumps
from .tls import make_self_signed_cert

ACCESS_KEY: Final = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY: Final = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
API_KEY: Final = "ABSKQmVkcm9ja0FQSUtleS1lMmUtc3RhbmQtaW4="  # a Bedrock API key's shape
REGION: Final = "us-east-1"

INVALID_SIGNATURE: Final = (
    "The request signature we calculated does not match the signature you provided. Check "
    "your AWS Secret Access Key and signing method. Consult the service documentation for "
    "details."
)
TOOL_USE_ID: Final = re.compile(r"[a-zA-Z0-9_.:-]+")  # service-2.json, shape ToolUseId
ANTHROPIC_ID: Final = re.compile(r"[a-zA-Z0-9_-]+")
_ROUTE: Final = re.compile(
    r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream|invoke|invoke-with-response-stream)$"
)


@dataclass
class Exchange:
    """One request as it arrived and the answer as it was sent."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    model: str = ""
    op: str = ""
    auth: str = "none"  # "sigv4", "bearer", "none"
    status: int = 0
    error: str = ""
    response: bytes = b""
    response_ids: list[str] = field(default_factory=list)


class BedrockStandIn:
    """The server (see the module docstring)."""

    def __init__(self, tls: bool = False, cert_dir: Path | None = None) -> None:
        self.tls = tls
        self.cert_dir = cert_dir
        self.cert_path: Path | None = None
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    def start(self) -> BedrockStandIn:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                exchange = Exchange(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                status, headers, payload = stand_in.answer(exchange)
                exchange.status, exchange.response = status, payload
                with stand_in._lock:
                    stand_in.exchanges.append(exchange)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        if self.tls:
            assert self.cert_dir is not None
            cert, key = make_self_signed_cert(self.cert_dir)
            self.cert_path = cert
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def authority(self) -> str:
        return f"127.0.0.1:{self.port}"

    def last(self, op: str | None = None) -> Exchange:
        with self._lock:
            return [e for e in self.exchanges if op is None or e.op == op][-1]

    # --- answering ------------------------------------------------------------------------

    def answer(self, exchange: Exchange) -> tuple[int, dict[str, str], bytes]:
        route = _ROUTE.match(exchange.path.split("?", 1)[0])
        if route is None:
            return error(404, "UnknownOperationException", "unknown operation")
        exchange.model, exchange.op = unquote(route["model"]), route["op"]
        denied = self.authenticate(exchange)
        if denied is not None:
            return denied
        try:
            request = json.loads(exchange.body)
        except ValueError:
            return error(400, "ValidationException", "Malformed input request")
        converse = exchange.op.startswith("converse")
        problem = converse_problem(request) if converse else messages_problem(request)
        if problem is not None:
            exchange.error = problem
            return error(400, "ValidationException", problem)
        turn = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
        # Kimi K2's ids (functions.NAME:COUNTER), or for a model id with "reuse" in it
        # Claude-shaped ids, the same every turn.
        tool_id = (
            "toolu_bdrk_01ReusedEveryTurn"
            if "reuse" in exchange.model
            else (f"functions.get_weather:{turn}")
        )
        exchange.response_ids = [tool_id]
        if exchange.op == "converse":
            return ok("application/json", json.dumps(converse_answer(tool_id)).encode())
        if exchange.op == "invoke":
            return ok(
                "application/json", dumps(messages.buffered(_messages_reply(tool_id))).encode()
            )
        if exchange.op == "converse-stream":
            return ok(EVENTSTREAM, b"".join(converse_stream(tool_id)))
        return ok(EVENTSTREAM, b"".join(invoke_stream(tool_id)))

    def authenticate(self, exchange: Exchange) -> tuple[int, dict[str, str], bytes] | None:
        authorization = exchange.headers.get("authorization", "")
        if authorization.startswith("AWS4-HMAC-SHA256 "):
            exchange.auth = "sigv4"
            if not verify_sigv4(exchange, self.base_url.split("://")[0]):
                exchange.error = "InvalidSignatureException"
                return error(403, "InvalidSignatureException", INVALID_SIGNATURE)
            return None
        if authorization.startswith("Bearer "):
            exchange.auth = "bearer"
            if authorization != f"Bearer {API_KEY}":
                return error(403, "AccessDeniedException", "Invalid API Key format: ...")
            return None
        return None


EVENTSTREAM: Final = "application/vnd.amazon.eventstream"


def ok(content_type: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": content_type, "x-amzn-requestid": "e2e"}, body


def error(status: int, kind: str, message: str) -> tuple[int, dict[str, str], bytes]:
    headers = {
        "content-type": "application/json",
        "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
    }
    return status, headers, json.dumps({"message": message}).encode()


def verify_sigv4(exchange: Exchange, scheme: str) -> bool:
    """Sign the request again with botocore's signer and compare (see the module doc)."""
    authorization = exchange.headers["authorization"]
    fields = dict(part.strip().split("=", 1) for part in authorization.split(" ", 1)[1].split(","))
    _, date, region, service, _ = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    headers = {name: exchange.headers.get(name, "") for name in signed}
    url = f"{scheme}://{exchange.headers.get('host', '')}{exchange.path}"
    request = AWSRequest(exchange.method, url, data=exchange.body, headers=headers)
    request.context["timestamp"] = exchange.headers.get("x-amz-date", "")
    if not request.context["timestamp"].startswith(date):
        return False
    signer = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), service, region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return bool(expected == fields["Signature"])


def converse_problem(request: dict[str, Any]) -> str | None:
    """The first id rule a Converse request breaks, in Bedrock's words."""
    messages = request.get("messages") or []
    calls_before: set[str] = set()
    seen: set[str] = set()
    for m, message in enumerate(messages):
        calls: set[str] = set()
        for c, block in enumerate(message.get("content") or []):
            for kind in ("toolUse", "toolResult"):
                if kind not in block:
                    continue
                value = block[kind].get("toolUseId")
                where = f"messages.{m + 1}.member.content.{c + 1}.member.{kind}.toolUseId"
                if not isinstance(value, str) or not 1 <= len(value) <= 64:
                    return (
                        f"1 validation error detected: Value '{value}' at '{where}' failed to "
                        "satisfy constraint: Member must have length less than or equal to 64"
                    )
                if not TOOL_USE_ID.fullmatch(value):
                    return (
                        f"1 validation error detected: Value '{value}' at '{where}' failed to "
                        "satisfy constraint: Member must satisfy regular expression pattern: "
                        "[a-zA-Z0-9_.:-]+"
                    )
                if kind == "toolUse":
                    if value in seen:
                        return (
                            "The model returned the following errors: tool_use ids must be unique"
                        )
                    seen.add(value)
                    calls.add(value)
                elif value not in calls_before:
                    return (
                        f"Expected toolResult blocks at messages.{m}.content for the following "
                        f"Ids: {', '.join(sorted(calls_before))}, but found: {value}"
                    )
        calls_before = calls
    return None


def messages_problem(request: dict[str, Any]) -> str | None:
    """The first id rule an Anthropic Messages body (InvokeModel) breaks, in Anthropic's words."""
    calls_before: set[str] = set()
    seen: set[str] = set()
    for m, message in enumerate(request.get("messages") or []):
        content = message.get("content")
        calls: set[str] = set()
        for c, block in enumerate(content if isinstance(content, list) else []):
            if block.get("type") == "tool_use":
                value = block.get("id")
                if not isinstance(value, str) or not ANTHROPIC_ID.fullmatch(value):
                    return (
                        f"messages.{m}.content.{c}.tool_use.id: String should match pattern "
                        "'^[a-zA-Z0-9_-]+$'"
                    )
                if value in seen:
                    return "messages: `tool_use` ids must be unique"
                seen.add(value)
                calls.add(value)
            elif block.get("type") == "tool_result" and block.get("tool_use_id") not in (
                calls_before
            ):
                return (
                    f"messages.{m}.content.{c}: unexpected `tool_use_id` found in `tool_result` "
                    "blocks. Each `tool_result` block must have a corresponding `tool_use` "
                    "block in the previous message."
                )
        calls_before = calls
    return None


def converse_answer(tool_id: str) -> dict[str, Any]:
    return {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"text": "Checking the weather."},
                    {
                        "toolUse": {
                            "toolUseId": tool_id,
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        }
                    },
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19},
        "metrics": {"latencyMs": 3},
    }


def _messages_reply(tool_id: str) -> Reply:
    """InvokeModel's answer: Claude's Messages shape (the renderer of ``messages``)."""
    call = Call(tool_id, "", "get_weather", '{"city": "Paris"}')
    return Reply(
        calls=[call],
        text="Checking the weather.",
        model="claude-sonnet-4-5-20250929",
        usage=(12, 7),
    )


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps(payload, separators=(",", ":")).encode())


def converse_stream(tool_id: str) -> list[bytes]:
    pad = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
    start = {"toolUse": {"toolUseId": tool_id, "name": "get_weather"}}
    return [
        _event("messageStart", {"role": "assistant", "p": pad}),
        _event(
            "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Checking."}, "p": pad}
        ),
        _event("contentBlockStop", {"contentBlockIndex": 0, "p": pad}),
        _event("contentBlockStart", {"contentBlockIndex": 1, "start": start, "p": pad}),
        _event(
            "contentBlockDelta",
            {
                "contentBlockIndex": 1,
                "delta": {"toolUse": {"input": '{"city": "Paris"}'}},
                "p": pad,
            },
        ),
        _event("contentBlockStop", {"contentBlockIndex": 1, "p": pad}),
        _event("messageStop", {"stopReason": "tool_use", "p": pad}),
        _event(
            "metadata",
            {
                "usage": {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19},
                "metrics": {"latencyMs": 3},
                "p": pad,
            },
        ),
    ]


def invoke_stream(tool_id: str) -> list[bytes]:
    """The Messages events, each base64 in a ``chunk`` frame; Bedrock adds its metrics to
    ``message_stop``."""
    events = [data for _, data in messages.stream(_messages_reply(tool_id))]
    events[-1] = {**events[-1], "amazon-bedrock-invocationMetrics": {"inputTokenCount": 12}}
    return [
        _event("chunk", {"bytes": base64.b64encode(dumps(e).encode()).decode(), "p": "abcd"})
        for e in events
    ]
