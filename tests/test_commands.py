"""The addon's commands (toolid.encode, toolid.decode, toolid.trace), and its marks."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from mitmproxy import exceptions
from mitmproxy.addons import view
from mitmproxy.test import taddons, tflow

from addons.toolid_addon import MARK_CHANGED, ToolId, trace_lines
from toolid import encode

DATA = Path(__file__).parent / "data"
RAW = "functions.get_weather:0"
CLIENT = encode(RAW)  # tid1_functions-2Eget_weather-3A0
OTHER = "other_tool:1"


@pytest.fixture
def addon() -> Iterator[tuple[ToolId, view.View, taddons.context]]:
    toolid, flows = ToolId(), view.View()
    with taddons.context(toolid, flows) as tctx:
        yield toolid, flows, tctx


def chat_response(tool_id: str) -> bytes:
    return json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "tool_calls": [{"id": tool_id, "type": "function", "function": {}}],
                    },
                }
            ]
        }
    ).encode()


def chat_request(tool_id: str) -> bytes:
    return json.dumps(
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": tool_id, "type": "function"}]},
                {"role": "tool", "tool_call_id": tool_id, "content": "sunny"},
            ]
        }
    ).encode()


def live_response(body: bytes, path: str = "/v1/chat/completions") -> tflow.HTTPFlow:
    flow = tflow.tflow(resp=True, live=True)
    flow.request.method, flow.request.path = "POST", path
    flow.request.headers["content-type"] = "application/json"
    flow.request.content = b'{"messages": []}'
    flow.response.headers["content-type"] = "application/json"
    flow.response.content = body
    return flow


def live_request(body: bytes, path: str = "/v1/chat/completions") -> tflow.HTTPFlow:
    flow = tflow.tflow(live=True)
    flow.request.method, flow.request.path = "POST", path
    flow.request.headers["content-type"] = "application/json"
    flow.request.content = body
    return flow


# --- encode / decode ----------------------------------------------------------------------------


def test_encode_and_decode(addon):
    toolid, _, tctx = addon
    assert tctx.command(toolid.encode_id, RAW) == CLIENT
    assert tctx.command(toolid.encode_id, "call_abc") == "call_abc"
    assert tctx.command(toolid.decode_id, CLIENT) == RAW
    assert tctx.command(toolid.decode_id, "tid1_abc") == "tid1_abc"  # not made by encode


def test_encode_uses_the_current_profile(addon):
    toolid, _, tctx = addon
    tctx.configure(toolid, toolid_profile="call")
    assert tctx.command(toolid.encode_id, "toolu_01AbC") == "call_tid1_toolu_01AbC"
    assert tctx.command(toolid.decode_id, "call_tid1_toolu_01AbC") == "toolu_01AbC"


def test_commands_are_registered_under_their_names(addon):
    _, _, tctx = addon
    commands = tctx.master.commands
    assert commands.call_strings("toolid.encode", [RAW]) == CLIENT
    assert commands.call_strings("toolid.decode", [CLIENT]) == RAW
    assert commands.commands["toolid.trace"].signature_help() == (
        "toolid.trace tool_id flows -> str[]"
    )


# --- trace ----------------------------------------------------------------------------------------


@pytest.fixture
def conversation(addon) -> list[tflow.HTTPFlow]:
    """Four flows through the addon: one creates the id, two replay it, one is unrelated."""
    toolid, flows, _ = addon
    created = live_response(chat_response(RAW))
    toolid.response(created)  # the client got CLIENT
    unrelated = live_response(chat_response(OTHER))
    toolid.response(unrelated)
    replay1 = live_request(chat_request(CLIENT))
    toolid.request(replay1)  # restored: RAW went upstream
    replay2 = live_request(chat_request(CLIENT))
    toolid.request(replay2)
    replay2.response = tflow.tresp(content=b'{"choices": []}')
    flows.add([created, unrelated, replay1, replay2])
    return [created, unrelated, replay1, replay2]


EXPECTED = [
    "#1 POST /v1/chat/completions response choices[0].message.tool_calls[0].id (created, encoded)",
    "#3 POST /v1/chat/completions request messages[0].tool_calls[0].id (replayed, restored)",
    "#3 POST /v1/chat/completions request messages[1].tool_call_id (replayed, restored)",
    "#4 POST /v1/chat/completions request messages[0].tool_calls[0].id (replayed, restored)",
    "#4 POST /v1/chat/completions request messages[1].tool_call_id (replayed, restored)",
]


@pytest.mark.parametrize("tool_id", [RAW, CLIENT])
def test_trace_by_raw_or_encoded_id(addon, conversation, tool_id):
    toolid, _, tctx = addon
    assert tctx.command(toolid.trace, tool_id) == EXPECTED


def test_trace_other_id_finds_only_its_flow(addon, conversation):
    toolid, _, tctx = addon
    assert tctx.command(toolid.trace, OTHER) == [
        "#2 POST /v1/chat/completions response choices[0].message.tool_calls[0].id "
        "(created, encoded)"
    ]
    assert tctx.command(toolid.trace, "never_seen:9") == []


def test_trace_with_a_flow_spec(addon, conversation):
    toolid, _, tctx = addon
    conversation[2].marked = ""
    conversation[3].marked = ""  # only the creating flow stays marked
    assert tctx.command(toolid.trace, RAW, "@marked") == [EXPECTED[0]]


def test_trace_is_logged(addon, conversation, caplog):
    toolid, _, tctx = addon
    with caplog.at_level(logging.INFO):
        tctx.command(toolid.trace, CLIENT)
    assert f"toolid.trace {CLIENT} (raw {RAW}): 5 sightings" in caplog.text
    assert EXPECTED[0] in caplog.text


def test_trace_without_metadata_scans_bodies(addon):
    """Flows toolid never touched (loaded from a file, another proxy's capture)."""
    toolid, flows, tctx = addon
    stream = (DATA / "chat_stream.sse").read_bytes().replace(RAW.encode(), CLIENT.encode())
    created = tflow.tflow(resp=True)
    created.request.method, created.request.path = "POST", "/v1/chat/completions"
    created.response.headers["content-type"] = "text/event-stream"
    created.response.content = stream
    replay = tflow.tflow()
    replay.request.method, replay.request.path = "POST", "/v1/chat/completions"
    replay.request.content = chat_request(RAW)  # as it went upstream: restored
    assert "toolid" not in created.metadata and "toolid" not in replay.metadata
    flows.add([created, replay])
    expected = [
        "#1 POST /v1/chat/completions response event 2 choices[0].delta.tool_calls[0].id (created)",
        "#2 POST /v1/chat/completions request messages[0].tool_calls[0].id (replayed)",
        "#2 POST /v1/chat/completions request messages[1].tool_call_id (replayed)",
    ]
    assert tctx.command(toolid.trace, RAW) == expected
    assert tctx.command(toolid.trace, CLIENT) == expected


def test_trace_in_observe_mode(addon):
    toolid, flows, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    created = live_response(chat_response(RAW), path="/v1/chat/completions")
    toolid.response(created)
    replay = live_request(chat_request(CLIENT))
    toolid.request(replay)
    assert created.response.content == chat_response(RAW)  # nothing changed on the wire
    flows.add([created, replay])
    assert tctx.command(toolid.trace, CLIENT) == [
        "#1 POST /v1/chat/completions response choices[0].message.tool_calls[0].id "
        "(created, encoded)",
        "#2 POST /v1/chat/completions request messages[0].tool_calls[0].id (replayed, restored)",
        "#2 POST /v1/chat/completions request messages[1].tool_call_id (replayed, restored)",
    ]


def test_trace_streamed_response_uses_the_records(addon):
    """A streamed body is not stored: toolid's records still say where the id was."""
    toolid, flows, tctx = addon
    flow = tflow.tflow(resp=True, live=True)
    flow.request.method, flow.request.path = "POST", "/v1/chat/completions"
    flow.response.headers["content-type"] = "text/event-stream"
    toolid.responseheaders(flow)
    stream = flow.response.stream
    assert callable(stream)
    stream((DATA / "chat_stream.sse").read_bytes())
    stream(b"")
    flow.response.content = None
    toolid.response(flow)
    flows.add([flow])
    assert tctx.command(toolid.trace, RAW) == [
        "#1 POST /v1/chat/completions response choices[0].delta.tool_calls[0].id (created, encoded)"
    ]


def test_trace_of_a_conforming_id(addon):
    toolid, flows, tctx = addon
    created = live_response(chat_response("call_Ab12"))
    toolid.response(created)  # nothing to change: no records
    assert "toolid" not in created.metadata
    flows.add([created])
    assert tctx.command(toolid.trace, "call_Ab12") == [
        "#1 POST /v1/chat/completions response choices[0].message.tool_calls[0].id (created)"
    ]


def test_trace_across_apis():
    anthropic = tflow.tflow(resp=True)
    anthropic.request.method, anthropic.request.path = "POST", "/v1/messages"
    anthropic.response.content = (DATA / "messages_response.json").read_bytes()
    replay = tflow.tflow()
    replay.request.method, replay.request.path = "POST", "/v1/messages"
    replay.request.content = (DATA / "messages_request.json").read_bytes()
    responses = tflow.tflow()
    responses.request.method, responses.request.path = "POST", "/v1/responses"
    responses.request.content = (DATA / "responses_request.json").read_bytes()
    flows = [anthropic, replay, responses]
    assert trace_lines("tid1_sessions_history-3A183", flows) == [
        "#1 POST /v1/messages response content[1].id (created)",
        "#2 POST /v1/messages request messages[1].content[0].id (replayed)",
        "#2 POST /v1/messages request messages[2].content[0].tool_use_id (replayed)",
    ]
    assert trace_lines("get_weather:0#62786027996b4c40886cc7262bdf7382", flows) == [
        "#3 POST /v1/responses request input[1].call_id (replayed)",
        "#3 POST /v1/responses request input[2].call_id (replayed)",
    ]


def test_trace_without_a_flow_list_says_so():
    with (
        taddons.context(ToolId()) as tctx,  # like mitmdump: no View addon
        pytest.raises(exceptions.CommandError, match="needs mitmproxy's flow list"),
    ):
        tctx.master.commands.call_strings("toolid.trace", [RAW])


# --- marks and comments ------------------------------------------------------------------------


def test_observe_mode_flows_are_marked_and_commented(addon):
    toolid, _, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    response = live_response(chat_response(RAW))
    toolid.response(response)
    assert response.marked == MARK_CHANGED
    assert response.comment == f"toolid (observe): would encode 1 ({RAW} -> {CLIENT})"
    request = live_request(chat_request(CLIENT))
    toolid.request(request)
    assert request.marked == MARK_CHANGED
    assert request.comment == f"toolid (observe): would restore 2 ({CLIENT} -> {RAW})"


def test_encode_with_an_occurrence(addon):
    toolid, _, tctx = addon
    assert tctx.command(toolid.encode_id, "functions.Glob:0", 3) == "tid1_functions-2EGlob-3A0-_3"
    assert tctx.command(toolid.encode_id, "call_0", 1) == "call_0"
    assert tctx.command(toolid.decode_id, "tid1_call_0-_2") == "call_0"
    with pytest.raises(exceptions.CommandError, match="occurrence"):
        tctx.command(toolid.encode_id, "call_0", 0)
    commands = tctx.master.commands
    assert commands.call_strings("toolid.encode", ["call_0", "2"]) == "tid1_call_0-_2"


def test_trace_follows_one_tagged_call(addon):
    """Two calls share a raw id: tracing the tagged client id finds only the 2nd call."""
    toolid, flows, tctx = addon
    first = live_response(chat_response(RAW))
    toolid.response(first)
    second = live_request(chat_request(CLIENT))
    toolid.request(second)
    second.response = tflow.tresp(content=chat_response(RAW))
    second.response.headers["content-type"] = "application/json"
    toolid.response(second)  # the 2nd use: tagged
    tagged = encode(RAW, "safe", 2)
    flows.add([first, second])
    assert tctx.command(toolid.trace, tagged) == [
        "#2 POST /v1/chat/completions response choices[0].message.tool_calls[0].id "
        "(created, encoded)"
    ]
    assert len(tctx.command(toolid.trace, RAW)) == 4  # the raw id: every use
