"""Surgical rewriting of the tool-call ids in one JSON document.

``plan`` finds the ids at the table's positions (after cheap byte checks say there may be
any), works out their new values, and locates their string literals in the original bytes.
``apply`` splices the new literals in. Every other byte (key order, spacing, number
spelling, escapes) stays as it was; a document with nothing to change is returned as is.

Locating: with the native accelerator, the parser that read the document reports where each
id literal is (``toolid.prune``), and nothing needs finding. Otherwise the parsed document
tells *which* ids change; the bytes tell *where*. Ids of printable ASCII are first looked for
as plain strings with byte searches and proved by counting (``_locate_plainly``); otherwise a
regex finds each ``"key": "literal"`` pair. A pair whose opening quote is not escaped is
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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from toolid import codec, jsonparse, native, prune
from toolid.apis import api_from_shape
from toolid.markers import Markers
from toolid.occurrence import NOTHING_TAKEN, CallIds
from toolid.positions import (
    DEFINES,
    EVENT_CALL_NUMBERS,
    ID_KEYS,
    REFERS,
    TREES,
    Api,
    Call,
    Doc,
    Found,
    find_ids,
    has_references,
    numbered,
    path_order,
    positions,
    spelled_markers,
)
from toolid.rules import RuleSet, assign

Action = Literal["encoded", "restored", "kept", "mapped"]


class Direction(enum.StrEnum):
    """Which way a document travels."""

    ENCODE = "encode"  # upstream -> client: make ids safe
    DECODE = "decode"  # client -> upstream: restore raw ids


@dataclass(frozen=True, slots=True)
class Policy:
    """What to do with the ids of one flow's documents."""

    direction: Direction
    profile: codec.Profile = "safe"
    rules: RuleSet | None = None  # decode: the id rules of the destination, if it has any


class Change(NamedTuple):
    """One id position that changed (or, for ``kept``, that was left as the client sent it
    because the destination would reject the raw id; for ``mapped``, that got ``sent``, a
    form the destination's rule set ``rules`` accepts)."""

    path: str
    raw: str
    client: str
    action: Action
    sent: str = ""
    rules: str = ""


class Edit(NamedTuple):
    """Replace ``document[start:end]`` (a whole string literal, quotes included) by ``text``."""

    start: int
    end: int
    text: bytes


@dataclass(slots=True)  # not frozen: a frozen one costs five times as much to build (per event)
class Plan:
    """What rewriting one document would do. When it had to read the document, also the
    parsed document and every id at the table's positions in it (``find_ids``) or, from a
    fused restore, the ids at its definition positions, so that a caller needing them never
    parses or walks the same bytes again. Treat it as read-only."""

    api: Api | None
    edits: tuple[Edit, ...] = ()
    changes: tuple[Change, ...] = ()
    document: Any = field(default=None, compare=False, repr=False)
    found: tuple[Found, ...] | None = field(default=None, compare=False, repr=False)
    defined: frozenset[str] | None = field(default=None, compare=False, repr=False)

    def definitions(self) -> frozenset[str] | None:
        """The ids at the document's definition positions, when it was read (else None)."""
        if self.defined is not None:
            return self.defined
        if self.found is None:
            return None
        return frozenset(found.value for found in self.found if found.role is DEFINES)


class RewriteError(Exception):
    """The document could not be rewritten safely; it must pass unchanged."""


NOTHING: Final = Plan(api=None)


def rewrite(
    document: bytes, api: Api | None, doc: Doc, policy: Policy, calls: CallIds | None = None
) -> tuple[bytes, Plan]:
    """Rewrite the ids of one JSON ``document``; return the new bytes and the plan.

    ``calls`` (encode only): the client ids already given to this response's tool calls and
    the ids its request's history takes (see ``toolid.occurrence``); default: none.
    Raises RewriteError when ids are there but cannot be changed safely.
    """
    result = plan(document, api, doc, policy, calls)
    return apply(document, result.edits), result


def apply(document: bytes, edits: Sequence[Edit]) -> bytes:
    """Splice ``edits`` (sorted, not overlapping) into ``document``."""
    if not edits:
        return document
    if native.extension is not None and type(document) is bytes:
        spliced: bytes = native.extension.splice(document, edits)
        return spliced
    parts: list[bytes] = []
    append = parts.append
    at = 0
    for start, end, text in edits:
        append(document[at:start])
        append(text)
        at = end
    append(document[at:])
    return b"".join(parts)


def id_markers(api: Api | None, doc: Doc) -> Markers | None:
    """The byte strings of which any document with an id position spells one (None when the
    API is unknown: then any document may)."""
    return _encode_prefilter(api, doc, "safe").markers


def may_hold_ids(document: bytes, markers: Markers | None) -> bool:
    """Cheapest check: False means no id position can be in ``document`` (or its parts)."""
    return markers is None or markers.in_(document)


def may_change(
    document: bytes, api: Api | None, doc: Doc, policy: Policy, calls: CallIds | None = None
) -> bool:
    """Cheap byte-level check: False means ``document`` certainly has no id to change.

    Encoding, a conforming id changes too when its call needs an occurrence tag. In a whole
    response that is when the request's history takes it (``calls.taken``) or two calls
    carry it. In a stream, a call's first mention must be read even when its id conforms (a
    later event may reuse it), so only events whose ids are all conforming references to
    untagged calls are skipped.
    """
    prefilter = _encode_prefilter(api, doc, policy.profile)
    if policy.direction is Direction.DECODE:
        if policy.rules is not None:  # any id may break the destination's rules
            return may_hold_ids(document, prefilter.markers)
        return b"tid1_" in document
    if not may_hold_ids(document, prefilter.markers):
        return False
    if jsonparse.accelerated() and len(document) > _SCAN_AT_MOST:
        return True  # orjson parses a large document faster than the regexes below scan it
    if prefilter.suspect.search(document) is not None:
        return True
    taken = calls.taken if calls else NOTHING_TAKEN
    defined: set[bytes] = set()
    for match in prefilter.conforming.finditer(document):
        key, value = match.group(1, 2)
        if key in prefilter.refers_only:
            if calls and calls.tagged(value.decode()):
                return True
        elif doc is Doc.EVENT or value in defined or value.decode() in taken:
            return True
        defined.add(value)
    return False


# Above this size, with orjson, parsing beats scanning for non-conforming ids (on a megabyte:
# about 0.6 ms to parse against 0.9 ms for the two regex scans, which rarely stop early).
_SCAN_AT_MOST: Final = 64 * 1024


def plan(
    document: bytes, api: Api | None, doc: Doc, policy: Policy, calls: CallIds | None = None
) -> Plan:
    """Work out the edits that rewrite the ids of ``document`` (see module docstring)."""
    if policy.direction is Direction.ENCODE:
        calls = calls or CallIds(policy.profile, references=has_references(api, doc))
    else:
        calls = None
    if api is not None and calls is not None and native.extension is not None:
        # Natively, reading a document costs what scanning it for ids to change costs
        # (``may_change``): only the markers are looked for first.
        if not may_hold_ids(document, id_markers(api, doc)):
            return NOTHING
        encoded = _encode_natively(document, api, doc, calls)
        if encoded is not None:
            if encoded.changes or may_change(document, api, doc, policy, calls):
                return encoded
            return NOTHING  # as the scan would have said at once
    if not may_change(document, api, doc, policy, calls):
        return NOTHING
    if api is not None and calls is None and policy.rules is None and native.extension:
        # Restoring every client id, the common request: parse, walk, decode and edit in
        # one native call, with no Python object per member or position (a history has a
        # thousand positions in a megabyte).
        table = _native_table(api, doc)
        restored = native.extension.restore(document, table, _restored, _ROLES, _CHANGE_TYPES)
        if restored is not None:
            edits, changes, defined = restored
            return Plan(api, tuple(edits), tuple(changes), defined=frozenset(defined))
    if api is not None and (pruned := prune.parse(document, prune.SCHEMAS[(api, doc)])):
        return _plan_at_spans(pruned, api, doc, policy, calls)
    try:
        parsed, strict_utf8 = jsonparse.loads_checked(document)
    except (ValueError, RecursionError) as exc:
        if api is None:
            return NOTHING  # not ours to judge: no API, and not JSON
        raise RewriteError(f"body is not valid JSON ({_short(exc)})") from None
    if api is None:
        api = api_from_shape(parsed, doc)
        if api is None:
            return NOTHING
    found_ids = find_ids(parsed, api, doc)
    changes, targets = _changes(found_ids, api, policy, calls)
    if not targets.members:
        return Plan(api, (), changes, parsed, tuple(found_ids))
    edits = _locate_plainly(document, targets, surrogates=not strict_utf8)
    if edits is None:
        edits, proven = _locate(document, parsed, targets)
        if not proven:
            _verify(document, edits, parsed, targets)
    return Plan(api, edits, changes, parsed, tuple(found_ids))


def _plan_at_spans(
    pruned: tuple[Any, prune.Spans], api: Api, doc: Doc, policy: Policy, calls: CallIds | None
) -> Plan:
    """``plan`` for a document the native parser read (``toolid.prune``): it kept what the
    walker reads and saw every id literal where it stands, so the edits need no search."""
    parsed, spans = pruned
    found_ids = find_ids(parsed, api, doc)
    changes, targets = _changes(found_ids, api, policy, calls)
    make = tuple.__new__  # Edit(...) without NamedTuple's Python-level __new__ (per id)
    edits = sorted(
        make(Edit, (*spans[(id(holder), key)], _literal(new)))
        for holder, key, _, new in targets.members
    )
    return Plan(api, tuple(edits), changes, parsed, tuple(found_ids))


def _encode_natively(document: bytes, api: Api, doc: Doc, calls: CallIds) -> Plan | None:
    """``plan`` of an encode in one native call (parse, walk, client ids, edits: what
    ``_plan_at_spans`` does), or None when the native parser does not vouch for the
    document."""
    assert native.extension is not None
    encoded = native.extension.encode(document, 0, len(document), *native_encoder(api, doc, calls))
    if encoded is None:
        return None
    edits, changes = encoded
    return Plan(api, tuple(edits), tuple(changes))


def native_encoder(api: Api, doc: Doc, calls: CallIds) -> tuple[Any, ...]:
    """What the native encoders (``encode`` and ``sse_feed`` of ``toolid._native``) take
    after their own arguments: the table, ``calls``' state and the helpers ``plan`` uses, so
    that they make the changes and edits ``plan`` makes."""
    table = _native_table(api, doc)
    return (table, calls.native_state(), _literal, _ROLES, _CHANGE_TYPES)


@functools.cache
def _native_table(api: Api, doc: Doc) -> tuple[Any, ...]:
    """(schema, tree, root call members, whether calls are numbered)."""
    roots = EVENT_CALL_NUMBERS if doc is Doc.EVENT else ()
    return (prune.SCHEMAS[(api, doc)], TREES[(api, doc)], roots, numbered(doc))


_ROLES: Final = (DEFINES, REFERS)
_CHANGE_TYPES: Final = (Change, Edit)


@functools.lru_cache(maxsize=65536)  # pure; ids recur in every turn of a conversation
def _restored(client_id: str) -> tuple[str, bytes] | None:
    """The raw id inside ``client_id`` and its literal, or None when it is not a client id."""
    raw = codec.decode(client_id)
    return None if raw == client_id else (raw, _literal(raw))


def _parse(document: bytes) -> Any:
    # NaN and Infinity parse to their names, so that documents holding them compare equal.
    return jsonparse.loads(document)


def _verify(document: bytes, edits: Sequence[Edit], parsed: Any, targets: _Targets) -> None:
    """Prove edits that counting could not: the new bytes must parse to the old document with
    exactly the positions' values replaced. Catches what byte-level locating cannot see (keys
    spelled with escapes, duplicate keys) before a wrong literal could ever be sent."""
    for holder, key, _, new in targets.members:
        holder[key] = new
    try:
        if _parse(apply(document, edits)) != parsed:
            raise RewriteError("could not locate the id literals unambiguously")
    except (ValueError, RecursionError):
        raise RewriteError("rewritten document would not parse") from None


def _changes(
    found_ids: list[Found], api: Api, policy: Policy, calls: CallIds | None
) -> tuple[tuple[Change, ...], _Targets]:
    """Each id position that changes (or is kept), with its change, and the positions whose
    value changes."""
    changes: list[Change] = []
    targets = _Targets()
    add = targets.add
    make = tuple.__new__  # Change(...) without NamedTuple's Python-level __new__ (per id)
    if calls is not None:  # encode: calls in order (by number), then what refers to them
        if len(found_ids) > 1:
            found_ids = sorted(found_ids, key=_calls_first)
        for found in found_ids:
            client = calls.client_id(found)
            if client != found.value:
                changes.append(make(Change, (found.path, found.value, client, "encoded", "", "")))
                add(found.holder, found.key, found.value, client)
        return tuple(changes), targets
    if policy.rules is None:  # restore every encoded id
        decode = codec.decode
        for found in found_ids:
            if (raw := decode(found.value)) != found.value:
                changes.append(make(Change, (found.path, raw, found.value, "restored", "", "")))
                add(found.holder, found.key, found.value, raw)
        targets.client_ids = True  # only ids decode changes: encode made them
        return tuple(changes), targets
    # A destination with rules: each position once, in document order, so that results
    # find the calls before them.
    found_ids = list({(id(f.holder), f.key): f for f in found_ids}.values())
    found_ids.sort(key=lambda found: path_order(found.path))
    rules = policy.rules
    for found, (sent, source) in zip(found_ids, assign(found_ids, api, rules), strict=True):
        raw = codec.decode(found.value)
        if source == "mapped":
            change = Change(found.path, raw, found.value, "mapped", sent, rules.name)
        elif sent != found.value:
            change = Change(found.path, raw, found.value, "restored")
        elif raw != found.value:  # the raw id would break the rules: the client id stays
            change = Change(found.path, raw, found.value, "kept", rules=rules.name)
        else:
            continue
        changes.append(change)
        if change.action != "kept":
            add(found.holder, found.key, found.value, _new_value(change))
    return tuple(changes), targets


def _calls_first(found: Found) -> tuple[bool, Call]:
    return (found.role is REFERS, found.call)


def _new_value(change: Change) -> str:
    """What an id position holds after ``change``."""
    if change.action == "encoded":
        return change.client
    return change.sent if change.action == "mapped" else change.raw


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
        if _escaped(document, match.start()):
            continue  # an escaped quote: inside some string, not a key
        literal = match.group(2)
        value = json.loads(b'"' + literal + b'"') if b"\\" in literal else literal.decode("utf-8")
        pairs.append((match.group(1).decode(), value, match.start(2) - 1, match.end(2) + 1))
    return pairs


type _Member = tuple[int, str]  # (id of the holding object, key): one id position


@dataclass(slots=True)
class _Targets:
    """The id positions to change, each once: its holder, key, old and new value."""

    new: dict[_Member, str] = field(default_factory=dict)
    members: list[tuple[dict[str, Any], str, str, str]] = field(default_factory=list)
    client_ids: bool = False  # every old value is a client id made by the codec

    def add(self, holder: dict[str, Any], key: str, value: str, new: str) -> None:
        member = (id(holder), key)
        if member not in self.new:
            self.new[member] = new
            self.members.append((holder, key, value, new))

    def by_pair(self) -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], str | None]]:
        """How many positions hold each (key, old value), and that pair's one new value (None
        when its positions get different ones, as two calls with one reused raw id do)."""
        wanted: Counter[tuple[str, str]] = Counter()
        new_values: dict[tuple[str, str], str | None] = {}
        for _, key, value, new in self.members:
            pair = (key, value)
            wanted[pair] += 1
            new_values[pair] = new if new_values.get(pair, new) == new else None
        return wanted, new_values


# A \u escape that could spell a character of a client id ([A-Za-z0-9_-]: U+0020..U+007F).
_ASCII_ESCAPE: Final = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")
# Raw surrogate bytes (UTF-8 of U+D800..U+DFFF, which json reads with surrogatepass).
_RAW_SURROGATE: Final = re.compile(rb"\xed[\xa0-\xbf]")
_CLIENT_PREFIXES: Final = tuple(codec.PREFIXES.values())


def _locate_plainly(
    document: bytes, targets: _Targets, *, surrogates: bool = True
) -> tuple[Edit, ...] | None:
    """The edits, proved by counting plain strings, or None (then ``_locate``).

    For ids of printable ASCII (every client id; most raw ids), where the document has no
    escape that could spell such a character, every JSON string equal to an id is spelled
    plainly, ``"id"``: found with byte searches, far faster than a regex over every quote.
    Each position holding an id is one such string, so there are at least as many strings
    as positions for every id; when there are exactly as many in all, they are the positions.
    Client ids share one search for their ``tid1_`` prefix; other ids get one search each, so
    only a few are done this way. Documents with raw surrogate bytes go the general way
    (which refuses literals it cannot read); ``surrogates=False``: the document has none
    (orjson read it).
    """
    if len(targets.members) == 1:  # the common case in a streamed event
        return _locate_one(document, *targets.members[0][2:], surrogates=surrogates)
    news: dict[str, str] = {}  # old value -> its one new value
    for _, _, value, new in targets.members:
        if news.setdefault(value, new) != new:
            return None  # one id, several new values: two calls share it (occurrence tags)
    client_ids = targets.client_ids  # spelled [A-Za-z0-9_-], with a prefix holding tid1_
    if not client_ids:
        for value in news:
            if not _PLAIN_ID.fullmatch(value):
                return None
        client_ids = all(value.startswith(_CLIENT_PREFIXES) for value in news)
    if not client_ids and len(news) > _PLAIN_SEARCHES:
        return None
    if _may_spell_otherwise(document, surrogates):
        return None
    literals = {value.encode("ascii"): _literal(new) for value, new in news.items()}
    if client_ids:
        edits = _client_id_edits(document, literals)
    else:
        spans = _strings(document, literals)
        spans.sort(key=_start)
        make = tuple.__new__  # Edit(...) without NamedTuple's Python-level __new__ (per id)
        edits = [make(Edit, (at, at + len(v) + 2, literals[v])) for v, at in spans]
    return tuple(edits) if len(edits) == len(targets.members) else None


_PLAIN_ID: Final = re.compile(r"[ !#-.0-\[\]-~]+")  # printable ASCII but " / \
_PLAIN_SEARCHES: Final = 8  # most distinct non-client ids located with one search each


def _locate_one(
    document: bytes, value: str, new: str, *, surrogates: bool
) -> tuple[Edit, ...] | None:
    """``_locate_plainly`` for one position: the one plain string equal to its value."""
    if not _PLAIN_ID.fullmatch(value) or _may_spell_otherwise(document, surrogates):
        return None
    literal = b'"' + value.encode("ascii") + b'"'
    found = [at for at in _occurrences(document, literal) if not _escaped(document, at)]
    if len(found) != 1:
        return None
    at = found[0]
    return (tuple.__new__(Edit, (at, at + len(literal), _literal(new))),)


def _occurrences(document: bytes, literal: bytes) -> Iterator[int]:
    """Where ``literal`` (a string literal) begins in ``document``; the quote that ends one
    may begin the next."""
    find = document.find
    at = find(literal)
    while at >= 0:
        yield at
        at = find(literal, at + len(literal) - 1)


def _may_spell_otherwise(document: bytes, surrogates: bool = True) -> bool:
    """Whether a string of printable ASCII may be spelled with escapes in ``document`` (then
    byte searches for its plain spelling prove nothing), or it has raw surrogate bytes (not
    looked for when ``surrogates`` is False: the caller knows it has none)."""
    return (b"\\u00" in document and _ASCII_ESCAPE.search(document) is not None) or (
        surrogates and b"\xed" in document and _RAW_SURROGATE.search(document) is not None
    )


def _start(span: tuple[bytes, int]) -> int:
    return span[1]


def _client_id_edits(document: bytes, literals: dict[bytes, bytes]) -> list[Edit]:
    """An edit for every plainly spelled string that is a client id in ``literals`` (each
    begins with a prefix holding ``tid1_``), to its new literal, in document order."""
    edits: list[Edit] = []
    append, find, make = edits.append, document.find, tuple.__new__
    at = find(b"tid1_")
    while at >= 0:
        start = at - 1 if document[at - 1] == 0x22 else at - 6  # "tid1_ or "call_tid1_
        end = find(b'"', at + 5)
        if end < 0:
            break
        new = literals.get(document[start + 1 : end])
        if (
            new is not None
            and start >= 0
            and document[start] == 0x22  # an unescaped quote opens it
            and (document[start - 1] != 0x5C or not _escaped(document, start))
        ):
            append(make(Edit, (start, end + 1, new)))
        at = find(b"tid1_", end)
    return edits


def _strings(document: bytes, wanted: Iterable[bytes]) -> list[tuple[bytes, int]]:
    """(value, opening quote) of every plainly spelled string in ``wanted``: one search per
    value, or one search in all for the start they share (``"functions.``, ``"call_``), which
    every one of their literals begins with."""
    literals = [(value, b'"' + value + b'"') for value in wanted]
    shared = _shared_start([literal for _, literal in literals]) if len(literals) > 1 else b""
    spans = []
    if len(shared) >= _SHARED_AT_LEAST:
        at = document.find(shared)
        while at >= 0:
            for value, literal in literals:
                if document.startswith(literal, at) and not _escaped(document, at):
                    spans.append((value, at))
                    break
            at = document.find(shared, at + 1)
        return spans
    for value, literal in literals:
        spans.extend(
            (value, at) for at in _occurrences(document, literal) if not _escaped(document, at)
        )
    return spans


_SHARED_AT_LEAST: Final = 4  # a shorter shared start ('"c') is too common to search for


def _shared_start(words: list[bytes]) -> bytes:
    """The longest start all ``words`` have in common."""
    first, last = min(words), max(words)  # the others lie between: they share it too
    size = 0
    while size < len(first) and first[size] == last[size]:
        size += 1
    return first[:size]


def _escaped(document: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    backslashes = 0
    while quote > backslashes and document[quote - backslashes - 1] == 0x5C:
        backslashes += 1
    return backslashes % 2 == 1


# A \u escape that could spell a letter or "_" of a key name, hiding the key from the regex.
_KEY_CHAR_ESCAPE: Final = re.compile(rb"\\u00[4-7][0-9A-Fa-f]")


def _locate(document: bytes, parsed: Any, targets: _Targets) -> tuple[tuple[Edit, ...], bool]:
    """The edits, and whether counting alone proves them right.

    It does when every position's literal was found as a structural pair (no key spelled with
    an escape), there are exactly as many such pairs per (key, value) as positions, and all
    positions of a pair get one new value: then the pairs are the positions. Otherwise
    literals are paired with the positions in document order, and the caller must verify.
    """
    wanted, new_values = targets.by_pair()
    keys = frozenset(key for key, _ in new_values)
    try:
        pairs = [pair for pair in _structural_pairs(document, keys) if pair[:2] in new_values]
    except (ValueError, UnicodeDecodeError) as exc:
        raise RewriteError(f"unreadable string literal ({_short(exc)})") from None
    proven = None not in new_values.values() and (
        Counter((key, value) for key, value, _, _ in pairs) == wanted
    )
    news: list[str]
    if proven:  # then every pair has its one new value
        news = [new for key, value, _, _ in pairs if (new := new_values[(key, value)]) is not None]
    else:
        pairs, news = _pair_in_order(parsed, pairs, keys, targets, new_values)
    proven = proven and _KEY_CHAR_ESCAPE.search(document) is None
    literals = {new: _literal(new) for new in set(news)}
    edits = tuple(
        Edit(start, end, literals[new]) for (_, _, start, end), new in zip(pairs, news, strict=True)
    )
    return edits, proven


def _pair_in_order(
    parsed: Any,
    pairs: list[tuple[str, str, int, int]],
    keys: frozenset[str],
    targets: _Targets,
    new_values: dict[tuple[str, str], str | None],
) -> tuple[list[tuple[str, str, int, int]], list[str]]:
    """The literals that are table positions, paired with the document's members in order,
    and the new value of each."""
    try:
        in_order = [
            (key, value, member)
            for key, value, member in _members_in_order(parsed, keys)
            if (key, value) in new_values
        ]
    except RecursionError:
        raise RewriteError("document nested too deeply to locate ids") from None
    if [(k, v) for k, v, _ in in_order] != [(k, v) for k, v, _, _ in pairs]:
        raise RewriteError("could not locate the id literals unambiguously (duplicate keys?)")
    kept = [
        (pair, targets.new[member])
        for pair, (_, _, member) in zip(pairs, in_order, strict=True)
        if member in targets.new
    ]
    return [pair for pair, _ in kept], [new for _, new in kept]


def _members_in_order(node: Any, keys: frozenset[str]) -> Iterator[tuple[str, str, _Member]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                if key in keys:
                    yield key, value, (id(node), key)
            elif isinstance(value, dict | list):
                yield from _members_in_order(value, keys)
    elif isinstance(node, list):
        for element in node:
            if isinstance(element, dict | list):
                yield from _members_in_order(element, keys)


_PLAIN: Final = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]*')


# A high surrogate then a low one: JSON reads "\ud800\udc00" as ONE character, U+10000.
_SURROGATE_PAIR: Final = re.compile("[\ud800-\udbff][\udc00-\udfff]")


@functools.lru_cache(maxsize=65536)  # pure; ids recur in every turn of a conversation
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


class _Prefilter(NamedTuple):
    """Byte-level checks for the encode direction of one API and kind of document."""

    markers: Markers | None  # one must occur
    suspect: re.Pattern[bytes]  # an id-key pair whose value may not conform
    conforming: re.Pattern[bytes]  # an id-key pair whose value conforms: (key, value)
    refers_only: frozenset[bytes]  # keys that only ever hold references


@functools.cache
def _encode_prefilter(api: Api | None, doc: Doc, profile: codec.Profile) -> _Prefilter:
    if api is None:
        table = tuple(p for (a, d) in _ALL_DOCS for p in positions(a, d))
        markers = None
    else:
        table = positions(api, doc)
        markers = Markers(spelled_markers(table))
    keys = frozenset(p.key for p in table) if api is not None else ID_KEYS
    names = b"|".join(re.escape(k.encode()) for k in sorted(keys))
    value = _CONFORMING_VALUE[profile]
    defining = {p.key for p in table if p.role is not REFERS}
    return _Prefilter(
        markers,
        re.compile(rb'"(?:' + names + rb')"\s*:\s*"(?!' + value + rb'")'),
        re.compile(rb'"(' + names + rb')"\s*:\s*"(' + value + rb')"'),
        frozenset(k.encode() for k in keys - defining),
    )


_ALL_DOCS: Final = tuple((api, doc) for api in Api for doc in (Doc.RESPONSE, Doc.EVENT))


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
