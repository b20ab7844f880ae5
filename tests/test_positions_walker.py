"""The walker (``find_ids``) finds exactly what a plain step-by-step reading of the notation
finds, row for row and in the same order: on random documents made of the table's own
vocabulary (member names, ``type`` values, the members that number calls, arrays or single
objects where arrays are expected), on documents shaped along each API's positions with noise,
and on one document per position. The reading here is the test's own: it reads each
position's notation (``positions``), not anything the walker is made from."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolid.positions import (
    EVENT_CALL_NUMBERS,
    LACKS,
    Api,
    Call,
    Doc,
    Found,
    Position,
    find_ids,
    positions,
)

# A step of the notation: "[]", "[type=a|b]" (group 1: the types) or a member (group 2).
STEP = re.compile(r"\[(?:type=([^\]]*))?\]|\.?([^.\[]+)")

type Step = str | frozenset[str] | None  # a member's name; an array's types, None for "[]"


def steps(notation: str) -> list[tuple[bool, Step]]:
    """``notation`` as (is a member, what it names), step by step."""
    out: list[tuple[bool, Step]] = []
    for types, name in STEP.findall(notation):
        if name:
            out.append((True, name))
        else:
            out.append((False, frozenset(types.split("|")) if types else None))
    return out


NOTATIONS = [p.notation for api in Api for doc in Doc for p in positions(api, doc)]
KEYS = sorted(
    {str(name) for n in NOTATIONS for member, name in steps(n) if member}
    | {"type", "other", *EVENT_CALL_NUMBERS}
)
TYPES = sorted(
    {kind for n in NOTATIONS for member, ts in steps(n) if not member and ts for kind in ts}
    | {"text", "message"}
)
ROOTS = sorted({str(steps(n)[0][1]) for n in NOTATIONS if steps(n)[0][0]})
SCALARS = st.one_of(
    st.sampled_from(["id_0", "call_1", "functions.a:0", *TYPES]),
    st.integers(-1, 3),
    st.booleans(),
    st.none(),
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    ),
    max_leaves=40,
)


def reference(document: Any, api: Api, doc: Doc) -> list[Found]:
    """The notation read step by step, one position after the other, every node of a step
    before the next step. Positions start in the root object: no other root holds an id."""
    found: list[Found] = []
    call: Call = ()
    if not isinstance(document, dict):
        return found
    if doc is Doc.EVENT:
        numbers = (n for name in EVENT_CALL_NUMBERS if type(n := document.get(name)) is int)
        call = next(((n,) for n in numbers), ())
    for position in positions(api, doc):
        found += _read(document, call, position, doc)
    for position in positions(api, doc):
        if position.required:
            found += _read(document, call, position, doc, lacking=True)
    return found


def _read(
    document: Any, root: Call, position: Position, doc: Doc, *, lacking: bool = False
) -> list[Found]:
    """The ids at ``position``; ``lacking``: the calls there holding no id a client can use
    instead (the member missing from an object that has others, or null, a boolean, a
    number), each with the JSON text of what it holds."""
    path = steps(position.notation)
    nodes: list[tuple[Any, str, Call]] = [(document, "", root)]
    for member, named in path[:-1]:
        reached: list[tuple[Any, str, Call]] = []
        for node, where, call in nodes:
            if member:
                if isinstance(node, dict) and named in node:
                    name = str(named)
                    reached.append((node[name], f"{where}.{name}" if where else name, call))
            elif isinstance(node, list):  # every element, numbered by its "index", else position
                for index, element in enumerate(node):
                    if _admits(named, element):
                        number = element.get("index") if isinstance(element, dict) else None
                        number = number if type(number) is int else index
                        # A request's calls are not numbered (read for pairing too).
                        numbered = call if doc in (Doc.REQUEST, Doc.HISTORY) else (*call, number)
                        reached.append((element, f"{where}[{index}]", numbered))
            elif isinstance(node, dict) and _admits(named, node):  # its own single element
                reached.append((node, where, call))
        nodes = reached
    key, role, kind = str(path[-1][1]), position.role, position.kind
    if lacking:
        return [
            Found(node, key, text, f"{where}.{key}" if where else key, LACKS, call, kind)
            for node, where, call in nodes
            if isinstance(node, dict) and (text := _unusable(node, key)) is not None
        ]
    return [
        Found(node, key, value, f"{where}.{key}" if where else key, role, call, kind)
        for node, where, call in nodes
        if isinstance(node, dict) and isinstance(value := node.get(key), str)
    ]


def _unusable(node: dict[str, Any], key: str) -> str | None:
    if key not in node:
        return "" if node else None
    value = node[key]
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    return None


def _admits(types: Step, element: Any) -> bool:
    if types is None:
        return True
    kind = element.get("type") if isinstance(element, dict) else None
    return isinstance(kind, str) and kind in types


def rows(found: list[Found]) -> list[tuple[Any, ...]]:
    """Each row as it is, its holder by identity."""
    return [(id(f.holder), *f[1:]) for f in found]


def assert_agree(document: Any, api: Api, doc: Doc) -> None:
    assert rows(find_ids(document, api, doc)) == rows(reference(document, api, doc))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=DOCUMENTS, api=st.sampled_from(list(Api)), doc=st.sampled_from(list(Doc)))
def test_walker_finds_what_the_notation_says(document: Any, api: Api, doc: Doc) -> None:
    assert_agree(document, api, doc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(DOCUMENTS, max_size=6),
    api=st.sampled_from(list(Api)),
    doc=st.sampled_from(list(Doc)),
    root=st.sampled_from(ROOTS),
    single=st.booleans(),
)
def test_walker_on_arrays_under_the_tables_roots(
    items: list[Any], api: Api, doc: Doc, root: str, single: bool
) -> None:
    """Random elements under a root member the table starts from, so that walks go deep; or
    one of them in the array's place."""
    inside: Any = (items[0] if items else {}) if single else items
    document = {root: inside, "type": "response.output_item.added", "output_index": 1}
    assert_agree(document, api, doc)


@st.composite
def near_a_position(draw: st.DrawFn, api: Api, doc: Doc) -> Any:
    """A document shaped along one of the positions of ``api`` and ``doc``, with noise: other
    members, other ``type`` values and numbers, arrays of several elements, an object in an
    array's place, a list in an object's place, a member left out, something else where the
    id would be."""

    def build(at: list[tuple[bool, Step]]) -> Any:
        if not at:
            return draw(SCALARS)
        (member, named), rest = at[0], at[1:]
        if member and draw(st.integers(0, 7)) == 0:
            return build(rest)  # the member left out: what it holds in its place
        if member:
            node = draw(st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=2))
            node[str(named)] = build(rest)
            return [node] if draw(st.integers(0, 4)) == 0 else node
        elements = [build(rest) for _ in range(draw(st.integers(0, 3)))]
        for element in elements:
            if isinstance(element, dict):
                kinds = sorted(named) if isinstance(named, frozenset) else TYPES
                element["type"] = draw(st.sampled_from([*kinds, "text"]))
                if draw(st.booleans()):
                    element["index"] = draw(st.integers(-1, 3))
        if elements and draw(st.integers(0, 4)) == 0:
            return elements[0]  # an object in the array's place
        return elements

    return build(steps(draw(st.sampled_from(positions(api, doc))).notation))


@pytest.mark.parametrize(("api", "doc"), [(api, doc) for api in Api for doc in Doc])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_walker_near_the_tables_positions(api: Api, doc: Doc, data: st.DataObject) -> None:
    assert_agree(data.draw(near_a_position(api, doc)), api, doc)


def _example(notation: str, value: str, *, single: bool) -> tuple[dict[str, Any], str]:
    """A document holding ``value`` at ``notation`` (the first of each filter's types; an
    array of one element, or with ``single`` the element in its place), and its path."""
    node: Any = value
    for member, named in reversed(steps(notation)):
        if member:
            node = {str(named): node}
        else:
            if isinstance(named, frozenset):
                node = {**node, "type": min(named)}
            node = node if single else [node]
    spelled = ""
    for member, named in steps(notation):
        if member:
            spelled += f".{named}" if spelled else str(named)
        elif not single:
            spelled += "[0]"
    return node, spelled


def test_every_position_is_found_where_its_notation_says() -> None:
    """For each position a document with an id just there, arrays or single objects in their
    place: the walker finds it at that path, with its position's role and kind."""
    for api in Api:
        for doc in Doc:
            for position in positions(api, doc):
                # the root is an object: a position starting in an array starts in it
                for single in (True,) if position.notation.startswith("[") else (False, True):
                    document, path = _example(position.notation, "x_1", single=single)
                    found = {(f.path, f.role, f.kind) for f in find_ids(document, api, doc)}
                    assert (path, position.role, position.kind) in found, (api, doc, position)
                    assert_agree(document, api, doc)
