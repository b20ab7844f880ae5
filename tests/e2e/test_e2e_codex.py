"""End to end with a real agent: the Codex CLI over its default transport, the Responses API
over WebSocket, against a stand-in (``standin.responses_ws``) that calls ``exec_command`` with the
Kimi-style id ``functions.exec_command:0`` in every tool turn.

Codex is driven both ways it uses WebSocket: a custom provider with
``supports_websockets = true``, and the built-in ``openai`` provider with ``openai_base_url``.
Through a reverse-mode mitmdump with toolid, the whole loop runs over WebSocket (no HTTP
fallback), Codex's rollout (its stored session, replayed on resume) holds safe, tagged client
ids (one per call), and the stand-in only ever gets its own id back. Without toolid, the
rollout holds the raw id, unsafe, and the same one for every call. With
``toolid_websocket=refuse`` Codex falls back to HTTP at once, where toolid rewrites as ever.

Over HTTP POST (a custom provider without ``supports_websockets``), against the one stand-in,
Codex runs the loops of ``agents_common.SCENARIOS``: through toolid it completes each with one
safe id per call in its rollout and the stand-in gets its own id back; without toolid it
completes too (it does not break), with the raw id, unsafe, for every call of the run. As an
HTTPS proxy's client it trusts mitmproxy's CA through ``CODEX_CA_CERTIFICATE`` or
``SSL_CERT_FILE``, over both transports.

Codex (npm ``@openai/codex``, pinned) is installed by the first run into the cache of
``cache.py``; later runs reuse it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standin.responses_ws import FINAL_TEXT, ResponsesWsUpstream

from toolid import codec

from .agents_common import (
    PARALLEL_ONE_ID,
    REUSED_ACROSS_TURNS,
    SCENARIOS,
    AgentDriver,
    AgentRun,
    Scenario,
    check_keeps_the_raw_id,
    check_through_toolid,
    https_proxy,
    run_agent,
    summary,
    through_https_proxy,
    through_toolid,
    without_toolid,
)
from .cache import npm_bin
from .conftest import MitmdumpPool

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

CODEX = ("@openai/codex", "0.171.0", "codex")
KIMI = "functions.exec_command:0"
TURNS = 2  # the WebSocket stand-in's tool turns
PROMPT = "Run `echo hello` with exec_command, then tell me what it printed."
BETA = "responses_websockets=2026-02-06"
PROVIDERS = ["custom", "builtin"]  # the ones that use WebSocket
CA_VARIABLES = ["CODEX_CA_CERTIFICATE", "SSL_CERT_FILE"]


class Codex(AgentDriver):
    """``codex exec --json`` with ``provider``: ``custom`` (a provider that allows WebSocket),
    ``http`` (one that does not: HTTP POST only) or ``builtin`` (the built-in ``openai``
    provider at another base URL, WebSocket by default). What it kept is its rollout, the
    stored session it replays on resume."""

    api = "responses"
    tool, arguments = "exec_command", '{"cmd": "echo hello"}'

    def __init__(self, provider: str, ca_variable: str = "CODEX_CA_CERTIFICATE") -> None:
        self.provider, self.ca_variable = provider, ca_variable
        self.id = f"codex-{provider}"

    def command(self, home: Path, work: Path) -> list[str]:
        flags = ["--skip-git-repo-check", "--json", "--dangerously-bypass-approvals-and-sandbox"]
        return [str(npm_bin(*CODEX)), "exec", *flags, "-C", str(work), PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        codex_home = home / ".codex"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(self.config(base_url))
        return {"CODEX_HOME": str(codex_home), "STANDIN_KEY": "sk-e2e", "OPENAI_API_KEY": "sk-e2e"}

    def config(self, base_url: str) -> str:
        """Its ``config.toml``."""
        if self.provider == "builtin":
            return f'model = "gpt-5.1"\nopenai_base_url = "{base_url}"\n'
        return (
            'model = "kimi-k3"\nmodel_provider = "standin"\n\n[model_providers.standin]\n'
            f'name = "standin"\nbase_url = "{base_url}"\nwire_api = "responses"\n'
            'env_key = "STANDIN_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
            + ("supports_websockets = true\n" if self.provider == "custom" else "")
        )

    def rollout_ids(self, run: AgentRun, kind: str) -> list[str]:
        """The call_ids of its rollout's response items of type ``kind``, in order."""
        items: list[Any] = []
        for path in sorted((run.home / ".codex" / "sessions").rglob("*.jsonl")):
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("type") == "response_item":
                    items.append(entry["payload"])
        return [item["call_id"] for item in items if item.get("type") == kind]

    def client_ids(self, run: AgentRun) -> list[str]:
        return self.rollout_ids(run, "function_call")

    def final_text(self, run: AgentRun) -> str | None:
        texts = [
            e["item"]["text"]
            for e in run.events
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
        ]
        return texts[-1] if texts else None


CODEX_HTTP = Codex("http")


@pytest.fixture(scope="module")
def ws_upstream() -> Iterator[ResponsesWsUpstream]:
    with ResponsesWsUpstream(ids=[KIMI], turns=TURNS) as up:
        yield up


def sent_call_ids(up: ResponsesWsUpstream, before: int) -> list[str]:
    """Every call_id the stand-in received on the connections made since ``before``."""
    return [
        item["call_id"]
        for conn in up.connections[before:]
        for request in conn.requests()
        for item in request.get("input") or []
        if isinstance(item, dict) and "call_id" in item
    ]


def check_over_websocket(driver: Codex, run: AgentRun, calls: int) -> None:
    """Codex completed over WebSocket with one safe client id per call in its rollout, at
    its calls and their outputs."""
    assert run.headless.returncode == 0, summary(driver, run)
    assert driver.final_text(run) == FINAL_TEXT, summary(driver, run)
    expected = [codec.encode(KIMI, "safe", k) for k in range(1, calls + 1)]
    assert driver.client_ids(run) == expected, summary(driver, run)
    assert sorted(driver.rollout_ids(run, "function_call_output")) == expected, summary(driver, run)


# ----------------------------------------------------------------------------- over WebSocket


@pytest.mark.parametrize("provider", PROVIDERS)
def test_through_toolid_codex_gets_safe_tagged_ids_over_websocket(
    ws_upstream: ResponsesWsUpstream, mitm: MitmdumpPool, tmp_path: Path, provider: str
) -> None:
    driver = Codex(provider)
    proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}")
    before, http_before = len(ws_upstream.connections), len(ws_upstream.http_requests)
    run = run_agent(driver, proxy.url + "/v1", tmp_path)
    check_over_websocket(driver, run, TURNS)
    assert ws_upstream.http_requests[http_before:] == [], "Codex fell back to HTTP"
    conns = ws_upstream.connections[before:]
    assert conns and all(c.headers.get("openai-beta") == BETA for c in conns)
    # the stand-in got its own id back in each output, and nothing it did not emit
    assert sent_call_ids(ws_upstream, before) == [KIMI] * TURNS
    assert not ws_upstream.violations, ws_upstream.violations


@pytest.mark.parametrize("provider", PROVIDERS)
def test_without_toolid_the_raw_id_reaches_codexs_rollout(
    ws_upstream: ResponsesWsUpstream, mitm: MitmdumpPool, tmp_path: Path, provider: str
) -> None:
    """``toolid_websocket=pass``: Codex stores the raw id, which strict APIs reject, for
    both calls: two calls, one identity, in the session it replays on resume."""
    driver = Codex(provider)
    proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}", toolid_websocket="pass")
    before = len(ws_upstream.connections)
    run = run_agent(driver, proxy.url + "/v1", tmp_path)
    assert run.headless.returncode == 0, summary(driver, run)
    assert driver.client_ids(run) == [KIMI] * TURNS, summary(driver, run)
    assert not codec.is_strict_safe(KIMI)
    assert len(ws_upstream.connections) > before


def test_refused_websocket_falls_back_to_http(mitm: MitmdumpPool, tmp_path: Path) -> None:
    """``toolid_websocket=refuse``: the upgrade gets 426, Codex goes on over HTTP POST (at
    once, no retries), and toolid rewrites there as for any HTTP client."""
    driver, scenario = Codex("custom"), REUSED_ACROSS_TURNS
    with driver.upstream(scenario) as up:
        proxy = mitm.get(mode=f"reverse:{up.base_url}", toolid_websocket="refuse")
        mark = proxy.mark()
        run = run_agent(driver, proxy.url + "/v1", tmp_path)
        proxy.wait_for_log("<< 426", mark)
        refused = proxy.log_since(mark).count("<< 426")
    check_through_toolid(driver, scenario, run, up)
    assert all(r.method == "POST" for r in up.model_requests("responses"))
    assert refused == 1, summary(driver, run, up)  # one upgrade asked for, no retry


@pytest.mark.parametrize("ca_variable", CA_VARIABLES)
def test_through_toolid_as_an_https_proxy(
    mitm: MitmdumpPool, tmp_path: Path, ca_variable: str
) -> None:
    """The built-in provider at an https:// base URL with ``HTTPS_PROXY`` at a regular-mode
    mitmdump and ``CODEX_CA_CERTIFICATE`` (or ``SSL_CERT_FILE``) at its CA: wss:// through the
    proxy, rewritten."""
    driver = Codex("builtin", ca_variable)
    with ResponsesWsUpstream(ids=[KIMI], turns=TURNS, tls_dir=tmp_path / "tls") as up:
        proxy = https_proxy(mitm)
        run = run_agent(driver, up.base_url, tmp_path, https_proxy=proxy.url, ca_cert=proxy.ca_cert)
        got = sent_call_ids(up, 0)
    check_over_websocket(driver, run, TURNS)
    assert got == [KIMI] * TURNS and not up.http_requests and not up.violations


def test_parallel_calls_with_one_id_get_one_client_id_each(
    mitm: MitmdumpPool, tmp_path: Path
) -> None:
    """Two parallel calls with one raw id in one response: Codex gets ``…`` and ``…-_2``, and
    both outputs reach the stand-in with its own id."""
    driver = Codex("custom")
    with ResponsesWsUpstream(ids=[KIMI, KIMI], turns=1) as up:
        proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{up.port}")
        run = run_agent(driver, proxy.url + "/v1", tmp_path)
        got = sent_call_ids(up, 0)
    check_over_websocket(driver, run, 2)
    assert got == [KIMI, KIMI] and not up.violations and not up.http_requests


# ----------------------------------------------------------------------------- over HTTP


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_over_http_through_toolid_codex_completes(
    scenario: Scenario, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    _, up = through_toolid(CODEX_HTTP, scenario, mitm, tmp_path)
    assert len(up.model_requests("responses")) == len(up.requests), "not only HTTP POSTs"


@pytest.mark.parametrize("scenario", [REUSED_ACROSS_TURNS, PARALLEL_ONE_ID], ids=lambda s: s.name)
def test_over_http_without_toolid_the_raw_id_reaches_codexs_rollout(
    scenario: Scenario, tmp_path: Path
) -> None:
    """Straight at the stand-in: Codex completes, and stores the raw id, unsafe, for every
    call of the run (two parallel calls included): one identity for all of them."""
    without_toolid(CODEX_HTTP, scenario, check_keeps_the_raw_id, tmp_path)


@pytest.mark.parametrize("ca_variable", CA_VARIABLES)
def test_over_http_through_toolid_as_an_https_proxy(
    mitm: MitmdumpPool, tmp_path: Path, ca_variable: str
) -> None:
    """An ``https://`` base URL, ``HTTPS_PROXY`` at toolid in regular mode, mitmproxy's CA
    in ``ca_variable``: an id reused across turns over HTTP POST, rewritten."""
    through_https_proxy(Codex("http", ca_variable), REUSED_ACROSS_TURNS, mitm, tmp_path)
