"""End to end, streamed (SSE) responses: real SDKs and raw httpx through a real mitmdump
running addons/toolid_addon.py, against a real local upstream that writes its streams in
tiny pieces, with CRLF or CR line endings, gzip-compressed, chunked or read-until-close."""

from __future__ import annotations

import ssl
import threading
from typing import Any

import httpx
import httpx2
import pytest
from standin import API, UpstreamServer

from toolid import encode

from .cases import (
    APIS,
    ODD_RAW_IDS,
    RAW_IDS,
    check_proxy_rewrites,
    check_wire_loop,
    needs_change,
    wire_client,
)
from .conftest import Mitmdump, MitmdumpPool
from .helpers import (
    check_all_safe,
    check_client_ids,
    check_turn2_request,
    dump_json,
    encode_safe,
    request_id_positions,
    sdk_loop,
    turn1_request,
    unchanged,
    wire_loop,
)

pytestmark = pytest.mark.e2e


# ----------------------------------------------------------------------------- SDK loops


@pytest.mark.parametrize("raw", RAW_IDS)
@pytest.mark.parametrize("api", APIS)
def test_sdk_stream_loop(api: API, raw: str, upstream: UpstreamServer, proxy: Mitmdump) -> None:
    """openai stream=True (Chat, Responses) and anthropic messages.stream, with the
    upstream writing 1-7 byte pieces, so ids are split across TCP writes."""
    handle = upstream.scenario(ids=[raw], writes="random")
    result = sdk_loop(api, handle.base_url(api), stream=True, proxy=proxy.url)
    assert handle.turn(1).stream and handle.turn(1).pieces > 50
    check_client_ids(result, handle, encode_safe)
    check_all_safe(result)
    check_turn2_request(handle, result.requests[-1])
    positions = request_id_positions(api, handle.turn(2).json)
    assert {v for k, v in positions if k == "call"} == {raw}
    if not needs_change(raw):
        check_proxy_rewrites(upstream, proxy)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"writes": "random", "newline": "\r\n"}, id="crlf"),
        pytest.param({"writes": "random", "gzip": "force"}, id="gzip"),
        pytest.param({"writes": "random", "framing": "close"}, id="read-until-close"),
        pytest.param(
            {"writes": "random", "framing": "close", "gzip": "force", "newline": "\r\n"},
            id="close-gzip-crlf",
        ),
        pytest.param({"writes": "random", "multiline_data": True}, id="multi-line-data"),
        pytest.param({"writes": "random", "framing": "length"}, id="content-length"),
    ],
)
@pytest.mark.parametrize("api", APIS)
def test_sdk_stream_loop_variants(
    api: API, kwargs: dict[str, Any], upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=["functions.get_weather:0", "x y:1"], **kwargs)
    result = sdk_loop(api, handle.base_url(api), stream=True, proxy=proxy.url)
    check_client_ids(result, handle, encode_safe)
    check_all_safe(result)
    check_turn2_request(handle, result.requests[-1])


@pytest.mark.parametrize("api", APIS)
def test_sdk_stream_loop_reverse_proxy(
    api: API, upstream: UpstreamServer, reverse_proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=["functions.get_weather:0"], writes="random")
    base = handle.base_url(api).replace(upstream.base_url, reverse_proxy.url)
    result = sdk_loop(api, base, stream=True)
    check_client_ids(result, handle, encode_safe)
    check_all_safe(result)
    check_turn2_request(handle, result.requests[-1])


# ----------------------------------------------------------------------------- bytes on the wire

STREAM_VARIANTS = [
    pytest.param({"writes": "events"}, id="events"),
    pytest.param({"writes": "whole"}, id="one-write"),
    pytest.param({"writes": "random", "max_write": 1, "sleep_every": 64}, id="1-byte-writes"),
    pytest.param({"writes": "random", "newline": "\r\n"}, id="crlf"),
    pytest.param({"writes": "random", "newline": "\r"}, id="cr"),
    pytest.param({"writes": "random", "framing": "close"}, id="read-until-close"),
    pytest.param({"writes": "random", "framing": "length"}, id="content-length"),
    pytest.param({"writes": "random", "gzip": "force"}, id="gzip-forced"),
    pytest.param({"writes": "events", "gzip": "auto"}, id="gzip-if-asked"),
    pytest.param(
        {"writes": "random", "gzip": "force", "framing": "close", "newline": "\r\n"},
        id="gzip-close-crlf",
    ),
    pytest.param({"writes": "random", "sse_extras": True}, id="comments-trailing-space"),
    pytest.param({"writes": "random", "multiline_data": True}, id="multi-line-data"),
    pytest.param({"writes": "random", "ensure_ascii": True, "ids": ["é.0"]}, id="escaped"),
    pytest.param(
        {"writes": "random", "ids": ["call_ok", "fn.x:1"], "item_ids": ["fc.odd:0", "fc_ok"]},
        id="mixed-item-ids",
    ),
]


@pytest.mark.parametrize("kwargs", STREAM_VARIANTS)
@pytest.mark.parametrize("api", APIS)
def test_wire_stream_variants(
    api: API, kwargs: dict[str, Any], upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    """The stream the client receives is the upstream's, byte for byte (framing, line
    endings, comments, whitespace), except inside the id literals."""
    kwargs = {"ids": ["functions.get_weather:0", "call_keep_1"], **kwargs}
    handle = upstream.scenario(**kwargs)
    headers = {"accept-encoding": "gzip"} if kwargs.get("gzip") == "auto" else None
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, api, stream=True, headers=headers)
    check_wire_loop(result, handle)
    check_all_safe(result)


@pytest.mark.parametrize("raw", RAW_IDS + ODD_RAW_IDS)
@pytest.mark.parametrize("api", APIS)
def test_wire_stream_ids(api: API, raw: str, upstream: UpstreamServer, proxy: Mitmdump) -> None:
    handle = upstream.scenario(ids=[raw], writes="random")
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, api, stream=True)
    check_wire_loop(result, handle)
    check_all_safe(result)
    if not needs_change(raw):
        assert result.turn1_body == handle.turn(1).sent
        check_proxy_rewrites(upstream, proxy)


@pytest.mark.parametrize("api", APIS)
def test_wire_stream_reverse_proxy(
    api: API, upstream: UpstreamServer, reverse_proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=["functions.get_weather:0"], writes="random", gzip="force")
    with wire_client() as client:
        result = wire_loop(client, handle, api, stream=True, origin=reverse_proxy.url)
    check_wire_loop(result, handle)


def test_wire_stream_observe_mode(upstream: UpstreamServer, mitm: MitmdumpPool) -> None:
    proxy = mitm.get(toolid_mode="observe")
    for api in APIS:
        handle = upstream.scenario(ids=["functions.get_weather:0"], writes="random")
        mark = proxy.mark()
        with wire_client(proxy) as client:
            result = wire_loop(client, handle, api, stream=True)
        check_wire_loop(result, handle, unchanged, unchanged)
        assert result.turn1_body == handle.turn(1).sent
        line = proxy.wait_for_log("toolid", mark)
        assert "functions.get_weather:0" in line


def test_oversized_events_pass_unchanged(upstream: UpstreamServer, mitm: MitmdumpPool) -> None:
    """toolid_max_event_bytes: events larger than the limit pass as they are (fail-open)
    and the proxy warns; the stream still arrives whole."""
    proxy = mitm.get(toolid_max_event_bytes=100)
    for api in APIS:
        handle = upstream.scenario(ids=["functions.get_weather:0"], writes="random")
        mark = proxy.mark()
        with wire_client(proxy) as client:
            result = wire_loop(client, handle, api, stream=True)
        check_wire_loop(result, handle, unchanged, unchanged)
        assert result.turn1_body == handle.turn(1).sent
        proxy.wait_for_log("toolid", mark)


# ----------------------------------------------------------------------------- latency


def _first_event_latency(
    client: httpx.Client, url: str, api: API, handle: Any, encoded: str
) -> tuple[bool, bytes]:
    """Stream turn 1; as soon as the client holds the complete event carrying the
    (encoded) id, note whether the upstream had already sent the rest, then let it go on."""
    seen_before_rest: bool | None = None
    data = b""
    body = dump_json(turn1_request(api, True))
    with client.stream(
        "POST", url, content=body, headers={"content-type": "application/json"}
    ) as r:
        for piece in r.iter_bytes():
            data += piece
            if seen_before_rest is None:
                at = data.find(encoded.encode())
                if at >= 0 and (b"\n\n" in data[at:] or b"\r\n\r\n" in data[at:]):
                    ex = handle.turn(1)
                    assert ex.first_part_sent.wait(5)
                    seen_before_rest = not ex.rest_sent.is_set()
                    handle.release.set()
    assert seen_before_rest is not None, f"the id never arrived: {data!r}"
    return seen_before_rest, data


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({}, id="plain"),
        pytest.param({"gzip": "force"}, id="gzip"),
        pytest.param({"newline": "\r\n", "framing": "close"}, id="crlf-close"),
    ],
)
@pytest.mark.parametrize("api", APIS)
def test_first_event_is_not_held_back(
    api: API, kwargs: dict[str, Any], upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    """The upstream sends the events up to the first tool-call id, then waits (up to 3 s)
    until the client has that event; a proxy that buffers the stream makes the upstream
    time out and send the rest first."""
    raw = "functions.get_weather:0"
    handle = upstream.scenario(ids=[raw], pause_after_events=-1, pause_timeout=3.0, **kwargs)
    with wire_client(proxy) as client:
        before_rest, data = _first_event_latency(client, handle.url(api), api, handle, encode(raw))
    assert before_rest, "the client got the first tool-call event only after the upstream's rest"
    ex = handle.turn(1)
    assert data == ex.expected_client_bytes(encode_safe)


# ----------------------------------------------------------------------------- HTTP/2


@pytest.mark.parametrize("api", APIS)
def test_http2_client_tls_upstream(
    api: API, tls_upstream: UpstreamServer, mitm: MitmdumpPool
) -> None:
    """An HTTP/2 client through mitmdump to an HTTP/1.1 TLS upstream, streamed and
    buffered loops: a changed body size must not break HTTP/2 framing.

    The client is httpx2 (what the SDKs use) with http2=True: httpx 0.28 offers ALPN
    ["http/1.1", "h2"] in that order and mitmproxy honours the client's order, so it never
    gets HTTP/2. connection_strategy=lazy: with the default (eager) mitmproxy offers the
    client only the ALPN the upstream chose, http/1.1."""
    h2_proxy = mitm.get(connection_strategy="lazy")
    verify = ssl.create_default_context(cafile=str(h2_proxy.ca_cert))
    raw = "functions.get_weather:0"
    for stream, kwargs in ((True, {"writes": "random"}), (False, {"framing": "length"})):
        handle = tls_upstream.scenario(ids=[raw], **kwargs)
        with httpx2.Client(
            proxy=h2_proxy.url, http2=True, verify=verify, trust_env=False, timeout=30.0
        ) as client:
            resp = client.post(handle.url(api), json={"model": "m", "stream": False})
            assert resp.http_version == "HTTP/2"
            handle.exchanges.clear()
            result = wire_loop(client, handle, api, stream=stream)
        check_wire_loop(result, handle)
        check_all_safe(result)


def test_concurrent_streams(upstream: UpstreamServer, proxy: Mitmdump) -> None:
    """Several streams through one proxy at once do not mix their ids."""
    errors: list[BaseException] = []

    def run(i: int, api: API) -> None:
        try:
            handle = upstream.scenario(ids=[f"functions.tool_{i}:{i}"], writes="random", seed=i)
            with wire_client(proxy) as client:
                result = wire_loop(client, handle, api, stream=True)
            check_wire_loop(result, handle)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, APIS[i % 3])) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
