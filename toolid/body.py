"""Rewrite the tool-call ids of one JSON document: locate, decide, edit.

``plan`` works out what rewriting a document does: after cheap byte checks say it may hold
an id to change (``may_change``), ``locate`` finds the ids at the table's positions,
``decide`` gives each its new value, and the located literals become edits. ``rewrite``
splices them in: every other byte (key order, spacing, number spelling, escapes) stays as it
was, and a document with nothing to change is returned as is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from toolid import codec, jsonparse
from toolid.decide import Action, Change, Direction, Policy, decide
from toolid.edit import Edit, RewriteError, splice
from toolid.locate import Located, locate
from toolid.markers import Markers
from toolid.occurrence import NOTHING_TAKEN, CallIds
from toolid.positions import DEFINES, ID_KEYS, REFERS, Api, Doc, positions, spelled_markers

__all__ = [
    "NOTHING",
    "Action",
    "Change",
    "Direction",
    "Edit",
    "Plan",
    "Policy",
    "RewriteError",
    "apply",
    "id_markers",
    "marked_event_filter",
    "may_change",
    "may_hold_ids",
    "plan",
    "plan_located",
    "rewrite",
]


@dataclass(slots=True)  # not frozen: a frozen one costs five times as much to build (per event)
class Plan:
    """What rewriting one document would do. When it had to read the document, also what
    ``locate`` read (the ids at the table's positions; a request's history labels; the
    parsed document, when it was parsed in full), so that a caller needing them never parses
    or walks the same bytes again. Treat it as read-only."""

    api: Api | None
    edits: tuple[Edit, ...] = ()
    changes: tuple[Change, ...] = ()
    located: Located | None = field(default=None, compare=False, repr=False)

    @property
    def document(self) -> Any:
        """The document parsed in full, when it was (else None)."""
        return None if self.located is None else self.located.document

    def definitions(self) -> frozenset[str] | None:
        """The ids at the document's definition positions, when it was read (else None)."""
        if self.located is None:
            return None
        return frozenset(found.value for found in self.located.found if found.role is DEFINES)


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


apply = splice  # the edits of a plan into its document


def plan(
    document: bytes, api: Api | None, doc: Doc, policy: Policy, calls: CallIds | None = None
) -> Plan:
    """Work out the edits that rewrite the ids of ``document`` (see the module docstring)."""
    after = 0  # no id's literal begins before it
    if policy.direction is Direction.ENCODE:
        calls = calls if calls is not None else CallIds(policy.profile)
        prefilter = _encode_prefilter(api, doc, policy.profile)
        if prefilter.markers is not None:
            marker = prefilter.markers.first(document)
            if marker < 0:
                return NOTHING
            # a marker that is a key holding the ids comes before them (if spelled plainly)
            after = marker if prefilter.marked_by_key else 0
    if not may_change(document, api, doc, policy, calls, marked=True):  # markers looked for
        return NOTHING
    # A request is read with its history's labels: its pairing check needs no second read.
    located = locate(document, api, Doc.HISTORY if doc is Doc.REQUEST else doc)
    if located is None:
        return NOTHING
    return plan_located(document, located, policy, calls, after=after)


def plan_located(
    document: bytes,
    located: Located,
    policy: Policy,
    calls: CallIds | None = None,
    *,
    after: int = 0,
) -> Plan:
    """``plan`` for a document whose ids are located already (decide, then edit). ``after``:
    no literal of an id at a table position begins before this offset (``Located.edits``)."""
    changes, targets = decide(located.found, located.api, policy, calls)
    edits = located.edits(document, targets, after)
    return Plan(located.api, edits, changes, located)


def id_markers(api: Api | None, doc: Doc) -> Markers | None:
    """The byte strings of which any document with an id position spells one (None when the
    API is unknown: then any document may)."""
    return _encode_prefilter(api, doc, "safe").markers


def may_hold_ids(document: bytes, markers: Markers | None) -> bool:
    """Cheapest check: False means no id position can be in ``document`` (or its parts)."""
    return markers is None or markers.in_(document)


def may_change(
    document: bytes,
    api: Api | None,
    doc: Doc,
    policy: Policy,
    calls: CallIds | None = None,
    *,
    marked: bool = False,
) -> bool:
    """Cheap byte-level check: False means ``document`` certainly has no id to change.
    ``marked``: the caller found an id marker in it already (``id_markers``).

    Encoding, a conforming id changes too when its call needs an occurrence tag. In a whole
    response that is when the request's history takes it (``calls.taken``) or two calls
    carry it. In a stream, a call's first mention must be read even when its id conforms (a
    later event may reuse it), so only events whose ids are all conforming references to
    untagged calls are skipped. A document spelling a marker of a position where a client
    requires an id may hold a call lacking one (``Role.LACKS``), which no byte check can see.
    """
    prefilter = _encode_prefilter(api, doc, policy.profile)
    if policy.direction is Direction.DECODE:
        if policy.rules is not None:  # any id may break the destination's rules
            return may_hold_ids(document, prefilter.markers)
        return document.find(codec.MARK_BYTES) >= 0
    if not marked and not may_hold_ids(document, prefilter.markers):
        return False
    if marked and prefilter.marker_required:  # a call that may lack its id: read it
        return True
    if doc is Doc.EVENT and not prefilter.refers_only:  # then any id pair may change
        return prefilter.any_pair_in(document)
    if jsonparse.accelerated() and len(document) > _SCAN_AT_MOST:
        return True  # orjson parses a large document faster than the regexes below scan it
    if prefilter.suspect.search(document) is not None:
        return True
    if prefilter.required is not None and prefilter.required.in_(document):
        return True  # a call that may lack its id
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


def marked_event_filter(
    api: Api, policy: Policy, calls: CallIds | None = None
) -> Callable[[bytes], bool]:
    """``may_change(data, api, Doc.EVENT, policy, calls, marked=True)`` as a function of an
    event's data alone, made once per stream: a stream asks it for every event in which a
    marker was found (without the accelerator, before parsing it)."""
    prefilter = _encode_prefilter(api, Doc.EVENT, policy.profile)
    if policy.direction is Direction.ENCODE and not prefilter.refers_only:
        return prefilter.any_pair_in
    return functools.partial(
        may_change, api=api, doc=Doc.EVENT, policy=policy, calls=calls, marked=True
    )


# Above this size, with orjson, parsing beats scanning for non-conforming ids (on a megabyte:
# about 0.6 ms to parse against 0.9 ms for the two regex scans, which rarely stop early).
_SCAN_AT_MOST: Final = 64 * 1024


# --- byte-level prefilter for the encode direction -------------------------------------------

_CONFORMING_VALUE: Final[dict[codec.Profile, bytes]] = {
    "safe": rb"(?!(?:call_)?tid[0-9]+_)[A-Za-z0-9_-]+",
    "call": rb"call_(?!tid[0-9]+_)[A-Za-z0-9_-]+",
}


class _Prefilter(NamedTuple):
    """Byte-level checks for the encode direction of one API and kind of document."""

    markers: Markers | None  # one must occur
    # Whether every marker is a member name on the way to the ids (``Position.marked_by_key``):
    # then no id's literal begins before the first marker in a document spelling its keys
    # plainly.
    marked_by_key: bool
    # Whether a document with a marker may hold an id to change if any id pair in it may: it
    # spells an id-key pair, or orjson parses it faster than the regexes would scan it.
    any_pair_in: Callable[[bytes], bool]
    suspect: re.Pattern[bytes]  # an id-key pair whose value may not conform
    conforming: re.Pattern[bytes]  # an id-key pair whose value conforms: (key, value)
    refers_only: frozenset[bytes]  # keys that only ever hold references
    # The markers of the calls at positions where a client requires an id (a call there may
    # lack one), and whether every marker above is one of them.
    required: Markers | None
    marker_required: bool


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
    pair = rb'"(?:' + names + rb')"\s*:\s*"'
    requiring = [f'"{word}"'.encode() for p in table if p.required for word in p.call_markers]
    required = Markers(requiring) if requiring else None
    marker_required = markers is not None and set(markers.words) <= set(requiring)
    return _Prefilter(
        markers,
        all(position.marked_by_key for position in table),
        _any_pair_in(re.compile(pair), required),
        re.compile(pair + rb"(?!" + value + rb'")'),
        re.compile(rb'"(' + names + rb')"\s*:\s*"(' + value + rb')"'),
        frozenset(k.encode() for k in keys - defining),
        required,
        marker_required,
    )


def _any_pair_in(any_pair: re.Pattern[bytes], required: Markers | None) -> Callable[[bytes], bool]:
    """``_Prefilter.any_pair_in`` of the regex of an id-key pair, and of the markers of the
    positions where a client requires an id (a call there may lack one)."""
    search, accelerated = any_pair.search, jsonparse.accelerated
    if required is None:
        return lambda document: (
            (len(document) > _SCAN_AT_MOST and accelerated()) or search(document) is not None
        )
    return lambda document: (
        (len(document) > _SCAN_AT_MOST and accelerated())
        or search(document) is not None
        or required.in_(document)
    )


_ALL_DOCS: Final = tuple((api, doc) for api in Api for doc in (Doc.RESPONSE, Doc.EVENT))
