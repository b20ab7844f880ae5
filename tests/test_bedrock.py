"""AWS Bedrock in the position table, route recognition and the bedrock rule set.

Shapes from botocore's service model (data/bedrock-runtime/2023-09-30/service-2.json,
botocore 1.44.8): ToolUseBlock, ToolResultBlock, ConverseOutput, ContentBlockStartEvent.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import botocore
import pytest

import toolid
from toolid import body, encode
from toolid.apis import api_from_path, api_from_shape
from toolid.body import Direction, Policy
from toolid.positions import Api, Doc, find_ids
from toolid.rules import RULE_SETS

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)
CODEX = "call_65OReGAIB0M4612fiyF6YMbI|fc_0feebbbc39e113d4016969ff3539208191914ede46e71d5d06"
BEDROCK = RULE_SETS["bedrock"]
MODEL = "/model/anthropic.claude-sonnet-4-5-20250929-v1:0"


# Every test here runs with the accelerators as installed and as pure Python.
pytestmark = pytest.mark.usefixtures("backend")


def service_model() -> dict[str, Any]:
    path = Path(botocore.__file__).parent / "data/bedrock-runtime/2023-09-30/service-2.json.gz"
    with gzip.open(path) as file:
        model: dict[str, Any] = json.load(file)
    return model


def converse_request(*ids: str, wrap: bool = False) -> dict[str, Any]:
    messages = [
        {"role": "user", "content": [{"text": f"weather? {RAW}"}]},
        {
            "role": "assistant",
            "content": [{"text": "calling"}]
            + [{"toolUse": {"toolUseId": i, "name": "w", "input": {"toolUseId": i}}} for i in ids],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": i, "content": [{"text": i}], "status": "success"}}
                for i in ids
            ],
        },
    ]
    if wrap:  # CountTokens: {"input": {"converse": {"messages": ...}}}
        return {"input": {"converse": {"messages": messages}}}
    return {"modelId": "m", "messages": messages, "toolConfig": {"tools": []}}


def converse_response(*ids: str) -> dict[str, Any]:
    return {
        "output": {
            "message": {
                "role": "assistant",
                "content": [{"text": RAW}]
                + [{"toolUse": {"toolUseId": i, "name": "w", "input": {}}} for i in ids],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
        "metrics": {"latencyMs": 5},
    }


# --- the service model says what the table says ------------------------------------------------


def test_the_table_follows_botocores_service_model():
    model = service_model()
    shapes, operations = model["shapes"], model["operations"]
    assert shapes["ContentBlock"]["members"]["toolUse"]["shape"] == "ToolUseBlock"
    assert shapes["ContentBlock"]["members"]["toolResult"]["shape"] == "ToolResultBlock"
    for shape in ("ToolUseBlock", "ToolResultBlock", "ToolUseBlockStart", "ToolResultBlockStart"):
        assert shapes[shape]["members"]["toolUseId"]["shape"] == "ToolUseId"
    assert shapes["ConverseResponse"]["members"]["output"]["shape"] == "ConverseOutput"
    assert shapes["ConverseOutput"]["members"]["message"]["shape"] == "Message"
    start = shapes["ContentBlockStartEvent"]["members"]
    assert set(start) == {"start", "contentBlockIndex"}
    assert shapes["ContentBlockStart"]["members"]["toolUse"]["shape"] == "ToolUseBlockStart"
    assert shapes["ContentBlockStart"]["members"]["toolResult"]["shape"] == "ToolResultBlockStart"
    assert shapes["ConverseStreamOutput"]["members"]["contentBlockStart"]["shape"] == (
        "ContentBlockStartEvent"
    )
    assert shapes["PayloadPart"]["members"] == {
        "bytes": {
            "shape": "PartBody",
            "documentation": "<p>Base64-encoded bytes of payload data.</p>",
        }
    }
    assert shapes["CountTokensInput"]["members"]["converse"]["shape"] == "ConverseTokensRequest"
    routes = {name: op["http"]["requestUri"] for name, op in operations.items()}
    for name in ("Converse", "ConverseStream", "CountTokens"):
        assert (
            api_from_path(routes[name].replace("{modelId}", "anthropic.claude-v2")) is Api.CONVERSE
        )
    for name in ("InvokeModel", "InvokeModelWithResponseStream"):
        assert api_from_path(routes[name].replace("{modelId}", "anthropic.claude-v2")) is (
            Api.MESSAGES
        )


def test_the_bedrock_rule_set_follows_the_service_models_tool_use_id():
    """Converse ids: exactly the service model's ToolUseId. Every other id the rule set
    accepts (InvokeModel's Messages bodies), the ToolUseId accepts too, and Anthropic's."""
    tool_use_id = service_model()["shapes"]["ToolUseId"]
    assert (tool_use_id["min"], tool_use_id["max"], tool_use_id["pattern"]) == (
        1,
        64,
        "[a-zA-Z0-9_.:-]+",
    )
    pattern = re.compile(tool_use_id["pattern"])
    converse = BEDROCK.kinds["converse.call"]
    for value in ("a", "A-z_09", "x" * 64, RAW, "a.b:c", CLIENT, "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"):
        assert converse.accepts(value) and pattern.fullmatch(value)
    for value in ("", "x" * 65, "a|b", "a b", "天気", CODEX):
        assert not converse.accepts(value) and not (len(value) <= 64 and pattern.fullmatch(value))
    anthropic = re.compile(r"^[a-zA-Z0-9_-]+$")
    for value in ("a", "x" * 64, "toolu_01AbC", CLIENT):
        assert BEDROCK.default.accepts(value) and pattern.fullmatch(value)
        assert anthropic.fullmatch(value)
    for value in ("", "x" * 65, RAW, "a.b", "a|b"):
        assert not BEDROCK.default.accepts(value)


# --- routes and shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "api"),
    [
        (f"{MODEL}/converse", Api.CONVERSE),
        (f"{MODEL}/converse-stream", Api.CONVERSE),
        (f"{MODEL}/count-tokens", Api.CONVERSE),
        ("/model/amazon.nova-pro-v1:0/converse", Api.CONVERSE),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fab/converse",
            Api.CONVERSE,
        ),
        ("/bedrock/model/m/converse?x=1", Api.CONVERSE),  # under a gateway's prefix
        (f"{MODEL}/invoke", Api.MESSAGES),
        (f"{MODEL}/invoke-with-response-stream", Api.MESSAGES),
        ("/model/us.anthropic.claude-3-7-sonnet-20250219-v1:0/invoke", Api.MESSAGES),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A%3Afoundation-model%2Fanthropic.claude-v2/invoke",
            Api.MESSAGES,
        ),
        ("/model/openai.gpt-oss-120b-1:0/invoke", None),  # a Chat body: its shape decides
        ("/model/meta.llama3-70b-instruct-v1:0/invoke-with-response-stream", None),
        ("/model/m/converse/extra", None),
        ("/converse", None),
    ],
)
def test_bedrock_routes(path, api):
    assert api_from_path(path) is api


def test_converse_shapes_are_recognised():
    assert api_from_shape(converse_request("a"), Doc.REQUEST) is Api.CONVERSE
    assert api_from_shape(converse_response("a"), Doc.RESPONSE) is Api.CONVERSE
    event = {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "a", "name": "w"}}}
    assert api_from_shape(event, Doc.EVENT) is Api.CONVERSE
    assert (
        api_from_shape({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, Doc.REQUEST)
        is None
    )


# --- positions -----------------------------------------------------------------------------------


def paths(document: Any, api: Api, doc: Doc) -> list[tuple[str, str, str, tuple[int, ...]]]:
    return [(f.path, f.value, f.role.value, f.call) for f in find_ids(document, api, doc)]


def test_converse_request_positions():
    found = paths(converse_request("a", "b"), Api.CONVERSE, Doc.REQUEST)
    assert found == [
        ("messages[1].content[1].toolUse.toolUseId", "a", "defines", ()),
        ("messages[1].content[2].toolUse.toolUseId", "b", "defines", ()),
        ("messages[2].content[0].toolResult.toolUseId", "a", "refers", ()),
        ("messages[2].content[1].toolResult.toolUseId", "b", "refers", ()),
    ]  # not the look-alike toolUseId inside a tool's input, nor the text
    wrapped = paths(converse_request("a", wrap=True), Api.CONVERSE, Doc.REQUEST)
    assert [p for p, *_ in wrapped] == [
        "input.converse.messages[1].content[1].toolUse.toolUseId",
        "input.converse.messages[2].content[0].toolResult.toolUseId",
    ]


def test_converse_response_and_event_positions():
    assert paths(converse_response("a", "b"), Api.CONVERSE, Doc.RESPONSE) == [
        ("output.message.content[1].toolUse.toolUseId", "a", "defines", (1,)),
        ("output.message.content[2].toolUse.toolUseId", "b", "defines", (2,)),
    ]
    start = {"contentBlockIndex": 3, "start": {"toolUse": {"toolUseId": "a", "name": "w"}}}
    assert paths(start, Api.CONVERSE, Doc.EVENT) == [
        ("start.toolUse.toolUseId", "a", "defines", (3,))
    ]
    result = {"contentBlockIndex": 4, "start": {"toolResult": {"toolUseId": "a"}}}
    assert paths(result, Api.CONVERSE, Doc.EVENT) == [
        ("start.toolResult.toolUseId", "a", "refers", (4,))
    ]
    delta = {"contentBlockIndex": 3, "delta": {"toolUse": {"input": '{"toolUseId": "a"}'}}}
    assert paths(delta, Api.CONVERSE, Doc.EVENT) == []


# --- rewriting -----------------------------------------------------------------------------------


def test_a_converse_response_gets_client_ids_and_they_come_back_raw():
    response = json.dumps(converse_response(RAW, "tooluse_abc")).encode()
    out = toolid.rewrite_response(response, path=f"{MODEL}/converse")
    assert out.body == response.replace(
        f'"toolUseId": "{RAW}"'.encode(), f'"toolUseId": "{CLIENT}"'.encode()
    )  # surgical: the text that spells the raw id stays
    request = json.dumps(converse_request(CLIENT, "tooluse_abc")).encode()
    back = toolid.rewrite_request(request, path=f"{MODEL}/converse")
    assert [c.action for c in back.changes] == ["restored", "restored"]  # only what changes
    assert back.body.count(RAW.encode()) == request.count(RAW.encode()) + 2


def test_a_converse_request_to_bedrock_gets_ids_bedrock_accepts():
    ids = (CLIENT, CODEX, "call_0", "call_0", "t" * 70, "ok_id")
    request = json.dumps(converse_request(*ids)).encode()
    out = toolid.rewrite_request(request, path=f"{MODEL}/converse", rules="bedrock")
    messages = json.loads(out.body)["messages"]
    calls = [block["toolUse"]["toolUseId"] for block in messages[1]["content"][1:]]
    results = [block["toolResult"]["toolUseId"] for block in messages[2]["content"]]
    assert all(BEDROCK.kinds["converse.call"].accepts(i) for i in calls)
    assert len(set(calls)) == len(calls)  # the duplicate is made distinct
    last_call = dict(zip(ids, calls, strict=True))  # a result names the nearest call before it
    assert results == [last_call[i] for i in ids]
    assert calls[0] == RAW  # Converse takes Kimi's own id: restored exactly
    assert calls[-1] == "ok_id"
    assert calls[1].startswith("call_65OReGAIB0M4612fiyF6YMbI_fc_") and len(calls[1]) == 64
    again = toolid.rewrite_request(request, path=f"{MODEL}/converse", rules="bedrock")
    assert again.body == out.body  # stable across turns


def test_a_conforming_converse_request_passes_byte_for_byte():
    request = json.dumps(converse_request("tooluse_a", "tooluse_b")).encode()
    out = toolid.rewrite_request(request, path=f"{MODEL}/converse", rules="bedrock")
    assert out.body is request or out.body == request
    assert not out.changed


def test_invoke_model_messages_body_to_bedrock():
    history = {
        "anthropic_version": "bedrock-2023-05-31",
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": CODEX, "name": "a", "input": {}},
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_" + "x" * 70,
                        "name": "web_search",
                        "input": {},
                    },
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": CODEX, "content": "r"}],
            },
        ],
    }
    out = toolid.rewrite_request(
        json.dumps(history).encode(), path=f"{MODEL}/invoke", rules="bedrock"
    )
    sent = json.loads(out.body)["messages"]
    call, server = (block["id"] for block in sent[0]["content"])
    assert BEDROCK.default.accepts(call) and sent[1]["content"][0]["tool_use_id"] == call
    assert server.startswith("srvtoolu_") and len(server) <= 64 and "-" not in server


def test_converse_stream_event_is_planned_like_any_event():
    event = json.dumps(
        {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": RAW, "name": "w"}}, "p": "ab"}
    ).encode()
    policy = Policy(Direction.ENCODE, "safe")
    plan = body.plan(event, Api.CONVERSE, Doc.EVENT, policy)
    assert body.apply(event, plan.edits) == event.replace(RAW.encode(), CLIENT.encode())
