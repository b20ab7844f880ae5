"""Calls lacking a usable id (issue 43): properties through the public API and the stream rewriter.

An upstream answer whose call has no id (the member missing, or null), a number or a boolean
where its client requires a string gets one: a minted ``tid1_-n`` (``tid1_-n-_2``, ...) or the
value's ``tid1_-j<text>`` (codec.encode_value), each the first one neither the request's history
nor an earlier call of the answer holds. A follow-up request gives back what the upstream sent:
the number as a number (unquoted, its own spelling), a minted id as itself.

- uniqueness across calls and turns (``rewrite_request(...).taken`` / ``taken_ids`` of the
  request as the client sent it, as the addon passes them);
- a Chat stream whose calls lack ids in every way (missing in all chunks, null, a number, an id on
  index 0 only, an id that changes on later chunks), and Responses / Messages / Converse streams:
  every split gives the same bytes and the same changes, on every backend, and the exact bytes an
  independent oracle builds;
- the buffered round trip of numeric ids in Chat, Responses, Messages and Converse: only the
  literals change, both ways.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import toolid
from tests.test_codec import json_scalars
from tests.test_jsonparse import stdlib_only
from tests.test_stream import bytewise, run, split_at
from toolid import native
from toolid.codec import decode, encode, encode_value, mint
from toolid.occurrence import CallIds, Taken
from toolid.positions import Api

MENTION_APIS = (Api.CHAT, Api.RESPONSES, Api.MESSAGES, Api.CONVERSE)
BACKENDS = ("native", "orjson", "python")

# An id member's JSON text (a string's literal, a number, true, false, null), or None: no member.
type IdText = str | None


def literal(value: str) -> str:
    """A string's JSON literal as servers write it (UTF-8, no needless escapes)."""
    return json.dumps(value, ensure_ascii=False)


def is_string(text: IdText) -> bool:
    return text is not None and text.startswith('"')


@contextmanager
def backend(name: str) -> Iterator[None]:
    """Run as installed ("native": the native parser and orjson), without the native parser
    ("orjson"), or as pure standard-library Python ("python"), as tests/conftest.py's
    ``backend`` fixture does (a fixture hypothesis cannot take: it is per test, not per
    example)."""
    if name == "native":
        yield
    elif name == "orjson":
        saved, native.extension = native.extension, None
        try:
            yield
        finally:
            native.extension = saved
    else:
        with stdlib_only():
            yield


class Oracle:
    """The client ids a response's calls get, by the wire format alone: for each call in order,
    the first of id(1), id(2), ... that neither the history takes nor an earlier call got."""

    def __init__(self, taken: Sequence[str] = ()) -> None:
        self.taken = set(taken)
        self.given: list[str] = []

    def client(self, text: IdText) -> str:
        """The client id of the next call, whose id member holds ``text``."""
        make: Callable[[int], str]
        if text is None or text == "null":
            make = lambda k: mint("safe", k)  # noqa: E731
        elif is_string(text):
            raw = json.loads(text)
            make = lambda k: encode(raw, "safe", k)  # noqa: E731
        else:
            make = lambda k: encode_value(text, "safe", k)  # noqa: E731
        client = next(
            c for c in map(make, itertools.count(1)) if c not in self.taken and c not in self.given
        )
        self.given.append(client)
        return client


def change_of(text: IdText, client: str) -> tuple[str, str, str] | None:
    """The (action, raw, client) a definition's change says, None for an id that passes."""
    if text is None:
        return ("minted", "", client)
    if text == "null":
        return ("minted", "null", client)
    raw = json.loads(text) if is_string(text) else text
    return None if raw == client else ("encoded", raw, client)


def restored_text(text: IdText, client: str) -> str:
    """What a follow-up request holds where the client sent ``client``: the upstream's own id
    (a number as its text), a minted id as itself."""
    return literal(client) if text is None or text == "null" else text


# --- requests and buffered responses of each API, with the id literals given --------------------


def history_request(api: Api, ids: Sequence[str], results: Sequence[str] | None = None) -> bytes:
    """A request whose history holds one tool turn: a call per id literal in ``ids`` (each
    named ``f<n>``), then one result per literal in ``results`` (default: ``ids``)."""
    results = ids if results is None else results
    if api is Api.CHAT:
        calls = ",".join(
            f'{{"id":{i},"type":"function","function":{{"name":"f{n}","arguments":"{{}}"}}}}'
            for n, i in enumerate(ids)
        )
        outputs = "".join(f',{{"role":"tool","tool_call_id":{i},"content":"ok"}}' for i in results)
        text = (
            '{"model":"m","messages":[{"role":"user","content":"go"},'
            f'{{"role":"assistant","content":null,"tool_calls":[{calls}]}}{outputs}]}}'
        )
    elif api is Api.RESPONSES:
        calls = "".join(
            f',{{"type":"function_call","id":"fc_h{n}","call_id":{i},"name":"f{n}",'
            '"arguments":"{}"}'
            for n, i in enumerate(ids)
        )
        outputs = "".join(
            f',{{"type":"function_call_output","call_id":{i},"output":"ok"}}' for i in results
        )
        text = f'{{"model":"m","input":[{{"role":"user","content":"go"}}{calls}{outputs}]}}'
    elif api is Api.MESSAGES:
        calls = ",".join(
            f'{{"type":"tool_use","id":{i},"name":"f{n}","input":{{}}}}' for n, i in enumerate(ids)
        )
        outputs = ",".join(
            f'{{"type":"tool_result","tool_use_id":{i},"content":"ok"}}' for i in results
        )
        text = (
            '{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"go"},'
            f'{{"role":"assistant","content":[{calls}]}},{{"role":"user","content":[{outputs}]}}]}}'
        )
    else:
        calls = ",".join(
            f'{{"toolUse":{{"toolUseId":{i},"name":"f{n}","input":{{}}}}}}'
            for n, i in enumerate(ids)
        )
        outputs = ",".join(
            f'{{"toolResult":{{"toolUseId":{i},"content":[{{"text":"ok"}}]}}}}' for i in results
        )
        text = (
            '{"messages":[{"role":"user","content":[{"text":"go"}]},'
            f'{{"role":"assistant","content":[{calls}]}},{{"role":"user","content":[{outputs}]}}]}}'
        )
    return text.encode()


def _member(key: str, text: IdText) -> str:
    """The id member, first in its object (nothing when ``text`` is None: no member)."""
    return "" if text is None else f'"{key}":{text},'


def buffered_response(api: Api, ids: Sequence[IdText]) -> bytes:
    """A buffered answer with a call per entry of ``ids``, the id member first in each call
    (where toolid puts a member it adds, so the answer with the client ids is this same
    function's output)."""
    if api is Api.CHAT:
        calls = ",".join(
            f'{{{_member("id", i)}"type":"function",'
            f'"function":{{"name":"f{n}","arguments":"{{}}"}}}}'
            for n, i in enumerate(ids)
        )
        text = (
            '{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":'
            f'{{"role":"assistant","content":null,"tool_calls":[{calls}]}},'
            '"finish_reason":"tool_calls"}]}'
        )
    elif api is Api.RESPONSES:
        calls = ",".join(
            f'{{{_member("call_id", i)}"type":"function_call","id":"fc_{n}","name":"f{n}",'
            '"arguments":"{}","status":"completed"}'
            for n, i in enumerate(ids)
        )
        text = f'{{"id":"resp_1","object":"response","status":"completed","output":[{calls}]}}'
    elif api is Api.MESSAGES:
        calls = ",".join(
            f'{{{_member("id", i)}"type":"tool_use","name":"f{n}","input":{{}}}}'
            for n, i in enumerate(ids)
        )
        text = (
            '{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text",'
            f'"text":"ok"}},{calls}],"stop_reason":"tool_use"}}'
        )
    else:
        calls = ",".join(
            f'{{"toolUse":{{{_member("toolUseId", i)}"name":"f{n}","input":{{}}}}}}'
            for n, i in enumerate(ids)
        )
        text = (
            '{"output":{"message":{"role":"assistant","content":[{"text":"ok"},'
            f'{calls}]}}}},"stopReason":"tool_use"}}'
        )
    return text.encode()


def call_ids(api: Api, document: bytes) -> list[Any]:
    """The id of each call of a buffered answer (``MISSING`` where it has none)."""
    doc = json.loads(document)
    if api is Api.CHAT:
        calls, key = doc["choices"][0]["message"]["tool_calls"], "id"
    elif api is Api.RESPONSES:
        calls, key = doc["output"], "call_id"
    elif api is Api.MESSAGES:
        calls, key = [c for c in doc["content"] if c["type"] == "tool_use"], "id"
    else:
        content = doc["output"]["message"]["content"]
        calls, key = [c["toolUse"] for c in content if "toolUse" in c], "toolUseId"
    return [call.get(key, MISSING) for call in calls]


MISSING = object()


# --- uniqueness across calls and turns ----------------------------------------------------------

lacking_texts = st.sampled_from([None, "null"])
# what upstreams that number their calls send: the same few numbers every turn
small_values = st.sampled_from(["0", "7", "7", "1.0", "-1", "true", "false"])
unusable_texts = st.one_of(lacking_texts, small_values)


@pytest.mark.parametrize("api", MENTION_APIS, ids=str)
@pytest.mark.parametrize("taken_from", ["rewrite_request", "taken_ids"])
@settings(max_examples=40, deadline=None)
@given(turns=st.lists(st.lists(unusable_texts, min_size=1, max_size=5), min_size=1, max_size=4))
@example(turns=[[None, None, None], ["null", "null"], [None]])
@example(turns=[["7"], ["7"], ["7"]])
def test_ids_are_unique_across_calls_and_turns(
    api: Api, taken_from: str, turns: list[list[IdText]]
) -> None:
    """Each turn's calls get distinct ids, none of which the history holds: a call with no id
    gets the next free minted one, a number the next free tag of its own."""
    history: list[str] = []  # the client ids of every call so far, as the client keeps them
    restored: list[str] = []  # what the upstream should get back for each
    for texts in turns:
        request = history_request(api, [literal(c) for c in history])
        taken = (
            toolid.rewrite_request(request, api=api).taken
            if taken_from == "rewrite_request"
            else toolid.taken_ids(request, api)
        )
        answer = buffered_response(api, texts)
        rewritten = toolid.rewrite_response(answer, api=api, taken=taken)
        assert rewritten.problems == ()
        oracle = Oracle(history)
        expected = [oracle.client(text) for text in texts]
        assert rewritten.body == buffered_response(api, [literal(c) for c in expected])
        clients = call_ids(api, rewritten.body)
        assert clients == expected
        assert len(set(clients)) == len(clients)
        assert not set(clients) & set(history)
        assert [(c.action, c.raw, c.client) for c in rewritten.changes] == [
            change_of(text, client) for text, client in zip(texts, expected, strict=True)
        ]
        history += clients
        restored += [restored_text(t, c) for t, c in zip(texts, expected, strict=True)]
    # The whole conversation goes back: every number as the upstream spelled it, every minted
    # id as itself (the history of one request holding all the turns' calls).
    request = history_request(api, [literal(c) for c in history])
    back = toolid.rewrite_request(request, api=api)
    assert back.problems == ()
    assert back.body == history_request(api, restored)


@pytest.mark.parametrize("api", MENTION_APIS, ids=str)
def test_minted_ids_continue_after_the_history(api: Api) -> None:
    """Three calls without an id after a history holding tid1_-n and tid1_-n-_3: they get
    tid1_-n-_2, tid1_-n-_4, tid1_-n-_5; a result alone takes nothing (only definitions do)."""
    request = history_request(
        api, [literal(mint()), literal(mint("safe", 3))], [literal(mint()), literal(mint())]
    )
    for taken in (toolid.rewrite_request(request, api=api).taken, toolid.taken_ids(request, api)):
        answer = toolid.rewrite_response(
            buffered_response(api, [None, "null", None]), api=api, taken=taken
        )
        assert call_ids(api, answer.body) == [mint("safe", k) for k in (2, 4, 5)]
    only_results = history_request(api, [], [literal(mint())])
    answer = toolid.rewrite_response(
        buffered_response(api, [None]), api=api, taken=toolid.taken_ids(only_results, api)
    )
    assert call_ids(api, answer.body) == [mint()]


# --- Chat streams whose calls lack ids, split anywhere ----------------------------------------

FIRST_STRINGS = ("call_0", "functions.f:0", "", "tid1_x", "天気:0", 'say "hi"', "chatcmpl-tool-ab")
# ids a later chunk may carry besides the first ones (and those of other calls)
LATER_STRINGS = ("toolcall0", "later:1", "call_9", *FIRST_STRINGS[:2])
SAME: Final = "same"  # a later chunk carrying its call's first chunk's id again

first_ids = st.one_of(
    st.none(),
    st.just("null"),
    json_scalars,
    st.sampled_from(FIRST_STRINGS).map(literal),
)
later_ids = st.one_of(
    st.none(),
    st.just("null"),
    st.just(SAME),
    json_scalars,
    st.sampled_from(LATER_STRINGS).map(literal),
)


@dataclass(frozen=True)
class ChatCall:
    """One streamed call: the id member of its first chunk and of each later chunk."""

    first: IdText
    later: tuple[IdText, ...]
    id_first: bool  # the member comes before "index" (vLLM), else after it


@st.composite
def chat_calls(draw: st.DrawFn) -> ChatCall:
    first = draw(first_ids)
    later = draw(st.lists(later_ids, max_size=3))
    return ChatCall(
        first,
        tuple(first if text == SAME else text for text in later),
        draw(st.booleans()),
    )


@dataclass(frozen=True)
class ChatStream:
    calls: tuple[ChatCall, ...]
    order: tuple[tuple[int, int], ...]  # (call, chunk): chunk 0 is the first, 1.. the later
    spaced: bool
    eol: str


@st.composite
def chat_streams(draw: st.DrawFn) -> ChatStream:
    """Calls in index order, each call's later chunks after its first, interleaved anyhow."""
    drawn = draw(st.lists(chat_calls(), min_size=1, max_size=3))
    sent = [0] * len(drawn)
    started = 0
    order: list[tuple[int, int]] = []
    while True:
        options = [(n, sent[n]) for n in range(started) if sent[n] <= len(drawn[n].later)]
        if started < len(drawn):
            options.append((started, 0))
        if not options:
            break
        call, chunk = draw(st.sampled_from(options))
        order.append((call, chunk))
        sent[call] += 1
        started = max(started, call + 1)
    return ChatStream(
        tuple(drawn), tuple(order), draw(st.booleans()), draw(st.sampled_from(["\n", "\r\n"]))
    )


def _object(members: Sequence[tuple[str, str]], spaced: bool, added: str = "") -> str:
    """A JSON object of ``members`` (key, value text); ``added``: a member toolid put in first
    (always compact, as it writes it)."""
    colon, comma = (": ", ", ") if spaced else (":", ",")
    return "{" + added + comma.join(f'"{key}"{colon}{value}' for key, value in members) + "}"


def _chunk(delta: str, spaced: bool, finish: str = "null") -> str:
    return _object(
        [
            ("id", '"chatcmpl-1"'),
            ("object", '"chat.completion.chunk"'),
            ("created", "1760000000"),
            ("model", '"m"'),
            (
                "choices",
                "["
                + _object([("index", "0"), ("delta", delta), ("finish_reason", finish)], spaced)
                + "]",
            ),
        ],
        spaced,
    )


def render_chat(stream: ChatStream, ids: Callable[[int, int], tuple[IdText, bool]]) -> bytes:
    """The stream's bytes; ``ids(call, chunk)``: the id member's text there, and whether toolid
    put it in (then it comes first, compact)."""
    spaced, eol = stream.spaced, stream.eol
    events = [_chunk(_object([("role", '"assistant"'), ("content", '""')], spaced), spaced)]
    for call, chunk in stream.order:
        text, added = ids(call, chunk)
        members = [("index", str(call))]
        if chunk == 0:
            members += [
                ("type", '"function"'),
                ("function", _object([("name", f'"f{call}"'), ("arguments", '""')], spaced)),
            ]
        else:
            fragment = literal(f'{{"n":{chunk}}}')
            members.append(("function", _object([("arguments", fragment)], spaced)))
        if text is not None and not added:
            at = 0 if stream.calls[call].id_first else 1
            members.insert(at, ("id", text))
        put = f'"id":{text},' if added else ""
        tool_call = _object(members, spaced, put)
        events.append(_chunk(_object([("tool_calls", f"[{tool_call}]")], spaced), spaced))
    events.append(_chunk("{}", spaced, '"tool_calls"'))
    out = "".join(f"data: {event}{eol}{eol}" for event in events)
    return (out + f"data: [DONE]{eol}{eol}").encode()


def chat_source(stream: ChatStream) -> bytes:
    def ids(call: int, chunk: int) -> tuple[IdText, bool]:
        c = stream.calls[call]
        return (c.first if chunk == 0 else c.later[chunk - 1]), False

    return render_chat(stream, ids)


def chat_expected(
    stream: ChatStream, history: Sequence[str]
) -> tuple[bytes, list[str], list[tuple[str, str, str]]]:
    """The oracle: the client's stream, each call's client id, and the changes in order. A
    call's first chunk gets its client id (a missing member put in); a later chunk keeps no id
    or null, keeps its call's own id (as its client id), and has any other id written null."""
    oracle = Oracle(history)
    clients = [oracle.client(call.first) for call in stream.calls]
    changes: list[tuple[str, str, str]] = []

    def ids(call: int, chunk: int) -> tuple[IdText, bool]:
        c, client = stream.calls[call], clients[call]
        if chunk == 0:
            if (change := change_of(c.first, client)) is not None:
                changes.append(change)
            return literal(client), c.first is None
        text = c.later[chunk - 1]
        if text is None or text == "null":
            return text, False
        if is_string(text) and text == c.first:
            if (change := change_of(text, client)) is not None:
                changes.append(change)
            return literal(client), False
        changes.append(("cleared", json.loads(text) if is_string(text) else text, ""))
        return "null", False

    return render_chat(stream, ids), clients, changes


# The client ids of calls of an earlier turn, with what the upstream sent for each: a history
# the stream's ids must avoid.
HISTORY_POOL: tuple[tuple[str, str], ...] = (
    (mint(), literal(mint())),
    (mint("safe", 2), literal(mint("safe", 2))),
    (encode_value("7"), "7"),
    (encode_value("true"), "true"),
    (encode_value("-0.0"), "-0.0"),
    ("call_0", literal("call_0")),
    (encode("functions.f:0"), literal("functions.f:0")),
    (encode("", "safe", 2), literal("")),
)
histories = st.lists(st.sampled_from(HISTORY_POOL), max_size=4, unique=True)


def _streamed(
    api: Api, pieces: Sequence[bytes], history: Sequence[str]
) -> tuple[bytes, list[tuple[str, str, str]], list[str]]:
    """The rewritten stream, its changes and problems: ``pieces`` fed to a rewriter whose
    calls avoid the ids a request with ``history`` defines (the request's bytes, as the
    addon and ResponseStream pass them)."""
    taken = Taken(history_request(api, [literal(h) for h in history]), api)
    out, rewriter = run(pieces, api, calls=CallIds("safe", taken))
    changes: list[tuple[str, str, str]] = [(c.action, c.raw, c.client) for c in rewriter.changes]
    return out, changes, rewriter.problems


def _pieces(source: bytes, cuts: list[int]) -> Iterator[list[bytes]]:
    yield [source]
    yield split_at(source, cuts)
    if len(source) <= 2500:
        yield bytewise(source)


@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(
    stream=chat_streams(),
    history=histories,
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_chat_stream_any_split_gives_the_same_bytes(
    backend_name: str, stream: ChatStream, history: list[tuple[str, str]], cuts: list[int]
) -> None:
    source = chat_source(stream)
    taken = [client for client, _ in history]
    expected, clients, changes = chat_expected(stream, taken)
    with backend(backend_name):
        for pieces in _pieces(source, cuts):
            out, got_changes, problems = _streamed(Api.CHAT, pieces, taken)
            assert problems == []
            assert out == expected
            assert got_changes == changes
    # What the client reads (each call's first chunk, the one with an id) goes back as the
    # upstream sent it: the number as its text, a string as itself, a minted id as itself.
    assert len(set(clients)) == len(clients)
    assert not set(clients) & set(taken)
    request = history_request(Api.CHAT, [literal(h) for h in taken] + [literal(c) for c in clients])
    back = toolid.rewrite_request(request, api=Api.CHAT)
    restored = [raw for _, raw in history] + [
        restored_text(call.first, client)
        for call, client in zip(stream.calls, clients, strict=True)
    ]
    assert back.problems == ()
    assert back.body == history_request(Api.CHAT, restored)


def _call(first: IdText, *later: IdText, id_first: bool = True) -> ChatCall:
    return ChatCall(first, later, id_first)


SHAPES: dict[str, tuple[ChatCall, ...]] = {
    "missing in every chunk": (_call(None, None, None),),
    "null in every chunk": (_call("null", "null", "null"),),
    "a number, then none": (_call("7", None, None),),
    "a number in every chunk": (_call("7", "7", "7", id_first=False),),
    "a boolean": (_call("true", None),),
    "an id on index 0 only": (_call(literal("chatcmpl-tool-ab"), None), _call(None, None)),
    "an id that changes": (
        _call(literal("chatcmpl-tool-ab"), literal("toolcall0"), '"toolcall0"'),
    ),
    "a number that changes": (_call("7", "8", literal("7")),),
    "two calls, both without": (_call(None, None), _call("null", None)),
    "the same number twice": (_call("7", None), _call("7", "7")),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("backend_name", BACKENDS)
def test_chat_stream_shapes_bytewise(shape: str, backend_name: str) -> None:
    """The shapes of the issue, one by one (each split, byte by byte too)."""
    calls = SHAPES[shape]
    order = tuple(
        (n, chunk) for n, call in enumerate(calls) for chunk in range(len(call.later) + 1)
    )
    for spaced, eol in itertools.product((False, True), ("\n", "\r\n")):
        stream = ChatStream(calls, order, spaced, eol)
        source = chat_source(stream)
        expected, clients, changes = chat_expected(stream, [])
        with backend(backend_name):
            for pieces in _pieces(source, list(range(0, len(source), 37))):
                out, got, problems = _streamed(Api.CHAT, pieces, [])
                assert (out, got, problems) == (expected, changes, [])
        assert len(set(clients)) == len(clients)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_chat_later_chunk_with_an_earlier_calls_id_is_cleared(backend_name: str) -> None:
    """A later chunk carrying another call's first id is written null, as one carrying an id
    no call has (``changing``): its own call's client id written in would be joined to the
    first by an accumulating client, such as the openai SDK's (``BB``)."""
    calls = (_call(literal("A"), None), _call(literal("B"), literal("A")))
    stream = ChatStream(calls, ((0, 0), (1, 0), (1, 1), (0, 1)), False, "\n")
    source = chat_source(stream)
    expected, _, changes = chat_expected(stream, [])
    with backend(backend_name):
        out, got, _ = _streamed(Api.CHAT, [source], [])
    assert got == changes  # [("cleared", "A", "")]
    assert out == expected


# --- Responses, Messages and Converse streams -------------------------------------------------


def _sse(events: Sequence[tuple[str, dict[str, Any]]], ids: dict[str, IdText]) -> bytes:
    """Named events; each "@@<n>@@" string in them is mention n's id member: replaced by its
    text, or removed (None). A mention's member is the first of its object."""
    out = "".join(
        f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"
        for name, data in events
    )
    for mention, text in ids.items():
        member = f'"@@{mention}@@"'
        at = out.index(member)
        key_start = out.rindex('"', 0, out.rindex('"', 0, at - 1))
        span = out[key_start : at + len(member) + 1]  # "key":"@@n@@",
        assert span.endswith(","), span
        out = out.replace(span, "" if text is None else span.replace(member, text))
    return out.encode()


def responses_events(n_calls: int) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
    """A Responses stream of ``n_calls`` function calls, each mentioned three times (added,
    done, and in response.completed); the mention numbers of each call's ids."""
    seq = itertools.count()
    events: list[tuple[str, dict[str, Any]]] = []
    calls: list[int] = []
    mention = itertools.count()

    def item(n: int, status: str) -> dict[str, Any]:
        m = next(mention)
        calls.append(n)
        return {
            "call_id": f"@@{m}@@",
            "type": "function_call",
            "id": f"fc_{n}",
            "status": status,
            "arguments": "{}" if status == "completed" else "",
            "name": f"f{n}",
        }

    def event(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(seq), **fields}))

    event("response.created", response={"id": "resp_1", "status": "in_progress", "output": []})
    for n in range(n_calls):
        event("response.output_item.added", output_index=n, item=item(n, "in_progress"))
        event(
            "response.function_call_arguments.delta", item_id=f"fc_{n}", output_index=n, delta="{}"
        )
        event("response.output_item.done", output_index=n, item=item(n, "completed"))
    done = [item(n, "completed") for n in range(n_calls)]
    event("response.completed", response={"id": "resp_1", "status": "completed", "output": done})
    return events, calls


def messages_events(n_calls: int) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "content": []}}),
    ]
    for n in range(n_calls):
        block = {"id": f"@@{n}@@", "type": "tool_use", "name": f"f{n}", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": "{}"}
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": n, "content_block": block},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": n, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": n}),
        ]
    events.append(("message_stop", {"type": "message_stop"}))
    return events, list(range(n_calls))


def converse_events(n_calls: int) -> tuple[list[tuple[str, dict[str, Any]]], list[int]]:
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    for n in range(n_calls):
        start = {"toolUse": {"toolUseId": f"@@{n}@@", "name": f"f{n}"}}
        events += [
            ("contentBlockStart", {"contentBlockIndex": n, "start": start}),
            ("contentBlockDelta", {"contentBlockIndex": n, "delta": {"toolUse": {"input": "{}"}}}),
            ("contentBlockStop", {"contentBlockIndex": n}),
        ]
    events.append(("messageStop", {"stopReason": "tool_use"}))
    return events, list(range(n_calls))


STREAM_BUILDERS = {
    Api.RESPONSES: responses_events,
    Api.MESSAGES: messages_events,
    Api.CONVERSE: converse_events,
}
mention_ids = st.one_of(
    st.none(), st.just("null"), json_scalars, st.sampled_from(FIRST_STRINGS).map(literal)
)


@pytest.mark.parametrize("api", list(STREAM_BUILDERS), ids=str)
@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n_calls=st.integers(min_value=1, max_value=3),
    history=histories,
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_mention_streams_any_split_gives_the_same_bytes(
    *,
    api: Api,
    backend_name: str,
    data: st.DataObject,
    n_calls: int,
    history: list[tuple[str, str]],
    cuts: list[int],
) -> None:
    """Each call's first mention decides its client id; every later mention of it (Responses:
    output_item.done, response.completed) gets the same, whatever id it carries."""
    events, calls = STREAM_BUILDERS[api](n_calls)
    texts: dict[str, IdText] = {
        str(m): data.draw(mention_ids, label=f"mention {m} (call {calls[m]})")
        for m in range(len(calls))
    }
    source = _sse(events, texts)
    taken = [client for client, _ in history]
    oracle = Oracle(taken)
    clients: dict[int, str] = {}
    expected_changes: list[tuple[str, str, str]] = []
    for m, call in enumerate(calls):
        text = texts[str(m)]
        if call not in clients:
            clients[call] = oracle.client(text)
        if (change := change_of(text, clients[call])) is not None:
            expected_changes.append(change)
    expected = _sse(events, {str(m): literal(clients[call]) for m, call in enumerate(calls)})
    with backend(backend_name):
        for pieces in _pieces(source, cuts):
            out, changes, problems = _streamed(api, pieces, taken)
            assert problems == []
            assert out == expected
            assert changes == expected_changes
    # A follow-up request with what the client read goes back as the upstream sent the call's
    # first mention.
    first = {call: texts[str(m)] for m, call in reversed(list(enumerate(calls)))}
    request = history_request(api, [literal(clients[n]) for n in range(n_calls)])
    back = toolid.rewrite_request(request, api=api)
    assert back.problems == ()
    restored = [restored_text(first[n], clients[n]) for n in range(n_calls)]
    assert back.body == history_request(api, restored)


# --- buffered round trip of numeric ids ------------------------------------------------------


@pytest.mark.parametrize("api", MENTION_APIS, ids=str)
@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=50, deadline=None)
@given(texts=st.lists(json_scalars, min_size=1, max_size=3))
@example(texts=["7"])
@example(texts=["7", "7", "7.0"])
@example(texts=["-0.0", "1e400", "123456789012345678901234567890"])
@example(texts=["true", "false", "0"])
def test_numeric_ids_round_trip_byte_for_byte(
    api: Api, backend_name: str, texts: list[str]
) -> None:
    """An answer whose calls carry numbers: each gets tid1_-j<its text> (tagged when the same
    text came before); a request that carries them back, in its calls and its results, gets
    each number back unquoted, spelled as the upstream spelled it. Only the literals change."""
    oracle = Oracle()
    clients = [oracle.client(text) for text in texts]
    assert all(client.startswith("tid1_-j") for client in clients)
    with backend(backend_name):
        answer = toolid.rewrite_response(buffered_response(api, texts), api=api)
        assert answer.problems == ()
        assert answer.body == buffered_response(api, [literal(c) for c in clients])
        assert [(c.action, c.raw, c.client) for c in answer.changes] == [
            ("encoded", text, client) for text, client in zip(texts, clients, strict=True)
        ]
        request = history_request(api, [literal(c) for c in clients])
        back = toolid.rewrite_request(request, api=api)
        assert back.problems == ()
        assert back.body == history_request(api, texts)
        assert sorted(c.action for c in back.changes) == ["restored"] * (2 * len(texts))
    # each id comes back as the JSON value the upstream sent, of the same type
    sent = [json.loads(text) for text in texts]
    got = call_ids(api, buffered_response(api, [decode(c) for c in clients]))
    assert [(type(v), v) for v in got] == [(type(v), v) for v in sent]


def test_numeric_id_restored_for_any_path_of_the_api() -> None:
    """The request's API recognised by its path, as the addon reads it."""
    paths: dict[Api, str] = {
        Api.CHAT: "/v1/chat/completions",
        Api.RESPONSES: "/v1/responses",
        Api.MESSAGES: "/v1/messages",
        Api.CONVERSE: "/model/anthropic.claude/converse",
    }
    for api, path in paths.items():
        answer = toolid.rewrite_response(buffered_response(api, ["42"]), path=path)
        assert call_ids(api, answer.body) == ["tid1_-j42"]
        back = toolid.rewrite_request(history_request(api, ['"tid1_-j42"']), path=path)
        assert back.body == history_request(api, ["42"])


@pytest.mark.parametrize("rules", ["openai", "anthropic"])
def test_a_host_with_rules_never_gets_a_number(rules: str) -> None:
    """Every host with id rules wants a string: the client id of a number stays (``kept``)."""
    body = (
        b'{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":'
        b'"tid1_-j7","type":"function","function":{"name":"f","arguments":"{}"}}]},'
        b'{"role":"tool","tool_call_id":"tid1_-j7","content":"x"}]}'
    )
    restored = toolid.rewrite_request(body, path="/v1/chat/completions", rules=rules)
    assert restored.body == body
    assert [c.action for c in restored.changes] == ["kept", "kept"]
    mapped = toolid.rewrite_request(body, path="/v1/chat/completions", rules="mistral")
    assert [c.action for c in mapped.changes] == ["mapped", "mapped"]
    assert all(type(c.sent) is str and len(c.sent) == 9 for c in mapped.changes)
