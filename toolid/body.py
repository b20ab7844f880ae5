"""Surgical rewriting of the tool-call ids in one JSON document.

``plan`` finds the ids at the table's positions (after cheap byte checks say there may be
any), works out their new values, and locates their string literals in the original bytes.
``apply`` splices the new literals in. Every other byte (key order, spacing, number
spelling, escapes) stays as it was; a document with nothing to change is returned as is.

Locating: the parsed document tells *which* ids change, a regex over the bytes tells
*where* each ``"key": "literal"`` pair is. A pair whose opening quote is not escaped is
structural (in valid JSON, a real quote followed by a bare key name opens that key), so
when the number of such pairs for an id equals the number of table positions holding
it, they are exactly those positions. Otherwise (the same id also sits under an id-like
key elsewhere, say inside tool arguments) an in-order walk of the whole document pairs
literals and positions one by one.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from toolid import codec
from toolid.apis import api_from_shape
from toolid.positions import ID_KEYS, Api, Doc, find_ids, positions

Action = Literal["encoded", "restored", "kept"]


class Direction(enum.StrEnum):
    """Which way a document travels."""

    ENCODE = "encode"  # upstream -> client: make ids safe
    DECODE = "decode"  # client -> upstream: restore raw ids


@dataclass(frozen=True, slots=True)
class Policy:
    """What to do with the ids of one flow's documents."""

    direction: Direction
    profile: codec.Profile = "safe"
    strict: bool = False  # the upstream rejects ids that are not [A-Za-z0-9_-]+


class Change(NamedTuple):
    """One id position that changed (or, for ``kept``, that was left as the client sent it)."""

    path: str
    raw: str
    client: str
    action: Action


class Edit(NamedTuple):
    """Replace ``document[start:end]`` (a whole string literal, quotes included) by ``text``."""

    start: int
    end: int
    text: bytes


@dataclass(frozen=True, slots=True)
class Plan:
    """What rewriting one document would do."""

    api: Api | None
    edits: tuple[Edit, ...] = ()
    changes: tuple[Change, ...] = ()


class RewriteError(Exception):
    """The document could not be rewritten safely; it must pass unchanged."""


NOTHING: Final = Plan(api=None)


def rewrite(document: bytes, api: Api | None, doc: Doc, policy: Policy) -> tuple[bytes, Plan]:
    """Rewrite the ids of one JSON ``document``; return the new bytes and the plan.

    Raises RewriteError when ids are there but cannot be changed safely.
    """
    result = plan(document, api, doc, policy)
    return apply(document, result.edits), result


def apply(document: bytes, edits: Sequence[Edit]) -> bytes:
    """Splice ``edits`` (sorted, not overlapping) into ``document``."""
    if not edits:
        return document
    parts: list[bytes] = []
    at = 0
    for edit in edits:
        parts.append(document[at : edit.start])
        parts.append(edit.text)
        at = edit.end
    parts.append(document[at:])
    return b"".join(parts)


def id_markers(api: Api | None, doc: Doc) -> re.Pattern[bytes] | None:
    """A regex for the byte strings of which any document with an id position spells one
    (None when the API is unknown: then any document may)."""
    return _encode_prefilter(api, doc, "safe")[0]


def may_hold_ids(document: bytes, markers: re.Pattern[bytes] | None) -> bool:
    """Cheapest check: False means no id position can be in ``document`` (or its parts)."""
    return markers is None or markers.search(document) is not None


def may_change(document: bytes, api: Api | None, doc: Doc, policy: Policy) -> bool:
    """Cheap byte-level check: False means ``document`` certainly has no id to change."""
    if policy.direction is Direction.DECODE:
        return b"tid1_" in document
    markers, suspect = _encode_prefilter(api, doc, policy.profile)
    return may_hold_ids(document, markers) and suspect.search(document) is not None


def plan(document: bytes, api: Api | None, doc: Doc, policy: Policy) -> Plan:
    """Work out the edits that rewrite the ids of ``document`` (see module docstring)."""
    if not may_change(document, api, doc, policy):
        return NOTHING
    try:
        parsed = _parse(document)
    except (ValueError, RecursionError) as exc:
        if api is None:
            return NOTHING  # not ours to judge: no API, and not JSON
        raise RewriteError(f"body is not valid JSON ({_short(exc)})") from None
    if api is None:
        api = api_from_shape(parsed, doc)
        if api is None:
            return NOTHING
    changes: list[Change] = []
    targets = _Targets()
    for found in find_ids(parsed, api, doc):
        change = _change(found.value, found.path, policy)
        if change is None:
            continue
        changes.append(change)
        if change.action != "kept":
            new = change.client if policy.direction is Direction.ENCODE else change.raw
            targets.add(found.holder, found.key, found.value, new)
    if not targets.new_values:
        return Plan(api=api, changes=tuple(changes))
    edits, proven = _locate(document, parsed, targets)
    if not proven:
        _verify(document, edits, parsed, targets)
    return Plan(api=api, edits=edits, changes=tuple(changes))


def _parse(document: bytes) -> Any:
    # NaN and Infinity parse to their names, so that documents holding them compare equal.
    return json.loads(document, parse_constant=str)


def _verify(document: bytes, edits: Sequence[Edit], parsed: Any, targets: _Targets) -> None:
    """Prove edits that counting could not: the new bytes must parse to the old document with
    exactly the positions' values replaced. Catches what byte-level locating cannot see (keys
    spelled with escapes, duplicate keys) before a wrong literal could ever be sent."""
    for holder, key in targets.members:
        holder[key] = targets.new_values[(key, holder[key])]
    try:
        if _parse(apply(document, edits)) != parsed:
            raise RewriteError("could not locate the id literals unambiguously")
    except (ValueError, RecursionError):
        raise RewriteError("rewritten document would not parse") from None


def _change(value: str, path: str, policy: Policy) -> Change | None:
    if policy.direction is Direction.ENCODE:
        client = codec.encode(value, policy.profile)
        return None if client == value else Change(path, value, client, "encoded")
    raw = codec.decode(value)
    if raw == value:
        return None
    if policy.strict and not codec.is_strict_safe(raw):
        return Change(path, raw, value, "kept")
    return Change(path, raw, value, "restored")


# --- locating literals -----------------------------------------------------------------------

_LITERAL = rb'"((?:[^"\\]|\\.)*)"'


@functools.cache
def _pair_pattern(keys: frozenset[str]) -> re.Pattern[bytes]:
    names = b"|".join(re.escape(k.encode()) for k in sorted(keys))
    return re.compile(rb'"(' + names + rb')"\s*:\s*' + _LITERAL, re.DOTALL)


def _structural_pairs(document: bytes, keys: frozenset[str]) -> list[tuple[str, str, int, int]]:
    """(key, value, start, end) of every structural ``"key": "literal"`` pair, in order."""
    pairs = []
    for match in _pair_pattern(keys).finditer(document):
        start = match.start()
        backslashes = 0
        while start > backslashes and document[start - backslashes - 1] == 0x5C:
            backslashes += 1
        if backslashes % 2:
            continue  # an escaped quote: inside some string, not a key
        literal = match.group(2)
        value = (
            json.loads(b'"' + literal + b'"') if b"\\" in literal else literal.decode("utf-8")
        )
        pairs.append((match.group(1).decode(), value, match.start(2) - 1, match.end(2) + 1))
    return pairs


@dataclass(slots=True)
class _Targets:
    """The ids to change: (key, old value) -> new value, how often each sits at a position,
    and which (holder object, key) members are positions."""

    new_values: dict[tuple[str, str], str] = field(default_factory=dict)
    wanted: Counter[tuple[str, str]] = field(default_factory=Counter)
    holders: set[tuple[int, str]] = field(default_factory=set)
    members: list[tuple[dict[str, Any], str]] = field(default_factory=list)

    def add(self, holder: dict[str, Any], key: str, value: str, new: str) -> None:
        self.new_values[(key, value)] = new
        self.wanted[(key, value)] += 1
        if (id(holder), key) not in self.holders:
            self.holders.add((id(holder), key))
            self.members.append((holder, key))


# A \u escape that could spell a letter or "_" of a key name, hiding the key from the regex.
_KEY_CHAR_ESCAPE: Final = re.compile(rb"\\u00[4-7][0-9A-Fa-f]")


def _locate(document: bytes, parsed: Any, targets: _Targets) -> tuple[tuple[Edit, ...], bool]:
    """The edits, and whether counting alone proves them right.

    It does when every position's literal was found as a structural pair (no key spelled with
    an escape) and there are exactly as many such pairs per (key, value) as positions: then
    the pairs are the positions. Otherwise literals are paired in document order, and the
    caller must verify.
    """
    new_values = targets.new_values
    keys = frozenset(key for key, _ in new_values)
    try:
        pairs = [pair for pair in _structural_pairs(document, keys) if pair[:2] in new_values]
    except (ValueError, UnicodeDecodeError) as exc:
        raise RewriteError(f"unreadable string literal ({_short(exc)})") from None
    proven = Counter((key, value) for key, value, _, _ in pairs) == targets.wanted
    if not proven:
        pairs = _pair_in_order(parsed, pairs, keys, targets)
    proven = proven and _KEY_CHAR_ESCAPE.search(document) is None
    literals = {pair: _literal(new) for pair, new in new_values.items()}
    edits = tuple(Edit(start, end, literals[(key, value)]) for key, value, start, end in pairs)
    return edits, proven


def _pair_in_order(
    parsed: Any, pairs: list[tuple[str, str, int, int]], keys: frozenset[str], targets: _Targets
) -> list[tuple[str, str, int, int]]:
    """Keep the literals that are table positions, pairing them with the document in order."""
    try:
        in_order = [
            (key, value, is_position)
            for key, value, is_position in _members_in_order(parsed, keys, targets.holders)
            if (key, value) in targets.new_values
        ]
    except RecursionError:
        raise RewriteError("document nested too deeply to locate ids") from None
    if [(k, v) for k, v, _ in in_order] != [(k, v) for k, v, _, _ in pairs]:
        raise RewriteError("could not locate the id literals unambiguously (duplicate keys?)")
    return [pair for pair, (_, _, is_position) in zip(pairs, in_order, strict=True) if is_position]


def _members_in_order(
    node: Any, keys: frozenset[str], holders: set[tuple[int, str]]
) -> Iterator[tuple[str, str, bool]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                if key in keys:
                    yield key, value, (id(node), key) in holders
            elif isinstance(value, dict | list):
                yield from _members_in_order(value, keys, holders)
    elif isinstance(node, list):
        for element in node:
            if isinstance(element, dict | list):
                yield from _members_in_order(element, keys, holders)


_PLAIN: Final = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]*')


# A high surrogate then a low one: JSON reads "\ud800\udc00" as ONE character, U+10000.
_SURROGATE_PAIR: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _literal(value: str) -> bytes:
    if _PLAIN.fullmatch(value):  # nothing to escape: the common case, every client id
        return b'"' + value.encode() + b'"'
    if _SURROGATE_PAIR.search(value):
        raise RewriteError("an id with a split surrogate pair cannot be written as JSON")
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: spell them as \u escapes
        return json.dumps(value).encode("ascii")


# --- byte-level prefilter for the encode direction -------------------------------------------

_CONFORMING_VALUE: Final[dict[codec.Profile, bytes]] = {
    "safe": rb"(?!(?:call_)?tid[0-9]+_)[A-Za-z0-9_-]+",
    "call": rb"call_(?!tid[0-9]+_)[A-Za-z0-9_-]+",
}


@functools.cache
def _encode_prefilter(
    api: Api | None, doc: Doc, profile: codec.Profile
) -> tuple[re.Pattern[bytes] | None, re.Pattern[bytes]]:
    """Markers (one must occur; one regex, far cheaper than many ``in`` tests) and a regex for
    an id-key pair whose value may not conform."""
    if api is None:
        keys: frozenset[str] = ID_KEYS
        markers = None
    else:
        table = positions(api, doc)
        keys = frozenset(p.key for p in table)
        spelled = sorted({f'"{m}"'.encode() for p in table for m in p.markers})
        markers = re.compile(b"|".join(re.escape(m) for m in spelled))
    names = b"|".join(re.escape(k.encode()) for k in sorted(keys))
    suspect = re.compile(
        rb'"(?:' + names + rb')"\s*:\s*"(?!' + _CONFORMING_VALUE[profile] + rb'")'
    )
    return markers, suspect


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
