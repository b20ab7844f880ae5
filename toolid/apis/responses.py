"""OpenAI Responses, over HTTP (buffered and SSE) and over WebSocket (Codex's transport)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from toolid.apis.chat import JOINED, OPENAI_EMPTY
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
    Entry,
    History,
    Repairs,
    Route,
    type_of,
    under,
    with_note,
)

#: The Responses items that are tool calls the client runs (each defines its call_id).
CALLS: Final = (
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
)
_CALLS = "|".join(CALLS)
_OUTPUTS = (
    "function_call_output|custom_tool_call_output|computer_call_output|shell_call_output"
    "|apply_patch_call_output"
)
# Items whose own id is defined by them (every tool item, server-side ones included).
_SERVER_TOOLS: Final = (
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
)
_DEFINING_IDS = "|".join((*CALLS, *_SERVER_TOOLS))
# Streamed events that name a tool item by its id (message and reasoning events carry
# item_id too; those items' ids are not positions, so neither is their item_id).
_TOOL_EVENTS = "|".join(
    f"response.{event}"
    for event in (
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "custom_tool_call_input.delta",
        "custom_tool_call_input.done",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.done",
        "mcp_call.in_progress",
        "mcp_call.completed",
        "mcp_call.failed",
        "web_search_call.in_progress",
        "web_search_call.searching",
        "web_search_call.completed",
        "file_search_call.in_progress",
        "file_search_call.searching",
        "file_search_call.completed",
        "code_interpreter_call.in_progress",
        "code_interpreter_call.interpreting",
        "code_interpreter_call.completed",
        "code_interpreter_call_code.delta",
        "code_interpreter_call_code.done",
        "image_generation_call.in_progress",
        "image_generation_call.generating",
        "image_generation_call.partial_image",
        "image_generation_call.completed",
    )
)
# Positions inside one item (relative to the item), each with its role: a call item's
# call_id and id define it; outputs, references and approvals refer to one.
_ITEM: tuple[Entry, ...] = (
    (f"[type={_CALLS}].call_id", DEFINES, "call_id"),
    (f"[type={_OUTPUTS}].call_id", REFERS, "call_id"),
    (f"[type={_DEFINING_IDS}].id", DEFINES, "item"),
    ("[type=local_shell_call_output|item_reference].id", REFERS, "item"),
    ("[type=mcp_approval_response].approval_request_id", REFERS, "item"),
)

# Items that the model produces: a run of them is one model turn.
_MODEL_ITEMS: Final = frozenset(
    {
        "assistant",  # a message item's role
        "reasoning",
        *CALLS,
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
    }
)


def _request(document: Mapping[str, Any]) -> bool:
    return isinstance(document.get("input"), list)


def _answer(document: Mapping[str, Any]) -> bool:
    kind = type_of(document)
    return document.get("object") == "response" or (
        kind is not None and kind.startswith("response.")
    )


def _output_of(call: Mapping[str, Any]) -> str:
    """The type of the output item that answers ``call`` with a text (ValueError: none does,
    as a computer call's wants a screenshot)."""
    kind = call.get("type")
    if kind not in ("function_call", "custom_tool_call", "shell_call", "apply_patch_call"):
        raise ValueError(f"no text answers a {kind} item")
    return f"{kind}_output"


def _input_text(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def _as_parts(content: Any) -> list[dict[str, Any]]:
    """An output kept as a user message's content: a string as an input_text part."""
    return [_input_text(content)] if isinstance(content, str) else content


RECORD: Final = ApiRecord(
    api=Api.RESPONSES,
    title="OpenAI Responses",
    routes=(Route(re.compile(r"/responses(?:/input_tokens|/[^/]+)?/?$")),),
    request_shape=_request,
    answer_shape=_answer,
    positions={
        Doc.REQUEST: under("input", _ITEM),
        Doc.RESPONSE: under("output", _ITEM),
        Doc.EVENT: (
            *under("item", _ITEM),
            *under("response.output", _ITEM),
            (f"[type={_TOOL_EVENTS}].item_id", REFERS, "item"),
        ),
    },
    event_call_number="output_index",
    history=History(
        results=frozenset({("call_id", "call_id")}),
        calls=frozenset({("call_id", "call_id")}),
        call_types=frozenset(
            {"function_call", "custom_tool_call", "computer_call", "shell_call", "apply_patch_call"}
        ),
        closes=_MODEL_ITEMS,
        runs=True,
        elsewhere=("previous_response_id", "conversation"),
        texts={
            ORPHAN: "No tool call found for function call output with call_id {id}.",
            MISSING: "No tool output found for function call {id}.",
            MISPLACED: "No tool call found for function call output with call_id {id}.",
            EMPTY: OPENAI_EMPTY,
            f"{DUPLICATE}.item": "Duplicate item found with id {id}. Remove duplicate items "
            "from your input and try again.",
            DUPLICATE: "two calls carry one call_id, so their outputs cannot be told apart",
            COMPOSITE: JOINED.format(
                rule="OpenAI accepts letters, numbers, underscores or dashes only"
            ),
        },
        guesses=frozenset({DUPLICATE, COMPOSITE}),
    ),
    framings=frozenset({"sse", "websocket"}),
    elements=(
        Element("input", Doc.REQUEST, type_prefix=""),  # an item
        Element("", Doc.EVENT, type_prefix="response."),  # a streamed event
    ),
    # Azure OpenAI: /openai/deployments/{deployment}/responses
    model_routes=(re.compile(r"/deployments/(?P<model>[^/]+)/"),),
    ids_required=frozenset({"call_id"}),
    repairs=Repairs(
        result=lambda call_id, call, text: {
            "type": _output_of(call),
            "call_id": call_id,
            "output": text,
        },
        as_text=lambda item, note: [
            {
                "type": "message",
                "role": "user",
                "content": _as_parts(with_note(item.get("output"), note, _input_text)),
            }
        ],
    ),
)
