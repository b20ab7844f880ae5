"""Occurrence tags: which client id each tool call of one response gets (wire format v1).

An upstream that reuses ids (``functions.Glob:0`` every turn) would hand the client the
same id for different calls. So the client id of a call is the first of
``encode(raw)``, ``encode(raw, occurrence=2)``, ... that is not *taken*: not defined by the
request's history (``Taken``) and not given to an earlier call of the same response.

``CallIds`` makes that choice once per call, however many events mention it (a call is
known by its number, see ``positions.Found.call``), and answers references (results,
events about a call) with the client id of the call they point at. A call keeps the client
id its first mention got: a later mention of the same call carrying another id gets it too
(that other id never reaches the client, so it never comes back). A call with no usable id
where its client requires one gets one (``lacking``): its number or boolean encoded
(``codec.encode_value``), or, with no id at all, a minted one (``codec.mint``), each the
first not taken, as above. One ``CallIds`` serves
one response, buffered or streamed; nothing outlives the flow, so the proxy stays
stateless. Sans I/O: it sees ids and bytes, never a connection.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Set
from typing import Final

from toolid import codec, jsonparse
from toolid.apis import api_from_shape
from toolid.markers import Markers
from toolid.positions import (
    DEFINES,
    Api,
    Call,
    Doc,
    Found,
    find_ids,
    positions,
    spelled_markers,
)

# A \u escape that could spell a character of a client id ([A-Za-z0-9_-] are all in
# U+0020..U+007F): where the request has none, a client id it defines is spelled plainly.
_ASCII_ESCAPE: Final = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")


class Taken:
    """The client ids defined by a request's history (definition positions only).

    Built from the request as the client sent it; parsed only when a candidate id is
    spelled somewhere in it, so requests whose history cannot collide cost a byte search.
    """

    def __init__(self, request: bytes = b"", api: Api | None = None) -> None:
        self._request = request
        self._api = api
        self._ids: frozenset[str] | None = None if request else frozenset()
        self._escapes: bool | None = None

    @classmethod
    def of(cls, client_ids: Iterable[str]) -> Taken:
        """A taken set given as the ids themselves."""
        taken = cls()
        taken._ids = frozenset(client_ids)
        return taken

    def __contains__(self, client_id: object) -> bool:
        if not isinstance(client_id, str):
            return False
        ids = self.known()
        if ids is None:
            literal = b'"' + client_id.encode() + b'"' if codec.has_shape(client_id) else b""
            if literal and literal not in self._request and not self._escaped():
                return False
            ids = self._ids = self._definitions()
        return client_id in ids

    def known(self) -> frozenset[str] | None:
        """The taken ids, when known without parsing the request (None: ask ``in``)."""
        if self._ids is None and not self._may_define():
            self._ids = frozenset()
        return self._ids

    def ids(self) -> frozenset[str]:
        """Every taken id (parsing the request when that is the only way to know them)."""
        ids = self.known()
        if ids is None:
            ids = self._ids = self._definitions()
        return ids

    @staticmethod
    def union(parts: Iterable[Taken]) -> Taken:
        """The ids that any of ``parts`` takes (one WebSocket connection: the ids each of
        its request frames defines, and those given to its calls). Each part is read only
        when asked, as it would be alone."""
        parts = tuple(part for part in parts if part.known() != frozenset())
        if not parts:
            return NOTHING_TAKEN
        return parts[0] if len(parts) == 1 else _Union(parts)

    def _may_define(self) -> bool:
        """Whether the request may hold a definition at all: it spells a marker of a
        definition position (``Position.markers``), or may spell one with escapes."""
        markers = _definition_markers(self._api) if self._api is not None else None
        return markers is None or markers.in_(self._request) or self._escaped()

    def _escaped(self) -> bool:
        """Whether the request may spell a client id with escapes (then the byte search
        cannot prove an id absent). Searched once, when first asked."""
        if self._escapes is None:
            self._escapes = (
                b"\\u00" in self._request and _ASCII_ESCAPE.search(self._request) is not None
            )
        return self._escapes

    def _definitions(self) -> frozenset[str]:
        try:
            document = jsonparse.loads(self._request)
        except (ValueError, RecursionError):
            return frozenset()
        api = self._api or api_from_shape(document, Doc.REQUEST)
        if api is None:
            return frozenset()
        found = find_ids(document, api, Doc.REQUEST)
        return frozenset(f.value for f in found if f.role is DEFINES)


@functools.cache
def _definition_markers(api: Api) -> Markers:
    return Markers(spelled_markers(p for p in positions(api, Doc.REQUEST) if p.role is DEFINES))


class _Union(Taken):
    """``Taken.union`` of two or more parts."""

    def __init__(self, parts: tuple[Taken, ...]) -> None:
        super().__init__()
        self._parts = parts
        self._ids = None

    def __contains__(self, client_id: object) -> bool:
        return any(client_id in part for part in self._parts)

    def known(self) -> frozenset[str] | None:
        if self._ids is None:
            known = [part.known() for part in self._parts]
            if any(ids is None for ids in known):
                return None
            self._ids = frozenset[str]().union(*(ids for ids in known if ids is not None))
        return self._ids

    def ids(self) -> frozenset[str]:
        if self._ids is None:
            self._ids = frozenset[str]().union(*(part.ids() for part in self._parts))
        return self._ids


NOTHING_TAKEN: Final = Taken()


class CallIds:
    """The client ids of the tool calls of one response (buffered, or a whole stream)."""

    def __init__(self, profile: codec.Profile = "safe", taken: Taken = NOTHING_TAKEN) -> None:
        self.profile: codec.Profile = profile
        self.taken = taken
        self._encode = codec.encoder(profile)  # an untagged client id, cached by raw id
        # Each call's client id, by its mention (call number, key, raw id), for refer by (call
        # number, raw id), and by raw id: its latest call's. A raw id's first mention is kept
        # by raw id alone (its call and key), and both indexes are filled in when a second one
        # comes: only then must its mentions and calls be told apart, and a key tuple for
        # every call would live until the response ends, for the garbage collector to trace.
        self._calls: dict[tuple[Call, str, str], str] = {}
        self._by_call: dict[tuple[Call, str], str] = {}
        self._latest: dict[str, str] = {}
        self._first_call: dict[str, Call] = {}  # raw -> its only mention's call, so far
        self._first_key: dict[str, str] = {}  # raw -> its only mention's key, so far
        self._given: set[str] = set()  # client ids given to this response's calls
        self._tagged: set[str] = set()  # raw ids some call of which got an occurrence tag
        # (call number, key) -> the client id its first mention got (numbered calls only)
        self._numbered: dict[tuple[Call, str], str] = {}
        self._taken: Set[str] | Taken | None = None  # what define asks: taken, or its ids

    def client_id(self, found: Found) -> str:
        """The client id for the id ``found`` in the response (encoded, maybe tagged)."""
        if found.role is DEFINES:
            return self.defined(found.call, found.key, found.value)
        return self.refer(found.call, found.value)

    @property
    def given(self) -> Set[str]:
        """The client ids given to this response's calls so far."""
        return self._given

    def tagged(self, raw: str) -> bool:
        """Whether some call of this response with raw id ``raw`` got an occurrence tag."""
        return raw in self._tagged

    def define(self, call: Call, key: str, raw: str) -> str | None:
        """The client id of the call numbered ``call`` whose member ``key`` holds ``raw``;
        None when that call was mentioned before with another id (``defined`` gives it the
        client id of its first mention)."""
        latest = self._latest.get(raw)
        if latest is None:  # raw's first mention
            member = (call, key)
            if call and member in self._numbered:
                return None  # the call was mentioned with another id before
            self._first_call[raw] = call
            self._first_key[raw] = key
            client = self._fresh(raw)
            if call:
                self._numbered[member] = client
            return client
        first_call = self._first_call.get(raw)
        if first_call is not None:  # raw has had one mention so far
            first_key = self._first_key[raw]
            if call == first_call and key == first_key:
                return latest  # that mention again
            self._calls[(first_call, first_key, raw)] = self._by_call[(first_call, raw)] = latest
            del self._first_call[raw], self._first_key[raw]
        else:  # several mentions before (or calls defined alone: define_alone)
            known = self._calls.get((call, key, raw))
            if known is not None:
                return known
        if call and (call, key) in self._numbered:
            return None  # the call was mentioned with another id before
        client = self._calls[(call, key, raw)] = self._by_call[(call, raw)] = self._fresh(raw)
        if call:
            self._numbered[(call, key)] = client
        return client

    def defined(self, call: Call, key: str, raw: str) -> str:
        """``define``, where a call mentioned before with another id keeps the client id its
        first mention got."""
        client = self.define(call, key, raw)
        return client if client is not None else self._numbered[(call, key)]

    def lacking(self, call: Call, key: str, text: str) -> str:
        """The client id of the call numbered ``call`` whose member ``key`` holds no usable id:
        ``text`` is the JSON text it holds (a number, a boolean, ``null``), "" when it is
        missing. A call mentioned before keeps its client id; else a number or boolean is
        encoded, and null or nothing gets a minted id."""
        known = self._numbered.get((call, key)) if call else None
        if known is not None:
            return known
        if text in ("", "null"):
            client = self._first_free(functools.partial(codec.mint, self.profile))
        else:
            client = self._first_free(functools.partial(codec.encode_value, text, self.profile))
        self._given.add(client)
        if call:
            self._numbered[(call, key)] = client
        return client

    def _first_free(self, client_id: Callable[[int], str]) -> str:
        """The first of ``client_id(1)``, ``client_id(2)``, ... neither taken nor given."""
        occurrence = 1
        client = client_id(occurrence)
        while client in self._given or client in self.taken:
            occurrence += 1
            client = client_id(occurrence)
        return client

    def known(self, call: Call, key: str) -> bool:
        """Whether the call numbered ``call`` has a client id for its member ``key`` already."""
        return (call, key) in self._numbered

    def define_alone(self, call: Call, key: str, raw: str) -> str:
        """``define`` for a call that no other mention names, whatever its number (each
        Gemini functionCall part is a whole call: ``positions.CALLS_BY_MENTION``)."""
        return self._fresh(raw)

    def _fresh(self, raw: str) -> str:
        """The first client id for ``raw`` that is neither taken nor given yet, now given."""
        client = self._encode(raw)
        given, taken = self._given, self._taken
        if taken is None:  # asked once: a set when the request's ids are known unparsed
            ids = self.taken.known()
            taken = self._taken = self.taken if ids is None else ids
        if client in given or client in taken:  # an occurrence tag: the next free one
            occurrence = 2
            client = codec.encode(raw, self.profile, occurrence)
            while client in given or client in taken:
                occurrence += 1
                client = codec.encode(raw, self.profile, occurrence)
            self._tagged.add(raw)
        self._latest[raw] = client
        given.add(client)
        return client

    def refer(self, call: Call, raw: str) -> str:
        """The client id a reference to ``raw`` gets: that of the call with this raw id and
        the same number (an event about that call), else of the latest call with this raw
        id, else its plain encoding (the call is not in this response)."""
        known = self._by_call.get((call, raw)) or self._latest.get(raw)
        return known if known is not None else self._encode(raw)
