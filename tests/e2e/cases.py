"""Parameters and checks shared by the buffered and streaming end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from standin import API, ScenarioHandle, UpstreamServer

from toolid import encode

from .conftest import Mitmdump
from .helpers import (
    LoopResult,
    check_client_ids,
    check_response_bytes,
    check_turn2_request,
    dump_json,
    encode_safe,
    response_id_positions,
    restore_all,
    turn1_request,
)

APIS: list[API] = ["chat", "responses", "anthropic"]

# Raw ids as upstreams emit them. Each one that is not [A-Za-z0-9_-]+ must be encoded.
RAW_IDS = [
    pytest.param("functions.get_weather:0", id="kimi"),
    pytest.param("get_weather:0#62786027996b4c40886cc7262bdf7382", id="hash"),
    pytest.param("tools/get weather 1", id="slash-space"),
    pytest.param("météo:0 ☀ 天气", id="non-ascii"),
    pytest.param("", id="empty"),
    pytest.param("tid1_functions-2Eget_weather-3A0", id="tid1-prefixed"),
    pytest.param("call_abc123", id="conforming"),
]
# More ids for the byte-level tests (raw httpx clients).
ODD_RAW_IDS = [
    pytest.param('say "hi"\\now', id="quote-backslash"),
    pytest.param("tab\there\nnewline\x7f", id="control"),
    pytest.param("\ud83d:0", id="lone-surrogate"),
    pytest.param("😀.x", id="astral"),
    pytest.param("chatcmpl-tool-9a8b7c6d5e4f", id="vllm-default"),
    pytest.param("toolu_01AbCdEf", id="anthropic-native"),
    pytest.param("a" * 150 + ".b", id="long"),
    pytest.param("-", id="dash"),
    pytest.param("call_tid1_x", id="call-tid1-prefixed"),
]


def needs_change(raw: str) -> bool:
    return encode(raw) != raw


def wire_client(proxy: Mitmdump | None = None, **kwargs: Any) -> httpx.Client:
    """A raw httpx client, through ``proxy`` if given (never through env proxies)."""
    kwargs.setdefault("trust_env", False)
    kwargs.setdefault("timeout", 30.0)
    return httpx.Client(proxy=proxy.url if proxy else None, **kwargs)


def wait_past_log(proxy: Mitmdump, server: UpstreamServer, timeout: float = 10.0) -> None:
    """Return once every line ``proxy`` logs for the flows that ended before this call is in
    its log: one more request through it, on a connection of its own, and that flow's line.
    mitmproxy runs the hooks of all flows on one event loop and writes their lines in order;
    this flow's line comes after its own hooks, which run after those of the flows that
    ended before it was sent. (The ``proxy`` must print flows: mitmdump's default
    ``flow_detail``.)"""
    marker = server.scenario()
    mark = proxy.mark()
    with wire_client(proxy) as client:
        response = client.post(
            marker.url("chat"),
            content=dump_json(turn1_request("chat", False)),
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 200, response.text
    proxy.wait_for_log(f"/s/{marker.key}/", mark, timeout)


def check_wire_loop(
    result: LoopResult,
    handle: ScenarioHandle,
    client_id: Callable[[str], str] = encode_safe,
    restore: Callable[[str], str] = restore_all,
) -> None:
    """Both responses reached the client as sent except for ``client_id(raw)`` in the id
    literals; the id-free turn-1 request reached the upstream unchanged; the turn-2
    request reached it with ``restore(client id)`` in every id position."""
    check_response_bytes(result.turn1_body, handle.turn(1), client_id)
    check_response_bytes(result.turn2_body, handle.turn(2), client_id)
    assert handle.turn(1).body == result.requests[0]
    check_client_ids(result, handle, client_id)
    check_turn2_request(handle, result.requests[1], restore)


CANARY_RAW = "functions.canary:0"


def check_proxy_rewrites(
    upstream: UpstreamServer, proxy: Mitmdump | None = None, origin: str | None = None
) -> None:
    """Canary: the proxy does rewrite (a test whose own ids need no change would
    otherwise pass with an addon that does nothing)."""
    handle = upstream.scenario(ids=[CANARY_RAW])
    url = handle.url("chat")
    if origin is not None:
        url = origin + url.removeprefix(upstream.base_url)
    with wire_client(proxy) as client:
        resp = client.post(url, json=turn1_request("chat", False))
    ids = [v for _, v in response_id_positions("chat", resp.json())]
    assert ids == [encode(CANARY_RAW)], f"the proxy did not encode the canary id: {ids!r}"
