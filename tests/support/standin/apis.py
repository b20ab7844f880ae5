"""The APIs the stand-in speaks: their names, modules and route recognition."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

from . import chat, code_assist, gemini, messages, responses
from .replies import Event, Reply

API = Literal["chat", "responses", "anthropic", "gemini", "code_assist"]
StreamFraming = Literal["sse", "json-array"]

# Each module: SUFFIX (or PATH), SDK_ROOT, matches(path), count_tool_results(req),
# error(message), buffered(reply), stream(reply); and, where the API differs from Chat's,
# asks_to_stream(path, req), stream_framing(path), offers_tools(req) and check(req) (the
# host's own check of a history).
MODULES: dict[API, ModuleType] = {
    "chat": chat,
    "responses": responses,
    "anthropic": messages,
    "gemini": gemini,
    "code_assist": code_assist,
}


def api_of(path: str) -> API | None:
    """The API of a request path (the query string ignored), as the proxy recognises it."""
    path = path.split("?", 1)[0]
    return next((api for api, module in MODULES.items() if module.matches(path)), None)


def count_tool_results(api: API, req: dict[str, Any]) -> int:
    """The number of tool results (Chat tool messages, Responses function_call_output
    items, Anthropic tool_result blocks) in a request's history."""
    return int(MODULES[api].count_tool_results(req))


def asks_to_stream(api: API, path: str, req: dict[str, Any]) -> bool:
    """Whether a request asks for a streamed answer: ``"stream": true``, or (Gemini) its
    route."""
    hook = getattr(MODULES[api], "asks_to_stream", None)
    return bool(hook(path, req)) if hook is not None else req.get("stream") is True


def stream_framing(api: API, path: str) -> StreamFraming:
    """How a streamed answer is framed: SSE, or (Gemini without ``?alt=sse``) a JSON array."""
    hook = getattr(MODULES[api], "stream_framing", None)
    return hook(path) if hook is not None else "sse"  # type: ignore[no-any-return]


def offers_tools(api: API, req: dict[str, Any]) -> bool:
    """Whether a request offers the model tools (Code Assist: inside its envelope)."""
    hook = getattr(MODULES[api], "offers_tools", None)
    return bool(hook(req) if hook is not None else req.get("tools"))


def host_check(api: API, req: dict[str, Any]) -> str | None:
    """The error the API's own host answers a request's history with (Gemini: function
    response parts that do not match the function call parts one for one), or None. A
    ``ReuseUpstream(check=...)``."""
    hook = getattr(MODULES[api], "check", None)
    return hook(req) if hook is not None else None  # type: ignore[no-any-return]


def error_body(api: API | None, message: str) -> Any:
    """The body of a 4xx answer, in the API's error shape (Chat's for no API)."""
    return MODULES[api or "chat"].error(message)


def render(api: API, reply: Reply, stream: bool) -> Any | list[Event]:
    """``reply`` as ``api`` sends it: the buffered document, or the SSE events."""
    module = MODULES[api]
    return module.stream(reply) if stream else module.buffered(reply)


def endpoint(api: API, root: str) -> str:
    """The URL of ``api``'s endpoint on a server whose URLs start with ``root``."""
    path = getattr(MODULES[api], "PATH", None)
    return f"{root}{path}" if path else f"{root}/v1/{MODULES[api].SUFFIX}"


def sdk_url(api: API, root: str) -> str:
    """The SDK's base URL for ``api`` (openai appends /chat/completions or /responses,
    anthropic /v1/messages)."""
    return f"{root}{MODULES[api].SDK_ROOT}"
