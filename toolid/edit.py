"""Edits of a document's bytes: a string literal replaced by another, nothing else touched.

An ``Edit`` names a literal's span and its new text; ``splice`` puts sorted edits into the
document (natively when the accelerator is built: ``toolid.native``); ``literal_of`` spells an
id as JSON the way a server would, UTF-8 and no needless escapes (a ``codec.JsonText`` as the
number or boolean it is).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from toolid import native
from toolid.codec import JsonText
from toolid.memo import memo

# (start, end, text): replace document[start:end] (a whole string literal, quotes included)
# by text. A plain tuple: one is made for every id rewritten, and a tuple display is the
# quickest object to make.
type Edit = tuple[int, int, bytes]


class RewriteError(Exception):
    """The document could not be rewritten safely; it must pass unchanged."""


def splice(document: bytes, edits: Sequence[Edit]) -> bytes:
    """``document`` with ``edits`` (sorted, not overlapping) put in."""
    if not edits:
        return document
    if native.extension is not None and type(document) is bytes:
        spliced: bytes = native.extension.splice(document, edits)
        return spliced
    view = memoryview(document)  # its slices are not copies: join copies each byte once
    parts: list[bytes | memoryview] = []
    append = parts.append
    at = 0
    for start, end, text in edits:
        append(view[at:start])
        append(text)
        at = end
    append(view[at:])
    return b"".join(parts)


def shifted(edits: Sequence[Edit], by: int) -> list[Edit]:
    """``edits`` moved ``by`` bytes on (a document's edits, applied to what holds it)."""
    return [(start + by, end + by, text) for start, end, text in edits]


_PLAIN: Final = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]*')
# A high surrogate then a low one: JSON reads "\ud800\udc00" as ONE character, U+10000.
_SURROGATE_PAIR: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def literal_of(value: str) -> bytes:
    """``value`` as a JSON literal: a string's, or a ``JsonText``'s own text. Raises
    RewriteError for a string JSON cannot hold as itself (a split surrogate pair would read
    back as one character)."""
    if type(value) is JsonText:  # not in the cache below: it equals the string of its text
        return value.encode()
    return _string_literal(value)


def written(value: str) -> Any:
    """What a JSON parser reads from ``literal_of(value)``."""
    return json.loads(value) if type(value) is JsonText else value


def member_literal(key: str, value: str) -> bytes:
    """``"key":value``, followed by a comma: a member put in first among an object's own."""
    return literal_of(key) + b":" + literal_of(value) + b","


@memo()  # pure; ids recur in every turn of a conversation
def _string_literal(value: str) -> bytes:
    if _PLAIN.fullmatch(value):  # nothing to escape: the common case, every client id
        return b'"' + value.encode() + b'"'
    if _SURROGATE_PAIR.search(value):
        raise RewriteError("an id with a split surrogate pair cannot be written as JSON")
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: spell them as \u escapes
        return json.dumps(value).encode("ascii")
