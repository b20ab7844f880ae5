"""Recorded-style Server-Sent-Events bodies for the streaming APIs, as test fixtures.

Each stream is a list of *event dicts* (so a test can alter one before rendering) that
``render`` turns into bytes exactly as a server would write them. An event dict may hold:

- ``"comment"``: a comment line's text (``{"comment": "ping"}`` is written ``: ping``);
- ``"event"``, ``"id"``, ``"retry"``: those SSE fields, in that order;
- ``"data"``: a JSON value (serialised by ``render``) or a ``str`` written as is (``[DONE]``);
  a value spanning several lines is written as several ``data:`` lines;
- ``"trailing"``: whitespace written after each ``data:`` line's value (Anthropic does this).

The shapes follow the official API references and real captures (OpenAI Chat Completions
chunks, OpenAI Responses typed events, Anthropic Messages typed events, Gemini
GenerateContentResponse chunks; ``json_array`` writes Gemini's JSON-array stream). The tool-call id
is a parameter: a builder called with the raw id gives what the upstream sends, the same
builder called with ``encode(raw)`` gives what a client must receive through toolid.

``parse_stream`` is a small reference SSE parser (WHATWG rules), independent of
``toolid.sse``, and ``tool_ids`` walks a parsed event for the id positions these fixtures
use, independent of ``toolid.positions``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from toolid.positions import Api

Event = dict[str, Any]
Style = Literal["compact", "spaced", "pretty"]
Transform = Callable[[bytes], bytes]

BOM: Final = b"\xef\xbb\xbf"
LF: Final = "\n"
CRLF: Final = "\r\n"
CR: Final = "\r"

#: Raw ids seen in the wild (or on the edges of the wire format) that toolid must encode.
RAW_IDS: Final[tuple[str, ...]] = (
    "functions.get_weather:0",  # Kimi K2 on vLLM / SGLang
    "get_weather:0#62786027996b4c40886cc7262bdf7382",  # Devin / Windsurf
    "sessions_history:183",  # MiniMax
    "天気:0",  # non-ASCII
    "héllo wörld",
    "",  # empty
    "tid1_x",  # already looks encoded: encoded again
    'say "hi"\\now',  # needs JSON escapes
)
#: Raw ids every profile-``safe`` client accepts: they pass through untouched.
CONFORMING_IDS: Final[tuple[str, ...]] = (
    "call_AbC123xyz",
    "toolu_01A09q90qw90lq917835lq9",
    "chatcmpl-tool-3f2a9c0e5b7d4e1f",
    "Ab3dE6gH9",  # Mistral: 9 alphanumerics
)

CHAT_ID: Final = "chatcmpl-8f1c2d3e4b5a69788796a5b4c3d2e1f0"
MODEL: Final = "moonshotai/Kimi-K2-Instruct"
CREATED: Final = 1760000000
RESPONSE_ID: Final = "resp_68af3c5b2e1c8190a4f5e6d7c8b9a0b1"
ITEM_ID: Final = "fc_68af3c5d7e9481909b8a7c6d5e4f3a2b"
MESSAGE_ITEM_ID: Final = "msg_68af3c5c1a2b8190b1c2d3e4f5a6b7c8"
ANTHROPIC_MESSAGE_ID: Final = "msg_01XFDUDYJgAACzvnptvVoYEL"
ARG_FRAGMENTS: Final = ('{"location', '": "Paris, ', 'France", "unit"', ': "celsius"}')
ARGUMENTS: Final = "".join(ARG_FRAGMENTS)


# --- rendering --------------------------------------------------------------------------------


def dump_json(value: Any, *, style: Style = "compact", ensure_ascii: bool = False) -> str:
    """Serialise ``value`` the way servers do (lone surrogates always come out escaped)."""
    kwargs: dict[str, Any] = {
        "compact": {"separators": (",", ":")},
        "spaced": {},
        "pretty": {"indent": 1},
    }[style]
    text = json.dumps(value, ensure_ascii=ensure_ascii, **kwargs)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True, **kwargs)
    return text


def render_event(
    event: Event,
    *,
    eol: str = LF,
    style: Style = "compact",
    ensure_ascii: bool = False,
    transform: Transform | None = None,
) -> bytes:
    """One event's bytes, its blank line included.

    ``transform`` is applied to the event's data (its ``data:`` values joined with ``\\n``)
    before it is split into lines again: the buffered rewrite, applied event by event.
    """
    lines: list[bytes] = []
    if "comment" in event:
        lines.append(b":" + (b" " + event["comment"].encode() if event["comment"] else b""))
    for name in ("event", "id", "retry"):
        if name in event:
            lines.append(f"{name}: {event[name]}".encode())
    if "data" in event:
        data = event["data"]
        text = (
            data
            if isinstance(data, str)
            else dump_json(data, style=style, ensure_ascii=ensure_ascii)
        )
        document = text.encode("utf-8", "surrogatepass")
        if transform is not None:
            document = transform(document)
        trailing = event.get("trailing", "").encode()
        lines.extend(b"data: " + line + trailing for line in document.split(b"\n"))
    newline = eol.encode()
    return b"".join(line + newline for line in lines) + newline


def render_events(events: Sequence[Event], *, bom: bool = False, **kwargs: Any) -> list[bytes]:
    """Each event's bytes (the first one carries the byte order mark, if asked for)."""
    out = [render_event(event, **kwargs) for event in events]
    if bom and out:
        out[0] = BOM + out[0]
    return out


def render(events: Sequence[Event], *, bom: bool = False, **kwargs: Any) -> bytes:
    """A whole stream body. Keyword arguments as for ``render_event``."""
    return b"".join(render_events(events, bom=bom, **kwargs))


# --- OpenAI Chat Completions ------------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": CHAT_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def _first_tool_delta(index: int, raw_id: str, name: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {
                "index": index,
                "id": raw_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
    }


def _arguments_delta(index: int, fragment: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}


def chat_events(raw_id: str, *, second_id: str | None = None) -> list[Event]:
    """A Chat Completions stream with one tool call (two with ``second_id``).

    As OpenAI and vLLM send it: the id, type and name only in the first delta of each
    tool-call index, argument fragments after it, a usage chunk, then ``data: [DONE]``.
    """
    events: list[Event] = [
        {"data": _chunk({"role": "assistant", "content": None})},
        {"data": _chunk({"content": "Let me check the weather."})},
        {"data": _chunk(_first_tool_delta(0, raw_id, "get_weather"))},
        *({"data": _chunk(_arguments_delta(0, part))} for part in ARG_FRAGMENTS),
    ]
    if second_id is not None:
        events.append({"data": _chunk(_first_tool_delta(1, second_id, "get_time"))})
        events.append({"data": _chunk(_arguments_delta(1, '{"tz": "CET"}'))})
    usage = {"prompt_tokens": 82, "completion_tokens": 31, "total_tokens": 113}
    events += [
        {"data": _chunk({}, finish_reason="tool_calls")},
        {"data": {**_chunk({}), "choices": [], "usage": usage}},
        {"data": "[DONE]"},
    ]
    return events


def chat_text_events() -> list[Event]:
    """A Chat Completions stream with text only: no tool call, nothing to rewrite."""
    parts = ("It is sunny", " in Paris: 22 °C,", " light wind — enjoy!")
    return [
        {"data": _chunk({"role": "assistant", "content": ""})},
        *({"data": _chunk({"content": part})} for part in parts),
        {"data": _chunk({}, finish_reason="stop")},
        {"data": "[DONE]"},
    ]


# --- OpenAI Responses -------------------------------------------------------------------------


def _response(status: str, output: list[Any]) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "tool_choice": "auto",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
                "strict": True,
            }
        ],
        "usage": None,
    }
    if status == "completed":
        response["usage"] = {"input_tokens": 291, "output_tokens": 23, "total_tokens": 314}
    return response


def _function_call(call_id: str, item_id: str, status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call_id,
        "name": "get_weather",
    }


def responses_events(call_id: str, *, item_id: str = ITEM_ID) -> list[Event]:
    """A Responses stream: a short message item, then a function call item.

    ``call_id`` is the tool-call id proper; ``item_id`` the function_call item's id, which
    the ``response.function_call_arguments.*`` events repeat as ``item_id``.
    """
    text = "Checking."
    message_done = {
        "id": MESSAGE_ITEM_ID,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    seq = iter(range(100))

    def event(kind: str, **fields: Any) -> Event:
        return {"event": kind, "data": {"type": kind, "sequence_number": next(seq), **fields}}

    return [
        event("response.created", response=_response("in_progress", [])),
        event("response.in_progress", response=_response("in_progress", [])),
        event(
            "response.output_item.added",
            output_index=0,
            item={**message_done, "status": "in_progress", "content": []},
        ),
        event(
            "response.content_part.added",
            item_id=MESSAGE_ITEM_ID,
            output_index=0,
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": []},
        ),
        event(
            "response.output_text.delta",
            item_id=MESSAGE_ITEM_ID,
            output_index=0,
            content_index=0,
            delta=text,
        ),
        event("response.output_item.done", output_index=0, item=message_done),
        event(
            "response.output_item.added",
            output_index=1,
            item=_function_call(call_id, item_id, "in_progress", ""),
        ),
        *(
            event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=1,
                delta=part,
            )
            for part in ARG_FRAGMENTS
        ),
        event(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=1,
            arguments=ARGUMENTS,
        ),
        event(
            "response.output_item.done",
            output_index=1,
            item=_function_call(call_id, item_id, "completed", ARGUMENTS),
        ),
        event(
            "response.completed",
            response=_response(
                "completed",
                [message_done, _function_call(call_id, item_id, "completed", ARGUMENTS)],
            ),
        ),
    ]


# --- Anthropic Messages -----------------------------------------------------------------------


def messages_events(tool_id: str) -> list[Event]:
    """An Anthropic Messages stream: a text block, then a tool_use block.

    With a ``: ping``-style keep-alive comment, Anthropic's own ``event: ping``, and
    trailing whitespace on some data lines, as real captures have.
    """

    def event(kind: str, trailing: str = "", **fields: Any) -> Event:
        out: Event = {"event": kind, "data": {"type": kind, **fields}}
        if trailing:
            out["trailing"] = trailing
        return out

    message = {
        "id": ANTHROPIC_MESSAGE_ID,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 472, "output_tokens": 2},
    }
    tool_use = {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {}}
    return [
        {"comment": "ping"},
        event("message_start", message=message),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        event("ping"),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Okay, "}),
        event("content_block_delta", index=0, delta={"type": "text_delta", "text": "checking."}),
        event("content_block_stop", index=0),
        event("content_block_start", trailing=" ", index=1, content_block=tool_use),
        event(
            "content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}
        ),
        *(
            event(
                "content_block_delta",
                index=1,
                delta={"type": "input_json_delta", "partial_json": part},
            )
            for part in ARG_FRAGMENTS
        ),
        event("content_block_stop", index=1),
        event(
            "message_delta",
            trailing="  ",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 89},
        ),
        event("message_stop"),
    ]


def converse_events(tool_id: str) -> list[Event]:
    """A Bedrock ConverseStream: a text block, then a toolUse block. On the wire each event is
    an eventstream frame (``:event-type`` the name, the payload the data: botocore's
    service-2.json ConverseStreamOutput); written as SSE here, the payloads are the same."""

    def event(kind: str, **fields: Any) -> Event:
        return {"event": kind, "data": {**fields, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}}

    start = {"toolUse": {"toolUseId": tool_id, "name": "get_weather"}}
    return [
        event("messageStart", role="assistant"),
        event("contentBlockDelta", contentBlockIndex=0, delta={"text": "Okay, "}),
        event("contentBlockDelta", contentBlockIndex=0, delta={"text": "checking."}),
        event("contentBlockStop", contentBlockIndex=0),
        event("contentBlockStart", contentBlockIndex=1, start=start),
        *(
            event("contentBlockDelta", contentBlockIndex=1, delta={"toolUse": {"input": part}})
            for part in ARG_FRAGMENTS
        ),
        event("contentBlockStop", contentBlockIndex=1),
        event("messageStop", stopReason="tool_use"),
        event(
            "metadata",
            usage={"inputTokens": 472, "outputTokens": 89, "totalTokens": 561},
            metrics={"latencyMs": 1234},
        ),
    ]


# The opaque thought signature Gemini 3 puts on a functionCall part (base64); the next request
# must carry it back byte for byte, beside the call.
THOUGHT_SIGNATURE: Final = "CiQBVKhc7pQzT2f3x4u+Yb0/9PqR1s2t3U4v5W6x7Y8z9ANB1y24LGh+/v8++18="
GEMINI_MODEL: Final = "gemini-2.5-flash"
GEMINI_RESPONSE_ID: Final = "jY3FaO6nL4KzvdIPxZ7B0Qg"


def gemini_chunk(parts: list[Any], finish_reason: str | None = None) -> dict[str, Any]:
    """One GenerateContentResponse chunk of ``streamGenerateContent`` (python-genai types.py:
    candidates, usageMetadata, modelVersion, responseId): one candidate, index 0."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": 82,
            "candidatesTokenCount": 31,
            "totalTokenCount": 113,
        },
        "modelVersion": GEMINI_MODEL,
        "responseId": GEMINI_RESPONSE_ID,
    }


def gemini_call(raw_id: str, name: str = "get_weather", **args: Any) -> dict[str, Any]:
    """A functionCall part with its thought signature beside it, as Gemini 3 sends one."""
    call = {"name": name, "args": args or {"location": "Paris"}, "id": raw_id}
    return {"functionCall": call, "thoughtSignature": THOUGHT_SIGNATURE}


def gemini_events(raw_id: str, *, second_id: str | None = None) -> list[Event]:
    """A Gemini ``streamGenerateContent?alt=sse`` stream: text chunks, then each tool call in a
    chunk of its own (a whole functionCall part, no index), a last chunk with the finish
    reason. Parts are numbered from 0 in every chunk: only the order of the chunks tells the
    calls apart."""
    events: list[Event] = [
        {"data": gemini_chunk([{"text": "Let me check "}])},
        {"data": gemini_chunk([{"text": "the weather."}])},
        {"data": gemini_chunk([gemini_call(raw_id)])},
    ]
    if second_id is not None:
        events.append({"data": gemini_chunk([gemini_call(second_id, "get_time", tz="CET")])})
    events.append({"data": gemini_chunk([{"text": ""}], finish_reason="STOP")})
    return events


def json_array(events: Sequence[Event], *, style: Style = "pretty", eol: str = CRLF) -> bytes:
    """The events' data as Gemini writes ``streamGenerateContent`` without ``?alt=sse``: one
    JSON array, an element per chunk, ``,`` and a line break between them."""
    elements = [
        dump_json(event["data"], style=style).encode("utf-8", "surrogatepass")
        for event in events
        if isinstance(event.get("data"), dict)
    ]
    separator = (eol + "," + eol).encode()
    return b"[" + separator.join(elements) + b"]"


# --- registry ----------------------------------------------------------------------------------


def events_for(api: Api, raw_id: str) -> list[Event]:
    """The fixture stream of ``api`` with tool-call id ``raw_id``."""
    if api is Api.CHAT:
        return chat_events(raw_id)
    if api is Api.RESPONSES:
        return responses_events(raw_id)
    if api is Api.CONVERSE:
        return converse_events(raw_id)
    if api is Api.GEMINI:
        return gemini_events(raw_id)
    return messages_events(raw_id)


def chat_stream(raw_id: str, **kwargs: Any) -> bytes:
    return render(chat_events(raw_id), **kwargs)


def responses_stream(call_id: str, *, item_id: str = ITEM_ID, **kwargs: Any) -> bytes:
    return render(responses_events(call_id, item_id=item_id), **kwargs)


def messages_stream(tool_id: str, **kwargs: Any) -> bytes:
    return render(messages_events(tool_id), **kwargs)


def text_stream(**kwargs: Any) -> bytes:
    return render(chat_text_events(), **kwargs)


# --- reading streams back (reference implementations for assertions) -------------------------

_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass
class Parsed:
    """One dispatched event, per the WHATWG algorithm (fields other than data kept as seen)."""

    data: str
    event: str | None = None
    comments: tuple[str, ...] = ()


def parse_stream(body: bytes) -> list[Parsed]:
    """Dispatched events of a whole SSE body (an unterminated last event is dropped)."""
    text = body.removeprefix(BOM).decode("utf-8", "surrogateescape")
    pieces = re.split(r"(\r\n|\r|\n)", text)
    # pieces alternate: line, eol, line, eol, ..., last (unterminated) line
    lines = pieces[0:-1:2]
    events: list[Parsed] = []
    data: list[str] = []
    name: str | None = None
    comments: list[str] = []
    for line in lines:
        if not line:
            if data:
                events.append(Parsed("\n".join(data), name, tuple(comments)))
            data, name, comments = [], None, []
            continue
        if line.startswith(":"):
            comments.append(line[1:])
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    return events


def data_groups(body: bytes) -> list[list[bytes]]:
    """The ``data`` values of every dispatched event, as bytes (byte-exact, no decoding)."""
    body = body.removeprefix(BOM)
    pieces = _EOL.split(body)
    complete = pieces[:-1]  # the last piece has no line ending: never part of an event
    groups: list[list[bytes]] = []
    current: list[bytes] = []
    for line in complete:
        if not line:
            if current:
                groups.append(current)
            current = []
        elif line == b"data" or line.startswith(b"data:"):
            value = line[5:]
            current.append(value[1:] if value.startswith(b" ") else value)
    return groups


def tool_ids(api: Api, document: Any) -> Iterator[tuple[str, str]]:
    """(path, value) of every tool-call id these fixtures put into a parsed event."""
    if not isinstance(document, dict):
        return
    if api is Api.CHAT:
        for c, choice in enumerate(document.get("choices") or []):
            for t, call in enumerate((choice.get("delta") or {}).get("tool_calls") or []):
                if "id" in call:
                    yield f"choices[{c}].delta.tool_calls[{t}].id", call["id"]
    elif api is Api.RESPONSES:
        if "item_id" in document:
            yield "item_id", document["item_id"]
        item = document.get("item")
        if isinstance(item, dict) and item.get("type") == "function_call":
            yield "item.id", item["id"]
            yield "item.call_id", item["call_id"]
        output = (document.get("response") or {}).get("output") or []
        for k, item in enumerate(output):
            if item.get("type") == "function_call":
                yield f"response.output[{k}].id", item["id"]
                yield f"response.output[{k}].call_id", item["call_id"]
    elif api is Api.GEMINI:
        for c, candidate in enumerate(document.get("candidates") or []):
            for p, part in enumerate((candidate.get("content") or {}).get("parts") or []):
                if "id" in (part.get("functionCall") or {}):
                    yield (
                        f"candidates[{c}].content.parts[{p}].functionCall.id",
                        part["functionCall"]["id"],
                    )
    elif api is Api.CONVERSE:
        start = document.get("start")
        if isinstance(start, dict) and isinstance(start.get("toolUse"), dict):
            yield "start.toolUse.toolUseId", start["toolUse"]["toolUseId"]
    else:
        block = document.get("content_block")
        if isinstance(block, dict) and block.get("type") == "tool_use":
            yield "content_block.id", block["id"]
