"""Anthropic Messages: Anthropic's API, Claude on Vertex AI and on Bedrock's InvokeModel, and
the Anthropic-compatible endpoints of other vendors."""

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
    Entry,
    History,
    Repairs,
    Route,
    some_message,
    type_of,
    under,
    with_note,
)

# Positions inside one content block (relative to the block).
_BLOCK: tuple[Entry, ...] = (
    ("[type=tool_use|server_tool_use|mcp_tool_use].id", DEFINES, "call"),
    ("[].tool_use_id", REFERS, "call"),
    ("[].caller.tool_id", REFERS, "call"),
)
_TOOL_BLOCKS: Final = frozenset(
    {"tool_use", "tool_result", "server_tool_use", "mcp_tool_use", "mcp_tool_result"}
)
_EVENTS: Final = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "content_block_stop"}
)
_PATTERN_TEXT: Final = "String should match pattern '^[a-zA-Z0-9_-]+$'"


def _request(document: Mapping[str, Any]) -> bool:
    def tool_blocks(message: dict[str, Any]) -> bool:
        content = message.get("content")
        return isinstance(content, list) and any(
            type_of(block) in _TOOL_BLOCKS for block in content
        )

    return some_message(document, tool_blocks)


def _answer(document: Mapping[str, Any]) -> bool:
    kind = type_of(document)
    return (kind == "message" and isinstance(document.get("content"), list)) or kind in _EVENTS


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    """A result's content kept as a user's blocks: a string as a text block."""
    return [_text(content)] if isinstance(content, str) else content


RECORD: Final = ApiRecord(
    api=Api.MESSAGES,
    title="Anthropic Messages",
    routes=(
        # OpenAI Assistants also has .../threads/<id>/messages, with other shapes.
        Route(re.compile(r"/messages(?:/count_tokens)?/?$"), veto=re.compile(r"/threads/")),
        # Bedrock's InvokeModel and InvokeModelWithResponseStream carry the model's own body:
        # a Messages body when the model id names an Anthropic model (anthropic.claude-...,
        # us.anthropic.claude-..., an ARN ending in one). Any other model (an inference
        # profile ARN, gpt-oss with a Chat body, ...): the body's shape decides.
        Route(
            re.compile(r"/model/[^/]*anthropic\.[^/]*/invoke(?:-with-response-stream)?/?$", re.I)
        ),
        # Claude on Vertex AI: .../publishers/anthropic/models/{model}:rawPredict (buffered)
        # and :streamRawPredict (SSE) carry Messages bodies (the model in the path).
        Route(re.compile(r"/publishers/anthropic/models/[^/]+:(?:raw|streamRaw)Predict$")),
    ),
    request_shape=_request,
    answer_shape=_answer,
    positions={
        Doc.REQUEST: under("messages[].content", _BLOCK),
        Doc.RESPONSE: under("content", _BLOCK),
        Doc.EVENT: (
            *under("content_block", _BLOCK),
            *under("message.content", _BLOCK),
        ),
    },
    event_call_number="index",
    history=History(
        results=frozenset({("call", "tool_use_id")}),
        calls=frozenset({("call", "id")}),
        call_types=frozenset({"tool_use"}),
        closes=frozenset({"assistant"}),
        next_only=True,
        results_first=True,
        texts={
            ORPHAN: "{block}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the "
            "previous message.",
            MISSING: "{element}: `tool_use` ids were found without `tool_result` blocks "
            "immediately after: {id}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message.",
            MISPLACED: "{element}: `tool_use` ids were found without `tool_result` blocks "
            "immediately after: {id}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message.",
            EMPTY: "{member}: " + _PATTERN_TEXT,
            DUPLICATE: "{block}: `tool_use` ids must be unique",
            COMPOSITE: "{member}: " + _PATTERN_TEXT,
        },
    ),
    framings=frozenset({"sse"}),
    elements=(
        Element("content", Doc.RESPONSE, needs=frozenset({"type", "tool_use_id", "caller"})),
    ),
    # Claude on Vertex AI: .../publishers/anthropic/models/{model}:rawPredict
    model_routes=(re.compile(r"/publishers/(?P<vendor>[^/]+)/models/(?P<model>[^/:]+)"),),
    # Claude Code sends its default claude-* model names to whatever ANTHROPIC_BASE_URL names
    # (Kimi's, DeepSeek's and GLM's Anthropic endpoints, claude-code-router): a bare claude-*
    # name in a Messages request says nothing of the destination.
    untaken_model_rules=("claude-*",),
    ids_required=frozenset({"call"}),
    repairs=Repairs(
        result=lambda call_id, _call, text: {
            "type": "tool_result",
            "tool_use_id": call_id,
            "is_error": True,
            "content": text,
        },
        as_text=lambda block, note: _as_blocks(with_note(block.get("content"), note, _text)),
        blocks="content",
        user={"role": "user"},
        text_block=_text,
    ),
)
