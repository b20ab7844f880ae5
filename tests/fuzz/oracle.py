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
from toolid.body import Direction, Policy, RewriteError, apply, rewrite
from toolid.positions import DEFINES, Api, Doc, Found, find_ids, path_order
from toolid.rules import assign

FAILED: Final = "failed-open"
UNCHANGED: Final = "unchanged"
EDITED: Final = "edited"

#: A secret that test documents carry (as an API key in the body): never in a message.
SECRET: Final = "sk-fuzz-S3CR3T-0123456789"


def parse(document: bytes) -> Any:
    """Parse as the rewriter does (NaN and Infinity as their names)."""
    return json.loads(document, parse_constant=str)


def client_ids(
    found: list[Found],
    profile: codec.Profile,
    taken: frozenset[str] = frozenset(),
    api: Api | None = None,
) -> dict[tuple[int, str], str]:
    """The client id of every position of one response of ``api``, by (id of holder, key), as
    the spec's "Occurrence tags" section says: calls in order of their number (in a Gemini
    document each definition a call of its own), each the first of encode(raw), tagged(raw,
    2), ... not taken (by the history or an earlier call); a reference gets its call's client
    id (same number, else the latest call with that raw id, else plain encode)."""
    given = set(taken)
    unit_ids: dict[tuple[Any, ...], str] = {}
    by_call: dict[tuple[Any, ...], str] = {}
    latest: dict[str, str] = {}
    out: dict[tuple[int, str], str] = {}
    definitions = sorted((f for f in found if f.role is DEFINES), key=lambda f: f.call)
    for number, f in enumerate(definitions):
        unit = (number,) if api is Api.GEMINI else (f.call, f.key, f.value)
        if unit not in unit_ids:
            k = 1
            while (client := codec.encode(f.value, profile, k)) in given:
                k += 1
            given.add(client)
            unit_ids[unit] = by_call[(f.call, f.value)] = latest[f.value] = client
        out[(id(f.holder), f.key)] = unit_ids[unit]
    for f in found:
        if f.role is not DEFINES:
            out[(id(f.holder), f.key)] = (
                by_call.get((f.call, f.value))
                or latest.get(f.value)
                or codec.encode(f.value, profile)
            )
    return out


def new_values(parsed: Any, api: Api, doc: Doc, policy: Policy) -> dict[tuple[int, str], str]:
    """The new value of every position of ``parsed`` that must change, by (id of holder,
    key); positions kept as they are (unchanged, or kept for a strict host) are absent."""
    found = find_ids(parsed, api, doc)
    if policy.direction is Direction.ENCODE:
        clients = client_ids(found, policy.profile, api=api)
        return {m: c for f in found if (c := clients[m := (id(f.holder), f.key)]) != f.value}
    if policy.rules is not None:
        # Which id each position sends is toolid.rules' job, checked by its own properties
        # (tests/test_rules.py); this oracle checks that the bytes carry exactly those ids.
        once = sorted(
            {(id(f.holder), f.key): f for f in found}.values(), key=lambda f: path_order(f.path)
        )
        sent = assign(once, api, policy.rules)
        pairs = zip(once, sent, strict=True)
        return {(id(f.holder), f.key): s.value for f, s in pairs if s.value != f.value}
    return {(id(f.holder), f.key): raw for f in found if (raw := codec.decode(f.value)) != f.value}


def expected_changes(parsed: Any, api: Api, doc: Doc, policy: Policy) -> Counter[tuple[str, ...]]:
    """(path, raw, client, action) of every position that changes or is kept."""
    out: Counter[tuple[str, ...]] = Counter()
    new = new_values(parsed, api, doc, policy)
    for found in find_ids(parsed, api, doc):
        value, member = found.value, (id(found.holder), found.key)
        if policy.direction is Direction.ENCODE:
            if member in new:
                out[(found.path, value, new[member], "encoded", "", "")] += 1
            continue
        raw = codec.decode(value)
        if member in new and new[member] != raw:
            rules = policy.rules.name if policy.rules else ""
            out[(found.path, raw, value, "mapped", new[member], rules)] += 1
        elif raw != value:
            action = "restored" if member in new else "kept"
            rules = policy.rules.name if policy.rules and action == "kept" else ""
            out[(found.path, raw, value, action, "", rules)] += 1
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
    before_new = new_values(before, used, doc, policy)
    assert api is not None or api_from_shape(before, doc) is used

    at = 0
    for start, end, _ in result.edits:
        assert at <= start < end <= len(document), result.edits
        assert document[start] == 0x22 == document[end - 1], (start, end)
        at = end

    # Each span is the literal of exactly one position, and of nothing else.
    sentinels = [f"\x00toolid-fuzz-edit-{i}\x00" for i in range(len(result.edits))]
    marked = parse(
        apply(
            document,
            [
                (start, end, json.dumps(s).encode())
                for (start, end, _), s in zip(result.edits, sentinels, strict=True)
            ],
        )
    )
    everywhere = Counter(s for s in all_strings(marked) if s.startswith("\x00toolid-fuzz-edit-"))
    assert everywhere == Counter(sentinels), f"an edit is not one literal: {everywhere}"
    at_positions = {f.value: f.path for f in find_ids(marked, used, doc) if f.value in everywhere}
    assert set(at_positions) == set(sentinels), "an edit is not at an id position"

    # Each span held the position's old value and now holds its new one.
    before_ids = find_ids(before, used, doc)
    old_at = {f.path: f.value for f in before_ids}
    new_at = {
        f.path: before_new[member]
        for f in before_ids
        if (member := (id(f.holder), f.key)) in before_new
    }
    for (start, end, text), sentinel in zip(result.edits, sentinels, strict=True):
        path = at_positions[sentinel]
        assert parse(document[start:end]) == old_at[path]
        assert path in new_at, f"edited a position that needed no change: {old_at[path]!r}"
        assert parse(text) == new_at[path]

    # The parsed output is the parsed input with exactly the positions replaced.
    expected = parse(document)
    for holder, key, new in _replacements(expected, used, doc, policy):
        holder[key] = new
    assert deep_equal(parse(out), expected), "the output parses to something else"
    got = Counter(tuple(c) for c in result.changes)
    assert got == expected_changes(before, used, doc, policy)
    return EDITED


def _replacements(
    parsed: Any, api: Api, doc: Doc, policy: Policy
) -> list[tuple[dict[str, Any], str, str]]:
    """(holder, key, new value) of each position of ``parsed`` to change, once each."""
    new = new_values(parsed, api, doc, policy)
    members = {(id(f.holder), f.key): f.holder for f in find_ids(parsed, api, doc)}
    return [(members[m], m[1], value) for m, value in new.items()]


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
    new = new_values(parsed, used, doc, policy)
    found = find_ids(parsed, used, doc)
    missed = [(f.path, f.value) for f in found if (id(f.holder), f.key) in new]
    assert not missed, f"ids left unchanged without an error: {missed}"
