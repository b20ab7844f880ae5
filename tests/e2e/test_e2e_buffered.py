"""End to end, buffered (non-streaming) responses: real SDKs and raw httpx through a real
mitmdump running addons/toolid_addon.py, against a real local upstream.

The SDK clients get ``http_client=httpx2.Client(proxy=...)``: anthropic 2.x and openai 3.x
are built on httpx2, and anthropic rejects an ``httpx.Client`` outright (openai still
accepts one: ``test_sdk_openai_legacy_httpx_client``). The byte-level tests use httpx.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
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
    SAFE_ID,
    LoopResult,
    check_all_safe,
    check_client_ids,
    check_turn2_request,
    encode_call,
    encode_safe,
    request_id_positions,
    restore_strict,
    sdk_loop,
    unchanged,
    wire_loop,
)

pytestmark = pytest.mark.e2e

# ----------------------------------------------------------------------------- SDK loops


@pytest.mark.parametrize("raw", RAW_IDS)
@pytest.mark.parametrize("api", APIS)
def test_sdk_loop_regular_proxy(
    api: API, raw: str, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=[raw])
    result = sdk_loop(api, handle.base_url(api), proxy=proxy.url)
    check_client_ids(result, handle, encode_safe)
    check_all_safe(result)
    check_turn2_request(handle, result.requests[-1])
    # and the upstream got back its exact native ids
    ex = handle.turn(2)
    positions = request_id_positions(api, ex.json)
    assert {v for k, v in positions if k == "call"} == {raw}
    if api == "responses":
        assert {v for k, v in positions if k == "item"} == {"fc_" + raw}
    if not needs_change(raw):
        check_proxy_rewrites(upstream, proxy)


@pytest.mark.parametrize(
    "raw", [p for p in RAW_IDS if p.id in ("kimi", "non-ascii", "empty", "conforming")]
)
@pytest.mark.parametrize("api", APIS)
def test_sdk_loop_reverse_proxy(
    api: API, raw: str, upstream: UpstreamServer, reverse_proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=[raw])
    base = handle.base_url(api).replace(upstream.base_url, reverse_proxy.url)
    result = sdk_loop(api, base)
    check_client_ids(result, handle, encode_safe)
    check_all_safe(result)
    check_turn2_request(handle, result.requests[-1])
    if not needs_change(raw):
        check_proxy_rewrites(upstream, origin=reverse_proxy.url)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_sdk_openai_legacy_httpx_client(
    api: API, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    """openai with an httpx (not httpx2) client whose proxy is mitmdump."""
    handle = upstream.scenario(ids=["functions.get_weather:0"])
    result = LoopResult(api=api)
    http_client = httpx.Client(
        proxy=proxy.url,
        trust_env=False,
        event_hooks={"request": [lambda request: result.requests.append(request.read())]},
    )
    seen = sdk_loop(api, handle.base_url(api), http_client=http_client)
    seen.requests = result.requests
    check_client_ids(seen, handle, encode_safe)
    check_turn2_request(handle, seen.requests[-1])


@pytest.mark.parametrize("api", APIS)
def test_sdk_parallel_tool_calls(api: API, upstream: UpstreamServer, proxy: Mitmdump) -> None:
    raws = ["functions.get_weather:0", "call_ok_1", "functions.get_time:2", "x y"]
    handle = upstream.scenario(ids=raws, item_ids=["fc_a.0", "fc_b", "fc_c.2", "fc_d"])
    result = sdk_loop(api, handle.base_url(api), proxy=proxy.url)
    check_client_ids(result, handle, encode_safe)
    check_all_safe(result)
    check_turn2_request(handle, result.requests[-1])


@pytest.mark.parametrize("api", APIS)
def test_rewrite_is_logged(api: API, upstream: UpstreamServer, proxy: Mitmdump) -> None:
    handle = upstream.scenario(ids=["functions.get_weather:0"])
    mark = proxy.mark()
    sdk_loop(api, handle.base_url(api), proxy=proxy.url)
    line = proxy.wait_for_log("toolid:", mark)
    assert "tid1_functions-2Eget_weather-3A0" in line or "functions.get_weather:0" in line


# ----------------------------------------------------------------------------- bytes on the wire


@pytest.mark.parametrize("raw", RAW_IDS + ODD_RAW_IDS)
@pytest.mark.parametrize("api", APIS)
def test_wire_bytes(api: API, raw: str, upstream: UpstreamServer, proxy: Mitmdump) -> None:
    """Only the id literals change; unchanged ids leave the bodies byte-identical."""
    handle = upstream.scenario(ids=[raw])
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, api, stream=False)
    check_wire_loop(result, handle)
    check_all_safe(result)
    if not needs_change(raw):
        assert result.turn1_body == handle.turn(1).sent
        assert handle.turn(2).body == result.requests[1]
        check_proxy_rewrites(upstream, proxy)


@pytest.mark.parametrize("api", APIS)
def test_wire_bytes_reverse_proxy(
    api: API, upstream: UpstreamServer, reverse_proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=["functions.get_weather:0", "call_keep"])
    with wire_client() as client:
        result = wire_loop(client, handle, api, stream=False, origin=reverse_proxy.url)
    check_wire_loop(result, handle)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"framing": "chunked"}, id="chunked"),
        pytest.param({"framing": "close"}, id="read-until-close"),
        pytest.param({"framing": "chunked", "writes": "random"}, id="chunked-small-writes"),
        pytest.param({"writes": "random", "max_write": 3}, id="length-small-writes"),
        pytest.param({"gzip": "auto"}, id="gzip-requested"),
        pytest.param({"gzip": "force", "framing": "chunked"}, id="gzip-forced-chunked"),
        pytest.param({"gzip": "force", "framing": "close", "writes": "random"}, id="gzip-close"),
        pytest.param({"ensure_ascii": True, "ids": ["météo.0"]}, id="escaped-literals"),
        pytest.param(
            {"ids": ["call_ok", "fn.x:1"], "item_ids": ["fc.odd:0", "fc_ok"]},
            id="mixed-item-ids",
        ),
    ],
)
@pytest.mark.parametrize("api", APIS)
def test_wire_bytes_framings(
    api: API, kwargs: dict[str, Any], upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    handle = upstream.scenario(**kwargs)
    headers = {"accept-encoding": "gzip"} if kwargs.get("gzip") == "auto" else None
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, api, stream=False, headers=headers)
    check_wire_loop(result, handle)
    if kwargs.get("gzip") == "auto":
        assert handle.turn(1).header("accept-encoding") == "gzip"
        assert ("content-encoding", "gzip") in handle.turn(1).response_headers


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
def test_anthropic_server_tool_positions(
    stream: bool, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    """server_tool_use.id, web_search_tool_result.tool_use_id, tool_use.caller.tool_id
    (and, streamed, a block inside message_start.message.content) are encoded on the way
    to the client and restored on the way back; the SDK accepts the result."""
    kwargs: dict[str, Any] = {
        "ids": ["functions.get_weather:0"],
        "server_tool_ids": ["srv:web_search.0", "srvtoolu_01AbC"],
        "writes": "random",
    }
    handle = upstream.scenario(**kwargs)
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, "anthropic", stream=stream)
    check_wire_loop(result, handle)
    check_all_safe(result)
    sent = request_id_positions("anthropic", handle.turn(2).json)
    assert ("srv", "srv:web_search.0") in sent
    assert ("ref", "srv:web_search.0") in sent  # tool_use_id and caller.tool_id
    assert ("srv", "srvtoolu_01AbC") in sent

    handle = upstream.scenario(**kwargs)
    sdk_result = sdk_loop("anthropic", handle.base_url("anthropic"), stream=stream, proxy=proxy.url)
    check_client_ids(sdk_result, handle, encode_safe)
    check_all_safe(sdk_result)
    check_turn2_request(handle, sdk_result.requests[-1])


def test_responses_previous_response_id(upstream: UpstreamServer, proxy: Mitmdump) -> None:
    """With previous_response_id the client sends only function_call_output.call_id."""
    raw = "functions.get_weather:0"
    handle = upstream.scenario(ids=[raw])
    with wire_client(proxy) as client:
        first = client.post(handle.url("responses"), json={"model": "m", "input": "weather?"})
        call_id = first.json()["output"][0]["call_id"]
        assert call_id == encode(raw)
        body = {
            "model": "m",
            "previous_response_id": first.json()["id"],
            "input": [{"type": "function_call_output", "call_id": call_id, "output": "sunny"}],
        }
        second = client.post(handle.url("responses"), json=body)
    assert second.status_code == 200
    assert handle.turn(2).json["input"][0]["call_id"] == raw


# ----------------------------------------------------------------------------- options


def test_observe_mode_changes_nothing(upstream: UpstreamServer, mitm: MitmdumpPool) -> None:
    proxy = mitm.get(toolid_mode="observe")
    for api in APIS:
        handle = upstream.scenario(ids=["functions.get_weather:0"])
        mark = proxy.mark()
        with wire_client(proxy) as client:
            result = wire_loop(client, handle, api, stream=False)
        # the client saw the raw ids, byte for byte, and sent them back as they were
        check_wire_loop(result, handle, unchanged, unchanged)
        assert result.turn1_body == handle.turn(1).sent
        assert handle.turn(2).body == result.requests[1]
        # ... but the proxy reported what it would have done
        line = proxy.wait_for_log("toolid", mark)
        assert "functions.get_weather:0" in line


def test_hosts_option_limits_scope(upstream: UpstreamServer, mitm: MitmdumpPool) -> None:
    """toolid_hosts=example.com,localhost: the upstream reached as localhost is rewritten,
    the same upstream reached as 127.0.0.1 is not touched."""
    proxy = mitm.get(toolid_hosts="example.com,localhost")
    raw = "functions.get_weather:0"
    for api in APIS:
        outside = upstream.scenario(ids=[raw])
        with wire_client(proxy) as client:
            result = wire_loop(client, outside, api, stream=False)
        check_wire_loop(result, outside, unchanged, unchanged)
        assert result.turn1_body == outside.turn(1).sent
        assert outside.turn(2).body == result.requests[1]

        inside = upstream.scenario(ids=[raw])
        with wire_client(proxy) as client:
            result = wire_loop(
                client, inside, api, stream=False, origin=f"http://localhost:{upstream.port}"
            )
        check_wire_loop(result, inside)


def test_strict_hosts_keep_client_ids(upstream: UpstreamServer, mitm: MitmdumpPool) -> None:
    """A strict upstream gets the client id back unless the raw id is itself safe; the
    same upstream under another name (not strict) gets the raw ids."""
    proxy = mitm.get(toolid_strict_hosts="127.0.0.1")
    raws = ["functions.x:0", "tid1_abc", "call_plain"]
    for api in APIS:
        strict = upstream.scenario(ids=raws)
        with wire_client(proxy) as client:
            result = wire_loop(client, strict, api, stream=False)
        check_wire_loop(result, strict, encode_safe, restore_strict)
        calls = [v for k, v in request_id_positions(api, strict.turn(2).json) if k == "call"]
        assert "tid1_functions-2Ex-3A0" in calls  # not restorable to a strict host
        assert "tid1_abc" in calls  # restored: the raw id is itself safe
        assert "functions.x:0" not in calls

        relaxed = upstream.scenario(ids=raws)
        with wire_client(proxy) as client:
            result = wire_loop(
                client, relaxed, api, stream=False, origin=f"http://localhost:{upstream.port}"
            )
        check_wire_loop(result, relaxed)


@pytest.mark.parametrize("api", APIS)
def test_profile_call(api: API, upstream: UpstreamServer, mitm: MitmdumpPool) -> None:
    proxy = mitm.get(toolid_profile="call")
    raws = ["functions.get_weather:0", "toolu_01AbC", "call_abc"]
    handle = upstream.scenario(ids=raws, item_ids=["fc_1", "fc.2", "call_x"])
    with wire_client(proxy) as client:
        result = wire_loop(client, handle, api, stream=False)
    check_wire_loop(result, handle, encode_call)
    assert result.call_ids == [
        "call_tid1_functions-2Eget_weather-3A0",
        "call_tid1_toolu_01AbC",
        "call_abc",
    ]
    sdk_handle = upstream.scenario(ids=raws)
    sdk_result = sdk_loop(api, sdk_handle.base_url(api), proxy=proxy.url)
    check_client_ids(sdk_result, sdk_handle, encode_call)
    check_turn2_request(sdk_handle, sdk_result.requests[-1])


# ----------------------------------------------------------------------------- HTTPS


def test_https_upstream_sdk_subprocess(
    tls_upstream: UpstreamServer, proxy: Mitmdump, tmp_path: Path
) -> None:
    """The SDKs with their default HTTP clients, configured only by the environment:
    HTTPS_PROXY=mitmdump, SSL_CERT_FILE=mitmproxy's CA (httpx and httpx2 both read
    SSL_CERT_FILE when trust_env is on, the default). mitmdump runs with
    ssl_insecure=true because the upstream's certificate is self-signed."""
    raw = "functions.get_weather:0"
    handles = {api: tls_upstream.scenario(ids=[raw]) for api in APIS}
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    for k in ("SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        env.pop(k, None)
    env.update(
        HTTPS_PROXY=proxy.url,
        https_proxy=proxy.url,
        NO_PROXY="",
        no_proxy="",
        SSL_CERT_FILE=str(proxy.ca_cert),
    )
    job = {api: h.base_url(api) for api, h in handles.items()}
    script = Path(__file__).with_name("https_client.py")
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(job)],
        env=env,
        capture_output=True,
        timeout=90,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    seen = json.loads(proc.stdout)
    for api, handle in handles.items():
        result = LoopResult(api=api, **seen[api])
        check_client_ids(result, handle, encode_safe)
        check_all_safe(result)
        positions = request_id_positions(api, handle.turn(2).json)
        assert {v for k, v in positions if k == "call"} == {raw}
        assert all(SAFE_ID.fullmatch(v) is None for _, v in positions)
