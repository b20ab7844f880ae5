"""OpenAI Chat Completions (and every server that speaks it: vLLM, SGLang, OpenRouter, ...)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from toolid.apis.record import (
    COMPOSITE,
    DEFINES,
    DUPLICATE,
    EMPTY,
    MISPLACED,
    MISSING,
    ORPHAN,
    REFERS,
    Api,
    ApiRecord,
    Doc,
    Element,
    History,
    Repairs,
    Route,
    some_message,
    with_note,
)

#: The text OpenAI answers an empty id with (Chat and Responses).
OPENAI_EMPTY: Final = (
    "Invalid '{path}': empty string. Expected a string with minimum length 1, "
    "but got an empty string instead."
)
#: toolid's text for an id that joins two ids; ``{rule}``: what the destination accepts.
JOINED: Final = "the id joins two ids ('call_...|fc_...') or holds whitespace: {rule}"
_MEMBERS: Final = frozenset({"tool_calls", "tool_call_id"})


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _request(document: Mapping[str, Any]) -> bool:
    return some_message(document, lambda m: "tool_calls" in m or m.get("role") == "tool")


def _answer(document: Mapping[str, Any]) -> bool:
    return isinstance(document.get("choices"), list)


RECORD: Final = ApiRecord(
    api=Api.CHAT,
    title="OpenAI Chat Completions",
    routes=(Route(re.compile(r"/chat/completions/?$")),),
    request_shape=_request,
    answer_shape=_answer,
    positions={
        Doc.REQUEST: (
            ("messages[].tool_calls[].id", DEFINES, "call"),
            ("messages[].tool_call_id", REFERS, "call"),
        ),
        Doc.RESPONSE: (("choices[].message.tool_calls[].id", DEFINES, "call"),),
        Doc.EVENT: (("choices[].delta.tool_calls[].id", DEFINES, "call"),),
    },
    history=History(
        results=frozenset({("call", "tool_call_id")}),
        calls=frozenset({("call", "id")}),
        closes=frozenset({"assistant", "user"}),
        texts={
            ORPHAN: "Invalid parameter: messages with role 'tool' must be a response to a "
            "preceeding message with 'tool_calls'.",
            MISSING: "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            "response messages: {id}",
            MISPLACED: "An assistant message with 'tool_calls' must be followed by tool "
            "messages responding to each 'tool_call_id'. The following tool_call_ids did not "
            "have response messages: {id}",
            EMPTY: OPENAI_EMPTY,
            DUPLICATE: "two calls carry one id, so their results cannot be told apart: strict "
            "servers reject the request, others answer one call twice",
            COMPOSITE: JOINED.format(rule="strict APIs accept [A-Za-z0-9_-]+ only"),
        },
        guesses=frozenset({DUPLICATE, COMPOSITE}),
    ),
    framings=frozenset({"sse"}),
    # a chat message or a streamed delta
    elements=(Element("messages", Doc.REQUEST, needs=_MEMBERS),),
    # Azure OpenAI: /openai/deployments/{deployment}/chat/completions
    model_routes=(re.compile(r"/deployments/(?P<model>[^/]+)/"),),
    ids_required=frozenset({"call"}),
    id_on_first_mention=True,
    repairs=Repairs(
        result=lambda call_id, _call, text: {
            "role": "tool",
            "tool_call_id": call_id,
            "content": text,
        },
        as_text=lambda message, note: [
            {"role": "user", "content": with_note(message.get("content"), note, _text_part)}
        ],
    ),
)
