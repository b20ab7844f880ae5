"""``toolid.pairing``: each code, for each API, by hand and by property (random histories with
known problems planted: each found exactly where planted, a clean history silent)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolid
from toolid import Problem, encode, pairing
from toolid.apis.record import LACKING_TEXTS
from toolid.locate import locate
from toolid.pairing import (
    COMPOSITE,
    DUPLICATE,
    EMPTY,
    MISPLACED,
    MISSING,
    ORPHAN,
    check,
)
from toolid.positions import (
    DEFINES,
    REFERS,
    Api,
    Doc,
    Found,
    Role,
    find_ids,
    path_order,
    positions,
)

CHAT, RESPONSES, MESSAGES = Api.CHAT, Api.RESPONSES, Api.MESSAGES

# Every test here runs with the accelerators as installed and as pure Python.
pytestmark = pytest.mark.usefixtures("backend")


def codes(problems: list[Problem]) -> list[tuple[str, str, str]]:
    return [(p.code, p.path, p.id) for p in problems]


# --- histories built from turns: the same conversation in each API ---------------------------


@dataclass
class Turn:
    """One model turn: its calls, and the results that follow it (None: not sent)."""

    calls: list[str]
    results: list[str] = field(default_factory=list)
    reasoning: bool = False  # Responses: a reasoning item before the calls
    text_after: bool = False  # a model message after the calls (Responses: same turn)


def chat(turns: list[Turn], ask_after: bool = True) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for number, turn in enumerate(turns):
        messages.append({"role": "user", "content": f"q{number}"})
        calls = [{"id": i, "type": "function", "function": {"name": "f"}} for i in turn.calls]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": i, "content": "r"} for i in turn.results]
    if ask_after:
        messages.append({"role": "user", "content": "next"})
    return {"model": "m", "messages": messages}


def messages(turns: list[Turn], ask_after: bool = True) -> dict[str, Any]:
    history: list[dict[str, Any]] = []
    for number, turn in enumerate(turns):
        history.append({"role": "user", "content": f"q{number}"})
        blocks = [{"type": "text", "text": "t"}]
        blocks += [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in turn.calls]
        history.append({"role": "assistant", "content": blocks})
        if turn.results:
            results = [{"type": "tool_result", "tool_use_id": i} for i in turn.results]
            history.append({"role": "user", "content": results})
    if ask_after:
        history.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    return {"model": "m", "messages": history}


def responses(turns: list[Turn], ask_after: bool = True) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    item = 0
    for number, turn in enumerate(turns):
        items.append({"role": "user", "content": f"q{number}"})
        if turn.reasoning:
            items.append({"type": "reasoning", "id": f"rs_{number}", "summary": []})
        for call in turn.calls:
            item += 1
            items.append({"type": "function_call", "id": f"fc_{item}", "call_id": call})
        if turn.text_after:
            items.append({"type": "message", "role": "assistant", "content": []})
        items += [
            {"type": "function_call_output", "call_id": i, "output": "r"} for i in turn.results
        ]
    if ask_after:  # the user asks on, the model answers: a new model turn
        items.append({"role": "user", "content": "next"})
        items.append({"type": "message", "role": "assistant", "content": []})
    return {"model": "m", "input": items}


def converse(turns: list[Turn], ask_after: bool = True) -> dict[str, Any]:
    """A Bedrock Converse request: content blocks are unions named by their member."""
    history: list[dict[str, Any]] = []
    for number, turn in enumerate(turns):
        history.append({"role": "user", "content": [{"text": f"q{number}"}]})
        blocks: list[dict[str, Any]] = [{"text": "t"}]
        blocks += [{"toolUse": {"toolUseId": i, "name": "f", "input": {}}} for i in turn.calls]
        history.append({"role": "assistant", "content": blocks})
        if turn.results:
            results = [{"toolResult": {"toolUseId": i, "content": []}} for i in turn.results]
            history.append({"role": "user", "content": results})
    if ask_after:
        history.append({"role": "assistant", "content": [{"text": "done"}]})
    return {"messages": history}


def gemini(turns: list[Turn], ask_after: bool = True) -> dict[str, Any]:
    """A Gemini request: each functionCall part of a model turn answered by a functionResponse
    part of the user turn after it; Code Assist wraps it as ``request``."""
    contents: list[dict[str, Any]] = []
    for number, turn in enumerate(turns):
        contents.append({"role": "user", "parts": [{"text": f"q{number}"}]})
        parts: list[dict[str, Any]] = [{"text": "t"}]
        parts += [{"functionCall": {"id": i, "name": "f", "args": {}}} for i in turn.calls]
        contents.append({"role": "model", "parts": parts})
        if turn.results:
            results = [
                {"functionResponse": {"id": i, "name": "f", "response": {}}} for i in turn.results
            ]
            contents.append({"role": "user", "parts": results})
    if ask_after:
        contents.append({"role": "model", "parts": [{"text": "done"}]})
    return {"contents": contents}


BUILDERS: dict[Api, Callable[..., dict[str, Any]]] = {
    CHAT: chat,
    MESSAGES: messages,
    RESPONSES: responses,
    Api.CONVERSE: converse,
    Api.GEMINI: gemini,
}


# --- by hand ---------------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(Api))
def test_a_clean_history_is_silent(api):
    turns = [Turn(["call_a", "call_b"], ["call_b", "call_a"]), Turn(["call_c"], ["call_c"])]
    assert check(BUILDERS[api](turns), api) == []
    # the last turn's calls wait for their results: not a problem
    assert check(BUILDERS[api]([*turns, Turn(["call_d"])], ask_after=False), api) == []


def test_chat_each_code_with_its_text():
    document = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"id": "call_a"}, {"id": "call_b"}]},
            {"role": "tool", "tool_call_id": "call_a"},
            {"role": "tool", "tool_call_id": "call_zzz"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "tool_calls": [{"id": ""}, {"id": "call_x|fc_y"}]},
            {"role": "tool", "tool_call_id": ""},
            {"role": "tool", "tool_call_id": "call_x|fc_y"},
            {"role": "assistant", "tool_calls": [{"id": "call_a"}]},
            {"role": "tool", "tool_call_id": "call_a"},
        ]
    }
    problems = check(document, CHAT)
    assert codes(problems) == [
        (MISSING, "messages[1].tool_calls[1].id", "call_b"),
        (ORPHAN, "messages[3].tool_call_id", "call_zzz"),
        (EMPTY, "messages[5].tool_calls[0].id", ""),
        (COMPOSITE, "messages[5].tool_calls[1].id", "call_x|fc_y"),
        (EMPTY, "messages[6].tool_call_id", ""),
        (COMPOSITE, "messages[7].tool_call_id", "call_x|fc_y"),
        (DUPLICATE, "messages[8].tool_calls[0].id", "call_a"),
    ]
    by_code: dict[str, Problem] = {}
    for one in problems:
        by_code.setdefault(one.code, one)
    assert by_code[ORPHAN].line() == (
        "orphan-result call_zzz at messages[3].tool_call_id: OpenAI Chat Completions answers "
        "\"Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.\""
    )
    assert by_code[MISSING].message == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_b"
    )
    assert by_code[EMPTY].message.startswith(
        "Invalid 'messages[5].tool_calls[0].id': empty string."
    )
    assert not by_code[DUPLICATE].verbatim and not by_code[COMPOSITE].verbatim
    assert (
        by_code[DUPLICATE]
        .line()
        .startswith(
            "duplicate-call call_a at messages[8].tool_calls[0].id: "
            "OpenAI Chat Completions: two calls"
        )
    )


def test_messages_each_code_with_its_text():
    document = messages(
        [
            Turn(["toolu_1", "toolu_2"], ["toolu_1", "toolu_9"]),
            Turn(["", "toolu_1"], ["", "toolu_1"]),
            Turn(["toolu_3"], []),
        ]
    )
    problems = check(document, MESSAGES)
    assert codes(problems) == [
        (MISSING, "messages[1].content[2].id", "toolu_2"),
        (ORPHAN, "messages[2].content[1].tool_use_id", "toolu_9"),
        (EMPTY, "messages[4].content[1].id", ""),
        (DUPLICATE, "messages[4].content[2].id", "toolu_1"),
        (EMPTY, "messages[5].content[0].tool_use_id", ""),
        (MISSING, "messages[7].content[1].id", "toolu_3"),
    ]
    texts = [p.message for p in problems]
    assert texts[0] == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_2. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."
    )
    assert texts[1] == (
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
        "message."
    )
    assert (
        texts[2]
        == "messages.4.content.1.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    )
    assert texts[3] == "messages.4.content.2: `tool_use` ids must be unique"
    assert all(p.verbatim for p in problems)


def test_messages_server_tools_answer_themselves():
    """A server tool's result sits in the same assistant message; it needs no tool_result."""
    document = {
        "messages": [
            {"role": "user", "content": "search"},
            {
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"},
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1"},
                ],
            },
            {"role": "user", "content": "thanks"},
            {"role": "assistant", "content": "ok"},
        ]
    }
    assert check(document, MESSAGES) == []


def test_responses_each_code_with_its_text():
    document = {
        "input": [
            {"role": "user", "content": "q"},
            {"type": "reasoning", "id": "rs_1"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1"},
            {"type": "function_call", "id": "fc_2", "call_id": "call_2"},
            {"type": "function_call_output", "call_id": "call_1"},
            {"type": "function_call_output", "call_id": "call_9"},
            {"type": "message", "role": "assistant", "content": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1"},
            {"type": "function_call_output", "call_id": "call_1"},
        ]
    }
    problems = check(document, RESPONSES)
    assert codes(problems) == [
        (MISSING, "input[3].call_id", "call_2"),
        (ORPHAN, "input[5].call_id", "call_9"),
        (DUPLICATE, "input[7].call_id", "call_1"),
        (DUPLICATE, "input[7].id", "fc_1"),
    ]
    assert problems[0].message == "No tool output found for function call call_2."
    assert problems[1].message == "No tool call found for function call output with call_id call_9."
    assert problems[3].message == (
        "Duplicate item found with id fc_1. Remove duplicate items from your input and try again."
    )
    assert problems[3].verbatim and not problems[2].verbatim


def test_responses_a_user_message_does_not_end_the_model_turn():
    document = responses([Turn(["call_1"], [])], ask_after=False)
    document["input"] += [
        {"role": "user", "content": "go on"},
        {"type": "function_call_output", "call_id": "call_1"},
    ]
    assert check(document, RESPONSES) == []


def test_responses_with_previous_response_id_has_no_orphans():
    """The calls are kept by the server: an output may answer a call not sent."""
    document = {
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "r"}],
    }
    assert check(document, RESPONSES) == []
    del document["previous_response_id"]
    assert codes(check(document, RESPONSES)) == [(ORPHAN, "input[0].call_id", "call_1")]


def test_encoded_and_raw_forms_pair():
    """Restored, ``tid1_x`` and ``x`` are one id; a tagged id names a call of its own."""
    raw = "functions.get_weather:0"
    assert check(chat([Turn([raw], [encode(raw)])]), CHAT) == []
    tagged = encode(raw, "safe", 2)
    turns = [Turn([encode(raw)], [encode(raw)]), Turn([tagged], [tagged])]
    assert check(chat(turns), CHAT) == []
    assert codes(check(chat([Turn([raw], [raw]), Turn([encode(raw)], [raw])]), CHAT)) == [
        (DUPLICATE, "messages[5].tool_calls[0].id", encode(raw))
    ]


def test_whitespace_is_composite():
    for value in ("call_a|fc_b", "call a", "call_a\nfc_b", "call\t"):
        assert pairing.id_codes(value) == (COMPOSITE,)
    assert pairing.id_codes("") == (EMPTY,)
    assert pairing.id_codes("functions.x:0") == ()


def test_check_request_reads_bytes_and_skips_bodies_without_calls():
    body = json.dumps(chat([Turn(["call_a"], ["call_zzz"])])).encode()
    found = toolid.check_pairing(body, path="/v1/chat/completions")
    assert [p.code for p in found] == [MISSING, ORPHAN]
    assert [p.code for p in toolid.check_pairing(body)] == [MISSING, ORPHAN]  # by its shape
    assert toolid.check_pairing(b'{"messages": [{"role": "user", "content": "hi"}]}') == []
    assert toolid.check_pairing(b"not json", path="/v1/chat/completions") == []
    assert toolid.check_pairing(b'{"tool_calls": [', path="/v1/chat/completions") == []


def test_the_data_agrees_with_the_table():
    """Every result and call member named is a position of its API, with that role."""
    for api, history in pairing.HISTORIES.items():
        table = {(p.kind, p.key, p.role) for p in positions(api, Doc.REQUEST)}
        assert all((kind, key, REFERS) in table for kind, key in history.results)
        assert all((kind, key, DEFINES) in table for kind, key in history.calls)
        for code in pairing.CODES:  # a call lacking an id: the same words in every API
            assert code in history.texts or code in LACKING_TEXTS


# --- by property -------------------------------------------------------------------------------

TURNS = st.lists(
    st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.randoms(use_true_random=False)),
    min_size=1,
    max_size=5,
)


def clean_turns(shapes: list[tuple[int, bool, bool, Any]], open_end: bool) -> list[Turn]:
    """Turns with distinct ids, each call answered (in any order); with ``open_end`` the last
    turn's calls are not answered yet."""
    turns, number = [], 0
    for calls, reasoning, text_after, rnd in shapes:
        ids = [f"call_{number + k}" for k in range(calls)]
        number += calls
        results = list(ids)
        rnd.shuffle(results)
        turns.append(Turn(ids, results, reasoning, text_after))
    if open_end:
        turns[-1].results = []
    return turns


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list(Api)), TURNS, st.booleans())
def test_clean_histories_have_no_problems(api, shapes, open_end):
    turns = clean_turns(shapes, open_end)
    document = BUILDERS[api](turns, ask_after=not open_end)
    assert check(document, api) == []
    assert_read_alike(document, api, [])


PLANTS = (ORPHAN, MISSING, EMPTY, DUPLICATE, COMPOSITE)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(list(Api)), TURNS, st.sampled_from(PLANTS), st.randoms(use_true_random=False)
)
def test_a_planted_problem_is_found_exactly_where_planted(api, shapes, plant, rnd):
    turns = clean_turns(shapes, open_end=False)
    answered = [t for t in turns if t.calls]
    if not answered:
        turns.append(Turn(["call_first"], ["call_first"]))
        answered = turns[-1:]
    turn = rnd.choice(answered)
    expected: list[tuple[str, str, Role]]  # code, id, role of the planted position(s)
    if plant == ORPHAN:  # an extra result for a call never made
        target = rnd.choice(turns)
        target.results.insert(rnd.randint(0, len(target.results)), "call_orphan")
        expected = [(ORPHAN, "call_orphan", REFERS)]
    elif plant == MISSING:  # a result dropped (by compaction, say), a later turn asks on
        gone = rnd.choice(turn.calls)
        turn.results.remove(gone)
        expected = [(MISSING, gone, DEFINES)]
    else:
        value = {EMPTY: "", COMPOSITE: "call_x|fc_y", DUPLICATE: turn.calls[0]}[plant]
        if plant == DUPLICATE:  # a retry: the call made again, later, with its result
            turns.append(Turn([value], [value]))
            expected = [(DUPLICATE, value, DEFINES)]
        else:  # the id of one call and its result
            old = rnd.choice(turn.calls)
            turn.calls[turn.calls.index(old)] = value
            turn.results[turn.results.index(old)] = value
            expected = [(plant, value, DEFINES), (plant, value, REFERS)]
    document = BUILDERS[api](turns)
    found = check(document, api)
    assert_read_alike(document, api, found)
    want = []
    for code, value, role in expected:
        nth = 1 if code == DUPLICATE else 0
        want.append((code, id_path(document, api, value, role, nth), value))
    assert sorted(codes(found)) == sorted(want)


# Plain, encoded (one id with its raw form), empty and composite ids, few enough to repeat.
_IDS = st.sampled_from(
    ["call_a", "call_b", "functions.f:0", encode("functions.f:0"), "", "call_a|fc_b"]
)


# An id that is printable but odd (a zero-width space): never composite, it pairs like any
# other. A turn of it, answered, opens a history and changes none of its problems but their
# element numbers, however the history is checked.
ODD = "call_\u200b"


def shifted(problems: list[Problem], by: int) -> list[tuple[str, str, str]]:
    """The code, path and id of each problem, its element number in the path less ``by``."""
    return [
        (p.code, re.sub(r"\d+", lambda m: str(int(m.group()) - by), p.path, count=1), p.id)
        for p in problems
    ]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(list(Api)),
    st.lists(st.tuples(st.lists(_IDS, max_size=3), st.lists(_IDS, max_size=3)), max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_a_history_has_the_same_problems_behind_an_odd_id(api, turns, ask_after, in_order):
    # Any calls and results, answered in order or not, in their turn or a later one: the
    # problems are the same with a turn of an odd id before them.
    history = [Turn(calls, calls if in_order else results) for calls, results in turns]
    document = BUILDERS[api](history, ask_after=ask_after)
    odd_document = BUILDERS[api]([Turn([ODD], [ODD]), *history], ask_after=ask_after)
    body, odd = json.dumps(document).encode(), json.dumps(odd_document).encode()
    opened = len(pairing.history_of(odd_document, api)[1]) - len(
        pairing.history_of(document, api)[1]
    )
    found = toolid.rewrite_request(body, api=api).pairing_problems()
    assert shifted(toolid.rewrite_request(odd, api=api).pairing_problems(), opened) == shifted(
        found, 0
    )
    assert (
        toolid.check_pairing(odd, api=api)
        == toolid.rewrite_request(odd, api=api).pairing_problems()
    )


@pytest.mark.parametrize("api", [CHAT, MESSAGES, Api.CONVERSE, Api.GEMINI])
def test_a_history_answered_in_order_is_clean(api):
    # What nearly every agent sends: each call answered in order, in the next message; an id
    # sent encoded in the call and raw in its result is one id. With an odd id in front too.
    raws = [f"functions.f:{k}" for k in range(3)]
    turns = [Turn([f"call_{k}", encode(raw)], [f"call_{k}", raw]) for k, raw in enumerate(raws)]
    for history in (turns, [Turn([ODD], [ODD]), *turns]):
        body = json.dumps(BUILDERS[api](history)).encode()
        assert toolid.rewrite_request(body, api=api).pairing_problems() == []
        assert toolid.check_pairing(body, api=api) == []


def assert_read_alike(document: dict[str, Any], api: Api, found: list[Problem]) -> None:
    """The bytes of ``document`` have the problems ``check`` found in it, read alone or from
    what rewriting them read (the ids and the labels of their history, natively or parsed),
    spelled compactly or spaced, with encoded ids or raw."""
    for spaced in (False, True):
        body = json.dumps(document, indent=1 if spaced else None).encode()
        assert toolid.check_pairing(body, api=api) == found
        assert toolid.rewrite_request(body, api=api).pairing_problems() == found
        # with client ids toolid made, which rewriting restores (so it reads the history)
        encoded = body.replace(b'"call_', b'"tid1_call_')
        expected = check(json.loads(encoded), api)
        assert toolid.check_pairing(encoded, api=api) == expected
        assert toolid.rewrite_request(encoded, api=api).pairing_problems() == expected


def id_path(document: dict[str, Any], api: Api, value: str, role: Role, nth: int) -> str:
    """The path of the nth call id (or result) ``value`` in document order."""
    key = "call_id" if api is RESPONSES else None
    found = [
        f.path
        for f in find_ids(document, api, Doc.REQUEST)
        if f.value == value and f.role is role and (key is None or f.key == key)
    ]
    return sorted(found, key=path_order)[nth]


def test_every_whitespace_character_makes_an_id_composite():
    spaces = [c for c in map(chr, range(0x110000)) if c.isspace()]
    assert len(spaces) > 20
    for space in spaces:
        document = chat([Turn([f"call_a{space}fc_b"], [f"call_a{space}fc_b"])])
        assert [p.code for p in check(document, CHAT)] == [COMPOSITE, COMPOSITE], hex(ord(space))
    for plain in ("call_\u200b", "call_\x00", "functions.get:0", "日本"):  # odd, not joined
        assert check(chat([Turn([plain], [plain])]), CHAT) == []


def test_a_request_without_calls_or_results_has_no_problems():
    bodies = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "call_zzz"}]},
        "/v1/responses": {"input": [{"role": "user", "content": "hi"}]},
        "/v1/messages": {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    }
    for path, body in bodies.items():
        assert toolid.check_pairing(json.dumps(body).encode(), path=path) == []


# --- what rewriting reads: ids and labels --------------------------------------------------

# Ids of every sort pairing tells apart: plain, encoded (one with its raw id), odd but not
# joined, empty, joined.
ODD_IDS = ("call_0", "call_1", "call_2", "tid1_call_1", "日本", "call_\u200b", "", "call_x|fc_y")


def test_a_history_is_read_with_its_labels_as_path_key_value():
    body = json.dumps(chat([Turn(["call_a"], ["call_a"])])).encode()
    located = locate(body, CHAT, Doc.HISTORY)
    assert located is not None and located.labels is not None
    assert located.labels[:3] == [
        ("messages[0].role", "role", "system"),
        ("messages[1].role", "role", "user"),
        ("messages[2].role", "role", "assistant"),
    ]
    assert [one.path for one in located.found] == [
        "messages[2].tool_calls[0].id",
        "messages[3].tool_call_id",
    ]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(Api)), TURNS, st.randoms(use_true_random=False))
def test_any_history_reads_alike_whatever_its_labels(api, shapes, rnd):
    """Elements that lose their role, have a type (with their role or alone), are no objects, a
    history that is one object, ids of every sort: the located check finds what ``check``
    does, and so does ``check_history`` of the same elements."""
    turns = [
        Turn(
            [rnd.choice(ODD_IDS) for _ in range(calls)],
            [rnd.choice(ODD_IDS) for _ in range(rnd.randint(0, calls + 1))],
            reasoning,
            text_after,
        )
        for calls, reasoning, text_after, _ in shapes
    ]
    document = BUILDERS[api](turns, ask_after=rnd.random() < 0.5)
    member, items = pairing.history_of(document, api)
    for number, item in enumerate(items):
        change = rnd.randrange(7)
        if change == 0:
            item.pop("role", None)
        elif change in (1, 2):  # a type, with the role (which says the kind) or without
            if change == 1:
                item.pop("role", None)
            item["type"] = rnd.choice(["message", "function_call", "reasoning"])
        elif change == 3:
            items[number] = "not an object"
    if rnd.random() < 0.1:
        document[member] = next((item for item in items if isinstance(item, dict)), {})
    found = check(document, api)
    assert_read_alike(document, api, found)
    assert pairing.check_history(elements_of(document, api), api) == found


def elements_of(document: dict[str, Any], api: Api) -> list[pairing.Element]:
    """The history of ``document``, element by element, with each element's ids."""
    member, items = pairing.history_of(document, api)
    numbered = re.compile(re.escape(member) + r"(?:\[(\d+)\]|\.)")
    ids: dict[int, list[Found]] = {}
    for one in find_ids(document, api, Doc.REQUEST):
        if (match := numbered.match(one.path)) is not None:
            ids.setdefault(int(match.group(1) or 0), []).append(one)
    return [
        pairing.Element(pairing.kind_of(item), ids.get(number, []))
        for number, item in enumerate(items)
    ]


# --- results not where the API wants them ------------------------------------------------------

TOOL_USE = {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}}
TOOL_RESULT = {"type": "tool_result", "tool_use_id": "toolu_a", "content": "r"}


def test_messages_results_only_in_the_message_right_after():
    """Anthropic: a tool_result not in the message right after its tool_use (a message came
    between) is misplaced: Anthropic answers with its missing-result text."""
    document = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": "interrupted"},
            {"role": "user", "content": [TOOL_RESULT]},
        ]
    }
    problems = check(document, MESSAGES)
    assert codes(problems) == [(MISPLACED, "messages[3].content[0].tool_use_id", "toolu_a")]
    assert problems[0].message.startswith(
        "messages.3: `tool_use` ids were found without `tool_result` blocks immediately after"
    )


def test_messages_results_come_first_in_their_message():
    document = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": [{"type": "text", "text": "note"}, TOOL_RESULT]},
        ]
    }
    assert codes(check(document, MESSAGES)) == [
        (MISPLACED, "messages[2].content[1].tool_use_id", "toolu_a")
    ]
    document["messages"][2]["content"].reverse()
    assert check(document, MESSAGES) == []


def test_messages_a_call_answered_in_no_next_message_is_missing():
    """A call followed by a message that holds no result (and more after it) is missing."""
    document = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [TOOL_USE]},
            {"role": "user", "content": "never mind"},
        ]
    }
    assert codes(check(document, MESSAGES)) == [(MISSING, "messages[1].content[0].id", "toolu_a")]


def test_an_output_before_its_call_is_misplaced():
    document = {
        "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call_output", "call_id": "call_1", "output": "r"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1"},
            {"role": "user", "content": "next"},
        ]
    }
    assert codes(check(document, RESPONSES)) == [(MISPLACED, "input[1].call_id", "call_1")]


def test_a_chat_result_after_the_next_user_message_is_misplaced():
    document = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": "call_a"}]},
            {"role": "user", "content": "and?"},
            {"role": "tool", "tool_call_id": "call_a"},
        ]
    }
    assert codes(check(document, CHAT)) == [(MISPLACED, "messages[3].tool_call_id", "call_a")]


def test_converse_names_missing_and_orphan_results_in_bedrocks_words():
    """Bedrock's texts name the message that should hold the results (the one after the
    call's) and the one holding too many."""
    document = converse([Turn(["a"], []), Turn(["b"], ["b", "zz"])])
    problems = check(document, Api.CONVERSE)
    assert [(p.code, p.message, p.verbatim) for p in problems] == [
        (
            MISSING,
            "Expected toolResult blocks at messages.2.content for the following Ids: a",
            True,
        ),
        (
            ORPHAN,
            "The number of toolResult blocks at messages.4.content exceeds the number of "
            "toolUse blocks of previous turn.",
            True,
        ),
    ]
