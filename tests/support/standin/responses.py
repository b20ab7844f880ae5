"""OpenAI Responses (``POST .../responses``; also the events of Responses over WebSocket)."""

from __future__ import annotations

import itertools
from typing import Any

from .replies import CREATED, Call, Event, Reply, dict_items

SUFFIX = "responses"
SDK_ROOT = "/v1"
MSG_ID = "msg_5b0e6c1d9a2f4e83"
RESPONSE_ID = "resp_8c3f0a51e2b94d7f"


def matches(path: str) -> bool:
    return path.endswith("/responses")


def count_tool_results(req: dict[str, Any]) -> int:
    """The ``function_call_output`` items in a request's input."""
    return sum(i.get("type") == "function_call_output" for _, i in dict_items(req.get("input")))


def error(message: str) -> Any:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


def _usage(reply: Reply) -> dict[str, Any]:
    i, o = reply.usage
    return {
        "input_tokens": i,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": i + o,
    }


def response(reply: Reply, status: str, output: list[Any]) -> dict[str, Any]:
    """The ``response`` object (``usage`` only once completed)."""
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "store": False,
        "temperature": 0.6,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": _usage(reply) if status == "completed" else None,
        "user": None,
        "metadata": {},
    }


def call_item(call: Call, done: bool) -> dict[str, Any]:
    """A ``function_call`` output item, in progress (no arguments yet) or done."""
    return {
        "id": call.item_id,
        "type": "function_call",
        "status": "completed" if done else "in_progress",
        "arguments": call.arguments if done else "",
        "call_id": call.id,
        "name": call.name,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(text: str | None) -> dict[str, Any]:
    return {
        "id": MSG_ID,
        "type": "message",
        "status": "in_progress" if text is None else "completed",
        "role": "assistant",
        "content": [] if text is None else [_text_part(text)],
    }


def _output(reply: Reply) -> list[Any]:
    text = [_message_item(reply.text)] if reply.text else []
    return text + [call_item(c, True) for c in reply.calls]


def buffered(reply: Reply) -> Any:
    """The completed ``response`` document."""
    return response(reply, "completed", _output(reply))


def event(type_: str, seq: int, **fields: Any) -> Event:
    """One named event with its ``sequence_number``."""
    return type_, {"type": type_, "sequence_number": seq, **fields}


_WHERE = {"item_id": MSG_ID, "output_index": 0, "content_index": 0}


def text_delta(text: str, seq: int) -> Event:
    """A ``response.output_text.delta`` of the message item."""
    return event("response.output_text.delta", seq, **_WHERE, delta=text, logprobs=[])


def call_added(call: Call, output_index: int, seq: int) -> Event:
    """The ``response.output_item.added`` that opens a call (its ids, no arguments)."""
    return event(
        "response.output_item.added", seq, output_index=output_index, item=call_item(call, False)
    )


def stream(reply: Reply) -> list[Event]:
    """The SSE events: created, in progress, the message item (if text), each call item
    (added, argument deltas, done), completed."""
    seq = itertools.count()
    events = [
        event("response.created", next(seq), response=response(reply, "in_progress", [])),
        event("response.in_progress", next(seq), response=response(reply, "in_progress", [])),
    ]
    if reply.text:
        events.append(
            event("response.output_item.added", next(seq), output_index=0, item=_message_item(None))
        )
        events.append(
            event("response.content_part.added", next(seq), **_WHERE, part=_text_part(""))
        )
        events += [text_delta(frag, next(seq)) for frag in reply.fragments]
        events += [
            event("response.output_text.done", next(seq), **_WHERE, text=reply.text, logprobs=[]),
            event("response.content_part.done", next(seq), **_WHERE, part=_text_part(reply.text)),
            event(
                "response.output_item.done",
                next(seq),
                output_index=0,
                item=_message_item(reply.text),
            ),
        ]
    first = 1 if reply.text else 0
    for i, c in enumerate(reply.calls, first):
        events.append(call_added(c, i, next(seq)))
        where = {"item_id": c.item_id, "output_index": i}
        events += [
            event("response.function_call_arguments.delta", next(seq), **where, delta=frag)
            for frag in c.fragments
        ]
        events.append(
            event(
                "response.function_call_arguments.done",
                next(seq),
                **where,
                name=c.name,
                arguments=c.arguments,
            )
        )
        events.append(
            event("response.output_item.done", next(seq), output_index=i, item=call_item(c, True))
        )
    events.append(event("response.completed", next(seq), response=buffered(reply)))
    return events
