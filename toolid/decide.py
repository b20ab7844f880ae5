"""Decide: the new value of every id position of one document, and the change it makes.

Given the ids the table finds in a document (``positions.find_ids``) and the flow's policy:

- encoding (upstream to client), each call's client id from ``occurrence.CallIds`` (the wire
  format's encode, with occurrence tags against the ids the request's history takes; once per
  call however many mentions it has, or, in the APIs of ``positions.CALLS_BY_MENTION``, once
  per definition), each call lacking an id its client requires the id ``CallIds.lacking``
  gives it, and each reference the client id of the call it points at;
- restoring (client to upstream), ``codec.decode`` of every client id;
- restoring for a destination with id rules, ``rules.assign``: the raw id where it obeys
  them, else the client id, else a mapped form that does.

Nothing here reads bytes; ``locate`` says where the literals are and ``edit`` changes them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from itertools import compress, repeat
from operator import itemgetter, ne
from typing import Final, Literal, NamedTuple

from toolid import codec
from toolid.apis import RECORDS
from toolid.edit import RewriteError, literal_of, member_literal
from toolid.locate import Targets
from toolid.occurrence import CallIds
from toolid.positions import (
    CALLS_BY_MENTION,
    DEFINES,
    LACKS,
    REFERS,
    Api,
    Call,
    Found,
    path_order,
)
from toolid.rules import RuleSet, assign

# "minted": a call with no id (missing, or null) was given one; "cleared": a later chunk of a
# call whose id is its first chunk's carried another (or a number), written null
Action = Literal["encoded", "restored", "kept", "mapped", "minted", "cleared"]


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


type Mention = tuple[str, Call, str]  # a reference: its path, its call's number, the raw id


class References:
    """What ``decide`` gave the references of one response so far, by mention: the change and
    the new literal (None: unchanged). A reference's client id is that of the call it points
    at, which the calls given client ids before it decide, so these hold while ``CallIds``
    gives none more (``given``): a call's id named again and again in one stream is decided
    once, then found here."""

    __slots__ = ("given", "said")

    def __init__(self) -> None:
        self.given = 0  # how many client ids ``CallIds`` had given when ``said`` was filled
        self.said: dict[Mention, tuple[Change, bytes] | None] = {}


def decide(
    found_ids: list[Found],
    api: Api,
    policy: Policy,
    calls: CallIds | None,
    *,
    in_call_order: bool = False,
    references: References | None = None,
) -> tuple[tuple[Change, ...], Targets]:
    """Each id position that changes (or is kept), with its change, and the positions whose
    value changes. ``calls``: encoding, the client ids of this response's calls, given in
    call order (by number, then what refers to them: ``call_order``) unless
    ``in_call_order`` says ``found_ids`` come so already (the ids of several events, each
    event's in call order). ``references``: what the references of the same response were
    given before (a stream's events, decided piece by piece)."""
    targets = Targets()
    if policy.direction is Direction.ENCODE:
        calls = calls if calls is not None else CallIds(policy.profile)
        if len(found_ids) > 1 and not in_call_order:
            found_ids = call_order(found_ids)
        if references is None:
            references = References()
        by_mention = api in CALLS_BY_MENTION
        first_only = RECORDS[api].id_on_first_mention
        return (
            _encoded(
                found_ids, calls, references, targets, by_mention=by_mention, first_only=first_only
            ),
            targets,
        )
    if found_ids and found_ids[-1].role is LACKS:  # they come last; only answers need ids
        found_ids = [found for found in found_ids if found.role is not LACKS]
    if policy.rules is None:  # restore every encoded id
        targets.client_ids = True  # only ids decode changes: encode made them
        return _restored(found_ids, targets), targets
    changes: list[Change] = []
    add = targets.add
    # A destination with rules: each position once, in document order, so that results
    # find the calls before them.
    found_ids = list({f.span or (id(f.holder), f.key): f for f in found_ids}.values())
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
            add(found, new_value(change))
    return tuple(changes), targets


def _encoded(
    found_ids: list[Found],
    calls: CallIds,
    references: References,
    targets: Targets,
    *,
    by_mention: bool,
    first_only: bool,
) -> tuple[Change, ...]:
    """``decide`` encoding, in call order: each definition's client id from ``calls``
    (``by_mention``: every definition a call of its own, ``positions.CALLS_BY_MENTION``), each
    call's lacking one (``first_only``: only its first mention must carry one), each
    reference's that of the call it points at (``references`` first), and the change and
    the edit of each that changes."""
    changes: list[Change] = []
    add, located = targets.add, targets.edits.append
    make = tuple.__new__  # Change(...) without NamedTuple's Python-level __new__ (per id)
    define = calls.define_alone if by_mention else calls.define
    refer = calls.refer
    said, given = references.said, calls.given
    if references.given != len(given):  # calls were given client ids since
        said.clear()
        references.given = len(given)
    for found in found_ids:  # per id: CallIds.client_id, inline
        _, key, value, path, role, call, _, span = found
        if role is DEFINES:
            client = define(call, key, value)
            if references.given != len(given):  # a new call: references may follow it
                said.clear()
                references.given = len(given)
            if client is None:  # the call was mentioned before with another id
                if first_only:  # a later chunk's other id: written null
                    change, literal = Change(path, value, "", "cleared"), _NULL
                else:  # it keeps its first mention's client id
                    client = calls.defined(call, key, value)
            if client is not None:
                if client == value:
                    continue
                change = make(Change, (path, value, client, "encoded", "", ""))
                literal = b'"' + client.encode() + b'"'  # a client id needs no escape
        elif role is LACKS:
            answer = _lacking(found, calls, first_only)
            if references.given != len(given):  # a new call: references may follow it
                said.clear()
                references.given = len(given)
            if answer is None:
                continue
            change, literal = answer
        else:
            mention = (path, call, value)
            answer = said.get(mention, _UNSAID)
            if answer is _UNSAID:  # its first mention since the last new call
                client = refer(call, value)
                answer = said[mention] = (
                    None
                    if client == value
                    else (
                        make(Change, (path, value, client, "encoded", "", "")),
                        b'"' + client.encode() + b'"',
                    )
                )
            if answer is None:
                continue
            change, literal = answer
        changes.append(change)
        if span is not None:  # Targets.add, inline for a located literal
            located((span[0], span[1], literal))
        else:
            add(found, new_value(change))
    return tuple(changes)


def _lacking(found: Found, calls: CallIds, first_only: bool) -> tuple[Change, bytes] | None:
    """The change and new literal of a call lacking an id (``Role.LACKS``): the value there
    replaced by its client id, or, where the member is missing, the member put in. A later
    mention of a call that needs its id on its first alone (``first_only``) keeps nothing or
    null (None: no change), and has a number or boolean written null."""
    _, key, text, path, _, call, _, span = found
    if span is None:
        raise RewriteError(f"the call lacking an id at {path} was not located")
    if first_only and calls.known(call, key):
        return None if text in ("", "null") else (Change(path, text, "", "cleared"), _NULL)
    client = calls.lacking(call, key, text)
    if text == "":  # missing: the member is put in
        return Change(path, text, client, "minted"), member_literal(key, client)
    action: Action = "minted" if text == "null" else "encoded"
    return Change(path, text, client, action), literal_of(client)


def _restored(found_ids: list[Found], targets: Targets) -> tuple[Change, ...]:
    """``decide`` without rules: ``codec.decode`` of each id, and the change and the new value
    of each that it changes. Worked column by column: each column of the ids taken once, then
    ``map`` and ``zip`` (past the caches of ``decode`` and ``literal_of``): a history restores
    a thousand ids per request."""
    values = [f.value for f in found_ids]
    raws = list(map(codec.decode, values))
    changed = list(map(ne, raws, values))
    if not all(changed):
        found_ids = list(compress(found_ids, changed))
        values, raws = list(compress(values, changed)), list(compress(raws, changed))
    make, paths = tuple.__new__, (f.path for f in found_ids)  # Change(...) without its __new__
    restored = (repeat("restored"), repeat(""), repeat(""))
    changes = tuple(map(make, repeat(Change), zip(paths, raws, values, *restored, strict=False)))
    spans = [span for f in found_ids if (span := f.span) is not None]
    if len(spans) == len(found_ids):  # every literal located (natively): its edit now
        literals = map(literal_of, raws)
        targets.edits.extend(zip(map(_START, spans), map(_END, spans), literals, strict=True))
    else:
        targets.add_all(found_ids, raws)
    return changes


_NULL: Final = b"null"  # what a later chunk of a call holds instead of another id
_CLEARED: Final = codec.JsonText("null")  # the same, as a value to write
_UNSAID: Final[tuple[Change, bytes]] = (Change("", "", "", "encoded"), b"")  # not in ``said``
_START: Final = itemgetter(0)  # a span's
_END: Final = itemgetter(1)


def call_order(found_ids: list[Found]) -> list[Found]:
    """The ids of one document in the order their client ids are chosen: the calls in order
    (by number), then what refers to them."""
    return sorted(found_ids, key=_calls_first) if len(found_ids) > 1 else found_ids


def _calls_first(found: Found) -> tuple[bool, Call]:
    return (found.role is REFERS, found.call)


def new_value(change: Change) -> str:
    """What an id position holds after ``change`` (``cleared``: null, as ``JsonText``)."""
    if change.action in ("encoded", "minted"):
        return change.client
    if change.action == "cleared":
        return _CLEARED
    return change.sent if change.action == "mapped" else change.raw
