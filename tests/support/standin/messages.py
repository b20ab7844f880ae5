"""Anthropic Messages (``POST .../v1/messages``; also Claude on Vertex AI and the body of
Bedrock's InvokeModel).

Server tools (``Reply.server_tool_ids``): the answer also carries ``server_tool_use``
blocks with these ids, ``web_search_tool_result`` blocks pointing at them
(``tool_use_id``), and its ``tool_use`` blocks name the first as their caller
(``caller.tool_id``). Streamed, the first ``server_tool_use`` block comes inside
``message_start.message.content``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .replies import Call, Event, Reply, dict_items

SUFFIX = "messages"
SDK_ROOT = ""
MSG_ID = "msg_01XFDUDYJgAACzvnptvVoYEL"
# Vertex AI's Claude paths: .../publishers/anthropic/models/MODEL:streamRawPredict
VERTEX_PATH = re.compile(r"/publishers/([^/]+)/models/([^/:]+):(?:raw|streamRaw)Predict$")


def matches(path: str) -> bool:
    return path.endswith("/v1/messages") or VERTEX_PATH.search(path) is not None


def count_tool_results(req: dict[str, Any]) -> int:
    """The ``tool_result`` blocks in a request's messages."""
    return sum(
        b.get("type") == "tool_result"
        for _, m in dict_items(req.get("messages"))
        for _, b in dict_items(m.get("content"))
    )


def error(message: str) -> Any:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _usage(reply: Reply, output_tokens: int | None = None) -> dict[str, Any]:
    return {
        "input_tokens": reply.usage[0],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": reply.usage[1] if output_tokens is None else output_tokens,
        "service_tier": "standard",
    }


def message(reply: Reply, content: list[Any], stop: str | None, usage: dict[str, Any]) -> Any:
    """The ``message`` object."""
    return {
        "id": MSG_ID,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def tool_use(reply: Reply, call: Call, whole: bool) -> dict[str, Any]:
    """A ``tool_use`` block: with its input, or empty as a stream starts it."""
    block: dict[str, Any] = {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": json.loads(call.arguments) if whole else {},
    }
    if reply.server_tool_ids:
        block["caller"] = {"type": "code_execution_20250825", "tool_id": reply.server_tool_ids[0]}
    return block


def _server_use(server_id: str, whole: bool) -> dict[str, Any]:
    return {
        "type": "server_tool_use",
        "id": server_id,
        "name": "web_search",
        "input": {"query": "Paris weather"} if whole else {},
    }


def _search_result(server_id: str) -> dict[str, Any]:
    return {
        "type": "web_search_tool_result",
        "tool_use_id": server_id,
        "content": [
            {
                "type": "web_search_result",
                "title": "Paris weather",
                "url": "https://example.com/paris",
                "encrypted_content": "RW5jcnlwdGVk",
                "page_age": None,
            }
        ],
    }


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.calls else "end_turn"


def buffered(reply: Reply) -> Any:
    """The ``message`` document: server tools, text, tool calls."""
    content: list[Any] = [_server_use(s, True) for s in reply.server_tool_ids]
    content += [_search_result(s) for s in reply.server_tool_ids]
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [tool_use(reply, c, True) for c in reply.calls]
    return message(reply, content, _stop_reason(reply), _usage(reply))


def event(type_: str, **fields: Any) -> Event:
    return type_, {"type": type_, **fields}


def text_delta(text: str, index: int) -> Event:
    return event("content_block_delta", index=index, delta={"type": "text_delta", "text": text})


def json_delta(partial: str, index: int) -> Event:
    return event(
        "content_block_delta",
        index=index,
        delta={"type": "input_json_delta", "partial_json": partial},
    )


def call_start(reply: Reply, call: Call, index: int) -> Event:
    """The ``content_block_start`` of a call (its id and name, no input)."""
    return event("content_block_start", index=index, content_block=tool_use(reply, call, False))


STOP: Event = event("message_stop")


def stream(reply: Reply) -> list[Event]:
    """The SSE events: message_start, ping, server tool blocks, the text block, each call
    (start, an empty then the argument deltas, stop), message_delta, message_stop."""
    early = [_server_use(reply.server_tool_ids[0], True)] if reply.server_tool_ids else []
    events = [
        event("message_start", message=message(reply, early, None, _usage(reply, 1))),
        event("ping"),
    ]
    index = len(early)
    for server_id in reply.server_tool_ids[1:]:
        events.append(
            event("content_block_start", index=index, content_block=_server_use(server_id, False))
        )
        events.append(json_delta('{"query": "Paris weather"}', index))
        events.append(event("content_block_stop", index=index))
        index += 1
    for server_id in reply.server_tool_ids:
        events.append(
            event("content_block_start", index=index, content_block=_search_result(server_id))
        )
        events.append(event("content_block_stop", index=index))
        index += 1
    if reply.text:
        events.append(
            event("content_block_start", index=index, content_block={"type": "text", "text": ""})
        )
        events += [text_delta(frag, index) for frag in reply.fragments]
        events.append(event("content_block_stop", index=index))
        index += 1
    for c in reply.calls:
        events.append(call_start(reply, c, index))
        events += [json_delta(frag, index) for frag in ("", *c.fragments)]
        events.append(event("content_block_stop", index=index))
        index += 1
    events.append(
        event(
            "message_delta",
            delta={"stop_reason": _stop_reason(reply), "stop_sequence": None},
            usage={"output_tokens": reply.usage[1]},
        )
    )
    events.append(STOP)
    return events
