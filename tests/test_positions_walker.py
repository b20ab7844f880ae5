"""The walker (``find_ids``: the table's tree, read node by node, breadth first) finds exactly
what a plain step-by-step reading of the notation finds, in the same order, on random
documents made of the table's own vocabulary (member names, ``type`` values, ``index``
members, arrays or single objects where arrays are expected)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_jsonparse import stdlib_only
from toolid.positions import (
    _COMPILED,
    EVENT_CALL_NUMBERS,
    Api,
    Call,
    Doc,
    Found,
    Position,
    _Each,
    _Key,
    find_ids,
)

STEPS = [step for ps in _COMPILED.values() for p in ps for step in p.steps]
KEYS = sorted(
    {step.name for step in STEPS if isinstance(step, _Key)}
    | {"type", "index", "output_index", "other"}
)
TYPES = sorted(
    {kind for step in STEPS if isinstance(step, _Each) and step.types for kind in step.types}
    | {"text", "message"}
)
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
    """The notation read step by step, breadth first, one position after the other."""
    found: list[Found] = []
    root: Call = ()
    if doc is Doc.EVENT and isinstance(document, dict):
        root = next(
            ((n,) for name in EVENT_CALL_NUMBERS if type(n := document.get(name)) is int), ()
        )
    for position in _COMPILED[(api, doc)]:
        _walk(document, root, position, doc, found)
    return found


def _walk(document: Any, root: Call, position: Position, doc: Doc, found: list[Found]) -> None:
    frontier: list[tuple[Any, str, Call]] = [(document, "", root)]
    steps = position.steps
    for i, step in enumerate(steps[:-1]):
        reached: list[tuple[Any, str, Call]] = []
        if isinstance(step, _Key):
            for node, path, call in frontier:
                if isinstance(node, dict) and step.name in node:
                    name = step.name
                    reached.append((node[name], f"{path}.{name}" if path else name, call))
        else:
            after = steps[i + 1]
            member = after.name if isinstance(after, _Key) else None
            for node, path, call in frontier:
                if isinstance(node, list):
                    for index, element in enumerate(node):
                        if member is not None and not (
                            isinstance(element, dict) and member in element
                        ):
                            continue
                        if _admits(step, element):
                            number = element.get("index") if isinstance(element, dict) else None
                            number = number if type(number) is int else index
                            # A request's calls are not numbered (read for pairing too).
                            numbered = (
                                call if doc in (Doc.REQUEST, Doc.HISTORY) else (*call, number)
                            )
                            reached.append((element, f"{path}[{index}]", numbered))
                elif isinstance(node, dict) and _admits(step, node):
                    reached.append((node, path, call))
        frontier = reached
    key, role = position.key, position.role
    for node, path, call in frontier:
        if isinstance(node, dict) and isinstance(value := node.get(key), str):
            where = f"{path}.{key}" if path else key
            found.append(Found(node, key, value, where, role, call, position.kind))


def _admits(step: _Each, element: Any) -> bool:
    if step.types is None:
        return True
    kind = element.get("type") if isinstance(element, dict) else None
    return isinstance(kind, str) and kind in step.types


def _as_tuples(found: list[Found]) -> list[tuple[int, str, str, str, str, Call]]:
    return [(id(f.holder), f.key, f.value, f.path, f.role.value, f.call) for f in found]


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=DOCUMENTS, api=st.sampled_from(list(Api)), doc=st.sampled_from(list(Doc)))
def test_walker_finds_what_the_notation_says(document: Any, api: Api, doc: Doc) -> None:
    assert_walkers_agree(document, api, doc)


def assert_walkers_agree(document: Any, api: Api, doc: Doc) -> None:
    """The native walker (when built) and the Python one find what the notation says."""
    expected = _as_tuples(reference(document, api, doc))
    assert _as_tuples(find_ids(document, api, doc)) == expected
    with stdlib_only():
        assert _as_tuples(find_ids(document, api, doc)) == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(DOCUMENTS, max_size=6),
    api=st.sampled_from(list(Api)),
    doc=st.sampled_from(list(Doc)),
    root=st.sampled_from(["messages", "input", "output", "content", "choices", "item"]),
)
def test_walker_on_arrays_under_the_tables_roots(
    items: list[Any], api: Api, doc: Doc, root: str
) -> None:
    """Random elements under a root member the table starts from, so that walks go deep."""
    document = {root: items, "type": "response.output_item.added", "output_index": 1}
    assert_walkers_agree(document, api, doc)
