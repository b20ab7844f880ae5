"""The addon and Gemini: requests restored (Gemini API, Vertex AI, Code Assist), answers
buffered, as SSE and as a JSON array streamed element by element; the contentview, toolid.trace
and ``toolid inspect`` (a HAR capture) read Gemini flows."""

from __future__ import annotations

import io
import json

from mitmproxy import contentviews
from mitmproxy.test import tflow, tutils

from addons.toolid_addon import MARK_CHANGED, trace_lines
from tests import streams
from tests.test_addon import addon, drive  # noqa: F401 - the fixture
from tests.test_inspect import har, har_entry
from toolid import encode, inspect

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)
TAGGED = encode(RAW, occurrence=2)
HOST = "generativelanguage.googleapis.com"
MODEL = "/v1beta/models/gemini-2.5-flash"
EVENTS = streams.gemini_events(RAW, second_id=RAW)  # two parallel calls with one id
CLIENT_EVENTS = streams.gemini_events(CLIENT, second_id=TAGGED)


def gemini_flow(path: str, body: bytes, host: str = HOST) -> tflow.HTTPFlow:
    flow = tflow.tflow(live=True)
    flow.request.scheme, flow.request.host, flow.request.port = "https", host, 443
    flow.request.method, flow.request.path = "POST", path
    flow.request.headers.clear()
    flow.request.headers["host"] = host
    flow.request.headers["content-type"] = "application/json"
    flow.request.headers["x-goog-api-key"] = "AIza-never-logged"
    flow.request.headers["accept-encoding"] = "gzip, br"
    flow.request.content = body
    return flow


def history(*ids: str) -> bytes:
    """A request replaying a model turn with calls ``ids`` and the user turn answering them."""
    calls = [
        {"functionCall": {"id": i, "name": "get_weather", "args": {}}, "thoughtSignature": "c2ln"}
        for i in ids
    ]
    results = [{"functionResponse": {"id": i, "name": "get_weather", "response": {}}} for i in ids]
    contents = [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": calls},
        {"role": "user", "parts": results},
    ]
    return json.dumps({"contents": contents}).encode()


def answer(flow: tflow.HTTPFlow, body: bytes, content_type: str) -> None:
    flow.response = tutils.tresp(content=body)
    flow.response.headers["content-type"] = content_type


def test_a_history_is_restored_and_a_stream_asks_for_identity(addon):  # noqa: F811
    toolid, _ = addon
    flow = gemini_flow(MODEL + ":streamGenerateContent?alt=sse", history(CLIENT, TAGGED))
    toolid.request(flow)
    sent = json.loads(flow.request.content)
    assert [part["functionCall"]["id"] for part in sent["contents"][1]["parts"]] == [RAW, TAGGED]
    assert [part["functionResponse"]["id"] for part in sent["contents"][2]["parts"]] == [
        RAW,
        TAGGED,
    ]  # the gemini rule set: no raw id of a tagged one, for a host with rules
    assert flow.request.headers["accept-encoding"] == "identity"
    assert flow.metadata["toolid"]["api"] == "gemini"


def test_a_buffered_answer_is_not_asked_for_identity(addon):  # noqa: F811
    toolid, _ = addon
    flow = gemini_flow(MODEL + ":generateContent", history("call_1"))
    toolid.request(flow)
    assert flow.request.headers["accept-encoding"] == "gzip, br"


def test_an_sse_stream_gets_one_client_id_per_call(addon):  # noqa: F811
    toolid, _ = addon
    flow = gemini_flow(MODEL + ":streamGenerateContent?alt=sse", history("call_1"))
    toolid.request(flow)
    answer(flow, b"", "text/event-stream")
    toolid.responseheaders(flow)
    source = streams.render(EVENTS, eol=streams.CRLF)
    out = b"".join(drive(flow.response.stream, source, 11))
    assert out == streams.render(CLIENT_EVENTS, eol=streams.CRLF)
    toolid.response(flow)
    assert flow.marked == MARK_CHANGED
    assert [r["client"] for r in flow.metadata["toolid"]["response"]] == [CLIENT, TAGGED]


def test_a_json_array_stream_is_rewritten_element_by_element(addon):  # noqa: F811
    toolid, _ = addon
    flow = gemini_flow(MODEL + ":streamGenerateContent", history("call_1"))
    toolid.request(flow)
    answer(flow, b"", "application/json; charset=UTF-8")
    flow.response.headers["content-length"] = "9999"
    toolid.responseheaders(flow)
    assert callable(flow.response.stream) and "content-length" not in flow.response.headers
    out = b"".join(drive(flow.response.stream, streams.json_array(EVENTS), 7))
    assert out == streams.json_array(CLIENT_EVENTS)
    toolid.response(flow)
    assert [r["path"] for r in flow.metadata["toolid"]["response"]] == [
        "candidates[0].content.parts[0].functionCall.id"
    ] * 2


def test_code_assist_and_vertex(addon):  # noqa: F811
    toolid, _ = addon
    wrapped = json.dumps({"model": "gemini-2.5-pro", "request": json.loads(history(CLIENT))})
    flow = gemini_flow(
        "/v1internal:generateContent", wrapped.encode(), "cloudcode-pa.googleapis.com"
    )
    toolid.request(flow)
    assert (
        json.loads(flow.request.content)["request"]["contents"][1]["parts"][0]["functionCall"]["id"]
        == RAW
    )
    body = json.dumps({"response": EVENTS[2]["data"], "traceId": "t"}).encode()
    answer(flow, body, "application/json")
    toolid.response(flow)
    assert CLIENT.encode() in flow.response.content and RAW.encode() not in flow.response.content
    vertex = "/v1/projects/p/locations/global/publishers/google/models/gemini-3-pro:generateContent"
    flow = gemini_flow(vertex, history(CLIENT), "aiplatform.googleapis.com")
    toolid.request(flow)
    assert RAW.encode() in flow.request.content


def test_the_contentview_and_trace_read_gemini_flows(addon):  # noqa: F811
    toolid, _ = addon
    flow = gemini_flow(MODEL + ":streamGenerateContent", history("call_1"))
    toolid.request(flow)
    answer(flow, streams.json_array(CLIENT_EVENTS), "application/json")
    view = contentviews.prettify_message(flow.response, flow)
    assert view.view_name == "toolid"
    assert view.text.startswith("# toolid: Google Gemini JSON-array stream · 5 elements")
    assert f"# ⟵ 2nd use of {RAW}" in view.text
    replay = gemini_flow(MODEL + ":generateContent", history(CLIENT, TAGGED))
    toolid.request(replay)
    lines = trace_lines(TAGGED, [flow, replay])
    assert lines == [
        f"#1 POST {MODEL}:streamGenerateContent response event 4 "
        "candidates[0].content.parts[0].functionCall.id (created)",
        f"#2 POST {MODEL}:generateContent request contents[1].parts[1].functionCall.id "
        "(replayed, kept)",
        f"#2 POST {MODEL}:generateContent request contents[2].parts[1].functionResponse.id "
        "(replayed, kept)",
    ]


def test_inspect_reads_gemini_har_entries() -> None:
    capture = har(
        [
            har_entry(
                f"https://{HOST}{MODEL}:streamGenerateContent",
                history(CLIENT),
                streams.json_array(EVENTS),
                "application/json",
            ),
            har_entry(
                f"https://{HOST}{MODEL}:streamGenerateContent?alt=sse",
                None,
                streams.render(EVENTS, eol=streams.CRLF),
                "text/event-stream",
            ),
        ]
    )
    out = io.StringIO()
    code = inspect.run("-", None, stdin=io.BytesIO(capture), stdout=out, stderr=io.StringIO())
    lines = out.getvalue().splitlines()
    assert code == inspect.EXIT_NON_CONFORMING
    where = [line.split("  ")[0] for line in lines[1:7]]
    assert where == [
        f"entry 1 POST {MODEL}:streamGenerateContent request",
        f"entry 1 POST {MODEL}:streamGenerateContent request",
        f"entry 1 POST {MODEL}:streamGenerateContent response event 3",
        f"entry 1 POST {MODEL}:streamGenerateContent response event 4",
        f"entry 2 POST {MODEL}:streamGenerateContent response event 3",
        f"entry 2 POST {MODEL}:streamGenerateContent response event 4",
    ]
    # each call its own client id (entry 1's request takes the first: its answer's calls get
    # the next two tags)
    assert encode(RAW, occurrence=3) in lines[4] and TAGGED in lines[6]
    assert lines[7].startswith("6 tool-call id positions, 1 distinct id")
