"""What the native parser keeps of a document, made from the table (native accelerator).

A history of 500 tool calls is a megabyte, nearly all of it tool output that toolid never
reads. The native parser (``toolid.native``: ``id_spans``) validates every byte of such a
document but keeps only the members on the way to id positions (plus ``type``, ``index`` and
``output_index``, which the walk tests), then walks the table's tree over what it kept, as
``positions.find_ids`` walks a parsed document, and reports each id with the span of its
literal: the edits need no search and no counting proof.

It vouches only for plain JSON: anything else (invalid JSON or UTF-8, escapes in kept
strings or in any key, a key given twice in one object, objects of more than 64 members,
surrogate escapes, NaN, integers beyond 64 bits where one is kept, deep nesting) gives None,
and the caller parses in full, which decides: so toolid's output is the same with and without
it, byte for byte.
"""

from __future__ import annotations

from typing import Any, Final

from toolid.positions import ELEMENT_NUMBER, EVENT_CALL_NUMBERS, TREES, TYPE, Doc, Tree, numbered

type Spec = int | Node  # LEAF, KEEP or a node
# A node: (members, elements); members (key as bytes, the same key as str, spec), elements the
# node the objects in an array are read with, or None (then they are only validated). Members
# a node does not name are validated and dropped.
type Node = tuple[tuple[tuple[bytes, str, Spec], ...], Node | None]

LEAF: Final = 0  # an id's member: its string is kept, with the span of its literal
KEEP: Final = 1  # a member the walker tests (type, index, ...): its string (with its span) or int

_ROOT_MEMBERS: Final[dict[Doc, tuple[str, ...]]] = {
    Doc.REQUEST: (),
    Doc.RESPONSE: (),
    Doc.EVENT: EVENT_CALL_NUMBERS,  # the call an event is about
    Doc.HISTORY: (),
}


# --- the schema: the table's tree as the members each object keeps ----------------------------


type _Merged = dict[str, Any]  # key -> LEAF | KEEP | _Merged, plus "[]" -> elements' _Merged


def _merge(into: _Merged, key: str, spec: int | _Merged) -> None:
    if key not in into:
        into[key] = spec
        return
    held = into[key]
    if isinstance(held, dict) and isinstance(spec, dict):
        for name, inner in spec.items():
            _merge(held, name, inner)
    elif isinstance(held, dict) or isinstance(spec, dict):
        raise ValueError(f"the table reads member {key!r} both as a string and as a container")
    elif held != spec:
        into[key] = KEEP  # a string read and tested (a history label "type"): KEEP keeps both


def _keeps(tree: Tree) -> _Merged:
    """What an object at ``tree`` keeps (arrays there: what their objects keep, under "[]")."""
    merged: _Merged = {}
    for key, *_ in tree.leaves:
        _merge(merged, key, LEAF)
        _merge(merged, TYPE, KEEP)  # the object holding an id: destination rules read it
    for key, inside in tree.members:
        _merge(merged, key, _keeps(inside))
    for types, _, _, inside in tree.elements:
        if inside.elements:
            raise ValueError("arrays of arrays are not in the table")
        element = _keeps(inside)
        _merge(element, ELEMENT_NUMBER, KEEP)  # numbers the call
        if types is not None:
            _merge(element, TYPE, KEEP)
        _merge(merged, "[]", element)
        for key, spec in element.items():  # an object is its own single element
            _merge(merged, key, spec)
    return merged


def _node(merged: _Merged) -> Node:
    members = tuple(
        (key.encode(), key, spec if isinstance(spec, int) else _node(spec))
        for key, spec in merged.items()
        if key != "[]"
    )
    elements = merged.get("[]")
    return (members, _node(elements) if elements is not None else None)


def _schema(tree: Tree, doc: Doc) -> Node:
    merged = _keeps(tree)
    for key in _ROOT_MEMBERS[doc]:
        _merge(merged, key, KEEP)
    return _node(merged)


#: The schema of each API and kind of document.
SCHEMAS: Final = {(api, doc): _schema(tree, doc) for (api, doc), tree in TREES.items()}

#: What ``native.id_spans`` takes for each API and kind of document: (the schema, the table's
#: tree, the members of an event that number its call, whether calls are numbered).
TABLES: Final = {
    (api, doc): (SCHEMAS[(api, doc)], tree, _ROOT_MEMBERS[doc], numbered(doc))
    for (api, doc), tree in TREES.items()
}
