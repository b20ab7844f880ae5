"""The one table of where tool-call ids live, per API and per kind of document.

The table is read off the API records (``toolid.apis``): each record's ``positions``, in the
notation of ``docs/positions.md``:

- ``key`` steps into an object's member;
- ``[]`` steps into every element of an array (an object is its own single element);
- ``[type=a|b]`` does the same, keeping only objects whose ``type`` is one of the values.

A position ends at the member that holds the id. Only string values there are ids. Each
position has a role: it *defines* a tool call (the call's own id) or *refers* to one (a
result, an event about a call). Each id found in a response or event also carries the
number of the call it belongs to (choice and tool-call index, Responses output_index,
Messages content-block index, Converse contentBlockIndex), so every mention of one call
can get one client id; in the APIs of ``CALLS_BY_MENTION`` (Gemini) every definition is a call
of its own. This module is data plus the walker that reads it (``find_ids``, which reads the
table as plain tuples made from it at import); it knows nothing of bytes.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from toolid.apis import RECORDS
from toolid.apis.record import DEFINES, LABELS, LACKS, REFERS, Api, Doc, Entry, Role

__all__ = ["DEFINES", "LABELS", "LACKS", "REFERS", "Api", "Doc", "Entry", "Role"]

#: Every API's positions, per kind of document (``ApiRecord.positions``).
TABLE: Final[dict[Api, dict[Doc, tuple[Entry, ...]]]] = {
    api: dict(each.positions) for api, each in RECORDS.items()
}

#: The members of a history element pairing reads (its ``role``, else its ``type``).
HISTORY_LABELS: Final = ("role", "type")


def history_members(api: Api) -> tuple[str, ...]:
    """Where a request may hold its history: the members the table's request positions step
    into before their first array, the first position's first (``messages``, ``input``;
    Gemini's ``contents``, then Code Assist's ``request.contents``)."""
    return tuple(dict.fromkeys(entry[0].split("[", 1)[0] for entry in TABLE[api][Doc.REQUEST]))


def _history(api: Api) -> tuple[Entry, ...]:
    """A request's positions, then the labels of each element of its history (wherever the
    request may hold it)."""
    labels = tuple(
        (f"{member}[].{name}", LABELS, "label")
        for member in history_members(api)
        for name in HISTORY_LABELS
    )
    return (*TABLE[api][Doc.REQUEST], *labels)


# In a streamed event, the members of the event itself that number the call it is about (each
# API's ``event_call_number``: Responses output_index, Messages content-block index, Converse
# contentBlockIndex), the first one an event holds; array elements are numbered by their own
# ELEMENT_NUMBER member (Chat choices and tool-call deltas) or else their position.
EVENT_CALL_NUMBERS: Final = tuple(
    dict.fromkeys(e.event_call_number for e in RECORDS.values() if e.event_call_number)
)
#: APIs whose calls carry no number that ties the mentions of one call together: there
#: every definition is a call of its own (``ApiRecord.calls_by_mention``).
CALLS_BY_MENTION: Final = frozenset(api for api, e in RECORDS.items() if e.calls_by_mention)
ELEMENT_NUMBER: Final = "index"
TYPE: Final = "type"  # the member ``[type=...]`` filters on


# --- compiled form ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Key:
    name: str


@dataclass(frozen=True, slots=True)
class _Each:
    types: frozenset[str] | None  # None: every element


_Step = _Key | _Each


def _compile(path: str) -> tuple[_Step, ...]:
    """The steps of the notation ``path``; ValueError if it is not one the walkers read."""
    steps: list[_Step] = []
    rest = path
    while rest:
        if rest.startswith("["):
            end = rest.index("]")
            inner = rest[1:end]
            if inner:
                field, _, values = inner.partition("=")
                if field != TYPE:
                    raise ValueError(f"only [type=...] filters are supported: {path!r}")
                steps.append(_Each(frozenset(values.split("|"))))
            else:
                steps.append(_Each(None))
            if len(steps) > 1 and isinstance(steps[-2], _Each):
                raise ValueError(f"an array's elements are read through a member: {path!r}")
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
    """A compiled position: its notation, role and steps; ``required``: a call's client
    requires an id here (``ApiRecord.ids_required``), so a call object holding none it can
    use is found too (``Role.LACKS``)."""

    notation: str
    role: Role
    kind: str
    steps: tuple[_Step, ...]
    required: bool = False

    @classmethod
    def parse(cls, notation: str, role: Role, kind: str, *, required: bool = False) -> Position:
        """The position written ``notation`` (docs/positions.md); ValueError if it is not
        one: empty, not ending at a member, filtering on anything but ``type``, or an array
        step right after another."""
        return cls(notation, role, kind, _compile(notation), required)

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

    @property
    def call_markers(self) -> tuple[str, ...]:
        """Strings of which every object at this position spells one, its id or not: the
        ``type`` values the object is filtered on, else the member holding it, else the id's
        own member name (where a call may lack its id: ``required``)."""
        *way, _ = self.steps
        if way and isinstance(way[-1], _Each) and way[-1].types:
            return tuple(sorted(way[-1].types))
        names = [step.name for step in self.steps if isinstance(step, _Key)]
        return (names[-2],) if len(names) > 1 else (names[-1],)

    @property
    def marked_by_key(self) -> bool:
        """Whether ``markers`` is a member name on the way to the id (not a ``type`` value):
        then a document spelling its keys plainly spells the marker before the id's literal,
        as the key whose value holds it."""
        names = [step.name for step in self.steps if isinstance(step, _Key)]
        return len(names) > 1 or not any(isinstance(s, _Each) and s.types for s in self.steps)


def _required(api: Api, doc: Doc, role: Role, kind: str) -> bool:
    """Whether a client of ``api`` requires an id at a position of ``doc`` (an answer's
    definitions of the kinds its record names)."""
    answer = doc is Doc.RESPONSE or doc is Doc.EVENT
    return answer and role is DEFINES and kind in RECORDS[api].ids_required


_COMPILED: Final[dict[tuple[Api, Doc], tuple[Position, ...]]] = {
    (api, doc): tuple(
        Position.parse(path, role, kind, required=_required(api, doc, role, kind))
        for path, role, kind in entries
    )
    for api, docs in TABLE.items()
    for doc, entries in (*docs.items(), (Doc.HISTORY, _history(api)))
}

#: Every member name that can hold an id, in any API.
ID_KEYS: Final[frozenset[str]] = frozenset(
    p.key for ps in _COMPILED.values() for p in ps if p.role is not LABELS
)


def spelled_markers(entries: Iterable[Position]) -> list[bytes]:
    """The markers of ``entries`` as a document spells them (JSON strings), in table order."""
    return [f'"{marker}"'.encode() for position in entries for marker in position.markers]


def positions(api: Api, doc: Doc) -> tuple[Position, ...]:
    """The compiled positions for one API and kind of document."""
    return _COMPILED[(api, doc)]


type Call = tuple[int, ...]  # the number of the tool call an id belongs to (see module doc)


class Found(NamedTuple):
    """One id found in a parsed document: the object holding it, where, and its call. A call
    with no usable id at a required position (``Role.LACKS``) is found as well: its ``value``
    is the JSON text of what it holds (``null``, a number, ``true``, ``false``), "" when the
    member is missing; its ``span``, that text's (an empty one, where the member is missing,
    right after the object's ``{``)."""

    holder: dict[str, Any]
    key: str
    value: str
    path: str  # concrete, e.g. "choices[0].message.tool_calls[1].id"
    role: Role = DEFINES
    call: Call = ()  # in a response or event; () in a request, whose calls are not numbered
    kind: str = "call"  # the kind of id its position holds (see ``Entry``)
    span: tuple[int, int] | None = None  # its literal's, when the native parser located it


def find_ids(document: Any, api: Api, doc: Doc) -> list[Found]:
    """Every string id at the table's positions in a parsed JSON ``document``, in table order
    (and, for each position, in document order); then, likewise, every call lacking an id
    where its client requires one (``Role.LACKS``)."""
    if not isinstance(document, dict):
        return []  # every position starts in the root object
    line, plan, count, numbers = _WALKS[api][doc]
    call: Call = ()
    for name in numbers:  # an event's own: the call it is about
        if type(number := document.get(name)) is int:
            call = (number,)
            break
    if line is not None:  # one position, array by array: 6% of the worst row without accelerator
        found: list[Found] = []
        lacking: list[Found] = []
        try:
            _along(document, line, "", call, found, lacking=lacking)
        except _NotALine:
            pass  # an object stands for an array on the way: ``_walk`` reads that
        else:
            return found + lacking if lacking else found
    # a position's ids, then the calls lacking one at each required position
    slots: list[list[Found] | None] = [None] * count  # a list made for a slot with an id
    _walk(document, plan, "", call, slots)
    filled = [each for each in slots if each is not None]
    if len(filled) < 2:
        return filled[0] if filled else []
    return list(itertools.chain.from_iterable(filled))


def _walk(
    node: dict[str, Any], plan: _Plan, path: str, call: Call, found: list[list[Found] | None]
) -> None:
    """Add to ``found`` (a list per position, None until it has one) the ids at ``plan`` in
    the object ``node`` (whose concrete path is ``path``, whose call numbers so far are
    ``call``): depth first, so each position's ids come in document order."""
    leaves, members, elements = plan
    for key, where, slot, role, kind, lacks in leaves:
        if type(value := node.get(key)) is str:
            row, into = (node, key, value, path + where, role, call, kind, None), slot
        elif lacks is not None and (text := unusable(node, key)) is not None:
            row, into = (node, key, text, path + where, LACKS, call, kind, None), lacks
        else:
            continue
        if (ids := found[into]) is None:
            found[into] = [_make(Found, row)]
        else:
            ids.append(_make(Found, row))
    for key, where, inside in members:
        child = node.get(key)
        if child is None:  # most objects have few of the members a table reads
            continue
        if isinstance(child, dict):
            _walk(child, inside, path + where, call, found)
        elif isinstance(child, list) and (items := inside[2]) is not None:
            every, by_type, numbers = items
            at = path + where
            for index, element in enumerate(child):  # numbered by its index member, else position
                if isinstance(element, dict):
                    inner = every
                    if by_type is not None and isinstance(named := element.get(TYPE), str):
                        inner = by_type.get(named, every)
                    if inner is not None:
                        if numbers:
                            number = element.get(ELEMENT_NUMBER)
                            inner_call = (*call, number if type(number) is int else index)
                        else:
                            inner_call = call
                        _walk(element, inner, f"{at}[{index}]", inner_call, found)
    if elements is not None:  # an object is its own single element
        inner, by_type, _ = elements
        if by_type is not None and isinstance(named := node.get(TYPE), str):
            inner = by_type.get(named, inner)
        if inner is not None:
            _walk(node, inner, path, call, found)


def _along(
    node: dict[str, Any],
    level: _Level,
    path: str,
    call: Call,
    found: list[Found],
    *,
    lacking: list[Found],
) -> None:
    """Add to ``found`` the ids at a table's one position in the object ``node`` (whose
    concrete path is ``path``, whose call numbers so far are ``call``), from ``level`` on,
    and to ``lacking`` the calls lacking one there: depth first, so they come in document
    order. Raises ``_NotALine`` where an object stands for an array."""
    chain, at, types, numbers, after, (key, where, role, kind, required) = level
    array: Any = node
    for name in chain:
        array = array.get(name) if isinstance(array, dict) else None
    if not isinstance(array, list):
        if isinstance(array, dict):
            raise _NotALine
        return
    for index, element in enumerate(array):  # numbered by its index member, else position
        if not isinstance(element, dict) or (
            types is not None
            and not (isinstance(named := element.get(TYPE), str) and named in types)
        ):
            continue
        if numbers:
            number = element.get(ELEMENT_NUMBER)
            inner = (*call, number if type(number) is int else index)
        else:
            inner = call
        if after is not None:
            _along(element, after, f"{path}{at}[{index}]", inner, found, lacking=lacking)
        elif type(value := element.get(key)) is str:  # the id's member follows the last array
            row = (element, key, value, f"{path}{at}[{index}]{where}", role, inner, kind, None)
            found.append(_make(Found, row))
        elif required and (text := unusable(element, key)) is not None:
            row = (element, key, text, f"{path}{at}[{index}]{where}", LACKS, inner, kind, None)
            lacking.append(_make(Found, row))


class _NotALine(Exception):
    """An object stands where ``_along``'s position has an array (as its own single element)."""


def unusable(holder: dict[str, Any], key: str) -> str | None:
    """What ``holder[key]`` holds when it is no id a client can use: "" when the member is
    missing, else the JSON text of a null, a boolean or a number; None for a string (an id)
    or a container (not a call toolid can give an id)."""
    if key not in holder:
        return "" if holder else None  # an empty object is no call
    value = holder[key]
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return None


# Found(...) without NamedTuple's Python-level __new__: 3.4% of row 3 without the accelerator.
_make: Final = tuple.__new__

# What ``_walk`` reads at one object, made from the table at import (``_plan``): its leaves
# (member, what the id's path adds, slot, role, kind, the slot of calls lacking an id there
# or None), its members (member, what the path adds, what follows inside), and what follows
# past ``[]`` or ``[type=...]`` there.
type _Plan = tuple[
    tuple[tuple[str, str, int, Role, str, int | None], ...],
    tuple[tuple[str, str, _Plan], ...],
    _Elements | None,
]
# Past ``[]`` and ``[type=...]``: what follows in any element (None: only in those of the
# types named), what follows in an element of each type named (and in any element), whether
# elements add their call number.
type _Elements = tuple[_Plan | None, dict[str, _Plan] | None, bool]

# What ``_along`` reads of a table's one position from one object on: the members to the next
# array and what they add to the path, the types its elements are filtered on, whether they
# add their call number, what follows in them (None: the id's member); then the id's member,
# what it adds to the path past the last array, its role and kind, and whether it is required.
type _Level = tuple[
    tuple[str, ...],
    str,
    frozenset[str] | None,
    bool,
    _Level | None,
    tuple[str, str, Role, str, bool],
]


def _plan(branches: list[_Branch], dot: str, numbers: bool) -> _Plan:
    """What ``_walk`` reads of ``branches`` at one object; ``dot``: what a member adds to the
    path before its name there ("" at the root, whose path is empty)."""
    leaves: list[tuple[str, str, int, Role, str, int | None]] = []
    members: dict[str, list[_Branch]] = {}
    every: list[_Branch] = []
    typed: dict[str, list[_Branch]] = {}
    for steps, slot, role, kind, lacks in branches:
        step, rest = steps[0], steps[1:]
        if isinstance(step, _Key) and not rest:
            leaves.append((step.name, dot + step.name, slot, role, kind, lacks))
        elif isinstance(step, _Key):
            members.setdefault(step.name, []).append((rest, slot, role, kind, lacks))
        elif step.types is None:
            every.append((rest, slot, role, kind, lacks))
        else:
            for value in step.types:
                typed.setdefault(value, []).append((rest, slot, role, kind, lacks))
    inside = tuple((key, dot + key, _plan(rest, ".", numbers)) for key, rest in members.items())
    elements: _Elements | None = None
    if every or typed:
        by_type = {value: _plan([*every, *group], dot, numbers) for value, group in typed.items()}
        elements = (_plan(every, dot, numbers) if every else None, by_type or None, numbers)
    return tuple(leaves), inside, elements


def _line(position: Position, numbers: bool) -> _Level | None:
    """What ``_along`` reads of ``position``; None unless it has an array and the id's member
    follows its last array."""
    levels: list[tuple[tuple[str, ...], str, frozenset[str] | None]] = []
    chain: list[str] = []
    for step in position.steps[:-1]:
        if isinstance(step, _Key):
            chain.append(step.name)
        else:
            at = "".join(f".{name}" for name in chain) if levels else ".".join(chain)
            levels.append((tuple(chain), at, step.types))
            chain = []
    if not levels or chain:
        return None
    line: _Level | None = None
    leaf = (position.key, f".{position.key}", position.role, position.kind, position.required)
    for members, at, types in reversed(levels):
        line = (members, at, types, numbers, line, leaf)
    return line


# steps left, slot, role, kind, the slot of calls lacking an id there (None: not required)
type _Branch = tuple[tuple[_Step, ...], int, Role, str, int | None]
# an id's member, its position's slot, role, kind, and the slot of calls lacking an id there
type _Leaf = tuple[str, int, Role, str, int | None]


class Tree(NamedTuple):
    """The positions of a table from one node on, grouped by their next step (positions that
    begin with the same steps share them, so each node is visited once): what the native
    parser's walk follows (``prune``)."""

    leaves: tuple[_Leaf, ...]
    members: tuple[tuple[str, Tree], ...]  # (member, what follows inside it)
    # [] or [type=...]: (types or None, the members one of which an element needs or None,
    # whether elements that are not objects go on too, what follows inside an element)
    elements: tuple[tuple[frozenset[str] | None, frozenset[str] | None, bool, Tree], ...]


def _tree(branches: list[_Branch]) -> Tree:
    """The ``Tree`` of ``branches``: their leaves, and the rest grouped by their next step."""
    groups: dict[_Step, list[_Branch]] = {}
    leaves: list[_Leaf] = []
    for steps, slot, role, kind, lacks in branches:
        if len(steps) == 1:
            last = steps[0]
            assert isinstance(last, _Key)
            leaves.append((last.name, slot, role, kind, lacks))
        else:
            groups.setdefault(steps[0], []).append((steps[1:], slot, role, kind, lacks))
    members = tuple(
        (step.name, _tree(rest)) for step, rest in groups.items() if isinstance(step, _Key)
    )
    elements = []
    for step, rest in groups.items():
        if isinstance(step, _Each):
            # When every step after this one is a member, elements with none of them go no
            # further (unless a call there lacking its id is to be found).
            names = {steps[0].name for steps, *_ in rest if isinstance(steps[0], _Key)}
            required = any(lacks is not None for *_, lacks in rest)
            needs = frozenset(names) if len(names) == len(rest) and not required else None
            bare = needs is None and step.types is None  # elements that are not objects go on
            elements.append((step.types, needs, bare, _tree(rest)))
    return Tree(tuple(leaves), members, tuple(elements))


def lacking_slots(compiled: tuple[Position, ...]) -> list[int | None]:
    """The slot of the calls lacking an id at each position (None: not required): after the
    positions' own, one per required position, in table order."""
    required = itertools.accumulate(p.required for p in compiled)
    return [
        len(compiled) + r - 1 if p.required else None
        for p, r in zip(compiled, required, strict=True)
    ]


#: The tree of each API and kind of document (``prune`` derives what to keep from it too).
TREES: Final[dict[tuple[Api, Doc], Tree]] = {
    key: _tree(
        [
            (p.steps, slot, p.role, p.kind, lacks)
            for slot, (p, lacks) in enumerate(zip(compiled, lacking_slots(compiled), strict=True))
        ]
    )
    for key, compiled in _COMPILED.items()
}


def numbered(doc: Doc) -> bool:
    """Whether the ids of ``doc`` carry call numbers (a request's calls are not numbered)."""
    return doc is not Doc.REQUEST and doc is not Doc.HISTORY


# What ``find_ids`` reads of each API and kind of document: the line of its one position
# (``_along``) if it has one, its plan (``_walk``), how many slots its ids fill (one per
# position, then one per required position: ``lacking_slots``), and the members of the root
# that number the call (an event's).
_WALKS: Final[dict[Api, dict[Doc, tuple[_Level | None, _Plan, int, tuple[str, ...]]]]] = {
    api: {
        doc: (
            _line(each[0], numbered(doc)) if len(each) == 1 else None,
            _plan(
                [
                    (p.steps, n, p.role, p.kind, lacks)
                    for n, (p, lacks) in enumerate(zip(each, lacking_slots(each), strict=True))
                ],
                "",
                numbered(doc),
            ),
            len(each) + sum(p.required for p in each),  # the slots
            EVENT_CALL_NUMBERS if doc is Doc.EVENT else (),
        )
        for (of, doc), each in _COMPILED.items()
        if of is api
    }
    for api in Api
}


_PATH_PARTS: Final = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def path_steps(path: str) -> tuple[str | int, ...]:
    """The steps of a concrete path: member names, and array indices as numbers."""
    return tuple(int(index) if index else name for index, name in _PATH_PARTS.findall(path))


def value_at(document: Any, path: str) -> Any:
    """The value at a concrete path in a parsed ``document`` (None: not there)."""
    node = document
    for index, name in _PATH_PARTS.findall(path):
        if index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        elif name and isinstance(node, dict):
            node = node.get(name)
        else:
            return None
    return node


def path_order(path: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key that puts concrete paths (``messages[10].tool_calls[0].id``) in document
    order: array indices compare as numbers, and come before member names."""
    return tuple(
        (0, int(index), "") if index else (1, 0, name) for index, name in _PATH_PARTS.findall(path)
    )
