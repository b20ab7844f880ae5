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
  match. A call lacking an id its client requires (``Role.LACKS``) is a position too: its
  edit replaces what it holds, or puts the member in first in its object.

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
from toolid.apis import RECORDS, api_from_shape
from toolid.body import Direction, Policy, RewriteError, apply, rewrite
from toolid.positions import LACKS, REFERS, Api, Doc, Found, find_ids, path_order
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
) -> dict[tuple[int, str], str | None]:
    """The client id of every position of one response of ``api``, by (id of holder, key), as
    the spec's "Occurrence tags" section says: calls in order of their number (in a Gemini
    document each definition a call of its own), each the first of encode(raw), tagged(raw,
    2), ... not taken (by the history or an earlier call); a reference gets its call's client
    id (same number, else the latest call with that raw id, else plain encode).

    As the spec's "Calls with no usable id" says: a numbered call (number, key) keeps the
    client id its first mention got, whatever a later one holds; a call lacking an id gets
    its number or boolean encoded (``encode_value``) or, with none or null, a minted id,
    each the first not taken. Where a call carries its id on its first mention alone (Chat),
    a later mention's other id, number or boolean is written null (None), and one holding
    nothing or null keeps it (absent from the answer)."""
    given = set(taken)
    first_only = api is not None and RECORDS[api].id_on_first_mention
    unit_ids: dict[tuple[Any, ...], str] = {}
    numbered: dict[tuple[Any, ...], str] = {}
    by_call: dict[tuple[Any, ...], str] = {}
    latest: dict[str, str] = {}
    out: dict[tuple[int, str], str | None] = {}

    def first_free(make: Any) -> str:
        k = 1
        while (client := make(k)) in given:
            k += 1
        given.add(client)
        return client

    definitions = sorted((f for f in found if f.role is not REFERS), key=lambda f: f.call)
    for number, f in enumerate(definitions):
        member = (id(f.holder), f.key)
        call = (f.call, f.key)
        if f.role is LACKS:
            if f.call and call in numbered:
                if not first_only:
                    out[member] = numbered[call]
                elif f.value not in ("", "null"):
                    out[member] = None
                continue
            if f.value in ("", "null"):
                client = first_free(lambda k: codec.mint(profile, k))
            else:
                client = first_free(lambda k, text=f.value: codec.encode_value(text, profile, k))
            out[member] = client
            if f.call:
                numbered[call] = client
            continue
        unit = (number,) if api is Api.GEMINI else (f.call, f.key, f.value)
        if unit not in unit_ids and api is not Api.GEMINI and f.call and call in numbered:
            out[member] = None if first_only else numbered[call]  # the call's other id
            continue
        if unit not in unit_ids:
            client = first_free(lambda k, raw=f.value: codec.encode(raw, profile, k))
            unit_ids[unit] = by_call[(f.call, f.value)] = latest[f.value] = client
            if f.call:
                numbered.setdefault(call, client)
        out[member] = unit_ids[unit]
    for f in found:
        if f.role is REFERS:
            out[(id(f.holder), f.key)] = (
                by_call.get((f.call, f.value))
                or latest.get(f.value)
                or codec.encode(f.value, profile)
            )
    return out


def new_values(
    parsed: Any, api: Api, doc: Doc, policy: Policy
) -> dict[tuple[int, str], str | None]:
    """The new value of every position of ``parsed`` that must change, by (id of holder,
    key); positions kept as they are (unchanged, or kept for a strict host) are absent."""
    found = find_ids(parsed, api, doc)
    if policy.direction is Direction.ENCODE:
        clients = client_ids(found, policy.profile, api=api)
        return {
            m: c
            for f in found
            if (m := (id(f.holder), f.key)) in clients and (c := clients[m]) != f.value
        }
    found = [f for f in found if f.role is not LACKS]  # only answers have them
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
                client = new[member]
                action = (
                    "cleared"
                    if client is None
                    else "minted"
                    if found.role is LACKS and value in ("", "null")
                    else "encoded"
                )
                out[(found.path, value, client or "", action, "", "")] += 1
            continue
        if found.role is LACKS:
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
    for start, end, text in result.edits:
        assert at <= start <= end <= len(document), result.edits
        if start == end:  # a member put in, first in its object
            assert document[start - 1] == 0x7B and text.endswith(b","), (start, text)
        else:  # a literal: a string's, or what a call lacking an id holds
            assert document[start] == 0x22 == document[end - 1] or not isinstance(
                parse(document[start:end]), str | list | dict
            ), (start, end)
        at = end

    # Each span is the literal of exactly one position, and of nothing else.
    sentinels = [f"\x00toolid-fuzz-edit-{i}\x00" for i in range(len(result.edits))]
    marked = parse(
        apply(
            document,
            [
                (start, end, _sentinel_edit(start, end, text, s))
                for (start, end, text), s in zip(result.edits, sentinels, strict=True)
            ],
        )
    )
    everywhere = Counter(s for s in all_strings(marked) if s.startswith("\x00toolid-fuzz-edit-"))
    assert everywhere == Counter(sentinels), f"an edit is not one literal: {everywhere}"
    at_positions = {f.value: f.path for f in find_ids(marked, used, doc) if f.value in everywhere}
    assert set(at_positions) == set(sentinels), "an edit is not at an id position"

    # Each span held the position's old value and now holds its new one.
    before_ids = find_ids(before, used, doc)
    old_at = {f.path: _held(f) for f in before_ids}
    new_at = {
        f.path: before_new[member]
        for f in before_ids
        if (member := (id(f.holder), f.key)) in before_new
    }
    for (start, end, text), sentinel in zip(result.edits, sentinels, strict=True):
        path = at_positions[sentinel]
        assert (parse(document[start:end]) if start < end else _MISSING) == old_at[path]
        assert path in new_at, f"edited a position that needed no change: {old_at[path]!r}"
        assert parse(_literal_of_edit(start, end, text)) == new_at[path]

    # The parsed output is the parsed input with exactly the positions replaced.
    expected = parse(document)
    for holder, key, new in _replacements(expected, used, doc, policy):
        holder[key] = new
    assert deep_equal(parse(out), expected), "the output parses to something else"
    got = Counter(tuple(c) for c in result.changes)
    assert got == expected_changes(before, used, doc, policy)
    return EDITED


_MISSING: Final = object()  # what a missing member holds


def _held(found: Found) -> Any:
    """What a position holds, parsed: a call lacking an id its JSON text's value."""
    if found.role is not LACKS:
        return found.value
    return _MISSING if found.value == "" else json.loads(found.value)


def _literal_of_edit(start: int, end: int, text: bytes) -> bytes:
    """The new literal an edit writes (a member put in: its value's)."""
    return text[text.index(b":") + 1 : -1] if start == end else text


def _sentinel_edit(start: int, end: int, text: bytes, sentinel: str) -> bytes:
    """An edit writing ``sentinel`` where ``(start, end, text)`` writes its new literal."""
    literal = json.dumps(sentinel).encode()
    return text[: text.index(b":") + 1] + literal + b"," if start == end else literal


def _replacements(
    parsed: Any, api: Api, doc: Doc, policy: Policy
) -> list[tuple[dict[str, Any], str, str | None]]:
    """(holder, key, new value) of each position of ``parsed`` to change, once each."""
    new = new_values(parsed, api, doc, policy)
    members = {(id(f.holder), f.key): f.holder for f in find_ids(parsed, api, doc)}
    return [(members[m], m[1], _parsed(value)) for m, value in new.items()]


def _parsed(value: str | None) -> Any:
    """What a parser reads from a new value written (a ``codec.JsonText`` as its value)."""
    return json.loads(value) if isinstance(value, codec.JsonText) else value


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
