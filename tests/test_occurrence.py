"""Occurrence tags: reused upstream ids get one client id per call, buffered and
streamed, all three APIs; the request's history decides what is taken; strict hosts keep
tagged ids. The codec's own tag tests are in test_codec.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolid import codec
from toolid.body import Direction, Policy, may_change, plan, rewrite
from toolid.occurrence import NOTHING_TAKEN, CallIds, Taken
from toolid.positions import Api, Doc, Found, find_ids
from toolid.rules import RULE_SETS
from toolid.stream import StreamRewriter

ENCODE = Policy(Direction.ENCODE)
GLOB = "functions.Glob:0"
GLOB_1, GLOB_2, GLOB_3 = (codec.encode(GLOB, "safe", k) for k in (1, 2, 3))


def dumps(document: Any) -> bytes:
    return json.dumps(document).encode()


# --- requests: what the history takes --------------------------------------------------------


def chat_history(*ids: str) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "list files"}]
    for tool_id in ids:
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [{"id": tool_id, "type": "function", "function": {"name": "Glob"}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": tool_id, "content": "a.txt"})
    return {"model": "k", "messages": messages}


def test_taken_counts_definitions_only() -> None:
    request = dumps(
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "call_a", "type": "function"}]},
                {"role": "tool", "tool_call_id": "call_b", "content": "call_c"},
            ]
        }
    )
    taken = Taken(request, Api.CHAT)
    assert "call_a" in taken
    assert "call_b" not in taken  # a result refers to a call; it defines none
    assert "call_c" not in taken  # text is not an id
    assert "call_d" not in taken


def test_taken_without_the_literal_never_parses() -> None:
    taken = Taken(b"{not json at all, never parsed", Api.CHAT)
    assert "call_a" not in taken  # the byte search alone proves it


def test_taken_reads_escaped_spellings() -> None:
    request = b'{"messages":[{"role":"assistant","tool_calls":[{"id":"c\\u0061ll_a"}]}]}'
    assert "call_a" in Taken(request, Api.CHAT)
    key_escaped = b'{"messages":[{"role":"assistant","tool\\u005fcalls":[{"id":"call_a"}]}]}'
    assert "call_a" in Taken(key_escaped, Api.CHAT)


def test_taken_without_a_definition_marker_looks_no_further() -> None:
    """No "tool_calls" in a Chat request: it defines nothing, whatever ids it spells."""
    request = b'{"messages":[{"role":"tool","tool_call_id":"call_a","content":"call_b"}]} x'
    taken = Taken(request, Api.CHAT)
    assert "call_a" not in taken
    assert taken.known() == frozenset()  # known at once: no parse, no search per id


def test_taken_guesses_the_api_and_survives_garbage() -> None:
    assert "call_a" in Taken(dumps(chat_history("call_a")))
    assert "x" not in Taken(b'"x" but not json')
    assert "x" not in NOTHING_TAKEN
    assert Taken.of(["a"]).__contains__("a")


@pytest.mark.parametrize(
    ("api", "request_doc", "defined"),
    [
        (Api.CHAT, chat_history("A", "B"), {"A", "B"}),
        (
            Api.RESPONSES,
            {
                "input": [
                    {"type": "function_call", "id": "fc_1", "call_id": "A"},
                    {"type": "function_call_output", "call_id": "B", "output": "x"},
                    {"type": "item_reference", "id": "C"},
                ]
            },
            {"fc_1", "A"},
        ),
        (
            Api.MESSAGES,
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "A"}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "B"}]},
                ]
            },
            {"A"},
        ),
    ],
)
def test_definition_positions_per_api(api: Api, request_doc: Any, defined: set[str]) -> None:
    taken = Taken(dumps(request_doc), api)
    assert {value for value in ("A", "B", "C", "fc_1") if value in taken} == defined


# --- buffered responses ----------------------------------------------------------------------


def chat_response(*ids: str) -> dict[str, Any]:
    calls = [{"id": i, "type": "function", "function": {"name": "Glob"}} for i in ids]
    return {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": calls}}]}


def messages_response(*ids: str) -> dict[str, Any]:
    return {
        "type": "message",
        "content": [{"type": "tool_use", "id": i, "name": "Glob", "input": {}} for i in ids],
    }


def responses_response(*ids: str) -> dict[str, Any]:
    return {
        "object": "response",
        "output": [
            {"type": "function_call", "id": f"fc_{n}", "call_id": i, "name": "Glob"}
            for n, i in enumerate(ids)
        ],
    }


BUFFERED = [
    (Api.CHAT, chat_response, "choices[0].message.tool_calls[{}].id"),
    (Api.MESSAGES, messages_response, "content[{}].id"),
    (Api.RESPONSES, responses_response, "output[{}].call_id"),
]


@pytest.mark.parametrize(("api", "make", "path"), BUFFERED)
def test_turn_after_turn_the_client_gets_new_ids(api: Api, make: Any, path: str) -> None:
    """The same raw id every turn: 1st plain, then -_2, -_3 (the history holds the others)."""
    history: list[str] = []
    for expected in (GLOB_1, GLOB_2, GLOB_3):
        calls = CallIds("safe", Taken.of(history))
        _, result = rewrite(dumps(make(GLOB)), api, Doc.RESPONSE, ENCODE, calls)
        clients = {c.path: c.client for c in result.changes}
        assert clients[path.format(0)] == expected
        history.append(expected)


@pytest.mark.parametrize(("api", "make", "path"), BUFFERED)
def test_conforming_reused_ids_are_tagged_only_when_taken(api: Api, make: Any, path: str) -> None:
    body = dumps(make("call_0"))
    out, result = rewrite(body, api, Doc.RESPONSE, ENCODE, CallIds("safe", NOTHING_TAKEN))
    assert out is body and not result.changes  # nothing taken: byte for byte
    out, result = rewrite(body, api, Doc.RESPONSE, ENCODE, CallIds("safe", Taken.of(["call_0"])))
    assert out == body.replace(b'"call_0"', b'"tid1_call_0-_2"')
    assert [(c.raw, c.client) for c in result.changes] == [("call_0", "tid1_call_0-_2")]


@pytest.mark.parametrize(("api", "make", "path"), BUFFERED)
def test_parallel_calls_with_one_raw_id_get_distinct_ids(api: Api, make: Any, path: str) -> None:
    body = dumps(make("call_0", "call_0", "call_0"))
    out, result = rewrite(body, api, Doc.RESPONSE, ENCODE)
    assert json.loads(out) == make("call_0", "tid1_call_0-_2", "tid1_call_0-_3")
    assert len(result.changes) == 2
    assert out.replace(b"tid1_call_0-_2", b"call_0").replace(b"tid1_call_0-_3", b"call_0") == body


def test_call_profile_tags() -> None:
    policy = Policy(Direction.ENCODE, profile="call")
    body = dumps(chat_response("call_0", "call_0"))
    out, _ = rewrite(body, Api.CHAT, Doc.RESPONSE, policy)
    assert json.loads(out) == chat_response("call_0", "call_tid1_call_0-_2")


def test_references_in_a_response_follow_their_call() -> None:
    """A server tool's result block refers to the tagged call before it."""
    document = {
        "type": "message",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_0", "name": "web_search"},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_0", "content": []},
        ],
    }
    calls = CallIds("safe", Taken.of(["srvtoolu_0"]))
    out, _ = rewrite(dumps(document), Api.MESSAGES, Doc.RESPONSE, ENCODE, calls)
    content = json.loads(out)["content"]
    assert content[0]["id"] == content[1]["tool_use_id"] == "tid1_srvtoolu_0-_2"


_STEPS = st.lists(
    st.tuples(
        st.booleans(),  # define (else refer)
        st.tuples(st.integers(0, 2)),  # the call's number
        st.sampled_from(["id", "call_id"]),
        st.sampled_from(["a", "functions.f:0", "tid1_a"]),
    ),
    max_size=12,
)


@given(_STEPS, st.lists(st.sampled_from(["a", "tid1_a-_2", "tid1_functions-2Ef-3A0"]), max_size=3))
def test_property_define_and_refer_follow_the_model(
    steps: list[tuple[bool, tuple[int], str, str]], taken: list[str]
) -> None:
    """A mention (call number, key, raw id) keeps the client id it first got: the first of
    encode(raw), encode(raw, 2), ... neither taken nor given; a call (number, key) keeps the
    client id of its first mention, whatever raw id a later one carries (``define`` answers
    None for that later one, ``defined`` the first's client id). A reference gets the
    client id of the latest mention with its call number and raw id, else of the raw id's
    latest mention, else the raw id's encoding."""
    calls = CallIds("safe", Taken.of(taken))
    mentions: dict[tuple[tuple[int], str, str], str] = {}
    numbered: dict[tuple[tuple[int], str], str] = {}
    by_call: dict[tuple[tuple[int], str], str] = {}
    latest: dict[str, str] = {}
    for define, call, key, raw in steps:
        if not define:
            expected = by_call.get((call, raw)) or latest.get(raw) or codec.encode(raw, "safe")
            assert calls.refer(call, raw) == expected
            continue
        if (call, key, raw) in mentions:
            expected = mentions[(call, key, raw)]
        elif (call, key) in numbered:  # the call's other id: None, and its first client id
            assert calls.define(call, key, raw) is None
            expected = numbered[(call, key)]
            assert calls.defined(call, key, raw) == expected
            continue
        else:
            occurrence = 1
            while (client := codec.encode(raw, "safe", occurrence)) in {*mentions.values(), *taken}:
                occurrence += 1
            mentions[(call, key, raw)] = by_call[(call, raw)] = latest[raw] = client
            expected = numbered[(call, key)] = client
        assert calls.define(call, key, raw) == expected


def test_history_with_tagged_ids_skips_taken_tags() -> None:
    """Tags already in the history (1st and 3rd: the 2nd was edited away) are skipped."""
    calls = CallIds("safe", Taken(dumps(chat_history(GLOB_1, GLOB_3)), Api.CHAT))
    _, result = rewrite(dumps(chat_response(GLOB, GLOB)), Api.CHAT, Doc.RESPONSE, ENCODE, calls)
    assert [c.client for c in result.changes] == [GLOB_2, codec.encode(GLOB, "safe", 4)]


# --- streams ---------------------------------------------------------------------------------


def sse(*documents: Any, names: bool = False) -> bytes:
    out = b""
    for document in documents:
        if names:
            out += b"event: " + document["type"].encode() + b"\n"
        out += b"data: " + json.dumps(document).encode() + b"\n\n"
    return out


def responses_stream(call_id: str, item_id: str) -> list[Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": "Glob"}
    done = dict(item, arguments="{}")
    return [
        {"type": "response.created", "response": {"object": "response", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": item_id,
            "delta": "{}",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done},
        {
            "type": "response.completed",
            "response": {"object": "response", "output": [done]},
        },
    ]


def messages_stream(*ids: str) -> list[Any]:
    events: list[Any] = [
        {"type": "message_start", "message": {"type": "message", "content": []}},
    ]
    for index, tool_id in enumerate(ids):
        block = {"type": "tool_use", "id": tool_id, "name": "Glob", "input": {}}
        events += [
            {"type": "content_block_start", "index": index, "content_block": block},
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": "{}"},
            },
            {"type": "content_block_stop", "index": index},
        ]
    return [*events, {"type": "message_stop"}]


def chat_stream(*ids: str) -> list[Any]:
    events = []
    for index, tool_id in enumerate(ids):
        first = {"index": index, "id": tool_id, "type": "function", "function": {"name": "Glob"}}
        later = {"index": index, "function": {"arguments": "{}"}}
        for delta in (first, later):
            events.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    return events


def run_stream(api: Api, body: bytes, taken: Taken, piece: int = 0) -> bytes:
    rewriter = StreamRewriter(api, ENCODE, calls=CallIds("safe", taken))
    pieces = [body[i : i + piece] for i in range(0, len(body), piece)] if piece else [body]
    out = b"".join(rewriter.feed(p) for p in pieces) + rewriter.finish()
    assert not rewriter.problems
    return out


@pytest.mark.parametrize("names", [True, False])
def test_responses_stream_every_event_of_a_call_agrees(names: bool) -> None:
    """added, arguments deltas, done and completed all carry the same tagged ids (with and
    without an ``event:`` line before each event's data)."""
    body = sse(*responses_stream("call_0", "fc_0"), names=names)
    out = run_stream(Api.RESPONSES, body, Taken.of(["call_0", "fc_0"]))
    assert out == body.replace(b'"call_0"', b'"tid1_call_0-_2"').replace(
        b'"fc_0"', b'"tid1_fc_0-_2"'
    )


def test_messages_stream_parallel_reused_ids() -> None:
    body = sse(*messages_stream(GLOB, GLOB), names=True)
    out = run_stream(Api.MESSAGES, body, Taken.of([GLOB_1]))
    starts = [
        json.loads(line[6:])["content_block"]["id"]
        for line in out.split(b"\n")
        if b"content_block_start" in line and line.startswith(b"data: ")
    ]
    assert starts == [GLOB_2, GLOB_3]


def test_chat_stream_tags_only_the_first_delta_of_each_call() -> None:
    body = sse(*chat_stream("call_0", "call_0"))
    out = run_stream(Api.CHAT, body, NOTHING_TAKEN)
    assert out.count(b'"id": "call_0"') == 1
    assert out.count(b'"id": "tid1_call_0-_2"') == 1
    assert out.replace(b'"tid1_call_0-_2"', b'"call_0"') == body  # nothing else moved


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["call_0", GLOB, "fc_0"]),
    st.integers(0, 3),
    st.lists(st.integers(1, 64), min_size=1, max_size=30),
)
def test_property_every_split_gives_the_same_tags(raw: str, used: int, cuts: list[int]) -> None:
    """Chunking never changes which call gets which id."""
    body = sse(*responses_stream(raw, raw), names=True) + sse(*messages_stream(raw, raw))
    taken = Taken.of([codec.encode(raw, "safe", k) for k in range(1, used + 1)])
    whole = run_stream(Api.RESPONSES, body, taken)
    rewriter = StreamRewriter(Api.RESPONSES, ENCODE, calls=CallIds("safe", taken))
    at, out = 0, b""
    for cut in cuts:
        out += rewriter.feed(body[at : at + cut])
        at += cut
    out += rewriter.feed(body[at:]) + rewriter.finish()
    assert out == whole


# --- the byte-level check never hides a needed tag --------------------------------------------


ids = st.sampled_from(["call_0", "call_1", "fc_0", GLOB, "toolu_1"])


@settings(max_examples=200, deadline=None)
@given(st.lists(ids, min_size=1, max_size=4), st.lists(ids, max_size=4), st.sampled_from(BUFFERED))
def test_property_prefilter_is_exact_enough(
    response_ids: list[str], history: list[str], case: Any
) -> None:
    """Whenever the byte check says "nothing to change", planning changes nothing."""
    api, make, _ = case
    body = dumps(make(*response_ids))
    calls = CallIds("safe", Taken.of(history))
    if not may_change(body, api, Doc.RESPONSE, ENCODE, calls):
        assert not plan(body, api, Doc.RESPONSE, ENCODE, CallIds("safe", Taken.of(history))).edits


def test_found_call_numbers() -> None:
    block = {"type": "tool_use", "id": "x"}
    event = {"type": "content_block_start", "index": 4, "content_block": block}
    (found,) = find_ids(event, Api.MESSAGES, Doc.EVENT)
    assert isinstance(found, Found) and found.call == (4,)
    (found,) = find_ids(chat_stream("x")[0], Api.CHAT, Doc.EVENT)
    assert found.call == (0, 0)


# --- requests to strict hosts ----------------------------------------------------------------


def test_strict_hosts_keep_tagged_ids() -> None:
    body = dumps(chat_history(GLOB_1, GLOB_2, "call_0", "tid1_call_0-_2"))
    lenient, _ = rewrite(body, Api.CHAT, Doc.REQUEST, Policy(Direction.DECODE))
    assert json.loads(lenient) == chat_history(GLOB, GLOB, "call_0", "call_0")
    safe = Policy(Direction.DECODE, rules=RULE_SETS["safe"])
    strict, result = rewrite(body, Api.CHAT, Doc.REQUEST, safe)
    assert json.loads(strict) == chat_history(GLOB_1, GLOB_2, "call_0", "tid1_call_0-_2")
    assert {c.action for c in result.changes} == {"kept"}
