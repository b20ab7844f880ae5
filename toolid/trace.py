"""Where tool-call ids appear in captured HTTP exchanges (and the messages of a Responses
WebSocket): what ``toolid.trace`` (the addon's command) and ``toolid inspect`` (flow files)
both read.

An exchange is given as an ``Exchange``: plain data, whatever captured it. ``exchange_of``
makes one of anything shaped like a mitmproxy HTTP flow (``CapturedFlow``: a live flow, one
read from a flow file), without importing mitmproxy. Each side's ids are read from its stored
body (``annotate.sightings``) and from toolid's records of the flow
(``flow.metadata["toolid"]``: the changes it made, or would make when observing), which still
say where each id was when the body is not stored (a streamed response).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from toolid import codec
from toolid.annotate import Side, Sighting, body_kind, message_sightings, sightings
from toolid.apis import api_from_path
from toolid.positions import Api


@dataclass(frozen=True, slots=True)
class Exchange:
    """One HTTP request and its response, as captured."""

    method: str
    path: str  # without the query string
    api: Api | None
    record: Mapping[str, Any] = field(default_factory=dict)  # toolid's records, if any
    # side -> (the stored body, its content type); a body that is not stored is None
    bodies: Mapping[Side, tuple[bytes | None, str | None]] = field(default_factory=dict)
    # a WebSocket's messages, numbered from 1: (from the client, its text; None: binary)
    messages: Sequence[tuple[bool, bytes | None]] = ()

    def message_ids(self, side: Side) -> Iterable[tuple[int, Sighting]]:
        """(message number, id) for the ids in the WebSocket messages of ``side`` (the
        client's are requests, the server's responses)."""
        for number, (from_client, content) in enumerate(self.messages, 1):
            if content and from_client == (side == "request"):
                for sighting in message_sightings(content, from_client, self.api, deep=True):
                    yield number, sighting

    def body_ids(self, side: Side) -> list[Sighting] | None:
        """The ids in the stored body of ``side`` (None: no body stored)."""
        content, content_type = self.bodies.get(side, (None, None))
        if not content:
            return None
        return sightings(content, side, self.api, kind=body_kind(content, content_type), deep=True)

    def recorded(self, side: Side) -> list[Recorded]:
        """What toolid's records say of the ids of ``side``."""
        changes = self.record.get(side)
        if not isinstance(changes, list):
            return []
        observe = bool(self.record.get("observe"))
        found = []
        for change in changes:
            if not isinstance(change, dict):
                continue
            values = [change.get(key) for key in ("path", "raw", "client", "action")]
            if all(isinstance(value, str) for value in values):
                path, raw, client, action = (str(value) for value in values)
                seen = _on_the_wire(side, change, observe)
                message = change.get("message")
                number = message if isinstance(message, int) else None
                found.append(Recorded(path, raw, client, action, seen, number))
        return found


class Recorded(NamedTuple):
    """One id position of toolid's records."""

    path: str
    raw: str
    client: str
    action: str
    seen: str  # what went over the wire: to the client (responses) or the upstream (requests)
    message: int | None = None  # the number of its WebSocket message, if it was in one


class CapturedMessage(Protocol):
    """A captured request or response, as a mitmproxy ``http.Message`` has it."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    def get_content(self, strict: bool = True) -> bytes | None:
        """The body, decoded by its content-encoding."""
        ...


class CapturedRequest(CapturedMessage, Protocol):
    """A captured request (mitmproxy's ``http.Request``)."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...


class CapturedFrame(Protocol):
    """One WebSocket message (mitmproxy's ``websocket.WebSocketMessage``)."""

    from_client: bool
    content: bytes

    @property
    def is_text(self) -> bool: ...


class CapturedSocket(Protocol):
    """A flow's WebSocket messages (mitmproxy's ``websocket.WebSocketData``)."""

    @property
    def messages(self) -> Sequence[CapturedFrame]: ...


class CapturedFlow(Protocol):
    """An HTTP flow, as mitmproxy's ``http.HTTPFlow`` has it (live, or read from a file)."""

    @property
    def request(self) -> CapturedRequest: ...

    @property
    def response(self) -> CapturedMessage | None: ...

    @property
    def websocket(self) -> CapturedSocket | None: ...

    @property
    def metadata(self) -> Mapping[str, Any]: ...


def records_of(flow: CapturedFlow) -> Mapping[str, Any]:
    """What toolid recorded in the flow (``flow.metadata["toolid"]``; empty: nothing)."""
    record = flow.metadata.get("toolid")
    return record if isinstance(record, dict) else {}


def api_of(flow: CapturedFlow) -> Api | None:
    """The API toolid read the flow's request as (its records), else the one its path names."""
    try:
        return Api(records_of(flow)["api"])
    except (KeyError, ValueError, TypeError):
        return api_from_path(flow.request.path)


def exchange_of(flow: CapturedFlow) -> Exchange:
    """What toolid reads of a captured HTTP flow. Bodies are decoded when first asked for."""
    request = flow.request
    return Exchange(
        request.method,
        request.path.split("?", 1)[0],
        api_of(flow),
        records_of(flow),
        _Bodies({"request": request, "response": flow.response}),
        [
            (frame.from_client, frame.content if frame.is_text else None)
            for frame in (flow.websocket.messages if flow.websocket is not None else ())
        ],
    )


class _Bodies(Mapping[Side, tuple[bytes | None, str | None]]):
    """A flow's stored bodies and content types, decoded only when asked for."""

    def __init__(self, messages: dict[Side, CapturedMessage | None]) -> None:
        self._messages = messages

    def __getitem__(self, side: Side) -> tuple[bytes | None, str | None]:
        message = self._messages[side]
        if message is None:
            return None, None
        return message.get_content(strict=False), message.headers.get("content-type")

    def __iter__(self) -> Iterator[Side]:
        return iter(self._messages)

    def __len__(self) -> int:
        return len(self._messages)


def _on_the_wire(side: Side, change: Mapping[str, Any], observe: bool) -> str:
    raw, client = change["raw"], change["client"]
    if side == "response":
        return str(raw if observe else client)
    return str(client if observe or change.get("action") == "kept" else raw)


_ROLES = {"response": "created", "request": "replayed"}
_SIDES: tuple[Side, ...] = ("request", "response")


def trace_lines(tool_id: str, exchanges: Sequence[Exchange | None]) -> list[str]:
    """One line per position of ``tool_id`` (raw or encoded) in ``exchanges``, in order.

    ``#N`` is the exchange's position (from 1; None: not an HTTP exchange, skipped but
    counted); a response is where the id was created, a request where it was replayed. Each
    side is matched by toolid's records when they mention the id (they always do for an id
    toolid changed or would change), else by its stored body. A tagged client id names one
    call: it is followed by its client id, never by the raw id other calls carry too."""
    raw = codec.decode(tool_id)
    by_raw = codec.occurrence(tool_id) == 1
    lines = []
    for number, exchange in enumerate(exchanges, 1):
        if exchange is None:
            continue
        for side, where, action in _sightings(exchange, tool_id, raw, by_raw):
            detail = f"{_ROLES[side]}, {action}" if action else _ROLES[side]
            lines.append(f"#{number} {exchange.method} {exchange.path} {side} {where} ({detail})")
    return lines


def _sightings(
    exchange: Exchange, tool_id: str, raw: str, by_raw: bool
) -> Iterable[tuple[Side, str, str]]:
    for side in _SIDES:
        recorded = [
            (side, _in_message(change.message) + change.path, change.action)
            for change in exchange.recorded(side)
            if change.client == tool_id or (by_raw and change.raw in (raw, tool_id))
        ]
        if recorded:
            yield from recorded
            continue
        for sighting in exchange.body_ids(side) or ():
            if sighting.value == tool_id or (by_raw and sighting.raw == raw):
                event = "" if sighting.event is None else f"event {sighting.event} "
                yield side, event + sighting.path, ""
        for number, sighting in exchange.message_ids(side):
            if sighting.value == tool_id or (by_raw and sighting.raw == raw):
                yield side, _in_message(number) + sighting.path, ""


def _in_message(number: int | None) -> str:
    return "" if number is None else f"message {number} "
