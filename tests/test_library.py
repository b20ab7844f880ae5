"""The public library API (``toolid``: rewrite_request, rewrite_response, ResponseStream), as
docs/library.md shows it: a whole tool loop without mitmproxy, byte for byte."""

from __future__ import annotations

import json
import re

import pytest

import toolid
from tests import streams
from toolid import Api, ResponseStream, Taken, encode, rewrite_request, rewrite_response
from toolid.rewrite import STREAM_NEAR_ENDS

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)


def chat_response(tool_id: str) -> bytes:
    call = {"id": tool_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return json.dumps({"choices": [{"index": 0, "message": message}]}).encode()


def chat_request(tool_id: str) -> bytes:
    call = {"id": tool_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": tool_id, "content": "sunny"},
    ]
    return json.dumps({"model": "kimi-k2", "messages": messages, "stream": True}).encode()


def test_a_tool_loop_through_the_library() -> None:
    answer = rewrite_response(chat_response(RAW), path="/v1/chat/completions")
    assert answer.body == chat_response(CLIENT)
    assert answer.api is Api.CHAT
    assert [(c.raw, c.client, c.action) for c in answer.changes] == [(RAW, CLIENT, "encoded")]
    request = rewrite_request(chat_request(CLIENT), path="/v1/chat/completions")
    assert request.body == chat_request(RAW)
    assert request.asks_to_stream()
    assert [c.action for c in request.changes] == ["restored", "restored"]
    assert CLIENT in request.taken  # what the response to this request must not reuse
    again = rewrite_response(chat_response(RAW), api="chat", taken=request.taken)
    assert again.body == chat_response(encode(RAW, occurrence=2))  # a reused id, tagged


@pytest.mark.parametrize(
    ("where", "asks"), [("first", True), ("last", True), ("middle", False), ("none", False)]
)
def test_a_long_request_asks_to_stream_near_its_ends(where: str, asks: bool) -> None:
    """In a body not parsed in full, "stream" is looked for near either end, where clients
    put it: a "stream": true inside a message deep in a long history is not taken for it."""
    history = [{"role": "user", "content": "x" * 1000} for _ in range(3 * STREAM_NEAR_ENDS // 1000)]
    middle = len(history) // 2
    if where == "middle":
        history[middle] = {"role": "user", "content": "x", "stream": True}
    members: dict[str, object] = {"model": "m", "messages": history}
    if where == "first":
        members = {"stream": True, **members}
    elif where == "last":
        members["stream"] = True
    request = rewrite_request(json.dumps(members).encode(), path="/v1/chat/completions")
    assert request.asks_to_stream() is asks


def test_a_stream_fed_in_any_pieces() -> None:
    source = streams.render(streams.chat_events(RAW))
    whole = b""
    stream = ResponseStream(path="/v1/chat/completions")
    for at in range(0, len(source), 7):
        whole += stream.feed(source[at : at + 7]).body
    end = stream.finish()
    whole += end.body
    assert whole == source.replace(RAW.encode(), CLIENT.encode())
    assert stream.api is Api.CHAT and not stream.decodes


def test_changes_and_problems_come_with_the_piece_that_made_them() -> None:
    source = streams.render(streams.chat_events(RAW))
    stream = ResponseStream(api=Api.CHAT)
    first = stream.feed(source)
    assert [c.client for c in first.changes] == [CLIENT]
    assert stream.feed(b"").changes == ()  # reported once


def test_a_body_that_cannot_be_rewritten_comes_back_as_it_was() -> None:
    broken = b'{"messages": [{"tool_calls": [{"id": "tid1_x-2E'
    result = rewrite_request(broken, path="/v1/chat/completions")
    assert result.body is broken
    (problem,) = result.problems
    assert isinstance(problem, toolid.Problem)
    assert problem.code == "unrewritable"
    assert problem.message.startswith("request left unchanged: body is not valid JSON")
    assert (problem.path, problem.id, problem.api) == ("", "", None)  # no position
    assert problem.line() == problem.message
    assert result.changes == ()


def test_one_problem_type_for_rewriting_pairing_and_repair() -> None:
    """What rewriting, the pairing check and repair report are all ``toolid.Problem``s: a
    code and a message, and ``line()``, the one line a log shows; a pairing problem also
    has its position, its id and the API whose words its message is."""
    orphan = json.dumps(
        {"model": "m", "messages": [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]}
    ).encode()
    (pairing,) = toolid.check_pairing(orphan, path="/v1/chat/completions")
    assert isinstance(pairing, toolid.Problem)
    assert (pairing.code, pairing.path, pairing.id, pairing.api) == (
        "orphan-result",
        "messages[0].tool_call_id",
        "call_9",
        Api.CHAT,
    )
    assert pairing.line() == f"orphan-result call_9 at messages[0].tool_call_id: {pairing.said()}"
    assert pairing.record()["line"] == pairing.line()
    stream = ResponseStream(api=Api.CHAT, max_event_bytes=100)
    big = b'data: {"pad": "' + b"x" * 200 + b'"}\n\n'
    (too_large,) = stream.feed(big).problems
    assert isinstance(too_large, toolid.Problem) and too_large.code == "event-too-large"
    assert too_large.line() == "an event larger than 100 bytes was forwarded unchanged"
    single = json.dumps({"model": "m", "messages": {"role": "tool", "tool_call_id": "x"}})
    refused = toolid.repair_request(single.encode(), api=Api.CHAT).refused
    assert isinstance(refused, toolid.Problem) and refused.code == "unrepairable"
    assert refused.line() == "the history is a single object, not a list"


def test_rules_by_name_and_a_strict_destination() -> None:
    result = rewrite_request(chat_request(CLIENT), api="chat", rules="anthropic")
    assert result.body == chat_request(CLIENT)  # the raw id would break Anthropic's rules
    assert [c.action for c in result.changes] == ["kept", "kept"]
    with pytest.raises(ValueError, match="unknown rule set"):
        rewrite_request(b"{}", rules="nope")


def test_a_gateway_chooses_rules_as_the_addon_does() -> None:
    """A gateway asks ``toolid.Destinations`` which rule set a request's destination has,
    and hands it to ``rewrite_request``: by host, or by the model its body names."""
    destinations = toolid.Destinations(
        toolid.parse_model_rules(["mistralai/*=mistral"]),
        toolid.parse_host_rules(["llm.internal=safe"]),
    )
    by_host = destinations.for_request("llm.internal", 443, "/v1/chat/completions", b"{}")
    assert (by_host.rules and by_host.rules.name, by_host.why) == ("safe", "")
    body = b'{"model": "mistralai/devstral-2", "messages": []}'
    by_model = destinations.for_request("gateway.example", 443, "/v1/chat/completions", body)
    assert by_model.rules is not None and by_model.rules.name == "mistral"
    assert by_model.why == "model mistralai/devstral-2"
    result = rewrite_request(chat_request(CLIENT), api="chat", rules=by_model.rules)
    assert isinstance(result, toolid.RewrittenRequest)
    sent = {change.sent for change in result.changes}
    assert [c.action for c in result.changes] == ["mapped", "mapped"] and len(sent) == 1
    assert re.fullmatch("[A-Za-z0-9]{9}", sent.pop())  # Mistral's ids


def test_a_response_result_carries_no_request_members() -> None:
    result = toolid.rewrite_response(b"{}", api="chat")
    assert type(result) is toolid.Rewritten
    assert not hasattr(result, "taken") and not hasattr(result, "pairing_problems")


def test_taken_of_a_request_read_lazily() -> None:
    taken = toolid.taken_ids(chat_request(CLIENT), Api.CHAT)
    assert CLIENT in taken and "other" not in taken
    assert isinstance(taken, Taken)


def test_the_public_names() -> None:
    assert set(toolid.__all__) >= {
        "rewrite_request",
        "rewrite_response",
        "ResponseStream",
        "Rewritten",
        "Taken",
        "Change",
        "Problem",
        "encode",
        "decode",
    }
