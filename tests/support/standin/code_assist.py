"""Gemini through Code Assist (``POST /v1internal:generateContent``,
``/v1internal:streamGenerateContent?alt=sse``: gemini-cli signed in with Google, and relays
that speak it), whose bodies wrap Gemini's: ``{"model": ..., "request": {...}}`` in,
``{"response": {...}, "traceId": ...}`` out (gemini-cli code_assist/converter.ts)."""

from __future__ import annotations

import re
from typing import Any

from . import gemini
from .replies import Event, Reply

PATH = "/v1internal:generateContent"  # the endpoint, after the root
SDK_ROOT = ""
ROUTE = re.compile(r"/v1internal:(?:stream)?[gG]enerateContent$")
TRACE_ID = "2d5f0c4b9e1a7386"

asks_to_stream = gemini.asks_to_stream
stream_framing = gemini.stream_framing
error = gemini.error


def matches(path: str) -> bool:
    return ROUTE.search(path) is not None


def inner(req: dict[str, Any]) -> dict[str, Any]:
    """The Gemini request inside the envelope."""
    wrapped = req.get("request")
    return wrapped if isinstance(wrapped, dict) else {}


def count_tool_results(req: dict[str, Any]) -> int:
    return gemini.count_tool_results(inner(req))


def offers_tools(req: dict[str, Any]) -> bool:
    return gemini.offers_tools(inner(req))


def check(req: dict[str, Any]) -> str | None:
    return gemini.check(inner(req))


def buffered(reply: Reply) -> Any:
    return {"response": gemini.buffered(reply), "traceId": TRACE_ID}


def stream(reply: Reply) -> list[Event]:
    return [(name, {"response": data, "traceId": TRACE_ID}) for name, data in gemini.stream(reply)]
