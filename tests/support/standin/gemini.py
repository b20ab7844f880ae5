"""Google Gemini's ``generateContent`` and ``streamGenerateContent`` (the Gemini API
``/v1beta/models/M:...``, Vertex AI ``.../publishers/google/models/M:...``), as Gemini answers
them (python-genai types.py: GenerateContentResponse, Candidate, Content, Part,
FunctionCall).

Streamed, each tool call comes whole in a chunk of its own (no index: parallel calls are told
apart only by their order), the first carrying the turn's thought signature; with ``?alt=sse``
the chunks are SSE events, else the elements of one JSON array (``jsonarray``). ``check``
answers a history the way Gemini does when its function response parts do not match its
function call parts one for one: 400, with Gemini's own text.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Literal

from .replies import Call, Event, Reply, dict_items

PATH = "/v1beta/models/gemini-2.5-flash:generateContent"  # the endpoint, after the root
SDK_ROOT = ""  # google-genai's http_options.base_url: the root (it adds /v1beta/models/...)
ROUTE = re.compile(r"/(?:models|tunedModels|endpoints)/[^/]+:(?:stream)?[gG]enerateContent$")
STREAMING = re.compile(r":streamGenerateContent(?:\?|$)")
# Gemini 3's thought signature (base64, opaque): the next request must carry it back as it is.
THOUGHT_SIGNATURE = "CiQBVKhc7pQzT2f3x4u+Yb0/9PqR1s2t3U4v5W6x7Y8z9ANB1y24LGh+/v8++18="
RESPONSE_ID = "jY3FaO6nL4KzvdIPxZ7B0Qg"
COUNT_MESSAGE = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)


def matches(path: str) -> bool:
    """Whether a request path (no query) is this API's endpoint (not Code Assist's)."""
    return ROUTE.search(path) is not None


def asks_to_stream(path: str, req: dict[str, Any]) -> bool:
    """Gemini streams by route: ``:streamGenerateContent``."""
    return STREAMING.search(path) is not None


def stream_framing(path: str) -> Literal["sse", "json-array"]:
    """SSE with ``?alt=sse``, else one JSON array written element by element."""
    return "sse" if re.search(r"[?&]alt=sse(?:&|$)", path) else "json-array"


def contents(req: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The (index, Content) pairs of a GenerateContentRequest's history."""
    return dict_items(req.get("contents"))


def count_tool_results(req: dict[str, Any]) -> int:
    """The ``functionResponse`` parts in a request's history."""
    return sum(
        "functionResponse" in part
        for _, content in contents(req)
        for _, part in dict_items(content.get("parts"))
    )


def offers_tools(req: dict[str, Any]) -> bool:
    return bool(req.get("tools"))


def check(req: dict[str, Any]) -> str | None:
    """Gemini's answer to a history whose user turn after a model turn with function calls
    holds a different number of function responses (gemini-cli issues #4504, #16132), or
    None."""
    history = [content for _, content in contents(req)]
    for model, after in itertools.pairwise(history):
        calls = sum("functionCall" in part for _, part in dict_items(model.get("parts")))
        answers = sum("functionResponse" in part for _, part in dict_items(after.get("parts")))
        if calls and answers != calls:
            return COUNT_MESSAGE
    return None


def error(message: str) -> Any:
    return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def call_part(call: Call, first: bool) -> dict[str, Any]:
    """A functionCall part; the turn's first carries the thought signature beside the call."""
    part: dict[str, Any] = {
        "functionCall": {"name": call.name, "args": json.loads(call.arguments), "id": call.id}
    }
    if first:
        part["thoughtSignature"] = THOUGHT_SIGNATURE
    return part


def chunk(parts: list[Any], reply: Reply, finish: bool = False) -> dict[str, Any]:
    """One GenerateContentResponse: one candidate with ``parts``."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = "STOP"
    prompt, output = reply.usage
    usage = {"promptTokenCount": prompt, "totalTokenCount": prompt + (output if finish else 0)}
    if finish:
        usage["candidatesTokenCount"] = output
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": reply.model,
        "responseId": RESPONSE_ID,
    }


def buffered(reply: Reply) -> Any:
    """The GenerateContentResponse: the text, then every call, in one candidate."""
    parts: list[Any] = [{"text": reply.text}] if reply.text else []
    parts += [call_part(c, n == 0) for n, c in enumerate(reply.calls)]
    return chunk(parts, reply, finish=True)


def stream(reply: Reply) -> list[Event]:
    """The chunks: the text in its fragments, each call in a chunk of its own, the finish."""
    events: list[Event] = [(None, chunk([{"text": f}], reply)) for f in reply.fragments]
    events += [(None, chunk([call_part(c, n == 0)], reply)) for n, c in enumerate(reply.calls)]
    events.append((None, chunk([{"text": ""}], reply, finish=True)))
    return events
