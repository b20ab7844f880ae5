"""The status endpoint and its metrics, driven through mitmproxy's own test helpers (taddons,
tflow): each counter moves by what happened to the flows that passed; /healthz answers 503
while the proxy starts and from its shutdown on, 200 while it runs; /metrics parses with
prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from mitmproxy.test import taddons, tflow
from prometheus_client.parser import text_string_to_metric_families
from test_addon import (
    CLIENT,
    RAW,
    chat_request,
    chat_response,
    chat_stream,
    drive,
    request_flow,
    response_flow,
    sse_flow,
    tool_loop_flow,
)

from addons.toolid_addon import ToolId
from addons.toolid_status import ACTIONS, OUTCOMES, StatusServer, parse_address
from toolid import encode
from toolid.pairing import CODES

type Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def addon() -> Iterator[tuple[ToolId, taddons.context]]:
    toolid = ToolId()
    with taddons.context(toolid) as tctx:
        yield toolid, tctx


def samples(toolid: ToolId) -> Samples:
    """Every sample of the addon's /metrics text, parsed by prometheus_client."""
    text = toolid.metrics.exposition()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def counts(toolid: ToolId, name: str, label: str) -> dict[str, float]:
    """The non-zero samples of one counter, by its label's value."""
    return {
        labels[0][1]: value
        for (sample, labels), value in samples(toolid).items()
        if sample == name and labels and labels[0][0] == label and value
    }


def flows(toolid: ToolId) -> dict[str, float]:
    return counts(toolid, "toolid_flows_total", "outcome")


def ids(toolid: ToolId) -> dict[str, float]:
    return counts(toolid, "toolid_ids_total", "action")


def observed(toolid: ToolId) -> float:
    return samples(toolid)[("toolid_rewrite_seconds_count", ())]


def test_every_series_is_there_from_the_start(addon):
    """Each label value is exported at 0 before anything happened (so rates start at 0)."""
    toolid, _ = addon
    got = samples(toolid)
    for action in ACTIONS:
        assert got[("toolid_ids_total", (("action", action),))] == 0
    for outcome in OUTCOMES:
        assert got[("toolid_flows_total", (("outcome", outcome),))] == 0
    for code in CODES:
        assert got[("toolid_pairing_problems_total", (("code", code),))] == 0
    assert got[("toolid_rewrite_seconds_bucket", (("le", "+Inf"),))] == 0
    assert got[("toolid_rewrite_seconds_count", ())] == 0


def test_a_tool_loop_counts_its_ids_and_its_flow(addon):
    """A request restoring two ids, answered by a response with one id to encode: one flow,
    changed; two restored, one encoded; its time observed once."""
    toolid, _ = addon
    tool_loop_flow(toolid, chat_request(CLIENT), chat_response("functions.other:1"))
    assert ids(toolid) == {"restored": 2, "encoded": 1}
    assert flows(toolid) == {"changed": 1}
    assert observed(toolid) == 1
    assert samples(toolid)[("toolid_rewrite_seconds_sum", ())] > 0


def test_a_reused_id_counts_as_tagged(addon):
    toolid, _ = addon
    tool_loop_flow(toolid, chat_request(CLIENT), chat_response(RAW))
    assert ids(toolid) == {"restored": 2, "tagged": 1}


def test_a_flow_with_nothing_to_change_counts_as_unchanged(addon):
    toolid, _ = addon
    tool_loop_flow(toolid, chat_request("call_1"), chat_response("call_2"))
    assert ids(toolid) == {}
    assert flows(toolid) == {"unchanged": 1}


def test_a_failed_open_flow_is_counted_once(addon):
    """A response that cannot be read passes as it is: one failed_open flow, also when the
    flow then errors (the client went away)."""
    toolid, _ = addon
    flow = request_flow(chat_request("call_1"))
    toolid.request(flow)
    flow.response = tflow.tresp(content=b"{not json")
    flow.response.headers["content-type"] = "application/json"
    flow.response.headers["content-encoding"] = "gzip"  # and not gzip: cannot be decoded
    toolid.response(flow)
    flow.error = tflow.terr()
    toolid.error(flow)
    assert flows(toolid) == {"failed_open": 1}
    assert observed(toolid) == 1


def streamed_flow(toolid: ToolId, piece: int) -> None:
    """A streamed tool loop's flow through every hook: the chat stream fed in pieces."""
    flow = request_flow(chat_request("call_1", stream=True))
    toolid.request(flow)
    flow.response = sse_flow().response
    toolid.responseheaders(flow)
    assert flow.response is not None and callable(flow.response.stream)
    drive(flow.response.stream, chat_stream(), piece)
    toolid.response(flow)


def test_a_streamed_flow_counts_its_ids_and_its_time(addon):
    toolid, _ = addon
    streamed_flow(toolid, 7)
    assert ids(toolid) == {"encoded": 1}
    assert flows(toolid) == {"changed": 1}
    assert observed(toolid) == 1


def test_an_event_over_the_limit_counts_as_too_large(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_max_event_bytes=64)
    streamed_flow(toolid, 1000)
    assert flows(toolid) == {"too_large": 1}


def test_a_signed_request_counts_as_signed(addon):
    toolid, _ = addon
    flow = request_flow(chat_request())
    flow.request.headers["authorization"] = (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, "
        "SignedHeaders=host, Signature=0123"
    )
    toolid.request(flow)
    flow.response = tflow.tresp(content=chat_response())
    flow.response.headers["content-type"] = "application/json"
    toolid.response(flow)
    assert flows(toolid) == {"signed": 1}
    assert ids(toolid) == {}


def test_pairing_problems_are_counted_by_code(addon):
    """A result whose call is not in the history: one orphan-result."""
    toolid, _ = addon
    history = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "call_gone", "content": "x"},
        ],
    }
    tool_loop_flow(toolid, json.dumps(history).encode(), chat_response("call_1"))
    assert counts(toolid, "toolid_pairing_problems_total", "code") == {"orphan-result": 1}


def test_out_of_scope_flows_are_not_counted(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_hosts=["api.example.com"])
    tool_loop_flow(toolid, chat_request(CLIENT), chat_response(RAW))
    assert flows(toolid) == {}
    assert observed(toolid) == 0


def test_a_websocket_counts_as_one_flow_when_it_ends(addon):
    toolid, _ = addon
    flow = tflow.twebsocketflow()
    assert flow.websocket is not None
    flow.live, flow.websocket.timestamp_end = True, None  # open
    toolid.request(flow)
    toolid.response(flow)  # the upgrade's 101: the WebSocket goes on
    assert flows(toolid) == {}
    flow.websocket.timestamp_end = 1.0  # closed, as mitmproxy sets it before the hook
    toolid.websocket_end(flow)
    assert flows(toolid) == {"websocket": 1}


def test_the_exposition_has_only_few_label_values(addon):
    """Labels are actions, outcomes and codes: never an id, host or path."""
    toolid, _ = addon
    for n in range(20):
        flow = response_flow(chat_response(f"functions.f:{n}"), host=f"h{n}.example")
        toolid.response(flow)
    text = toolid.metrics.exposition()
    assert "functions.f" not in text and "example" not in text and encode(RAW) not in text
    # the histogram's 15 samples, the repairs, the one rejection code so far
    assert len(samples(toolid)) == len(ACTIONS) + len(OUTCOMES) + len(CODES) + 17


# --- the endpoint ------------------------------------------------------------------------------


async def get(address: tuple[str, int], request: bytes) -> tuple[int, bytes]:
    """Send ``request`` (a whole request head) and read the response: status, body."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(request)
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def healthz(path: str = "/healthz", method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: toolid\r\n\r\n".encode()


def test_healthz_follows_the_proxy_from_start_to_shutdown():
    async def scenario() -> None:
        toolid = ToolId()
        with taddons.context(toolid) as tctx:
            tctx.configure(toolid, toolid_status="127.0.0.1:0")
            assert toolid.status is not None and toolid.status.address is not None
            address = toolid.status.address
            await asyncio.sleep(0)  # the listener is served from the loop's next turn
            assert await get(address, healthz()) == (503, b"starting\n")
            toolid.running()
            assert await get(address, healthz()) == (200, b"serving\n")
            assert (await get(address, healthz("/metrics")))[0] == 200
            assert (await get(address, healthz("/nothing")))[0] == 404
            assert (await get(address, healthz(method="POST")))[0] == 405
            assert await get(address, healthz(method="HEAD")) == (200, b"")
            # a connection open at shutdown gets its answer: 503
            reader, writer = await asyncio.open_connection(*address)
            writer.write(b"GET /healthz HTTP/1.1\r\n")
            await get(address, healthz())  # served after the one above was accepted
            stopping = toolid.done()
            assert stopping is not None
            closing = asyncio.ensure_future(stopping)
            writer.write(b"\r\n")
            reply = await reader.read()
            await closing
            assert reply.startswith(b"HTTP/1.1 503 ") and reply.endswith(b"stopping\n")
            with pytest.raises(OSError):
                await get(address, healthz())

    asyncio.run(scenario())


def test_metrics_are_served_in_the_exposition_format():
    async def scenario() -> None:
        toolid = ToolId()
        with taddons.context(toolid) as tctx:
            tctx.configure(toolid, toolid_status="127.0.0.1:0")
            toolid.running()
            tool_loop_flow(toolid, chat_request(CLIENT), chat_response("functions.other:1"))
            assert toolid.status is not None and toolid.status.address is not None
            await asyncio.sleep(0)
            reader, writer = await asyncio.open_connection(*toolid.status.address)
            writer.write(healthz("/metrics"))
            data = await reader.read()
            writer.close()
            done = toolid.done()
            if done is not None:
                await done
        head, _, body = data.partition(b"\r\n\r\n")
        assert b"content-type: text/plain; version=0.0.4" in head.lower()
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert families["toolid_ids"].type == "counter"
        assert families["toolid_rewrite_seconds"].type == "histogram"
        restored = [s for s in families["toolid_ids"].samples if s.labels["action"] == "restored"]
        assert restored[0].value == 2

    asyncio.run(scenario())


def test_a_taken_port_is_one_clear_error(addon):
    toolid, tctx = addon

    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(Exception, match=f"toolid_status: cannot serve 127.0.0.1:{port}"):
                tctx.configure(toolid, toolid_status=f"127.0.0.1:{port}")
        finally:
            server.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("spec", "address"),
    [("127.0.0.1:9091", ("127.0.0.1", 9091)), ("[::1]:9091", ("::1", 9091))],
)
def test_status_addresses(spec, address):
    assert parse_address(spec) == address


@pytest.mark.parametrize("spec", ["9091", "127.0.0.1", ":9091", "127.0.0.1:x", "h:70000"])
def test_bad_status_addresses(spec):
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(spec)


def test_an_answer_never_depends_on_a_body():
    """Only the head is read: the endpoint answers a request however long its body."""
    server = StatusServer(ToolId().metrics)
    server.state = "serving"
    answer = server.answer(b"GET /healthz?probe=1 HTTP/1.1\r\nContent-Length: 10\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
