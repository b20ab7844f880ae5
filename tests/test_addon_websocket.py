"""The addon on Responses over WebSocket, driven through mitmproxy's test helpers: messages
rewritten (server: encode, client: restore) on Responses routes only, occurrence tags across
one connection, state dropped at its end, toolid_websocket pass / refuse, records, marks,
comments, log lines, fail-open."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from mitmproxy import contentviews, http
from mitmproxy import io as mitmproxy_io
from mitmproxy.test import taddons, tflow
from mitmproxy.websocket import WebSocketMessage
from toolid_view import ToolIdView
from wsproto.frame_protocol import Opcode

from addons.toolid_addon import MARK_CHANGED, MARK_PROBLEM, ToolId, trace_lines
from tests.test_websocket import KIMI, KIMI_1, KIMI_2, USER, create, output, response_events
from toolid.cli import main

RESPONSES_UPGRADE = {
    "upgrade": "websocket",
    "connection": "upgrade",
    "openai-beta": "responses_websockets=2026-02-06",
}


@pytest.fixture
def addon() -> Iterator[tuple[ToolId, taddons.context]]:
    toolid = ToolId()
    with taddons.context(toolid) as tctx:
        yield toolid, tctx


def ws_flow(toolid: ToolId, path: str = "/v1/responses", host: str = "127.0.0.1") -> http.HTTPFlow:
    flow = tflow.twebsocketflow(messages=False)
    flow.request.path = path
    flow.request.host = host
    flow.websocket.messages = []  # type: ignore[union-attr]
    toolid.websocket_start(flow)
    return flow


def send(
    toolid: ToolId, flow: http.HTTPFlow, content: bytes, *, from_client: bool, text: bool = True
) -> WebSocketMessage:
    """One message through the hook, as mitmproxy passes it; the message as forwarded."""
    assert flow.websocket is not None
    message = WebSocketMessage(Opcode.TEXT if text else Opcode.BINARY, from_client, content)
    flow.websocket.messages.append(message)
    toolid.websocket_message(flow)
    return message


def turn(toolid: ToolId, flow: http.HTTPFlow, frame: bytes, raw: str, response: str) -> set[str]:
    """A client frame, then a response calling ``raw``; the call_ids the client got."""
    send(toolid, flow, frame, from_client=True)
    seen = set()
    for event in response_events([raw], response):
        message = send(toolid, flow, event, from_client=False)
        document: dict[str, Any] = json.loads(message.content)
        for item in [document.get("item"), *document.get("response", {}).get("output", [])]:
            if isinstance(item, dict) and "call_id" in item:
                seen.add(item["call_id"])
    return seen


def test_server_messages_are_encoded_and_client_messages_restored(addon):
    toolid, _ = addon
    flow = ws_flow(toolid)
    assert turn(toolid, flow, create([USER]), KIMI, "resp_1") == {KIMI_1}
    frame = create([output(KIMI_1)], "resp_1")
    sent = send(toolid, flow, frame, from_client=True)
    assert sent.content == frame.replace(KIMI_1.encode(), KIMI.encode())
    assert flow.marked == MARK_CHANGED
    record = flow.metadata["toolid"]
    assert record["api"] == "responses"
    assert record["websocket"] == {"messages": 8, "responses": 1}
    assert {r["message"] for r in record["response"]} == {3, 6, 7}  # added, done, completed
    assert record["request"] == [
        {
            "path": "input[0].call_id",
            "raw": KIMI,
            "client": KIMI_1,
            "action": "restored",
            "message": 8,
        }
    ]


def test_tags_across_the_turns_of_one_connection(addon):
    toolid, _ = addon
    flow = ws_flow(toolid)
    assert turn(toolid, flow, create([USER]), KIMI, "resp_1") == {KIMI_1}
    assert turn(toolid, flow, create([output(KIMI_1)], "resp_1"), KIMI, "resp_2") == {KIMI_2}
    toolid.websocket_end(flow)
    assert flow not in toolid.sockets  # the connection's state goes with it
    other = ws_flow(toolid)  # a new connection starts with what its own frames define
    assert turn(toolid, other, create([output(KIMI_2)], "resp_2"), KIMI, "resp_3") == {KIMI_1}


def test_untouched_messages_are_the_same_objects_and_bytes(addon):
    toolid, _ = addon
    flow = ws_flow(toolid)
    for content, from_client, text in [
        (b'{"type":"response.created","response":{"id":"r","output":[]}}', False, True),
        (b"\x00\x01 functions.x:0 binary", False, False),
        (b"not json", True, True),
        (create([USER]), True, True),
        (b'{"type":"response.output_text.delta","delta":"call_id functions.x:0"}', False, True),
    ]:
        message = send(toolid, flow, content, from_client=from_client, text=text)
        assert message.content is content
    assert not flow.marked and "request" not in flow.metadata["toolid"]


def test_other_paths_pass_unchanged(addon):
    toolid, _ = addon
    flow = ws_flow(toolid, path="/v1/realtime")
    (event,) = response_events([KIMI], created=False)[1:2]
    assert send(toolid, flow, event, from_client=False).content is event
    assert "toolid" not in flow.metadata


def test_out_of_scope_hosts_pass_unchanged(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_hosts=["api.moonshot.ai"])
    flow = ws_flow(toolid)
    (event,) = response_events([KIMI])[1:2]
    assert send(toolid, flow, event, from_client=False).content is event


def test_websocket_pass(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_websocket="pass")
    flow = ws_flow(toolid)
    (event,) = response_events([KIMI])[1:2]
    assert send(toolid, flow, event, from_client=False).content is event
    assert "toolid" not in flow.metadata


def upgrade_flow(path: str = "/v1/responses", **headers: str) -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.request.method = "GET"
    flow.request.path = path
    flow.request.headers.update(headers or RESPONSES_UPGRADE)
    return flow


def test_websocket_refuse_answers_426(addon, caplog):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_websocket="refuse")
    caplog.set_level(logging.INFO)
    flow = upgrade_flow()
    toolid.requestheaders(flow)
    assert flow.response is not None and flow.response.status_code == 426
    assert "refused" in flow.comment and "refused" in caplog.text
    for other in (upgrade_flow("/v1/realtime"), upgrade_flow(accept="text/event-stream")):
        toolid.requestheaders(other)
        assert other.response is None or other.response.status_code == 200
    tctx.configure(toolid, toolid_websocket="rewrite")
    flow = upgrade_flow()
    toolid.requestheaders(flow)
    assert flow.response is None


def test_bad_websocket_option(addon):
    toolid, tctx = addon
    with pytest.raises(Exception, match="toolid_websocket"):
        tctx.configure(toolid, toolid_websocket="maybe")


def test_observe_mode_changes_no_message(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    flow = ws_flow(toolid)
    (event,) = response_events([KIMI])[1:2]
    assert send(toolid, flow, event, from_client=False).content is event
    assert flow.metadata["toolid"]["response"][0]["client"] == KIMI_1


def test_comment_and_one_log_line_per_response(addon, caplog):
    toolid, _ = addon
    caplog.set_level(logging.INFO)
    flow = ws_flow(toolid)
    turn(toolid, flow, create([USER]), KIMI, "resp_1")
    turn(toolid, flow, create([output(KIMI_1)], "resp_1"), KIMI, "resp_2")
    lines = [r.getMessage() for r in caplog.records if "WebSocket response" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].endswith("[GET 127.0.0.1/v1/responses, WebSocket response 1]")
    assert f"{KIMI} -> {KIMI_1}" in lines[0]
    assert f"{KIMI_1} -> {KIMI}" in lines[1] and KIMI_2 in lines[1]
    assert flow.comment.startswith("toolid: 1 restored") and "encoded" in flow.comment


def test_a_broken_message_is_reported_and_passes(addon, caplog):
    toolid, _ = addon
    flow = ws_flow(toolid)
    broken = b'{"type":"response.output_item.added","item":{"call_id":"functions.x:0",'
    assert send(toolid, flow, broken, from_client=False).content is broken
    assert flow.marked == MARK_PROBLEM
    assert flow.metadata["toolid"]["problems"][0].startswith("message 1: event left unchanged")
    assert "toolid" in caplog.text and "functions.x" not in caplog.text  # no body in logs


def test_an_unexpected_error_never_escapes(addon, monkeypatch, caplog):
    toolid, _ = addon
    flow = ws_flow(toolid)

    def boom(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("toolid.ResponsesConnection.server_message", boom)
    (event,) = response_events([KIMI])[1:2]
    assert send(toolid, flow, event, from_client=False).content is event
    assert flow.marked == MARK_PROBLEM and "boom" in caplog.text


# --- the contentview, toolid.trace and toolid inspect on WebSocket messages ------------------


def two_turns(toolid: ToolId) -> http.HTTPFlow:
    flow = ws_flow(toolid)
    turn(toolid, flow, create([USER]), KIMI, "resp_1")
    turn(toolid, flow, create([output(KIMI_1)], "resp_1"), KIMI, "resp_2")
    send(toolid, flow, create([output(KIMI_2)], "resp_2"), from_client=True)
    toolid.websocket_end(flow)
    return flow


def test_the_contentview_annotates_websocket_messages(addon):
    toolid, _ = addon
    flow = two_turns(toolid)
    assert flow.websocket is not None
    messages = flow.websocket.messages
    added = messages[9]  # message 10: the second response's output_item.added
    result = contentviews.prettify_message(added, flow)
    assert result.view_name == "toolid"
    assert result.text.splitlines()[0].startswith("# toolid on this message: 2 encoded")
    assert "OpenAI Responses WebSocket message from the server" in result.text
    assert f'"call_id": "{KIMI_2}",  # ⟵ 2nd use of {KIMI}' in result.text
    request = contentviews.prettify_message(messages[-1], flow)  # restored: the raw id
    assert "WebSocket message from the client" in request.text
    assert f'"call_id": "{KIMI}",  # ⚠ not [A-Za-z0-9_-]+' in request.text
    assert "# toolid on this message: 1 restored" in request.text
    binary = WebSocketMessage(Opcode.BINARY, False, b"\x00{}")
    assert ToolIdView().render_priority(b"\x00{}", _metadata(flow, binary)) == -1
    text = WebSocketMessage(Opcode.TEXT, False, b"hello")
    assert ToolIdView().render_priority(b"hello", _metadata(flow, text)) == -1


def _metadata(flow: http.HTTPFlow, message: WebSocketMessage) -> contentviews.Metadata:
    return contentviews.Metadata(flow=flow, websocket_message=message)


def test_trace_follows_an_id_through_websocket_messages(addon):
    toolid, _ = addon
    flow = two_turns(toolid)
    lines = trace_lines(KIMI_2, [flow])
    assert lines == [
        "#1 GET /v1/responses request message 15 input[0].call_id (replayed, restored)",
        "#1 GET /v1/responses response message 10 item.call_id (created, encoded)",
        "#1 GET /v1/responses response message 13 item.call_id (created, encoded)",
        "#1 GET /v1/responses response message 14 response.output[0].call_id (created, encoded)",
    ]
    flow.metadata.clear()  # without records: read from the stored messages
    found = trace_lines("fc_0", [flow])
    assert "#1 GET /v1/responses response message 3 item.id (created)" in found
    assert "#1 GET /v1/responses response message 4 item_id (created)" in found


def test_inspect_reads_websocket_messages_from_a_flow_file(addon, tmp_path, capsys):
    toolid, _ = addon
    flow = ws_flow(toolid)
    tctx_messages = [  # what a capture without toolid holds: the raw id, every turn
        (create([USER]), True),
        *((event, False) for event in response_events([KIMI], "resp_1")),
        (create([output(KIMI)], "resp_1"), True),
        *((event, False) for event in response_events([KIMI], "resp_2")),
    ]
    assert flow.websocket is not None
    for content, from_client in tctx_messages:
        flow.websocket.messages.append(WebSocketMessage(Opcode.TEXT, from_client, content))
    flow.live = False
    path = tmp_path / "ws.flows"
    with path.open("wb") as file:
        mitmproxy_io.FlowWriter(file).add(flow)
    status = main(["inspect", "--json", str(path)])
    out = capsys.readouterr().out
    rows = json.loads(out) if out.startswith("[") else [json.loads(x) for x in out.splitlines()]
    assert status == 1  # not [A-Za-z0-9_-]+
    calls = [r for r in rows if r["path"].endswith("call_id") and "server" in r["where"]]
    assert {r["client"] for r in calls if "message 3 " in r["where"]} == {KIMI_1}
    assert {r["client"] for r in calls if "message 10 " in r["where"]} == {KIMI_2}
    assert any("message 8 (client)" in r["where"] for r in rows)


def test_a_responses_log_line_is_bounded(addon, caplog):
    toolid, _ = addon
    toolid.records.max_records = 2
    caplog.set_level(logging.INFO)
    flow = ws_flow(toolid)
    turn(toolid, flow, create([USER]), KIMI, "resp_1")  # 3 changes: 2 kept, 1 counted
    (line,) = [r.getMessage() for r in caplog.records if "WebSocket response" in r.getMessage()]
    assert "2 encoded" in line and "(+1 more)" in line
    assert len(flow.metadata["toolid"]["response"]) == 2


def test_a_client_message_with_broken_pairing_is_repaired(addon, caplog):
    """toolid_repair=true: a full-history frame whose call has no output gets one, before
    its ids are restored; the repair recorded with the message's number and logged."""
    toolid, tctx = addon
    tctx.configure(toolid, toolid_repair=True)
    flow = ws_flow(toolid)
    call = {"type": "function_call", "id": "fc_1", "call_id": KIMI_1, "name": "f"}
    answer = {"type": "message", "role": "assistant", "content": []}
    frame = create([USER, call, USER, answer, USER])
    with caplog.at_level(logging.INFO):
        sent = send(toolid, flow, frame, from_client=True)
    items = json.loads(sent.content)["input"]
    assert [item.get("type") for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]
    assert items[1]["call_id"] == items[2]["call_id"] == KIMI  # restored
    assert [(r["code"], r["done"], r["message"]) for r in flow.metadata["toolid"]["repairs"]] == [
        ("missing-result", "inserted", 1)
    ]
    assert any(
        "message 1: repaired 1 pairing problem: missing-result" in r.getMessage()
        for r in caplog.records
    )


def test_a_client_message_is_not_repaired_by_default(addon):
    toolid, _ = addon
    flow = ws_flow(toolid)
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_ok", "name": "f"}
    answer = {"type": "message", "role": "assistant", "content": []}
    frame = create([USER, call, USER, answer, USER])
    assert send(toolid, flow, frame, from_client=True).content == frame


def test_a_client_message_is_not_repaired_when_observing(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_repair=True, toolid_mode="observe")
    flow = ws_flow(toolid)
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_ok", "name": "f"}
    answer = {"type": "message", "role": "assistant", "content": []}
    frame = create([USER, call, USER, answer, USER])
    assert send(toolid, flow, frame, from_client=True).content == frame
    assert [r["code"] for r in flow.metadata["toolid"]["repairs"]] == ["missing-result"]
    assert "toolid would repair: missing-result" in flow.comment
