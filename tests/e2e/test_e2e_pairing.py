"""End to end: a request whose history pairs calls and results wrongly, through a real
mitmdump to a strict upstream that answers 400. toolid names each problem in the log and in
the flow's comment (read back from the flow file mitmdump saves), and the bytes the upstream
gets are the client's, only the encoded ids restored as always."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.io import FlowReader
from standin import API, Exchange, ScenarioHandle, UpstreamServer, write_body, write_head

from toolid import encode

from .cases import wait_past_log, wire_client
from .conftest import Mitmdump, MitmdumpPool
from .helpers import toolid_warnings

pytestmark = pytest.mark.e2e

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)

# Each API's history: a call whose result never came (the user spoke first), and a result
# for a call that is not there; the call toolid encoded comes back as the client has it.
HISTORIES: dict[API, dict[str, Any]] = {
    "chat": {
        "model": "m",
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "tool_calls": [{"id": CLIENT, "type": "function"}]},
            {"role": "user", "content": "never mind"},
            {"role": "tool", "tool_call_id": "call_zzz", "content": "sunny"},
        ],
    },
    "responses": {
        "model": "m",
        "input": [
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "id": "fc_1", "call_id": CLIENT, "name": "w"},
            {"role": "user", "content": "never mind"},
            {"type": "message", "role": "assistant", "content": []},
            {"type": "function_call_output", "call_id": "call_zzz", "output": "sunny"},
        ],
    },
    "anthropic": {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": CLIENT, "name": "w"}]},
            {"role": "user", "content": "never mind"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_zzz"}]},
        ],
    },
}
GEMINI_HISTORY = {
    "contents": [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"id": CLIENT, "name": "w", "args": {}}}]},
        {"role": "user", "parts": [{"text": "never mind"}]},
        {"role": "model", "parts": [{"text": "ok"}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "call_zzz", "name": "w"}}]},
    ]
}
HISTORIES["gemini"] = GEMINI_HISTORY
HISTORIES["code_assist"] = {"model": "gemini-2.5-pro", "request": GEMINI_HISTORY}
GEMINI_EXPECTED = [
    f"missing-result {CLIENT} at {{at}}contents[1].parts[0].functionCall.id: Google Gemini answers "
    '"Please ensure that the number of function response parts is equal to the number of '
    'function call parts of the function call turn."',
    "orphan-result call_zzz at {at}contents[4].parts[0].functionResponse.id: Google Gemini: a "
    "functionResponse part answers id call_zzz, which no functionCall part of the model turn "
    "before it has",
]
EXPECTED: dict[API, list[str]] = {
    "gemini": [line.format(at="") for line in GEMINI_EXPECTED],
    "code_assist": [line.format(at="request.") for line in GEMINI_EXPECTED],
    "chat": [
        f"missing-result {CLIENT} at messages[1].tool_calls[0].id: OpenAI Chat Completions answers "
        '"An assistant message with',
        "orphan-result call_zzz at messages[3].tool_call_id: OpenAI Chat Completions answers "
        "\"Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.\"",
    ],
    "responses": [
        f"missing-result {CLIENT} at input[1].call_id: OpenAI Responses answers "
        f'"No tool output found for function call {CLIENT}."',
        "orphan-result call_zzz at input[4].call_id: OpenAI Responses answers "
        '"No tool call found for function call output with call_id call_zzz."',
    ],
    "anthropic": [
        f"missing-result {CLIENT} at messages[1].content[0].id: Anthropic Messages answers "
        '"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after',
        "orphan-result call_zzz at messages[4].content[0].tool_use_id: Anthropic Messages "
        'answers "messages.4.content.0: unexpected `tool_use_id` found in `tool_result` blocks',
    ],
}
STRICT_ANSWER = b'{"error": {"type": "invalid_request_error", "message": "rejected"}}'


async def strict_upstream(ex: Exchange, writer: Any, handle: ScenarioHandle) -> bool:
    """A strict API: every request is rejected, as the pairing makes it."""
    headers = [("content-type", "application/json"), ("content-length", str(len(STRICT_ANSWER)))]
    ex.wire = STRICT_ANSWER
    await write_head(writer, headers, status=400, reason="Bad Request", ex=ex)
    await write_body(writer, ex, STRICT_ANSWER)
    return True


@pytest.fixture(scope="module")
def flows_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pairing") / "flows.mitm"


@pytest.fixture(scope="module")
def pairing_proxy(mitm: MitmdumpPool, flows_file: Path) -> Mitmdump:
    return mitm.get(tag="pairing", save_stream_file=str(flows_file))


def saved_flow(flows_file: Path, key: str, timeout: float = 5.0) -> http.HTTPFlow:
    """The flow of scenario ``key`` from the file mitmdump saves flows to."""
    deadline = time.monotonic() + timeout
    while True:
        if flows_file.exists():
            with flows_file.open("rb") as file:
                try:
                    found = [
                        flow
                        for flow in FlowReader(file).stream()
                        if isinstance(flow, http.HTTPFlow) and f"/s/{key}/" in flow.request.path
                    ]
                except Exception:  # a flow half written: read again
                    found = []
            if found:
                return found[-1]
        if time.monotonic() > deadline:
            raise AssertionError(f"no saved flow for {key} in {flows_file}")
        time.sleep(0.05)


@pytest.mark.parametrize("api", list(HISTORIES))
def test_orphan_and_missing_results_are_named(
    api: API, upstream: UpstreamServer, pairing_proxy: Mitmdump, flows_file: Path
) -> None:
    handle = upstream.scenario(responder=strict_upstream)
    body = json.dumps(HISTORIES[api]).encode()
    mark = pairing_proxy.mark()
    with wire_client(pairing_proxy) as client:
        response = client.post(
            handle.url(api), content=body, headers={"content-type": "application/json"}
        )
    assert (response.status_code, response.content) == (400, STRICT_ANSWER)
    # forwarded: every byte as the client sent it, the encoded call id restored as always
    (exchange,) = handle.exchanges
    assert exchange.body == body.replace(CLIENT.encode(), RAW.encode())

    line = pairing_proxy.wait_for_log("pairing problems", mark)
    assert toolid_warnings(pairing_proxy.log_since(mark), f"/s/{handle.key}/") == [line]
    assert "2 pairing problems: " in line
    for expected in EXPECTED[api]:
        assert expected in line

    flow = saved_flow(flows_file, handle.key)
    comment = flow.comment.splitlines()
    assert comment[0] == f"toolid: 1 restored ({CLIENT} -> {RAW})"
    for text, expected in zip(comment[1:], EXPECTED[api], strict=True):
        assert text.startswith(f"toolid pairing: {expected}")
    record = flow.metadata["toolid"]
    assert [p["code"] for p in record["pairing"]] == ["missing-result", "orphan-result"]
    assert flow.marked == ":warning:"


def test_a_clean_history_is_silent(
    upstream: UpstreamServer, pairing_proxy: Mitmdump, flows_file: Path
) -> None:
    handle = upstream.scenario(responder=strict_upstream)
    body = json.dumps(
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "call_a", "type": "function"}]},
                {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
            ]
        }
    ).encode()
    mark = pairing_proxy.mark()
    with wire_client(pairing_proxy) as client:
        client.post(handle.url("chat"), content=body, headers={"content-type": "application/json"})
    (exchange,) = handle.exchanges
    assert exchange.body == body
    flow = saved_flow(flows_file, handle.key)
    assert not flow.comment and not flow.marked
    assert "pairing" not in flow.metadata["toolid"]
    wait_past_log(pairing_proxy, upstream)  # a warning about the flow would be there by now
    assert toolid_warnings(pairing_proxy.log_since(mark), f"/s/{handle.key}/") == []
