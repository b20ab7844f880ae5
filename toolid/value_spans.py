"""Where a value stands in a JSON document's bytes, given its concrete path.

``value_span`` follows a path (``choices[0].delta.tool_calls[1].id``, as ``positions.Found``
spells it) through the bytes and answers the span of the value there, or, when the path's last
member is missing from its object, the empty span right after that object's ``{``: where a
member is put in. It is how the calls lacking an id (``Role.LACKS``) of a document parsed in
full are located (the native parser reports their spans itself); ``element_spans`` gives the
span of each element of an array, where a repair (``toolid.repair``) puts in, replaces or
moves a history's messages and blocks. A member given twice is read as JSON parsers read it,
the last one.

The bytes are read as Latin-1, one character per byte, so every offset is a byte offset: JSON's
structure is ASCII, and a key read so equals an ASCII member name only if it is that name.
"""

from __future__ import annotations

import json.decoder
import re
from collections.abc import Callable
from typing import Final

from toolid.positions import path_steps

# The string scanner json's decoder reads string literals with (C where built; not in the stubs):
# (the string, where its literal ends) from just past the opening quote.
_scanstring: Final[Callable[[str, int], tuple[str, int]]] = json.decoder.scanstring  # type: ignore[attr-defined]
_SPACE: Final = re.compile(r"[ \t\n\r]*")
_SCALAR: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")


class _NotThere(Exception):
    """The path does not lead to a value, or the bytes are not JSON."""


def value_span(document: bytes, path: str) -> tuple[int, int] | None:
    """The span of the value at ``path`` in ``document``; for a missing last member, the empty
    span after its object's ``{``; None when the path leads elsewhere (or the bytes are not
    JSON)."""
    text = document.decode("latin-1")
    try:
        return _follow(text, _skip_space(text, 0), path_steps(path))
    except (_NotThere, ValueError, IndexError, RecursionError):
        return None


def element_spans(document: bytes, path: str) -> list[tuple[int, int]] | None:
    """The span of each element of the array at ``path`` in ``document``, in order; None when
    the path leads to no array (or the bytes are not JSON)."""
    text = document.decode("latin-1")
    try:
        start, _ = _follow(text, _skip_space(text, 0), path_steps(path))
        if text[start] != "[":
            return None
        starts, _ = _elements(text, start)
        return [(at, _end_of_value(text, at)) for at in starts]
    except (_NotThere, ValueError, IndexError, RecursionError):
        return None


def _follow(text: str, at: int, steps: tuple[str | int, ...]) -> tuple[int, int]:
    if not steps:
        return at, _end_of_value(text, at)
    step, rest = steps[0], steps[1:]
    if isinstance(step, int):
        if text[at] != "[":
            raise _NotThere
        starts, _ = _elements(text, at)
        if step >= len(starts):
            raise _NotThere
        return _follow(text, starts[step], rest)
    if text[at] != "{":
        raise _NotThere
    last = -1
    members, _ = _members(text, at)
    for key, start in members:
        if key == step:
            last = start
    if last >= 0:
        return _follow(text, last, rest)
    if rest:
        raise _NotThere
    return at + 1, at + 1  # the member is missing: where it is put in


def _members(text: str, at: int) -> tuple[list[tuple[str, int]], int]:
    """Each member of the object at ``at`` (its key and where its value starts), and where the
    object ends."""
    members: list[tuple[str, int]] = []
    at = _skip_space(text, at + 1)
    if text[at] == "}":
        return members, at + 1
    while True:
        if text[at] != '"':
            raise _NotThere
        key, at = _scanstring(text, at + 1)
        at = _skip_space(text, at)
        if text[at] != ":":
            raise _NotThere
        start = _skip_space(text, at + 1)
        members.append((key, start))
        closed, at = _after_item(text, _end_of_value(text, start), "}")
        if closed:
            return members, at


def _elements(text: str, at: int) -> tuple[list[int], int]:
    """Where each element of the array at ``at`` starts, and where the array ends."""
    starts: list[int] = []
    at = _skip_space(text, at + 1)
    if text[at] == "]":
        return starts, at + 1
    while True:
        starts.append(at)
        closed, at = _after_item(text, _end_of_value(text, at), "]")
        if closed:
            return starts, at


def _after_item(text: str, end: int, close: str) -> tuple[bool, int]:
    """After a member or element ending at ``end``: (True, past ``close``) where it ends its
    container, else (False, where the next one starts)."""
    at = _skip_space(text, end)
    if text[at] == close:
        return True, at + 1
    if text[at] != ",":
        raise _NotThere
    return False, _skip_space(text, at + 1)


def _end_of_value(text: str, at: int) -> int:
    """Where the value starting at ``at`` ends."""
    first = text[at]
    if first == '"':
        return _scanstring(text, at + 1)[1]
    if first == "{":
        return _members(text, at)[1]
    if first == "[":
        return _elements(text, at)[1]
    scalar = _SCALAR.match(text, at)
    if scalar is None:
        raise _NotThere
    return scalar.end()


def _skip_space(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # it matches the empty string
    return match.end()
