"""Recognise which LLM API a request speaks: from its path, else from its body's shape."""

from __future__ import annotations

import re
from typing import Any, Final

from toolid.memo import memo
from toolid.positions import Api, Doc

_GEMINI_ROUTE: Final = re.compile(
    r"(?:/(?:models|tunedModels|endpoints)/[^/]+|/v1internal)"
    r":(?P<method>generateContent|streamGenerateContent|countTokens)$"
)
# (path pattern, API, path pattern that vetoes it). Searched at the end of the path, so any
# prefix works: /api/v1/chat/completions, /anthropic/v1/messages, /openai/deployments/x/...
_PATH_RULES: Final[tuple[tuple[re.Pattern[str], Api, re.Pattern[str] | None], ...]] = (
    (re.compile(r"/chat/completions/?$"), Api.CHAT, None),
    (re.compile(r"/responses(?:/input_tokens|/[^/]+)?/?$"), Api.RESPONSES, None),
    # OpenAI Assistants also has .../threads/<id>/messages, with other shapes.
    (re.compile(r"/messages(?:/count_tokens)?/?$"), Api.MESSAGES, re.compile(r"/threads/")),
    # AWS Bedrock Runtime (botocore service-2.json requestUri): Converse, ConverseStream,
    # CountTokens (whose ``converse`` input is a Converse request) under /model/{modelId}/.
    (re.compile(r"/model/[^/]+/(?:converse|converse-stream|count-tokens)/?$"), Api.CONVERSE, None),
    # InvokeModel and InvokeModelWithResponseStream carry the model's own body: an Anthropic
    # Messages body when the model id names an Anthropic model (anthropic.claude-...,
    # us.anthropic.claude-..., an ARN ending in one). Any other model (an inference profile
    # ARN, gpt-oss with a Chat body, ...): the body's shape decides.
    (
        re.compile(r"/model/[^/]*anthropic\.[^/]*/invoke(?:-with-response-stream)?/?$", re.I),
        Api.MESSAGES,
        None,
    ),
    # Claude on Vertex AI: .../publishers/anthropic/models/{model}:rawPredict (buffered) and
    # :streamRawPredict (SSE) carry Messages bodies (the model in the path, not the body).
    (
        re.compile(r"/publishers/anthropic/models/[^/]+:(?:raw|streamRaw)Predict$"),
        Api.MESSAGES,
        None,
    ),
    # Gemini (python-genai models.py: '{model}:generateContent',
    # '{model}:streamGenerateContent?alt=sse', '{model}:countTokens'): the Gemini API's
    # /v1beta/models/M and /v1beta/tunedModels/M, Vertex AI's .../publishers/google/models/M
    # and .../endpoints/E; Code Assist's /v1internal:method (gemini-cli code_assist/server.ts).
    (_GEMINI_ROUTE, Api.GEMINI, None),
)
_CONVERSE_BLOCKS: Final = frozenset({"toolUse", "toolResult"})

_MESSAGES_BLOCKS: Final = frozenset(
    {"tool_use", "tool_result", "server_tool_use", "mcp_tool_use", "mcp_tool_result"}
)
_MESSAGES_EVENTS: Final = frozenset(
    {"message_start", "content_block_start", "content_block_delta", "content_block_stop"}
)


def api_from_path(path: str) -> Api | None:
    """The API named by a request path (query string allowed), or None."""
    return _api_of_route(path.split("?", 1)[0])


@memo(64 * 1024)  # an agent calls a handful of routes, again and again
def _api_of_route(path: str) -> Api | None:
    for pattern, api, veto in _PATH_RULES:
        if pattern.search(path) and not (veto and veto.search(path)):
            return api
    return None


def streamed_route(path: str) -> bool:
    """Whether a request path (query string allowed) asks for a streamed answer by its route
    alone, as Gemini's ``:streamGenerateContent`` does (SSE with ``?alt=sse``, else a JSON
    array written element by element), whatever the body says."""
    match = _GEMINI_ROUTE.search(path.split("?", 1)[0])
    return match is not None and match["method"] == "streamGenerateContent"


def api_from_shape(document: Any, doc: Doc) -> Api | None:
    """Guess the API from a parsed body or event whose path said nothing."""
    if not isinstance(document, dict):
        return None
    if doc is Doc.REQUEST or doc is Doc.HISTORY:
        if isinstance(document.get("input"), list):
            return Api.RESPONSES
        messages = document.get("messages")
        if isinstance(messages, list):
            return _api_of_messages(messages)
        if _holds_list(document, "contents"):  # Gemini, bare or wrapped by Code Assist
            return Api.GEMINI
        return None
    kind = _type_of(document)
    if isinstance(document.get("choices"), list):
        return Api.CHAT
    if document.get("object") == "response" or (
        isinstance(kind, str) and kind.startswith("response.")
    ):
        return Api.RESPONSES
    if (kind == "message" and isinstance(document.get("content"), list)) or (
        kind in _MESSAGES_EVENTS
    ):
        return Api.MESSAGES
    output = document.get("output")
    if (isinstance(output, dict) and isinstance(output.get("message"), dict)) or (
        isinstance(document.get("contentBlockIndex"), int)
    ):  # a Converse response, a ConverseStream event
        return Api.CONVERSE
    if _holds_list(document, "candidates"):  # Gemini, bare or wrapped by Code Assist
        return Api.GEMINI
    return None


def _holds_list(document: dict[str, Any], member: str) -> bool:
    """Whether ``member`` is a list in ``document`` or in the Code Assist envelope
    (``request`` / ``response``) around it."""
    if isinstance(document.get(member), list):
        return True
    return any(
        isinstance(inner := document.get(envelope), dict) and isinstance(inner.get(member), list)
        for envelope in _ENVELOPES
    )


_ENVELOPES: Final = ("request", "response", "generateContentRequest")


def _api_of_messages(messages: list[Any]) -> Api | None:
    for message in messages:
        if not isinstance(message, dict):
            continue
        if "tool_calls" in message or message.get("role") == "tool":
            return Api.CHAT
        content = message.get("content")
        if isinstance(content, list) and any(
            _type_of(block) in _MESSAGES_BLOCKS for block in content
        ):
            return Api.MESSAGES
        if isinstance(content, list) and any(
            isinstance(block, dict) and not _CONVERSE_BLOCKS.isdisjoint(block) for block in content
        ):
            return Api.CONVERSE
    return None


def _type_of(node: Any) -> str | None:
    kind = node.get("type") if isinstance(node, dict) else None
    return kind if isinstance(kind, str) else None
