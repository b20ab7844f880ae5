"""``toolid.repair``: a history with a pairing problem, repaired, is one its destination takes.

By property: random valid conversations (parallel calls answered in any order, texts before
calls and after results, custom tools, reasoning items), rendered in each API's shape, one
problem of each kind planted: a result dropped (the user's text left, the whole turn, or at
the end of the history), results sent one message each, a result for no call (anywhere, or
after the others), a result moved one message later, after a text or before its call, a call
id given again (in a later turn, or in the same one), an empty id (once, twice in a turn), a
joined id. After ``repair_request`` the strict validator of that API
(``standin.pairing_rules``, written from the APIs' rules, not from toolid) accepts the body,
``toolid.pairing.check`` finds nothing, the bytes around the history are the same, every
element of the history the problem did not touch is there byte for byte (in its order, unless
the problem moved it), and every text and output anyone wrote is still there. A clean history
comes back as the very bytes object it was. Every test runs with the accelerators as
installed and as pure Python.

By hand: the shape each repair writes, per API; the validator's texts; and the smallest
history of each case toolid does not repair yet (these fail until it does).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standin.pairing_rules import pairing_error

from toolid import Api, Problem, repair_request
from toolid.pairing import (
    COMPOSITE,
    DUPLICATE,
    EMPTY,
    MISPLACED,
    MISSING,
    ORPHAN,
    check,
    history_of,
)
from toolid.problem import UNREPAIRABLE
from toolid.repair import NO_RESULT, ORPHAN_NOTE

pytestmark = pytest.mark.usefixtures("backend")

#: The validator of each API (``pairing_error``'s names).
RULES: dict[Api, str] = {
    Api.CHAT: "chat",
    Api.RESPONSES: "responses",
    Api.MESSAGES: "anthropic",
    Api.GEMINI: "gemini",
    Api.CONVERSE: "converse",
}
SEPARATORS = ((", ", ": "), (",", ":"))  # json.dumps' default, and compact

# --- a conversation, whatever the API -----------------------------------------------------------


@dataclass
class Message:
    """One message of a conversation: a user's (the results it gives, then its text) or the
    model's (its text, then its calls)."""

    user: bool
    ids: list[str] = field(default_factory=list)  # user: the calls answered; model: the calls
    text: str | None = None
    text_first: bool = False  # user: its text before its results
    gone: bool = False  # left out of the history
    key: int = 0  # what names it in the rendered elements, wherever it moves


def conversation(shapes: list[tuple[int, bool, bool]], open_end: bool, rnd: random.Random):
    """A valid conversation: a question, then per shape (calls, the model writes a text, the
    user writes one after the results) a model turn and the user's turn with every result, in
    any order; with ``open_end`` the last model turn ends it (its calls wait for results)."""
    messages = [Message(True, text="q0")]
    number = 0
    for turn, (calls, model_text, user_text) in enumerate(shapes):
        ids = [f"call_{number + k}" for k in range(calls)]
        number += calls
        messages.append(Message(False, ids, f"t{turn}" if model_text or not calls else None))
        if open_end and turn == len(shapes) - 1:
            break
        results = list(ids)
        rnd.shuffle(results)
        messages.append(Message(True, results, f"q{turn + 1}" if user_text or not ids else None))
    for key, message in enumerate(messages):
        message.key = key
    return messages


def _custom(call_id: str) -> bool:
    """Responses: whether the call is a custom tool's (every third one)."""
    return call_id.startswith("call_") and call_id[5:].isdigit() and int(call_id[5:]) % 3 == 2


def _output(call_id: str) -> str:
    return f"the output of {call_id or 'an unnamed call'}"


type Keyed = list[tuple[tuple[Any, ...], dict[str, Any]]]


def _occurrences(ids: list[str]) -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    out = []
    for one in ids:
        seen[one] = seen.get(one, 0) + 1
        out.append((one, seen[one]))
    return out


def render_chat(messages: list[Message]) -> Keyed:
    out: Keyed = [(("system",), {"role": "system", "content": "Be brief."})]
    for message in messages:
        if message.gone:
            continue
        number = message.key
        if message.user:
            results: Keyed = [
                (
                    (number, "result", one, nth),
                    {"role": "tool", "tool_call_id": one, "content": _output(one)},
                )
                for one, nth in _occurrences(message.ids)
            ]
            text: Keyed = (
                [((number, "text"), {"role": "user", "content": message.text})]
                if message.text
                else []
            )
            out += text + results if message.text_first else results + text
            continue
        element: dict[str, Any] = {"role": "assistant", "content": message.text}
        if message.ids:
            element["tool_calls"] = [
                {"id": one, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                for one in message.ids
            ]
        out.append(((number, "model"), element))
    return out


def render_responses(messages: list[Message]) -> Keyed:
    out: Keyed = []
    for message in messages:
        if message.gone:
            continue
        number = message.key
        if message.user:
            results: Keyed = []
            for one, nth in _occurrences(message.ids):
                kind = "custom_tool_call_output" if _custom(one) else "function_call_output"
                item = {"type": kind, "call_id": one, "output": _output(one)}
                results.append(((number, "result", one, nth), item))
            text: Keyed = []
            if message.text:
                content: Any = (
                    message.text if number % 2 else [{"type": "input_text", "text": message.text}]
                )
                text = [((number, "text"), {"role": "user", "content": content})]
            out += text + results if message.text_first else results + text
            continue
        if number % 4 == 1:
            item = {"type": "reasoning", "id": f"rs_{number}", "summary": []}
            out.append(((number, "reasoning"), item))
        if message.text:
            text_item = {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": message.text}],
            }
            out.append(((number, "text"), text_item))
        for place, (one, nth) in enumerate(_occurrences(message.ids)):
            if _custom(one):
                call = {"type": "custom_tool_call", "id": f"ctc_{number}_{place}", "input": "x"}
            else:
                call = {"type": "function_call", "id": f"fc_{number}_{place}", "arguments": "{}"}
            call |= {"call_id": one, "name": "f"}
            out.append(((number, "call", one, nth), call))
    return out


def render_messages(messages: list[Message]) -> Keyed:
    out: Keyed = []
    for message in messages:
        if message.gone:
            continue
        number = message.key
        if message.user:
            results = [
                {
                    "type": "tool_result",
                    "tool_use_id": one,
                    "content": _output(one)
                    if place % 2 == 0
                    else [{"type": "text", "text": _output(one)}],
                }
                for place, one in enumerate(message.ids)
            ]
            text = [{"type": "text", "text": message.text}] if message.text else []
            blocks: Any = text + results if message.text_first else results + text
            if not results and number % 2 == 0:
                blocks = message.text
            out.append(((number,), {"role": "user", "content": blocks}))
            continue
        calls = [{"type": "tool_use", "id": one, "name": "f", "input": {}} for one in message.ids]
        text = [{"type": "text", "text": message.text}] if message.text else []
        content: Any = text + calls if calls or number % 4 == 1 else message.text
        out.append(((number,), {"role": "assistant", "content": content}))
    return out


def render_converse(messages: list[Message]) -> Keyed:
    out: Keyed = []
    for message in messages:
        if message.gone:
            continue
        number = message.key
        if message.user:
            results = [
                {"toolResult": {"toolUseId": one, "content": [{"text": _output(one)}]}}
                for one in message.ids
            ]
            text = [{"text": message.text}] if message.text else []
            blocks = text + results if message.text_first else results + text
            out.append(((number,), {"role": "user", "content": blocks}))
            continue
        calls = [{"toolUse": {"toolUseId": one, "name": "f", "input": {}}} for one in message.ids]
        text = [{"text": message.text}] if message.text else []
        out.append(((number,), {"role": "assistant", "content": text + calls}))
    return out


def render_gemini(messages: list[Message]) -> Keyed:
    out: Keyed = []
    for message in messages:
        if message.gone:
            continue
        number = message.key
        if message.user:
            results = [
                {"functionResponse": {"id": one, "name": "f", "response": {"output": _output(one)}}}
                for one in message.ids
            ]
            text = [{"text": message.text}] if message.text else []
            parts = text + results if message.text_first else results + text
            out.append(((number,), {"role": "user", "parts": parts}))
            continue
        calls: list[dict[str, Any]] = [
            {"functionCall": {"id": one, "name": "f", "args": {}}} for one in message.ids
        ]
        if calls:
            calls[0] = {**calls[0], "thoughtSignature": "c2lnbmF0dXJl"}
        text = [{"text": message.text}] if message.text else []
        out.append(((number,), {"role": "model", "parts": text + calls}))
    return out


RENDER: dict[Api, Callable[[list[Message]], Keyed]] = {
    Api.CHAT: render_chat,
    Api.RESPONSES: render_responses,
    Api.MESSAGES: render_messages,
    Api.CONVERSE: render_converse,
    Api.GEMINI: render_gemini,
}


def document(api: Api, history: list[dict[str, Any]]) -> dict[str, Any]:
    """A request of ``api`` with ``history``, members before and after it."""
    tool = {"name": "f", "description": "a tool", "parameters": {"type": "object"}}
    if api is Api.CHAT:
        return {
            "model": "m",
            "messages": history,
            "tools": [{"type": "function", "function": tool}],
        }
    if api is Api.RESPONSES:
        return {"model": "m", "input": history, "tools": [{"type": "function", **tool}]}
    if api is Api.MESSAGES:
        return {"model": "m", "max_tokens": 64, "messages": history, "tools": [tool]}
    if api is Api.CONVERSE:
        spec = {"name": "f", "inputSchema": {"json": {"type": "object"}}}
        return {"messages": history, "toolConfig": {"tools": [{"toolSpec": spec}]}}
    return {"contents": history, "tools": [{"functionDeclarations": [tool]}]}


# --- planting a problem ---------------------------------------------------------------------------


class NoPlace(Exception):
    """The conversation has no place for this problem."""


def _answered(messages: list[Message]) -> list[tuple[int, int]]:
    """(model turn, the user turn after it) for each model turn with calls answered."""
    return [
        (number, number + 1)
        for number, message in enumerate(messages[:-1])
        if not message.user and message.ids and messages[number + 1].ids
    ]


def _emptied(messages: list[Message], number: int, rnd: random.Random) -> None:
    """A user turn left with nothing: dropped, or (at the end, or at random) a text."""
    message = messages[number]
    if message.ids or message.text:
        return
    if number == len(messages) - 1 or rnd.random() < 0.5:
        message.text = "never mind"
    else:
        message.gone = True


def _insert(ids: list[str], value: str, rnd: random.Random, last: bool = False) -> None:
    ids.insert(len(ids) if last else rnd.randint(0, len(ids)), value)


def plant_missing(messages: list[Message], rnd: random.Random) -> None:
    """A result dropped (the model's next turn follows; a turn left with no result has the
    user's text)."""
    last = len(messages) - 1
    model, user = rnd.choice([(m, u) for m, u in _answered(messages) if u < last] or _no_place())
    messages[user].ids.remove(rnd.choice(messages[model].ids))
    messages[user].text = messages[user].text or "never mind"


def plant_missing_turn(messages: list[Message], rnd: random.Random) -> None:
    """Every result of a turn dropped, the user's turn with them: two model turns in a row
    (the model turn after them, and a user's, follow)."""
    places = [(m, u) for m, u in _answered(messages) if u + 3 < len(messages)]
    _, user = rnd.choice(places or _no_place())
    messages[user].gone = True


def plant_missing_at_end(messages: list[Message], rnd: random.Random) -> None:
    """A result dropped from the user's turn that ends the history: the others of its call's
    turn are there, so it is no longer the last turn, whose results are to come."""
    last = len(messages) - 1
    if not messages[last].user or len(messages[last].ids) < 2 or messages[last].text:
        _no_place()
    messages[last].ids.remove(rnd.choice(messages[last].ids))


def plant_split(messages: list[Message], rnd: random.Random) -> None:
    """A turn's results sent as a user message each (Semantic Kernel, crewAI: "Expected
    toolResult blocks at messages.2.content"): all but the first one message later."""
    places = [(m, u) for m, u in _answered(messages) if len(messages[u].ids) > 1]
    _, user = rnd.choice(places or _no_place())
    first, *rest = messages[user].ids
    messages[user].ids = [first]
    for place, value in enumerate(rest, 1):
        messages.insert(user + place, Message(True, [value], key=100 * (user + 1) + place))


def plant_orphan(messages: list[Message], rnd: random.Random, last: bool = False) -> None:
    users = [number for number, message in enumerate(messages) if message.user]
    _insert(messages[rnd.choice(users)].ids, "call_orphan", rnd, last)


def plant_orphan_last(messages: list[Message], rnd: random.Random) -> None:
    """An orphan after every other result of its turn."""
    plant_orphan(messages, rnd, last=True)


def _moved(messages: list[Message], rnd: random.Random) -> tuple[int, int, str]:
    model, user = rnd.choice(_answered(messages) or _no_place())
    value = rnd.choice(messages[user].ids)
    messages[user].ids.remove(value)
    return model, user, value


def plant_later(messages: list[Message], rnd: random.Random) -> None:
    """A result moved to the next user turn."""
    places = [(m, u) for m, u in _answered(messages) if u + 2 < len(messages)]
    _, user = rnd.choice(places or _no_place())
    value = rnd.choice(messages[user].ids)
    messages[user].ids.remove(value)
    _insert(messages[user + 2].ids, value, rnd)
    _emptied(messages, user, rnd)


def plant_before_call(messages: list[Message], rnd: random.Random) -> None:
    """A result moved to the user turn before its call's."""
    model, user, value = _moved(messages, rnd)
    _insert(messages[model - 1].ids, value, rnd)
    _emptied(messages, user, rnd)


def plant_after_text(messages: list[Message], rnd: random.Random) -> None:
    """The user's text before the results of its turn (Messages: the results must be first;
    Chat: the tool messages must follow the assistant's)."""
    _, user = rnd.choice(_answered(messages) or _no_place())
    messages[user].text = messages[user].text or "wait"
    messages[user].text_first = True


def plant_duplicate(messages: list[Message], rnd: random.Random) -> None:
    """A later call made with an earlier call's id (and answered under it)."""
    calls = [number for number, message in enumerate(messages) if not message.user and message.ids]
    if len(calls) < 2:
        _no_place()
    first, later = sorted(rnd.sample(calls, 2))
    value = rnd.choice(messages[first].ids)
    _renamed(messages, later, rnd.choice(messages[later].ids), value)


def plant_duplicate_in_turn(messages: list[Message], rnd: random.Random) -> None:
    """One model turn calls one id twice, and both calls are answered."""
    model, user = rnd.choice(_answered(messages) or _no_place())
    value = rnd.choice(messages[model].ids)
    _insert(messages[model].ids, value, rnd)
    _insert(messages[user].ids, value, rnd)


def _renamed(messages: list[Message], model: int, old: str, new: str) -> None:
    messages[model].ids = [new if one == old else one for one in messages[model].ids]
    if model + 1 < len(messages) and messages[model + 1].user:
        answer = messages[model + 1]
        answer.ids = [new if one == old else one for one in answer.ids]


def _one_call(messages: list[Message], rnd: random.Random) -> tuple[int, str]:
    calls = [
        (n, one) for n, message in enumerate(messages) if not message.user for one in message.ids
    ]
    return rnd.choice(calls or _no_place())


def plant_empty(messages: list[Message], rnd: random.Random) -> None:
    model, value = _one_call(messages, rnd)
    _renamed(messages, model, value, "")


def plant_empty_twice(messages: list[Message], rnd: random.Random) -> None:
    """Two calls of one turn with empty ids (gemini-cli's calls have none), both answered."""
    turns = [n for n, message in enumerate(messages) if not message.user and len(message.ids) > 1]
    model = rnd.choice(turns or _no_place())
    for value in rnd.sample(messages[model].ids, 2):
        _renamed(messages, model, value, "")


def plant_composite(messages: list[Message], rnd: random.Random) -> None:
    model, value = _one_call(messages, rnd)
    _renamed(messages, model, value, "call_x|fc_y")


def _no_place() -> Any:
    raise NoPlace


PLANTS: dict[str, Callable[[list[Message], random.Random], None]] = {
    "missing": plant_missing,
    "missing-turn": plant_missing_turn,
    "missing-at-end": plant_missing_at_end,
    "split": plant_split,
    "orphan": plant_orphan,
    "orphan-last": plant_orphan_last,
    "later": plant_later,
    "before-call": plant_before_call,
    "after-text": plant_after_text,
    "duplicate": plant_duplicate,
    "duplicate-in-turn": plant_duplicate_in_turn,
    "empty": plant_empty,
    "empty-twice": plant_empty_twice,
    "composite": plant_composite,
}
#: The code toolid names each planted problem with.
CODE = {
    "missing": MISSING,
    "missing-turn": MISSING,
    "missing-at-end": MISSING,
    "split": MISPLACED,
    "orphan": ORPHAN,
    "orphan-last": ORPHAN,
    "later": MISPLACED,
    "before-call": MISPLACED,
    "after-text": MISPLACED,
    "duplicate": DUPLICATE,
    "duplicate-in-turn": DUPLICATE,
    "empty": EMPTY,
    "empty-twice": EMPTY,
    "composite": COMPOSITE,
}
#: What may be no problem at all in an API (its order does not matter there; Chat and
#: Responses send a result each anyway; a Responses output may come a model turn late):
#: then toolid and the validator agree that it is none.
MAYBE_NONE = {
    (Api.CHAT, "split"),
    (Api.RESPONSES, "split"),
    (Api.RESPONSES, "after-text"),
    (Api.RESPONSES, "later"),
    (Api.GEMINI, "after-text"),
    (Api.CONVERSE, "after-text"),
}
#: What the API's host may not reject (toolid repairs it all the same): Gemini pairs by
#: number, OpenAI takes any non-empty id, a Responses output may come any time after its call,
#: and two Responses calls may share a call_id while only one has an output.
ACCEPTED = {
    (Api.RESPONSES, "duplicate"),
    (Api.GEMINI, "duplicate"),
    (Api.GEMINI, "duplicate-in-turn"),
    (Api.GEMINI, "empty"),
    (Api.GEMINI, "empty-twice"),
    (Api.GEMINI, "composite"),
    (Api.CHAT, "composite"),
    (Api.RESPONSES, "composite"),
    (Api.RESPONSES, "later"),
}


# --- the checks -----------------------------------------------------------------------------------


def dumps(value: Any, separators: tuple[str, str]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=separators).encode()


def assert_kept(
    body: bytes, repaired: bytes, api: Api, kept: list[dict[str, Any]], sep: tuple[str, str]
) -> None:
    """The bytes before and after the history are the same, and each of ``kept`` (elements of
    the history, in order) is in the repaired history byte for byte, in that order."""
    history = dumps(history_of(json.loads(body), api)[1], sep)
    start = body.index(history)
    before, after = body[:start], body[start + len(history) :]
    assert repaired.startswith(before), "the bytes before the history changed"
    assert repaired.endswith(after), "the bytes after the history changed"
    new_history = repaired[len(before) : len(repaired) - len(after)]
    at = 0
    for element in kept:
        text = dumps(element, sep)
        found = new_history.find(text, at)
        assert found >= 0, f"{text!r} is not in the repaired history (or not in its order)"
        at = found + len(text)


def untouched(clean: Keyed, planted: Keyed) -> list[dict[str, Any]]:
    """The elements of ``planted`` that are in ``clean`` as they are (moved or not)."""
    before = dict(clean)
    return [element for key, element in planted if before.get(key) == element]


def unmoved(clean: Keyed, planted: Keyed) -> list[dict[str, Any]]:
    """The longest run of elements, in order, that ``clean`` and ``planted`` have alike: the
    untouched elements that the problem did not move about."""
    a = [(key, dumps(element, SEPARATORS[1])) for key, element in clean]
    b = [(key, dumps(element, SEPARATORS[1])) for key, element in planted]
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            table[i][j] = (
                table[i + 1][j + 1] + 1 if a[i] == b[j] else max(table[i + 1][j], table[i][j + 1])
            )
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            out.append(planted[j][1])
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def _apply(
    api: Api, shapes: Any, open_end: bool, rnd: random.Random, plant: str
) -> tuple[Keyed, Keyed]:
    messages = conversation(shapes, open_end, rnd)
    clean = RENDER[api](messages)
    PLANTS[plant](messages, rnd)
    return clean, RENDER[api](messages)


SHAPES = st.lists(
    st.tuples(st.integers(0, 3), st.booleans(), st.booleans()), min_size=1, max_size=5
)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(list(Api)),
    SHAPES,
    st.booleans(),
    st.sampled_from(SEPARATORS),
    st.randoms(use_true_random=False),
)
def test_a_clean_history_is_the_same_bytes_object(api, shapes, open_end, sep, rnd):
    keyed = RENDER[api](conversation(shapes, open_end, rnd))
    request = document(api, [element for _, element in keyed])
    assert pairing_error(RULES[api], request) is None
    body = dumps(request, sep)
    repaired = repair_request(body, api=api)
    assert repaired.content is body
    assert (repaired.repairs, repaired.problems, repaired.refused) == ((), (), None)


@pytest.mark.parametrize("plant", list(PLANTS))
@settings(max_examples=40, deadline=None)
@given(
    api=st.sampled_from(list(Api)),
    history=st.tuples(SHAPES, st.booleans()),
    sep=st.sampled_from(SEPARATORS),
    rnd=st.randoms(use_true_random=False),
)
def test_a_planted_problem_is_repaired(plant, api, history, sep, rnd):
    shapes, open_end = history
    try:
        clean, planted = _apply(api, shapes, open_end, rnd, plant)
    except NoPlace:
        return
    request = document(api, [element for _, element in planted])
    found = check(request, api)
    rejected = pairing_error(RULES[api], request)
    body = dumps(request, sep)
    if (api, plant) in MAYBE_NONE and not found and rejected is None:
        assert repair_request(body, api=api).content is body
        return
    assert rejected is not None or (api, plant) in ACCEPTED
    assert CODE[plant] in {problem.code for problem in found}, (found, rejected, body.decode())
    repaired = repair_request(body, api=api)
    assert repaired.refused is None, f"refused: {repaired.refused}\n{body.decode()}"
    assert repaired.repairs and repaired.content != body
    after = json.loads(repaired.content)
    assert pairing_error(RULES[api], after) is None, (body.decode(), repaired.content.decode())
    assert check(after, api) == []
    # every element the problem did not touch is as it was, those it did not move in order
    assert_kept(body, repaired.content, api, unmoved(clean, planted), sep)
    for element in untouched(clean, planted):
        assert dumps(element, sep) in repaired.content
    # nothing anyone wrote is lost: every text and output of the history is still there
    for key, element in planted:
        for text in _texts(element):
            assert text in repaired.content.decode(), (key, text)


def _texts(element: Any) -> list[str]:
    """The texts and outputs an element holds (the strings anyone wrote)."""
    if isinstance(element, dict):
        return [text for key, value in element.items() for text in _texts_of(key, value)]
    if isinstance(element, list):
        return [text for value in element for text in _texts(value)]
    return []


def _texts_of(key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if key in ("text", "content", "output") else []
    return _texts(value)


# --- by hand: the shape of each repair ------------------------------------------------------------

MEMBER = {
    Api.CHAT: "messages",
    Api.RESPONSES: "input",
    Api.MESSAGES: "messages",
    Api.CONVERSE: "messages",
    Api.GEMINI: "contents",
}


def repaired_history(api: Api, history: list[Any], *, rejected: bool = True) -> list[Any]:
    """``history`` repaired (as a request of ``api``); its validator rejected it (unless
    ``rejected`` is false: the host takes it) and takes the repaired one."""
    request = {"model": "m", MEMBER[api]: history}
    body = json.dumps(request).encode()
    repaired = repair_request(body, api=api)
    assert repaired.refused is None, repaired.refused
    assert repaired.repairs
    after = json.loads(repaired.content)
    assert (pairing_error(RULES[api], request) is not None) is rejected
    assert pairing_error(RULES[api], after) is None
    assert check(after, api) == []
    assert after["model"] == "m"
    return after[MEMBER[api]]


def note(call_id: str) -> str:
    return ORPHAN_NOTE.format(id=call_id)


def test_the_texts():
    assert NO_RESULT.startswith("No result was recorded for this tool call")
    assert note("call_zzz") == (
        "[The tool result below answered tool call call_zzz, which is not in this conversation.]"
    )


# Chat Completions


def chat_user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def chat_calls(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": one, "type": "function", "function": {"name": "f", "arguments": "{}"}} for one in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def chat_result(call_id: str, content: Any = "r") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_chat_missing_result_is_a_tool_message_after_the_others():
    history = [
        chat_user("q"),
        chat_calls("call_a", "call_b"),
        chat_result("call_a"),
        chat_user("next"),
    ]
    inserted = {"role": "tool", "tool_call_id": "call_b", "content": NO_RESULT}
    assert repaired_history(Api.CHAT, history) == [*history[:3], inserted, history[3]]


def test_chat_orphan_result_is_a_user_message_with_its_content():
    history = [
        chat_user("q"),
        chat_calls("call_a"),
        chat_result("call_a"),
        chat_result("call_zzz", "sunny"),
        chat_user("next"),
    ]
    kept = {"role": "user", "content": note("call_zzz") + "\nsunny"}
    assert repaired_history(Api.CHAT, history) == [*history[:3], kept, history[4]]
    parts = [{"type": "text", "text": "sunny"}]
    history[3] = chat_result("call_zzz", parts)
    kept = {"role": "user", "content": [{"type": "text", "text": note("call_zzz")}, *parts]}
    assert repaired_history(Api.CHAT, history)[3] == kept


def test_chat_misplaced_result_moves_right_after_its_call():
    history = [chat_user("q"), chat_calls("call_a"), chat_user("wait"), chat_result("call_a")]
    assert repaired_history(Api.CHAT, history) == [history[0], history[1], history[3], history[2]]


def test_chat_duplicate_and_empty_ids_get_ids_of_their_own_composite_ids_their_first_part():
    history = [
        chat_user("q"),
        chat_calls("call_a"),
        chat_result("call_a"),
        chat_calls("call_a"),
        chat_result("call_a"),
        chat_calls(""),
        chat_result(""),
        chat_calls("call_x|fc_y"),
        chat_result("call_x|fc_y"),
        chat_user("next"),
    ]
    after = repaired_history(Api.CHAT, history)
    minted = [after[3]["tool_calls"][0]["id"], after[5]["tool_calls"][0]["id"]]
    assert minted[0] != minted[1] and all(one.startswith("tid1_") for one in minted)
    assert after == [
        *history[:3],
        chat_calls(minted[0]),
        chat_result(minted[0]),
        chat_calls(minted[1]),
        chat_result(minted[1]),
        chat_calls("call_x"),
        chat_result("call_x"),
        history[9],
    ]


# Responses


def responses_user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def function_call(call_id: str, item: str = "fc_1") -> dict[str, Any]:
    return {"type": "function_call", "id": item, "call_id": call_id, "name": "f", "arguments": "{}"}


def custom_call(call_id: str) -> dict[str, Any]:
    return {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": call_id,
        "name": "f",
        "input": "x",
    }


def function_output(call_id: str, output: Any = "r") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


ASSISTANT = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "ok"}],
}


def test_responses_missing_output_is_an_output_of_the_calls_type():
    history = [
        responses_user("q"),
        function_call("call_a"),
        custom_call("call_b"),
        function_output("call_a"),
        ASSISTANT,
        responses_user("next"),
    ]
    inserted = {"type": "custom_tool_call_output", "call_id": "call_b", "output": NO_RESULT}
    assert repaired_history(Api.RESPONSES, history) == [*history[:4], inserted, *history[4:]]


def test_responses_orphan_output_is_a_user_message():
    history = [
        responses_user("q"),
        function_call("call_a"),
        function_output("call_a"),
        function_output("call_zzz", "sunny"),
        ASSISTANT,
    ]
    kept = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": note("call_zzz") + "\nsunny"}],
    }
    assert repaired_history(Api.RESPONSES, history) == [*history[:3], kept, ASSISTANT]


def test_responses_output_before_its_call_moves_after_it():
    history = [responses_user("q"), function_output("call_a"), function_call("call_a"), ASSISTANT]
    assert repaired_history(Api.RESPONSES, history) == [
        history[0],
        history[2],
        history[1],
        ASSISTANT,
    ]


def test_responses_ids():
    history = [
        responses_user("q"),
        function_call("call_a", "fc_1"),
        function_output("call_a"),
        ASSISTANT,
        function_call("call_a", "fc_2"),
        function_output("call_a"),
        ASSISTANT,
        function_call("", "fc_3"),
        function_output(""),
        ASSISTANT,
        function_call("call_x|fc_y", "fc_4"),
        function_output("call_x|fc_y"),
        ASSISTANT,
    ]
    after = repaired_history(Api.RESPONSES, history)
    minted = [after[4]["call_id"], after[7]["call_id"]]
    assert minted[0] != minted[1] and all(one.startswith("tid1_") for one in minted)
    assert after == [
        *history[:4],
        function_call(minted[0], "fc_2"),
        function_output(minted[0]),
        ASSISTANT,
        function_call(minted[1], "fc_3"),
        function_output(minted[1]),
        ASSISTANT,
        function_call("call_x", "fc_4"),
        function_output("call_x"),
        ASSISTANT,
    ]


# Anthropic Messages


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "f", "input": {}}


def tool_result(call_id: str, content: Any = "r") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def turn(role: str, *blocks: Any) -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


def missing_block(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "is_error": True, "content": NO_RESULT}


def test_messages_missing_result_is_an_error_result_after_the_results_before_the_text():
    history = [
        {"role": "user", "content": "q"},
        turn("assistant", tool_use("call_a"), tool_use("call_b")),
        turn("user", tool_result("call_a"), text_block("more")),
        turn("assistant", text_block("ok")),
    ]
    after = repaired_history(Api.MESSAGES, history)
    fixed = turn("user", tool_result("call_a"), missing_block("call_b"), text_block("more"))
    assert after == [history[0], history[1], fixed, history[3]]


def test_messages_missing_result_first_in_a_text_turn_or_in_a_turn_of_its_own():
    history = [
        {"role": "user", "content": "q"},
        turn("assistant", tool_use("call_a")),
        {"role": "user", "content": "never mind"},
        turn("assistant", tool_use("call_b")),
        turn("assistant", text_block("ok")),
        {"role": "user", "content": "next"},
    ]
    after = repaired_history(Api.MESSAGES, history)
    assert after == [
        *history[:2],
        turn("user", missing_block("call_a"), text_block("never mind")),
        history[3],
        turn("user", missing_block("call_b")),
        *history[4:],
    ]


def test_messages_orphan_result_is_a_text_block_with_its_content():
    history = [
        {"role": "user", "content": "q"},
        turn("assistant", tool_use("call_a")),
        turn("user", tool_result("call_a"), tool_result("call_zzz", [text_block("sunny")])),
    ]
    after = repaired_history(Api.MESSAGES, history)
    fixed = turn("user", tool_result("call_a"), text_block(note("call_zzz")), text_block("sunny"))
    assert after == [*history[:2], fixed]


def test_messages_result_after_a_text_moves_first():
    history = [
        {"role": "user", "content": "q"},
        turn("assistant", tool_use("call_a")),
        turn("user", text_block("wait"), tool_result("call_a")),
    ]
    after = repaired_history(Api.MESSAGES, history)
    assert after == [*history[:2], turn("user", tool_result("call_a"), text_block("wait"))]


def test_messages_ids():
    history = [
        {"role": "user", "content": "q"},
        turn("assistant", tool_use("call_a")),
        turn("user", tool_result("call_a")),
        turn("assistant", tool_use("call_a"), tool_use(""), tool_use("call_x|fc_y")),
        turn("user", tool_result("call_a"), tool_result(""), tool_result("call_x|fc_y")),
    ]
    after = repaired_history(Api.MESSAGES, history)
    minted = [block["id"] for block in after[3]["content"][:2]]
    assert len(set(minted)) == 2 and all(one.startswith("tid1_") for one in minted)
    assert after == [
        *history[:3],
        turn("assistant", tool_use(minted[0]), tool_use(minted[1]), tool_use("call_x")),
        turn("user", tool_result(minted[0]), tool_result(minted[1]), tool_result("call_x")),
    ]


# Bedrock Converse


def tool_use_block(call_id: str) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": "f", "input": {}}}


def tool_result_block(call_id: str, content: list[Any] | None = None) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": call_id, "content": content or [{"text": "r"}]}}


def test_converse_missing_result_is_an_error_tool_result():
    history = [
        turn("user", {"text": "q"}),
        turn("assistant", tool_use_block("call_a"), tool_use_block("call_b")),
        turn("user", tool_result_block("call_a")),
        turn("assistant", {"text": "ok"}),
    ]
    inserted = {
        "toolResult": {"toolUseId": "call_b", "content": [{"text": NO_RESULT}], "status": "error"}
    }
    after = repaired_history(Api.CONVERSE, history)
    assert after == [*history[:2], turn("user", tool_result_block("call_a"), inserted), history[3]]


def test_converse_orphan_result_is_text_blocks_json_as_text():
    history = [
        turn("user", {"text": "q"}),
        turn("assistant", tool_use_block("call_a")),
        turn(
            "user",
            tool_result_block("call_a"),
            tool_result_block("call_zzz", [{"json": {"sky": "sunny"}}, {"text": "warm"}]),
        ),
    ]
    after = repaired_history(Api.CONVERSE, history)
    kept = [{"text": note("call_zzz")}, {"text": '{"sky": "sunny"}'}, {"text": "warm"}]
    assert after == [*history[:2], turn("user", tool_result_block("call_a"), *kept)]


def test_converse_results_one_message_each_are_joined():
    history = [
        turn("user", {"text": "q"}),
        turn("assistant", tool_use_block("call_a"), tool_use_block("call_b")),
        turn("user", tool_result_block("call_a")),
        turn("user", tool_result_block("call_b")),
    ]
    after = repaired_history(Api.CONVERSE, history)
    # moved first among the blocks of the turn the results go in, after the results there
    fixed = turn("user", tool_result_block("call_a"), tool_result_block("call_b"))
    assert after == [*history[:2], fixed]


def test_converse_ids():
    history = [
        turn("user", {"text": "q"}),
        turn("assistant", tool_use_block("call_a")),
        turn("user", tool_result_block("call_a")),
        turn(
            "assistant", tool_use_block("call_a"), tool_use_block(""), tool_use_block("call_x|fc_y")
        ),
        turn(
            "user",
            tool_result_block("call_a"),
            tool_result_block(""),
            tool_result_block("call_x|fc_y"),
        ),
    ]
    after = repaired_history(Api.CONVERSE, history)
    minted = [block["toolUse"]["toolUseId"] for block in after[3]["content"][:2]]
    assert len(set(minted)) == 2 and all(one.startswith("tid1_") for one in minted)
    calls = [tool_use_block(minted[0]), tool_use_block(minted[1]), tool_use_block("call_x")]
    results = [tool_result_block(one) for one in (*minted, "call_x")]
    assert after == [*history[:3], turn("assistant", *calls), turn("user", *results)]


# Gemini


def gemini_turn(role: str, *parts: Any) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def function_call_part(call_id: str, name: str = "get_weather") -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": name, "args": {}}}


def function_response_part(call_id: str, response: Any = None) -> dict[str, Any]:
    return {
        "functionResponse": {
            "id": call_id,
            "name": "get_weather",
            "response": response or {"output": "r"},
        }
    }


def test_gemini_missing_response_is_an_error_response_with_the_calls_name():
    history = [
        gemini_turn("user", {"text": "q"}),
        gemini_turn(
            "model", function_call_part("call_a"), function_call_part("call_b", "get_time")
        ),
        gemini_turn("user", function_response_part("call_a")),
        gemini_turn("model", {"text": "ok"}),
    ]
    inserted = {
        "functionResponse": {"id": "call_b", "name": "get_time", "response": {"error": NO_RESULT}}
    }
    after = repaired_history(Api.GEMINI, history)
    fixed = gemini_turn("user", function_response_part("call_a"), inserted)
    assert after == [*history[:2], fixed, history[3]]


def test_gemini_orphan_response_is_a_text_part_with_its_response():
    history = [
        gemini_turn("user", {"text": "q"}),
        gemini_turn("model", function_call_part("call_a")),
        gemini_turn(
            "user",
            function_response_part("call_a"),
            function_response_part("call_zzz", {"output": "sunny"}),
        ),
    ]
    after = repaired_history(Api.GEMINI, history)
    kept = {"text": note("call_zzz") + '\n{"output": "sunny"}'}
    assert after == [*history[:2], gemini_turn("user", function_response_part("call_a"), kept)]


def test_gemini_response_a_turn_late_moves_back():
    history = [
        gemini_turn("user", {"text": "q"}),
        gemini_turn("model", function_call_part("call_a"), function_call_part("call_b")),
        gemini_turn("user", function_response_part("call_a")),
        gemini_turn("model", {"text": "ok"}),
        gemini_turn("user", function_response_part("call_b"), {"text": "next"}),
    ]
    after = repaired_history(Api.GEMINI, history)
    fixed = gemini_turn("user", function_response_part("call_a"), function_response_part("call_b"))
    assert after == [*history[:2], fixed, history[3], gemini_turn("user", {"text": "next"})]


def test_gemini_ids():
    """Gemini pairs by number: it takes these; toolid repairs them all the same (relays pair
    by id)."""
    history = [
        gemini_turn("user", {"text": "q"}),
        gemini_turn("model", function_call_part("call_a")),
        gemini_turn("user", function_response_part("call_a")),
        gemini_turn(
            "model",
            function_call_part("call_a"),
            function_call_part(""),
            function_call_part("call_x|fc_y"),
        ),
        gemini_turn(
            "user",
            function_response_part("call_a"),
            function_response_part(""),
            function_response_part("call_x|fc_y"),
        ),
    ]
    after = repaired_history(Api.GEMINI, history, rejected=False)
    minted = [part["functionCall"]["id"] for part in after[3]["parts"][:2]]
    assert len(set(minted)) == 2 and all(one.startswith("tid1_") for one in minted)
    calls = [function_call_part(one) for one in (*minted, "call_x")]
    results = [function_response_part(one) for one in (*minted, "call_x")]
    assert after == [*history[:3], gemini_turn("model", *calls), gemini_turn("user", *results)]


# --- the validator: the hosts' words -----------------------------------------------------------


def test_the_validator_answers_in_the_hosts_words():
    rule = {
        api: (lambda history, api=api: pairing_error(RULES[api], {MEMBER[api]: history}))
        for api in Api
    }
    chat_history = [chat_user("q"), chat_calls("call_a", "call_b"), chat_result("call_a")]
    assert rule[Api.CHAT](chat_history) == (  # some results at the end, not all
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_b"
    )
    assert rule[Api.CHAT](chat_history[:2]) is None  # the calls end it: results to come
    assert rule[Api.CHAT]([chat_user("q"), chat_result("call_a")]) == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'."
    )
    responses_history = [responses_user("q"), function_call("call_a"), ASSISTANT]
    assert rule[Api.RESPONSES](responses_history) is None  # the model's turn ends it
    assert rule[Api.RESPONSES]([*responses_history, responses_user("next")]) == (
        "No tool output found for function call call_a."
    )
    assert rule[Api.RESPONSES]([responses_user("q"), function_output("call_a")]) == (
        "No tool call found for function call output with call_id call_a."
    )
    request = {"previous_response_id": "resp_1", "input": [function_output("call_a")]}
    assert pairing_error("responses", request) is None
    calls = turn("assistant", tool_use("call_a"), tool_use("call_b"))
    assert rule[Api.MESSAGES]([{"role": "user", "content": "q"}, calls]) is None
    assert rule[Api.MESSAGES](
        [{"role": "user", "content": "q"}, calls, turn("user", tool_result("call_b"))]
    ) == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "call_a. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."
    )
    assert rule[Api.MESSAGES]([turn("user", text_block("q"), tool_result("call_z"))]) == (
        "messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks: call_z. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
        "message."
    )
    gemini_calls = gemini_turn("model", function_call_part("call_a"))
    assert rule[Api.GEMINI]([gemini_turn("user", {"text": "q"}), gemini_calls]) is None
    assert rule[Api.GEMINI]([gemini_calls]) == (
        "Please ensure that function call turn comes immediately after a user turn or after a "
        "function response turn."
    )
    assert rule[Api.GEMINI]([gemini_turn("user", function_response_part("call_a"))]) == (
        "Please ensure that function response turn comes immediately after a function call turn."
    )
    two = [gemini_turn("user", {"text": "q"}), gemini_calls, gemini_turn("user", {"text": "hm"})]
    assert rule[Api.GEMINI](two) == (
        "Please ensure that the number of function response parts is equal to the number of "
        "function call parts of the function call turn."
    )
    converse_calls = turn("assistant", tool_use_block("call_a"), tool_use_block("call_b"))
    question = turn("user", {"text": "q"})
    assert rule[Api.CONVERSE]([question, converse_calls]) is None
    assert rule[Api.CONVERSE]([question, converse_calls, question]) == (
        "Expected toolResult blocks at messages.2.content for the following Ids: call_a, call_b"
    )
    assert rule[Api.CONVERSE](
        [question, turn("assistant", {"text": "ok"}), turn("user", tool_result_block("call_a"))]
    ) == (
        "The number of toolResult blocks at messages.2.content exceeds the number of toolUse "
        "blocks of previous turn."
    )


# --- what toolid does not repair yet (each: the smallest history that shows it) ---------------


@pytest.mark.parametrize("api", [Api.CHAT, Api.MESSAGES])
def test_an_orphan_before_another_result_of_its_turn(api):
    """The orphan kept as text where it was parts the results of its turn: Chat's tool
    messages no longer follow the assistant's, Anthropic's results are no longer first."""
    if api is Api.CHAT:
        history = [
            chat_user("q"),
            chat_calls("call_a"),
            chat_result("call_zzz", "sunny"),
            chat_result("call_a"),
            chat_user("next"),
        ]
    else:
        history = [
            {"role": "user", "content": "q"},
            turn("assistant", tool_use("call_a")),
            turn("user", tool_result("call_zzz", "sunny"), tool_result("call_a")),
        ]
    repaired_history(api, history)


@pytest.mark.parametrize("api", [Api.MESSAGES, Api.CONVERSE, Api.GEMINI])
def test_two_missing_results_of_one_turn_go_in_one_user_turn(api):
    """Both calls of a turn lack their result and the model's turn follows: toolid puts in a
    user turn for each, and the second's result is then not in the message after its call."""
    if api is Api.MESSAGES:
        calls = turn("assistant", tool_use("call_a"), tool_use("call_b"))
        history = [{"role": "user", "content": "q"}, calls, turn("assistant", text_block("ok"))]
    elif api is Api.CONVERSE:
        calls = turn("assistant", tool_use_block("call_a"), tool_use_block("call_b"))
        history = [turn("user", {"text": "q"}), calls, turn("assistant", {"text": "ok"})]
    else:
        calls = gemini_turn("model", function_call_part("call_a"), function_call_part("call_b"))
        history = [gemini_turn("user", {"text": "q"}), calls, gemini_turn("model", {"text": "ok"})]
    history.append(history[0])
    after = repaired_history(api, history)
    assert len(after) == len(history) + 1


def test_responses_an_output_goes_after_the_parallel_calls_of_its_turn():
    """The missing output of the second of three parallel calls is put in right after that
    call, which parts the run of calls: the third call then opens a turn of its own, and the
    first call's output after it is past its turn."""
    history = [
        responses_user("q"),
        function_call("call_a", "fc_1"),
        function_call("call_b", "fc_2"),
        function_call("call_c", "fc_3"),
        function_output("call_a"),
        function_output("call_c"),
        ASSISTANT,
    ]
    after = repaired_history(Api.RESPONSES, history)
    assert after[:6] == history[:6]


@pytest.mark.parametrize("api", list(Api))
def test_one_id_for_two_calls_of_one_turn(api):
    """Two calls of one turn share an id, each answered (in order): the later call and every
    result after it are renamed, so the first call loses its result."""
    history = same_turn(api, "call_a", "call_a")
    repaired_history(api, history, rejected=api is not Api.GEMINI)


@pytest.mark.parametrize("api", list(Api))
def test_two_empty_ids_in_one_turn(api):
    """Two calls of one turn with empty ids (a relay that sends "" for gemini-cli's missing
    ids): each result after them is renamed with one call, then with the other."""
    history = same_turn(api, "", "")
    repaired_history(api, history, rejected=api is not Api.GEMINI)


def same_turn(api: Api, first: str, second: str) -> list[Any]:
    """A question, a turn calling ``first`` and ``second``, their results in order, a text."""
    ids = (first, second)
    if api is Api.CHAT:
        return [chat_user("q"), chat_calls(*ids), *map(chat_result, ids), chat_user("next")]
    if api is Api.RESPONSES:
        calls = [function_call(one, f"fc_{n}") for n, one in enumerate(ids)]
        return [responses_user("q"), *calls, *map(function_output, ids), ASSISTANT]
    if api is Api.MESSAGES:
        return [
            {"role": "user", "content": "q"},
            turn("assistant", *map(tool_use, ids)),
            turn("user", *map(tool_result, ids)),
            turn("assistant", text_block("ok")),
        ]
    if api is Api.CONVERSE:
        return [
            turn("user", {"text": "q"}),
            turn("assistant", *map(tool_use_block, ids)),
            turn("user", *map(tool_result_block, ids)),
            turn("assistant", {"text": "ok"}),
        ]
    return [
        gemini_turn("user", {"text": "q"}),
        gemini_turn("model", *map(function_call_part, ids)),
        gemini_turn("user", *map(function_response_part, ids)),
        gemini_turn("model", {"text": "ok"}),
    ]


@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES])
def test_results_of_the_last_turn_with_one_missing(api):
    """The history ends with some of the last turn's results, not all: toolid takes the turn
    for one still going (its results to come), OpenAI answers that the missing one has
    none."""
    if api is Api.CHAT:
        history = [chat_user("q"), chat_calls("call_a", "call_b"), chat_result("call_a")]
    else:
        history = [
            responses_user("q"),
            function_call("call_a", "fc_1"),
            function_call("call_b", "fc_2"),
            function_output("call_a"),
        ]
    repaired_history(api, history)


def test_gemini_a_response_alone_before_its_call():
    """A function response that came first in the history, alone in its turn: moved after
    its call, the turn left empty is dropped, and the history starts with the model's call,
    which Gemini refuses ("function call turn comes immediately after a user turn")."""
    history = [
        gemini_turn("user", function_response_part("call_a")),
        gemini_turn("model", function_call_part("call_a")),
        gemini_turn("user", {"text": "q"}),
    ]
    repaired_history(Api.GEMINI, history)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["", "a", "call_a", "x|y"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "type",
                    "content",
                    "id",
                    "tool_calls",
                    "tool_call_id",
                    "tool_use_id",
                    "call_id",
                    "parts",
                    "functionCall",
                    "functionResponse",
                    "toolUse",
                    "toolResult",
                    "toolUseId",
                    "messages",
                    "input",
                    "contents",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(Api)), st.sampled_from(["messages", "input", "contents"]), JSON)
def test_repair_never_raises(api, member, history):
    """Any document, any API: a result, never an exception; repaired bytes always parse."""
    body = json.dumps({member: history}).encode()
    repaired = repair_request(body, api=api)
    if repaired.repairs:
        json.loads(repaired.content)
    else:
        assert repaired.content is body


@given(st.binary(max_size=200))
def test_repair_of_any_bytes_never_raises(body):
    assert repair_request(body).content is body


def test_a_history_it_cannot_repair_is_left_with_the_reason():
    """A history that is one object, not a list, is not repaired: its pairing problems are
    listed and ``refused`` says why, an ``unrepairable`` problem whose line is its message."""
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    body = json.dumps({"model": "m", "input": output}).encode()
    repaired = repair_request(body, api=Api.RESPONSES)
    assert repaired.content is body and repaired.repairs == ()
    assert [problem.code for problem in repaired.problems] == [ORPHAN]
    assert repaired.refused == Problem(UNREPAIRABLE, "the history is a single object, not a list")
    assert repaired.refused.line() == "the history is a single object, not a list"
