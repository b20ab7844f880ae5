"""Gemini's generateContent in the position table: routes (the Gemini API, Vertex AI, Code
Assist), shapes, buffered bodies and both streamed framings, one client id per functionCall
part, thought signatures and every other byte kept, the gemini rule set, pairing, and what
``toolid inspect`` and the contentview's annotator make of Gemini bodies.

Shapes from python-genai's types.py (google-genai 3.3.0): GenerateContentResponse.candidates,
Candidate.content, Content.parts, Part.function_call / function_response / thought_signature,
FunctionCall.id, FunctionResponse.id; camelCase on the wire.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from google.genai import types

import toolid
from tests import streams
from tests.test_stream import split_at
from toolid import annotate, encode, inspect
from toolid.apis import api_from_path, api_from_shape, streamed_route
from toolid.pairing import DUPLICATE, MISSING, check
from toolid.positions import Api, Doc, find_ids
from toolid.rules import RULE_SETS

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)
SIGNATURE = streams.THOUGHT_SIGNATURE
GEMINI_API = "/v1beta/models/gemini-2.5-flash:generateContent"
VERTEX = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro"
CODE_ASSIST = "/v1internal:generateContent"

# Every test here runs with the accelerators as installed and as pure Python.
pytestmark = pytest.mark.usefixtures("backend")


def response(*ids: str | None, wrap: bool = False) -> dict[str, Any]:
    """A generateContent answer: a text part, then one functionCall part per id (None: a
    call without an id, as older models send), each with its thought signature."""
    parts: list[dict[str, Any]] = [{"text": f"calling {RAW}"}]
    for number, raw in enumerate(ids):
        call: dict[str, Any] = {"name": "get_weather", "args": {"id": RAW, "n": number}}
        if raw is not None:
            call["id"] = raw
        parts.append({"functionCall": call, "thoughtSignature": SIGNATURE})
    answer = {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5},
        "modelVersion": "gemini-2.5-flash",
    }
    return {"response": answer, "traceId": "abc"} if wrap else answer


def request(*ids: str, wrap: bool = False) -> dict[str, Any]:
    """A request whose history holds a model turn calling ``ids`` and the user turn answering
    them; Code Assist wraps it as ``{"model": ..., "request": {...}}``."""
    calls = [
        {
            "functionCall": {"name": "get_weather", "args": {}, "id": i},
            "thoughtSignature": SIGNATURE,
        }
        for i in ids
    ]
    results = [
        {"functionResponse": {"name": "get_weather", "id": i, "response": {"output": "sunny"}}}
        for i in ids
    ]
    inner = {
        "contents": [
            {"role": "user", "parts": [{"text": f"weather? {RAW}"}]},
            {"role": "model", "parts": calls},
            {"role": "user", "parts": results},
        ],
        "tools": [{"functionDeclarations": [{"name": "get_weather"}]}],
    }
    if wrap:
        return {"model": "gemini-2.5-pro", "project": "p", "request": inner}
    return inner


def dumps(document: Any) -> bytes:
    return json.dumps(document, indent=2).encode()


# --- routes and shapes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        GEMINI_API,
        "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        "/v1alpha/models/gemini-2.5-flash:countTokens",
        "/v1beta/tunedModels/my-model-123:generateContent",
        VERTEX + ":generateContent",
        VERTEX + ":streamGenerateContent?alt=sse",
        "/v1beta1/projects/p/locations/global/publishers/google/models/gemini-3-pro:generateContent",
        "/v1/publishers/google/models/gemini-2.5-flash:generateContent",  # Vertex express mode
        "/v1/projects/p/locations/l/endpoints/1234:generateContent",
        CODE_ASSIST,
        "/v1internal:streamGenerateContent?alt=sse",
        "/v1internal:countTokens",
        "/gemini/v1beta/models/gemini-2.5-flash:generateContent",  # behind a gateway's prefix
    ],
)
def test_gemini_routes(path: str) -> None:
    assert api_from_path(path) is Api.GEMINI


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/gemini-2.5-flash:embedContent",
        "/v1beta/models/gemini-2.5-flash",
        "/v1/projects/p/locations/l/publishers/anthropic/models/claude:rawPredict",
        "/v1internal:loadCodeAssist",
        "/v1beta/openai/chat/completions",
    ],
)
def test_other_google_routes(path: str) -> None:
    assert api_from_path(path) is not Api.GEMINI


def test_streaming_routes() -> None:
    assert streamed_route(VERTEX + ":streamGenerateContent?alt=sse")
    assert streamed_route("/v1internal:streamGenerateContent")
    assert not streamed_route(GEMINI_API)
    assert not streamed_route("/v1/chat/completions")


def test_gemini_shapes_are_recognised() -> None:
    assert api_from_shape(request(RAW), Doc.REQUEST) is Api.GEMINI
    assert api_from_shape(request(RAW, wrap=True), Doc.REQUEST) is Api.GEMINI
    assert api_from_shape(response(RAW), Doc.RESPONSE) is Api.GEMINI
    assert api_from_shape(response(RAW, wrap=True), Doc.EVENT) is Api.GEMINI
    # A Responses API event holds a "response" too: its own shape wins.
    assert api_from_shape({"type": "response.created", "response": {}}, Doc.EVENT) is (
        Api.RESPONSES
    )


# --- positions -------------------------------------------------------------------------------


def test_request_positions_bare_and_in_the_code_assist_envelope() -> None:
    for wrap, prefix in ((False, ""), (True, "request.")):
        found = find_ids(request(RAW, "b", wrap=wrap), Api.GEMINI, Doc.REQUEST)
        assert [(f.path, f.value, f.role.value) for f in found] == [
            (f"{prefix}contents[1].parts[0].functionCall.id", RAW, "defines"),
            (f"{prefix}contents[1].parts[1].functionCall.id", "b", "defines"),
            (f"{prefix}contents[2].parts[0].functionResponse.id", RAW, "refers"),
            (f"{prefix}contents[2].parts[1].functionResponse.id", "b", "refers"),
        ]
    counted = {"generateContentRequest": {"model": "models/m", **request(RAW)}}
    assert len(find_ids(counted, Api.GEMINI, Doc.REQUEST)) == 2


def test_response_positions_each_call_numbered_by_candidate_and_part() -> None:
    for wrap, prefix in ((False, ""), (True, "response.")):
        found = find_ids(response(RAW, None, "", wrap=wrap), Api.GEMINI, Doc.RESPONSE)
        # a call without an id is no position; an empty id is one
        assert [(f.path, f.value, f.call) for f in found] == [
            (f"{prefix}candidates[0].content.parts[1].functionCall.id", RAW, (0, 1)),
            (f"{prefix}candidates[0].content.parts[3].functionCall.id", "", (0, 3)),
        ]


def test_the_sdk_reads_what_toolid_writes() -> None:
    """google-genai's own types parse the rewritten answer: the ids are the client ids, the
    thought signatures the bytes Gemini sent."""
    out = toolid.rewrite_response(dumps(response(RAW, RAW)), path=GEMINI_API)
    parsed = types.GenerateContentResponse.model_validate_json(out.body)
    assert [call.id for call in parsed.function_calls or []] == [CLIENT, encode(RAW, occurrence=2)]
    parts = parsed.candidates[0].content.parts  # type: ignore[index, union-attr]
    assert [part.thought_signature for part in parts[1:]] == [base64.b64decode(SIGNATURE)] * 2


# --- buffered --------------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [False, True])
def test_a_response_gets_client_ids_and_they_come_back_raw(wrap: bool) -> None:
    path = CODE_ASSIST if wrap else GEMINI_API
    source = dumps(response(RAW, wrap=wrap))
    out = toolid.rewrite_response(source, path=path)
    assert out.body == dumps(response(CLIENT, wrap=wrap))  # the decoy in args as it was
    assert out.api is Api.GEMINI
    replay = dumps(request(CLIENT, wrap=wrap))
    back = toolid.rewrite_request(replay, path=path)
    assert back.body == replay.replace(CLIENT.encode(), RAW.encode())
    assert [c.action for c in back.changes] == ["restored", "restored"]


def test_two_parallel_calls_with_one_id_get_two_client_ids() -> None:
    out = toolid.rewrite_response(dumps(response("call_0", "call_0")), path=GEMINI_API)
    ids = [f.value for f in find_ids(json.loads(out.body), Api.GEMINI, Doc.RESPONSE)]
    assert ids == ["call_0", encode("call_0", occurrence=2)]
    assert out.body.count(SIGNATURE.encode()) == 2


def test_an_id_the_history_defines_is_tagged_in_the_next_answer() -> None:
    turn = toolid.rewrite_request(dumps(request(CLIENT)), path=GEMINI_API)
    out = toolid.rewrite_response(dumps(response(RAW)), path=GEMINI_API, taken=turn.taken)
    assert [c.client for c in out.changes] == [encode(RAW, occurrence=2)]


def test_a_conforming_answer_passes_byte_for_byte() -> None:
    source = dumps(response("46ww9pp1", None))
    out = toolid.rewrite_response(source, path=GEMINI_API)
    assert out.body is source and out.changes == ()


# --- streamed ------------------------------------------------------------------------------


def sse(events: list[streams.Event]) -> bytes:
    return streams.render(events, eol=streams.CRLF)  # as Google writes it


@pytest.mark.parametrize("framing", ["sse", "json-array"])
def test_parallel_calls_one_per_chunk_get_distinct_client_ids_however_split(framing: str) -> None:
    events = streams.gemini_events("call_0", second_id="call_0")
    expected_events = streams.gemini_events("call_0", second_id=encode("call_0", occurrence=2))
    render = sse if framing == "sse" else streams.json_array
    source, expected = render(events), render(expected_events)
    path = VERTEX + (
        ":streamGenerateContent?alt=sse" if framing == "sse" else ":streamGenerateContent"
    )
    for cut in range(0, len(source), 37):
        stream = toolid.ResponseStream(path=path, framing=framing)  # type: ignore[arg-type]
        pieces = [stream.feed(piece) for piece in split_at(source, [cut, cut * 3])]
        pieces.append(stream.finish())
        assert b"".join(piece.body for piece in pieces) == expected
        assert not [problem for piece in pieces for problem in piece.problems]


def test_a_code_assist_stream_is_read_in_its_envelope() -> None:
    events = [
        {"data": {"response": event["data"], "traceId": "t"}}
        for event in streams.gemini_events(RAW)
    ]
    stream = toolid.ResponseStream(path="/v1internal:streamGenerateContent?alt=sse")
    out = stream.feed(sse(events)).body + stream.finish().body
    assert out == sse(
        [{"data": {"response": e["data"], "traceId": "t"}} for e in streams.gemini_events(CLIENT)]
    )


# --- rules -----------------------------------------------------------------------------------


def test_the_gemini_rule_set() -> None:
    """What Google is seen to accept (toolid/rules.py has the sources): a function name's
    characters, no length limit; anything else keeps its client id; calls distinct."""
    replay = dumps(request(CLIENT, encode("héllo:1"), encode("call_0", occurrence=2)))
    out = toolid.rewrite_request(replay, path=GEMINI_API, rules=RULE_SETS["gemini"])
    sent = [f.value for f in find_ids(json.loads(out.body), Api.GEMINI, Doc.REQUEST)]
    tagged = encode("call_0", occurrence=2)
    assert sent == [RAW, encode("héllo:1"), tagged, RAW, encode("héllo:1"), tagged]


# --- pairing ---------------------------------------------------------------------------------


def test_pairing_names_the_parallel_calls_gemini_cli_merges() -> None:
    history = request("call_0")
    history["contents"][1]["parts"].append(history["contents"][1]["parts"][0])  # one id twice
    history["contents"].append({"role": "model", "parts": [{"functionCall": {"id": "x"}}]})
    history["contents"].append({"role": "user", "parts": [{"text": "and?"}]})
    history["contents"].append({"role": "model", "parts": [{"text": "done"}]})
    problems = check(history, Api.GEMINI)
    assert [(p.code, p.path) for p in problems] == [
        (DUPLICATE, "contents[1].parts[1].functionCall.id"),
        (MISSING, "contents[3].parts[0].functionCall.id"),
    ]
    assert "number of function response parts is equal" in problems[1].said()
    assert problems[1].verbatim and not problems[0].verbatim
    wrapped = {"request": history}
    assert [(p.code, p.path) for p in check(wrapped, Api.GEMINI)] == [
        (DUPLICATE, "request.contents[1].parts[1].functionCall.id"),
        (MISSING, "request.contents[3].parts[0].functionCall.id"),
    ]
    assert toolid.check_pairing(dumps(wrapped), path=CODE_ASSIST) == check(wrapped, Api.GEMINI)


# --- inspect and the annotator ---------------------------------------------------------------


def test_annotate_a_json_array_stream_element_by_element() -> None:
    body = streams.json_array(streams.gemini_events(RAW, second_id=RAW))
    found = annotate.sightings(body, "response", Api.GEMINI)
    assert [(s.event, s.path, s.value) for s in found] == [
        (3, "candidates[0].content.parts[0].functionCall.id", RAW),
        (4, "candidates[0].content.parts[0].functionCall.id", RAW),
    ]
    text = annotate.annotate(body, "response")
    assert text.startswith("# toolid: Google Gemini JSON-array stream · 5 elements")
    assert "# element 3" in text and f"⟶ client {CLIENT}" in text


def run_inspect(data: bytes) -> tuple[int, str]:
    out = io.StringIO()
    code = inspect.run("-", None, stdin=io.BytesIO(data), stdout=out, stderr=io.StringIO())
    return code, out.getvalue()


def test_inspect_a_json_array_stream_counts_each_call() -> None:
    code, text = run_inspect(
        streams.json_array(streams.gemini_events("call_0", second_id="call_0"))
    )
    assert code == inspect.EXIT_NON_CONFORMING  # one id defined by two calls
    lines = text.splitlines()
    assert lines[1].startswith("event 3  candidates[0].content.parts[0].functionCall.id  gemini")
    assert "2x" in lines[1] and encode("call_0", occurrence=2) in lines[2]


def test_inspect_an_sse_capture_and_a_request() -> None:
    code, text = run_inspect(sse(streams.gemini_events(RAW)))
    assert code == inspect.EXIT_NON_CONFORMING and CLIENT in text
    history = request("call_0")
    history["contents"][1]["parts"].append(history["contents"][1]["parts"][0])
    code, text = run_inspect(dumps({"request": history}))
    assert code == inspect.EXIT_NON_CONFORMING and "duplicate-call" in text
