"""The bodies and streams the benchmark sends and serves (deterministic).

The responses are rendered by the e2e tests' stand-in (``tests/support/standin``: one renderer
per API), composed into the bench's shapes here.

Ids look like Kimi's: the upstream sends ``functions.get_weather:0`` (not ``[A-Za-z0-9_-]+``,
so toolid encodes it) and the agent sends back ``tid1_functions-2Eget_weather-3A0`` (which
toolid restores). "Conforming" variants use ``call_...`` ids that toolid leaves alone: the
pass-through path.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from standin import chat, messages, responses, sse
from standin.replies import Call, Reply, dumps

Shape = Literal["chat", "responses", "messages"]
SHAPES: tuple[Shape, ...] = ("chat", "responses", "messages")

#: The path each API shape is called on (the addon recognises the API from it).
PATHS: dict[Shape, str] = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}

#: Each shape's renderer (the stand-in's, tests/support/standin).
RENDERERS = {"chat": chat, "responses": responses, "messages": messages}

MODEL = "kimi-k2-0905"
TOOLS = ("get_weather", "get_time", "search_web", "read_file")


def _dumps(value: Any) -> bytes:
    return dumps(value).encode()


def raw_id(k: int) -> str:
    """The k-th Kimi-style id of a conversation, as the upstream sends it."""
    return f"functions.{TOOLS[k % len(TOOLS)]}:{k}"


def client_id(k: int) -> str:
    """``raw_id(k)`` as toolid hands it to the agent (wire format v1, profile safe)."""
    name = TOOLS[k % len(TOOLS)]
    return f"tid1_functions-2E{name}-3A{k}"


def conforming_id(k: int) -> str:
    """An id toolid passes through unchanged."""
    return f"call_{k:08d}{(k * 2654435761) % 2**64:016x}"


def _tool_output(k: int) -> str:
    """About 1.8 KiB of tool output: JSON text, so it is full of escaped quotes once embedded."""
    hours = [
        {
            "hour": h,
            "temp_c": 11 + (h * 7 + k) % 9,
            "wind_kmh": (h * 3 + k) % 25,
            "summary": 'partly cloudy with light winds, "feels like" slightly colder',
        }
        for h in range(14)
    ]
    return json.dumps({"city": "Paris", "day": k, "forecast": hours})


def _arguments(k: int) -> str:
    return json.dumps({"city": "Paris", "unit": "celsius", "day": k})


# --- requests: a conversation with prior tool calls (the agent's follow-up request) -----------


def history_request(shape: Shape, calls: int, *, ids: Literal["client", "conforming"]) -> bytes:
    """A follow-up request carrying ``calls`` prior tool calls and their results (~2 KiB each).

    ``ids="client"``: ``tid1_`` ids that toolid restores; ``"conforming"``: nothing to change.
    """
    make_id = client_id if ids == "client" else conforming_id
    system = "You are a helpful assistant. Use the tools when they help."
    user = "What is the weather in Paris for each of the next days? Check them one by one."
    if shape == "chat":
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        for k in range(calls):
            call_id = make_id(k)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": TOOLS[k % len(TOOLS)], "arguments": _arguments(k)},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _tool_output(k)})
        return _dumps({"model": MODEL, "messages": messages, "tools": _chat_tools()})
    if shape == "responses":
        items: list[dict[str, Any]] = [{"role": "user", "content": user}]
        for k in range(calls):
            call_id = make_id(k)
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{k:08d}",
                    "call_id": call_id,
                    "name": TOOLS[k % len(TOOLS)],
                    "arguments": _arguments(k),
                }
            )
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": _tool_output(k)}
            )
        return _dumps({"model": MODEL, "instructions": system, "input": items})
    turns: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for k in range(calls):
        call_id = make_id(k)
        turns.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me check."},
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": TOOLS[k % len(TOOLS)],
                        "input": {"city": "Paris", "unit": "celsius", "day": k},
                    },
                ],
            }
        )
        turns.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": _tool_output(k)}
                ],
            }
        )
    return _dumps({"model": MODEL, "max_tokens": 1024, "system": system, "messages": turns})


def calls_for_size(size: int) -> int:
    """How many prior tool calls make a history request of about ``size`` bytes."""
    per_call = (
        len(history_request("chat", 20, ids="client"))
        - len(history_request("chat", 0, ids="client"))
    ) / 20
    return max(1, round(size / per_call))


def _chat_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ')} for a place",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
        for name in TOOLS
    ]


def first_request(shape: Shape, *, stream: bool = False) -> bytes:
    """The small request an agent sends before it gets tool calls back."""
    user = "What is the weather in Paris and what time is it there?"
    if shape == "chat":
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": user}],
            "tools": _chat_tools(),
        }
    elif shape == "responses":
        body = {"model": MODEL, "input": [{"role": "user", "content": user}]}
    else:
        body = {"model": MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": user}]}
    if stream:
        body["stream"] = True
    return _dumps(body)


# --- buffered responses -----------------------------------------------------------------------


def tool_response(
    shape: Shape,
    *,
    ids: Literal["raw", "conforming"] = "raw",
    text_bytes: int = 0,
    calls: int = 2,
) -> bytes:
    """A response with ``calls`` tool calls (and ``text_bytes`` of assistant text before them)."""
    make_id = raw_id if ids == "raw" else conforming_id
    text = _text(text_bytes) or ("Let me check." if shape == "messages" else "")
    reply = Reply(
        calls=[_call(k, make_id(k)) for k in range(calls)], text=text, model=MODEL, usage=(812, 64)
    )
    return _dumps(RENDERERS[shape].buffered(reply))


def text_response() -> bytes:
    """A small text-only chat completion (the answer to a follow-up request)."""
    reply = Reply(text="It will be mild and partly cloudy all week.", model=MODEL, usage=(812, 12))
    return _dumps(chat.buffered(reply))


def _call(k: int, call_id: str) -> Call:
    return Call(call_id, f"fc_{k:08d}", TOOLS[k % len(TOOLS)], _arguments(k))


_WORDS = (
    "the ",
    "weather ",
    "in ",
    "Paris ",
    "is ",
    "mild, ",
    "with ",
    "light ",
    "winds ",
    "and ",
    "a ",
    '"chance" ',
    "of ",
    "rain\n",
    "later. ",
)


def _text(size: int) -> str:
    out: list[str] = []
    n = 0
    i = 0
    while n < size:
        word = _WORDS[i % len(_WORDS)]
        out.append(word)
        n += len(word)
        i += 1
    return "".join(out)


# --- SSE streams ------------------------------------------------------------------------------


def sse_events(
    shape: Shape,
    events: int,
    *,
    tool_every: int = 0,
    text_bytes: int = 5,
    ids: Literal["raw", "conforming"] = "raw",
) -> list[bytes]:
    """``events`` SSE events (each with its blank line) of one streamed response.

    Every ``tool_every``-th event starts a tool call (0: text only). Text deltas carry about
    ``text_bytes`` of text. The terminating event (``[DONE]`` / ``message_stop`` /
    ``response.completed``) is counted in ``events``.
    """
    make_id = raw_id if ids == "raw" else conforming_id
    out: list[bytes] = []
    calls = 0
    for i in range(events - 1):
        text = _text(text_bytes) if text_bytes > 5 else _WORDS[i % len(_WORDS)]
        tool = tool_every and i % tool_every == tool_every - 1
        if tool:
            out.append(_tool_event(shape, calls, make_id(calls), i))
            calls += 1
        else:
            out.append(_text_event(shape, text, i))
    out.append(_final_event(shape, events - 1))
    return out


def _text_event(shape: Shape, text: str, i: int) -> bytes:
    if shape == "chat":
        event = chat.chunk({"content": text}, model=MODEL)
    elif shape == "responses":
        event = responses.text_delta(text, i)
    else:
        event = messages.text_delta(text, 0)
    return sse.frame(event)


def _tool_event(shape: Shape, k: int, call_id: str, i: int) -> bytes:
    call = _call(k, call_id)
    if shape == "chat":
        event = chat.call_start(call, k, MODEL)
    elif shape == "responses":
        event = responses.call_added(call, k + 1, i)
    else:
        event = messages.call_start(Reply(model=MODEL), call, k + 1)
    return sse.frame(event)


def _final_event(shape: Shape, i: int) -> bytes:
    if shape == "chat":
        return sse.frame(chat.DONE)
    if shape == "responses":
        # a short response object, as in a stream whose output the client already has
        response = {"id": "resp_bench", "object": "response", "status": "completed", "model": MODEL}
        return sse.frame(responses.event("response.completed", i, response=response))
    return sse.frame(messages.STOP)


#: Events per call in the "sse.responses" stream: the call's item added, its argument deltas,
#: its arguments done, its item done.
CALL_EVENTS = 50
#: The patch lines a call of "sse.responses" streams, one argument delta each, in turn.
_PATCH = (
    "*** Begin Patch\n",
    "*** Update File: src/weather/forecast.py\n",
    "@@ def hourly(city: str, day: int) -> list[dict[str, object]]:\n",
    '-    return fetch(city, day, units="metric")\n',
    '+    return fetch(city, day, units="metric", hours=range(24))\n',
    "     # the forecast of one day, hour by hour\n",
    "*** End Patch\n",
)


def patch_call_id(k: int) -> str:
    """The k-th call's ``call_id`` in "sse.responses" (Kimi-style, as ``raw_id``)."""
    return f"functions.apply_patch:{k}"


def patch_item_id(k: int) -> str:
    """The k-th call's item id in "sse.responses": ``fc_`` and a ``:``, which toolid encodes,
    so that every event naming the call changes."""
    return f"fc_apply_patch:{k}"


def patch_client_item_id(k: int) -> str:
    """``patch_item_id(k)`` as toolid hands it to the agent (wire format v1, profile safe)."""
    return f"tid1_fc_apply_patch-3A{k}"


def responses_call_events(events: int, call_events: int = CALL_EVENTS) -> list[bytes]:
    """``events`` SSE events of a Responses stream in which every event names its call: calls
    of ``call_events`` events each, as Codex's ``apply_patch`` calls stream (the item added,
    its ``response.function_call_arguments.delta`` events, each with the item's id, its
    arguments done, its item done), then ``response.completed`` (counted in ``events``: the
    last call has as many deltas fewer as it takes)."""
    out: list[bytes] = []
    seq = 0
    calls = -(-(events - 1) // call_events)
    short = calls * call_events - (events - 1)  # the last call's missing events
    for k in range(calls):
        deltas = call_events - 3 - (short if k == calls - 1 else 0)
        patch = "".join(_PATCH[i % len(_PATCH)] for i in range(deltas))
        arguments = json.dumps({"input": patch})
        call = Call(
            patch_call_id(k), patch_item_id(k), "apply_patch", arguments, _cut(arguments, deltas)
        )
        where = {"item_id": call.item_id, "output_index": k}
        frames = [responses.call_added(call, k, seq)]
        frames += [
            responses.event("response.function_call_arguments.delta", seq + n, **where, delta=d)
            for n, d in enumerate(call.fragments, 1)
        ]
        seq += 1 + deltas
        frames.append(
            responses.event(
                "response.function_call_arguments.done", seq, **where, arguments=arguments
            )
        )
        item = responses.call_item(call, True)
        frames.append(
            responses.event("response.output_item.done", seq + 1, output_index=k, item=item)
        )
        seq += 2
        out += map(sse.frame, frames)
    out.append(_final_event("responses", seq))
    return out


def _cut(text: str, count: int) -> tuple[str, ...]:
    """``text`` cut into ``count`` fragments of about one size."""
    cuts = [len(text) * i // count for i in range(count + 1)]
    return tuple(text[a:b] for a, b in itertools.pairwise(cuts))


def event_data(event: bytes) -> bytes:
    """The joined ``data:`` lines of one event (what a client would ``json.loads``)."""
    lines = [
        line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
    ]
    return b"\n".join(lines)


# --- what the upstream serves -----------------------------------------------------------------

#: Events in the proxy stream workloads; a tool call every STREAM_TOOL_EVERY in "sse.tools",
#: in every event in "sse.every" (the worst case), none in "sse.text"; in "sse.responses" a
#: Responses stream whose every event names its call (``responses_call_events``).
STREAM_EVENTS = 2000
STREAM_TOOL_EVERY = 20
#: The upstream sends a stream in pieces of this size (one HTTP chunk each), cut anywhere, so
#: events straddle pieces: what a server behind a buffering gateway or a fast model delivers.
STREAM_CHUNK = 16 * 1024
#: Tool calls in the buffered proxy responses ("resp.<shape>").
RESPONSE_CALLS = 4
#: The prior tool calls of the follow-up requests ("followup.<calls>"): the scaling series.
FOLLOWUP_CALLS = (50, 500, 5000)
STREAM_TOOLS: dict[str, int] = {"tools": STREAM_TOOL_EVERY, "every": 1, "text": 0}
#: The first-event workload ("sse.first"): the stream's first event, a tool call, flushed alone;
#: FIRST_EVENT_PAUSE seconds later the rest (FIRST_EVENT_REST - 1 text events and [DONE]), as a
#: model that thinks between its first and its next tokens sends it.
FIRST_EVENT_PAUSE = 0.01
FIRST_EVENT_REST = 50


@dataclass(frozen=True)
class Canned:
    """One upstream response: a whole body (Content-Length) or a stream (one chunk per piece)."""

    content_type: str
    body: bytes = b""
    chunks: tuple[bytes, ...] = ()
    events: int = 0
    #: Seconds the upstream waits after the first chunk before it writes the others.
    pause: float = 0.0

    @property
    def streamed(self) -> bool:
        return bool(self.chunks)


def pieces(data: bytes, size: int) -> tuple[bytes, ...]:
    """``data`` cut into ``size``-byte pieces (the last one shorter)."""
    return tuple(data[at : at + size] for at in range(0, len(data), size))


def first_event_stream() -> tuple[bytes, bytes]:
    """The two writes of workload ``sse.first``: a tool-call event alone, then the rest."""
    first = _tool_event("chat", 0, raw_id(0), 0)
    return first, b"".join(sse_events("chat", FIRST_EVENT_REST))


def stream_body(label: str) -> bytes:
    """The whole SSE body of stream workload ``sse.<label>`` (see ``STREAM_TOOLS``)."""
    return b"".join(sse_events("chat", STREAM_EVENTS, tool_every=STREAM_TOOLS[label]))


@functools.cache
def canned(name: str) -> Canned:
    """The upstream's response for workload ``name`` (see ``bench.run.PROXY_WORKLOADS``)."""
    kind, _, arg = name.partition(".")
    if kind == "resp":
        return Canned("application/json", body=tool_response(_shape(arg), calls=RESPONSE_CALLS))
    if kind == "text":
        return Canned("application/json", body=text_response())
    if name == "sse.first":
        return Canned(
            "text/event-stream",
            chunks=first_event_stream(),
            events=1 + FIRST_EVENT_REST,
            pause=FIRST_EVENT_PAUSE,
        )
    if name == "sse.responses":
        return Canned(
            "text/event-stream",
            chunks=pieces(b"".join(responses_call_events(STREAM_EVENTS)), STREAM_CHUNK),
            events=STREAM_EVENTS,
        )
    if kind == "sse":
        return Canned(
            "text/event-stream",
            chunks=pieces(stream_body(arg), STREAM_CHUNK),
            events=STREAM_EVENTS,
        )
    raise KeyError(name)


def _shape(name: str) -> Shape:
    for shape in SHAPES:
        if shape == name:
            return shape
    raise KeyError(name)


#: A long stream for the memory measurement: ~1 KiB text deltas, a tool call every 20 events.
MEMORY_BLOCK_EVENTS = 1000
MEMORY_TOOL_EVERY = 20


@functools.cache
def memory_block() -> bytes:
    """A block of SSE events (ids differ per block position only) repeated to any length."""
    return b"".join(
        sse_events("chat", MEMORY_BLOCK_EVENTS + 1, tool_every=MEMORY_TOOL_EVERY, text_bytes=1000)[
            :-1
        ]
    )


def memory_stream(total: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    """About ``total`` bytes of SSE (whole blocks, then ``[DONE]``) in ``piece``-sized parts."""
    block = memory_block()
    blocks = max(1, round(total / len(block)))
    for _ in range(blocks):
        for at in range(0, len(block), piece):
            yield block[at : at + piece]
    yield b"data: [DONE]\n\n"


def memory_stream_size(total: int) -> int:
    """The exact byte count ``memory_stream(total)`` produces."""
    block = memory_block()
    return max(1, round(total / len(block))) * len(block) + len(b"data: [DONE]\n\n")
