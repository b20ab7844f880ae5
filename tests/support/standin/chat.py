"""OpenAI Chat Completions (``POST .../chat/completions``), as vLLM serves it."""

from __future__ import annotations

from typing import Any

from .replies import CREATED, MODEL, Call, Event, Reply, dict_items

SUFFIX = "chat/completions"  # the endpoint, after the SDK's base URL
SDK_ROOT = "/v1"  # the SDK's base URL, after the host


def matches(path: str) -> bool:
    """Whether a request path (no query) is this API's endpoint."""
    return path.endswith("/chat/completions")


def count_tool_results(req: dict[str, Any]) -> int:
    """The tool messages in a request's history."""
    return sum(m.get("role") == "tool" for _, m in dict_items(req.get("messages")))


def error(message: str) -> Any:
    """The body of a 4xx answer."""
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


def _base(obj: str, model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-9f1c2e7ab3d84c0e", "object": obj, "created": CREATED, "model": model}


def _usage(reply: Reply) -> dict[str, Any]:
    prompt, completion = reply.usage
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def buffered(reply: Reply) -> Any:
    """The ``chat.completion`` document."""
    message = {
        "role": "assistant",
        "content": reply.text or None,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.calls
        ],
        "reasoning_content": None,
    }
    return {
        **_base("chat.completion", reply.model),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if reply.calls else "stop",
                "stop_reason": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": _usage(reply),
        "prompt_logprobs": None,
        "kv_transfer_params": None,
    }


def chunk(delta: dict[str, Any], finish: str | None = None, model: str = MODEL) -> Event:
    """One ``chat.completion.chunk`` event."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return None, {**_base("chat.completion.chunk", model), "choices": [choice]}


def call_start(call: Call, index: int, model: str = MODEL) -> Event:
    """The first delta of a call: the only one with its id, type and name."""
    first = {
        "id": call.id,
        "type": "function",
        "index": index,
        "function": {"name": call.name, "arguments": ""},
    }
    return chunk({"tool_calls": [first]}, model=model)


DONE: Event = (None, "[DONE]")


def stream(reply: Reply) -> list[Event]:
    """The SSE events: a role delta, the text, each call (start, argument fragments), the
    finish reason, ``[DONE]``."""
    m = reply.model
    events = [chunk({"role": "assistant", "content": ""}, model=m)]
    events += [chunk({"content": frag}, model=m) for frag in reply.fragments]
    for i, c in enumerate(reply.calls):
        events.append(call_start(c, i, m))
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}, model=m)
            for frag in c.fragments
        ]
    events.append(chunk({}, "tool_calls" if reply.calls else "stop", m))
    events.append(DONE)
    return events
