"""An independent oracle for one run of the JSON body rewriter (``toolid.body.rewrite``).

``check_rewrite`` runs the rewriter on any bytes and checks every promise it makes:

- it never raises anything but ``RewriteError`` (and the message never quotes the body);
- with no edits, it returns the very same bytes object; and when the bytes are a JSON
  document of a known API, nothing at an id position needed a change (no id missed);
- with edits: the output is the input with the edits spliced in; the edit spans are
  sorted, disjoint, whole JSON string literals, each at exactly one id position of the
  parsed input (proved by replacing each span by a unique sentinel literal, parsing, and
  finding every sentinel, once, at a table position and nowhere else); each span held the
  position's old value and now holds its new one; the parsed output equals the parsed
  input with exactly the positions' values replaced (encode, restore, or kept for strict
  hosts), compared without recursion so deep documents work; and the change records
  match.

Positions come from ``toolid.positions.find_ids`` (the table is the specification; its
own tests live in tests/test_positions.py). Everything else here is independent of
``toolid.body``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Final

from toolid import codec
from toolid.apis import api_from_shape
from toolid.body import Direction, Edit, Policy, RewriteError, apply, rewrite
from toolid.positions import Api, Doc, find_ids

FAILED: Final = "failed-open"
UNCHANGED: Final = "unchanged"
EDITED: Final = "edited"

#: A secret that test documents carry (as an API key in the body): never in a message.
SECRET: Final = "sk-fuzz-S3CR3T-0123456789"


def parse(document: bytes) -> Any:
    """Parse as the rewriter does (NaN and Infinity as their names)."""
    return json.loads(document, parse_constant=str)


def new_value(value: str, policy: Policy) -> str | None:
    """What an id position holding ``value`` must hold after the rewrite (None: as is)."""
    if policy.direction is Direction.ENCODE:
        client = codec.encode(value, policy.profile)
        return None if client == value else client
    raw = codec.decode(value)
    if raw == value or (policy.strict and not codec.is_strict_safe(raw)):
        return None
    return raw


def expected_changes(parsed: Any, api: Api, doc: Doc, policy: Policy) -> Counter[tuple[str, ...]]:
    """(path, raw, client, action) of every position that changes or is kept."""
    out: Counter[tuple[str, ...]] = Counter()
    for found in find_ids(parsed, api, doc):
        value = found.value
        if policy.direction is Direction.ENCODE:
            client = codec.encode(value, policy.profile)
            if client != value:
                out[(found.path, value, client, "encoded")] += 1
            continue
        raw = codec.decode(value)
        if raw == value:
            continue
        kept = policy.strict and not codec.is_strict_safe(raw)
        out[(found.path, raw, value, "kept" if kept else "restored")] += 1
    return out


def deep_equal(a: Any, b: Any) -> bool:
    """``a == b`` for parsed JSON, without recursion (documents may be nested very deep)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, dict):
            if not isinstance(y, dict) or x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if not isinstance(y, list) or len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif type(x) is not type(y) or x != y:
            return False
    return True


def all_strings(node: Any) -> list[str]:
    """Every string (member names included) in a parsed document, without recursion."""
    out: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            out.append(item)
    return out


def check_rewrite(
    document: bytes, api: Api | None, doc: Doc, policy: Policy, secret: str = SECRET
) -> str:
    """Run the rewriter on ``document``, check everything (see module docstring), and
    return which of FAILED, UNCHANGED, EDITED happened."""
    try:
        out, result = rewrite(document, api, doc, policy)
    except RewriteError as exc:
        message = str(exc)
        assert secret[:6] not in message, f"the error quotes the body: {message!r}"
        return FAILED
    if not result.edits:
        assert out is document
        assert all(change.action == "kept" for change in result.changes), result
        _check_nothing_missed(document, api, doc, policy)
        return UNCHANGED

    used = result.api
    assert used is not None
    assert api is None or used is api
    assert out == apply(document, result.edits)
    before = parse(document)  # edits only ever happen to a document that parses
    assert api is not None or api_from_shape(before, doc) is used

    at = 0
    for edit in result.edits:
        assert at <= edit.start < edit.end <= len(document), result.edits
        assert document[edit.start] == 0x22 == document[edit.end - 1], edit
        at = edit.end

    # Each span is the literal of exactly one position, and of nothing else.
    sentinels = [f"\x00toolid-fuzz-edit-{i}\x00" for i in range(len(result.edits))]
    marked = parse(
        apply(
            document,
            [
                Edit(e.start, e.end, json.dumps(s).encode())
                for e, s in zip(result.edits, sentinels, strict=True)
            ],
        )
    )
    everywhere = Counter(s for s in all_strings(marked) if s.startswith("\x00toolid-fuzz-edit-"))
    assert everywhere == Counter(sentinels), f"an edit is not one literal: {everywhere}"
    at_positions = {f.value: f.path for f in find_ids(marked, used, doc) if f.value in everywhere}
    assert set(at_positions) == set(sentinels), "an edit is not at an id position"

    # Each span held the position's old value and now holds its new one.
    old_at = {f.path: f.value for f in find_ids(before, used, doc)}
    for edit, sentinel in zip(result.edits, sentinels, strict=True):
        old = old_at[at_positions[sentinel]]
        assert parse(document[edit.start : edit.end]) == old
        new = new_value(old, policy)
        assert new is not None, f"edited a position that needed no change: {old!r}"
        assert parse(edit.text) == new

    # The parsed output is the parsed input with exactly the positions replaced.
    expected = parse(document)
    seen: set[tuple[int, str]] = set()
    for found in find_ids(expected, used, doc):
        if (id(found.holder), found.key) in seen:
            continue
        seen.add((id(found.holder), found.key))
        new = new_value(found.value, policy)
        if new is not None:
            found.holder[found.key] = new
    assert deep_equal(parse(out), expected), "the output parses to something else"
    got = Counter((c.path, c.raw, c.client, c.action) for c in result.changes)
    assert got == expected_changes(before, used, doc, policy)
    return EDITED


# A \u escape spelling a printable ASCII character ("\u0074id1_", "\u0069d"): the byte-level
# prefilter reads ids and member names as they are spelled, so a document that spells them
# this way (no common serializer does) may pass unchanged without a warning.
ASCII_ESCAPE: Final = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")


def _check_nothing_missed(document: bytes, api: Api | None, doc: Doc, policy: Policy) -> None:
    """Unchanged bytes of a known API's JSON document: no position needed a change."""
    if ASCII_ESCAPE.search(document):
        return
    try:
        parsed = parse(document)
    except (ValueError, RecursionError):
        return  # not JSON: nothing to miss
    used = api or api_from_shape(parsed, doc)
    if used is None:
        return
    missed = [
        (f.path, f.value)
        for f in find_ids(parsed, used, doc)
        if new_value(f.value, policy) is not None
    ]
    assert not missed, f"ids left unchanged without an error: {missed}"
