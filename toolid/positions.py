"""The one table of where tool-call ids live, per API and per kind of document.

Positions are written in the notation of ``where-ids-live.md``:

- ``key`` steps into an object's member;
- ``[]`` steps into every element of an array (an object is its own single element);
- ``[type=a|b]`` does the same, keeping only objects whose ``type`` is one of the values.

A position ends at the member that holds the id. Only string values there are ids. Each
position has a role: it *defines* a tool call (the call's own id) or *refers* to one (a
result, an event about a call). Each id found in a response or event also carries the
number of the call it belongs to (choice and tool-call index, Responses output_index,
Messages content-block index), so every mention of one call can get one client id.
This module is data plus the walker that reads it (the table compiled once into a tree
of small functions); it knows nothing of bytes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple


class Api(enum.StrEnum):
    """The LLM APIs whose tool-call ids toolid knows."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"


class Role(enum.StrEnum):
    """What an id position does: define a tool call, or refer to one defined elsewhere."""

    DEFINES = "defines"  # a call's own id (Chat tool_calls[].id, tool_use.id, call_id of a call)
    REFERS = "refers"  # a result's or an event's pointer to a call (tool_call_id, tool_use_id)


DEFINES: Final = Role.DEFINES
REFERS: Final = Role.REFERS
type Entry = tuple[str, Role]  # a position in the table: its notation and its role


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
# Items whose own id is defined by them (every tool item, server-side ones included).
_RESPONSES_DEFINING_IDS = (
    f"{_RESPONSES_CALLS}|mcp_call|mcp_approval_request|mcp_approval_response"
    "|web_search_call|file_search_call|image_generation_call|code_interpreter_call"
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
# Positions inside one Responses item (relative to the item), each with its role: a call
# item's call_id and id define it; outputs, references and approvals refer to one.
_RESPONSES_ITEM: tuple[Entry, ...] = (
    (f"[type={_RESPONSES_CALLS}].call_id", DEFINES),
    (f"[type={_RESPONSES_OUTPUTS}].call_id", REFERS),
    (f"[type={_RESPONSES_DEFINING_IDS}].id", DEFINES),
    ("[type=local_shell_call_output|item_reference].id", REFERS),
    ("[type=mcp_approval_response].approval_request_id", REFERS),
)

# Positions inside one Anthropic content block (relative to the block).
_MESSAGES_BLOCK: tuple[Entry, ...] = (
    ("[type=tool_use|server_tool_use|mcp_tool_use].id", DEFINES),
    ("[].tool_use_id", REFERS),
    ("[].caller.tool_id", REFERS),
)


def _under(prefix: str, relative: tuple[Entry, ...]) -> tuple[Entry, ...]:
    return tuple((prefix + path, role) for path, role in relative)


TABLE: Final[dict[Api, dict[Doc, tuple[Entry, ...]]]] = {
    Api.CHAT: {
        Doc.REQUEST: (
            ("messages[].tool_calls[].id", DEFINES),
            ("messages[].tool_call_id", REFERS),
        ),
        Doc.RESPONSE: (("choices[].message.tool_calls[].id", DEFINES),),
        Doc.EVENT: (("choices[].delta.tool_calls[].id", DEFINES),),
    },
    Api.RESPONSES: {
        Doc.REQUEST: _under("input", _RESPONSES_ITEM),
        Doc.RESPONSE: _under("output", _RESPONSES_ITEM),
        Doc.EVENT: (
            *_under("item", _RESPONSES_ITEM),
            *_under("response.output", _RESPONSES_ITEM),
            (f"[type={_RESPONSES_TOOL_EVENTS}].item_id", REFERS),
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

# In a streamed event, the member of the event itself that numbers the call it is about
# (Responses output_index, Messages content-block index); array elements are numbered by
# their own "index" member (Chat choices and tool-call deltas) or else their position.
_EVENT_CALL_NUMBERS: Final = ("output_index", "index")


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
    """A compiled position: its notation, role and steps."""

    notation: str
    role: Role
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
    (api, doc): tuple(Position(path, role, _compile(path)) for path, role in entries)
    for api, docs in TABLE.items()
    for doc, entries in docs.items()
}

#: Every member name that can hold an id, in any API.
ID_KEYS: Final[frozenset[str]] = frozenset(p.key for ps in _COMPILED.values() for p in ps)


def positions(api: Api, doc: Doc) -> tuple[Position, ...]:
    """The compiled positions for one API and kind of document."""
    return _COMPILED[(api, doc)]


type Call = tuple[int, ...]  # the number of the tool call an id belongs to (see module doc)


class Found(NamedTuple):
    """One id found in a parsed document: the object holding it, where, and its call."""

    holder: dict[str, Any]
    key: str
    value: str
    path: str  # concrete, e.g. "choices[0].message.tool_calls[1].id"
    role: Role = DEFINES
    call: Call = ()


def find_ids(document: Any, api: Api, doc: Doc) -> list[Found]:
    """Every string id at the table's positions in a parsed JSON ``document``, in table order
    (and, for each position, in document order)."""
    if not isinstance(document, dict):
        return []  # every position starts with a member of the root object
    root: Call = ()
    if doc is Doc.EVENT:
        for name in _EVENT_CALL_NUMBERS:
            if type(number := document.get(name)) is int:
                root = (number,)
                break
    walk, count = _WALKERS[(api, doc)]
    found: list[list[Found]] = [[] for _ in range(count)]
    walk(document, "", root, found)
    return [one for each in found for one in each]


# The positions of one table entry compiled into a tree of nested functions, one per step,
# shared by the positions that begin with the same steps (so each node is visited once).
# Each takes a node, its concrete path and call number, and one list of ids per position.
# Built once from the table; far cheaper per node than interpreting the steps.
type _Visit = Callable[[Any, str, Call, list[list[Found]]], None]
type _Branch = tuple[tuple[_Step, ...], int, Role]  # the steps left, the position's slot, role


def _walker(branches: list[_Branch]) -> _Visit:
    """One visitor for every branch at a node: leaves read their member, the others are
    grouped by their next step and continue together."""
    visitors: list[_Visit] = []
    groups: dict[_Step, list[_Branch]] = {}
    for steps, slot, role in branches:
        if len(steps) == 1:
            last = steps[0]
            assert isinstance(last, _Key)
            visitors.append(_leaf(last.name, role, slot))
        else:
            groups.setdefault(steps[0], []).append((steps[1:], slot, role))
    for step, rest in groups.items():
        then = _walker(rest)
        if isinstance(step, _Key):
            visitors.append(_member_visitor(step.name, then))
        else:
            members = {steps[0].name for steps, _, _ in rest if isinstance(steps[0], _Key)}
            needs = frozenset(members) if len(members) == len(rest) else None
            visitors.append(_elements_visitor(step.types, needs, then))
    if len(visitors) == 1:
        return visitors[0]
    every = tuple(visitors)

    def visit(node: Any, path: str, call: Call, found: list[list[Found]]) -> None:
        for one in every:
            one(node, path, call, found)

    return visit


def _leaf(key: str, role: Role, slot: int) -> _Visit:
    make = tuple.__new__

    def visit(node: Any, path: str, call: Call, found: list[list[Found]]) -> None:
        if isinstance(node, dict) and type(value := node.get(key)) is str:
            where = f"{path}.{key}" if path else key
            # Found(...) without NamedTuple's Python-level __new__: once per id
            found[slot].append(make(Found, (node, key, value, where, role, call)))

    return visit


def _member_visitor(name: str, then: _Visit) -> _Visit:
    def visit(node: Any, path: str, call: Call, found: list[list[Found]]) -> None:
        if isinstance(node, dict) and (child := node.get(name)) is not None:
            then(child, f"{path}.{name}" if path else name, call, found)

    return visit


def _elements_visitor(
    types: frozenset[str] | None, members: frozenset[str] | None, then: _Visit
) -> _Visit:
    """``[]`` or ``[type=...]``: every element of an array (an object is its own one element),
    numbered by its own ``index`` member, else by its position. ``members``: when every step
    after this one is a member, their names; elements with none of them go no further."""

    only = next(iter(members)) if members is not None and len(members) == 1 else None
    bare = members is None and types is None  # elements that are not objects go on too

    def admits(element: Any) -> bool:
        if not isinstance(element, dict):
            return bare
        if only is not None:
            if only not in element:
                return False
        elif members is not None and members.isdisjoint(element):
            return False
        if types is None:
            return True
        kind = element.get("type")
        return isinstance(kind, str) and kind in types

    def visit(node: Any, path: str, call: Call, found: list[list[Found]]) -> None:
        if isinstance(node, list):
            for index, element in enumerate(node):
                if not admits(element):
                    continue
                number = element.get("index") if isinstance(element, dict) else None
                number = number if type(number) is int else index
                then(element, f"{path}[{index}]", (*call, number), found)
        elif admits(node):
            then(node, path, call, found)

    return visit


_WALKERS: Final[dict[tuple[Api, Doc], tuple[_Visit, int]]] = {
    key: (_walker([(p.steps, slot, p.role) for slot, p in enumerate(compiled)]), len(compiled))
    for key, compiled in _COMPILED.items()
}


_PATH_PARTS: Final = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def path_order(path: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key that puts concrete paths (``messages[10].tool_calls[0].id``) in document
    order: array indices compare as numbers, and come before member names."""
    return tuple(
        (0, int(index), "") if index else (1, 0, name) for index, name in _PATH_PARTS.findall(path)
    )
