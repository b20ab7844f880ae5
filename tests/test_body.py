"""The surgical rewriter (toolid/body.py): only id literals change, every other byte stays.

Expected outputs are computed by hand: the input with ``bytes.replace`` on the exact literal
of the id, never by re-serialising.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.fuzz.oracle import client_ids
from toolid import codec
from toolid.body import (
    NOTHING,
    Change,
    Direction,
    Plan,
    Policy,
    RewriteError,
    apply,
    may_change,
    plan,
    rewrite,
)
from toolid.occurrence import CallIds
from toolid.positions import Api, Doc, find_ids
from toolid.rules import RULE_SETS

ENCODE = Policy(Direction.ENCODE)
DECODE = Policy(Direction.DECODE)
STRICT = Policy(Direction.DECODE, rules=RULE_SETS["safe"])
ENCODE_CALL = Policy(Direction.ENCODE, profile="call")


def replace_once(body: bytes, old: bytes, new: bytes) -> bytes:
    """``body`` with the one occurrence of ``old`` replaced: a hand-made expected output."""
    assert body.count(old) == 1, (old, body.count(old))
    return body.replace(old, new)


def run(body: bytes, api: Api | None, doc: Doc, policy: Policy) -> tuple[bytes, Plan]:
    out, result = rewrite(body, api, doc, policy)
    # rewrite is plan + apply, and may_change is never False when something changes
    assert out == apply(body, result.edits)
    if result.edits:
        assert may_change(body, api, doc, policy)
    return out, result


# --- hand-formatted bodies, one per API and kind of document ---------------------------------

KIMI = b'"functions.get_weather:0"'
KIMI_CLIENT = b'"tid1_functions-2Eget_weather-3A0"'

CHAT_RESPONSE = (
    b'{\n  "id" : "chatcmpl-9",\n  "object":"chat.completion" ,"created":1700000000,\n'
    b'  "model"  :  "kimi-k2",\n'
    b'  "choices": [ {\n   "index" :0, "message":{"role":"assistant",\n'
    b'   "content":"calling functions.get_weather:0 \\u00e9 \\/ '
    b'\\"functions.get_weather:0\\" \\\\",\n'
    b'   "tool_calls" : [ { "type":"function", "function" : {"name":"get_weather",'
    b' "arguments":"{\\"id\\": \\"functions.get_weather:0\\", \\"t\\": 1.50}"},\n'
    b'    "id"\t:\r\n "functions.get_weather:0" } ] },\n'
    b'   "logprobs":null,"finish_reason":"tool_calls"} ],\n'
    b'  "usage":{"prompt_tokens":1e5,"completion_tokens":-0,"cost":1.50,"x":[1E-3 , 2]}\n}'
)


def test_chat_response_hand_formatted() -> None:
    out, result = run(CHAT_RESPONSE, Api.CHAT, Doc.RESPONSE, ENCODE)
    assert out == replace_once(CHAT_RESPONSE, KIMI, KIMI_CLIENT)
    assert result.api is Api.CHAT
    assert result.changes == (
        Change(
            "choices[0].message.tool_calls[0].id",
            "functions.get_weather:0",
            "tid1_functions-2Eget_weather-3A0",
            "encoded",
        ),
    )
    ((start, end, text),) = result.edits
    assert CHAT_RESPONSE[start:end] == KIMI
    assert text == KIMI_CLIENT


def test_chat_response_api_from_shape() -> None:
    out, result = run(CHAT_RESPONSE, None, Doc.RESPONSE, ENCODE)
    assert out == replace_once(CHAT_RESPONSE, KIMI, KIMI_CLIENT)
    assert result.api is Api.CHAT


CHAT_REQUEST = (
    b'{"model":"kimi-k2","messages":[\n'
    b'{"role":"user","content":"what did tid1_functions-2Eget_weather-3A0 say?"},\n'
    b'{"role":"assistant","content":null,"tool_calls":[{"id":"tid1_functions-2Eget_weather-3A0",'
    b'"type":"function","function":{"name":"get_weather",'
    b'"arguments":"{\\"id\\":\\"tid1_functions-2Eget_weather-3A0\\"}"}},'
    b'{"id":"call_abc","type":"function","function":{"name":"f","arguments":"{}"}}]},\n'
    b'{"role":"tool", "tool_call_id" :  "tid1_functions-2Eget_weather-3A0","content":"1.50"},\n'
    b'{"role":"tool","tool_call_id":"call_abc","content":"-0"}],"temperature":1.50}'
)


def test_chat_request_decode() -> None:
    out, result = run(CHAT_REQUEST, Api.CHAT, Doc.REQUEST, DECODE)
    expected = CHAT_REQUEST.replace(
        b'"id":"tid1_functions-2Eget_weather-3A0"', b'"id":"functions.get_weather:0"'
    ).replace(
        b'"tool_call_id" :  "tid1_functions-2Eget_weather-3A0"',
        b'"tool_call_id" :  "functions.get_weather:0"',
    )
    assert expected.count(b"functions.get_weather:0") == 2 + CHAT_REQUEST.count(
        b"functions.get_weather:0"
    )
    assert out == expected
    assert [(c.path, c.raw, c.client, c.action) for c in result.changes] == [
        (
            "messages[1].tool_calls[0].id",
            "functions.get_weather:0",
            "tid1_functions-2Eget_weather-3A0",
            "restored",
        ),
        (
            "messages[2].tool_call_id",
            "functions.get_weather:0",
            "tid1_functions-2Eget_weather-3A0",
            "restored",
        ),
    ]
    # the shape says Chat as well
    assert rewrite(CHAT_REQUEST, None, Doc.REQUEST, DECODE)[0] == expected


CHAT_EVENTS = [
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"role":"assistant","tool_calls":[{"index":0,"id":"get_weather:0#62786027996b4c40886cc'
    b'7262bdf7382","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"tool_calls":[{"index":0,"function":{"arguments":"{\\"id\\":\\"get_weather:0#1\\"'
    b'}"}}]}}]}',
]


def test_chat_events() -> None:
    first, second = CHAT_EVENTS
    out, _ = run(first, Api.CHAT, Doc.EVENT, ENCODE)
    assert out == replace_once(
        first,
        b'"get_weather:0#62786027996b4c40886cc7262bdf7382"',
        b'"tid1_get_weather-3A0-2362786027996b4c40886cc7262bdf7382"',
    )
    # a later delta of the same call (one CallIds: one stream) without an id: nothing is added,
    # the very same object comes back
    calls = CallIds()
    rewrite(first, Api.CHAT, Doc.EVENT, ENCODE, calls)
    out, result = rewrite(second, Api.CHAT, Doc.EVENT, ENCODE, calls)
    assert out is second
    assert result.edits == ()
    # alone, it is the call's first mention: a client needs an id there, and gets one
    out, _ = run(second, Api.CHAT, Doc.EVENT, ENCODE)
    assert out == second.replace(b'{"index":0,"function"', b'{"id":"tid1_-n","index":0,"function"')


RESPONSES_RESPONSE = (
    b'{"id":"resp_1","object":"response","status":"completed","output":[\n'
    b' {"type":"reasoning","id":"rs:1","summary":[]},\n'
    b' {"id":"msg:1","type":"message","role":"assistant","content":[{"type":"output_text",'
    b'"text":"see fc:1 and call:1","annotations":[]}]},\n'
    b' {"arguments":"{\\"call_id\\": \\"call:1\\", \\"id\\":\\"fc:1\\"}","call_id" : "call:1",'
    b' "name":"f","type":"function_call","id":"fc:1","status":"completed"},\n'
    b' {"type":"custom_tool_call","id":"ctc:1","call_id":"ccall:1","name":"x","input":"ctc:1"},\n'
    b' {"type":"local_shell_call","id":"lsc:1","call_id":"lscall:1",'
    b'"action":{"type":"exec","command":["ls"]},"status":"completed"},\n'
    b' {"type":"mcp_call","id":"mcp:1","server_label":"s","name":"t","arguments":"{}"},\n'
    b' {"type":"mcp_approval_request","id":"mcpr:1","server_label":"s","name":"t",'
    b'"arguments":"{}"}\n'
    b'],"usage":{"input_tokens":1e2,"output_tokens":-0}}'
)


def test_responses_response() -> None:
    out, result = run(RESPONSES_RESPONSE, Api.RESPONSES, Doc.RESPONSE, ENCODE)
    expected = RESPONSES_RESPONSE
    for old, new in [
        (b'"call_id" : "call:1"', b'"call_id" : "tid1_call-3A1"'),
        (b'"id":"fc:1",', b'"id":"tid1_fc-3A1",'),
        (b'"id":"ctc:1"', b'"id":"tid1_ctc-3A1"'),
        (b'"call_id":"ccall:1"', b'"call_id":"tid1_ccall-3A1"'),
        (b'"id":"lsc:1"', b'"id":"tid1_lsc-3A1"'),
        (b'"call_id":"lscall:1"', b'"call_id":"tid1_lscall-3A1"'),
        (b'"id":"mcp:1"', b'"id":"tid1_mcp-3A1"'),
        (b'"id":"mcpr:1"', b'"id":"tid1_mcpr-3A1"'),
    ]:
        expected = replace_once(expected, old, new)
    assert out == expected
    # reasoning and message ids stay, as do ids inside arguments / text / custom input
    assert b'"id":"rs:1"' in out
    assert b'"id":"msg:1"' in out
    assert b'\\"id\\":\\"fc:1\\"' in out
    assert b'"input":"ctc:1"' in out
    assert len(result.changes) == 8
    assert {c.action for c in result.changes} == {"encoded"}


RESPONSES_REQUEST = (
    b'{"model":"m","previous_response_id":"resp_1","input":[\n'
    b'  {"type":"function_call_output","call_id":"tid1_call-3A1","output":"tid1_call-3A1"},\n'
    b'  {"type":"mcp_approval_response","approval_request_id":"tid1_mcpr-3A1","approve":true},\n'
    b'  {"type":"item_reference","id":"tid1_fc-3A1"},\n'
    b'  {"type":"local_shell_call_output","id":"tid1_lscall-3A1","output":"ok"},\n'
    b'  {"type":"message","id":"tid1_fc-3A1","role":"user","content":"tid1_fc-3A1"}\n'
    b"]}"
)


def test_responses_request_decode_with_lookalike_message_id() -> None:
    # "tid1_fc-3A1" is both an item_reference id (a position) and a message id (not one):
    # this takes the in-order walk.
    out, result = run(RESPONSES_REQUEST, Api.RESPONSES, Doc.REQUEST, DECODE)
    expected = RESPONSES_REQUEST
    for old, new in [
        (b'"call_id":"tid1_call-3A1"', b'"call_id":"call:1"'),
        (b'"approval_request_id":"tid1_mcpr-3A1"', b'"approval_request_id":"mcpr:1"'),
        (b'"item_reference","id":"tid1_fc-3A1"', b'"item_reference","id":"fc:1"'),
        (b'"id":"tid1_lscall-3A1"', b'"id":"lscall:1"'),
    ]:
        expected = replace_once(expected, old, new)
    assert out == expected
    assert [c.path for c in result.changes] == [
        "input[0].call_id",
        "input[2].id",
        "input[3].id",
        "input[1].approval_request_id",
    ]


RESPONSES_EVENTS = [
    (
        b'{"type":"response.output_item.added","sequence_number":2,"output_index":0,'
        b'"item":{"type":"function_call","id":"fc:1","call_id":"call:1","name":"f",'
        b'"arguments":"","status":"in_progress"}}',
        [
            (b'"id":"fc:1"', b'"id":"tid1_fc-3A1"'),
            (b'"call_id":"call:1"', b'"call_id":"tid1_call-3A1"'),
        ],
    ),
    (
        b'{"type":"response.function_call_arguments.delta","sequence_number":3,'
        b'"item_id":"fc:1","output_index":0,"delta":"{\\"id\\": \\"fc:1\\""}',
        [(b'"item_id":"fc:1"', b'"item_id":"tid1_fc-3A1"')],
    ),
    (
        b'{"type":"response.completed","sequence_number":9,"response":{"id":"resp:1",'
        b'"object":"response","output":[{"type":"function_call","id":"fc:1",'
        b'"call_id":"call:1","name":"f","arguments":"{}"}]}}',
        [
            (b'"id":"fc:1"', b'"id":"tid1_fc-3A1"'),
            (b'"call_id":"call:1"', b'"call_id":"tid1_call-3A1"'),
        ],
    ),
]


@pytest.mark.parametrize(("body", "swaps"), RESPONSES_EVENTS)
def test_responses_events(body: bytes, swaps: list[tuple[bytes, bytes]]) -> None:
    expected = body
    for old, new in swaps:
        expected = replace_once(expected, old, new)
    assert run(body, Api.RESPONSES, Doc.EVENT, ENCODE)[0] == expected
    assert run(body, None, Doc.EVENT, ENCODE)[0] == expected


ANTHROPIC_RESPONSE = (
    b'{"id":"msg_01.x","type":"message","role":"assistant","model":"claude",\n'
    b'"content":[{"type":"text","text":"calling a.b:1 \\u00e9\\n"},\n'
    b'  {"type":"tool_use","id":"a.b:1","name":"lookup","input":{"id":"a.b:1",'
    b'"n":1.50,"tool_use_id":"a.b:1","nested":[{"id":"a.b:1"}]}},\n'
    b'  {"type":"server_tool_use","id":"srvtoolu:2","name":"web_search","input":{"q":"x"}},\n'
    b'  {"type":"web_search_tool_result","tool_use_id":"srvtoolu:2","content":[]},\n'
    b'  {"type":"tool_use","id":"toolu_03","name":"q","input":{},'
    b'"caller":{"type":"code_execution_20250825","tool_id":"srvtoolu:2"}}\n'
    b'],"stop_reason":"tool_use","usage":{"input_tokens":1e1}}'
)


def test_anthropic_response_ambiguity_only_the_position_changes() -> None:
    out, result = run(ANTHROPIC_RESPONSE, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    expected = ANTHROPIC_RESPONSE
    for old, new in [
        (b'"type":"tool_use","id":"a.b:1"', b'"type":"tool_use","id":"tid1_a-2Eb-3A1"'),
        (b'"id":"srvtoolu:2"', b'"id":"tid1_srvtoolu-3A2"'),
        (b'"tool_use_id":"srvtoolu:2"', b'"tool_use_id":"tid1_srvtoolu-3A2"'),
        (b'"tool_id":"srvtoolu:2"', b'"tool_id":"tid1_srvtoolu-3A2"'),
    ]:
        expected = replace_once(expected, old, new)
    assert out == expected
    # the look-alikes inside tool input are untouched, the message id too
    assert out.count(b'"a.b:1"') == 3
    assert b'"id":"msg_01.x"' in out
    assert json.loads(out)["content"][1]["input"] == {
        "id": "a.b:1",
        "n": 1.5,
        "tool_use_id": "a.b:1",
        "nested": [{"id": "a.b:1"}],
    }
    assert sorted(c.path for c in result.changes) == [
        "content[1].id",
        "content[2].id",
        "content[3].tool_use_id",
        "content[4].caller.tool_id",
    ]


def test_anthropic_request_decode_ambiguity() -> None:
    body = (
        b'{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"},'
        b'{"role":"assistant","content":[{"type":"tool_use","input":{"id":"tid1_a-2Eb-3A1"},'
        b'"id":"tid1_a-2Eb-3A1","name":"f"}]},'
        b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"tid1_a-2Eb-3A1",'
        b'"content":[{"type":"text","text":"{\\"id\\":\\"tid1_a-2Eb-3A1\\"}"}]}]}]}'
    )
    out, _ = run(body, Api.MESSAGES, Doc.REQUEST, DECODE)
    expected = replace_once(body, b'"id":"tid1_a-2Eb-3A1","name"', b'"id":"a.b:1","name"')
    expected = replace_once(expected, b'"tool_use_id":"tid1_a-2Eb-3A1"', b'"tool_use_id":"a.b:1"')
    assert out == expected
    assert run(body, None, Doc.REQUEST, DECODE)[0] == expected


ANTHROPIC_EVENTS = [
    (
        b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use",'
        b'"id":"functions.get_weather:0","name":"get_weather","input":{}}}',
        [(KIMI, KIMI_CLIENT)],
    ),
    (
        b'{"type":"content_block_start","index":2,"content_block":{"type":'
        b'"web_search_tool_result","tool_use_id":"srvtoolu:2","content":[]}}',
        [(b'"srvtoolu:2"', b'"tid1_srvtoolu-3A2"')],
    ),
    (
        b'{"type":"message_start","message":{"id":"msg.1","type":"message","role":"assistant",'
        b'"content":[{"type":"tool_use","id":"t:1","name":"f","input":{"id":"t:2"}}],'
        b'"usage":{"input_tokens":1}}}',
        [(b'"id":"t:1"', b'"id":"tid1_t-3A1"')],
    ),
    (
        b'{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
        b'"partial_json":"{\\"id\\": \\"t:1\\"}"}}',
        [],
    ),
]


@pytest.mark.parametrize(("body", "swaps"), ANTHROPIC_EVENTS)
def test_anthropic_events(body: bytes, swaps: list[tuple[bytes, bytes]]) -> None:
    expected = body
    for old, new in swaps:
        expected = replace_once(expected, old, new)
    out, _ = run(body, Api.MESSAGES, Doc.EVENT, ENCODE)
    assert out == expected
    if not swaps:
        assert out is body


# --- raw ids of every kind, in both directions -----------------------------------------------

# (raw id, its safe client id, its restored literal as the rewriter spells it)
ZOO: list[tuple[str, str, bytes]] = [
    ("functions.list_skills:0", "tid1_functions-2Elist_skills-3A0", b'"functions.list_skills:0"'),
    ("a-b.c", "tid1_a-2Db-2Ec", b'"a-b.c"'),
    ("get:0#ab", "tid1_get-3A0-23ab", b'"get:0#ab"'),
    ("a/b", "tid1_a-2Fb", b'"a/b"'),
    ("a b", "tid1_a-20b", b'"a b"'),
    ("", "tid1_", b'""'),
    ("tid1_x", "tid1_tid1_x", b'"tid1_x"'),
    ("tid2_x", "tid1_tid2_x", b'"tid2_x"'),
    ("call_tid1_x", "tid1_call_tid1_x", b'"call_tid1_x"'),
    ("é", "tid1_-C3-A9", '"é"'.encode()),
    ("日本", "tid1_-E6-97-A5-E6-9C-AC", '"日本"'.encode()),
    ("\U0001f600", "tid1_-F0-9F-98-80", '"\U0001f600"'.encode()),
    ("\ud800", "tid1_-ED-A0-80", b'"\\ud800"'),
    ("x\udfffy", "tid1_x-ED-BF-BFy", b'"x\\udfffy"'),
    ('a"b', "tid1_a-22b", b'"a\\"b"'),
    ("a\\b", "tid1_a-5Cb", b'"a\\\\b"'),
    ("a\nb\x00", "tid1_a-0Ab-00", b'"a\\nb\\u0000"'),
    ("\t\r\x1f", "tid1_-09-0D-1F", b'"\\t\\r\\u001f"'),
    ("\x7f", "tid1_-7F", b'"\x7f"'),
    ("\u2028", "tid1_-E2-80-A8", '"\u2028"'.encode()),
]


def _anthropic_pair(literal: bytes) -> tuple[bytes, bytes]:
    """A Messages response and a request holding ``literal`` at a tool_use id / tool_use_id."""
    response = (
        b'{"type":"message","content":[{"type":"text","text":"x"},'
        b'{"type":"tool_use","id":' + literal + b',"name":"f","input":{"k":' + literal + b"}}]}"
    )
    request = (
        b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":'
        + literal
        + b',"name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result",'
        b'"tool_use_id":' + literal + b',"content":' + literal + b"}]}]}"
    )
    return response, request


@pytest.mark.parametrize(("raw", "client", "restored"), ZOO)
def test_zoo_encode(raw: str, client: str, restored: bytes) -> None:
    spellings = {json.dumps(raw).encode()}
    with contextlib.suppress(UnicodeEncodeError):
        spellings.add(json.dumps(raw, ensure_ascii=False).encode())
    spellings.add(restored)
    for literal in spellings:
        response, _ = _anthropic_pair(literal)
        out, result = run(response, Api.MESSAGES, Doc.RESPONSE, ENCODE)
        head = b'"tool_use","id":'
        assert out == replace_once(response, head + literal, head + b'"' + client.encode() + b'"')
        assert result.changes == (Change("content[1].id", raw, client, "encoded"),)


@pytest.mark.parametrize(("raw", "client", "restored"), ZOO)
def test_zoo_decode(raw: str, client: str, restored: bytes) -> None:
    literal = b'"' + client.encode() + b'"'
    _, request = _anthropic_pair(literal)
    out, result = run(request, Api.MESSAGES, Doc.REQUEST, DECODE)
    expected = replace_once(request, b'"id":' + literal, b'"id":' + restored)
    expected = replace_once(expected, b'"tool_use_id":' + literal, b'"tool_use_id":' + restored)
    assert out == expected
    parsed = json.loads(out)  # the restored literal is valid JSON for the raw id
    assert parsed["messages"][0]["content"][0]["id"] == raw
    assert parsed["messages"][1]["content"][0]["tool_use_id"] == raw
    assert parsed["messages"][1]["content"][0]["content"] == client
    assert {c.action for c in result.changes} == {"restored"}
    out.decode("utf-8")  # never a surrogate spelled as raw bytes


@pytest.mark.parametrize(("raw", "client", "restored"), ZOO)
def test_zoo_decode_strict(raw: str, client: str, restored: bytes) -> None:
    literal = b'"' + client.encode() + b'"'
    _, request = _anthropic_pair(literal)
    out, result = run(request, Api.MESSAGES, Doc.REQUEST, STRICT)
    if re.fullmatch(r"[A-Za-z0-9_-]+", raw):
        assert out == request.replace(literal, restored, 2)
        assert [c.action for c in result.changes] == ["restored", "restored"]
    else:
        assert out is request  # the strict upstream would reject the raw id: keep the client's
        assert result.edits == ()
        assert result.changes == (
            Change("messages[0].content[0].id", raw, client, "kept", rules="safe"),
            Change("messages[1].content[0].tool_use_id", raw, client, "kept", rules="safe"),
        )


def test_strict_decode_restores_call_profile_and_keeps_the_rest() -> None:
    body = (
        b'{"messages":[{"role":"assistant","content":['
        b'{"type":"tool_use","id":"call_tid1_toolu_01","name":"f","input":{}},'
        b'{"type":"tool_use","id":"tid1_a-2Eb","name":"g","input":{}}]},'
        b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_tid1_toolu_01"},'
        b'{"type":"tool_result","tool_use_id":"tid1_a-2Eb"}]}]}'
    )
    out, result = run(body, Api.MESSAGES, Doc.REQUEST, STRICT)
    expected = body.replace(b'"call_tid1_toolu_01"', b'"toolu_01"')
    assert expected.count(b'"toolu_01"') == 2
    assert out == expected
    assert Counter(c.action for c in result.changes) == {"restored": 2, "kept": 2}
    kept = Change("messages[0].content[1].id", "a.b", "tid1_a-2Eb", "kept", rules="safe")
    assert kept in result.changes
    # not strict: both restored
    out, result = run(body, Api.MESSAGES, Doc.REQUEST, DECODE)
    assert out == expected.replace(b'"tid1_a-2Eb"', b'"a.b"')
    assert Counter(c.action for c in result.changes) == {"restored": 4}


def test_decode_leaves_non_canonical_client_ids() -> None:
    body = (
        b'{"messages":[{"role":"assistant","tool_calls":['
        b'{"id":"tid1_abc","type":"function"},{"id":"tid1_a-2eb","type":"function"},'
        b'{"id":"tid1_-41","type":"function"},{"id":"tid1_a-2","type":"function"},'
        b'{"id":"tid2_a-2Eb","type":"function"},{"id":"tid1_-FF","type":"function"}]}]}'
    )
    out, result = run(body, Api.CHAT, Doc.REQUEST, DECODE)
    assert out is body
    assert result.changes == ()


def test_profile_call() -> None:
    body = (
        b'{"choices":[{"message":{"tool_calls":['
        b'{"id":"toolu_01","type":"function"},{"id":"call_abc","type":"function"},'
        b'{"id":"fc.1","type":"function"},{"id":"call_tid1_x","type":"function"}]}}]}'
    )
    out, result = run(body, Api.CHAT, Doc.RESPONSE, ENCODE_CALL)
    expected = replace_once(body, b'"toolu_01"', b'"call_tid1_toolu_01"')
    expected = replace_once(expected, b'"fc.1"', b'"call_tid1_fc-2E1"')
    expected = replace_once(expected, b'"call_tid1_x"', b'"call_tid1_call_tid1_x"')
    assert out == expected
    assert len(result.changes) == 3
    # and back again
    request = (
        b'{"messages":[{"role":"tool","tool_call_id":"call_tid1_toolu_01"},'
        b'{"role":"tool","tool_call_id":"call_tid1_call_tid1_x"},'
        b'{"role":"tool","tool_call_id":"call_abc"}]}'
    )
    out, _ = run(request, Api.CHAT, Doc.REQUEST, DECODE)
    assert out == request.replace(b'"call_tid1_toolu_01"', b'"toolu_01"').replace(
        b'"call_tid1_call_tid1_x"', b'"call_tid1_x"'
    )
    # with the safe profile, toolu_01 and call_abc pass unchanged
    out, result = run(body, Api.CHAT, Doc.RESPONSE, ENCODE)
    assert out == body.replace(b'"fc.1"', b'"tid1_fc-2E1"').replace(
        b'"call_tid1_x"', b'"tid1_call_tid1_x"'
    )


def test_the_same_id_many_times() -> None:
    body = (
        b'{"messages":['
        + b",".join(
            b'{"role":"tool","tool_call_id":"tid1_a-3A1","content":"tid1_a-3A1"}' for _ in range(50)
        )
        + b"]}"
    )
    out, result = run(body, Api.CHAT, Doc.REQUEST, DECODE)
    assert out == body.replace(b'"tool_call_id":"tid1_a-3A1"', b'"tool_call_id":"a:1"')
    assert len(result.edits) == 50
    assert out.count(b'"content":"tid1_a-3A1"') == 50


# --- nothing to change -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "api", "doc", "policy"),
    [
        (
            b'{"choices":[{"message":{"tool_calls":[{"id":"call_abc","type":"function"}]}}]}',
            Api.CHAT,
            Doc.RESPONSE,
            ENCODE,
        ),
        # the candidate is spelled with an escape but is conforming
        (
            b'{"choices":[{"message":{"tool_calls":[{"id":"\\u0061bc","type":"function"}]}}]}',
            Api.CHAT,
            Doc.RESPONSE,
            ENCODE,
        ),
        # a non-conforming string, but not at a position
        (
            b'{"id":"chatcmpl.1","choices":[{"message":{"content":"a:1"}}]}',
            Api.CHAT,
            Doc.RESPONSE,
            ENCODE,
        ),
        (
            b'{"type":"message","id":"msg.1","content":[{"type":"text","text":"a:1","id":"a:1"}]}',
            None,
            Doc.RESPONSE,
            ENCODE,
        ),
        (
            b'{"messages":[{"role":"tool","tool_call_id":"a:1"}]}',
            Api.CHAT,
            Doc.REQUEST,
            DECODE,
        ),
        (
            b'{"messages":[{"role":"user","content":"tid1_a-3A1"}]}',
            Api.CHAT,
            Doc.REQUEST,
            DECODE,
        ),
        # a shape no API claims
        (b'{"whatever":[{"id":"a:1","tool_call_id":"tid1_a-3A1"}]}', None, Doc.REQUEST, DECODE),
        (b'{"whatever":[{"id":"a:1"}]}', None, Doc.RESPONSE, ENCODE),
        (b"", Api.CHAT, Doc.RESPONSE, ENCODE),
        (b"", None, Doc.REQUEST, DECODE),
    ],
)
def test_nothing_to_change_returns_the_same_object(
    body: bytes, api: Api | None, doc: Doc, policy: Policy
) -> None:
    out, result = rewrite(body, api, doc, policy)
    assert out is body
    assert result.edits == ()


@pytest.mark.parametrize(
    ("body", "api", "doc", "policy"),
    [
        (b"not json {{{ at all", Api.CHAT, Doc.RESPONSE, ENCODE),
        (b"not json {{{ at all", None, Doc.REQUEST, DECODE),
        (
            b'{"candidates": [ {"content": {"parts": [ {"functionCall": {"id": "call_x"} } ]',
            Api.GEMINI,
            Doc.RESPONSE,
            ENCODE,
        ),
        (b'\xff\xfe{"functionCall":{"id":"call_ok"}', Api.GEMINI, Doc.RESPONSE, ENCODE),
        # a non-conforming id, but the position's marker is not there
        (b'{"id":"a:1","tool_call_id":"a:1"', Api.CHAT, Doc.RESPONSE, ENCODE),
        (b'{"content":[{"type":"tool_use","id":"a:1"}]', Api.CHAT, Doc.RESPONSE, ENCODE),
        (b'{"tool_calls":[{"id":"a:1"}]', Api.MESSAGES, Doc.RESPONSE, ENCODE),
        (b'{"messages":[{"role":"tool","tool_call_id":"tid1-a"}', Api.CHAT, Doc.REQUEST, DECODE),
    ],
)
def test_may_change_is_false_without_a_candidate(
    body: bytes, api: Api | None, doc: Doc, policy: Policy
) -> None:
    # none of these is valid JSON: False means it was never parsed
    with pytest.raises(ValueError):
        json.loads(body)
    assert not may_change(body, api, doc, policy)
    assert plan(body, api, doc, policy) is NOTHING
    assert rewrite(body, api, doc, policy)[0] is body


def test_an_event_may_change_when_a_defining_api_spells_any_id_pair() -> None:
    # Chat's events only define calls: a call's first mention is read even when it conforms
    assert may_change(b'{"tool_calls":[{"id":"call_1"}]}', Api.CHAT, Doc.EVENT, ENCODE)
    # a call's delta without an id may be its first mention, which needs one
    arguments = b'{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}'
    assert may_change(arguments, Api.CHAT, Doc.EVENT, ENCODE)
    # Responses' events also refer: a conforming reference to an untagged call changes nothing
    delta = b'{"type":"response.function_call_arguments.delta","item_id":"fc_1"}'
    assert not may_change(delta, Api.RESPONSES, Doc.EVENT, ENCODE)
    assert may_change(delta.replace(b"fc_1", b"fc:1"), Api.RESPONSES, Doc.EVENT, ENCODE)


def test_may_change_is_true_with_a_candidate() -> None:
    assert may_change(b'"tool_calls" "id" : "a:1"', Api.CHAT, Doc.RESPONSE, ENCODE)
    assert may_change(b'"id":""', None, Doc.RESPONSE, ENCODE)
    assert may_change(b'"content" "id":"\\u0061"', Api.MESSAGES, Doc.RESPONSE, ENCODE)
    assert may_change(b'"tool_calls" "id":"tid1_x"', Api.CHAT, Doc.RESPONSE, ENCODE)
    assert may_change(b'"functionCall" "id":"toolu_1"', Api.GEMINI, Doc.RESPONSE, ENCODE_CALL)
    assert not may_change(b'"functionCall" "id":"toolu_1"', Api.GEMINI, Doc.RESPONSE, ENCODE)
    assert not may_change(b'"functionCall" "id":"call_1"', Api.GEMINI, Doc.RESPONSE, ENCODE_CALL)
    # where a client requires an id, a call there may lack one: no byte check can tell
    assert may_change(b'"tool_calls" "id":"toolu_1"', Api.CHAT, Doc.RESPONSE, ENCODE)
    assert may_change(b"xx tid1_ xx", Api.CHAT, Doc.REQUEST, DECODE)
    assert may_change(b"call_tid1_", None, Doc.REQUEST, STRICT)


# --- errors: fail open -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "api", "doc", "policy"),
    [
        (b'{"choices":[{"message":{"tool_calls":[{"id":"a:1"}]}}]', Api.CHAT, Doc.RESPONSE, ENCODE),
        (
            b'{"choices":[{"message":{"tool_calls":[{"id":"a:1",}]}}]}',
            Api.CHAT,
            Doc.RESPONSE,
            ENCODE,
        ),
        (
            b'{"messages":[{"role":"tool","tool_call_id":"tid1_a-3A1"}]} x',
            Api.CHAT,
            Doc.REQUEST,
            DECODE,
        ),
        (
            b'{"content":[{"type":"tool_use","id":"a:1"}]}\n{"content":[]}',
            Api.MESSAGES,
            Doc.RESPONSE,
            ENCODE,
        ),
        # invalid UTF-8 elsewhere in the body
        (
            b'{"content":[{"type":"text","text":"\xff\xfe"},{"type":"tool_use","id":"a:1"}]}',
            Api.MESSAGES,
            Doc.RESPONSE,
            ENCODE,
        ),
        (
            b'{"content":[{"type":"tool_use","id":"a:1","name":"\xc3"}]}',
            Api.MESSAGES,
            Doc.RESPONSE,
            ENCODE,
        ),
        # invalid UTF-8 in the id itself
        (
            b'{"content":[{"type":"tool_use","id":"a:\xc3\x281"}]}',
            Api.MESSAGES,
            Doc.RESPONSE,
            ENCODE,
        ),
        (
            b'{"messages":[{"role":"tool","tool_call_id":"tid1_\x80"}]}',
            Api.CHAT,
            Doc.REQUEST,
            DECODE,
        ),
    ],
)
def test_invalid_json_with_a_candidate_and_a_known_api_raises(
    body: bytes, api: Api, doc: Doc, policy: Policy
) -> None:
    assert may_change(body, api, doc, policy)
    with pytest.raises(RewriteError):
        rewrite(body, api, doc, policy)
    # without a known API it is not ours to judge: nothing happens
    out, result = rewrite(body, None, doc, policy)
    assert out is body
    assert result == NOTHING


def test_surrogate_bytes_in_an_id_fail_open() -> None:
    # UTF-8 for a lone surrogate (ED A0 80): json.loads accepts it, the locator must not crash
    body = b'{"content":[{"type":"tool_use","id":"a\xed\xa0\x80"}]}'
    with pytest.raises(RewriteError):
        rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)


def test_invalid_utf8_without_a_candidate_passes() -> None:
    body = b'{"parts":[{"text":"\xff"},{"functionCall":{"id":"toolu_1"}}]}'
    assert rewrite(body, Api.GEMINI, Doc.RESPONSE, ENCODE)[0] is body
    # where a call may lack an id, the document is read, and found not to be JSON
    body = b'{"content":[{"type":"text","text":"\xff"},{"type":"tool_use","id":"toolu_1"}]}'
    with pytest.raises(RewriteError, match="not valid JSON"):
        rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)


def test_utf8_bom_is_kept() -> None:
    body = b'\xef\xbb\xbf{"content":[{"type":"tool_use","id":"a:1"}]}'
    out, _ = run(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    assert out == replace_once(body, b'"a:1"', b'"tid1_a-3A1"')


@pytest.mark.parametrize("depth", [100_000, 20_000])
def test_deep_nesting_fails_open(depth: int) -> None:
    body = b'{"content":[{"type":"tool_use","id":"a:1"}],"x":' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(RewriteError):
        rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    assert rewrite(body, None, Doc.RESPONSE, ENCODE)[0] is body
    request = (
        b'{"messages":[{"role":"tool","tool_call_id":"tid1_a-3A1"}],"x":'
        + b'{"a":' * depth
        + b"1"
        + b"}" * depth
        + b"}"
    )
    with pytest.raises(RewriteError):
        rewrite(request, Api.CHAT, Doc.REQUEST, DECODE)


@pytest.mark.parametrize("depth", [10, 500, 900, 990, 995, 1_000, 1_500])
def test_nesting_near_the_recursion_limit(depth: int) -> None:
    # the look-alike deep inside the tool input forces the in-order walk
    inner = b"[" * depth + b'{"id":"a:1"}' + b"]" * depth
    body = b'{"content":[{"type":"tool_use","id":"a:1","input":{"x":' + inner + b"}}]}"
    try:
        out, _ = rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    except RewriteError:
        return
    assert out == replace_once(body, b'"tool_use","id":"a:1"', b'"tool_use","id":"tid1_a-3A1"')


def test_duplicate_id_keys_inside_a_position_fail_open() -> None:
    body = b'{"content":[{"type":"tool_use","id":"x:1","id":"x:1","input":{}}]}'
    with pytest.raises(RewriteError):
        rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    body = b'{"messages":[{"role":"tool","tool_call_id":"tid1_a-3A1","tool_call_id":"tid1_a-3A1"}]}'
    with pytest.raises(RewriteError):
        rewrite(body, Api.CHAT, Doc.REQUEST, DECODE)


def _is_wrong_edit(body: bytes, out: bytes, api: Api, doc: Doc, policy: Policy) -> bool:
    """Whether ``out`` changed something other than the ids that the parser sees."""
    before, after = json.loads(body), json.loads(out)
    for f in find_ids(before, api, doc):
        new = (
            codec.encode(f.value, policy.profile)
            if policy.direction is Direction.ENCODE
            else codec.decode(f.value)
        )
        f.holder[f.key] = new
    return bool(before != after)


def _assert_no_wrong_edit(body: bytes, api: Api, doc: Doc, policy: Policy) -> None:
    """``body`` fails open (RewriteError) or changes no more than its ids."""
    try:
        out, _ = rewrite(body, api, doc, policy)
    except RewriteError:
        return
    assert not _is_wrong_edit(body, out, api, doc, policy)


def test_duplicate_keys_never_a_wrong_edit_inside_a_position() -> None:
    body = b'{"content":[{"type":"tool_use","id":"toolu_1","input":{"id":"y:1"},"id":"y:1"}]}'
    _assert_no_wrong_edit(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)


def test_duplicate_keys_never_a_wrong_edit_elsewhere() -> None:
    body = (
        b'{"type":"message","content":[{"type":"tool_use","id":"ok","input":{}}],'
        b'"x":{"id":"a:1"},'
        b'"content":[{"type":"tool_use","id":"a:1","input":{}}]}'
    )
    _assert_no_wrong_edit(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)


def test_duplicate_keys_with_different_values_follow_last_wins() -> None:
    # JSON parsers (Python, JavaScript, Go) keep the last of duplicate keys; so does toolid:
    # the id every such client reads is encoded, and nothing else changes.
    body = b'{"content":[{"type":"tool_use","id":"x:1","id":"y:2","input":{}}]}'
    out, _ = rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    assert out == body.replace(b'"y:2"', b'"tid1_y-3A2"')


@pytest.mark.parametrize("direction", [Direction.ENCODE, Direction.DECODE])
def test_escaped_key_never_a_wrong_edit(direction: Direction) -> None:
    value = b'"a:1"' if direction is Direction.ENCODE else b'"tid1_a-3A1"'
    if direction is Direction.ENCODE:
        body = (
            b'{"type":"message","content":[{"type":"tool_use","i\\u0064":'
            + value
            + b',"name":"f","input":{"id":'
            + value
            + b"}}]}"
        )
        api, doc = Api.MESSAGES, Doc.RESPONSE
    else:
        body = (
            b'{"messages":[{"role":"assistant","content":[{"type":"tool_use","i\\u0064":'
            + value
            + b',"name":"f","input":{"id":'
            + value
            + b"}}]}]}"
        )
        api, doc = Api.MESSAGES, Doc.REQUEST
    policy = Policy(direction)
    _assert_no_wrong_edit(body, api, doc, policy)


def test_escaped_key_without_lookalike_fails_open() -> None:
    body = b'{"content":[{"type":"tool_use","i\\u0064":"a:1","name":"f","input":{}}]}'
    # the key is not spelled out, so the prefilter sees no candidate: it passes unchanged
    try:
        out, _ = rewrite(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    except RewriteError:
        return
    assert out is body


def test_raw_id_before_the_first_marker_is_not_a_position() -> None:
    # The same string as content before "tool_calls" and as the call's id after it: only the
    # id changes (raw ids are looked for from the first marker on).
    body = (
        b'{"choices":[{"message":{"content":"functions.a:0","tool_calls":[{"id":"functions.a:0",'
        b'"type":"function","function":{"name":"a","arguments":"{}"}}]}}]}'
    )
    out, done = rewrite(body, Api.CHAT, Doc.RESPONSE, ENCODE)
    assert out == body.replace(b'"id":"functions.a:0"', b'"id":"tid1_functions-2Ea-3A0"')
    assert len(done.edits) == 1


def test_escaped_marker_key_before_a_plain_one_never_a_wrong_edit() -> None:
    # The call's key is spelled with an escape before the first plain "tool_calls", which
    # holds a lookalike: the search from the first marker on must not be trusted here.
    body = (
        b'{"choices":[{"message":{"tool\\u005fcalls":[{"id":"a:1","type":"function",'
        b'"function":{"name":"a","arguments":"{}"}}]}}],'
        b'"x":{"tool_calls":{"id":"a:1"}}}'
    )
    _assert_no_wrong_edit(body, Api.CHAT, Doc.RESPONSE, ENCODE)


def test_apply() -> None:
    body = b"0123456789"
    assert apply(body, []) is body
    assert apply(body, [(1, 3, b"ab"), (5, 6, b"")]) == b"0ab346789"
    assert apply(body, [(0, 0, b"x"), (10, 10, b"y")]) == b"x0123456789y"


# --- properties ------------------------------------------------------------------------------

ANY_CHAR = st.characters(exclude_categories=())  # every code point, lone surrogates too
TRICKY = [
    "",
    ".",
    ":",
    "#",
    "/",
    " ",
    '"',
    "\\",
    "\n",
    "\x00",
    "é",
    "\ud800",
    "\U0001f600",
    "tid1_",
    "call_",
    "-",
    "_",
    "a",
    "Z",
    "9",
    "-2E",
    "\u2028",
]
RAW_IDS = st.one_of(
    st.text(ANY_CHAR, max_size=10),
    st.lists(st.sampled_from(TRICKY), max_size=5).map("".join),
    st.from_regex(r"(call_|toolu_|tid1_)?[A-Za-z0-9_-]{0,8}", fullmatch=True),
    st.sampled_from(["functions.get_weather:0", "call_abc", "toolu_01", "a.b", "tid1_a-2Eb"]),
)
FILLER_KEYS = st.one_of(
    st.sampled_from(
        [
            "id",
            "call_id",
            "tool_use_id",
            "tool_call_id",
            "item_id",
            "tool_id",
            "approval_request_id",
            "type",
            "text",
            "caller",
            "content",
            "input",
            "output",
        ]
    ),
    st.text(ANY_CHAR, max_size=4),
)
PROFILES = st.sampled_from(codec.PROFILES)


def filler(looks: list[str]) -> st.SearchStrategy[Any]:
    """Random JSON, with the id strings (and tool-like objects holding them) mixed in."""
    strings = st.one_of(st.text(ANY_CHAR, max_size=6), st.sampled_from(looks))
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        strings,
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(FILLER_KEYS, children, max_size=3),
            st.builds(
                lambda kind, look: {"type": kind, "id": look, "tool_use_id": look},
                st.sampled_from(["tool_use", "function_call", "message"]),
                strings,
            ),
        ),
        max_leaves=6,
    )


class Builder:
    """Builds one document of one API and kind, recording the (path, raw) of every position."""

    def __init__(self, draw: Any, show: Any) -> None:
        self.draw = draw
        self.show = show  # raw id -> what the document holds (raw, or the client id)
        self.ids: list[tuple[str, str]] = []
        self.raws = draw(st.lists(RAW_IDS, min_size=1, max_size=4))
        self.looks = [show(r) for r in self.raws]

    def raw(self) -> str:
        return self.draw(st.sampled_from(self.raws))

    def at(self, path: str) -> str:
        raw = self.raw()
        self.ids.append((path, raw))
        return self.show(raw)

    def fill(self) -> Any:
        return self.draw(filler(self.looks))

    def text(self) -> str:
        return "calling " + self.draw(st.sampled_from(self.looks)) + " now"

    def count(self, max_size: int = 3) -> int:
        return self.draw(st.integers(min_value=0, max_value=max_size))

    def chat_call(self, path: str) -> dict[str, Any]:
        args = {"id": self.draw(st.sampled_from(self.looks)), "x": self.fill()}
        return {
            "id": self.at(f"{path}.id"),
            "type": "function",
            "function": {"name": "f", "arguments": json.dumps(args)},
        }

    def responses_item(self, path: str) -> dict[str, Any]:
        kind = self.draw(
            st.sampled_from(
                [
                    "function_call",
                    "custom_tool_call",
                    "computer_call",
                    "local_shell_call",
                    "shell_call",
                    "apply_patch_call",
                    "function_call_output",
                    "custom_tool_call_output",
                    "computer_call_output",
                    "shell_call_output",
                    "apply_patch_call_output",
                    "local_shell_call_output",
                    "mcp_call",
                    "mcp_approval_request",
                    "mcp_approval_response",
                    "item_reference",
                    "web_search_call",
                    "message",
                    "reasoning",
                ]
            )
        )
        item: dict[str, Any] = {"type": kind}
        if kind in ("message", "reasoning"):
            item["id"] = self.draw(st.sampled_from(self.looks))
            item["content"] = [{"type": "output_text", "text": self.text()}]
            return item
        if kind.endswith("_call") and kind not in ("mcp_call", "web_search_call"):
            item["id"] = self.at(f"{path}.id")
            item["call_id"] = self.at(f"{path}.call_id")
            item["arguments"] = json.dumps({"id": self.looks[0], "x": self.fill()})
        elif kind.endswith("_output") and kind != "local_shell_call_output":
            item["call_id"] = self.at(f"{path}.call_id")
            item["output"] = self.fill()
        elif kind == "mcp_approval_response":
            item["approval_request_id"] = self.at(f"{path}.approval_request_id")
            item["approve"] = True
        else:
            item["id"] = self.at(f"{path}.id")
        item["metadata"] = self.fill()
        return item

    def responses_items(self, path: str) -> list[Any]:
        return [self.responses_item(f"{path}[{i}]") for i in range(self.count(4))]

    def block(self, path: str) -> dict[str, Any]:
        kind = self.draw(
            st.sampled_from(
                [
                    "tool_use",
                    "server_tool_use",
                    "mcp_tool_use",
                    "web_search_tool_result",
                    "tool_result",
                    "text",
                    "thinking",
                ]
            )
        )
        block: dict[str, Any] = {"type": kind}
        if kind in ("text", "thinking"):
            block["text"] = self.text()
            block["id"] = self.draw(st.sampled_from(self.looks))
        elif kind.endswith("_use"):
            block["id"] = self.at(f"{path}.id")
            block["name"] = "f"
            inp = self.fill()
            block["input"] = (
                {"id": self.draw(st.sampled_from(self.looks)), "more": inp}
                if self.draw(st.booleans())
                else inp
            )
            if self.draw(st.booleans()):
                block["caller"] = {
                    "type": "code_execution",
                    "tool_id": self.at(f"{path}.caller.tool_id"),
                }
        else:
            block["tool_use_id"] = self.at(f"{path}.tool_use_id")
            block["content"] = [{"type": "text", "text": self.text()}]
        return block

    def blocks(self, path: str) -> list[Any]:
        return [self.block(f"{path}[{i}]") for i in range(self.count(4))]

    def converse_block(self, path: str) -> dict[str, Any]:
        """A Bedrock Converse content block: a union, its member naming the kind."""
        kind = self.draw(st.sampled_from(["toolUse", "toolResult", "text", "reasoningContent"]))
        if kind == "toolUse":
            look = self.draw(st.sampled_from(self.looks))
            return {
                "toolUse": {
                    "toolUseId": self.at(f"{path}.toolUse.toolUseId"),
                    "name": "f",
                    "input": {"toolUseId": look, "x": self.fill()},
                }
            }
        if kind == "toolResult":
            return {
                "toolResult": {
                    "toolUseId": self.at(f"{path}.toolResult.toolUseId"),
                    "content": [{"text": self.text()}, {"json": {"toolUseId": self.looks[0]}}],
                    "status": "success",
                }
            }
        return {kind: {"text": self.text(), "toolUseId": self.draw(st.sampled_from(self.looks))}}

    def converse_blocks(self, path: str) -> list[Any]:
        return [self.converse_block(f"{path}[{i}]") for i in range(self.count(4))]

    def converse(self, doc: Doc) -> dict[str, Any]:
        if doc is Doc.RESPONSE:
            content = self.converse_blocks("output.message.content")
            return {"output": {"message": {"role": "assistant", "content": content}}}
        if doc is Doc.REQUEST:
            return {
                "modelId": "m",
                "messages": [
                    {"role": "user", "content": [{"text": self.text()}]},
                    {"role": "assistant", "content": self.converse_blocks("messages[1].content")},
                    {"role": "user", "content": self.converse_blocks("messages[2].content")},
                ],
            }
        kind = self.draw(st.sampled_from(["toolUse", "toolResult", "delta"]))
        if kind == "delta":
            look = self.draw(st.sampled_from(self.looks))
            return {"contentBlockIndex": 1, "delta": {"toolUse": {"input": look}}}
        return {
            "contentBlockIndex": self.count(),
            "start": {kind: {"toolUseId": self.at(f"start.{kind}.toolUseId"), "name": "f"}},
        }

    def gemini_part(self, path: str, *, results: bool) -> dict[str, Any]:
        """A Gemini Part: a union, its member naming the kind (a call's ``id`` optional)."""
        kinds = ["functionCall", "text", "thought"] + (["functionResponse"] if results else [])
        kind = self.draw(st.sampled_from(kinds))
        look = self.draw(st.sampled_from(self.looks))
        if kind == "functionCall":
            call: dict[str, Any] = {"name": "f", "args": {"id": look, "x": self.fill()}}
            if self.draw(st.booleans()) or not results:
                call["id"] = self.at(f"{path}.functionCall.id")
            return {"functionCall": call, "thoughtSignature": "c2lnbmF0dXJl"}
        if kind == "functionResponse":
            response = {"name": "f", "response": {"id": look, "output": self.fill()}}
            return {"functionResponse": {"id": self.at(f"{path}.functionResponse.id"), **response}}
        return {"text": self.text(), "thought": kind == "thought", "id": look}

    def gemini_parts(self, path: str, *, results: bool = False) -> list[Any]:
        parts = range(self.count(4))
        return [self.gemini_part(f"{path}[{i}]", results=results) for i in parts]

    def gemini(self, doc: Doc) -> dict[str, Any]:
        """A Gemini document, bare or in Code Assist's envelope (``request`` / ``response``)."""
        wrapped = self.draw(st.booleans())
        envelope = ("request" if doc is Doc.REQUEST else "response") if wrapped else ""
        at = f"{envelope}." if envelope else ""
        inner: dict[str, Any]
        if doc is Doc.REQUEST:
            inner = {
                "contents": [
                    {"role": "user", "parts": [{"text": self.text()}]},
                    {"role": "model", "parts": self.gemini_parts(f"{at}contents[1].parts")},
                    {
                        "role": "user",
                        "parts": self.gemini_parts(f"{at}contents[2].parts", results=True),
                    },
                ]
            }
        else:
            parts = self.gemini_parts(f"{at}candidates[0].content.parts")
            inner = {
                "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                "modelVersion": "gemini-2.5-flash",
            }
        if not envelope:
            return inner
        return {"model": "gemini-2.5-flash", envelope: inner, "traceId": self.looks[0]}

    def document(self, api: Api, doc: Doc) -> dict[str, Any]:
        body: dict[str, Any]
        if api is Api.CHAT and doc is Doc.RESPONSE:
            body = {
                "id": self.looks[0],
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": self.text(),
                            "tool_calls": [
                                self.chat_call(f"choices[0].message.tool_calls[{i}]")
                                for i in range(self.count())
                            ],
                        },
                    }
                ],
            }
        elif api is Api.CHAT and doc is Doc.EVENT:
            body = {
                "id": self.looks[0],
                "object": "chat.completion.chunk",
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                self.chat_call(f"choices[0].delta.tool_calls[{i}]") | {"index": i}
                                for i in range(self.count())
                            ]
                        },
                    }
                ],
            }
        elif api is Api.CHAT:
            n = self.count()
            messages: list[Any] = [
                {"role": "user", "content": self.text()},
                {
                    "role": "assistant",
                    "tool_calls": [
                        self.chat_call(f"messages[1].tool_calls[{i}]") for i in range(n)
                    ],
                },
            ]
            for _ in range(self.count()):
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": self.at(f"messages[{len(messages)}].tool_call_id"),
                        "content": self.text(),
                    }
                )
            body = {"model": "m", "messages": messages}
        elif api is Api.RESPONSES and doc is Doc.RESPONSE:
            body = {
                "id": self.looks[0],
                "object": "response",
                "output": self.responses_items("output"),
            }
        elif api is Api.RESPONSES and doc is Doc.REQUEST:
            body = {"model": "m", "input": self.responses_items("input")}
        elif api is Api.RESPONSES:
            kind = self.draw(st.sampled_from(["item", "response", "item_id"]))
            if kind == "item":
                body = {"type": "response.output_item.done", "item": self.responses_item("item")}
            elif kind == "response":
                body = {
                    "type": "response.completed",
                    "response": {
                        "id": self.looks[0],
                        "output": self.responses_items("response.output"),
                    },
                }
            else:
                body = {
                    "type": "response.function_call_arguments.delta",
                    "item_id": self.at("item_id"),
                    "delta": self.text(),
                }
        elif api is Api.CONVERSE:
            body = self.converse(doc)
        elif api is Api.GEMINI:
            body = self.gemini(doc)
        elif doc is Doc.RESPONSE:
            body = {"id": self.looks[0], "type": "message", "content": self.blocks("content")}
        elif doc is Doc.REQUEST:
            body = {
                "model": "m",
                "messages": [
                    {"role": "user", "content": self.text()},
                    {"role": "assistant", "content": self.blocks("messages[1].content")},
                    {"role": "user", "content": self.blocks("messages[2].content")},
                ],
            }
        elif self.draw(st.booleans()):
            body = {
                "type": "content_block_start",
                "index": 0,
                "content_block": self.block("content_block"),
            }
        else:
            body = {
                "type": "message_start",
                "message": {
                    "id": self.looks[0],
                    "type": "message",
                    "content": self.blocks("message.content"),
                },
            }
        body["metadata"] = self.fill()
        if self.draw(st.booleans()):  # move the extra member first
            body = {"metadata": body.pop("metadata"), **body}
        return body


SEPARATORS = [None, (",", ":"), (", ", ": "), (" ,\n", " :\t"), ("\r\n,", ":\r\n ")]


def dumps(draw: Any, document: Any) -> tuple[bytes, bool, bool]:
    """Serialise with random options: bytes, whether valid UTF-8, whether ensure_ascii."""
    options: dict[str, Any] = {
        "ensure_ascii": draw(st.booleans()),
        "indent": draw(st.sampled_from([None, 0, 2, "\t"])),
        "separators": draw(st.sampled_from(SEPARATORS)),
        "sort_keys": draw(st.booleans()),
    }
    text = json.dumps(document, **options)
    try:
        return text.encode("utf-8"), True, options["ensure_ascii"]
    except UnicodeEncodeError:
        # lone surrogates: either escape them (valid JSON) or keep the bad bytes
        if draw(st.booleans()):
            return text.encode("utf-8", "surrogatepass"), False, False
        options["ensure_ascii"] = True
        return json.dumps(document, **options).encode("ascii"), True, True


API_DOCS = st.sampled_from([(api, doc) for api in Api for doc in Doc if doc is not Doc.HISTORY])


def set_path(document: Any, path: str, value: str) -> None:
    steps = re.findall(r"\[(\d+)\]|([A-Za-z_]+)", path)
    node = document
    for index, key in steps[:-1]:
        node = node[int(index)] if index else node[key]
    index, key = steps[-1]
    node[int(index) if index else key] = value


def string_paths(node: Any, path: str = "") -> Any:
    """Yield (path, value) of every string member or element, in find_ids' notation."""
    if isinstance(node, dict):
        for key, value in node.items():
            child = f"{path}.{key}" if path else key
            if isinstance(value, str):
                yield child, value
            else:
                yield from string_paths(value, child)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, str):
                yield f"{path}[{i}]", value
            else:
                yield from string_paths(value, f"{path}[{i}]")


PROPERTY = settings(
    max_examples=70,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(st.data(), API_DOCS, PROFILES, st.booleans())
def test_property_encode(data: Any, api_doc: tuple[Api, Doc], profile: Any, known: bool) -> None:
    api, doc = api_doc
    builder = Builder(data.draw, lambda raw: raw)
    document = builder.document(api, doc)
    body, valid, _ = dumps(data.draw, document)
    policy = Policy(Direction.ENCODE, profile=profile)
    try:
        out, result = rewrite(body, api if known else None, doc, policy)
    except RewriteError:
        # (a) the only acceptable reason here: raw surrogate bytes, which are not UTF-8
        assert not valid
        return
    # (b) the parsed output is the parsed input with exactly the positions encoded
    expected = json.loads(body)
    found = find_ids(expected, api, doc)
    assert sorted(f.path for f in found) == sorted(path for path, _ in builder.ids)
    clients = client_ids(found, profile, api=api)  # occurrence tags for raw ids used twice
    changed = {}
    for f in found:
        client = clients[(id(f.holder), f.key)]
        if client != f.value:
            changed[f.path] = (f.value, client)
    for f in found:
        f.holder[f.key] = clients[(id(f.holder), f.key)]
    if result.api is None:
        # the byte check found no candidate, or (api unknown) the shape did not tell
        assert out is body
        assert not known or not changed
        return
    assert result.api is api
    assert json.loads(out) == expected
    assert {c.path: (c.raw, c.client) for c in result.changes} == changed
    assert {c.action for c in result.changes} <= {"encoded"}
    if not changed:
        assert out is body
    check_edits(body, out, result, changed)


def check_edits(body: bytes, out: bytes, result: Plan, changed: dict[str, tuple[str, str]]) -> None:
    """(c) bytes outside the edit spans are identical; each span is the literal of a position."""
    at = 0
    pieces = []
    for start, end, _ in result.edits:
        assert at <= start < end
        assert body[start : start + 1] == b'"' == body[end - 1 : end]
        pieces.append(body[at:start])
        at = end
    pieces.append(body[at:])
    # every byte outside the spans is in the output, in order, untouched
    rebuilt = b""
    read = 0  # how much of the output is accounted for
    for piece, edit in zip(pieces, [*result.edits, None], strict=True):
        assert out[read : read + len(piece)] == piece
        read += len(piece)
        text = edit[2] if edit is not None else b""
        assert out[read : read + len(text)] == text
        read += len(text)
        rebuilt += piece + text
    assert read == len(out) == len(rebuilt)
    # each span, replaced by a unique sentinel literal, sits exactly at one changed position
    sentinels = [
        (start, end, json.dumps(f"\x00edit{i}\x00").encode())
        for i, (start, end, _) in enumerate(result.edits)
    ]
    marked = json.loads(apply(body, sentinels))
    where = {value: path for path, value in string_paths(marked) if value.startswith("\x00edit")}
    assert len(where) == len(result.edits)
    assert set(where.values()) == set(changed)
    for i, (start, end, text) in enumerate(result.edits):
        path = where[f"\x00edit{i}\x00"]
        raw, client = changed[path]
        literal_value = json.loads(body[start:end])
        assert literal_value in (raw, client)  # the old value: raw (encode) or client (decode)
        assert json.loads(text) in (raw, client)
        assert json.loads(text) != literal_value


@PROPERTY
@given(st.data(), API_DOCS, PROFILES, st.booleans())
def test_property_decode(data: Any, api_doc: tuple[Api, Doc], profile: Any, known: bool) -> None:
    """Restoring for a host without rules (hosts with rules: tests/test_rules.py)."""
    api, doc = api_doc
    builder = Builder(data.draw, lambda raw: codec.encode(raw, profile))
    document = builder.document(api, doc)
    body, valid, _ = dumps(data.draw, document)
    assume(valid)  # client ids are ASCII; only filler could hold raw surrogates
    policy = Policy(Direction.DECODE, profile=profile)
    out, result = rewrite(body, api if known else None, doc, policy)
    expected = json.loads(body)
    changed = {}
    for path, raw in builder.ids:
        client = codec.encode(raw, profile)
        if client == raw:
            continue
        set_path(expected, path, raw)
        changed[path] = (raw, client)
    if result.api is None:
        assert out is body
        assert not known or not changed
        return
    assert result.api is api
    assert json.loads(out) == expected
    assert {c.path: (c.raw, c.client) for c in result.changes} == changed
    assert {c.action for c in result.changes} <= {"restored"}
    out.decode("utf-8")  # restored literals never spell raw surrogate bytes
    if not changed:
        assert out is body
    check_edits(body, out, result, changed)


@PROPERTY
@given(st.data(), API_DOCS, PROFILES)
def test_property_encode_then_decode_is_the_identity(
    data: Any, api_doc: tuple[Api, Doc], profile: Any
) -> None:
    api, doc = api_doc
    builder = Builder(data.draw, lambda raw: raw)
    document = builder.document(api, doc)
    body, valid, ensure_ascii = dumps(data.draw, document)
    assume(valid)
    encoded, _ = rewrite(body, api, doc, Policy(Direction.ENCODE, profile=profile))
    decoded, _ = rewrite(encoded, api, doc, Policy(Direction.DECODE, profile=profile))
    assert json.loads(decoded) == json.loads(body)
    # byte for byte, when the original spelled the ids the way the rewriter spells them:
    # UTF-8 as is, lone surrogates as \u escapes (then the whole literal is ASCII)
    if all(
        raw.isascii() or not ensure_ascii or any(0xD800 <= ord(c) <= 0xDFFF for c in raw)
        for _, raw in builder.ids
    ):
        assert decoded == body


@settings(max_examples=100, deadline=None)
@given(st.data(), API_DOCS, st.sampled_from(list(Direction)))
def test_property_mutated_bodies_only_raise_rewrite_error(
    data: Any, api_doc: tuple[Api, Doc], direction: Direction
) -> None:
    api, doc = api_doc
    builder = Builder(
        data.draw, lambda raw: raw if direction is Direction.ENCODE else codec.encode(raw)
    )
    body, _, _ = dumps(data.draw, builder.document(api, doc))
    # cut, insert or flip bytes
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        at = data.draw(st.integers(min_value=0, max_value=len(body)))
        junk = data.draw(st.sampled_from([b"", b'"', b"\\", b"{", b"]", b",", b"\xff", b":"]))
        cut = data.draw(st.integers(min_value=0, max_value=3))
        body = body[:at] + junk + body[at + cut :]
    for known in (api, None):
        try:
            out, result = rewrite(body, known, doc, Policy(direction))
        except RewriteError:
            continue
        if result.edits:
            # it edited: the body was JSON, and still is, with only literals changed
            json.loads(out)
        else:
            assert out is body


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64), API_DOCS, st.sampled_from(list(Direction)), st.booleans())
def test_property_junk_bytes(
    body: bytes, api_doc: tuple[Api, Doc], direction: Direction, known: bool
) -> None:
    api, doc = api_doc
    for prefix in (b"", b'{"tool_calls":[{"id":"a:', b'{"content":[{"id":"tid1_'):
        whole = prefix + body
        try:
            out, result = rewrite(whole, api if known else None, doc, Policy(direction))
        except RewriteError:
            continue
        if result.edits:
            json.loads(out)
        else:
            assert out is whole


def test_keys_that_end_in_an_escaped_quote_are_not_id_keys() -> None:
    # '"x\"id": ...' contains the bytes '"id": "a:1"' starting at an escaped quote
    body = (
        b'{"content":[{"type":"tool_use","id":"a:1","name":"f",'
        b'"input":{"x\\"id":"a:1","\\"tool_use_id":"a:1","\\\\":"a:1"}}]}'
    )
    out, result = run(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    assert out == replace_once(body, b'"id":"a:1","name"', b'"id":"tid1_a-3A1","name"')
    assert [c.path for c in result.changes] == ["content[0].id"]
    # the same, spread over a look-alike in tool input: the in-order walk
    body = body.replace(b'"\\\\":"a:1"', b'"id":"a:1"')
    out, _ = run(body, Api.MESSAGES, Doc.RESPONSE, ENCODE)
    assert out == replace_once(body, b'"id":"a:1","name"', b'"id":"tid1_a-3A1","name"')
