"""`scripts/proxy --web` end to end: a real mitmweb with the addon, loopback only.

One test starts the real script (through bash, reusing the repo's .venv) as a reverse proxy
in front of a tiny local Chat Completions upstream, then checks that:

- the web UI answers on 127.0.0.1 (with the ``?token=...`` mitmweb logs at startup) and
  asks for authentication without it;
- neither the web UI nor the proxy is reachable on the machine's non-loopback addresses
  (that part is skipped when the machine has none);
- a flow sent through the proxy shows up in mitmweb's ``/flows`` API with the toolid
  comment, and mitmweb offers the ``toolid`` contentview for its response, with the
  encoded id annotated with the raw one (also as the view ``auto`` picks);
- a streamed (SSE) answer to a history that already holds that id is stored for the UI
  (``store_streamed_bodies``), and the toolid view shows it event by event with the
  occurrence-tagged id named as the 2nd use of the raw id.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
PROXY_SCRIPT = REPO / "scripts" / "proxy"
BASH = shutil.which("bash") or "/bin/bash"
START_TIMEOUT = 20.0
RAW = "functions.get_weather:0"
ENCODED = "tid1_functions-2Eget_weather-3A0"
COMMENT = f"toolid: 1 encoded ({RAW} -> {ENCODED})"
WEB_URL = re.compile(r"Web server listening at (http://\S+/)\?token=([0-9a-f]+)")

CHAT_RESPONSE: dict[str, Any] = {
    "id": "chatcmpl-web",
    "object": "chat.completion",
    "created": 1760000000,
    "model": "moonshotai/Kimi-K2-Instruct",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": RAW,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}


def chat_stream() -> bytes:
    """The same tool call as ``CHAT_RESPONSE``, as Chat Completions SSE chunks."""
    call = dict(CHAT_RESPONSE["choices"][0]["message"]["tool_calls"][0], index=0)
    chunks = [
        {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    events = [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks]
    return b"".join(events) + b"data: [DONE]\n\n"


class _Upstream(BaseHTTPRequestHandler):
    """Answers every POST with one Chat Completions tool call whose id is ``RAW`` (the same
    id every time, as servers that reuse ids do), streamed when the request asks."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if request.get("stream"):
            data, content_type = chat_stream(), "text/event-stream"
        else:
            data = json.dumps(CHAT_RESPONSE, separators=(",", ":")).encode()
            content_type = "application/json"
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def non_loopback_addresses() -> list[str]:
    """This machine's own non-loopback IP addresses that a local client can connect to."""
    candidates: set[str] = set()
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((probe, 9))  # UDP: picks the outgoing address, sends nothing
            candidates.add(s.getsockname()[0])
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM):
            candidates.add(str(info[4][0]))
    usable = []
    for address in sorted(candidates):
        if address.startswith(("127.", "::1", "fe80:", "::ffff:127.")) or address == "::":
            continue
        if _reachable_here(address):
            usable.append(address)
    return usable


def _reachable_here(address: str) -> bool:
    """Whether a listener bound to ``address`` accepts a connection from this machine."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as server:
            server.bind((address, 0))
            server.listen(1)
            with socket.create_connection(server.getsockname()[:2], timeout=1):
                return True
    except OSError:
        return False


def accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace") if path.exists() else ""


def wait_for_web_url(proc: subprocess.Popen[bytes], log: Path) -> tuple[str, str]:
    """The web UI's base URL and token, from the startup line mitmweb logs."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if match := WEB_URL.search(read(log)):
            return match.group(1), match.group(2)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    pytest.fail(f"mitmweb did not log its web URL within {START_TIMEOUT:.0f} s:\n{read(log)}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the script's whole process group (bash execs mitmweb, but be thorough)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_proxy_web_serves_mitmweb_with_toolid(tmp_path: Path) -> None:
    proxy_port, web_port = free_port(), free_port()
    while web_port == proxy_port:
        web_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("TOOLID_DRY_RUN", None)
    env["PYTHONUNBUFFERED"] = "1"
    log = tmp_path / "mitmweb.log"
    with upstream() as upstream_url, log.open("wb") as out:
        proc = subprocess.Popen(
            [
                BASH,
                str(PROXY_SCRIPT),
                "--web",
                "--listen-port",
                str(proxy_port),
                "--set",
                "toolid_status=127.0.0.1:0",  # a port of its own
                "--web-port",
                str(web_port),
                "--mode",
                f"reverse:{upstream_url}",
                "--set",
                f"confdir={tmp_path / 'confdir'}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
            start_new_session=True,
        )
        try:
            base, token = wait_for_web_url(proc, log)
            assert base == f"http://127.0.0.1:{web_port}/"
            check_web(base, token, proxy_port, log)
        finally:
            stop(proc)


def check_web(base: str, token: str, proxy_port: int, log: Path) -> None:
    with httpx.Client(base_url=base, trust_env=False, timeout=5) as web:
        # The UI root: a login page without the token, mitmweb's page with it.
        denied = web.get("/")
        assert denied.status_code == 403
        assert "mitmproxy" in denied.text
        page = web.get("/", params={"token": token})
        assert page.status_code == 200, page.text
        assert "text/html" in page.headers["content-type"]
        assert "<title>mitmproxy</title>" in page.text

        # Loopback only.
        assert accepts("127.0.0.1", proxy_port)
        web_port = int(base.rstrip("/").rsplit(":", 1)[1])
        for address in non_loopback_addresses():
            assert not accepts(address, web_port), f"the web UI is reachable on {address}"
            assert not accepts(address, proxy_port), f"the proxy is reachable on {address}"

        # A tool call through the reverse proxy: the client gets the encoded id.
        with httpx.Client(trust_env=False, timeout=5) as client:
            reply = client.post(
                f"http://127.0.0.1:{proxy_port}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "Weather?"}]},
            )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["tool_calls"][0]["id"] == ENCODED

        # mitmweb's API (bearer token) lists the flow with toolid's comment.
        web.headers["Authorization"] = f"Bearer {token}"
        flow = wait_for_flow(web, log, 1)
        assert flow["comment"] == COMMENT
        assert flow["request"]["path"] == "/v1/chat/completions"

        state = web.get("/state.json")
        assert state.status_code == 200
        assert "toolid" in state.json()["contentViews"]

        for view in ("toolid", "auto"):  # auto: what the UI shows unless told otherwise
            shown = web.get(f"/flows/{flow['id']}/response/content/{view}.json")
            assert shown.status_code == 200, shown.text
            body = shown.json()
            assert body["view_name"] == "toolid"
            text = body["text"]
            assert f"# toolid on this response: {COMMENT.removeprefix('toolid: ')}" in text
            # The body's id line: the encoded id, annotated with the raw one.
            (id_line,) = [line for line in text.splitlines() if f'"id": "{ENCODED}"' in line]
            assert id_line.endswith(f"# ⟵ raw {RAW}"), text

        check_streamed_flow(web, proxy_port, log)


def check_streamed_flow(web: httpx.Client, proxy_port: int, log: Path) -> None:
    """The next turn, streamed: the history holds ENCODED, the upstream reuses RAW."""
    history = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [{"id": ENCODED, "type": "function"}]},
        {"role": "tool", "tool_call_id": ENCODED, "content": "sunny"},
    ]
    with httpx.Client(trust_env=False, timeout=5) as client:
        reply = client.post(
            f"http://127.0.0.1:{proxy_port}/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": history},
        )
    tagged = f"{ENCODED}-_2"
    assert reply.status_code == 200, reply.text
    assert f'"id": "{tagged}"' in reply.text

    flow = wait_for_flow(web, log, 2)
    shown = web.get(f"/flows/{flow['id']}/response/content/toolid.json")
    assert shown.status_code == 200, shown.text
    text = shown.json()["text"]
    assert "[content missing]" not in text
    assert "4 events" in text and "# event 2" in text
    (id_line,) = [line for line in text.splitlines() if f'"id": "{tagged}"' in line]
    assert id_line.endswith(f"# ⟵ 2nd use of {RAW}"), text


def wait_for_flow(web: httpx.Client, log: Path, count: int) -> dict[str, Any]:
    """The web UI's ``count``-th flow, once there are ``count``, its response is in and
    toolid has commented on it."""
    deadline = time.monotonic() + 5
    flows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        response = web.get("/flows.json")
        assert response.status_code == 200, response.text
        flows = response.json()
        if len(flows) == count and flows[-1].get("response") and flows[-1]["comment"]:
            return flows[-1]
        time.sleep(0.05)
    pytest.fail(f"no commented flow in mitmweb's /flows: {flows}\nlog:\n{read(log)}")
