"""Recognising the API of a request: from its path (toolid/apis.py), else from body shape."""

from __future__ import annotations

from typing import Any

import pytest

from toolid.apis import api_from_path, api_from_shape
from toolid.positions import Api, Doc

# --- paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "api"),
    [
        # Chat Completions, with any prefix and a query string
        ("/v1/chat/completions", Api.CHAT),
        ("/v1/chat/completions/", Api.CHAT),
        ("/chat/completions", Api.CHAT),
        ("/api/v1/chat/completions", Api.CHAT),
        ("/openai/deployments/x/chat/completions?api-version=2024-10-21", Api.CHAT),
        ("/v1beta/openai/chat/completions", Api.CHAT),
        ("/v1/chat/completions?stream=true&x=/v1/messages", Api.CHAT),
        # Responses: create, retrieve, input token count
        ("/v1/responses", Api.RESPONSES),
        ("/v1/responses/", Api.RESPONSES),
        ("/v1/responses/resp_123", Api.RESPONSES),
        ("/v1/responses/input_tokens", Api.RESPONSES),
        ("/openai/v1/responses?api-version=preview", Api.RESPONSES),
        ("/api/v1/responses", Api.RESPONSES),
        # Anthropic Messages
        ("/v1/messages", Api.MESSAGES),
        ("/v1/messages/", Api.MESSAGES),
        ("/anthropic/v1/messages", Api.MESSAGES),
        ("/v1/messages/count_tokens", Api.MESSAGES),
        ("/v1/messages?beta=true", Api.MESSAGES),
        ("/api/anthropic/v1/messages/count_tokens?beta=true", Api.MESSAGES),
    ],
)
def test_path_recognised(path: str, api: Api) -> None:
    assert api_from_path(path) is api


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        "/v1/threads/thread_1/messages",  # OpenAI Assistants: other shapes
        "/v1/threads/thread_1/messages/",
        "/v1/threads/thread_1/messages?limit=1",
        "/v1/completions",  # legacy completions: no tool calls
        "/v1/models",
        "/v1/embeddings",
        "/v1/chat/completions/extra",
        "/v1/chat/completionsx",
        "/v1/messagesx",
        "/v1/my_messages",
        "/v1/messages/batches",
        "/v1/messages/msg_1/other",
        "/v1/responses/resp_1/input_items",
        "/v1/chat",
        "/?path=/v1/chat/completions",
        "/v1/models?next=/v1/messages",
    ],
)
def test_path_not_recognised(path: str) -> None:
    assert api_from_path(path) is None


# --- body shapes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "api"),
    [
        (
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "tool_calls": [{"id": "a:1", "type": "function"}]},
                ],
            },
            Api.CHAT,
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "tool_call_id": "a:1", "content": "x"}]},
            Api.CHAT,
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "x"}]},
            Api.RESPONSES,
        ),
        ({"model": "m", "input": []}, Api.RESPONSES),
        (
            {
                "model": "m",
                "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "a:1", "name": "f", "input": {}}],
                    },
                ],
            },
            Api.MESSAGES,
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a:1"}]}
                ]
            },
            Api.MESSAGES,
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "server_tool_use", "id": "srvtoolu_1"}],
                    }
                ]
            },
            Api.MESSAGES,
        ),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "mcp_tool_use", "id": "x"}]}]},
            Api.MESSAGES,
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "mcp_tool_result", "tool_use_id": "x"}]}
                ]
            },
            Api.MESSAGES,
        ),
        # the first telling message decides; junk messages are skipped
        (
            {
                "messages": [
                    None,
                    "x",
                    {"role": "user", "content": [{"type": "text", "text": "t"}]},
                    {"role": "tool", "tool_call_id": "a"},
                ]
            },
            Api.CHAT,
        ),
    ],
)
def test_request_shape(document: Any, api: Api) -> None:
    assert api_from_shape(document, Doc.REQUEST) is api


@pytest.mark.parametrize(
    "document",
    [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},  # nothing telling
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "t"}]}]},
        {"model": "m", "messages": []},
        {"model": "m", "messages": "hi"},
        {"model": "m", "input": "hi"},  # Responses with a string input: no ids either way
        {"model": "m", "prompt": "hi"},
        {"choices": [{"message": {"tool_calls": [{"id": "a:1"}]}}]},  # a response, not request
        {"messages": [{"content": [{"type": ["tool_use"]}]}]},
        {"messages": [{"content": [{"type": {"tool_use": 1}}]}]},
        {"messages": [{"content": [None, 1, "tool_use"]}]},
    ],
)
def test_request_shape_unknown(document: Any) -> None:
    assert api_from_shape(document, Doc.REQUEST) is None


@pytest.mark.parametrize(
    ("document", "api"),
    [
        (
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
            },
            Api.CHAT,
        ),
        ({"choices": []}, Api.CHAT),
        (
            {"id": "resp_1", "object": "response", "status": "completed", "output": []},
            Api.RESPONSES,
        ),
        (
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": "hi"}],
            },
            Api.MESSAGES,
        ),
    ],
)
def test_response_shape(document: Any, api: Api) -> None:
    assert api_from_shape(document, Doc.RESPONSE) is api


@pytest.mark.parametrize(
    ("document", "api"),
    [
        (
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a:1"}]}}],
            },
            Api.CHAT,
        ),
        ({"object": "chat.completion.chunk", "choices": [], "usage": {}}, Api.CHAT),
        ({"type": "response.created", "response": {"object": "response"}}, Api.RESPONSES),
        ({"type": "response.in_progress", "response": {}}, Api.RESPONSES),
        ({"type": "response.output_item.added", "item": {}}, Api.RESPONSES),
        ({"type": "response.output_item.done", "item": {}}, Api.RESPONSES),
        ({"type": "response.function_call_arguments.delta", "item_id": "x"}, Api.RESPONSES),
        ({"type": "response.completed", "response": {}}, Api.RESPONSES),
        ({"type": "response.incomplete", "response": {}}, Api.RESPONSES),
        ({"type": "response.failed", "response": {}}, Api.RESPONSES),
        (
            {"type": "message_start", "message": {"type": "message", "content": []}},
            Api.MESSAGES,
        ),
        (
            {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use"}},
            Api.MESSAGES,
        ),
        ({"type": "content_block_delta", "index": 0, "delta": {}}, Api.MESSAGES),
        ({"type": "content_block_stop", "index": 0}, Api.MESSAGES),
    ],
)
def test_event_shape(document: Any, api: Api) -> None:
    assert api_from_shape(document, Doc.EVENT) is api


@pytest.mark.parametrize(
    "document",
    [
        {"type": "ping"},
        {"type": "message_stop"},
        {"type": "error", "error": {"type": "overloaded_error"}},
        {"type": "message", "content": "a string"},
        {"type": "message"},
        {"object": "chat.completion.chunk"},
        {"choices": "x"},
        {"object": "responses"},
        {"type": "responses.created"},
        {"type": "Response.created"},
        {},
    ],
)
def test_response_and_event_shape_unknown(document: Any) -> None:
    assert api_from_shape(document, Doc.RESPONSE) is None
    assert api_from_shape(document, Doc.EVENT) is None


JUNK: list[Any] = [
    None,
    0,
    -1.5,
    True,
    "",
    "messages",
    "{}",
    b"{}",
    [],
    [{"choices": []}],
    [{"messages": [{"role": "tool"}]}],
    {"type": [1]},
    {"type": ["message"], "content": []},
    {"type": {"response.created": 1}},
    {"type": None},
    {"type": 1},
    {"object": ["response"]},
    {"object": {"response": 1}},
    {"messages": None},
    {"messages": {"role": "tool"}},
    {"messages": [[{"role": "tool"}]]},
    {"messages": [{"role": ["tool"]}]},
    {"messages": [{"content": {"type": "tool_use"}}]},
    {"input": {"type": "function_call"}},
    {"input": None},
]


@pytest.mark.parametrize("junk", JUNK, ids=lambda j: repr(j)[:40])
def test_junk_shapes(junk: Any) -> None:
    for doc in Doc:
        assert api_from_shape(junk, doc) is None


def test_request_and_response_shapes_do_not_leak_into_each_other() -> None:
    responses_request = {"model": "m", "input": [{"type": "function_call"}]}
    assert api_from_shape(responses_request, Doc.RESPONSE) is None
    assert api_from_shape(responses_request, Doc.EVENT) is None
    chat_response = {"choices": [{"message": {}}]}
    assert api_from_shape(chat_response, Doc.REQUEST) is None
