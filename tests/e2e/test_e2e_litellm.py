"""End to end behind a gateway: the real LiteLLM proxy (and claude-code-router) between the
anthropic SDK and a Kimi-like upstream, without and with toolid.

LiteLLM (pinned, installed into a cached venv by ``cache.venv``) serves an OpenAI-compatible
upstream (``openai/...`` with an ``api_base``) to Anthropic clients on ``/v1/messages``: it
turns each request into the upstream's Responses API and sanitizes the ids it sends back
(``functions.get_weather:0`` -> ``functions_get_weather_0``). toolid goes between the gateway
and the upstream: as LiteLLM's ``HTTP_PROXY``/``HTTPS_PROXY`` (regular mode, docs/deployment.md's
primary recipe; for ``https://`` upstreams LiteLLM trusts mitmproxy's CA via
``SSL_CERT_FILE``) or as a reverse proxy named by ``api_base``.

LiteLLM starts once per module (about 20 s) with one model per test case, each pointing at
its own upstream scenario. One process serves both sides of the comparison: it has
``HTTP_PROXY``/``HTTPS_PROXY`` set to toolid and ``NO_PROXY=localhost``, so models whose
``api_base`` names ``localhost`` reach their upstream (or a reverse-mode toolid) directly
and those naming ``127.0.0.1`` go through toolid.

claude-code-router (npm, pinned, ``cache.npm_bin``) translates to Chat Completions and
passes ids through unchanged. Its proxy is a config setting (``PROXY_URL``, for every
provider), so two instances run (about 1 s each): one without a proxy, one with toolid as
``PROXY_URL`` and mitmproxy's CA in ``NODE_EXTRA_CA_CERTS``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from standin import (
    API,
    MODEL,
    TOOL_ARGS,
    WEATHER_TEXT,
    ReuseUpstream,
    ScenarioHandle,
    UpstreamServer,
)

from toolid import encode

from . import cache
from .conftest import Mitmdump, free_port
from .helpers import (
    SAFE_ID,
    TOOL_RESULT,
    TOOLS_ANTHROPIC,
    USER_PROMPT,
    LoopResult,
    request_id_positions,
    response_id_positions,
    sdk_http_client,
)

LITELLM_REQUIREMENTS = ["litellm[proxy]==1.108.7"]
# 2.0.0 is the newest that installs: 3.1.1 depends on a package missing from npm.
CCR_PACKAGE, CCR_VERSION = "@musistudio/claude-code-router", "2.0.0"
# LiteLLM's master key (it refuses to start without one, or with a weak one); ccr's APIKEY.
GATEWAY_KEY = "sk-e2e-5f0c9a7d3b1e4f2a8c6d0b9e7a5f3c1d2e4b6a8c0d9f7e5a3b1c2d4e6f8a0b9c"
STARTUP_TIMEOUT = 180.0  # seconds; LiteLLM imports for ~20 s on an idle 2-core machine
CLIENT_TIMEOUT = 60.0

RAW = "functions.get_weather:0"
SANITIZED = "functions_get_weather_0"  # what LiteLLM alone sends the upstream back
SAFE = encode(RAW)  # tid1_functions-2Eget_weather-3A0

# installs and gateway starts happen in the first test's setup: allow for a cold install
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(cache.INSTALL_TIMEOUT + 300)]

STREAMS = [pytest.param(False, id="buffered"), pytest.param(True, id="streamed")]


def _env(extra: dict[str, str]) -> dict[str, str]:
    """The test process's environment without proxy, CA and Python-path settings, plus
    ``extra``."""
    drop = {"SSL_CERT_FILE", "SSL_CERT_DIR", "SSL_VERIFY", "REQUESTS_CA_BUNDLE"}
    drop |= {"CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "PYTHONPATH", "VIRTUAL_ENV"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and k not in drop and not k.startswith("LITELLM")
    }
    return env | extra


# ----------------------------------------------------------------------------- gateways


class GatewayProcess:
    """A gateway subprocess on a free 127.0.0.1 port: its own process group (``stop`` ends
    all of it), killed with the test process even if that one is killed."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.log_path = workdir / "gateway.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def write_config(self) -> None:
        """Write the config file for ``self.port``."""

    def start(self) -> None:
        setpriv = shutil.which("setpriv")
        prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
        for attempt in range(3):
            self.port = free_port()
            self.write_config()
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    [*prefix, *self.command()],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    cwd=self.workdir,
                    start_new_session=True,
                )
            if self._wait_ready():
                return
            self.stop()
            if "address already in use" not in self.log_text().lower() or attempt == 2:
                break
        pytest.fail(
            f"{self.command()[0]} did not start in {STARTUP_TIMEOUT:.0f}s:\n{self.log_tail()}"
        )

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with httpx.Client(trust_env=False, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                try:
                    client.get(f"{self.url}/health/liveliness")
                    return True  # both listen only once started up
                except httpx.HTTPError:
                    time.sleep(0.25)
        return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(10)
                return
            except subprocess.TimeoutExpired:
                continue

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_text()[-chars:]


class LiteLLM(GatewayProcess):
    """``litellm --config``: one model per route, an OpenAI-compatible upstream each."""

    def __init__(
        self, workdir: Path, venv: Path, models: dict[str, str], env: dict[str, str]
    ) -> None:
        super().__init__(workdir, env)
        self.venv = venv
        self.models = models  # model name -> api_base
        self.config_path = workdir / "config.yaml"

    def write_config(self) -> None:
        config = {  # JSON is YAML
            "model_list": [
                {
                    "model_name": name,
                    "litellm_params": {
                        "model": f"openai/{MODEL}",
                        "api_base": api_base,
                        "api_key": "sk-upstream",
                    },
                }
                for name, api_base in self.models.items()
            ],
            "litellm_settings": {"request_timeout": 30, "num_retries": 0},
            "general_settings": {"master_key": GATEWAY_KEY},
        }
        self.config_path.write_text(json.dumps(config, indent=2))

    def command(self) -> list[str]:
        litellm = str(self.venv / "bin" / "litellm")
        port = ["--host", "127.0.0.1", "--port", str(self.port)]
        return [litellm, "--config", str(self.config_path), *port]


class ClaudeCodeRouter(GatewayProcess):
    """``ccr start`` (in the foreground) with ``$HOME/.claude-code-router/config.json``: one
    provider per route, chosen by the client's ``"<provider>,<model>"``."""

    def __init__(
        self,
        workdir: Path,
        ccr: Path,
        providers: dict[str, str],
        env: dict[str, str],
        proxy_url: str | None = None,
    ) -> None:
        super().__init__(workdir, env | {"HOME": str(workdir)})
        self.ccr = ccr
        self.providers = providers  # provider name -> api_base
        self.proxy_url = proxy_url

    def write_config(self) -> None:
        config: dict[str, Any] = {
            "HOST": "127.0.0.1",
            "PORT": self.port,
            "APIKEY": GATEWAY_KEY,
            "LOG": False,
            "NON_INTERACTIVE_MODE": True,
            "API_TIMEOUT_MS": 30000,
            "Providers": [
                {
                    "name": name,
                    "api_base_url": f"{api_base}/chat/completions",
                    "api_key": "sk-upstream",
                    "models": [MODEL],
                }
                for name, api_base in self.providers.items()
            ],
            "Router": {"default": f"{next(iter(self.providers))},{MODEL}"},
        }
        if self.proxy_url:
            config["PROXY_URL"] = self.proxy_url
        folder = self.workdir / ".claude-code-router"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))

    def command(self) -> list[str]:
        return [str(self.ccr), "start"]


# ----------------------------------------------------------------------------- routes


@dataclass
class Route:
    """One model of a gateway: an upstream scenario (or a reusing stand-in) at an
    ``api_base``, served by ``process``; the client asks for ``model``."""

    name: str
    api_base: str
    proxied: bool  # reached through toolid as the gateway's proxy
    handle: ScenarioHandle | None = None
    reuse: ReuseUpstream | None = None
    process: GatewayProcess | None = None
    model: str = ""


@dataclass
class Gateway:
    name: str
    api: API  # what it speaks to the upstream
    alone_sends: str  # what it alone sends the upstream back for RAW
    routes: dict[str, Route]
    toolids: list[Mitmdump]  # regular and reverse mode

    def route(self, kind: str, stream: bool) -> Route:
        return self.routes[f"{kind}-{'streamed' if stream else 'buffered'}"]

    def marks(self) -> list[int]:
        return [t.mark() for t in self.toolids]

    def logs_since(self, marks: list[int], route: Route) -> str:
        """For failure messages: what toolid logged since ``marks``, and the gateway's log."""
        logs = zip(self.toolids, marks, strict=True)
        parts = [f"toolid ({t.mode}):\n{t.log_since(m)}" for t, m in logs]
        assert route.process is not None
        return "\n".join([*parts, f"{self.name}:\n{route.process.log_tail()}"])


def make_routes(
    stack: ExitStack,
    upstream: UpstreamServer,
    tls_upstream: UpstreamServer,
    reverse_proxy: Mitmdump,
) -> dict[str, Route]:
    """Every test case's route, buffered and streamed. ``localhost`` marks the routes that
    bypass a proxy-mode toolid (LiteLLM's NO_PROXY)."""
    routes: dict[str, Route] = {}
    for mode in ("buffered", "streamed"):
        for kind, server, origin, proxied in (
            ("direct", upstream, f"http://localhost:{upstream.port}", False),
            ("reverse", upstream, f"http://localhost:{reverse_proxy.port}", False),
            ("forward", upstream, upstream.base_url, True),
            ("https", tls_upstream, tls_upstream.base_url, True),
        ):
            handle = server.scenario(ids=[RAW])
            path = handle.base_url("chat").removeprefix(server.base_url)  # /s/<key>/v1
            name = f"{kind}-{mode}"
            routes[name] = Route(name, origin + path, proxied, handle=handle)
        for kind, host, proxied in (
            ("reuse-direct", "localhost", False),
            ("reuse-forward", "127.0.0.1", True),
        ):
            reuse = stack.enter_context(
                ReuseUpstream(ids=[RAW], name="get_weather", arguments=TOOL_ARGS, turns=3)
            )
            name = f"{kind}-{mode}"
            routes[name] = Route(name, f"http://{host}:{reuse.port}/v1", proxied, reuse=reuse)
    return routes


def start_litellm(workdir: Path, routes: dict[str, Route], proxy: Mitmdump) -> None:
    env = _env(
        {
            "HTTP_PROXY": proxy.url,
            "HTTPS_PROXY": proxy.url,
            "NO_PROXY": "localhost",
            "SSL_CERT_FILE": str(proxy.ca_cert),  # what LiteLLM trusts for https:// upstreams
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the cost map
            "PYTHONUNBUFFERED": "1",
        }
    )
    venv = cache.venv("litellm", LITELLM_REQUIREMENTS)
    litellm = LiteLLM(workdir, venv, {name: r.api_base for name, r in routes.items()}, env)
    for route in routes.values():
        route.process, route.model = litellm, route.name
    litellm.start()


def start_ccr(workdir: Path, routes: dict[str, Route], proxy: Mitmdump) -> None:
    ccr = cache.npm_bin(CCR_PACKAGE, CCR_VERSION, "ccr")
    for proxied in (False, True):
        mine = {name: r for name, r in routes.items() if r.proxied == proxied}
        env = _env({"NODE_EXTRA_CA_CERTS": str(proxy.ca_cert)} if proxied else {})
        folder = workdir / ("proxied" if proxied else "plain")
        folder.mkdir()
        providers = {name: r.api_base for name, r in mine.items()}
        process = ClaudeCodeRouter(folder, ccr, providers, env, proxy.url if proxied else None)
        for route in mine.values():
            # ccr matches "<provider>,<model>" against lower-cased model names
            route.process, route.model = process, f"{route.name},{MODEL.lower()}"
        process.start()


@pytest.fixture(scope="module", params=["litellm", "claude-code-router"])
def gateway(
    request: pytest.FixtureRequest,
    upstream: UpstreamServer,
    tls_upstream: UpstreamServer,
    proxy: Mitmdump,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    reverse_proxy: Mitmdump = request.getfixturevalue("reverse_proxy")
    with ExitStack() as stack:
        routes = make_routes(stack, upstream, tls_upstream, reverse_proxy)
        stack.callback(stop_gateways, routes)
        workdir = tmp_path_factory.mktemp(request.param)
        toolids = [proxy, reverse_proxy]
        if request.param == "litellm":
            start_litellm(workdir, routes, proxy)
            yield Gateway("litellm", "responses", SANITIZED, routes, toolids)
        else:
            start_ccr(workdir, routes, proxy)
            yield Gateway("claude-code-router", "chat", RAW, routes, toolids)


def stop_gateways(routes: dict[str, Route]) -> None:
    for route in routes.values():
        if route.process is not None:
            route.process.stop()


# ----------------------------------------------------------------------------- client


@dataclass
class Conversation:
    """What the anthropic SDK saw in a tool loop through a gateway."""

    calls: list[list[str]] = field(default_factory=list)  # tool_use ids, per tool turn
    seen: list[str] = field(default_factory=list)  # every id occurrence
    final_text: str = ""
    requests: list[bytes] = field(default_factory=list)


def converse(route: Route, *, stream: bool, max_turns: int = 5) -> Conversation:
    """Run an agent's tool loop with the real anthropic SDK against the gateway's
    /v1/messages: answer every tool_use with a tool_result until the model answers with text."""
    assert route.process is not None
    recorded = LoopResult(api="anthropic")
    client: Any = anthropic.Anthropic(  # typed Any: the loop builds plain-dict params
        base_url=route.process.url,
        api_key=GATEWAY_KEY,
        max_retries=0,
        http_client=sdk_http_client(recorded, timeout=CLIENT_TIMEOUT),
    )
    conv = Conversation(requests=recorded.requests)
    messages: list[dict[str, Any]] = [{"role": "user", "content": USER_PROMPT}]
    common: dict[str, Any] = {"model": route.model, "max_tokens": 1024, "tools": TOOLS_ANTHROPIC}
    try:
        for _ in range(max_turns):
            if stream:
                with client.messages.stream(messages=messages, **common) as s:
                    for event in s:
                        if event.type in ("content_block_start", "message_start"):
                            dumped = event.model_dump()
                            conv.seen += [v for _, v in response_id_positions("anthropic", dumped)]
                    message = s.get_final_message()
            else:
                message = client.messages.create(messages=messages, **common)
            uses = [b for b in message.content if b.type == "tool_use"]
            if not uses:
                conv.final_text = "".join(b.text for b in message.content if b.type == "text")
                return conv
            conv.calls.append([b.id for b in uses])
            conv.seen += [b.id for b in uses]
            messages.append({"role": "assistant", "content": message.content})
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": TOOL_RESULT} for b in uses
            ]
            messages.append({"role": "user", "content": results})
    except anthropic.APIError as e:
        log = route.process.log_tail()
        raise AssertionError(f"the gateway answered {e!r}; its log:\n{log}") from e
    finally:
        client.close()
    raise AssertionError(f"no final answer after {max_turns} turns: {conv.calls!r}")


def check_turn2(gateway: Gateway, handle: ScenarioHandle, expected_id: str) -> None:
    """The gateway spoke its API to the upstream; the turn-2 request defined the call and
    carried its result with ``expected_id``."""
    assert handle.turn(1).api == gateway.api
    ex = handle.turn(2)
    assert ex.api == gateway.api, ex.path
    assert request_id_positions(gateway.api, ex.json) == [("call", expected_id)] * 2


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("stream", STREAMS)
def test_gateway_alone(gateway: Gateway, stream: bool) -> None:
    """Without toolid the client gets the raw id, and the upstream gets back what the
    gateway makes of it: LiteLLM a sanitized copy (the problem is real), ccr the raw id."""
    route = gateway.route("direct", stream)
    assert route.handle is not None
    conv = converse(route, stream=stream)
    assert conv.calls == [[RAW]]
    assert conv.final_text == WEATHER_TEXT
    check_turn2(gateway, route.handle, gateway.alone_sends)


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("forward", id="http-proxy"),
        pytest.param("reverse", id="reverse-api-base"),
        pytest.param("https", id="https-proxy"),
    ],
)
def test_gateway_with_toolid(gateway: Gateway, kind: str, stream: bool) -> None:
    """With toolid between the gateway and the upstream (the gateway's proxy, for an
    https:// upstream with mitmproxy's CA trusted; or a reverse-mode toolid as its
    api_base), the client sees only the safe id and the upstream gets its own id back."""
    route = gateway.route(kind, stream)
    assert route.handle is not None
    marks = gateway.marks()
    conv = converse(route, stream=stream)
    assert conv.calls == [[SAFE]], gateway.logs_since(marks, route)
    assert conv.seen and all(SAFE_ID.fullmatch(i) for i in conv.seen), conv.seen
    assert conv.final_text == WEATHER_TEXT
    check_turn2(gateway, route.handle, RAW)


@pytest.mark.parametrize("stream", STREAMS)
def test_gateway_alone_reused_ids(gateway: Gateway, stream: bool) -> None:
    """An upstream that reuses its id every turn, without toolid: the client gets the same
    raw id three times, the upstream a history of six copies of what the gateway sends."""
    route = gateway.route("reuse-direct", stream)
    assert route.reuse is not None
    conv = converse(route, stream=stream)
    assert conv.calls == [[RAW]] * 3
    last = route.reuse.model_requests()[-1]
    assert request_id_positions(gateway.api, last.json) == [("call", gateway.alone_sends)] * 6


@pytest.mark.parametrize("stream", STREAMS)
def test_gateway_with_toolid_reused_ids(gateway: Gateway, stream: bool) -> None:
    """Three tool turns with the same raw id through the gateway + toolid: the client sees
    three distinct ids (occurrence tags), the upstream its own id in every position."""
    route = gateway.route("reuse-forward", stream)
    assert route.reuse is not None
    marks = gateway.marks()
    conv = converse(route, stream=stream)
    tagged = [[SAFE], [f"{SAFE}-_2"], [f"{SAFE}-_3"]]
    assert conv.calls == tagged, gateway.logs_since(marks, route)
    assert all(SAFE_ID.fullmatch(i) for i in conv.seen), conv.seen
    assert conv.final_text
    requests = route.reuse.model_requests()
    assert len(requests) == 4
    for n, req in enumerate(requests):
        positions = request_id_positions(gateway.api, req.json)
        assert positions == [("call", RAW)] * (2 * n), f"request {n + 1}"
