"""Locate: the ids at the table's positions in a document, and where their literals stand.

``locate`` reads one JSON document of a known (or recognisable) API and kind:

- with the native accelerator, ``native.id_spans`` reads it, keeping only what the table
  needs, and reports every id at a table position with the span of its literal: the edits
  need no search;
- otherwise, or for a document the native parser does not vouch for, the document is
  parsed in full (``jsonparse``: orjson when installed) and the table walked
  (``positions.find_ids``); ``Located.edits`` then finds the literals of the ids that change.

Finding them in the bytes: ids of printable ASCII are looked for as plain strings with byte
searches and proved by counting (``_locate_plainly``); otherwise a regex finds each
``"key": "literal"`` pair. A pair whose opening quote is not escaped is structural (in valid
JSON, a real quote followed by a bare key name opens that key), so when the number of such
pairs for an id equals the number of table positions holding it, they are exactly those
positions. Otherwise (the same id also sits under an id-like key elsewhere, say inside tool
arguments) an in-order walk of the whole document pairs literals and positions one by one,
and the result is verified by parsing it again.
"""

from __future__ import annotations

import functools
import json
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, Final, NamedTuple

from toolid import codec, jsonparse, native, prune
from toolid.apis import api_from_shape
from toolid.edit import Edit, RewriteError, literal_of, splice, written
from toolid.positions import (
    LABELS,
    LACKS,
    TYPE,
    Api,
    Call,
    Doc,
    Found,
    Role,
    find_ids,
    positions,
)
from toolid.value_spans import value_span

# A label of a history element (its role or type, which pairing reads): (path, key, value).
type Label = tuple[str, str, str]


type Member = tuple[int, str] | tuple[int, int]  # one id position: (id(holder), key) or its span


class Targets:
    """The id positions whose value changes, each once: where the native parser located it,
    the edit of its literal (``edits``, in the order decided); else its holder, key, old and
    new value (``members``: found in a parsed document, to be located in the bytes)."""

    __slots__ = ("client_ids", "edits", "members", "new")

    def __init__(self) -> None:  # made for every document rewritten: kept plain and quick
        self.new: dict[Member, str] = {}
        self.members: list[tuple[dict[str, Any], str, str, str]] = []
        self.edits: list[Edit] = []
        self.client_ids = False  # every old value is a client id made by the codec

    def __bool__(self) -> bool:
        return bool(self.edits or self.members)

    def add_all(self, found_ids: list[Found], news: list[str]) -> None:
        """``add`` of each of ``found_ids`` (none located) with its new value in ``news``."""
        holders = [f.holder for f in found_ids]
        keys = [f.key for f in found_ids]
        members = list(zip(map(id, holders), keys, strict=True))
        if len(set(members)) < len(members) or self.new:  # a position given twice
            for found, new in zip(found_ids, news, strict=True):
                self.add(found, new)
            return
        self.new.update(zip(members, news, strict=True))
        values = (f.value for f in found_ids)
        self.members.extend(zip(holders, keys, values, news, strict=True))

    def add(self, found: Found, new: str) -> None:
        span = found.span
        if span is not None:  # a located literal: the parser reports each once
            start, end = span
            self.edits.append((start, end, literal_of(new)))
            return
        member = (id(found.holder), found.key)
        if member not in self.new:
            self.new[member] = new
            self.members.append((found.holder, found.key, found.value, new))


class Located(NamedTuple):  # made for every document read: a tuple is quickest to make
    """The ids at the table's positions in one document, and how to find their literals."""

    api: Api
    document: Any  # parsed in full (None: the native parser read it, and each id's span)
    found: list[Found]
    surrogates: bool = True  # whether the bytes may hold raw surrogates (orjson read none)
    labels: list[Label] | None = None  # a history's (Doc.HISTORY), in table order; else None

    def edits(self, source: bytes, targets: Targets, after: int = 0) -> tuple[Edit, ...]:
        """The edits that give every position in ``targets`` its new value, in ``source``
        (the bytes this was located in). ``after``: no literal of an id at a table position
        begins before it in a ``source`` that spells every key plainly (the first of the
        markers when each is a key holding the ids: ``Position.marked_by_key``). Raises
        RewriteError when they cannot be proved."""
        if not targets:
            return ()
        if self.document is None or not targets.members:  # every id's span is known
            spliced = targets.edits
            if len(spliced) > 1:
                spliced.sort()
            return tuple(spliced)
        edits = _locate_plainly(source, targets, surrogates=self.surrogates, after=after)
        if edits is None:
            edits, proven = _locate(source, self.document, targets)
            if not proven:
                _verify(source, edits, self.document, targets)
        if targets.edits:  # calls lacking an id, located with their spans
            edits = tuple(sorted((*edits, *targets.edits)))
        return edits


def locate(document: bytes, api: Api | None, doc: Doc) -> Located | None:
    """The ids of ``document``, a JSON document of ``api`` (None: recognised by its shape).

    None: the API is not known and the document is not JSON, or not of a known API's shape
    (not toolid's to judge). Raises RewriteError for a document of a known API that is not
    valid JSON."""
    if api is not None and native.extension is not None:
        located = _natively(document, api, doc)
        if located is not None:
            return located
    try:
        parsed, strict_utf8 = jsonparse.loads_checked(document)
    except (ValueError, RecursionError) as exc:
        if api is None:
            return None
        raise RewriteError(f"body is not valid JSON ({short(exc)})") from None
    if api is None:
        api = api_from_shape(parsed, doc)
        if api is None:
            return None
    found = find_ids(parsed, api, doc)
    if found and found[-1].role is LACKS:  # they come last
        found = _with_spans(document, found)
    return _located(api, parsed, found, doc, surrogates=not strict_utf8)


def _with_spans(document: bytes, found: list[Found]) -> list[Found]:
    """``found`` with each call lacking an id given its span, and its value the JSON text the
    document spells there (``value_spans``). RewriteError where one cannot be located."""
    spanned_ids: list[Found] = []
    for one in found:
        if one.role is LACKS:
            span = value_span(document, one.path)
            if span is None:
                raise RewriteError(f"could not locate the call lacking an id at {one.path}")
            text = document[span[0] : span[1]].decode("ascii", "replace")
            spanned_ids.append(one._replace(value=text, span=span))
        else:
            spanned_ids.append(one)
    return spanned_ids


def _located(api: Api, parsed: Any, found: list[Found], doc: Doc, *, surrogates: bool) -> Located:
    """``Located`` of a parsed document, a history's labels apart from its ids (they come
    last, in table order)."""
    if doc is not Doc.HISTORY:
        return Located(api, parsed, found, surrogates)
    ids = bisect_left(found, True, key=_is_label)
    labels: list[Label] = list(map(_AS_LABEL, found[ids:]))
    return Located(api, parsed, found[:ids], surrogates, labels)


def _is_label(found: Found) -> bool:
    return found.role is LABELS


_AS_LABEL: Final = itemgetter(3, 1, 2)  # a Found's (path, key, value)


def _natively(document: bytes, api: Api, doc: Doc) -> Located | None:
    """``locate`` of ``document`` as the native parser reads it (``id_spans``), each id with
    its literal's span; None when it does not vouch for the document."""
    assert native.extension is not None
    located: list[Spanned] | None = native.extension.id_spans(document, prune.TABLES[(api, doc)])
    if located is None:
        return None
    if doc is not Doc.HISTORY:
        return Located(api, None, spanned(located, api, doc), True)
    located.sort(key=_SLOT)  # table order, then document order: the labels' slots come last
    ids, keys = _label_slots(api)
    cut = bisect_left(located, ids, key=_SLOT)
    labels = [(path, keys[slot - ids], value) for _, _, slot, _, path, _, value in located[cut:]]
    found = _found_of(located[:cut], _rows(api, doc))  # sorted by slot above
    return Located(api, None, found, True, labels)


@functools.cache
def _label_slots(api: Api) -> tuple[int, tuple[str, ...]]:
    """A history's first label slot (its positions' come before it), and each label's key."""
    rows = _rows(api, Doc.HISTORY)
    first = next(slot for slot, (_, role, _) in enumerate(rows) if role is LABELS)
    return first, tuple(key for key, role, _ in rows[first:] if role is LABELS)


type Spanned = tuple[int, int, int, Call, str, str | None, str]  # what the native parser reports


def plainly(document: bytes, api: Api, doc: Doc, *, at: int = 0) -> list[Found] | None:
    """The ids of ``document`` (parsed in full), each with the span of its literal found by a
    byte search: the one plain spelling of its value, not inside a string, is its literal.
    Spans count from ``at`` (where the document begins in the bytes a caller edits). None
    where that proves nothing: invalid JSON, one value at two positions, a value that is not
    printable ASCII or that the document may spell with escapes."""
    try:
        parsed, strict_utf8 = jsonparse.loads_checked(document)
    except (ValueError, RecursionError):
        return None
    found = find_ids(parsed, api, doc)
    if not found:
        return found
    if found[-1].role is LACKS:  # no literal to search for: ``locate`` spans them
        return None
    if (len(found) > 1 and len({one.value for one in found}) < len(found)) or (
        _may_spell_otherwise(document, not strict_utf8)
    ):
        return None
    spans = []
    find, make, plain = document.find, tuple.__new__, _PLAIN_ID.fullmatch
    for holder, key, value, path, role, call, kind, _ in found:
        if plain(value) is None:
            return None
        literal = b'"' + value.encode() + b'"'
        hit = find(literal)
        if hit <= 0 or find(literal, hit + 1) >= 0 or document[hit - 1] == 0x5C:
            return None
        span = (at + hit, at + hit + len(literal))
        spans.append(make(Found, (holder, key, value, path, role, call, kind, span)))
    return spans


# The holder of an id whose object has no "type": the rules read it; nothing writes to the
# holders of located ids (only the full parse's are verified by writing to them).
_NO_TYPE: Final[dict[str, Any]] = {}


def spanned(located: list[Spanned], api: Api, doc: Doc) -> list[Found]:
    """The ids the native parser reported of one document (``id_spans``), as ``Found``, in
    ``find_ids``' order."""
    if len(located) > 1:
        located.sort(key=_SLOT)  # table order, then document order (the walk's, kept by sort)
    return _found_of(located, _rows(api, doc))


def found_of(
    located: list[Spanned], api: Api, doc: Doc, into: list[Found] | None = None
) -> list[Found]:
    """The ids the native parser reported, as ``Found``, in the order given; appended to
    ``into`` when given."""
    return _found_of(located, _rows(api, doc), into)


def _found_of(
    located: list[Spanned],
    rows: tuple[tuple[str, Role, str], ...],
    into: list[Found] | None = None,
) -> list[Found]:
    """Each id the native parser reported, as ``Found``, in the order given; appended to
    ``into`` when given."""
    make = tuple.__new__  # Found(...) without NamedTuple's Python-level __new__ (per id)
    holders = _HOLDERS
    found: list[Found] = [] if into is None else into
    append = found.append
    for start, end, slot, call, path, holder_type, value in located:
        key, role, kind = rows[slot]
        holder = (
            _NO_TYPE if holder_type is None else holders.get(holder_type) or _holder(holder_type)
        )
        append(make(Found, (holder, key, value, path, role, call, kind, (start, end))))
    return found


@functools.cache
def _rows(api: Api, doc: Doc) -> tuple[tuple[str, Role, str], ...]:
    """Each position's (key, role, kind), by slot; then each required position's, as the slot
    of the calls lacking an id there (``positions.lacking_slots``)."""
    table = positions(api, doc)
    return (
        *((position.key, position.role, position.kind) for position in table),
        *((position.key, LACKS, position.kind) for position in table if position.required),
    )


# The holder of a located id, by its type: one read-only object per type (nothing writes to
# the holders of located ids), at most a few dozen (the tables' types and the clients' own).
_HOLDERS: Final[dict[str, dict[str, Any]]] = {}


def _holder(holder_type: str) -> dict[str, Any]:
    holder = {TYPE: holder_type}
    if len(_HOLDERS) < 256:
        _HOLDERS[holder_type] = holder
    return holder


_SLOT: Final = itemgetter(2)


def short(exc: BaseException) -> str:
    """The first line of an exception's message, at most 120 characters."""
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _verify(document: bytes, edits: Sequence[Edit], parsed: Any, targets: Targets) -> None:
    """Prove edits that counting could not: the new bytes must parse to the old document with
    exactly the positions' values replaced. Catches what byte-level locating cannot see (keys
    spelled with escapes, duplicate keys) before a wrong literal could ever be sent."""
    for holder, key, _, new in targets.members:
        holder[key] = written(new)
    try:
        if jsonparse.loads(splice(document, edits)) != parsed:
            raise RewriteError("could not locate the id literals unambiguously")
    except (ValueError, RecursionError):
        raise RewriteError("rewritten document would not parse") from None


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


type _Pair = tuple[str, str]  # (key, value)


def _by_pair(targets: Targets) -> tuple[Counter[_Pair], dict[_Pair, str | None]]:
    """How many positions hold each (key, old value), and that pair's one new value (None
    when its positions get different ones, as two calls with one reused raw id do)."""
    wanted: Counter[_Pair] = Counter()
    new_values: dict[_Pair, str | None] = {}
    for _, key, value, new in targets.members:
        pair = (key, value)
        wanted[pair] += 1
        new_values[pair] = new if new_values.get(pair, new) == new else None
    return wanted, new_values


# A \u escape that could spell a character of a client id ([A-Za-z0-9_-]: U+0020..U+007F).
_ASCII_ESCAPE: Final = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")
# Raw surrogate bytes (UTF-8 of U+D800..U+DFFF, which json reads with surrogatepass).
_RAW_SURROGATE: Final = re.compile(rb"\xed[\xa0-\xbf]")
_CLIENT_PREFIXES: Final = tuple(codec.PREFIXES.values())
_MARK: Final = codec.MARK_BYTES


def _locate_plainly(
    document: bytes, targets: Targets, *, surrogates: bool = True, after: int = 0
) -> tuple[Edit, ...] | None:
    """The edits, proved by counting plain strings, or None (then ``_locate``).

    For ids of printable ASCII (every client id; most raw ids), where the document has no
    escape that could spell such a character, every JSON string equal to an id is spelled
    plainly, ``"id"``: found with byte searches, far faster than a regex over every quote.
    Each position holding an id is one such string, so there are at least as many strings
    as positions for every id; when there are exactly as many in all, they are the positions.
    Client ids share one search for their prefix's ``codec.MARK``; other ids get one search each, so
    only a few are done this way. Documents with raw surrogate bytes go the general way
    (which refuses literals it cannot read); ``surrogates=False``: the document has none
    (orjson read it).

    Raw ids are counted only from ``after`` on, where (``Located.edits``) every position's
    literal is when no key is spelled with escapes; and where none is (the escape check below
    reads the whole document), the strings before it are not positions, whatever they hold.
    """
    if len(targets.members) == 1:  # the common case in a streamed event
        return _locate_one(document, *targets.members[0][2:], surrogates=surrogates, after=after)
    client_ids = targets.client_ids  # spelled [A-Za-z0-9_-], with a prefix holding codec.MARK
    news: dict[str, str] = {}  # old value -> its one new value
    if client_ids:  # restored: each new value is its old one's decode
        news.update(map(_OLD_NEW, targets.members))
    else:
        for _, _, value, new in targets.members:
            if news.setdefault(value, new) != new:
                return None  # one id, several new values: two calls share it (occurrence tags)
    if not client_ids:
        for value in news:
            if not _PLAIN_ID.fullmatch(value):
                return None
        client_ids = all(value.startswith(_CLIENT_PREFIXES) for value in news)
    if not client_ids and len(news) > _PLAIN_SEARCHES:
        return None
    if _may_spell_otherwise(document, surrogates):
        return None
    literals = dict(zip(map(str.encode, news), map(literal_of, news.values()), strict=True))
    if client_ids:
        edits = _client_id_edits(document, literals)
    else:
        spans = _strings(document, literals, after)
        spans.sort(key=_start)
        edits = [(at, at + len(v) + 2, literals[v]) for v, at in spans]
    return tuple(edits) if len(edits) == len(targets.members) else None


_OLD_NEW: Final = itemgetter(2, 3)  # a member's (old value, new value)
_PLAIN_ID: Final = re.compile(r"[ !#-.0-\[\]-~]+")  # printable ASCII but " / \
_PLAIN_SEARCHES: Final = 8  # most distinct non-client ids located with one search each


def _locate_one(
    document: bytes, value: str, new: str, *, surrogates: bool, after: int
) -> tuple[Edit, ...] | None:
    """``_locate_plainly`` for one position: the one plain string equal to its value."""
    if not _PLAIN_ID.fullmatch(value) or _may_spell_otherwise(document, surrogates):
        return None
    literal = b'"' + value.encode("ascii") + b'"'
    found = [at for at in _occurrences(document, literal, after) if not _escaped(document, at)]
    if len(found) != 1:
        return None
    at = found[0]
    return ((at, at + len(literal), literal_of(new)),)


def _occurrences(document: bytes, literal: bytes, after: int = 0) -> Iterator[int]:
    """Where ``literal`` (a string literal) begins in ``document`` from ``after`` on; the quote
    that ends one may begin the next."""
    find = document.find
    at = find(literal, after)
    while at >= 0:
        yield at
        at = find(literal, at + len(literal) - 1)


def _may_spell_otherwise(document: bytes, surrogates: bool = True) -> bool:
    """Whether a string of printable ASCII may be spelled with escapes in ``document`` (then
    byte searches for its plain spelling prove nothing), or it has raw surrogate bytes (not
    looked for when ``surrogates`` is False: the caller knows it has none).

    Searched with ``bytes.find``, never ``in``: CPython's ``bytes.__contains__`` first reads
    its operand as an int, and the TypeError it raises and clears for a bytes operand costs
    more than searching a short event."""
    backslash = document.find(b"\\")  # one byte, found with memchr; most events have none
    if (
        backslash >= 0
        and document.find(b"\\u00", backslash) >= 0
        and _ASCII_ESCAPE.search(document, backslash) is not None
    ):
        return True
    return (
        surrogates and document.find(b"\xed") >= 0 and _RAW_SURROGATE.search(document) is not None
    )


def _start(span: tuple[bytes, int]) -> int:
    return span[1]


def _client_id_edits(document: bytes, literals: dict[bytes, bytes]) -> list[Edit]:
    """An edit for every plainly spelled string that is a client id in ``literals`` (each
    begins with a prefix holding ``codec.MARK``), to its new literal, in document order."""
    edits: list[Edit] = []
    append, find = edits.append, document.find
    at = find(_MARK)
    while at >= 0:
        # the opening quote: right before the mark ("tid1_), or before the lead ("call_tid1_)
        start = at - 1 if document[at - 1] == 0x22 else at - 1 - codec.LONGEST_LEAD
        end = find(b'"', at + len(_MARK))
        if end < 0:
            break
        new = literals.get(document[start + 1 : end])
        if (
            new is not None
            and start >= 0
            and document[start] == 0x22  # an unescaped quote opens it
            and (document[start - 1] != 0x5C or not _escaped(document, start))
        ):
            append((start, end + 1, new))
        at = find(_MARK, end)
    return edits


def _strings(document: bytes, wanted: Iterable[bytes], after: int) -> list[tuple[bytes, int]]:
    """(value, opening quote) of every plainly spelled string in ``wanted`` from ``after`` on:
    one search per value, or one search in all for the start they share (``"functions.``,
    ``"call_``), which every one of their literals begins with."""
    literals = [(value, b'"' + value + b'"') for value in wanted]
    shared = _shared_start([literal for _, literal in literals]) if len(literals) > 1 else b""
    spans = []
    if len(shared) >= _SHARED_AT_LEAST:
        at = document.find(shared, after)
        while at >= 0:
            for value, literal in literals:
                if document.startswith(literal, at) and not _escaped(document, at):
                    spans.append((value, at))
                    break
            at = document.find(shared, at + 1)
        return spans
    for value, literal in literals:
        spans.extend(
            (value, at)
            for at in _occurrences(document, literal, after)
            if not _escaped(document, at)
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


def _locate(document: bytes, parsed: Any, targets: Targets) -> tuple[tuple[Edit, ...], bool]:
    """The edits, and whether counting alone proves them right.

    It does when every position's literal was found as a structural pair (no key spelled with
    an escape), there are exactly as many such pairs per (key, value) as positions, and all
    positions of a pair get one new value: then the pairs are the positions. Otherwise
    literals are paired with the positions in document order, and the caller must verify.
    """
    wanted, new_values = _by_pair(targets)
    keys = frozenset(key for key, _ in new_values)
    try:
        pairs = [pair for pair in _structural_pairs(document, keys) if pair[:2] in new_values]
    except (ValueError, UnicodeDecodeError) as exc:
        raise RewriteError(f"unreadable string literal ({short(exc)})") from None
    proven = None not in new_values.values() and (
        Counter((key, value) for key, value, _, _ in pairs) == wanted
    )
    news: list[str]
    if proven:  # then every pair has its one new value
        news = [new for key, value, _, _ in pairs if (new := new_values[(key, value)]) is not None]
    else:
        pairs, news = _pair_in_order(parsed, pairs, keys, targets, new_values)
    proven = proven and _KEY_CHAR_ESCAPE.search(document) is None
    literals = {new: literal_of(new) for new in set(news)}
    edits = tuple(
        (start, end, literals[new]) for (_, _, start, end), new in zip(pairs, news, strict=True)
    )
    return edits, proven


def _pair_in_order(
    parsed: Any,
    pairs: list[tuple[str, str, int, int]],
    keys: frozenset[str],
    targets: Targets,
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


def _members_in_order(node: Any, keys: frozenset[str]) -> Iterator[tuple[str, str, Member]]:
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
