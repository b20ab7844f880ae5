"""The APIs the stand-in speaks: their names, modules and route recognition."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

from . import chat, messages, responses
from .replies import Event, Reply

API = Literal["chat", "responses", "anthropic"]

# Each module: SUFFIX, SDK_ROOT, matches(path), count_tool_results(req), error(message),
# buffered(reply), stream(reply).
MODULES: dict[API, ModuleType] = {"chat": chat, "responses": responses, "anthropic": messages}


def api_of(path: str) -> API | None:
    """The API of a request path (the query string ignored), as the proxy recognises it."""
    path = path.split("?", 1)[0]
    return next((api for api, module in MODULES.items() if module.matches(path)), None)


def count_tool_results(api: API, req: dict[str, Any]) -> int:
    """The number of tool results (Chat tool messages, Responses function_call_output
    items, Anthropic tool_result blocks) in a request's history."""
    return int(MODULES[api].count_tool_results(req))


def error_body(api: API | None, message: str) -> Any:
    """The body of a 4xx answer, in the API's error shape (Chat's for no API)."""
    return MODULES[api or "chat"].error(message)


def render(api: API, reply: Reply, stream: bool) -> Any | list[Event]:
    """``reply`` as ``api`` sends it: the buffered document, or the SSE events."""
    module = MODULES[api]
    return module.stream(reply) if stream else module.buffered(reply)


def endpoint(api: API, root: str) -> str:
    """The URL of ``api``'s endpoint on a server whose URLs start with ``root``."""
    return f"{root}/v1/{MODULES[api].SUFFIX}"


def sdk_url(api: API, root: str) -> str:
    """The SDK's base URL for ``api`` (openai appends /chat/completions or /responses,
    anthropic /v1/messages)."""
    return f"{root}{MODULES[api].SDK_ROOT}"
