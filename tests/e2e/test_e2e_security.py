"""Security defaults, end to end. What tests/test_scripts.py (dry runs), tests/test_web.py
(mitmweb: loopback only) and test_e2e_buffered/streaming.py (observe mode changes no body
byte; toolid_hosts limits rewriting) already cover is not repeated. This adds:

- ``scripts/proxy`` itself (mitmdump, as a user starts it) listens on loopback only: not
  reachable on this machine's other addresses;
- with ``toolid_hosts`` narrower than ``*``, an HTTPS connection to another host is
  tunnelled without TLS interception (the client sees the upstream's own certificate,
  and a client that trusts only that certificate works through the proxy), while an
  in-scope host is intercepted (mitmproxy's certificate) and rewritten;
- secrets (Authorization, x-api-key, api-key, x-goog-api-key, cookies, query strings,
  bodies) never reach the output of ``scripts/proxy`` at its default verbosity, for
  rewritten flows and for flows where toolid fails open;
- with the real SDKs, ids are restored only at id positions: the same client id in user
  text, system prompts, tool arguments and tool results reaches the upstream untouched;
- ``toolid_mode=observe`` leaves request and response headers alone too, and compressed
  responses byte for byte;
- the refusal to listen beyond loopback without ``proxyauth`` comes before anything listens:
  a probe that connects to the port from before the process starts until it exits never
  gets in (mitmdump, mitmweb and the console through ``scripts/proxy``, and the launcher in
  the oldest mitmproxy 12.x).
"""

from __future__ import annotations

import contextlib
import difflib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from cryptography import x509
from standin import API, Exchange, ScenarioHandle, UpstreamServer, write_body, write_head

from tests.test_web import accepts, non_loopback_addresses
from toolid import encode

from . import cache
from .cases import APIS, wire_client
from .conftest import REPO_ROOT, Mitmdump, MitmdumpPool, free_port
from .helpers import (
    MODEL,
    TOOLS_ANTHROPIC,
    TOOLS_CHAT,
    TOOLS_RESPONSES,
    LoopResult,
    check_loop_bytes,
    dump_json,
    request_id_positions,
    sdk_http_client,
    turn1_request,
    wire_loop,
)

pytestmark = pytest.mark.e2e

KIMI = "functions.get_weather:0"
BASH = shutil.which("bash") or "/bin/bash"

# ----------------------------------------------------------------------------- scripts/proxy


@dataclass
class ScriptProxy:
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_bytes().decode("utf-8", "replace")


@pytest.fixture(scope="module")
def script_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptProxy]:
    """``scripts/proxy`` exactly as a user runs it (plus a port and a confdir of its own),
    in a terminal 200 columns wide (mitmdump shortens printed URLs to the terminal width)."""
    tmp = tmp_path_factory.mktemp("script-proxy")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("TOOLID_DRY_RUN", None)
    env.update(PYTHONUNBUFFERED="1", COLUMNS="200")
    log = tmp / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                BASH,
                str(REPO_ROOT / "scripts" / "proxy"),
                "--listen-port",
                str(port),
                "--set",
                f"confdir={tmp / 'confdir'}",
                "--set",
                "toolid_status=127.0.0.1:0",  # a port of its own
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp,
            env=env,
            start_new_session=True,
        )
    proxy = ScriptProxy(port, log, proc)
    try:
        deadline = time.monotonic() + 30
        while not accepts("127.0.0.1", port) or "proxy listening at" not in proxy.text():
            assert proc.poll() is None, f"scripts/proxy exited:\n{proxy.text()}"
            assert time.monotonic() < deadline, f"scripts/proxy did not start:\n{proxy.text()}"
            time.sleep(0.1)
        yield proxy
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = proxy.text()
    assert "Traceback" not in text and "Addon error" not in text, text


def test_scripts_proxy_listens_on_loopback_only(script_proxy: ScriptProxy) -> None:
    assert accepts("127.0.0.1", script_proxy.port)
    assert "HTTP(S) proxy listening at 127.0.0.1:" in script_proxy.text()
    addresses = non_loopback_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address to try")
    for address in addresses:
        assert not accepts(address, script_proxy.port), f"the proxy is reachable on {address}"


# Each secret travels one way; the log must show none of them.
SECRETS = {
    "authorization": "sk-AUTHORIZATION-0451",
    "x-api-key": "sk-ant-XAPIKEY-0452",
    "api-key": "AZURE-APIKEY-0453",
    "x-goog-api-key": "AIza-GOOGKEY-0454",
    "cookie": "COOKIE-SESSION-0455",
    "query": "QUERYKEY-0456",
    "body": "BODY-SECRET-0457",
}


def secret_headers() -> dict[str, str]:
    return {
        "authorization": f"Bearer {SECRETS['authorization']}",
        "x-api-key": SECRETS["x-api-key"],
        "api-key": SECRETS["api-key"],
        "x-goog-api-key": SECRETS["x-goog-api-key"],
        "cookie": f"session={SECRETS['cookie']}",
    }


def with_body_secret(request: dict[str, Any]) -> bytes:
    request = dict(request)
    request["metadata"] = {"user_id": SECRETS["body"]}
    key = "messages" if "messages" in request else "input"
    request[key] = [{"role": "user", "content": f"my key is {SECRETS['body']}"}, *request[key]]
    return dump_json(request)


async def corrupt_gzip_json(ex: Exchange, writer: Any, handle: ScenarioHandle) -> bool:
    body = gzip.compress(b'{"choices":[{"message":{"content":"' + SECRETS["body"].encode())
    body = body[:12] + b"\x00\xff" + body[14:-6]
    headers = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
        ("content-length", str(len(body))),
    ]
    await write_head(writer, headers, ex=ex)
    await write_body(writer, ex, body)
    return True


def post_raw(client: httpx.Client, url: str, content: bytes, **headers: str) -> tuple[int, bytes]:
    """POST; return the status and the raw body (not decoded: it may be corrupt gzip)."""
    with client.stream("POST", url, content=content, headers=headers) as response:
        return response.status_code, b"".join(response.iter_raw())


@pytest.fixture(scope="module")
def secret_log(script_proxy: ScriptProxy, upstream: UpstreamServer) -> str:
    """Flows carrying every secret through ``scripts/proxy``: rewritten (buffered and
    streamed, all three APIs), failed open (a request whose JSON is broken, a response
    whose gzip is corrupt, a request whose content-encoding is wrong), and a plain error.
    Returns what the proxy printed."""
    query = f"?key={SECRETS['query']}&api-version=2025-01-01"
    with httpx.Client(proxy=script_proxy.url, trust_env=False, timeout=30) as client:
        for api in APIS:
            for stream in (False, True):
                handle = upstream.scenario(ids=[KIMI])
                url = handle.url(api) + query
                first = client.post(
                    url,
                    content=with_body_secret(turn1_request(api, stream)),
                    headers={**secret_headers(), "content-type": "application/json"},
                )
                assert first.status_code == 200
                assert encode(KIMI) in first.text  # rewritten
        secrets = {**secret_headers(), "content-type": "application/json"}
        handle = upstream.scenario(ids=[KIMI])
        broken = b'{"messages":[{"role":"tool","tool_call_id":"tid1_a-3A1","content":"%s"}' % (
            SECRETS["body"].encode()
        )
        post_raw(client, handle.url("chat") + query, broken, **secrets)
        handle = upstream.scenario(responder=corrupt_gzip_json)
        body = with_body_secret(turn1_request("chat", False))
        status, _ = post_raw(client, handle.url("chat") + query, body, **secrets)
        assert status == 200
        handle = upstream.scenario(ids=[KIMI])
        body = SECRETS["body"].encode() + b" {}"  # not gzip at all, though it says so
        post_raw(
            client, handle.url("chat") + query, body, **secrets, **{"content-encoding": "gzip"}
        )
        # One more rewrite: toolid writes its change lines in order, after its warnings, so
        # once this one's line is in the log, every line about the flows above is too.
        last = upstream.scenario(ids=[KIMI])
        assert client.post(last.url("chat"), json=turn1_request("chat", False)).status_code == 200
    deadline = time.monotonic() + 10
    while not re.search(rf"toolid: \d+ encoded .*/s/{last.key}/", text := script_proxy.text()):
        assert time.monotonic() < deadline, f"no change line for the last flow:\n{text}"
        time.sleep(0.05)
    assert text.count("toolid: POST") >= 3, text  # the fail-open warnings are there
    assert len(re.findall(r"toolid: \d+ encoded", text)) >= 6, text  # and the rewrites
    return text


@pytest.mark.parametrize(
    "channel", ["authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"]
)
def test_header_secrets_never_reach_the_output(channel: str, secret_log: str) -> None:
    assert SECRETS[channel] not in secret_log


def test_body_secrets_never_reach_the_output(secret_log: str) -> None:
    """Bodies of rewritten flows and of flows toolid failed open on are not printed
    (one body starts with the secret: see test_the_start_of_a_body_never_reaches_the_output)."""
    assert SECRETS["body"] not in secret_log


def test_the_start_of_a_body_never_reaches_the_output(secret_log: str) -> None:
    """Found here (fixed in c6baa17): toolid's "cannot decode body" warning carried
    mitmproxy's decode error text, which quotes repr(body)[:10], the body's first bytes."""
    assert SECRETS["body"][:7] not in secret_log


def test_query_strings_never_reach_the_output(secret_log: str) -> None:
    """Found here (fixed in c6baa17 by scripts/proxy's flow_detail=0): mitmdump's own
    per-flow lines printed whole URLs, ?key=... included (cut only at the terminal width,
    hence the 200 columns of the fixture)."""
    assert SECRETS["query"] not in secret_log


# ----------------------------------------------------------------------------- TLS scope


def peer_certificate(proxy: Mitmdump, host: str, port: int) -> x509.Certificate:
    """CONNECT host:port through the proxy, handshake without verifying, return the
    certificate the client is shown."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with context.wrap_socket(sock, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_out_of_scope_https_is_tunnelled_untouched(
    tls_upstream: UpstreamServer, mitm: MitmdumpPool
) -> None:
    """toolid_hosts=localhost:<port>: 127.0.0.1:<port> (the same server, another name) is
    out of scope, so mitmproxy's allow_hosts tunnels it: the client sees the upstream's own
    certificate, a client that trusts only that certificate works, and nothing is
    rewritten. localhost:<port> is intercepted (mitmproxy's certificate) and rewritten."""
    port = tls_upstream.port
    proxy = mitm.get(toolid_hosts=f"localhost:{port}")
    assert tls_upstream.cert_path is not None
    own = x509.load_pem_x509_certificate(tls_upstream.cert_path.read_bytes())
    mitm_ca = x509.load_pem_x509_certificate(proxy.ca_cert.read_bytes())

    outside = peer_certificate(proxy, "127.0.0.1", port)
    assert outside == own, f"intercepted: the client was shown {outside.issuer.rfc4514_string()}"
    inside = peer_certificate(proxy, "localhost", port)
    assert inside != own
    assert inside.issuer == mitm_ca.subject
    inside.verify_directly_issued_by(mitm_ca)

    # out of scope, trusting only the upstream's certificate: works, untouched
    handle = tls_upstream.scenario(ids=[KIMI])
    with httpx.Client(
        proxy=proxy.url,
        verify=ssl.create_default_context(cafile=str(tls_upstream.cert_path)),
        trust_env=False,
        timeout=30,
    ) as client:
        result = wire_loop(client, handle, "chat", stream=True)
    assert result.turn1_body == handle.turn(1).sent
    assert handle.turn(2).body == result.requests[1]
    assert result.call_ids == [KIMI]

    # in scope, trusting mitmproxy's CA: intercepted and rewritten
    handle = tls_upstream.scenario(ids=[KIMI])
    with httpx.Client(
        proxy=proxy.url,
        verify=ssl.create_default_context(cafile=str(proxy.ca_cert)),
        trust_env=False,
        timeout=30,
    ) as client:
        result = wire_loop(client, handle, "chat", stream=True, origin=f"https://localhost:{port}")
    check_loop_bytes(result, handle)
    assert result.call_ids == [encode(KIMI)]


# ----------------------------------------------------------------------------- id positions only


def lookalike_turn2(api: API, client_id: str, turn1: Any) -> dict[str, Any]:
    """The turn-2 request an agent would send, with ``client_id`` also in every place that
    is not an id position: system prompt, user text (inside a sentence and as a whole
    message), tool arguments, tool results, metadata."""
    sentence = f"Please call {client_id} again"
    args = json.dumps({"id": client_id, "call_id": client_id, "note": sentence})
    if api == "chat":
        call = turn1.choices[0].message.tool_calls[0]
        return {
            "model": MODEL,
            "tools": TOOLS_CHAT,
            "metadata": {"last_call": client_id},
            "messages": [
                {"role": "system", "content": f"Known tool call ids: {client_id}"},
                {"role": "user", "content": sentence},
                {"role": "user", "content": client_id},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.function.name, "arguments": args},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call.id, "content": f"{client_id}: sunny"},
            ],
        }
    if api == "responses":
        call = next(o for o in turn1.output if o.type == "function_call")
        return {
            "model": MODEL,
            "tools": TOOLS_RESPONSES,
            "instructions": f"Known tool call ids: {client_id}",
            "metadata": {"last_call": client_id},
            "input": [
                {"role": "user", "content": sentence},
                {"role": "user", "content": client_id},
                {
                    "type": "function_call",
                    "id": call.id,
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": args,
                },
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": f"{client_id}: sunny",
                },
            ],
        }
    use = next(b for b in turn1.content if b.type == "tool_use")
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "tools": TOOLS_ANTHROPIC,
        "system": f"Known tool call ids: {client_id}",
        "metadata": {"user_id": client_id},
        "messages": [
            {"role": "user", "content": sentence},
            {"role": "user", "content": client_id},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": sentence},
                    {"type": "tool_use", "id": use.id, "name": use.name, "input": json.loads(args)},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": [{"type": "text", "text": f"{client_id}: sunny"}],
                    },
                    {"type": "text", "text": client_id},
                ],
            },
        ],
    }


@pytest.mark.parametrize("api", APIS)
def test_sdk_ids_restored_only_at_id_positions(
    api: API, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=[KIMI])
    client_id = encode(KIMI)
    recorded = LoopResult(api=api)
    http_client = sdk_http_client(recorded, proxy.url)
    if api == "anthropic":
        claude = anthropic.Anthropic(
            api_key="sk-ant-e2e",
            base_url=handle.base_url(api),
            http_client=http_client,
            max_retries=0,
        )
        turn1 = claude.messages.create(
            model=MODEL,
            max_tokens=1024,
            tools=TOOLS_ANTHROPIC,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": "weather?"}],
        )
        claude.messages.create(**lookalike_turn2(api, client_id, turn1))
    else:
        oai = openai.OpenAI(
            api_key="sk-e2e",
            base_url=handle.base_url(api),
            http_client=http_client,
            max_retries=0,
        )
        if api == "chat":
            turn1 = oai.chat.completions.create(
                model=MODEL,
                tools=TOOLS_CHAT,  # type: ignore[arg-type]
                messages=[{"role": "user", "content": "weather?"}],
            )
            oai.chat.completions.create(**lookalike_turn2(api, client_id, turn1))
        else:
            turn1 = oai.responses.create(model=MODEL, tools=TOOLS_RESPONSES, input="weather?")  # type: ignore[arg-type]
            oai.responses.create(**lookalike_turn2(api, client_id, turn1))
    http_client.close()
    sent = recorded.requests[-1]
    got = handle.turn(2).body
    positions = request_id_positions(api, json.loads(got))
    assert {v for kind, v in positions if kind == "call"} == {KIMI}
    # every other occurrence of the client id reached the upstream as the SDK wrote it
    n_positions = len([v for _, v in request_id_positions(api, json.loads(sent)) if v == client_id])
    assert n_positions >= 2
    assert sent.count(client_id.encode()) - n_positions == got.count(client_id.encode())
    assert got.count(client_id.encode()) >= 6
    # parsed: exactly the id positions differ, from the client id to the raw id ...
    request = json.loads(sent)
    changed = differences(request, json.loads(got))
    expected = {path: (value_at(request, path), KIMI) for path in id_paths(api, request)}
    if api == "responses":  # the function_call item's own id: "fc_" + the raw call id
        expected[("input", 2, "id")] = (encode("fc_" + KIMI), "fc_" + KIMI)
    assert changed == expected
    assert {client for client, _ in expected.values()} <= {client_id, encode("fc_" + KIMI)}
    # ... and bytes: every byte that differs lies inside a literal of a client id
    literals = b"|".join(re.escape(json.dumps(c).encode()) for c, _ in expected.values())
    spans = [m.span() for m in re.finditer(literals, sent)]
    matcher = difflib.SequenceMatcher(None, sent, got, autojunk=False)
    for tag, start, end, _, _ in matcher.get_opcodes():
        if tag != "equal":
            assert any(a <= start and end <= b for a, b in spans), (
                tag,
                sent[start - 20 : end + 20],
            )


def value_at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def differences(a: Any, b: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """{path: (a's value, b's value)} of every leaf where two parsed documents differ."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        out: dict[tuple[Any, ...], Any] = {}
        for key in a:
            out.update(differences(a[key], b[key], (*path, key)))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = {}
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out.update(differences(x, y, (*path, i)))
        return out
    return {} if a == b else {path: (a, b)}


def id_paths(api: API, request: Any) -> list[tuple[Any, ...]]:
    """The id positions of a turn-2 request, by the harness's own rules."""
    paths: list[tuple[Any, ...]] = []
    if api == "chat":
        for i, message in enumerate(request["messages"]):
            for j, _ in enumerate(message.get("tool_calls") or []):
                paths.append(("messages", i, "tool_calls", j, "id"))
            if "tool_call_id" in message:
                paths.append(("messages", i, "tool_call_id"))
    elif api == "responses":
        for i, item in enumerate(request["input"]):
            if item.get("type") in ("function_call", "function_call_output"):
                paths.append(("input", i, "call_id"))
    else:
        for i, message in enumerate(request["messages"]):
            content = message["content"]
            for j, block in enumerate(content if isinstance(content, list) else []):
                if block.get("type") == "tool_use":
                    paths.append(("messages", i, "content", j, "id"))
                if "tool_use_id" in block:
                    paths.append(("messages", i, "content", j, "tool_use_id"))
    return paths


# ----------------------------------------------------------------------------- observe mode


def headers_sent(client_headers: dict[str, str], ex: Exchange) -> dict[str, str]:
    received = ex.headers
    return {k: received.get(k, "<missing>") for k in client_headers}


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
@pytest.mark.parametrize("api", APIS)
def test_observe_mode_leaves_compressed_responses_and_their_headers(
    api: API, stream: bool, upstream: UpstreamServer, mitm: MitmdumpPool
) -> None:
    """observe: a gzip response (the upstream compresses whatever was asked) reaches the
    client byte for byte, with the same content-encoding and content-length."""
    proxy = mitm.get(toolid_mode="observe")
    handle = upstream.scenario(ids=[KIMI], gzip="force", framing="length")
    with (
        wire_client(proxy) as client,
        client.stream(
            "POST",
            handle.url(api),
            content=dump_json(turn1_request(api, stream)),
            headers={"content-type": "application/json"},
        ) as response,
    ):
        raw = b"".join(response.iter_raw())
    ex = handle.turn(1)
    assert raw == ex.wire
    for name, value in ex.response_headers:
        assert response.headers[name] == value, name
    assert response.headers["content-encoding"] == "gzip"
    assert response.headers["content-length"] == str(len(ex.wire))


@pytest.mark.parametrize("api", APIS)
def test_observe_mode_leaves_request_headers(
    api: API, upstream: UpstreamServer, mitm: MitmdumpPool
) -> None:
    """Found here (fixed in c6baa17): observe mode still set accept-encoding: identity on
    streaming requests."""
    proxy = mitm.get(toolid_mode="observe")
    handle = upstream.scenario(ids=[KIMI])
    headers = {"content-type": "application/json", "accept-encoding": "gzip, br"}
    with wire_client(proxy) as client:
        client.post(handle.url(api), content=dump_json(turn1_request(api, True)), headers=headers)
    assert headers_sent(headers, handle.turn(1)) == headers


@pytest.mark.parametrize("api", APIS)
def test_observe_mode_leaves_buffered_request_headers(
    api: API, upstream: UpstreamServer, mitm: MitmdumpPool
) -> None:
    """(Non-streaming requests: nothing to ask of the upstream, headers untouched.)"""
    proxy = mitm.get(toolid_mode="observe")
    handle = upstream.scenario(ids=[KIMI])
    headers = {
        "content-type": "application/json",
        "accept-encoding": "gzip, br",
        "x-custom": "kept",
    }
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, api, stream=False, headers=headers)
    assert headers_sent(headers, handle.turn(1)) == headers
    assert headers_sent(headers, handle.turn(2)) == headers
    assert result.call_ids == [KIMI]
    assert handle.turn(2).body == result.requests[1]


# ----------------------------------------------------------------------------- no open window

REFUSED_TIMEOUT = 30.0  # seconds for a refused proxy to exit (it exits at once)


class Probe(threading.Thread):
    """Connection attempts to 127.0.0.1 at each of ``ports`` in turn, in a tight loop until
    ``stop``: how many rounds were made and which ports got a connection."""

    def __init__(self, *ports: int) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.rounds = 0
        self.connected: list[int] = []
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            self.rounds += 1
            for port in self.ports:
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        self.connected.append(port)

    def stop(self) -> None:
        self._stop.set()
        self.join(10)


def oldest_launcher() -> list[str]:
    """The launcher run by the Python of a venv holding only the oldest mitmproxy 12.x."""
    venv = cache.venv("mitmproxy-12.0.0", ["mitmproxy==12.0.0"])
    return [
        str(venv / "bin" / "python"),
        str(REPO_ROOT / "addons" / "toolid_launch.py"),
        "mitmdump",
    ]


@pytest.mark.parametrize("how", ["mitmdump", "--web", "--console", "launcher-12.0.0"])
def test_the_open_proxy_refusal_listens_on_nothing(how: str, tmp_path: Path) -> None:
    """``--listen-host 0.0.0.0`` without proxyauth: the proxy exits 1 with the refusal, and its
    port (and mitmweb's) never accepts a connection, not even for a moment."""
    port, web_port = free_port(), free_port()
    options = ["--listen-host", "0.0.0.0", "--listen-port", str(port)]
    options += ["--set", f"confdir={tmp_path / 'confdir'}"]
    if how == "launcher-12.0.0":
        command = [*oldest_launcher(), *options]
    else:
        command = [BASH, str(REPO_ROOT / "scripts" / "proxy"), *options]
        if how != "mitmdump":
            command += [how, "--web-port", str(web_port)] if how == "--web" else [how]
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("TOOLID_DRY_RUN", None)
    if how == "launcher-12.0.0":
        env.pop("PYTHONPATH", None)  # that venv has no toolid: the addon finds this checkout
    probe = Probe(port, web_port)
    probe.start()
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=REFUSED_TIMEOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            env=env,
            check=False,
        )
    finally:
        probe.stop()
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "refusing to listen on 0.0.0.0 without proxyauth" in output, output
    assert "listening at" not in output and "Traceback" not in output, output
    assert probe.rounds > 100, probe.rounds  # it probed the whole time
    assert not probe.connected, f"ports {sorted(set(probe.connected))} accepted connections"
