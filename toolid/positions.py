"""The one table of where tool-call ids live, per API and per kind of document.

Positions are written in the notation of ``where-ids-live.md``:

- ``key`` steps into an object's member;
- ``[]`` steps into every element of an array (an object is its own single element);
- ``[type=a|b]`` does the same, keeping only objects whose ``type`` is one of the values.

A position ends at the member that holds the id. Only string values there are ids.
This module is data plus the small walker that reads it; it knows nothing of bytes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final


class Api(enum.StrEnum):
    """The LLM APIs whose tool-call ids toolid knows."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"


class Doc(enum.StrEnum):
    """Which kind of JSON document the ids are looked for in."""

    REQUEST = "request"
    RESPONSE = "response"
    EVENT = "event"  # one streamed (SSE) event's data


# --- the table -------------------------------------------------------------------------------

_RESPONSES_CALLS = (
    "function_call|custom_tool_call|computer_call|local_shell_call|shell_call|apply_patch_call"
)
_RESPONSES_OUTPUTS = (
    "function_call_output|custom_tool_call_output|computer_call_output|shell_call_output"
    "|apply_patch_call_output"
)
_RESPONSES_ITEM_IDS = (
    f"{_RESPONSES_CALLS}|local_shell_call_output|mcp_call|mcp_approval_request|mcp_approval_response"
    "|web_search_call|file_search_call|image_generation_call|code_interpreter_call|item_reference"
)
# Streamed Responses events that name a tool item by its id (message and reasoning events
# carry item_id too; those items' ids are not positions, so neither is their item_id).
_RESPONSES_TOOL_EVENTS = "|".join(
    f"response.{event}"
    for event in (
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "custom_tool_call_input.delta",
        "custom_tool_call_input.done",
        "mcp_call_arguments.delta",
        "mcp_call_arguments.done",
        "mcp_call.in_progress",
        "mcp_call.completed",
        "mcp_call.failed",
        "web_search_call.in_progress",
        "web_search_call.searching",
        "web_search_call.completed",
        "file_search_call.in_progress",
        "file_search_call.searching",
        "file_search_call.completed",
        "code_interpreter_call.in_progress",
        "code_interpreter_call.interpreting",
        "code_interpreter_call.completed",
        "code_interpreter_call_code.delta",
        "code_interpreter_call_code.done",
        "image_generation_call.in_progress",
        "image_generation_call.generating",
        "image_generation_call.partial_image",
        "image_generation_call.completed",
    )
)
# Positions inside one Responses item (relative to the item).
_RESPONSES_ITEM = (
    f"[type={_RESPONSES_CALLS}|{_RESPONSES_OUTPUTS}].call_id",
    f"[type={_RESPONSES_ITEM_IDS}].id",
    "[type=mcp_approval_response].approval_request_id",
)

# Positions inside one Anthropic content block (relative to the block).
_MESSAGES_BLOCK = (
    "[type=tool_use|server_tool_use|mcp_tool_use].id",
    "[].tool_use_id",
    "[].caller.tool_id",
)


def _under(prefix: str, relative: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(prefix + path for path in relative)


TABLE: Final[dict[Api, dict[Doc, tuple[str, ...]]]] = {
    Api.CHAT: {
        Doc.REQUEST: ("messages[].tool_calls[].id", "messages[].tool_call_id"),
        Doc.RESPONSE: ("choices[].message.tool_calls[].id",),
        Doc.EVENT: ("choices[].delta.tool_calls[].id",),
    },
    Api.RESPONSES: {
        Doc.REQUEST: _under("input", _RESPONSES_ITEM),
        Doc.RESPONSE: _under("output", _RESPONSES_ITEM),
        Doc.EVENT: (
            *_under("item", _RESPONSES_ITEM),
            *_under("response.output", _RESPONSES_ITEM),
            f"[type={_RESPONSES_TOOL_EVENTS}].item_id",
        ),
    },
    Api.MESSAGES: {
        Doc.REQUEST: _under("messages[].content", _MESSAGES_BLOCK),
        Doc.RESPONSE: _under("content", _MESSAGES_BLOCK),
        Doc.EVENT: (
            *_under("content_block", _MESSAGES_BLOCK),
            *_under("message.content", _MESSAGES_BLOCK),
        ),
    },
}


# --- compiled form ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Key:
    name: str


@dataclass(frozen=True, slots=True)
class _Each:
    types: frozenset[str] | None  # None: every element


_Step = _Key | _Each


def _compile(path: str) -> tuple[_Step, ...]:
    steps: list[_Step] = []
    rest = path
    while rest:
        if rest.startswith("["):
            end = rest.index("]")
            inner = rest[1:end]
            if inner:
                field, _, values = inner.partition("=")
                if field != "type":
                    raise ValueError(f"only [type=...] filters are supported: {path!r}")
                steps.append(_Each(frozenset(values.split("|"))))
            else:
                steps.append(_Each(None))
            rest = rest[end + 1 :]
        else:
            rest = rest.removeprefix(".")
            cut = min((i for i in (rest.find("."), rest.find("[")) if i >= 0), default=len(rest))
            steps.append(_Key(rest[:cut]))
            rest = rest[cut:]
    if not steps or not isinstance(steps[-1], _Key):
        raise ValueError(f"a position must end at a member: {path!r}")
    return tuple(steps)


@dataclass(frozen=True, slots=True)
class Position:
    """A compiled position: its notation and its steps."""

    notation: str
    steps: tuple[_Step, ...]

    @property
    def key(self) -> str:
        """The member name that holds the id."""
        last = self.steps[-1]
        assert isinstance(last, _Key)
        return last.name

    @property
    def markers(self) -> tuple[str, ...]:
        """Strings of which every document with an id here spells one as a JSON string: the
        member that holds the id's object, else the ``type`` values it is filtered on, else
        the id's own member name. A cheap byte check before any parsing."""
        names = [step.name for step in self.steps if isinstance(step, _Key)]
        if len(names) > 1:
            return (names[-2],)
        filters = [step.types for step in self.steps if isinstance(step, _Each) and step.types]
        return tuple(sorted(filters[-1])) if filters else (names[-1],)


_COMPILED: Final[dict[tuple[Api, Doc], tuple[Position, ...]]] = {
    (api, doc): tuple(Position(p, _compile(p)) for p in paths)
    for api, docs in TABLE.items()
    for doc, paths in docs.items()
}

#: Every member name that can hold an id, in any API.
ID_KEYS: Final[frozenset[str]] = frozenset(p.key for ps in _COMPILED.values() for p in ps)


def positions(api: Api, doc: Doc) -> tuple[Position, ...]:
    """The compiled positions for one API and kind of document."""
    return _COMPILED[(api, doc)]


@dataclass(slots=True)
class Found:
    """One id found in a parsed document: the object holding it and where."""

    holder: dict[str, Any]
    key: str
    value: str
    path: str  # concrete, e.g. "choices[0].message.tool_calls[1].id"


def find_ids(document: Any, api: Api, doc: Doc) -> list[Found]:
    """Every string id at the table's positions in a parsed JSON ``document``, in table order."""
    found: list[Found] = []
    for position in positions(api, doc):
        _walk(document, position.steps, 0, "", found)
    return found


def _walk(node: Any, steps: tuple[_Step, ...], i: int, path: str, found: list[Found]) -> None:
    step = steps[i]
    if isinstance(step, _Key):
        if not isinstance(node, dict) or step.name not in node:
            return
        child = node[step.name]
        child_path = f"{path}.{step.name}" if path else step.name
        if i + 1 < len(steps):
            _walk(child, steps, i + 1, child_path, found)
        elif isinstance(child, str):
            found.append(Found(node, step.name, child, child_path))
        return
    if isinstance(node, list):
        for index, element in enumerate(node):
            if _admits(step, element):
                _walk(element, steps, i + 1, f"{path}[{index}]", found)
    elif isinstance(node, dict) and _admits(step, node):
        _walk(node, steps, i + 1, path, found)


def _admits(step: _Each, element: Any) -> bool:
    if step.types is None:
        return True
    kind = element.get("type") if isinstance(element, dict) else None
    return isinstance(kind, str) and kind in step.types
