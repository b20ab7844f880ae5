"""The table of id positions (toolid/positions.py) against docs/positions.md.

Every document here is shaped like the real API's; each test asserts the exact multiset of
concrete paths and values that ``find_ids`` yields, and that look-alikes are not among them.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from typing import Any

import pytest

from toolid.apis import RECORDS
from toolid.positions import (
    DEFINES,
    HISTORY_LABELS,
    ID_KEYS,
    LABELS,
    LACKS,
    TABLE,
    Api,
    Doc,
    Found,
    Position,
    find_ids,
    history_members,
    positions,
)

# A step of the notation: "[]" or "[type=a|b]" (group 1: the types), or a member (group 2).
STEP = re.compile(r"\[(?:type=([^\]]*))?\]|\.?([^.\[]+)")

# An id that is everywhere in the documents below, also where it is not an id.
LOOK = "functions.get_weather:0"


# Every test here runs with the accelerators as installed and as pure Python.
pytestmark = pytest.mark.usefixtures("backend")


def found(document: Any, api: Api, doc: Doc) -> list[tuple[str, str]]:
    """The ids ``find_ids`` finds (not the calls lacking one: ``test_lacking_ids``)."""
    return sorted((f.path, f.value) for f in find_ids(document, api, doc) if f.role is not LACKS)


def assert_found(document: Any, api: Api, doc: Doc, expected: list[tuple[str, str]]) -> None:
    results = [f for f in find_ids(document, api, doc) if f.role is not LACKS]
    got = Counter((f.path, f.value) for f in results)
    assert got == Counter(expected)
    # every Found points at the member that really holds the value
    for f in results:
        assert f.holder[f.key] == f.value
        assert f.path.endswith(f.key)


# --- the table itself ------------------------------------------------------------------------


def test_every_position_compiles_and_is_served() -> None:
    for api, docs in TABLE.items():
        assert set(docs) == set(Doc) - {Doc.HISTORY}  # derived from the request's
        for doc, entries in docs.items():
            compiled = positions(api, doc)
            assert [(p.notation, p.role, p.kind) for p in compiled] == list(entries)
            for position, (path, role, kind) in zip(compiled, entries, strict=True):
                answer = doc in (Doc.RESPONSE, Doc.EVENT)
                required = answer and role is DEFINES and kind in RECORDS[api].ids_required
                assert position == Position.parse(path, role, kind, required=required)
                assert position.key in ID_KEYS
    assert set(TABLE) == set(Api)


def test_no_literal_is_at_two_positions() -> None:
    """Two positions of one document that name the same members (arrays aside: an object may
    stand for an array of one) filter on disjoint types, so no literal is at both: the native
    parser reports each literal once, and ``decide.Targets`` takes each span once."""
    for api in Api:
        for doc in Doc:
            for one, other in itertools.combinations(positions(api, doc), 2):
                steps = [STEP.findall(p.notation) for p in (one, other)]
                names = [[name for _, name in each if name] for each in steps]
                if names[0] != names[1]:
                    continue
                filters = [[types for types, name in each if not name] for each in steps]
                assert any(
                    a and b and not set(a.split("|")) & set(b.split("|"))
                    for a, b in zip(*filters, strict=False)
                ), (api, doc, one.notation, other.notation)


def test_a_history_is_the_requests_positions_then_its_elements_labels() -> None:
    for api in Api:
        members = history_members(api)
        history = [(p.notation, p.role, p.kind) for p in positions(api, Doc.HISTORY)]
        assert history == [
            *TABLE[api][Doc.REQUEST],
            *(
                (f"{member}[].{name}", LABELS, "label")
                for member in members
                for name in HISTORY_LABELS
            ),
        ]
        assert TABLE[api][Doc.REQUEST][0][0].startswith(members[0])
        assert all(any(p[0].startswith(m) for m in members) for p in TABLE[api][Doc.REQUEST])
    assert history_members(Api.GEMINI) == (
        "contents",
        "request.contents",
        "generateContentRequest.contents",
    )
    assert history_members(Api.CONVERSE) == ("messages", "input.converse.messages")
    assert not {"role", "type"} & ID_KEYS  # labels are no ids


def test_id_keys() -> None:
    assert (
        frozenset(
            {
                "id",
                "call_id",
                "tool_call_id",
                "tool_use_id",
                "tool_id",
                "approval_request_id",
                "item_id",
                "toolUseId",
            }
        )
        == ID_KEYS
    )


def _keys_and_markers(api: Api, doc: Doc) -> set[tuple[str, str]]:
    return {(p.key, marker) for p in positions(api, doc) for marker in p.markers}


def test_keys_and_markers() -> None:
    assert _keys_and_markers(Api.CHAT, Doc.REQUEST) == {
        ("id", "tool_calls"),
        ("tool_call_id", "messages"),
    }
    assert _keys_and_markers(Api.CHAT, Doc.RESPONSE) == {("id", "tool_calls")}
    assert _keys_and_markers(Api.CHAT, Doc.EVENT) == {("id", "tool_calls")}
    assert _keys_and_markers(Api.RESPONSES, Doc.REQUEST) == {
        ("call_id", "input"),
        ("id", "input"),
        ("approval_request_id", "input"),
    }
    assert _keys_and_markers(Api.RESPONSES, Doc.RESPONSE) == {
        ("call_id", "output"),
        ("id", "output"),
        ("approval_request_id", "output"),
    }
    event_markers = _keys_and_markers(Api.RESPONSES, Doc.EVENT)
    assert {pair for pair in event_markers if pair[0] != "item_id"} == {
        ("call_id", "item"),
        ("id", "item"),
        ("approval_request_id", "item"),
        ("call_id", "output"),
        ("id", "output"),
        ("approval_request_id", "output"),
    }
    item_id_markers = {marker for key, marker in event_markers if key == "item_id"}
    assert {
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
    } <= item_id_markers
    assert (
        not {
            "response.output_text.delta",
            "response.content_part.added",
            "response.reasoning_summary_text.delta",
        }
        & item_id_markers
    )
    assert _keys_and_markers(Api.MESSAGES, Doc.REQUEST) == {
        ("id", "content"),
        ("tool_use_id", "content"),
        ("tool_id", "caller"),
    }
    assert _keys_and_markers(Api.MESSAGES, Doc.RESPONSE) == {
        ("id", "content"),
        ("tool_use_id", "content"),
        ("tool_id", "caller"),
    }
    assert _keys_and_markers(Api.MESSAGES, Doc.EVENT) == {
        ("id", "content_block"),
        ("tool_use_id", "content_block"),
        ("tool_id", "caller"),
        ("id", "content"),
        ("tool_use_id", "content"),
    }
    assert _keys_and_markers(Api.GEMINI, Doc.REQUEST) == {
        ("id", "functionCall"),
        ("id", "functionResponse"),
    }
    for doc in (Doc.RESPONSE, Doc.EVENT):
        assert _keys_and_markers(Api.GEMINI, doc) == {("id", "functionCall")}


def test_markers_are_spelled_in_every_document_with_an_id() -> None:
    # The marker promise: any document with an id at a position spells '"marker"'.
    for document, api, doc in ALL_DOCUMENTS:
        text = json.dumps(document)
        for f in find_ids(document, api, doc):
            assert any(
                any(f'"{m}"' in text for m in p.markers) and p.key == f.key
                for p in positions(api, doc)
            ), (
                api,
                doc,
                f.path,
            )


@pytest.mark.parametrize(
    "bad",
    ["", "a[]", "a[role=user].b", "[]", "a[type=x]", "a[][].b", "a[type=x][].b"],
)
def test_parse_rejects_bad_notation(bad: str) -> None:
    with pytest.raises(ValueError):
        Position.parse(bad, DEFINES, "call")


def test_parse_reads_members_arrays_and_filters() -> None:
    position = Position.parse(
        "messages[].content[type=tool_use|server_tool_use].id", DEFINES, "call"
    )
    assert (position.key, position.markers, position.marked_by_key) == ("id", ("content",), True)
    filtered = Position.parse("[type=tool_use|server_tool_use].id", DEFINES, "call")
    assert filtered.markers == ("server_tool_use", "tool_use")
    assert not filtered.marked_by_key


# --- OpenAI Chat Completions -----------------------------------------------------------------


def chat_tool_call(call_id: Any, name: str = "get_weather") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": name,
            # tool arguments that mention the id, under an "id" key, as a JSON string
            "arguments": json.dumps({"id": LOOK, "city": "Paris"}),
        },
    }


CHAT_RESPONSE: dict[str, Any] = {
    "id": LOOK,  # the completion's own id: not a tool-call id
    "object": "chat.completion",
    "created": 1_760_000_000,
    "model": "kimi-k2",
    "system_fingerprint": LOOK,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": f"I will call {LOOK} now",
                "refusal": None,
                "tool_calls": [
                    chat_tool_call(LOOK),
                    chat_tool_call("get_weather:0#62786027996b4c40886cc7262bdf7382"),
                    chat_tool_call(7),  # not a string: not an id
                    chat_tool_call(None),
                    chat_tool_call({"id": LOOK}),
                    chat_tool_call([LOOK]),
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        },
        {
            "index": 1,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [chat_tool_call("sessions_history:183")],
            },
            "finish_reason": "tool_calls",
        },
        {"index": 2, "message": {"role": "assistant", "content": LOOK, "id": LOOK}},
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}


def test_chat_response() -> None:
    assert_found(
        CHAT_RESPONSE,
        Api.CHAT,
        Doc.RESPONSE,
        [
            ("choices[0].message.tool_calls[0].id", LOOK),
            (
                "choices[0].message.tool_calls[1].id",
                "get_weather:0#62786027996b4c40886cc7262bdf7382",
            ),
            ("choices[1].message.tool_calls[0].id", "sessions_history:183"),
        ],
    )


def test_chat_response_positions_are_not_request_or_event_positions() -> None:
    assert found(CHAT_RESPONSE, Api.CHAT, Doc.EVENT) == []
    assert found(CHAT_RESPONSE, Api.CHAT, Doc.REQUEST) == []


CHAT_EVENTS: list[dict[str, Any]] = [
    {
        "id": LOOK,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": LOOK}}],
    },
    {
        "id": LOOK,
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": LOOK,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
            }
        ],
    },
    {  # later deltas carry only index and an arguments fragment
        "id": LOOK,
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 0, "function": {"arguments": '{"id": "' + LOOK}}]
                },
            }
        ],
    },
    {
        "id": LOOK,
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 1, "id": "functions.get_time:1", "type": "function"},
                        {"index": 2, "id": 3},
                    ]
                },
            },
            {"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "x:1"}]}},
        ],
    },
    {"id": LOOK, "object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 3}},
]


def test_chat_events() -> None:
    expected: list[list[tuple[str, str]]] = [
        [],
        [("choices[0].delta.tool_calls[0].id", LOOK)],
        [],
        [
            ("choices[0].delta.tool_calls[0].id", "functions.get_time:1"),
            ("choices[1].delta.tool_calls[0].id", "x:1"),
        ],
        [],
    ]
    for event, want in zip(CHAT_EVENTS, expected, strict=True):
        assert_found(event, Api.CHAT, Doc.EVENT, want)
        assert found(event, Api.CHAT, Doc.RESPONSE) == []


CHAT_REQUEST: dict[str, Any] = {
    "model": "kimi-k2",
    "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": f"what did {LOOK} return?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [chat_tool_call(LOOK), chat_tool_call("functions.get_time:1")],
        },
        {"role": "tool", "tool_call_id": LOOK, "content": json.dumps({"id": LOOK})},
        {"role": "tool", "tool_call_id": "functions.get_time:1", "content": "12:00"},
        {"role": "tool", "tool_call_id": 5, "content": "not an id"},
        {"role": "user", "content": [{"type": "text", "text": LOOK, "id": LOOK}]},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    "tool_choice": "auto",
    "user": LOOK,
}


def test_chat_request() -> None:
    assert_found(
        CHAT_REQUEST,
        Api.CHAT,
        Doc.REQUEST,
        [
            ("messages[2].tool_calls[0].id", LOOK),
            ("messages[2].tool_calls[1].id", "functions.get_time:1"),
            ("messages[3].tool_call_id", LOOK),
            ("messages[4].tool_call_id", "functions.get_time:1"),
        ],
    )
    assert found(CHAT_REQUEST, Api.CHAT, Doc.RESPONSE) == []


# --- OpenAI Responses ------------------------------------------------------------------------

CALL_TYPES = [
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
]
OUTPUT_TYPES = [
    "function_call_output",
    "custom_tool_call_output",
    "computer_call_output",
    "shell_call_output",
    "apply_patch_call_output",
]
# Built-in tool calls: only their item id.
ID_ONLY_TYPES = [
    "mcp_call",
    "mcp_approval_request",
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
]


def responses_call(kind: str, n: int) -> dict[str, Any]:
    """A Responses tool call item shaped like the real API's, with ids ``<kind>.<n>``."""
    item: dict[str, Any] = {"type": kind, "id": f"fc.{kind}.{n}", "call_id": f"call:{kind}:{n}"}
    if kind == "function_call":
        item |= {"name": "get_weather", "arguments": json.dumps({"id": LOOK}), "status": "done"}
    elif kind == "custom_tool_call":
        item |= {"name": "exec", "input": f'print("{LOOK}")'}
    elif kind == "computer_call":
        item |= {
            "action": {"type": "click", "x": 1, "y": 2, "id": LOOK},
            "pending_safety_checks": [{"id": LOOK, "code": "c", "message": "m"}],
            "status": "completed",
        }
    elif kind == "local_shell_call":
        item |= {
            "action": {"type": "exec", "command": ["ls"], "env": {"ID": LOOK}},
            "status": "completed",
        }
    elif kind == "shell_call":
        item |= {"action": {"commands": ["echo " + LOOK]}, "status": "completed"}
    elif kind == "apply_patch_call":
        item |= {
            "operation": {"type": "update_file", "path": "a.py", "diff": LOOK},
            "status": "completed",
        }
    return item


def responses_output(kind: str, n: int) -> dict[str, Any]:
    call = kind.removesuffix("_output")
    item: dict[str, Any] = {"type": kind, "call_id": f"call:{call}:{n}"}
    if kind == "computer_call_output":
        item["output"] = {"type": "computer_screenshot", "image_url": "data:,"}
        item["acknowledged_safety_checks"] = [{"id": LOOK}]
    elif kind == "shell_call_output":
        item["output"] = [{"stdout": LOOK, "stderr": "", "outcome": {"type": "exit"}}]
    else:
        item["output"] = json.dumps({"id": LOOK})
    return item


def id_only(kind: str, n: int) -> dict[str, Any]:
    item: dict[str, Any] = {"type": kind, "id": f"{kind}.{n}", "status": "completed"}
    if kind == "mcp_call":
        item |= {"server_label": "s", "name": "t", "arguments": json.dumps({"id": LOOK})}
    elif kind == "mcp_approval_request":
        item |= {"server_label": "s", "name": "t", "arguments": "{}"}
    return item


LOOKALIKE_ITEMS: list[dict[str, Any]] = [
    # message and reasoning items: their ids are not tool-call ids
    {
        "type": "message",
        "id": LOOK,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": LOOK, "annotations": []}],
    },
    {"type": "reasoning", "id": LOOK, "summary": [{"type": "summary_text", "text": LOOK}]},
    {"type": "mcp_list_tools", "id": LOOK, "server_label": "s", "tools": []},
    # wrong or odd "type" values
    {"type": "function_call_", "id": LOOK, "call_id": LOOK},
    {"type": "Function_Call", "id": LOOK, "call_id": LOOK},
    {"type": ["function_call"], "id": LOOK, "call_id": LOOK},
    {"type": {"function_call": 1}, "id": LOOK, "call_id": LOOK},
    {"type": None, "id": LOOK, "call_id": LOOK},
    {"type": 1, "id": LOOK, "call_id": LOOK},
    {"id": LOOK, "call_id": LOOK},
    # right type, ids that are not strings
    {"type": "function_call", "id": 1, "call_id": None, "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": {"id": LOOK}, "output": "x"},
    {"type": "mcp_approval_response", "approval_request_id": [LOOK], "approve": True},
    # not an item at all
    LOOK,
    [{"type": "function_call", "id": "nested.in.list", "call_id": "nested:list"}],
    17,
    None,
]


def responses_items() -> tuple[list[Any], list[tuple[str, str]]]:
    """Items of every tool type, mixed with look-alikes; and the (relative path, id) found."""
    items: list[Any] = []
    expected: list[tuple[str, str]] = []

    def add(item: Any, *ids: tuple[str, str]) -> None:
        for key, value in ids:
            expected.append((f"[{len(items)}].{key}", value))
        items.append(item)

    for look in LOOKALIKE_ITEMS[:3]:
        add(look)
    for kind in CALL_TYPES:
        add(responses_call(kind, 1), ("id", f"fc.{kind}.1"), ("call_id", f"call:{kind}:1"))
    for kind in OUTPUT_TYPES:
        add(responses_output(kind, 1), ("call_id", f"call:{kind.removesuffix('_output')}:1"))
    # local_shell_call_output has only an id, which references the call
    add(
        {"type": "local_shell_call_output", "id": "call:local_shell_call:1", "output": LOOK},
        ("id", "call:local_shell_call:1"),
    )
    for kind in ID_ONLY_TYPES:
        add(id_only(kind, 1), ("id", f"{kind}.1"))
    add(
        {
            "type": "mcp_approval_response",
            "approval_request_id": "mcp_approval_request.1",
            "approve": True,
        },
        ("approval_request_id", "mcp_approval_request.1"),
    )
    add(
        {
            "type": "mcp_approval_response",
            "id": "mcpr:2",
            "approval_request_id": "mcpar:2",
            "approve": False,
            "reason": LOOK,
        },
        ("id", "mcpr:2"),
        ("approval_request_id", "mcpar:2"),
    )
    add({"type": "item_reference", "id": "fc.function_call.1"}, ("id", "fc.function_call.1"))
    for look in LOOKALIKE_ITEMS[3:]:
        add(look)
    add(
        responses_call("function_call", 2),
        ("id", "fc.function_call.2"),
        ("call_id", "call:function_call:2"),
    )
    return items, expected


def test_responses_response() -> None:
    items, rel = responses_items()
    response = {
        "id": LOOK,
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-oss",
        "output": items,
        "previous_response_id": LOOK,
        "instructions": LOOK,
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    expected = [("output" + path, value) for path, value in rel]
    assert_found(response, Api.RESPONSES, Doc.RESPONSE, expected)
    assert found(response, Api.RESPONSES, Doc.REQUEST) == []


def test_responses_request() -> None:
    items, rel = responses_items()
    request = {
        "model": "gpt-oss",
        "input": [{"role": "user", "content": LOOK}, *items],
        "previous_response_id": LOOK,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {}}],
        "metadata": {"id": LOOK, "call_id": LOOK},
    }
    expected = [
        (f"input[{int(path[1 : path.index(']')]) + 1}]" + path[path.index("]") + 1 :], v)
        for path, v in rel
    ]
    assert_found(request, Api.RESPONSES, Doc.REQUEST, expected)
    assert found(request, Api.RESPONSES, Doc.RESPONSE) == []


def test_responses_request_with_previous_response_id_only_outputs() -> None:
    request = {
        "model": "m",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": LOOK, "output": LOOK}],
    }
    assert_found(request, Api.RESPONSES, Doc.REQUEST, [("input[0].call_id", LOOK)])


def test_responses_request_with_string_input_has_no_ids() -> None:
    assert found({"model": "m", "input": LOOK}, Api.RESPONSES, Doc.REQUEST) == []


@pytest.mark.parametrize("kind", CALL_TYPES)
@pytest.mark.parametrize("event", ["response.output_item.added", "response.output_item.done"])
def test_responses_output_item_events(kind: str, event: str) -> None:
    item = responses_call(kind, 3)
    document = {"type": event, "sequence_number": 4, "output_index": 1, "item": item}
    assert_found(
        document,
        Api.RESPONSES,
        Doc.EVENT,
        [("item.id", f"fc.{kind}.3"), ("item.call_id", f"call:{kind}:3")],
    )


@pytest.mark.parametrize("kind", OUTPUT_TYPES)
def test_responses_output_item_event_with_output_items(kind: str) -> None:
    document = {"type": "response.output_item.done", "item": responses_output(kind, 3)}
    call = kind.removesuffix("_output")
    assert_found(document, Api.RESPONSES, Doc.EVENT, [("item.call_id", f"call:{call}:3")])


@pytest.mark.parametrize("kind", ID_ONLY_TYPES)
def test_responses_output_item_event_with_builtin_tools(kind: str) -> None:
    document = {"type": "response.output_item.added", "output_index": 0, "item": id_only(kind, 4)}
    assert_found(document, Api.RESPONSES, Doc.EVENT, [("item.id", f"{kind}.4")])


@pytest.mark.parametrize("look", [x for x in LOOKALIKE_ITEMS if not isinstance(x, list)])
def test_responses_output_item_event_lookalikes(look: Any) -> None:
    document = {"type": "response.output_item.added", "output_index": 0, "item": look}
    assert found(document, Api.RESPONSES, Doc.EVENT) == []


@pytest.mark.parametrize(
    "event",
    [
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ],
)
def test_responses_lifecycle_events(event: str) -> None:
    items, rel = responses_items()
    document = {
        "type": event,
        "sequence_number": 0,
        "response": {"id": LOOK, "object": "response", "status": "x", "output": items},
    }
    expected = [("response.output" + path, value) for path, value in rel]
    assert_found(document, Api.RESPONSES, Doc.EVENT, expected)


def test_responses_created_event_with_empty_output() -> None:
    document = {
        "type": "response.created",
        "response": {"id": LOOK, "object": "response", "output": []},
    }
    assert found(document, Api.RESPONSES, Doc.EVENT) == []


@pytest.mark.parametrize(
    "event",
    ["response.function_call_arguments.delta", "response.function_call_arguments.done"],
)
def test_responses_function_call_arguments_events(event: str) -> None:
    document = {
        "type": event,
        "sequence_number": 9,
        "item_id": "fc.function_call.1",
        "output_index": 0,
        ("delta" if event.endswith("delta") else "arguments"): '{"id": "' + LOOK + '"}',
    }
    assert_found(document, Api.RESPONSES, Doc.EVENT, [("item_id", "fc.function_call.1")])


def test_responses_event_non_string_item_id() -> None:
    for item_id in (1, None, [LOOK], {"id": LOOK}):
        document = {"type": "response.function_call_arguments.delta", "item_id": item_id}
        assert found(document, Api.RESPONSES, Doc.EVENT) == []


def test_responses_message_item_id_is_consistent_across_events() -> None:
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"type": "message", "id": "msg:1", "role": "assistant", "content": []},
    }
    delta = {
        "type": "response.output_text.delta",
        "item_id": "msg:1",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hi",
    }
    assert found(added, Api.RESPONSES, Doc.EVENT) == []
    assert found(delta, Api.RESPONSES, Doc.EVENT) == []


def test_responses_other_events_have_no_ids() -> None:
    for document in [
        {"type": "response.output_text.done", "text": LOOK, "id": LOOK},
        {"type": "error", "code": "x", "message": LOOK, "param": None},
        {"type": "response.output_item.added", "item": None},
        {"type": "response.completed", "response": None},
        {"type": "response.completed", "response": {"output": {"type": "message", "id": LOOK}}},
    ]:
        assert found(document, Api.RESPONSES, Doc.EVENT) == []


def test_responses_event_output_as_single_object() -> None:
    # '[]' treats an object as its own single element
    document = {
        "type": "response.completed",
        "response": {"output": responses_call("shell_call", 5)},
    }
    assert_found(
        document,
        Api.RESPONSES,
        Doc.EVENT,
        [
            ("response.output.id", "fc.shell_call.5"),
            ("response.output.call_id", "call:shell_call:5"),
        ],
    )


# --- Anthropic Messages ----------------------------------------------------------------------


def anthropic_blocks() -> tuple[list[Any], list[tuple[str, str]]]:
    """Content blocks of every kind that carries an id, with look-alikes between them."""
    blocks: list[Any] = []
    expected: list[tuple[str, str]] = []

    def add(block: Any, *ids: tuple[str, str]) -> None:
        for key, value in ids:
            expected.append((f"[{len(blocks)}].{key}", value))
        blocks.append(block)

    add({"type": "thinking", "thinking": LOOK, "signature": "sig"})
    add({"type": "text", "text": f"Let me call {LOOK}", "citations": None})
    add(
        {
            "type": "tool_use",
            "id": LOOK,
            "name": "get_weather",
            # tool input with an "id" key holding the same string
            "input": {"id": LOOK, "tool_use_id": LOOK, "caller": {"tool_id": LOOK}},
        },
        ("id", LOOK),
    )
    add(
        {
            "type": "server_tool_use",
            "id": "srvtoolu_01.a",
            "name": "web_search",
            "input": {"query": LOOK},
        },
        ("id", "srvtoolu_01.a"),
    )
    add(
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_01.a",
            "content": [
                {"type": "web_search_result", "url": "u", "title": LOOK, "encrypted_content": "e"}
            ],
        },
        ("tool_use_id", "srvtoolu_01.a"),
    )
    add(
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu:2", "content": {"type": "x"}},
        ("tool_use_id", "srvtoolu:2"),
    )
    add(
        {
            "type": "server_tool_use",
            "id": "srvtoolu:3",
            "name": "code_execution",
            "input": {"code": LOOK},
        },
        ("id", "srvtoolu:3"),
    )
    add(
        {
            "type": "code_execution_tool_result",
            "tool_use_id": "srvtoolu:3",
            "content": {"type": "code_execution_result", "stdout": LOOK, "return_code": 0},
        },
        ("tool_use_id", "srvtoolu:3"),
    )
    add(
        {
            # a tool call made from inside code execution (programmatic tool calling)
            "type": "tool_use",
            "id": "toolu:4",
            "name": "query_db",
            "input": {"sql": LOOK},
            "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu:3"},
        },
        ("id", "toolu:4"),
        ("caller.tool_id", "srvtoolu:3"),
    )
    add(
        {
            "type": "mcp_tool_use",
            "id": "mcptoolu:5",
            "name": "t",
            "server_name": "s",
            "input": {"id": LOOK},
        },
        ("id", "mcptoolu:5"),
    )
    add(
        {
            "type": "mcp_tool_result",
            "tool_use_id": "mcptoolu:5",
            "is_error": False,
            "content": [{"type": "text", "text": LOOK}],
        },
        ("tool_use_id", "mcptoolu:5"),
    )
    # look-alikes: wrong types, non-string ids
    add({"type": "text", "text": LOOK, "id": LOOK})
    add({"type": "redacted_thinking", "data": LOOK, "id": LOOK})
    add({"type": ["tool_use"], "id": LOOK, "name": "x", "input": {}})
    add({"type": {"tool_use": True}, "id": LOOK, "name": "x", "input": {}})
    add({"type": None, "id": LOOK})
    add({"id": LOOK, "name": "x", "input": {}})
    add({"type": "Tool_Use", "id": LOOK, "name": "x", "input": {}})
    add({"type": "tool_use", "id": 12, "name": "x", "input": {}})
    add({"type": "tool_use", "id": None, "name": "x", "input": {}})
    add({"type": "tool_use", "id": {"id": LOOK}, "name": "x", "input": {}})
    add({"type": "web_search_tool_result", "tool_use_id": [LOOK], "content": []})
    add(
        {"type": "tool_use", "id": "toolu_ok", "caller": {"type": "direct"}, "input": {}},
        ("id", "toolu_ok"),
    )
    add({"type": "tool_use", "id": "toolu_ok2", "caller": LOOK, "input": {}}, ("id", "toolu_ok2"))
    add(LOOK)
    add(3)
    add([{"type": "tool_use", "id": "nested.in.list"}])
    return blocks, expected


def test_anthropic_response() -> None:
    blocks, rel = anthropic_blocks()
    message = {
        "id": LOOK,  # the message id: not a tool-call id
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": blocks,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "container": {"id": LOOK},
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    assert_found(message, Api.MESSAGES, Doc.RESPONSE, [("content" + p, v) for p, v in rel])
    assert found(message, Api.MESSAGES, Doc.REQUEST) == []


def test_anthropic_request() -> None:
    blocks, rel = anthropic_blocks()
    request = {
        "model": "claude",
        "max_tokens": 100,
        "system": [{"type": "text", "text": LOOK}],
        "metadata": {"user_id": LOOK},
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": f"Please call {LOOK}"},
            {"role": "assistant", "content": blocks},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": LOOK,
                        "content": [{"type": "text", "text": LOOK}],
                        "is_error": False,
                    },
                    {"type": "tool_result", "tool_use_id": "toolu:4", "content": LOOK},
                    {"type": "text", "text": LOOK},
                ],
            },
        ],
    }
    expected = [("messages[1].content" + p, v) for p, v in rel] + [
        ("messages[2].content[0].tool_use_id", LOOK),
        ("messages[2].content[1].tool_use_id", "toolu:4"),
    ]
    assert_found(request, Api.MESSAGES, Doc.REQUEST, expected)
    assert found(request, Api.MESSAGES, Doc.RESPONSE) == []


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"type": "tool_use", "id": LOOK, "name": "get_weather", "input": {}},
            [("content_block.id", LOOK)],
        ),
        (
            {"type": "server_tool_use", "id": "srvtoolu:1", "name": "web_search", "input": {}},
            [("content_block.id", "srvtoolu:1")],
        ),
        (
            {
                "type": "mcp_tool_use",
                "id": "mcptoolu:1",
                "name": "t",
                "server_name": "s",
                "input": {},
            },
            [("content_block.id", "mcptoolu:1")],
        ),
        (
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu:1", "content": []},
            [("content_block.tool_use_id", "srvtoolu:1")],
        ),
        (
            {
                "type": "tool_use",
                "id": "toolu:2",
                "name": "q",
                "input": {},
                "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu:1"},
            },
            [("content_block.id", "toolu:2"), ("content_block.caller.tool_id", "srvtoolu:1")],
        ),
        ({"type": "text", "text": LOOK}, []),
        ({"type": "thinking", "thinking": LOOK, "signature": ""}, []),
        ({"type": "text", "text": "", "id": LOOK}, []),
        ({"type": ["tool_use"], "id": LOOK}, []),
        ({"type": "tool_use", "id": 5, "input": {}}, []),
    ],
)
def test_anthropic_content_block_start(
    block: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    document = {"type": "content_block_start", "index": 1, "content_block": block}
    assert_found(document, Api.MESSAGES, Doc.EVENT, expected)


def test_anthropic_message_start() -> None:
    blocks, rel = anthropic_blocks()
    document = {
        "type": "message_start",
        "message": {
            "id": LOOK,
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": blocks,
            "stop_reason": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    }
    assert_found(document, Api.MESSAGES, Doc.EVENT, [("message.content" + p, v) for p, v in rel])
    empty = {"type": "message_start", "message": {"id": LOOK, "type": "message", "content": []}}
    assert found(empty, Api.MESSAGES, Doc.EVENT) == []


def test_anthropic_other_events_have_no_ids() -> None:
    for document in [
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"id": "' + LOOK + '"'},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": LOOK}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop"},
        {"type": "ping"},
        {"type": "error", "error": {"type": "overloaded_error", "message": LOOK}},
        {"type": "content_block_start", "index": 0, "content_block": None},
        {"type": "message_start", "message": LOOK},
    ]:
        assert found(document, Api.MESSAGES, Doc.EVENT) == []


# --- every API, every kind of document: junk and look-alikes ---------------------------------

ALL_DOCUMENTS: list[tuple[Any, Api, Doc]] = [
    (CHAT_RESPONSE, Api.CHAT, Doc.RESPONSE),
    (CHAT_REQUEST, Api.CHAT, Doc.REQUEST),
    *[(event, Api.CHAT, Doc.EVENT) for event in CHAT_EVENTS],
    ({"output": responses_items()[0]}, Api.RESPONSES, Doc.RESPONSE),
    ({"input": responses_items()[0]}, Api.RESPONSES, Doc.REQUEST),
    (
        {"type": "response.output_item.added", "item": responses_call("function_call", 1)},
        Api.RESPONSES,
        Doc.EVENT,
    ),
    ({"content": anthropic_blocks()[0]}, Api.MESSAGES, Doc.RESPONSE),
    (
        {"messages": [{"role": "assistant", "content": anthropic_blocks()[0]}]},
        Api.MESSAGES,
        Doc.REQUEST,
    ),
]


JUNK: list[Any] = [
    None,
    0,
    1.5,
    True,
    "",
    LOOK,
    [],
    [LOOK],
    {},
    {"type": [1]},
    {"type": ["tool_use"], "id": LOOK},
    {"id": LOOK, "call_id": LOOK, "tool_call_id": LOOK, "tool_use_id": LOOK, "item_id": 1},
    {
        "messages": LOOK,
        "choices": LOOK,
        "input": LOOK,
        "output": LOOK,
        "content": LOOK,
        "item": LOOK,
        "response": LOOK,
        "content_block": LOOK,
        "message": LOOK,
    },
    {
        "messages": [None, 1, LOOK, []],
        "choices": [None, {"message": None}, {"delta": 1}],
        "input": [None, {"type": None}],
        "output": [[], 1],
        "content": [None, {"caller": LOOK}],
        "item": [],
        "response": {"output": None},
        "content_block": [],
        "message": {"content": 1},
    },
    {"choices": [{"message": {"tool_calls": {"id": 1}}}]},
]


@pytest.mark.parametrize("junk", JUNK, ids=lambda j: repr(j)[:40])
def test_junk_yields_nothing(junk: Any) -> None:
    for api in Api:
        for doc in Doc:
            assert found(junk, api, doc) == []


def test_object_is_its_own_single_element() -> None:
    # Responses/Anthropic tolerate an object where an array is expected; so does the walker.
    document = {"choices": {"message": {"tool_calls": {"id": LOOK}}}}
    assert_found(document, Api.CHAT, Doc.RESPONSE, [("choices.message.tool_calls.id", LOOK)])


def test_found_holder_is_the_parsed_object() -> None:
    call = {"id": LOOK, "type": "function"}
    document = {"choices": [{"message": {"tool_calls": [call]}}]}
    (f,) = find_ids(document, Api.CHAT, Doc.RESPONSE)
    assert isinstance(f, Found)
    assert f.holder is call
    assert f.key == "id"


def test_order_within_one_position_follows_the_document() -> None:
    document = {"content": [{"type": "tool_use", "id": f"t:{i}"} for i in range(20)]}
    values = [f.value for f in find_ids(document, Api.MESSAGES, Doc.RESPONSE)]
    assert values == [f"t:{i}" for i in range(20)]


def test_ids_in_a_response_carry_their_call_number_in_a_request_none() -> None:
    """Responses and events number each call (choice, tool-call index); a request's history
    does not: nothing there is told apart by call (its walker does no numbering)."""
    calls = [chat_tool_call("a"), {**chat_tool_call("b"), "index": 5}]
    response = {"choices": [{"index": 0, "message": {"tool_calls": calls}}]}
    found = find_ids(response, Api.CHAT, Doc.RESPONSE)
    assert [(f.value, f.call) for f in found] == [("a", (0, 0)), ("b", (0, 5))]
    request = {"messages": [{"role": "assistant", "tool_calls": calls}, {"tool_call_id": "a"}]}
    found = find_ids(request, Api.CHAT, Doc.REQUEST)
    assert [(f.value, f.path, f.call) for f in found] == [
        ("a", "messages[0].tool_calls[0].id", ()),
        ("b", "messages[0].tool_calls[1].id", ()),
        ("a", "messages[1].tool_call_id", ()),
    ]
