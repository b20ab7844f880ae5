"""The addon, driven through mitmproxy's own test helpers (taddons, tflow)."""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import logging
import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mitmproxy import contentviews, exceptions, http
from mitmproxy.addons import next_layer
from mitmproxy.test import taddons, tflow

from addons import toolid_addon
from addons.toolid_addon import DRAIN_EVERY, MARK_CHANGED, MARK_PROBLEM, ToolId
from addons.toolid_records import LOG_EVERY, MAX_RECORDS, describe
from toolid import ResponseStream, Taken, encode, pairing, rewrite_request
from toolid.positions import Api

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)  # tid1_functions-2Eget_weather-3A0


@pytest.fixture
def addon() -> Iterator[tuple[ToolId, taddons.context]]:
    toolid = ToolId()
    with taddons.context(toolid) as tctx:
        yield toolid, tctx


def chat_response(tool_id: str = RAW) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": f"calling {tool_id}",
                        "tool_calls": [
                            {
                                "id": tool_id,
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": "{}"},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 1.50},
        },
        indent=1,
    ).encode()


def chat_request(tool_id: str = CLIENT, stream: bool = False) -> bytes:
    return json.dumps(
        {
            "model": "kimi-k2",
            "stream": stream,
            "messages": [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": tool_id,
                            "type": "function",
                            "function": {"name": "w", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": tool_id, "content": f"result for {tool_id}"},
            ],
        }
    ).encode()


def response_flow(
    body: bytes,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
) -> tflow.HTTPFlow:
    flow = tflow.tflow(resp=True, live=True)
    flow.request.host, flow.request.port, flow.request.path = host, port, path
    flow.response.headers["content-type"] = "application/json"
    for name, value in (headers or {}).items():
        flow.response.headers[name] = value
    flow.response.content = body
    return flow


def request_flow(
    body: bytes, *, host: str = "127.0.0.1", port: int = 8000, path: str = "/v1/chat/completions"
) -> tflow.HTTPFlow:
    flow = tflow.tflow(live=True)
    flow.request.host, flow.request.port, flow.request.path = host, port, path
    flow.request.headers["content-type"] = "application/json"
    flow.request.content = body
    return flow


# --- buffered responses and requests -------------------------------------------------------


def test_response_ids_are_encoded_surgically(addon):
    toolid, _ = addon
    original = chat_response()
    flow = response_flow(original)
    toolid.response(flow)
    assert flow.response.content == original.replace(
        f'"id": "{RAW}"'.encode(), f'"id": "{CLIENT}"'.encode()
    )
    assert f"calling {RAW}".encode() in flow.response.content  # text untouched
    record = flow.metadata["toolid"]
    assert record["response"] == [
        {
            "path": "choices[0].message.tool_calls[0].id",
            "raw": RAW,
            "client": CLIENT,
            "action": "encoded",
        }
    ]
    assert flow.comment == f"toolid: 1 encoded ({RAW} -> {CLIENT})"
    assert flow.marked == MARK_CHANGED


def test_request_ids_are_restored(addon):
    toolid, _ = addon
    original = chat_request()
    flow = request_flow(original)
    toolid.request(flow)
    body = json.loads(flow.request.content)
    assert body["messages"][1]["tool_calls"][0]["id"] == RAW
    assert body["messages"][2]["tool_call_id"] == RAW
    assert body["messages"][2]["content"] == f"result for {CLIENT}"  # text untouched
    assert flow.comment.startswith("toolid: 2 restored")
    assert flow.metadata["toolid"]["api"] == "chat"


def test_nothing_to_change_leaves_bytes_and_flow_alone(addon):
    toolid, _ = addon
    original = chat_response("call_abc123")
    flow = response_flow(original)
    raw_before = flow.response.raw_content
    toolid.response(flow)
    assert flow.response.raw_content is raw_before
    assert "toolid" not in flow.metadata
    assert not flow.marked and not flow.comment


def test_compressed_response_is_rewritten_and_recompressed(addon):
    toolid, _ = addon
    flow = response_flow(b"", headers={"content-encoding": "gzip"})
    flow.response.content = chat_response()  # encodes with gzip
    toolid.response(flow)
    assert flow.response.headers["content-encoding"] == "gzip"
    assert CLIENT.encode() in gzip.decompress(flow.response.raw_content)


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"Transfer-Encoding", b"chunked")],
        [(b"Content-Encoding", b"gzip")],
        [(b"content-encoding", b"identity")],
        [(b"Content-Length", b"1"), (b"content-length", b"2")],
    ],
)
def test_a_rewritten_body_gets_the_headers_set_content_gives(addon, headers):
    """The addon puts a new body in as mitmproxy's ``message.content = ...`` would."""
    toolid, _ = addon
    flow = response_flow(b"")
    flow.response.headers.fields = (*flow.response.headers.fields, *headers)
    flow.response.content = chat_response()
    expected = flow.copy()
    toolid.response(flow)
    assert expected.response is not None and flow.response is not None
    rewritten = flow.response.get_content()
    assert rewritten is not None and CLIENT.encode() in rewritten
    expected.response.content = rewritten
    assert flow.response.headers.fields == expected.response.headers.fields
    assert flow.response.raw_content == expected.response.raw_content


_SPELLINGS = [b"content-type", b"Content-Type", b"CONTENT-TYPE"]
_NAMES = st.sampled_from(
    [
        *(b"content-type", b"Content-Type", b"CONTENT-ENCODING", b"transfer-encoding", b"x-other"),
        *(b"Authorization", b"x-amz-content-sha256", b"Signature-Input", b"signature"),
    ]
)


_TYPES = st.sampled_from([b"application/json", b"text/plain", b"Application/JSON; charset=x"])


@given(
    st.lists(st.tuples(st.sampled_from(_SPELLINGS), _TYPES), max_size=3),
    st.lists(st.tuples(_NAMES, st.binary(max_size=8)), max_size=3),
    st.sampled_from([None, b"transfer-encoding", b"Transfer-Encoding"]),
)
def test_a_response_is_read_by_its_headers_as_headers_get_gives_them(types, others, chunked):
    """Whatever the spelling and repetition of its headers: a body is JSON when the
    content-type ``Headers.get`` gives names json (a repeated header's values joined) or
    there is none; a
    rewritten body gets its content-length unless the response has a transfer-encoding."""
    fields = [*types, *((k, v) for k, v in others if k.lower() in (b"x-other", b"authorization"))]
    if chunked:
        fields.append((chunked, b"chunked"))
    with taddons.context(ToolId()) as tctx:
        toolid = tctx.master.addons.get("toolid")
        flow = request_flow(chat_request("call_0"))
        toolid.request(flow)
        flow.response = tflow.tresp(content=b"")
        flow.response.headers = http.Headers(fields)
        flow.response.raw_content = chat_response(RAW)
        headers = http.Headers(fields)
        toolid.response(flow)
    if "json" in headers.get("content-type", "json").lower():
        assert flow.response.raw_content == chat_response(RAW).replace(
            f'"id": "{RAW}"'.encode(), f'"id": "{CLIENT}"'.encode()
        )
        length = None if chunked else str(len(flow.response.raw_content))
        assert flow.response.headers.get("content-length") == length
    else:
        assert flow.response.raw_content == chat_response(RAW)
        assert flow.response.headers.fields == headers.fields


@pytest.mark.parametrize("name", ["authorization", "AUTHORIZATION", "x-Amz-Content-Sha256"])
def test_a_signing_header_is_read_in_any_spelling(addon, name):
    toolid, _ = addon
    flow = request_flow(chat_request())
    flow.request.headers[name] = "AWS4-HMAC-SHA256 Credential=x/y, Signature=z"
    if "sha256" in name.lower():
        flow.request.headers[name] = "0" * 64
    toolid.request(flow)
    assert flow.request.content == chat_request()
    assert flow.marked == ":lock:"  # signed: passed byte for byte on purpose


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("tool_id", [CLIENT, "call_0"], ids=["read-for-ids", "byte-search"])
def test_request_to_streaming_api_asks_for_identity(addon, stream, tool_id):
    """Read off the parsed request when it was parsed for its ids, else by a byte search."""
    toolid, _ = addon
    flow = request_flow(chat_request(tool_id, stream=stream))
    flow.request.headers["accept-encoding"] = "gzip, br"
    toolid.request(flow)
    assert flow.request.headers["accept-encoding"] == ("identity" if stream else "gzip, br")


# --- scope, strict hosts, profile, observe mode ---------------------------------------------


def test_out_of_scope_hosts_are_untouched(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_hosts=["api.moonshot.ai", "*.example.com"])
    for host in ("127.0.0.1", "example.com", "moonshot.ai"):
        flow = response_flow(chat_response(), host=host)
        toolid.response(flow)
        assert RAW.encode() in flow.response.content, host
    for host in ("api.moonshot.ai", "kimi.example.com", "A.B.EXAMPLE.COM"):
        flow = response_flow(chat_response(), host=host)
        toolid.response(flow)
        assert CLIENT.encode() in flow.response.content, host


def test_host_pattern_with_port(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_hosts=["localhost:8000"])
    inside = response_flow(chat_response(), host="localhost", port=8000)
    outside = response_flow(chat_response(), host="localhost", port=8001)
    toolid.response(inside)
    toolid.response(outside)
    assert CLIENT.encode() in inside.response.content
    assert CLIENT.encode() not in outside.response.content


def test_strict_host_keeps_client_ids_it_would_reject(addon):
    toolid, _ = addon
    claude = encode("toolu_01AbC", "call")  # restorable: the raw id is safe
    body = json.dumps(
        {
            "model": "claude",
            "messages": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": CLIENT, "name": "w", "input": {}},
                        {"type": "tool_use", "id": claude, "name": "w", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": CLIENT, "content": "x"},
                        {"type": "tool_result", "tool_use_id": claude, "content": "y"},
                    ],
                },
            ],
        }
    ).encode()
    flow = request_flow(body, host="api.anthropic.com", port=443, path="/v1/messages")
    toolid.request(flow)
    sent = json.loads(flow.request.content)
    assert [block["id"] for block in sent["messages"][0]["content"]] == [CLIENT, "toolu_01AbC"]
    assert [b["tool_use_id"] for b in sent["messages"][1]["content"]] == [CLIENT, "toolu_01AbC"]
    actions = [r["action"] for r in flow.metadata["toolid"]["request"]]
    assert sorted(actions) == ["kept", "kept", "restored", "restored"]
    assert "2 kept (strict host)" in flow.comment


def test_same_request_to_a_lenient_host_restores_everything(addon):
    toolid, _ = addon
    flow = request_flow(chat_request(), host="api.moonshot.ai", port=443)
    toolid.request(flow)
    assert RAW.encode() in flow.request.content


def test_call_profile(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_profile="call")
    flow = response_flow(chat_response("toolu_01"))
    toolid.response(flow)
    assert b'"id": "call_tid1_toolu_01"' in flow.response.content


def test_observe_mode_reports_but_changes_nothing(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    original = chat_response()
    flow = response_flow(original)
    toolid.response(flow)
    assert flow.response.content == original
    assert flow.comment == f"toolid (observe): would encode 1 ({RAW} -> {CLIENT})"
    request = request_flow(chat_request())
    before = request.request.content
    toolid.request(request)
    assert request.request.content == before
    assert request.metadata["toolid"]["request"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("toolid_hosts", ["bad host!"], "invalid host pattern 'bad host!'"),
        ("toolid_hosts", ["example.com:99999"], "invalid host pattern"),
        ("toolid_strict_hosts", ["a b"], "toolid_strict_hosts"),
        ("toolid_host_rules", ["localhost:8000"], "toolid_host_rules: invalid entry"),
        ("toolid_host_rules", ["localhost:8000=strictest"], "mistral"),
        ("toolid_host_rules", ["bad host!=mistral"], "toolid_host_rules: invalid host pattern"),
        ("toolid_model_rules", ["devstral"], "toolid_model_rules: invalid entry 'devstral'"),
        ("toolid_model_rules", ["devstral*=strictest"], "toolid_model_rules: .*mistral"),
        ("toolid_model_rules", ["my model=mistral"], "toolid_model_rules: invalid model pattern"),
        ("toolid_max_event_bytes", 0, "positive"),
        ("toolid_profile", "loose", "loose"),
        ("toolid_mode", "dry", "dry"),
    ],
)
def test_bad_options_are_rejected_clearly(addon, option, value, message):
    toolid, tctx = addon
    with pytest.raises(exceptions.OptionsError, match=message):
        tctx.configure(toolid, **{option: value})


def test_comma_separated_hosts(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_hosts=["a.example, b.example"])
    assert [p.text for p in toolid.hosts] == ["a.example", "b.example"]


# --- fail open --------------------------------------------------------------------------------


def test_broken_json_passes_unchanged_with_one_warning(addon, caplog):
    toolid, _ = addon
    broken = chat_response()[:-20]
    flow = response_flow(broken)
    with caplog.at_level(logging.WARNING):
        toolid.response(flow)
    assert flow.response.content == broken
    assert flow.marked == MARK_PROBLEM
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert "not valid JSON" in flow.metadata["toolid"]["problems"][0]


def test_broken_gzip_passes_unchanged(addon, caplog):
    toolid, _ = addon
    flow = response_flow(b"", headers={"content-encoding": "gzip"})
    flow.response.raw_content = b"\x1f\x8b\x08\x00garbage" + RAW.encode()
    with caplog.at_level(logging.WARNING):
        toolid.response(flow)
    assert flow.response.raw_content == b"\x1f\x8b\x08\x00garbage" + RAW.encode()
    assert flow.marked == MARK_PROBLEM
    assert "cannot decode body" in caplog.text


def test_unexpected_error_never_escapes(addon, monkeypatch, caplog):
    toolid, _ = addon

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("toolid.rewrite_request", explode)
    flow = request_flow(chat_request())
    before = flow.request.content
    with caplog.at_level(logging.WARNING):
        toolid.request(flow)
    assert flow.request.content == before
    assert flow.marked == MARK_PROBLEM
    assert "boom" in caplog.text


def test_logs_never_contain_headers_or_bodies(addon, caplog):
    toolid, _ = addon
    flow = request_flow(chat_request())
    flow.request.headers["authorization"] = "Bearer sk-secret-key"
    flow.request.headers["x-api-key"] = "sk-ant-secret"
    flow.request.path = "/v1/chat/completions?key=sk-query-secret"
    with caplog.at_level(logging.DEBUG):
        toolid.request(flow)
        flow.response = response_flow(chat_response()).response
        toolid.response(flow)
    assert "toolid:" in caplog.text
    for secret in ("sk-secret-key", "sk-ant-secret", "sk-query-secret", "weather?"):
        assert secret not in caplog.text


# --- streaming --------------------------------------------------------------------------------


def sse_flow(headers: dict[str, str] | None = None) -> tflow.HTTPFlow:
    flow = tflow.tflow(resp=True, live=True)
    flow.request.host, flow.request.port, flow.request.path = (
        "127.0.0.1",
        8000,
        "/v1/chat/completions",
    )
    flow.response.headers["content-type"] = "text/event-stream"
    flow.response.headers["content-length"] = "1234"
    for name, value in (headers or {}).items():
        flow.response.headers[name] = value
    return flow


def chat_stream(tool_id: str = RAW) -> bytes:
    chunks = [
        {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": tool_id,
                                "type": "function",
                                "function": {"name": "w", "arguments": ""},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
                }
            ],
        },
    ]
    return (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )


def drive(
    stream: Callable[[bytes], bytes | Iterable[bytes]], body: bytes, piece: int
) -> list[bytes]:
    """Feed ``body`` in pieces then the end marker, as mitmproxy does; return each result."""
    results = []
    for at in range(0, len(body), piece):
        out = stream(body[at : at + piece])
        results.append(out if isinstance(out, bytes) else b"".join(out))
        assert out != b"", "an empty bytes result mid-stream would end a chunked body"
    final = stream(b"")
    results.append(final if isinstance(final, bytes) else b"".join(final))
    return results


def test_sse_response_is_streamed_and_rewritten(addon):
    toolid, _ = addon
    flow = sse_flow()
    toolid.responseheaders(flow)
    assert callable(flow.response.stream)
    assert "content-length" not in flow.response.headers
    body = chat_stream()
    out = b"".join(drive(flow.response.stream, body, 7))
    assert out == body.replace(RAW.encode(), CLIENT.encode())
    toolid.response(flow)
    assert flow.comment == f"toolid: 1 encoded ({RAW} -> {CLIENT})"
    assert flow.metadata["toolid"]["response"][0]["path"] == "choices[0].delta.tool_calls[0].id"


def test_sse_events_are_forwarded_as_soon_as_complete(addon):
    toolid, _ = addon
    flow = sse_flow()
    toolid.responseheaders(flow)
    first = b'data: {"id": "c", "choices": []}\n\n'
    assert flow.response.stream(first) == first
    assert list(flow.response.stream(b"data: {")) == []


def test_gzip_sse_is_decoded_and_header_dropped(addon):
    toolid, _ = addon
    flow = sse_flow({"content-encoding": "gzip"})
    toolid.responseheaders(flow)
    assert "content-encoding" not in flow.response.headers
    out = b"".join(drive(flow.response.stream, gzip.compress(chat_stream()), 5))
    assert out == chat_stream().replace(RAW.encode(), CLIENT.encode())


def test_unsupported_encoding_stream_passes_unchanged(addon):
    toolid, _ = addon
    flow = sse_flow({"content-encoding": "compress"})
    toolid.responseheaders(flow)
    assert flow.response.stream is True  # streamed as is, never held until the end
    assert flow.response.headers["content-encoding"] == "compress"
    assert flow.marked == MARK_PROBLEM
    toolid.response(flow)
    assert len(flow.metadata["toolid"]["problems"]) == 1  # one warning, not a second one


def test_observe_mode_stream_passes_bytes_unchanged(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    flow = sse_flow()
    toolid.responseheaders(flow)
    body = chat_stream()
    assert b"".join(drive(flow.response.stream, body, 3)) == body
    assert flow.metadata["toolid"]["response"]
    assert flow.response.headers["content-length"] == "1234"


def _boom(*args: object, **kwargs: object) -> None:
    raise RuntimeError("kaputt")


def test_stream_exception_falls_back_to_pass_through(addon, caplog, backend, monkeypatch):
    toolid, _ = addon
    flow = sse_flow()
    toolid.responseheaders(flow)
    monkeypatch.setattr("toolid.ResponseStream.feed", _boom)
    with caplog.at_level(logging.WARNING):
        assert flow.response.stream(b"data: x\n\n") == b"data: x\n\n"
    assert flow.marked == MARK_PROBLEM
    assert "kaputt" in caplog.text


def test_stream_exception_in_reporting_loses_no_byte(addon, caplog, backend, monkeypatch):
    """Reporting fails on a piece past the stream's start: what the rewriter gave for it
    still goes out, and the failure is told."""
    toolid, _ = addon
    monkeypatch.setattr(toolid_addon, "DRAIN_EVERY", 1)  # report at the first change
    flow = sse_flow()
    toolid.responseheaders(flow)
    stream = flow.response.stream
    first, *rest = chat_stream(RAW).split(b"\n\n")
    assert stream(first + b"\n\n") == first + b"\n\n"
    monkeypatch.setattr(toolid.records, "note", _boom)
    piece = b"\n\n".join(rest)
    with caplog.at_level(logging.WARNING):
        out = stream(piece)
    assert out == piece.replace(RAW.encode(), encode(RAW).encode())
    assert flow.marked == MARK_PROBLEM
    assert "kaputt" in caplog.text


def test_non_sse_responses_are_not_streamed(addon):
    toolid, _ = addon
    flow = response_flow(chat_response())
    toolid.responseheaders(flow)
    assert not flow.response.stream


def test_stream_large_bodies_is_reported(addon, caplog):
    toolid, _ = addon
    flow = response_flow(chat_response())
    flow.response.stream = True  # as stream_large_bodies would
    with caplog.at_level(logging.WARNING):
        toolid.response(flow)
    assert "streamed by another option" in caplog.text


# --- TLS interception limited to toolid_hosts --------------------------------------------------


def test_narrow_hosts_tunnel_everything_else(addon):
    toolid, tctx = addon
    tctx.master.addons.add(next_layer.NextLayer())  # validates allow_hosts like mitmdump does
    tctx.configure(toolid, toolid_hosts=["api.moonshot.ai", "localhost:8000"])
    allowed = tctx.options.allow_hosts
    assert allowed == ["^(?:api\\.moonshot\\.ai):[0-9]+$", "^(?:localhost):8000$"]

    def intercepted(address: str) -> bool:
        return any(re.search(rex, address, re.IGNORECASE) for rex in allowed)

    assert intercepted("api.moonshot.ai:443") and intercepted("localhost:8000")
    assert not intercepted("github.com:443") and not intercepted("api.moonshot.ai.evil:443")
    tctx.configure(toolid, toolid_hosts=["*"])
    assert tctx.options.allow_hosts == []


def test_users_own_allow_or_ignore_hosts_win(addon):
    toolid, tctx = addon
    tctx.options.update(allow_hosts=["^mine:443$"])
    tctx.configure(toolid, toolid_hosts=["api.moonshot.ai"])
    assert tctx.options.allow_hosts == ["^mine:443$"]
    tctx.options.update(allow_hosts=[], ignore_hosts=["^other:443$"])
    tctx.configure(toolid, toolid_hosts=["kimi.example"])
    assert tctx.options.allow_hosts == []


def test_stream_records_are_capped_and_summarised_once(addon):
    toolid, _ = addon
    flow = sse_flow()
    toolid.responseheaders(flow)
    text = b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
    calls = MAX_RECORDS + 200
    out = []
    for index in range(calls):  # one event per chunk, as upstreams write them
        out.append(flow.response.stream(text))
        event = chat_stream(f"functions.f:{index}").split(b"\n\n")[1] + b"\n\n"
        event = event.replace(b'[{"index": 0, "id"', b'[{"index": %d, "id"' % index)  # a new call
        out.append(flow.response.stream(event))
    out.append(flow.response.stream(b""))
    assert out[0] == text  # id-free events pass as they came
    assert f"tid1_functions-2Ef-3A{calls - 1}".encode() in b"".join(out)
    assert not flow.comment  # not rebuilt per chunk
    toolid.response(flow)
    record = flow.metadata["toolid"]
    assert len(record["response"]) == MAX_RECORDS
    assert record["response_omitted"] == 200
    assert flow.comment.startswith(f"toolid: {MAX_RECORDS} encoded")
    assert flow.comment.endswith("(+200 more not recorded)")


def test_a_long_history_records_its_first_restores_and_counts_the_rest(addon):
    """A history restores every id each turn: the first MAX_RECORDS positions are recorded,
    the rest counted; the body has every id restored all the same."""
    toolid, _ = addon
    calls = MAX_RECORDS  # two positions each: a call and its result
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for index in range(calls):
        client = encode(f"functions.f:{index}")
        messages.append({"role": "assistant", "tool_calls": [{"id": client, "type": "function"}]})
        messages.append({"role": "tool", "tool_call_id": client, "content": "ok"})
    flow = request_flow(json.dumps({"model": "kimi-k2", "messages": messages}).encode())
    toolid.request(flow)
    assert b"tid1_" not in flow.request.content
    record = flow.metadata["toolid"]
    assert len(record["request"]) == MAX_RECORDS
    assert record["request_omitted"] == 2 * calls - MAX_RECORDS
    assert flow.comment.startswith(f"toolid: {MAX_RECORDS} restored")
    assert flow.comment.endswith(f"(+{2 * calls - MAX_RECORDS} more not recorded)")


def test_a_stream_records_its_changes_in_batches_and_at_its_end(addon, monkeypatch):
    """Per chunk, recording is not paid for: changes are recorded every DRAIN_EVERY, so a
    long stream holds no more than that unrecorded, and the rest at its end."""
    toolid, _ = addon
    toolid.records.max_records = 2 * DRAIN_EVERY
    flow = sse_flow()
    toolid.responseheaders(flow)
    for index in range(DRAIN_EVERY + 10):
        flow.response.stream(chat_stream(f"functions.f:{index}").split(b"\n\n")[1] + b"\n\n")
        recorded = len(flow.metadata["toolid"].get("response", []))
        assert recorded == (index + 1) // DRAIN_EVERY * DRAIN_EVERY
    flow.response.stream(b"")
    assert len(flow.metadata["toolid"]["response"]) == DRAIN_EVERY + 10
    assert flow.marked


def test_a_stream_lets_go_of_its_rewriter_at_its_end(addon, backend, monkeypatch):
    """mitmproxy's flows are freed by the cyclic garbage collector: at its end, the stream
    callable (held by the flow) drops its rewriter, so what that holds (the calls' ids, the
    buffers) goes at once, not with the flow."""
    toolid, _ = addon
    made: list[weakref.ref[ResponseStream]] = []

    class Watched(ResponseStream):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr("toolid.ResponseStream", Watched)
    flow = sse_flow()
    toolid.responseheaders(flow)
    callable_ = flow.response.stream
    for piece in chat_stream(RAW).split(b"\n\n"):
        callable_(piece + b"\n\n")
    assert len(made) == 1 and made[0]() is not None
    callable_(b"")
    assert made[0]() is None  # no garbage collection needed
    assert flow.metadata["toolid"]["response"]
    assert callable_(b"data: late\n\n") == b"data: late\n\n"  # called again: as it is


@pytest.mark.parametrize(
    ("method", "path"),
    [(b"POST", b"/v1/chat/completions?key=secret"), (b"post", b"/v1/\xff\xfe?x"), (b"GET", b"*")],
)
def test_describe_reads_the_request_as_mitmproxy_decodes_it(method, path):
    """The change line's request (made when the line is logged, from the raw fields) reads as
    mitmproxy's own properties give it: method, host, path without its query."""
    flow = tflow.tflow()
    flow.request.data.method, flow.request.data.path = method, path
    request = flow.request
    expected = f"{request.method} {request.host}{request.path.split('?', 1)[0]}"
    assert describe(flow) == expected.encode("utf-8", "backslashreplace").decode("utf-8")
    assert "secret" not in describe(flow)


# --- occurrence tags: an upstream that reuses ids ----------------------------------------------


def tool_loop_flow(toolid: ToolId, history: bytes, answer: bytes | None = None) -> tflow.HTTPFlow:
    """A live flow whose request carries ``history``, through the request hook, then
    answered by ``answer`` (buffered) through the response hook."""
    flow = request_flow(history)
    toolid.request(flow)
    if answer is not None:
        flow.response = tflow.tresp(content=answer)
        flow.response.headers["content-type"] = "application/json"
        toolid.response(flow)
    return flow


def test_reused_ids_get_tagged_against_the_requests_history(addon):
    """The history holds the 1st call's client id: the same raw id in the answer is the 2nd
    use; the upstream still gets its own id in the request."""
    toolid, _ = addon
    flow = tool_loop_flow(toolid, chat_request(CLIENT), chat_response(RAW))
    assert f'"tool_call_id": "{RAW}"'.encode() in flow.request.content
    second = encode(RAW, "safe", 2)
    assert flow.response.content == chat_response(RAW).replace(
        f'"id": "{RAW}"'.encode(), f'"id": "{second}"'.encode()
    )
    assert flow.metadata["toolid"]["response"][0]["occurrence"] == 2
    assert f"{RAW} -> {second}, 2nd use of {RAW}" in flow.comment


def test_nothing_of_a_request_is_kept_once_its_flow_is_answered(addon):
    """What the request's history takes is held from the request hook to the response's,
    then let go, though the flow lives on (for the UI)."""
    toolid, _ = addon
    before = {id(o) for o in gc.get_objects() if isinstance(o, Taken)}
    flow = tool_loop_flow(toolid, chat_request(CLIENT))
    held = [
        weakref.ref(o) for o in gc.get_objects() if isinstance(o, Taken) and id(o) not in before
    ]
    assert held  # until the response comes
    flow.response = tflow.tresp(content=chat_response(RAW))
    flow.response.headers["content-type"] = "application/json"
    toolid.response(flow)
    gc.collect()
    assert [ref() for ref in held] == [None] * len(held)


def test_reused_ids_in_a_stream(addon):
    toolid, _ = addon
    flow = tool_loop_flow(toolid, chat_request("call_0", stream=True))
    flow.response = sse_flow().response
    toolid.responseheaders(flow)
    out = b"".join(drive(flow.response.stream, chat_stream("call_0"), 5))
    assert out == chat_stream("call_0").replace(b'"call_0"', b'"tid1_call_0-_2"')


def test_taken_sets_are_per_flow(addon):
    """Another flow's history never tags this flow's ids (the proxy keeps no state)."""
    toolid, _ = addon
    tool_loop_flow(toolid, chat_request(CLIENT))  # never answered
    flow = tool_loop_flow(toolid, chat_request("unrelated_0"), chat_response(RAW))
    assert flow.response.content == chat_response(RAW).replace(
        f'"id": "{RAW}"'.encode(), f'"id": "{CLIENT}"'.encode()
    )


def test_strict_hosts_get_tagged_ids_as_they_are(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_strict_hosts=["127.0.0.1"])
    history = chat_request("tid1_call_0-_2")
    flow = tool_loop_flow(toolid, history)
    assert flow.request.content == history
    assert flow.metadata["toolid"]["request"][0]["action"] == "kept"


# --- destination rules -------------------------------------------------------------------------


MISTRAL_HISTORY = chat_request("toolu_01AbC")


def sent_ids(flow: tflow.HTTPFlow) -> list[str]:
    """The call id and the result id the request carries after the request hook."""
    messages = json.loads(flow.request.content)["messages"]
    return [messages[1]["tool_calls"][0]["id"], messages[2]["tool_call_id"]]


def test_host_rules_map_ids_the_host_would_reject(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_host_rules=["127.0.0.1:8000=mistral"])
    flow = tool_loop_flow(toolid, MISTRAL_HISTORY)
    call, result = sent_ids(flow)
    assert call == result and len(call) == 9 and call.isalnum()
    (record, _) = flow.metadata["toolid"]["request"]
    assert record == {
        "path": "messages[1].tool_calls[0].id",
        "raw": "toolu_01AbC",
        "client": "toolu_01AbC",
        "action": "mapped",
        "sent": call,
        "rules": "mistral",
    }
    assert f"2 mapped (toolu_01AbC -> {call} for mistral)" in flow.comment
    # another port of the same host: no rules, nothing to change
    other = request_flow(MISTRAL_HISTORY, port=8001)
    toolid.request(other)
    assert other.request.content == MISTRAL_HISTORY


@pytest.mark.parametrize(
    ("settings", "host", "expected"),
    [
        ({}, "api.mistral.ai", "mapped"),  # built in
        ({}, "api.openai.com", None),  # toolu_01AbC is fine for OpenAI
        ({"toolid_host_rules": ["api.mistral.ai=none"]}, "api.mistral.ai", None),  # turned off
        ({"toolid_strict_hosts": ["api.mistral.ai"]}, "api.mistral.ai", None),  # safe: takes it
        (
            {"toolid_strict_hosts": ["*.ai"], "toolid_host_rules": ["*.mistral.ai=mistral"]},
            "api.mistral.ai",
            "mapped",
        ),
        ({"toolid_host_rules": ["*.example.com=mistral,x.org=none"]}, "a.example.com", "mapped"),
    ],
)
def test_which_rule_set_a_host_gets(addon, settings, host, expected):
    """The user's toolid_host_rules, then toolid_strict_hosts (safe), then the built-ins."""
    toolid, tctx = addon
    tctx.configure(toolid, **settings)
    flow = request_flow(MISTRAL_HISTORY, host=host, port=443)
    toolid.request(flow)
    actions = {r["action"] for r in flow.metadata.get("toolid", {}).get("request", [])}
    assert actions == ({expected} if expected else set())


def test_a_hosts_rule_set_follows_the_options(addon):
    """Rule sets are looked up once per upstream, and again after the options change."""
    toolid, tctx = addon
    before = request_flow(MISTRAL_HISTORY)
    toolid.request(before)
    assert before.request.content == MISTRAL_HISTORY
    tctx.configure(toolid, toolid_host_rules=["127.0.0.1=mistral"])
    mapped = request_flow(MISTRAL_HISTORY)
    toolid.request(mapped)
    assert {r["action"] for r in mapped.metadata["toolid"]["request"]} == {"mapped"}
    tctx.configure(toolid, toolid_host_rules=[], toolid_strict_hosts=["127.0.0.1"])
    safe = request_flow(MISTRAL_HISTORY)
    toolid.request(safe)
    assert safe.request.content == MISTRAL_HISTORY


def model_request(model: str, tool_id: str = "toolu_01AbC") -> bytes:
    """``chat_request`` asking for ``model``, its model member after the messages (as the
    openai SDK writes it)."""
    document = json.loads(chat_request(tool_id))
    document["model"] = document.pop("model") and model
    return json.dumps(document).encode()


def test_model_rules_map_ids_for_the_model_behind_a_gateway(addon):
    """One gateway host, many providers: the request's model picks the rule set, and the
    records, the comment and the log line say so."""
    toolid, tctx = addon
    flow = request_flow(model_request("mistralai/devstral-medium-2507"), host="openrouter.ai")
    toolid.request(flow)
    call, result = sent_ids(flow)
    assert call == result and len(call) == 9 and call.isalnum()
    records = flow.metadata["toolid"]["request"]
    assert {r["why"] for r in records} == {"model mistralai/devstral-medium-2507"}
    assert {r["rules"] for r in records} == {"mistral"}
    assert flow.comment == (
        f"toolid: 2 mapped (toolu_01AbC -> {call} for mistral "
        "(model mistralai/devstral-medium-2507))"
    )
    # the same gateway, a Kimi model: its own ids, as before
    kimi = request_flow(model_request("moonshotai/kimi-k2", CLIENT), host="openrouter.ai")
    toolid.request(kimi)
    assert json.loads(kimi.request.content)["messages"][1]["tool_calls"][0]["id"] == RAW
    assert {r["action"] for r in kimi.metadata["toolid"]["request"]} == {"restored"}
    # a custom name, with one option
    custom = model_request("acme-coder-7")
    toolid.request(unmapped := request_flow(custom, host="openrouter.ai"))
    assert unmapped.request.content == custom and "request" not in unmapped.metadata["toolid"]
    tctx.configure(toolid, toolid_model_rules=["acme-coder-*=mistral"])
    toolid.request(mapped := request_flow(custom, host="openrouter.ai"))
    assert len(sent_ids(mapped)[0]) == 9 and "(model acme-coder-7)" in mapped.comment


@pytest.mark.parametrize(
    ("settings", "host", "model", "expected"),
    [
        ({}, "openrouter.ai", "devstral-small", "mapped"),  # built-in model rule
        ({}, "api.openai.com", "devstral-small", None),  # the official host wins
        ({"toolid_model_rules": ["devstral*=none"]}, "openrouter.ai", "devstral-small", None),
        ({"toolid_model_rules": ["devstral*=none"]}, "api.mistral.ai", "devstral-small", "mapped"),
        ({"toolid_model_rules": ["gpt-*=mistral"]}, "api.openai.com", "gpt-4o", "mapped"),
        ({"toolid_host_rules": ["openrouter.ai=none"]}, "openrouter.ai", "devstral-small", None),
        ({"toolid_strict_hosts": ["openrouter.ai"]}, "openrouter.ai", "devstral-small", None),
        (
            {"toolid_host_rules": ["openrouter.ai/api/mistral/*=mistral"]},
            "openrouter.ai",
            "kimi",
            None,  # another path of the host
        ),
    ],
)
def test_which_rule_set_a_model_gets(addon, settings, host, model, expected):
    """The user's model rules, then host rules and strict hosts, then the official hosts,
    then the built-in model rules."""
    toolid, tctx = addon
    tctx.configure(toolid, **settings)
    flow = request_flow(model_request(model), host=host, port=443)
    toolid.request(flow)
    actions = {r["action"] for r in flow.metadata.get("toolid", {}).get("request", [])}
    assert actions == ({expected} if expected else set())


def test_the_contentview_says_why(addon):
    toolid, _ = addon
    flow = request_flow(model_request("codestral-latest"), host="gateway.internal")
    toolid.request(flow)
    shown = contentviews.prettify_message(flow.request, flow).text.splitlines()
    assert shown[0].startswith("# toolid on this request: ")
    assert shown[0].endswith("for mistral (model codestral-latest))")


def test_a_vertex_claude_path_is_rewritten_as_messages(addon):
    toolid, _ = addon
    body = json.dumps(
        {
            "anthropic_version": "vertex-2023-10-16",
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "a.b", "name": "f"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a.b"}]},
            ],
        }
    ).encode()
    path = "/v1/projects/p/locations/l/publishers/anthropic/models/claude-opus-4@1:rawPredict"
    flow = request_flow(body, host="gateway.internal", path=path)
    toolid.request(flow)
    record = flow.metadata["toolid"]
    assert record["api"] == "messages"
    assert {r["why"] for r in record["request"]} == {"model anthropic/claude-opus-4@1"}
    sent = json.loads(flow.request.content)["messages"]
    assert sent[1]["content"][0]["id"] == sent[2]["content"][0]["tool_use_id"] != "a.b"


# --- the change log lines --------------------------------------------------------------------


def _change_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " encoded (" in r.getMessage()]


def test_change_lines_are_logged_together_in_the_event_loop(addon, caplog):
    """mitmproxy hands every log record to every addon: a line per flow, written one record
    per flow, would cost more than the rewriting. In the event loop they share a record."""
    toolid, _ = addon

    async def two_flows() -> None:
        for _ in range(2):
            toolid.response(response_flow(chat_response()))
        assert _change_records(caplog) == []  # not yet
        await asyncio.sleep(LOG_EVERY * 2)

    with caplog.at_level(logging.INFO):
        asyncio.run(two_flows())
    (record,) = _change_records(caplog)
    lines = record.splitlines()
    assert len(lines) == 2
    assert all(line.startswith(f"toolid: 1 encoded ({RAW} -> {CLIENT}) [") for line in lines)


def test_pending_change_lines_are_logged_when_the_addon_is_done(addon, caplog):
    toolid, _ = addon

    async def one_flow() -> None:
        toolid.response(response_flow(chat_response()))

    with caplog.at_level(logging.INFO):
        asyncio.run(one_flow())
        assert _change_records(caplog) == []
        toolid.done()
    assert len(_change_records(caplog)) == 1


def test_change_lines_outside_an_event_loop_are_logged_at_once(addon, caplog):
    toolid, _ = addon
    with caplog.at_level(logging.INFO):
        toolid.response(response_flow(chat_response()))
    assert len(_change_records(caplog)) == 1


# --- pairing problems of a request's history -----------------------------------------------------


def broken_chat_request(tool_id: str = CLIENT) -> bytes:
    """A call without its result (the next user turn came first), a result for a call that is
    not there."""
    return json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [{"id": tool_id, "type": "function"}]},
                {"role": "user", "content": "and?"},
                {"role": "tool", "tool_call_id": "call_zzz", "content": "r"},
            ],
        }
    ).encode()


def test_pairing_problems_are_named_and_the_request_goes_on(addon, caplog):
    toolid, _ = addon
    original = broken_chat_request()
    flow = request_flow(original)
    with caplog.at_level(logging.INFO):
        toolid.request(flow)
    # forwarded: nothing added or dropped, the ids restored as always
    assert flow.request.content == original.replace(CLIENT.encode(), RAW.encode())
    record = flow.metadata["toolid"]
    assert [(p["code"], p["path"], p["id"]) for p in record["pairing"]] == [
        ("missing-result", "messages[1].tool_calls[0].id", CLIENT),
        ("orphan-result", "messages[3].tool_call_id", "call_zzz"),
    ]
    assert "problems" not in record  # toolid itself had none
    assert flow.marked == MARK_PROBLEM
    comment = flow.comment.splitlines()
    assert comment[0] == f"toolid: 1 restored ({CLIENT} -> {RAW})"
    assert comment[2] == (
        "toolid pairing: orphan-result call_zzz at messages[3].tool_call_id: "
        "OpenAI Chat Completions answers \"Invalid parameter: messages with role 'tool' "
        "must be a response to a preceeding message with 'tool_calls'.\""
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "toolid: GET 127.0.0.1/v1/chat/completions: 2 pairing problems: missing-result "
    )
    assert (
        "; orphan-result call_zzz at messages[3].tool_call_id: OpenAI Chat Completions answers"
        in (warnings[0])
    )


def test_pairing_alone_comments_and_keeps_the_bytes(addon):
    toolid, _ = addon
    original = broken_chat_request("call_safe")
    flow = request_flow(original)
    raw_before = flow.request.raw_content
    toolid.request(flow)
    assert flow.request.raw_content is raw_before  # not even re-assigned
    assert flow.comment.splitlines()[0].startswith("toolid pairing: missing-result call_safe")
    assert flow.marked == MARK_PROBLEM
    # the response's comment keeps the pairing lines
    flow.response = tflow.tresp(content=chat_response())
    flow.response.headers["content-type"] = "application/json"
    toolid.response(flow)
    lines = flow.comment.splitlines()
    assert lines[0].startswith("toolid: 1 encoded")
    assert [line.split()[2] for line in lines[1:]] == ["missing-result", "orphan-result"]


def test_repair_makes_a_broken_history_valid_and_records_it(addon, caplog):
    """toolid_repair=true: the missing result put in, the orphan kept as text, the ids
    restored as always; each repair in the metadata, the comment and one log line."""
    toolid, tctx = addon
    tctx.configure(toolid, toolid_repair=True)
    flow = request_flow(broken_chat_request())
    with caplog.at_level(logging.INFO):
        toolid.request(flow)
    sent = json.loads(flow.request.content)
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "user", "user"]
    assert sent["messages"][1]["tool_calls"][0]["id"] == RAW  # restored
    assert sent["messages"][2]["tool_call_id"] == RAW
    assert "No result was recorded" in sent["messages"][2]["content"]
    assert sent["messages"][4]["content"].startswith("[The tool result below answered")
    assert pairing.check(sent, Api.CHAT) == []
    record = flow.metadata["toolid"]
    assert [(r["action"], r["code"], r["done"]) for r in record["repairs"]] == [
        ("repaired", "missing-result", "inserted"),
        ("repaired", "orphan-result", "kept as text"),
    ]
    assert [line.split(":")[0] for line in flow.comment.splitlines()[-2:]] == [
        "toolid repaired",
        "toolid repaired",
    ]
    infos = [
        r.getMessage() for r in caplog.records if "repaired 2 pairing problems" in r.getMessage()
    ]
    assert len(infos) == 1


def test_a_history_it_cannot_repair_passes_with_the_reason(addon, caplog):
    """A history toolid cannot repair with certainty goes on as it came: the reason in
    ``repair_refused`` and one warning, in the words ``toolid.repair_request`` gives."""
    toolid, tctx = addon
    tctx.configure(toolid, toolid_repair=True)
    original = json.dumps(
        {"model": "m", "messages": [{"role": "tool", "tool_call_id": "call_zzz"}, 5]}
    ).encode()
    flow = request_flow(original)
    with caplog.at_level(logging.WARNING):
        toolid.request(flow)
    assert flow.request.content == original
    why = "an element of the history is not an object"
    assert flow.metadata["toolid"]["repair_refused"] == why
    assert f"toolid: GET 127.0.0.1/v1/chat/completions: pairing not repaired: {why}" in [
        record.getMessage() for record in caplog.records
    ]


def test_repair_observed_changes_nothing(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_repair=True, toolid_mode="observe")
    original = broken_chat_request()
    flow = request_flow(original)
    toolid.request(flow)
    assert flow.request.content == original
    assert len(flow.metadata["toolid"]["repairs"]) == 2
    assert "toolid would repair: missing-result" in flow.comment


def test_repair_off_by_default(addon):
    toolid, _ = addon
    original = broken_chat_request("call_safe")
    flow = request_flow(original)
    toolid.request(flow)
    assert flow.request.content == original
    assert "repairs" not in flow.metadata["toolid"]


def test_a_clean_history_stays_silent(addon, caplog):
    toolid, _ = addon
    flow = request_flow(chat_request())
    with caplog.at_level(logging.WARNING):
        toolid.request(flow)
    assert "pairing" not in flow.metadata["toolid"]
    assert flow.marked == MARK_CHANGED
    assert not caplog.records


def test_pairing_is_reported_when_observing(addon):
    toolid, tctx = addon
    tctx.configure(toolid, toolid_mode="observe")
    original = broken_chat_request()
    flow = request_flow(original)
    toolid.request(flow)
    assert flow.request.content == original
    assert len(flow.metadata["toolid"]["pairing"]) == 2


def test_a_pairing_bug_never_costs_the_request(addon, monkeypatch, caplog):
    toolid, _ = addon

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("toolid.RewrittenRequest.pairing_problems", broken)
    original = chat_request()
    flow = request_flow(original)
    with caplog.at_level(logging.WARNING):
        toolid.request(flow)
    assert json.loads(flow.request.content)["messages"][1]["tool_calls"][0]["id"] == RAW
    assert flow.metadata["toolid"]["problems"] == [
        "pairing not checked: unexpected error RuntimeError('boom')"
    ]


def test_in_the_event_loop_pairing_is_named_before_the_request_goes_on(addon, caplog):
    """In mitmproxy's event loop too, the request hook names the problems before it returns:
    nothing the check reads outlives the hook."""
    toolid, _ = addon
    flow = request_flow(broken_chat_request())

    async def one_request() -> None:
        toolid.request(flow)
        assert [p["code"] for p in flow.metadata["toolid"]["pairing"]] == [
            "missing-result",
            "orphan-result",
        ]

    with caplog.at_level(logging.WARNING):
        asyncio.run(one_request())
    assert flow.marked == MARK_PROBLEM
    assert flow.comment.splitlines()[1].startswith("toolid pairing: missing-result ")
    assert len(caplog.records) == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_held_off_while_a_body_is_rewritten(addon, monkeypatch, enabled):
    """Python's cyclic collector is off while the addon rewrites (its short-lived objects die
    by reference counting first), on again after; one the user turned off stays off."""
    toolid, _ = addon
    seen: list[bool] = []
    rewrite = rewrite_request

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return rewrite(*args, **kwargs)

    monkeypatch.setattr("toolid.rewrite_request", watched)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        flow = request_flow(chat_request())
        toolid.request(flow)
        assert seen == [False]
        assert gc.isenabled() is enabled
        assert json.loads(flow.request.content)["messages"][1]["tool_calls"][0]["id"] == RAW
    finally:
        (gc.enable if was else gc.disable)()
