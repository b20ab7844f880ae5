"""The Responses API over WebSocket, sans I/O (``toolid.ResponsesConnection``): server
messages are rewritten as SSE events are, client messages as request bodies are; occurrence
tags across the responses of one connection (what it takes: the ids its client messages
define and the client ids given on it); fail open per message."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolid
from toolid import codec
from toolid.occurrence import NOTHING_TAKEN, Taken
from toolid.positions import Api
from toolid.sse import EventFramer, data_lines

DATA = Path(__file__).parent / "data"
KIMI = "functions.exec_command:0"
KIMI_1, KIMI_2, KIMI_3 = (codec.encode(KIMI, "safe", k) for k in (1, 2, 3))


def dumps(document: Any) -> bytes:
    return json.dumps(document).encode()


def call_item(call_id: str, item_id: str = "fc_1", arguments: str = "{}") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": "exec_command",
        "arguments": arguments,
    }


def response_events(
    call_ids: list[str], response_id: str = "resp_1", *, created: bool = True
) -> list[bytes]:
    """The server messages of one response calling a tool once per id (every id position:
    ``response.output``, ``item``, ``item_id``)."""
    events: list[Any] = []
    if created:
        events.append({"type": "response.created", "response": {"id": response_id, "output": []}})
    items = [call_item(cid, f"fc_{i}") for i, cid in enumerate(call_ids)]
    for index, item in enumerate(items):
        added = dict(item, arguments="")
        events += [
            {"type": "response.output_item.added", "output_index": index, "item": added},
            {
                "type": "response.function_call_arguments.delta",
                "output_index": index,
                "item_id": item["id"],
                "delta": "{}",
            },
            {
                "type": "response.function_call_arguments.done",
                "output_index": index,
                "item_id": item["id"],
                "arguments": "{}",
            },
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    events.append(
        {
            "type": "response.completed",
            "response": {"id": response_id, "status": "completed", "output": items},
        }
    )
    return [dumps(event) for event in events]


def create(input_items: list[Any], previous: str | None = None) -> bytes:
    frame: dict[str, Any] = {"type": "response.create", "model": "kimi-k2", "input": input_items}
    if previous is not None:
        frame["previous_response_id"] = previous
    return dumps(frame)


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


USER = {"type": "message", "role": "user", "content": "run pwd"}


def serve(connection: toolid.ResponsesConnection, frames: list[bytes]) -> list[toolid.Rewritten]:
    return [connection.server_message(frame) for frame in frames]


def call_ids_seen(results: list[toolid.Rewritten]) -> list[str]:
    """The call_ids the client got, per id position of each message, in order."""
    seen = []
    for result in results:
        event = json.loads(result.body)
        for item in [event.get("item"), *event.get("response", {}).get("output", [])]:
            if isinstance(item, dict) and "call_id" in item:
                seen.append(item["call_id"])
    return seen


# --- server messages: one Responses event each ---------------------------------------------


def test_every_id_position_of_a_response_gets_one_client_id_per_call() -> None:
    connection = toolid.ResponsesConnection()
    connection.client_message(create([USER]))
    results = serve(connection, response_events([KIMI, "functions.read:1"]))
    assert set(call_ids_seen(results)) == {KIMI_1, "tid1_functions-2Eread-3A1"}
    assert call_ids_seen(results) == [KIMI_1, KIMI_1, "tid1_functions-2Eread-3A1"] * 1 + [
        "tid1_functions-2Eread-3A1",
        KIMI_1,
        "tid1_functions-2Eread-3A1",
    ]
    assert all(result.problems == () for result in results)
    assert all(result.api is Api.RESPONSES for result in results)


def test_a_message_is_rewritten_exactly_as_the_same_sse_event() -> None:
    """The WebSocket message of an event and the SSE event's data come out byte-identical
    (the same table, the same code), for the recorded Responses stream."""
    stream = (DATA / "responses_stream.sse").read_bytes()
    events = EventFramer().feed(stream)
    datas = []
    for event in events:
        fields = data_lines(event, stream_start=not datas)
        datas.append(b"\n".join(event[f.start : f.end] for f in fields))
    sse = toolid.ResponseStream(api=Api.RESPONSES)
    rewritten = sse.feed(stream).body + sse.finish().body
    expected = []
    for event in EventFramer().feed(rewritten):
        fields = data_lines(event, stream_start=not expected)
        expected.append(b"\n".join(event[f.start : f.end] for f in fields))
    connection = toolid.ResponsesConnection()
    assert [r.body for r in serve(connection, datas)] == expected
    assert expected != datas  # the recorded stream has a Kimi-style id


def test_a_rewritten_message_differs_only_inside_the_id_literals() -> None:
    spaced = (
        b'{ "type" : "response.output_item.added",\n "output_index":0, "item" : {"type":'
        b'"function_call","id":"fc_1","call_id" :  "functions.exec_command:0","x":1.50,'
        b'"name":"\\u0065xec"}}'
    )
    result = toolid.ResponsesConnection().server_message(spaced)
    assert result.body == spaced.replace(KIMI.encode(), KIMI_1.encode())
    assert [(c.path, c.raw, c.client, c.action) for c in result.changes] == [
        ("item.call_id", KIMI, KIMI_1, "encoded")
    ]


@pytest.mark.parametrize(
    "frame",
    [
        b'{"type":"response.output_text.delta","output_index":0,"delta":"functions.x:0"}',
        b'{"type":"response.created","response":{"id":"resp_1","output":[]}}',
        b'{"type":"error","status":400,"error":{"message":"bad call_id"}}',
        b"not json at all",
        b"",
        b'{"type":"response.output_item.added","item":{"type":"function_call","call_id":"c_1"}}',
    ],
)
def test_messages_with_nothing_to_change_pass_as_the_same_bytes(frame: bytes) -> None:
    connection = toolid.ResponsesConnection()
    result = connection.server_message(frame)
    assert result.body is frame and not result.changed and result.problems == ()
    request = connection.client_message(frame)
    assert request.body is frame and not request.changed and request.problems == ()


def test_a_message_that_cannot_be_rewritten_passes_unchanged_with_a_problem() -> None:
    broken = b'{"type":"response.output_item.added","item":{"call_id":"functions.x:0",'
    result = toolid.ResponsesConnection().server_message(broken)
    assert result.body is broken and not result.changed
    assert [problem.code for problem in result.problems] == ["unrewritable"]
    assert result.problems[0].line().startswith("event left unchanged")
    request = toolid.ResponsesConnection().client_message(b'{"input":[{"call_id":"tid1_a-2Eb"')
    assert request.problems and request.problems[0].message.startswith("request left unchanged")


# --- client messages: one Responses request each -------------------------------------------


def test_client_messages_get_the_upstreams_ids_back() -> None:
    connection = toolid.ResponsesConnection()
    frame = create([output(KIMI_1)], previous="resp_1")
    result = connection.client_message(frame)
    assert result.body == frame.replace(KIMI_1.encode(), KIMI.encode())
    assert [(c.path, c.action) for c in result.changes] == [("input[0].call_id", "restored")]


def test_strict_destinations_keep_tagged_ids() -> None:
    connection = toolid.ResponsesConnection(rules="openai")
    frame = create([call_item(KIMI_2, "fc_2"), output(KIMI_2)])
    result = connection.client_message(frame)
    assert result.body == frame  # the raw id would be a duplicate (and unsafe): kept
    assert {c.action for c in result.changes} == {"kept"}
    with pytest.raises(ValueError, match="unknown rule set"):
        toolid.ResponsesConnection(rules="nonsense")


# --- occurrence tags across one connection -------------------------------------------------


def turns(connection: toolid.ResponsesConnection, raw: str, count: int, *, full: bool) -> list[str]:
    """``count`` tool turns, each response calling ``raw`` once; the client answers each
    with its output only (``previous_response_id``), or with the whole history (``full``).
    Returns the client id of each turn's call (every mention of it agreeing)."""
    history: list[Any] = [USER]
    connection.client_message(create(history))
    given = []
    for turn in range(count):
        results = serve(connection, response_events([raw], f"resp_{turn}"))
        seen = set(call_ids_seen(results))
        assert len(seen) == 1, seen
        client = seen.pop()
        given.append(client)
        if full:
            history += [call_item(client, f"fc_{turn}"), output(client)]
            frame = connection.client_message(create(history))
        else:
            frame = connection.client_message(create([output(client)], f"resp_{turn}"))
        sent = [json.loads(frame.body)["input"][-1]["call_id"]]
        assert sent == [raw]  # the upstream gets its own id back
    return given


@pytest.mark.parametrize("full", [False, True], ids=["previous_response_id", "full history"])
def test_a_reused_id_gets_a_new_tag_every_turn(full: bool) -> None:
    assert turns(toolid.ResponsesConnection(), KIMI, 3, full=full) == [KIMI_1, KIMI_2, KIMI_3]


@pytest.mark.parametrize("full", [False, True], ids=["previous_response_id", "full history"])
def test_a_reused_conforming_id_is_tagged_from_its_second_call(full: bool) -> None:
    given = turns(toolid.ResponsesConnection(), "call_0", 3, full=full)
    assert given == ["call_0", "tid1_call_0-_2", "tid1_call_0-_3"]
    call = turns(toolid.ResponsesConnection(profile="call"), "call_0", 2, full=full)
    assert call == ["call_0", "call_tid1_call_0-_2"]


def test_ids_never_reused_get_no_tag() -> None:
    connection = toolid.ResponsesConnection()
    connection.client_message(create([USER]))
    for turn in range(3):
        raw = f"functions.exec_command:{turn}"
        results = serve(connection, response_events([raw], f"resp_{turn}"))
        assert set(call_ids_seen(results)) == {codec.encode(raw, "safe")}
        connection.client_message(create([output(codec.encode(raw, "safe"))], f"resp_{turn}"))


def test_parallel_calls_with_one_id_in_one_response() -> None:
    connection = toolid.ResponsesConnection()
    results = serve(connection, response_events([KIMI, KIMI]))
    assert call_ids_seen(results) == [KIMI_1, KIMI_1, KIMI_2, KIMI_2, KIMI_1, KIMI_2]


def test_a_new_connection_starts_with_the_ids_its_messages_define() -> None:
    """After a reconnect nothing of the old connection is taken: a previous_response_id
    turn collides with nothing it can see; a full history brings its ids along."""
    old = toolid.ResponsesConnection()
    assert turns(old, KIMI, 2, full=False) == [KIMI_1, KIMI_2]
    fresh = toolid.ResponsesConnection()
    fresh.client_message(create([output(KIMI_2)], "resp_1"))
    assert set(call_ids_seen(serve(fresh, response_events([KIMI], "resp_2")))) == {KIMI_1}
    again = toolid.ResponsesConnection()
    again.client_message(create([USER, call_item(KIMI_1), output(KIMI_1)]))
    assert set(call_ids_seen(serve(again, response_events([KIMI], "resp_2")))) == {KIMI_2}


def test_a_server_that_sends_no_response_created() -> None:
    """Then a response starts at the first server message after a response.create."""
    connection = toolid.ResponsesConnection()
    given = []
    for turn in range(3):
        connection.client_message(create([USER] if not turn else [output(given[-1])]))
        results = serve(connection, response_events([KIMI], created=False))
        (client,) = set(call_ids_seen(results))
        given.append(client)
    assert given == [KIMI_1, KIMI_2, KIMI_3]
    assert connection.responses == 3


def test_response_created_starts_a_response_without_a_request() -> None:
    connection = toolid.ResponsesConnection()
    first = serve(connection, response_events([KIMI], "resp_1"))
    second = serve(connection, response_events([KIMI], "resp_2"))
    assert set(call_ids_seen(first)) == {KIMI_1} and set(call_ids_seen(second)) == {KIMI_2}
    assert connection.responses == 2 and connection.ended


def test_what_the_connection_takes() -> None:
    connection = toolid.ResponsesConnection()
    assert connection.taken.known() == frozenset()
    connection.client_message(create([USER, call_item("call_a", "fc_a"), output("call_a")]))
    serve(connection, response_events([KIMI]))
    assert {"call_a", "fc_a", KIMI_1, "fc_0"} <= connection.taken.ids()
    assert "call_b" not in connection.taken
    connection.client_message(create([output(KIMI_1)], "resp_1"))  # outputs define nothing
    assert connection.taken.ids() == {"call_a", "fc_a", KIMI_1, "fc_0"}


def test_many_large_client_messages_are_read_when_asked_and_kept_bounded() -> None:
    connection = toolid.ResponsesConnection()
    padding = {"type": "message", "role": "user", "content": "x" * (256 * 1024)}
    tracemalloc.start()
    try:
        for turn in range(12):  # conforming ids: nothing to restore, so nothing read yet
            message = create([padding, call_item(f"call_{turn}", f"fc_{turn}")])
            connection.client_message(message)
            del message
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 8 * 256 * 1024 + 512 * 1024  # the messages of at most 8 turns kept unread
    assert "call_0" in connection.taken and "call_11" in connection.taken
    assert "call_12" not in connection.taken
    assert {f"call_{turn}" for turn in range(12)} <= connection.taken.ids()


def test_taken_union() -> None:
    request = dumps({"input": [call_item("call_x", "fc_x")]})
    lazy = Taken(request, Api.RESPONSES)
    union = Taken.union([Taken.of({"a"}), lazy])
    assert "a" in union and "call_x" in union and "fc_x" in union and "b" not in union
    assert union.ids() == {"a", "call_x", "fc_x"}
    assert Taken.union([]) is NOTHING_TAKEN
    assert Taken.union([Taken.of(()), lazy]) is lazy
    assert Taken.union([Taken.of({"a"}), Taken.of({"b"})]).known() == {"a", "b"}
    assert Taken.union([Taken.of({"a"}), Taken(request, Api.RESPONSES)]).known() is None


# --- arbitrary messages ----------------------------------------------------------------------

MESSAGE = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([*response_events([KIMI, "call_0"]), create([USER]), create([output(KIMI_1)])]),
    st.builds(
        lambda frame, cut: frame[:cut],
        st.sampled_from([*response_events([KIMI]), create([output(KIMI_2)])]),
        st.integers(0, 300),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), MESSAGE), max_size=20))
def test_arbitrary_messages_never_raise_and_change_only_id_literals(
    messages: list[tuple[bool, bytes]],
) -> None:
    connection = toolid.ResponsesConnection()
    for from_client, content in messages:
        if from_client:
            result = connection.client_message(content)
        else:
            result = connection.server_message(content)
        if not result.changed:
            assert result.body == content
            continue
        assert not result.problems
        expected = content
        for change in result.changes:
            assert codec.decode(change.client) == change.raw
            old, new = json.dumps(change.client), json.dumps(change.raw)
            if not from_client:
                old, new = new, old
            expected = expected.replace(old.encode(), new.encode())
        assert result.body == expected  # only the id literals changed
