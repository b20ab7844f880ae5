"""The addon and Bedrock: a request signed over its bytes (SigV4 above all) and its response
pass byte for byte, marked and logged once; unsigned and Bearer requests are rewritten, their
eventstream answers frame by frame."""

from __future__ import annotations

import json
import logging

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from mitmproxy.test import tflow, tutils

from addons.toolid_addon import MARK_CHANGED, MARK_PROBLEM, MARK_SIGNED
from tests import eventstreams
from tests.test_addon import (
    CLIENT,
    RAW,
    addon,  # noqa: F401 - the fixture
    chat_response,
    drive,
    sse_flow,
)
from toolid import encode

BEDROCK = "bedrock-runtime.us-east-1.amazonaws.com"
MODEL = "/model/anthropic.claude-sonnet-4-5-20250929-v1:0"
INVOKE = MODEL + "/invoke"
EVENTSTREAM = "application/vnd.amazon.eventstream"
# A history Bedrock's own rules would reject: a 70-character id, one id defined twice, an
# encoded (tid1_) id that restores to a reserved character.
LONG = "toolu_" + "a" * 64
HISTORY = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 100,
    "messages": [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": LONG, "name": "a", "input": {}},
                {"type": "tool_use", "id": "call_0", "name": "b", "input": {}},
                {"type": "tool_use", "id": "call_0", "name": "c", "input": {}},
                {"type": "tool_use", "id": CLIENT, "name": "d", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": i, "content": "ok"}
                for i in (LONG, "call_0", "call_0", CLIENT)
            ],
        },
    ],
}
BODY = json.dumps(HISTORY).encode()


def messages_response(tool_id: str = RAW) -> bytes:
    return json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tool_id, "name": "w", "input": {}}],
            "stop_reason": "tool_use",
        }
    ).encode()


def bedrock_flow(body: bytes = BODY, *, sign: bool = True, path: str = INVOKE):

    flow = tflow.tflow(live=True)
    flow.request.scheme, flow.request.host, flow.request.port = "https", BEDROCK, 443
    flow.request.path = path
    flow.request.headers.clear()
    flow.request.headers["host"] = BEDROCK
    flow.request.headers["content-type"] = "application/json"
    flow.request.headers["accept"] = "application/json"
    flow.request.content = body
    if sign:
        signed = AWSRequest("POST", flow.request.url, data=body, headers=dict(flow.request.headers))
        credentials = Credentials("AKIDEXAMPLE", "secret-key-never-logged")
        SigV4Auth(credentials, "bedrock", "us-east-1").add_auth(signed)
        for name, value in signed.headers.items():
            flow.request.headers[name] = value
    return flow


def answer(flow, body: bytes, content_type: str = "application/json") -> None:

    flow.response = tutils.tresp(content=body)
    flow.response.headers["content-type"] = content_type


def test_a_signed_request_and_its_response_pass_byte_for_byte(addon, caplog):  # noqa: F811
    toolid, _ = addon
    flow = bedrock_flow()
    before = (flow.request.raw_content, list(flow.request.headers.fields))
    with caplog.at_level(logging.DEBUG):
        toolid.request(flow)
        assert (flow.request.raw_content, list(flow.request.headers.fields)) == before
        answer(flow, messages_response())
        toolid.responseheaders(flow)
        toolid.response(flow)
    assert flow.response.content == messages_response()  # no id encoded for the client
    assert flow.metadata["toolid"]["signed"] == "SigV4"
    assert flow.marked == MARK_SIGNED
    assert flow.comment == "toolid: signed request (SigV4): ids left as they are"
    lines = [r for r in caplog.records if "toolid" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO
    assert "signed request (SigV4): ids left as they are" in lines[0].getMessage()
    assert "secret-key-never-logged" not in caplog.text
    assert "Signature=" not in caplog.text and "AKIDEXAMPLE" not in caplog.text


def test_the_same_request_unsigned_is_rewritten(addon):  # noqa: F811
    toolid, _ = addon
    flow = bedrock_flow(sign=False)
    toolid.request(flow)
    assert flow.request.content != BODY
    sent = json.loads(flow.request.content)["messages"][1]["content"]
    ids = [block["id"] for block in sent]
    assert len(set(ids)) == 4 and all(len(i) <= 64 for i in ids)
    # rewritten, and marked for the pairing problem the history has (call_0 defined twice)
    assert [p["code"] for p in flow.metadata["toolid"]["pairing"]] == ["duplicate-call"]
    assert flow.marked == MARK_PROBLEM
    assert "signed" not in flow.metadata["toolid"]


def test_a_bearer_request_is_rewritten(addon):  # noqa: F811
    toolid, _ = addon
    flow = bedrock_flow(sign=False)
    flow.request.headers["authorization"] = "Bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"
    toolid.request(flow)
    assert flow.request.content != BODY
    answer(flow, messages_response("functions.other:1"))
    toolid.response(flow)
    assert json.loads(flow.response.content)["content"][0]["id"] == encode("functions.other:1")


@pytest.mark.parametrize(
    "content_type", ["text/event-stream", "application/vnd.amazon.eventstream"]
)
def test_a_signed_flows_stream_is_streamed_as_it_comes(addon, content_type):  # noqa: F811
    toolid, _ = addon
    flow = bedrock_flow(path=INVOKE + "-with-response-stream")
    toolid.request(flow)
    answer(flow, b"", content_type)
    flow.response.headers["content-length"] = "99"
    toolid.responseheaders(flow)
    assert flow.response.stream is True  # streamed, and not through toolid
    assert flow.response.headers["content-length"] == "99"
    toolid.response(flow)
    assert flow.marked == MARK_SIGNED


def request_then_headers(toolid, flow) -> None:
    """The request hook (before any response), then responseheaders."""
    response, flow.response = flow.response, None
    toolid.request(flow)
    flow.response = response
    toolid.responseheaders(flow)


def test_signed_sse_of_any_api_passes_unchanged(addon):  # noqa: F811
    toolid, _ = addon
    flow = sse_flow()
    flow.request.headers["authorization"] = "AWS4-HMAC-SHA256 Credential=x/y, Signature=z"
    request_then_headers(toolid, flow)
    assert flow.response.stream is True
    assert flow.marked == MARK_SIGNED
    flow2 = sse_flow()
    request_then_headers(toolid, flow2)
    assert callable(flow2.response.stream)
    body = (
        b"data: "
        + json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "id": RAW, "type": "function"}]},
                    }
                ]
            }
        ).encode()
        + b"\n\n"
    )
    assert b"".join(drive(flow2.response.stream, body, 5)) == body.replace(
        RAW.encode(), CLIENT.encode()
    )


def test_presigned_and_payload_hash_requests_are_signed(addon):  # noqa: F811
    toolid, _ = addon
    presigned = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab"
    flow = bedrock_flow(sign=False, path=INVOKE + presigned)
    toolid.request(flow)
    assert flow.request.content == BODY and flow.marked == MARK_SIGNED
    flow = bedrock_flow(sign=False)
    flow.request.headers["x-amz-content-sha256"] = "0" * 64
    toolid.request(flow)
    assert flow.request.content == BODY and flow.metadata["toolid"]["signed"] == "SigV4"


def test_observe_mode_marks_signed_flows_too(addon):  # noqa: F811
    toolid, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    flow = bedrock_flow()
    toolid.request(flow)
    assert flow.marked == MARK_SIGNED and "request" not in flow.metadata["toolid"]


def test_a_signed_chat_response_keeps_its_ids(addon):  # noqa: F811
    toolid, _ = addon
    flow = bedrock_flow(path="/v1/chat/completions")
    toolid.request(flow)
    answer(flow, chat_response())
    toolid.response(flow)
    assert flow.response.content == chat_response()


# --- eventstream answers (unsigned or Bearer requests) ------------------------------------------


def eventstream_flow(path: str, request_body: bytes = b"{}"):
    flow = bedrock_flow(request_body, sign=False, path=path)
    flow.request.headers["authorization"] = "Bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl"
    return flow


def test_a_converse_stream_is_rewritten_frame_by_frame(addon):  # noqa: F811
    toolid, _ = addon
    flow = eventstream_flow(MODEL + "/converse-stream")
    toolid.request(flow)
    answer(flow, b"", EVENTSTREAM)
    flow.response.headers["content-length"] = "1234"
    toolid.responseheaders(flow)
    assert callable(flow.response.stream) and "content-length" not in flow.response.headers
    source = b"".join(eventstreams.converse_frames(RAW))
    out = b"".join(drive(flow.response.stream, source, 9))
    assert out == b"".join(eventstreams.converse_frames(CLIENT))
    toolid.response(flow)
    assert flow.marked == MARK_CHANGED
    assert flow.metadata["toolid"]["response"][0]["path"] == "start.toolUse.toolUseId"


def test_an_invoke_stream_is_rewritten_in_its_chunks(addon):  # noqa: F811
    toolid, _ = addon
    flow = eventstream_flow(INVOKE + "-with-response-stream", BODY)
    toolid.request(flow)
    answer(flow, b"", EVENTSTREAM)
    toolid.responseheaders(flow)
    source = b"".join(eventstreams.invoke_frames("functions.other:1"))
    out = b"".join(drive(flow.response.stream, source, 50))
    assert out == b"".join(eventstreams.invoke_frames(encode("functions.other:1")))


def test_an_eventstream_with_a_bad_crc_passes_as_it_came(addon, caplog):  # noqa: F811
    toolid, _ = addon
    flow = eventstream_flow(MODEL + "/converse-stream")
    toolid.request(flow)
    answer(flow, b"", EVENTSTREAM)
    toolid.responseheaders(flow)
    source = bytearray(b"".join(eventstreams.converse_frames(RAW)))
    source[20] ^= 1
    with caplog.at_level(logging.WARNING):
        out = b"".join(drive(flow.response.stream, bytes(source), 13))
        toolid.response(flow)
    assert out == bytes(source)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert flow.marked == MARK_PROBLEM


def test_observe_mode_eventstream_passes_unchanged(addon):  # noqa: F811
    toolid, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    flow = eventstream_flow(MODEL + "/converse-stream")
    toolid.request(flow)
    answer(flow, b"", EVENTSTREAM)
    toolid.responseheaders(flow)
    source = b"".join(eventstreams.converse_frames(RAW))
    assert b"".join(drive(flow.response.stream, source, 9)) == source
    toolid.response(flow)
    assert flow.metadata["toolid"]["response"][0]["action"] == "encoded"


def test_a_buffered_converse_answer_and_the_next_request(addon):  # noqa: F811
    toolid, _ = addon
    flow = eventstream_flow(MODEL + "/converse")
    toolid.request(flow)
    answer(
        flow,
        json.dumps(
            {
                "output": {
                    "message": {
                        "role": "assistant",
                        "content": [{"toolUse": {"toolUseId": RAW, "name": "w", "input": {}}}],
                    }
                },
                "stopReason": "tool_use",
            }
        ).encode(),
    )
    toolid.response(flow)
    assert (
        json.loads(flow.response.content)["output"]["message"]["content"][0]["toolUse"]["toolUseId"]
        == CLIENT
    )
    use = {"toolUse": {"toolUseId": CLIENT, "name": "w", "input": {}}}
    result = {"toolResult": {"toolUseId": CLIENT, "content": [{"text": "r"}]}}
    history = {
        "messages": [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
    }
    again = eventstream_flow(MODEL + "/converse", json.dumps(history).encode())
    toolid.request(again)
    sent = json.loads(again.request.content)["messages"]
    # Converse takes Kimi's own id (service-2.json ToolUseId): restored exactly.
    assert sent[0]["content"][0]["toolUse"]["toolUseId"] == RAW
    assert sent[1]["content"][0]["toolResult"]["toolUseId"] == RAW


def test_a_signed_request_toolid_would_not_read_passes_quietly(addon, caplog):  # noqa: F811
    toolid, _ = addon
    flow = bedrock_flow(b"\x00binary", path="/bucket/key")
    flow.request.headers["content-type"] = "application/octet-stream"
    with caplog.at_level(logging.INFO):
        toolid.request(flow)
    assert flow.request.content == b"\x00binary" and flow.metadata["toolid"]["signed"] == "SigV4"
    assert not flow.marked and not flow.comment
    assert "toolid" not in caplog.text
