"""End to end with a real agent: the Codex CLI over its default transport, the Responses API
over WebSocket, against a stand-in (``responses_ws.py``) that calls ``exec_command`` with the
Kimi-style id ``functions.exec_command:0`` in every tool turn.

Codex is driven both ways it uses WebSocket: a custom provider with
``supports_websockets = true``, and the built-in ``openai`` provider with ``openai_base_url``.
Through a reverse-mode mitmdump with toolid, the whole loop runs over WebSocket (no HTTP
fallback), Codex's rollout (its stored session, replayed on resume) holds safe, tagged client
ids (one per call), and the stand-in only ever gets its own id back. Without toolid, the
rollout holds the raw id, unsafe, and the same one for every call. With
``toolid_websocket=refuse`` Codex falls back to HTTP at once, where toolid rewrites as ever.

Over HTTP POST (a custom provider without ``supports_websockets``), against the reuse stand-in,
Codex runs the loops of ``agent_loops.py``: through toolid it completes each with one safe id
per call in its rollout and the stand-in gets its own id back; without toolid it completes
too (it does not break), with the raw id, unsafe, for every call of the run. As an HTTPS proxy,
it trusts mitmproxy's CA through ``CODEX_CA_CERTIFICATE`` or ``SSL_CERT_FILE``, over both
transports.

Codex (npm ``@openai/codex``, pinned) is installed by the first run into the cache of
``cache.py``; later runs reuse it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from toolid import codec

from .agent_loops import (
    LOOPS,
    THREE_TURNS,
    Loop,
    check_through_toolid,
    https_front,
    https_proxy,
    model_requests,
    origin,
    proxy_env,
)
from .cache import npm_bin
from .conftest import MitmdumpPool
from .helpers import run_headless
from .responses_ws import FINAL_TEXT, ResponsesWsUpstream
from .reuse_upstream import FINAL_TEXT as HTTP_FINAL_TEXT
from .reuse_upstream import ReuseUpstream

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

CODEX = ("@openai/codex", "0.171.0")
KIMI = "functions.exec_command:0"
TURNS = 2
RUN_TIMEOUT = 60.0  # seconds for one headless run, after which it is killed
PROMPT = "Run `echo hello` with exec_command, then tell me what it printed."
BETA = "responses_websockets=2026-02-06"
PROVIDERS = ["custom", "builtin"]  # the ones that use WebSocket
ECHO = '{"cmd": "echo hello"}'  # exec_command's arguments


@pytest.fixture(scope="module")
def codex() -> Path:
    """The pinned Codex CLI (installed once per machine)."""
    return npm_bin(*CODEX, "codex")


@pytest.fixture(scope="module")
def ws_upstream() -> Iterator[ResponsesWsUpstream]:
    with ResponsesWsUpstream(ids=[KIMI], turns=TURNS) as up:
        yield up


def config(provider: str, base_url: str) -> str:
    """``config.toml`` for Codex: a custom provider that allows WebSocket (``custom``) or not
    (``http``: HTTP POST only), or the built-in ``openai`` provider at another base URL
    (WebSocket is its default)."""
    if provider == "builtin":
        return f'model = "gpt-5.1"\nopenai_base_url = "{base_url}"\n'
    return (
        'model = "kimi-k3"\nmodel_provider = "standin"\n\n[model_providers.standin]\n'
        f'name = "standin"\nbase_url = "{base_url}"\nwire_api = "responses"\n'
        'env_key = "STANDIN_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
        + ("supports_websockets = true\n" if provider == "custom" else "")
    )


@dataclass
class Run:
    """One headless ``codex exec`` run."""

    returncode: int | None  # None: killed at the timeout
    seconds: float
    events: list[Any]  # the --json events on stdout
    stderr: str
    rollout: list[Any]  # the response items of its stored session

    def final_text(self) -> str | None:
        texts = [
            e["item"]["text"]
            for e in self.events
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
        ]
        return texts[-1] if texts else None

    def rollout_ids(self, kind: str) -> list[str]:
        """The call_ids of the rollout's items of type ``kind``, in order."""
        return [item["call_id"] for item in self.rollout if item.get("type") == kind]

    def summary(self) -> str:
        return (
            f"exit {self.returncode} after {self.seconds:.1f}s, final {self.final_text()!r}, "
            f"calls {self.rollout_ids('function_call')!r}; stderr: {self.stderr[-1500:]}"
        )


def run_codex(
    codex: Path,
    provider: str,
    base_url: str,
    tmp_path: Path,
    *,
    https_proxy: str | None = None,
    ca_cert: Path | None = None,
    ca_variable: str = "CODEX_CA_CERTIFICATE",
) -> Run:
    """``codex exec --json`` in a temp HOME / CODEX_HOME and working directory, stdin from
    /dev/null, killed after RUN_TIMEOUT. Every other destination is sent to a closed port,
    or, given ``https_proxy``, everything goes through that proxy (trusting ``ca_cert``, named
    by ``ca_variable``)."""
    home, work = tmp_path / "home", tmp_path / "work"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    work.mkdir()
    (codex_home / "config.toml").write_text(config(provider, base_url))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "STANDIN_KEY": "sk-e2e",
        "OPENAI_API_KEY": "sk-e2e",
        **proxy_env(https_proxy, ca_variable, ca_cert),
    }
    cmd = [
        str(codex),
        "exec",
        "--skip-git-repo-check",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
        "-C",
        str(work),
        PROMPT,
    ]
    ran = run_headless(cmd, work, env, RUN_TIMEOUT)
    rollout = []
    for path in sorted((codex_home / "sessions").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("type") == "response_item":
                rollout.append(entry["payload"])
    return Run(ran.returncode, ran.seconds, ran.events, ran.stderr, rollout)


def sent_call_ids(up: ResponsesWsUpstream, before: int) -> list[str]:
    """Every call_id the stand-in received on the connections made since ``before``."""
    return [
        item["call_id"]
        for conn in up.connections[before:]
        for request in conn.requests()
        for item in request.get("input") or []
        if isinstance(item, dict) and "call_id" in item
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_through_toolid_codex_gets_safe_tagged_ids_over_websocket(
    codex: Path, ws_upstream: ResponsesWsUpstream, mitm: MitmdumpPool, tmp_path: Path, provider: str
) -> None:
    proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}")
    before, http_before = len(ws_upstream.connections), len(ws_upstream.http_requests)
    run = run_codex(codex, provider, proxy.url + "/v1", tmp_path)
    assert run.returncode == 0 and run.final_text() == FINAL_TEXT, run.summary()
    assert ws_upstream.http_requests[http_before:] == [], "Codex fell back to HTTP"
    conns = ws_upstream.connections[before:]
    assert conns and all(c.headers.get("openai-beta") == BETA for c in conns)
    expected = [codec.encode(KIMI, "safe", k) for k in range(1, TURNS + 1)]
    assert run.rollout_ids("function_call") == expected, run.summary()
    assert run.rollout_ids("function_call_output") == expected, run.summary()
    # the stand-in got its own id back in each output, and nothing it did not emit
    assert sent_call_ids(ws_upstream, before) == [KIMI] * TURNS
    assert not ws_upstream.violations, ws_upstream.violations


@pytest.mark.parametrize("provider", PROVIDERS)
def test_without_toolid_the_raw_id_reaches_codexs_rollout(
    codex: Path, ws_upstream: ResponsesWsUpstream, mitm: MitmdumpPool, tmp_path: Path, provider: str
) -> None:
    """``toolid_websocket=pass``: Codex stores the raw id, which strict APIs reject, for
    both calls: two calls, one identity, in the session it replays on resume."""
    proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}", toolid_websocket="pass")
    before = len(ws_upstream.connections)
    run = run_codex(codex, provider, proxy.url + "/v1", tmp_path)
    assert run.returncode == 0, run.summary()
    assert run.rollout_ids("function_call") == [KIMI] * TURNS, run.summary()
    assert not codec.is_strict_safe(KIMI)
    assert len(ws_upstream.connections) > before


def test_refused_websocket_falls_back_to_http(
    codex: Path, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    """``toolid_websocket=refuse``: the upgrade gets 426, Codex goes on over HTTP POST (at
    once, no retries), and toolid rewrites there as for any HTTP client."""
    with ReuseUpstream(ids=[KIMI], name="exec_command", arguments=ECHO, turns=TURNS) as up:
        proxy = mitm.get(mode=f"reverse:{up.base_url}", toolid_websocket="refuse")
        run = run_codex(codex, "custom", proxy.url + "/v1", tmp_path)
        reqs = up.model_requests("responses")
    assert run.returncode == 0, run.summary()
    expected = [codec.encode(KIMI, "safe", k) for k in range(1, TURNS + 1)]
    assert run.rollout_ids("function_call") == expected, run.summary()
    assert len(reqs) == TURNS + 1 and all(r.method == "POST" for r in reqs)
    assert run.seconds < 20, run.summary()


@pytest.mark.parametrize("ca_variable", ["CODEX_CA_CERTIFICATE", "SSL_CERT_FILE"])
def test_through_toolid_as_an_https_proxy(
    codex: Path, mitm: MitmdumpPool, tmp_path: Path, ca_variable: str
) -> None:
    """The built-in provider at an https:// base URL with ``HTTPS_PROXY`` at a regular-mode
    mitmdump and ``CODEX_CA_CERTIFICATE`` (or ``SSL_CERT_FILE``) at its CA: wss:// through the
    proxy, rewritten."""
    with ResponsesWsUpstream(ids=[KIMI], turns=TURNS, tls_dir=tmp_path / "tls") as up:
        # Codex's own services (github.com, chatgpt.com) never reach the network from here.
        proxy = mitm.get(connection_strategy="lazy", block_list="/!~d 127.0.0.1/444")
        run = run_codex(
            codex,
            "builtin",
            up.base_url,
            tmp_path,
            https_proxy=proxy.url,
            ca_cert=proxy.ca_cert,
            ca_variable=ca_variable,
        )
        got = sent_call_ids(up, 0)
    expected = [codec.encode(KIMI, "safe", k) for k in range(1, TURNS + 1)]
    assert run.returncode == 0 and run.final_text() == FINAL_TEXT, run.summary()
    assert run.rollout_ids("function_call") == expected, run.summary()
    assert got == [KIMI] * TURNS and not up.http_requests and not up.violations


def test_parallel_calls_with_one_id_get_one_client_id_each(
    codex: Path, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    """Two parallel calls with one raw id in one response: Codex gets ``…`` and ``…-_2``, and
    both outputs reach the stand-in with its own id."""
    with ResponsesWsUpstream(ids=[KIMI, KIMI], turns=1) as up:
        proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{up.port}")
        run = run_codex(codex, "custom", proxy.url + "/v1", tmp_path)
        got = sent_call_ids(up, 0)
    expected = [codec.encode(KIMI, "safe", k) for k in (1, 2)]
    assert run.returncode == 0 and run.final_text() == FINAL_TEXT, run.summary()
    assert run.rollout_ids("function_call") == expected, run.summary()
    assert sorted(run.rollout_ids("function_call_output")) == expected, run.summary()
    assert got == [KIMI, KIMI] and not up.violations and not up.http_requests


# ----------------------------------------------------------------------------- over HTTP


@pytest.mark.parametrize("loop", LOOPS, ids=str)
def test_over_http_through_toolid_codex_completes(
    codex: Path, mitm: MitmdumpPool, tmp_path: Path, loop: Loop
) -> None:
    with loop.upstream(KIMI, "exec_command", ECHO) as up:
        proxy = mitm.get(mode=f"reverse:{origin(up.sdk_url('responses'))}")
        run = run_codex(codex, "http", proxy.url + "/v1", tmp_path)
        assert run.returncode == 0 and run.final_text() == HTTP_FINAL_TEXT, run.summary()
        calls, outputs = run.rollout_ids("function_call"), run.rollout_ids("function_call_output")
        check_through_toolid(up, "responses", loop, KIMI, calls=calls, results=outputs)
        assert len(model_requests(up, "responses")) == len(up.requests), "not only HTTP POSTs"


@pytest.mark.parametrize("loop", LOOPS, ids=str)
def test_over_http_without_toolid_the_raw_id_reaches_codexs_rollout(
    codex: Path, tmp_path: Path, loop: Loop
) -> None:
    """Straight at the stand-in: Codex completes, and stores the raw id, unsafe, for every
    call of the run (two parallel calls included): one identity for all of them."""
    with loop.upstream(KIMI, "exec_command", ECHO) as up:
        run = run_codex(codex, "http", up.sdk_url("responses"), tmp_path)
    assert run.returncode == 0 and run.final_text() == HTTP_FINAL_TEXT, run.summary()
    assert run.rollout_ids("function_call") == [KIMI] * loop.calls, run.summary()
    assert run.rollout_ids("function_call_output") == [KIMI] * loop.calls, run.summary()
    assert not codec.is_strict_safe(KIMI)


@pytest.mark.parametrize("ca_variable", ["CODEX_CA_CERTIFICATE", "SSL_CERT_FILE"])
def test_over_http_through_toolid_as_an_https_proxy(
    codex: Path, mitm: MitmdumpPool, tmp_path: Path, ca_variable: str
) -> None:
    """An ``https://`` base URL, ``HTTPS_PROXY`` at toolid in regular mode, mitmproxy's CA
    in ``ca_variable``: the three-turn loop over HTTP POST, rewritten."""
    loop = THREE_TURNS
    with loop.upstream(KIMI, "exec_command", ECHO) as up:
        proxy = https_proxy(mitm)
        run = run_codex(
            codex,
            "http",
            https_front(mitm, up) + "/v1",
            tmp_path,
            https_proxy=proxy.url,
            ca_cert=proxy.ca_cert,
            ca_variable=ca_variable,
        )
        assert run.returncode == 0 and run.final_text() == HTTP_FINAL_TEXT, run.summary()
        calls, outputs = run.rollout_ids("function_call"), run.rollout_ids("function_call_output")
        check_through_toolid(up, "responses", loop, KIMI, calls=calls, results=outputs)
