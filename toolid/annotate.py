"""Find the tool-call ids of one HTTP body (JSON or SSE) and show them annotated, sans I/O.

Shared by the mitmproxy contentview, the ``toolid.trace`` command and ``toolid inspect``:

- ``sightings`` lists every id of a body: at the table's positions for a known API (given,
  or guessed from the body's shape), or, with ``deep=True`` and no API, wherever some
  element of some API sits anywhere in the document (a transcript line, a saved
  conversation). Even the deep scan reads only the table: each object is tried as a Chat
  message, a Responses item, an Anthropic content block and a Gemini Content.
- ``annotate`` pretty-prints the body with each id annotated (``# ⟵ raw ...`` beside an
  encoded id, ``# ⚠ not [A-Za-z0-9_-]+`` beside a non-conforming one); an event stream
  is shown event by event, a response that is a JSON array (Gemini's JSON-array stream)
  element by element.

Annotations are YAML-style ``#`` comments, so the text still highlights as JSON/YAML.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from toolid import codec
from toolid.apis import RECORDS, api_from_shape, apis_framed_as
from toolid.apis.record import Element, lacking_code
from toolid.positions import (
    DEFINES,
    LACKS,
    Api,
    Call,
    Doc,
    Found,
    Role,
    find_ids,
    path_order,
    value_at,
)
from toolid.problem import show
from toolid.report import use_of
from toolid.sse import EventFramer

Side = Literal["request", "response"]
Kind = Literal["json", "sse"]

STRICT_RULE: Final = "[A-Za-z0-9_-]+"
#: The APIs that stream a JSON array, element by element (Gemini without ``?alt=sse``).
ARRAY_STREAMS: Final = apis_framed_as("json-array")

_BOM: Final = b"\xef\xbb\xbf"
_SSE_START: Final = re.compile(rb"(?:data|event|id|retry)(?::|\r|\n|$)|:")
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


# --- sightings -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sighting:
    """One tool-call id in a body."""

    value: str  # as it appears in the body
    path: str  # JSON path inside its document, e.g. "choices[0].message.tool_calls[0].id"
    api: Api  # the API whose position it sits at
    event: int | None = None  # 1-based number of the SSE event holding it
    event_name: str | None = None
    role: Role = DEFINES  # whether it defines a tool call or refers to one
    call: Call = ()  # the number of its call in its document (see positions.Found)
    kind: str = "call"  # the kind of id its position holds (see positions.Entry)
    holder_type: str | None = None  # the ``type`` of the object holding it, if any

    @property
    def raw(self) -> str:
        """The raw upstream id (``value`` itself unless it is an encoded id)."""
        return codec.decode(self.value)

    @property
    def encoded(self) -> bool:
        """Whether ``value`` is an id encoded by toolid."""
        return self.raw != self.value

    @property
    def strict_ok(self) -> bool:
        """Whether strict APIs accept ``value`` (``[A-Za-z0-9_-]+``) as an id."""
        return self.role is not LACKS and codec.is_strict_safe(self.value)

    @property
    def shown(self) -> str:
        """``value`` as a person reads it: a call lacking an id as what it holds."""
        return lacking_shown(self.value) if self.role is LACKS else show(self.value)


@dataclass(frozen=True, slots=True)
class Event:
    """One SSE event of a body."""

    number: int  # 1-based, counting non-empty events only
    text: str  # its lines (decoded as UTF-8), without the blank line that ends it
    name: str | None  # its ``event:`` field
    data: str | None  # its ``data:`` fields joined with newlines; None without any
    complete: bool  # False for a tail the stream ended inside


def body_kind(data: bytes, content_type: str | None = None) -> Kind | None:
    """Whether ``data`` is a JSON document or an event stream (by content type, then bytes)."""
    if (content_type or "").lower().startswith("text/event-stream"):
        return "sse"
    head = data[: 64 + len(_BOM)].removeprefix(_BOM).lstrip()
    if head[:1] in (b"{", b"["):
        return "json"
    if head and _SSE_START.match(head):
        return "sse"
    return None


def split_events(data: bytes) -> list[Event]:
    """The events of an event-stream body, in order (WHATWG framing, see ``toolid.sse``)."""
    framer = EventFramer()
    chunks = [(chunk, True) for chunk in framer.feed(data.removeprefix(_BOM))]
    tail = framer.take_tail()
    if tail.strip():
        chunks.append((tail, False))
    events: list[Event] = []
    for chunk, complete in chunks:
        lines = _LINE_BREAK.split(chunk.decode("utf-8", "replace"))
        while lines and not lines[-1]:
            lines.pop()
        if not lines:
            continue
        name: str | None = None
        data_fields: list[str] = []
        for line in lines:
            field, colon, value = line.partition(":")
            if not colon and not field:
                continue
            value = value.removeprefix(" ")
            if field == "data":
                data_fields.append(value)
            elif field == "event":
                name = value
        events.append(
            Event(
                number=len(events) + 1,
                text="\n".join(lines),
                name=name,
                data="\n".join(data_fields) if data_fields else None,
                complete=complete,
            )
        )
    return events


def sightings(
    data: bytes,
    side: Side | None,
    api: Api | None = None,
    *,
    kind: Kind | None = None,
    deep: bool = False,
) -> list[Sighting]:
    """Every tool-call id in ``data`` (empty when it is neither JSON nor an event stream).

    ``side`` picks the table's document kind (an event stream is read event by event);
    ``api`` defaults to a guess from each document's shape. Where no API is known and
    ``deep`` is set (or ``side`` is None), the whole document is searched (``deep_ids``).
    """
    kind = kind or body_kind(data)
    if kind == "json":
        ok, document = _load(data)
        if not ok:
            return []
        if side == "response" and isinstance(document, list):
            return _array_stream_ids(document, api, deep)
        doc = Doc.REQUEST if side == "request" else Doc.RESPONSE
        return _document_ids(document, doc if side else None, api, deep)
    if kind == "sse":
        found: list[Sighting] = []
        seen: set[tuple[Call, str]] = set()
        for event in split_events(data):
            if event.data is None:
                continue
            ok, document = _load(event.data)
            if not ok:
                continue
            api = api or api_from_shape(document, Doc.EVENT)
            found.extend(
                replace(sighting, event=event.number, event_name=event.name)
                for sighting in _first_mentions(
                    _document_ids(document, Doc.EVENT, api, deep or side is None), api, seen
                )
            )
        return found
    return []


def is_answer(document: Any) -> bool:
    """Whether ``document`` has the shape of an answer of an API (a response), and of no
    request."""
    return (
        api_from_shape(document, Doc.RESPONSE) is not None
        and api_from_shape(document, Doc.REQUEST) is None
    )


def _first_mentions[T: (Sighting, Found)](
    found: list[T], api: Api | None, seen: set[tuple[Call, str]]
) -> list[T]:
    """The ids of one streamed event of ``api``, but for a call lacking its id where it need
    not have it: a later mention of a call, in an API whose calls carry their id on their
    first mention alone (``ApiRecord.id_on_first_mention``). ``seen``: the calls (number,
    kind) mentioned before in the stream, updated."""
    if api is None or not RECORDS[api].id_on_first_mention:
        return found
    kept = []
    for one in found:
        call = (one.call, one.kind)
        if not (one.role is LACKS and call in seen):
            kept.append(one)
        seen.add(call)
    return kept


def _array_stream_ids(elements: list[Any], api: Api | None, deep: bool) -> list[Sighting]:
    """The ids of a response that is a JSON array written element by element (Gemini's
    ``:streamGenerateContent`` without ``?alt=sse``): each element one streamed event,
    numbered from 1 as SSE events are."""
    found: list[Sighting] = []
    for number, element in enumerate(elements, 1):
        ids = _document_ids(element, Doc.EVENT, api, deep)
        found.extend(replace(sighting, event=number) for sighting in ids)
    return found


def element_stream(document: Any) -> bool:
    """Whether ``document`` is a JSON-array stream (Gemini's ``:streamGenerateContent``
    without ``?alt=sse``: every element a streamed event of an API of ``ARRAY_STREAMS``), not
    a saved conversation."""
    return (
        isinstance(document, list)
        and bool(document)
        and all(api_from_shape(element, Doc.EVENT) in ARRAY_STREAMS for element in document)
    )


def message_sightings(
    data: bytes, from_client: bool, api: Api | None = None, *, deep: bool = False
) -> list[Sighting]:
    """Every tool-call id of one WebSocket message (Responses over WebSocket): a client's
    message is a request document, a server's one streamed event. Empty when not JSON."""
    ok, document = _load(data)
    if not ok:
        return []
    return _document_ids(document, Doc.REQUEST if from_client else Doc.EVENT, api, deep)


def _document_ids(document: Any, doc: Doc | None, api: Api | None, deep: bool) -> list[Sighting]:
    if doc is not None:
        api = api or api_from_shape(document, doc)
        if api is not None:
            found = find_ids(document, api, doc)
            if found and found[-1].role is LACKS:  # they come last: shown in document order
                found.sort(key=lambda f: path_order(f.path))
            return [_sighting(f, f.path, api) for f in found]
    return deep_ids(document) if deep or doc is None else []


# Each object is tried as one element of each API (``ApiRecord.elements``), wrapped so the
# table's own positions apply: (API, the element, the document it is wrapped in built by
# ``wrapped``, the length of the path the wrapping adds before the object's own).
_ELEMENTS: Final[tuple[tuple[Api, Element], ...]] = tuple(
    (api, element) for api, each in RECORDS.items() for element in each.elements
)


def wrapped(node: dict[str, Any], element: Element) -> tuple[Any, str]:
    """``node`` as the only element at ``element.wrap`` (members, the last an array), and
    the path the wrapping puts before the node's own members (``messages[0]``)."""
    if not element.wrap:
        return node, ""
    *members, array = element.wrap.split(".")
    document: Any = {array: [node]}
    for member in reversed(members):
        document = {member: document}
    return document, f"{element.wrap}[0]"


def deep_ids(document: Any) -> list[Sighting]:
    """Every id of any API anywhere in ``document``, in document order, once per path."""
    found: dict[str, Sighting] = {}
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        node, path = stack.pop()
        children: list[tuple[Any, str]]
        if isinstance(node, dict):
            _element_ids(node, path, found)
            children = [
                (value, f"{path}.{key}" if path else str(key))
                for key, value in node.items()
                if isinstance(value, dict | list)
            ]
        elif isinstance(node, list):
            children = [
                (value, f"{path}[{index}]")
                for index, value in enumerate(node)
                if isinstance(value, dict | list)
            ]
        else:
            continue
        stack.extend(reversed(children))
    return list(found.values())


def _element_ids(node: dict[str, Any], path: str, found: dict[str, Sighting]) -> None:
    for api, element in _ELEMENTS:
        if not element.admits(node):
            continue
        document, prefix = wrapped(node, element)
        for hit in find_ids(document, api, element.doc):
            relative = hit.path[len(prefix) :]
            if not prefix:
                relative = "." + relative
            where = f"{path}{relative}" if path else relative.removeprefix(".")
            found.setdefault(where, _sighting(hit, where, api))


def _sighting(found: Found, path: str, api: Api) -> Sighting:
    kind = found.holder.get("type") if isinstance(found.holder, dict) else None
    return Sighting(
        found.value,
        path,
        api,
        role=found.role,
        call=found.call,
        kind=found.kind,
        holder_type=kind if isinstance(kind, str) else None,
    )


def _load(text: str | bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


# --- annotated text --------------------------------------------------------------------------


def note(value: str, profile: codec.Profile = "safe") -> str:
    """The annotation for one id: its counterpart, and a warning when it does not conform."""
    raw = codec.decode(value)
    if raw != value:
        return f"⟵ {use_of(value) or f'raw {show(raw)}'}"
    client = codec.encode(value, profile)
    if not codec.is_strict_safe(value):
        return f"⚠ not {STRICT_RULE} ⟶ client {show(client)}"
    if client != value:
        return f"⟶ client {show(client)} (profile {profile})"
    return "tool-call id, conforms"


def annotate(
    data: bytes,
    side: Side,
    api: Api | None = None,
    *,
    kind: Kind | None = None,
    profile: codec.Profile = "safe",
    marks: Mapping[str, str] | None = None,
) -> str:
    """``data`` pretty-printed with its tool-call ids annotated (see module docstring).

    ``marks``: more to say of the ids at some paths of a JSON body (``path -> note``, e.g.
    its pairing problems), added to their annotations.
    Raises ValueError when ``data`` is neither a JSON document nor an event stream.
    """
    kind = kind or body_kind(data)
    if kind is None:
        raise ValueError("neither a JSON document nor an event stream")
    try:
        if kind == "json":
            return _annotate_json(data, side, api, profile, marks or {})
        return _annotate_stream(data, api, profile)
    except RecursionError:
        raise ValueError("JSON nested too deeply to show") from None


def annotate_message(
    data: bytes, from_client: bool, api: Api | None = None, *, profile: codec.Profile = "safe"
) -> str:
    """One WebSocket message pretty-printed with its tool-call ids annotated: a client's as a
    request, a server's as a streamed event. Raises ValueError when it is not JSON."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply to show") from None
    doc = Doc.REQUEST if from_client else Doc.EVENT
    api = api or api_from_shape(document, doc)
    found = list(find_ids(document, api, doc)) if api else []
    what = "WebSocket message from the " + ("client" if from_client else "server")
    lines = [_header(api, what, found)]
    _pretty(document, _notes(found, profile), 0, lines, "")
    return "\n".join(lines)


def _annotate_json(
    data: bytes, side: Side, api: Api | None, profile: codec.Profile, marks: Mapping[str, str]
) -> str:
    document = json.loads(data)
    if side == "response" and isinstance(document, list):
        return _annotate_array(document, api, profile)
    doc = Doc.REQUEST if side == "request" else Doc.RESPONSE
    api = api or api_from_shape(document, doc)
    found = list(find_ids(document, api, doc)) if api else []
    lines = [_header(api, side, found)]
    notes = _notes(found, profile)
    marked = set()
    for f in found:
        if f.path in marks:
            notes[(id(f.holder), f.key)] += f" · {marks[f.path]}"
            marked.add(f.path)
    for path, mark in marks.items():  # an object's (a message, a block): on its "{" line
        node = value_at(document, path) if path not in marked else None
        if isinstance(node, dict):
            key = (id(node), "")
            notes[key] = f"{notes[key]} · {mark}" if key in notes else mark
    _pretty(document, notes, 0, lines, "")
    return "\n".join(lines)


def _annotate_stream(data: bytes, api: Api | None, profile: codec.Profile) -> str:
    events = split_events(data)
    body: list[str] = []
    every: list[Found] = []
    seen: set[tuple[Call, str]] = set()
    for event in events:
        title = f"# event {event.number}" + (f": {event.name}" if event.name is not None else "")
        if not event.complete:
            title += " (incomplete: the stream ended inside it)"
        body.append(title)
        ok, document = _load(event.data) if event.data is not None else (False, None)
        if not ok:
            body.extend(event.text.split("\n"))
            continue
        api = _annotate_event(document, api, profile, body, every, seen=seen)
    count = f"{len(events)} event{'s' if len(events) != 1 else ''}"
    return "\n".join([_header(api, "event stream", every, count), *body])


def _annotate_array(elements: list[Any], api: Api | None, profile: codec.Profile) -> str:
    """A JSON array written element by element (Gemini's ``:streamGenerateContent`` without
    ``?alt=sse``), shown element by element, each read as one streamed event."""
    body: list[str] = []
    every: list[Found] = []
    seen: set[tuple[Call, str]] = set()
    for number, element in enumerate(elements, 1):
        body.append(f"# element {number}")
        api = _annotate_event(element, api, profile, body, every, seen=seen)
    count = f"{len(elements)} element{'s' if len(elements) != 1 else ''}"
    return "\n".join([_header(api, "JSON-array stream", every, count), *body])


def _annotate_event(
    document: Any,
    api: Api | None,
    profile: codec.Profile,
    body: list[str],
    every: list[Found],
    *,
    seen: set[tuple[Call, str]],
) -> Api | None:
    """One streamed event's lines added to ``body``, its ids to ``every``; the stream's API
    (``api``, else the one the event's shape tells). ``seen``: as ``_first_mentions``."""
    api = api or api_from_shape(document, Doc.EVENT)
    found = _first_mentions(list(find_ids(document, api, Doc.EVENT)), api, seen) if api else []
    every.extend(found)
    _pretty(document, _notes(found, profile), 0, body, "")
    return api


def _header(api: Api | None, what: str, found: list[Found], *extra: str) -> str:
    name = RECORDS[api].title if api else "API not recognised"
    lacking = sum(f.role is LACKS for f in found)
    bad = sum(f.role is not LACKS and not codec.is_strict_safe(f.value) for f in found)
    encoded = sum(f.role is not LACKS and codec.decode(f.value) != f.value for f in found)
    tagged = sum(codec.occurrence(f.value) > 1 for f in found)
    parts = [f"{name} {what}", *extra]
    if found:
        parts.append(f"{len(found)} tool-call id{'s' if len(found) != 1 else ''}")
        if encoded:
            parts.append(f"{encoded} encoded")
        if tagged:
            parts.append(f"{tagged} tagged (a reused raw id)")
        if bad:
            parts.append(f"⚠ {bad} not {STRICT_RULE}")
        if lacking:
            parts.append(f"⚠ {lacking} call{'s' if lacking != 1 else ''} without a usable id")
    else:
        parts.append("no tool-call ids")
    return "# toolid: " + " · ".join(parts)


def _notes(found: Iterable[Found], profile: codec.Profile) -> dict[tuple[int, str], str]:
    """Each id's note, by its holder and key (a missing member's, by its holder and "")."""
    return {
        (id(f.holder), f.key if f.role is not LACKS or f.value else ""): (
            lacking_note(f.value, f.key) if f.role is LACKS else note(f.value, profile)
        )
        for f in found
    }


def lacking_shown(text: str) -> str:
    """What a call lacking an id holds, as a person reads it ("" is no member at all)."""
    return text or "(none)"


def lacking_note(text: str, key: str) -> str:
    """The annotation for a call lacking an id: what it holds, and what toolid gives it."""
    code = lacking_code(text)
    if text == "":
        return f'⚠ {code}: no "{key}", which clients require ⟶ toolid mints one'
    if text == "null":
        return f"⚠ {code}: null ⟶ toolid mints one"
    return f"⚠ {code}: {text} ⟶ client {show(codec.encode_value(text))}"


def _pretty(
    node: Any, notes: dict[tuple[int, str], str], depth: int, out: list[str], lead: str
) -> None:
    """Append ``node`` as JSON indented by 2 (like ``json.dumps(indent=2)``) to ``out``.

    ``lead`` goes before the first line (the member's key); members with a note get it as
    a trailing comment.
    """
    pad = "  " * depth
    if isinstance(node, dict) and node:
        out.append(f"{pad}{lead}{{")
        if comment := notes.get((id(node), "")):  # a member it lacks
            out[-1] += f"  # {comment}"
        last = len(node) - 1
        for index, (key, value) in enumerate(node.items()):
            _pretty(value, notes, depth + 1, out, f"{_scalar(str(key))}: ")
            if index < last:
                out[-1] += ","
            if not isinstance(value, dict | list) and (comment := notes.get((id(node), key))):
                out[-1] += f"  # {comment}"
        out.append(f"{pad}}}")
    elif isinstance(node, list) and node:
        out.append(f"{pad}{lead}[")
        last = len(node) - 1
        for index, value in enumerate(node):
            _pretty(value, notes, depth + 1, out, "")
            if index < last:
                out[-1] += ","
        out.append(f"{pad}]")
    else:
        out.append(f"{pad}{lead}{_scalar(node)}")


def _scalar(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: spell them as \u escapes
            return json.dumps(value)
    return text
