"""``toolid inspect``: every tool-call id in a capture, with where it is and whether it conforms.

Reads one JSON body, an SSE capture, a JSONL transcript (one JSON value per line), a HAR
file or a mitmproxy flow file (read with mitmproxy, imported only for that format), and
returns ``Row``s: where (line, event, HAR entry or flow, plus the JSON path), the id as
seen, its raw form, and whether each profile's clients accept it. Bodies and events of a
known API are searched at the table's positions; anything else (transcript lines, saved
conversations) with ``annotate.deep_ids``.

Nothing here prints: ``run`` takes the streams, so the CLI stays a thin wrapper.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Final, Literal, TextIO, get_args
from urllib.parse import urlsplit

from toolid import annotate, codec, jsonparse, pairing
from toolid.annotate import Side, Sighting
from toolid.apis import api_from_path, api_from_shape
from toolid.apis.record import lacking_code
from toolid.occurrence import CallIds, Taken
from toolid.pairing import Element
from toolid.positions import (
    CALLS_BY_MENTION,
    DEFINES,
    LACKS,
    Api,
    Doc,
    find_ids,
    history_members,
    path_order,
    value_at,
)
from toolid.problem import Problem, show
from toolid.repair import Repaired, repair_request
from toolid.trace import Exchange, exchange_of
from toolid.value_spans import element_spans

Format = Literal["json", "jsonl", "sse", "har", "flows"]
FORMATS: Final[tuple[Format, ...]] = get_args(Format)

EXIT_OK: Final = 0
EXIT_NON_CONFORMING: Final = 1
EXIT_UNREADABLE: Final = 2

_BOM: Final = b"\xef\xbb\xbf"
_TNETSTRING: Final = re.compile(rb"[0-9]+:")


class InspectError(Exception):
    """The input cannot be read as asked; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Row:
    """One tool-call id found in the input."""

    where: str  # "line 3", "entry 2 POST /v1/messages request", "flow 1 ... event 4 (...)"
    sighting: Sighting
    conversation: int = 0  # rows of one conversation (a file, a HAR entry, a flow) share it
    document: int = 0  # rows of one document (a body, a line, an event stream) share it
    pairing: tuple[Problem, ...] = ()  # its history's orphan-result and missing-result here


@dataclass(frozen=True, slots=True)
class Assessed:
    """A row with what toolid makes of it in its conversation."""

    row: Row
    client: str  # the client id toolid gives it (the id itself when it is one already)
    defined: int  # for a definition: how many calls of its conversation define this id (as seen)
    problems: tuple[Problem, ...] = ()  # its pairing problems (``toolid.pairing``)


# --- reading ---------------------------------------------------------------------------------


def detect(data: bytes) -> Format:
    """The format of ``data``, from its first bytes (and a JSON parse where needed)."""
    body = data.removeprefix(_BOM)
    stripped = body.lstrip()
    if not stripped:
        raise InspectError("the input is empty")
    if _TNETSTRING.match(body):
        return "flows"
    if stripped[:1] in (b"{", b"["):
        try:
            document = json.loads(body)
        except RecursionError:
            raise InspectError("JSON nested too deeply") from None
        except ValueError as exc:
            first = stripped.split(b"\n", 1)[0]
            if b"\n" in stripped.strip() and _parses(first):
                return "jsonl"
            raise InspectError(f"not valid JSON ({_first_line(exc)})") from None
        return "har" if _is_har(document) else "json"
    if annotate.body_kind(stripped) == "sse":
        return "sse"
    raise InspectError(
        "cannot tell the format (not JSON, JSONL, an event stream, HAR or a mitmproxy "
        "flow file); name it with --format"
    )


def scan(data: bytes, fmt: Format) -> list[Row]:
    """Every tool-call id in ``data`` read as ``fmt``; raises InspectError when it cannot be."""
    readers = {
        "json": _scan_json,
        "jsonl": _scan_jsonl,
        "sse": _scan_sse,
        "har": _scan_har,
        "flows": _scan_flows,
    }
    return list(readers[fmt](data))


def _scan_json(data: bytes) -> Iterator[Row]:
    document = _parse(data.removeprefix(_BOM), "not valid JSON")
    if annotate.element_stream(document):  # a JSON-array stream (Gemini): its events
        for sighting in annotate.sightings(data.removeprefix(_BOM), "response", kind="json"):
            yield Row(_event_label(sighting), sighting)
        return
    if annotate.is_answer(document):  # a saved response: its calls lacking an id too
        found = annotate.sightings(data.removeprefix(_BOM), "response", kind="json")
    else:
        found = annotate.deep_ids(document)
    rows = [Row("body", sighting) for sighting in found]
    if isinstance(document, list):  # a saved conversation: its elements, as a transcript's lines
        lines = [(i, element, annotate.deep_ids(element)) for i, element in enumerate(document)]
        problems = {
            f"[{i}]" + ("" if path.startswith("[") else ".") + path: found
            for (i, path), found in _transcript_problems(lines).items()
        }
    else:
        problems = _document_problems(document)
    yield from _with_pairing(rows, problems)


def _scan_jsonl(data: bytes) -> Iterator[Row]:
    rows: list[Row] = []
    lines: list[tuple[int, Any, list[Sighting]]] = []
    whole: dict[tuple[int, str], list[Problem]] = {}
    for number, line in enumerate(data.removeprefix(_BOM).splitlines(), 1):
        if not line.strip():
            continue
        document = _parse(line, f"line {number}: not valid JSON")
        found = annotate.deep_ids(document)
        rows.extend(Row(f"line {number}", sighting, document=number) for sighting in found)
        if _history_api(document) is not None:  # a whole request: its own history
            for path, problems in _document_problems(document).items():
                whole[(number, path)] = problems
        else:
            lines.append((number, document, found))
    whole.update(_transcript_problems(lines))
    for row in rows:
        yield replace(row, pairing=tuple(whole.get((row.document, row.sighting.path), ())))


def _scan_sse(data: bytes) -> Iterator[Row]:
    if not any(
        event.data is not None or event.name is not None for event in annotate.split_events(data)
    ):
        raise InspectError("no server-sent events (data: or event: lines) in the input")
    for sighting in annotate.sightings(data, None, kind="sse"):
        yield Row(_event_label(sighting), sighting)


def _scan_har(data: bytes) -> Iterator[Row]:
    document = _parse(data.removeprefix(_BOM), "not valid JSON")
    if not _is_har(document):
        raise InspectError("not a HAR file (no log.entries list)")
    for number, entry in enumerate(document["log"]["entries"], 1):
        if not isinstance(entry, dict):
            raise InspectError(f"entry {number} is not an object")
        request = _member(entry, "request", dict, number) or {}
        response = _member(entry, "response", dict, number) or {}
        method = _member(request, "method", str, number) or "?"
        url = _member(request, "url", str, number) or ""
        path = urlsplit(url).path or "/"
        label = f"entry {number} {method} {path}"
        api = api_from_path(path)
        post = _member(request, "postData", dict, number) or {}
        text = _member(post, "text", str, number)
        if text:
            content_type = _member(post, "mimeType", str, number)
            yield from _body_rows(_utf8(text), "request", api, content_type, (label, number))
        content = _member(response, "content", dict, number) or {}
        text = _member(content, "text", str, number)
        if text:
            body = _utf8(text)
            if content.get("encoding") == "base64":
                try:
                    body = base64.b64decode(text, validate=True)
                except (binascii.Error, ValueError):
                    raise InspectError(
                        f"entry {number}: response content.text is not valid base64"
                    ) from None
            content_type = _member(content, "mimeType", str, number)
            yield from _body_rows(body, "response", api, content_type, (label, number))


def _scan_flows(data: bytes) -> Iterator[Row]:
    try:  # only this format needs mitmproxy (the proxy extra)
        from mitmproxy import exceptions, http  # noqa: PLC0415
        from mitmproxy.io import FlowReader  # noqa: PLC0415
    except ImportError:
        raise InspectError(
            "reading a mitmproxy flow file needs mitmproxy: pip install 'toolid[proxy]', or "
            "run toolid inspect where mitmproxy is installed"
        ) from None
    try:
        flows = list(FlowReader(io.BytesIO(data)).stream())
    except exceptions.FlowReadException as exc:
        raise InspectError(f"not a readable mitmproxy flow file ({_first_line(exc)})") from None
    except Exception as exc:  # migrating or rebuilding an odd flow can raise anything
        raise InspectError(f"not a readable mitmproxy flow file ({exc!r})") from None
    for number, flow in enumerate(flows, 1):
        if isinstance(flow, http.HTTPFlow):
            exchange = exchange_of(flow)
            yield from _exchange_rows(exchange, number)
            yield from _message_rows(exchange, number)


def _exchange_rows(exchange: Exchange, number: int) -> Iterator[Row]:
    """The rows of each side of a captured exchange: its stored body's ids, else (a streamed
    body is not stored) what toolid's records say of them."""
    label = f"flow {number} {exchange.method} {exchange.path}"
    for side in ("request", "response"):
        document = 2 * number + (side == "response")
        found = exchange.body_ids(side)
        if found is not None:
            content = exchange.bodies.get(side, (None, None))[0] if side == "request" else None
            problems = _body_problems(content, exchange.api) if content else {}
            for sighting in found:
                event = _event_label(sighting)
                where = f"{label} {side}" + (f" {event}" if event else "")
                pairs = tuple(problems.get(sighting.path, ()))
                yield Row(where, sighting, conversation=number, document=document, pairing=pairs)
        elif exchange.api is not None:
            for change in exchange.recorded(side):
                yield Row(
                    f"{label} {side} (toolid record; body not stored)",
                    Sighting(change.seen, change.path, exchange.api),
                    conversation=number,
                    document=document,
                )


def _message_rows(exchange: Exchange, number: int) -> Iterator[Row]:
    """The rows of a WebSocket's messages (the Responses API over WebSocket): each client
    message is a request document; the server messages of one response (from its
    ``response.created``, or after a client message) are read as one event stream, so a call
    mentioned by several events counts once."""
    label = f"flow {number} {exchange.method} {exchange.path}"
    document = 2 * number + 1
    for index, (from_client, content) in enumerate(exchange.messages, 1):
        if content is None:
            continue
        if from_client or _RESPONSE_CREATED.search(content):
            document += 1
        found = annotate.message_sightings(content, from_client, exchange.api, deep=True)
        for sighting in found:
            origin = "client" if from_client else "server"
            event = None if from_client else index
            yield Row(
                f"{label} message {index} ({origin})",
                replace(sighting, event=event),
                conversation=number,
                document=document,
            )
        if from_client:
            document += 1  # the response to it comes next


_RESPONSE_CREATED: Final = re.compile(rb'"type"\s*:\s*"response\.created"')

type _Entry = tuple[str, int]  # a HAR entry's label and number


# --- pairing ---------------------------------------------------------------------------------

# What a history tells that no single id does; the other codes are the ids' own (``assess``).
_HISTORY_CODES: Final = frozenset({pairing.ORPHAN, pairing.MISSING})


def _history_api(document: Any, api: Api | None = None) -> Api | None:
    """The API of a request document with a history (``api`` if given), None: not one."""
    api = api or api_from_shape(document, Doc.REQUEST)
    if api is None or not isinstance(document, dict):
        return None
    member, _ = pairing.history_of(document, api)
    return api if member else None


def _document_problems(document: Any, api: Api | None = None) -> dict[str, list[Problem]]:
    """The orphan results and missing results of one request document, by path."""
    api = _history_api(document, api)
    problems: dict[str, list[Problem]] = {}
    for problem in pairing.check(document, api) if api is not None else ():
        if problem.code in _HISTORY_CODES:
            problems.setdefault(problem.path, []).append(problem)
    return problems


def _body_problems(body: bytes, api: Api | None) -> dict[str, list[Problem]]:
    """``_document_problems`` of a request body, if it is JSON."""
    if annotate.body_kind(body) != "json":
        return {}
    try:
        document = json.loads(body.removeprefix(_BOM))
    except (ValueError, RecursionError):
        return {}
    return _document_problems(document, api)


def _with_pairing(rows: Iterable[Row], problems: Mapping[str, list[Problem]]) -> Iterator[Row]:
    for row in rows:
        found = problems.get(row.sighting.path)
        yield replace(row, pairing=tuple(found)) if found else row


type _Line = tuple[int, Any, Sequence[Sighting]]  # a transcript line: its key, document, ids


def _transcript_problems(lines: Sequence[_Line]) -> dict[tuple[int, str], list[Problem]]:
    """The orphan results and missing results of a transcript, by line key and path: its
    lines' history elements in order, one history per API (with the lines that hold no id
    but a role, a user's message say, in each)."""
    entries: list[tuple[int, Api | None, pairing.Element]] = []
    for key, document, found in lines:
        entries.extend((key, api, element) for api, element in _line_elements(document, found))
    problems: dict[tuple[int, str], list[Problem]] = {}
    for api in Api:
        history = [(key, element) for key, of, element in entries if of in (api, None)]
        if not any(of is api for _, of, _ in entries):
            continue
        for number, problem in pairing.located([element for _, element in history], api):
            if problem.code in _HISTORY_CODES:
                problems.setdefault((history[number][0], problem.path), []).append(problem)
    return problems


def _line_elements(document: Any, found: Sequence[Sighting]) -> list[tuple[Api | None, Element]]:
    """The history elements of one transcript line: the objects its ids sit in (a message,
    an item), each with its ids as the table finds them there, at the line's own paths; a
    line without ids, its object with a role."""
    places = dict.fromkeys((s.api, pairing.element_path(s.api, s.path)) for s in found)
    elements: list[tuple[Api | None, Element]] = []
    for api, path in places:
        element = value_at(document, path)
        if not isinstance(element, dict):
            continue
        member = history_members(api)[0]
        ids = sorted(
            (
                one._replace(path=_join(path, one.path[len(member) + 3 :]))  # drop "member[0]"
                for one in find_ids({member: [element]}, api, Doc.REQUEST)
            ),
            key=lambda one: path_order(one.path),
        )
        elements.append((api, Element(pairing.kind_of(element), ids)))
    if not elements and isinstance(document, dict):
        for candidate in (document, *document.values()):
            if isinstance(candidate, dict) and isinstance(candidate.get("role"), str):
                elements.append((None, Element(candidate["role"])))
                break
    return elements


def _join(path: str, rest: str) -> str:
    """``rest`` (``.a[0].b`` or ``[0].b``) after ``path``."""
    return path + rest if path else rest.removeprefix(".")


def _body_rows(
    body: bytes, side: Side, api: Api | None, content_type: str | None, entry: _Entry
) -> Iterator[Row]:
    label, number = entry
    kind = annotate.body_kind(body, content_type)
    document = 2 * number + (side == "response")
    problems = _body_problems(body, api) if side == "request" and kind == "json" else {}
    for sighting in annotate.sightings(body, side, api, kind=kind, deep=True):
        event = _event_label(sighting)
        where = f"{label} {side}" + (f" {event}" if event else "")
        pairs = tuple(problems.get(sighting.path, ()))
        yield Row(where, sighting, conversation=number, document=document, pairing=pairs)


def _event_label(sighting: Sighting) -> str:
    if sighting.event is None:
        return ""
    name = f" ({sighting.event_name})" if sighting.event_name is not None else ""
    return f"event {sighting.event}{name}"


def _is_har(document: Any) -> bool:
    log = document.get("log") if isinstance(document, dict) else None
    return isinstance(log, dict) and isinstance(log.get("entries"), list)


def _member(node: Mapping[str, Any], key: str, kind: type[Any], entry: int) -> Any:
    value = node.get(key)
    if value is not None and not isinstance(value, kind):
        raise InspectError(f"entry {entry}: {key} is not {_KIND_NAMES[kind]}")
    return value


_KIND_NAMES: Final[dict[type[Any], str]] = {dict: "an object", str: "a string"}


def _parse(data: bytes, problem: str) -> Any:
    try:
        return json.loads(data)
    except RecursionError:
        raise InspectError(f"{problem} (nested too deeply)") from None
    except ValueError as exc:
        raise InspectError(f"{problem} ({_first_line(exc)})") from None


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


# --- what toolid makes of the ids -----------------------------------------------------------


def assess(rows: list[Row], profile: codec.Profile = "safe") -> list[Assessed]:
    """Each row with the client id toolid gives it and how often its conversation defines
    it (as seen). Calls are taken in document order: the first call with a raw id gets it
    encoded, later ones occurrence tags; an id that is already a client id stays itself."""
    clients: dict[int, str] = {}
    defined: dict[int, int] = {}
    duplicates: set[int] = set()
    conversations: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        conversations.setdefault(row.conversation, []).append(index)
    for indices in conversations.values():
        units: dict[int, tuple[int, ...]] = {i: _call_of(rows[i], i) for i in indices}
        defining: dict[str, set[tuple[int, ...]]] = {}
        for i in indices:
            if rows[i].sighting.role is DEFINES:
                defining.setdefault(rows[i].sighting.value, set()).add(units[i])
        taken = Taken.of(rows[i].sighting.value for i in indices if rows[i].sighting.encoded)
        calls = CallIds(profile, taken)
        first_call: dict[tuple[Api, str, str], tuple[int, ...]] = {}  # for duplicate-call
        for i in sorted(indices, key=lambda i: _reading_order(rows[i])):
            sighting = rows[i].sighting
            defines = sighting.role is DEFINES
            defined[i] = len(defining[sighting.value]) if defines else 0
            if defines and sighting.value:
                pair = (sighting.api, sighting.kind, pairing.key_of(sighting.value))
                if first_call.setdefault(pair, units[i]) != units[i]:
                    duplicates.add(i)
            key = sighting.path.rsplit(".", 1)[-1]  # the member holding the id
            if sighting.role is LACKS:
                clients[i] = calls.lacking(units[i], key, sighting.value)
            elif sighting.encoded:
                clients[i] = sighting.value
            elif defines:
                clients[i] = calls.defined(units[i], key, sighting.value)
            else:
                clients[i] = calls.refer(units[i], sighting.value)
    return [
        Assessed(row, clients[i], defined[i], _problems(row, i in duplicates))
        for i, row in enumerate(rows)
    ]


def _problems(row: Row, duplicate: bool) -> tuple[Problem, ...]:
    """A row's pairing problems: its history's (``Row.pairing``), then its id's own."""
    sighting = row.sighting
    if sighting.role is LACKS:
        codes = [lacking_code(sighting.value)]
    else:
        codes = [*pairing.id_codes(sighting.value), *([pairing.DUPLICATE] if duplicate else [])]
    own = (
        pairing.problem_at(
            code,
            sighting.api,
            sighting.path,
            sighting.value,
            kind=sighting.kind,
            holder_type=sighting.holder_type,
        )
        for code in codes
    )
    return tuple(sorted([*row.pairing, *own], key=lambda one: pairing.CODES.index(one.code)))


def _reading_order(row: Row) -> tuple[object, ...]:
    """Document, event, then the path in document order."""
    return (row.document, row.sighting.event or 0, path_order(row.sighting.path))


def _call_of(row: Row, index: int) -> tuple[int, ...]:
    """Which call a row belongs to: in an event stream its call number (one call, many
    events; in the APIs of ``CALLS_BY_MENTION`` each definition is a call of its own);
    elsewhere the object holding it (its own row number will do)."""
    if row.sighting.event is not None and row.sighting.api not in CALLS_BY_MENTION:
        return (row.document, -1, *row.sighting.call)
    return (row.document, index)


# --- reporting -------------------------------------------------------------------------------

_HEADINGS: Final = (
    "WHERE", "PATH", "API", "ID", "RAW", "CLIENT", "SAFE", "CALL", "REUSED", "PROBLEMS"
)  # fmt: skip


def table(assessed: list[Assessed]) -> list[str]:
    """The rows as aligned text columns, headings first."""
    cells = [_cells(item) for item in assessed]
    widths = [max(len(cell) for cell in column) for column in zip(_HEADINGS, *cells, strict=False)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (_HEADINGS, *cells)
    ]


def _cells(item: Assessed) -> tuple[str, ...]:
    sighting = item.row.sighting
    lacks = sighting.role is LACKS
    return (
        item.row.where,
        sighting.path,
        sighting.api.value,
        sighting.shown,
        sighting.shown if lacks else show(sighting.raw),
        show(item.client),
        _yes(not lacks and codec.has_shape(sighting.value, "safe")),
        _yes(not lacks and codec.has_shape(sighting.value, "call")),
        _reused(item),
        ",".join(problem.code for problem in item.problems),
    )


def as_json(assessed: list[Assessed]) -> list[dict[str, Any]]:
    """One object per id position, for ``--json``."""
    return [
        {
            "where": item.row.where,
            "path": item.row.sighting.path,
            "api": item.row.sighting.api.value,
            "role": item.row.sighting.role.value,
            "id": item.row.sighting.value,
            "raw": item.row.sighting.raw,
            "client": item.client,
            "safe": codec.has_shape(item.row.sighting.value, "safe"),
            "call": codec.has_shape(item.row.sighting.value, "call"),
            "defined": item.defined,
            "problems": [problem.code for problem in item.problems],
        }
        for item in assessed
    ]


def _reused(item: Assessed) -> str:
    return f"{item.defined}x" if item.defined > 1 else ""


def summary(assessed: list[Assessed]) -> str:
    """One line: how many ids, how many a strict API would reject, and why."""
    if not assessed:
        return "no tool-call ids found"
    distinct = len({item.row.sighting.raw for item in assessed})
    bad = sum(not item.row.sighting.strict_ok for item in assessed)
    reused = {item.row.sighting.value for item in assessed if item.defined > 1}
    line = (
        f"{len(assessed)} tool-call id position{'s' if len(assessed) != 1 else ''}, "
        f"{distinct} distinct id{'s' if distinct != 1 else ''}"
    )
    problems = []
    if bad:
        problems.append(f"{bad} not {annotate.STRICT_RULE}")
    if reused:
        problems.append(
            f"{len(reused)} defined by more than one call of a conversation "
            f"({', '.join(show(value) for value in sorted(reused)[:3])}"
            f"{', ...' if len(reused) > 3 else ''}; toolid gives later calls occurrence tags)"
        )
    if problems:
        line += (
            f"; {' and '.join(problems)}: strict APIs (Anthropic, OpenAI Responses, Bedrock) "
            "would reject them"
        )
    else:
        line += f"; all match {annotate.STRICT_RULE}"
    return line


def pairing_summary(assessed: list[Assessed]) -> list[str]:
    """One line per pairing code present: how many, the first one, and what its API answers."""
    by_code: dict[str, list[tuple[Assessed, Problem]]] = {}
    for item in assessed:
        for problem in item.problems:
            by_code.setdefault(problem.code, []).append((item, problem))
    lines = []
    for code in pairing.CODES:
        found = by_code.get(code)
        if not found:
            continue
        item, first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        lines.append(
            f"{code}: {len(found)}, first {item.row.sighting.shown} at {item.row.where} "
            f"{item.row.sighting.path}{more}: {first.said()}"
        )
    return lines


def exit_code(assessed: list[Assessed]) -> int:
    """1 when some id would be rejected by a strict API (bad characters, or defined by more
    than one call of a conversation) or has a pairing problem, else 0."""
    rejected = any(
        not item.row.sighting.strict_ok or item.defined > 1 or item.problems for item in assessed
    )
    return EXIT_NON_CONFORMING if rejected else EXIT_OK


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# --- the command -----------------------------------------------------------------------------


def read_source(source: str, stdin: BinaryIO) -> bytes:
    """The bytes of ``source`` (a path, or ``-`` for ``stdin``)."""
    if source == "-":
        return stdin.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise InspectError(f"cannot read it ({exc.strerror or exc})") from None


def run(
    source: str,
    fmt: Format | None,
    *,
    stdin: BinaryIO,
    stdout: TextIO,
    stderr: TextIO,
    json_output: bool = False,
    repair: bool = False,
) -> int:
    """Inspect ``source``, print the table and a summary (or, with ``json_output``, a JSON
    array of one object per id); with ``repair``, each request in it repaired too
    (``repaired_lines``). Return the exit status (of ``source`` as it is)."""
    name = "stdin" if source == "-" else source
    try:
        data = read_source(source, stdin)
        fmt = fmt or detect(data)
        rows = scan(data, fmt)
        repaired = repaired_requests(data, fmt) if repair else []
    except InspectError as exc:
        stderr.write(f"toolid inspect: {name}: {_one_line(str(exc))}\n")
        return EXIT_UNREADABLE
    assessed = assess(rows)
    if json_output:
        # ASCII escapes: lone surrogates in crafted ids still make valid output
        ids = as_json(assessed)
        lines = [json.dumps({"ids": ids, "repaired": repaired} if repair else ids, indent=2)]
    else:
        lines = [*(table(assessed) if rows else []), summary(assessed), *pairing_summary(assessed)]
        lines += repaired_lines(repaired)
    encoding = getattr(stdout, "encoding", None) or "utf-8"
    for line in lines:
        stdout.write(line.encode(encoding, "backslashreplace").decode(encoding) + "\n")
    stdout.flush()
    return exit_code(assessed)


def repaired_requests(data: bytes, fmt: Format) -> list[dict[str, Any]]:
    """What ``toolid.repair`` makes of ``data``: a JSON request body, a JSONL file of them
    (each line repaired), or a transcript, a JSON array or JSONL file of messages (or items)
    of one API, repaired as one history. For each one repaired (or refused): where it is,
    its repairs, why it was not repaired, and the repaired text (a transcript's one message
    per line, or a JSON array)."""
    data = data.removeprefix(_BOM)
    if fmt == "json":
        document = _parse(data, "not valid JSON")
        if isinstance(document, list):
            spans = element_spans(data, "") or []
            return _repaired_transcript([data[start:end] for start, end in spans], "array")
        return _repaired_body("body", data)
    if fmt != "jsonl":
        raise InspectError("--repair reads a JSON body or transcript, or a JSONL file of them")
    lines = [(number, line) for number, line in enumerate(data.splitlines(), 1) if line.strip()]
    if all(_history_api(_parse(line, f"line {n}: not valid JSON")) for n, line in lines):
        return [one for n, line in lines for one in _repaired_body(f"line {n}", line)]
    return _repaired_transcript([line.strip() for _, line in lines], "lines")


def _repaired_body(where: str, content: bytes) -> list[dict[str, Any]]:
    fixed = repair_request(content)
    if not (fixed.repairs or fixed.refused):
        return []
    return [_entry(where, fixed, fixed.content.decode("utf-8", "replace"))]


def _repaired_transcript(
    elements: list[bytes], form: Literal["array", "lines"]
) -> list[dict[str, Any]]:
    """A transcript whose every element is a message (or item) of one API (the first whose
    positions find ids in it), repaired as that API's request history."""
    for api in Api:
        member = history_members(api)[0]
        content = b'{"' + member.encode() + b'":[' + b",".join(elements) + b"]}"
        if "." in member or not find_ids(jsonparse.loads(content), api, Doc.REQUEST):
            continue
        fixed = repair_request(content, api=api)
        if not (fixed.repairs or fixed.refused):
            return []
        spans = element_spans(fixed.content, member) or []
        new = [fixed.content[start:end].decode("utf-8", "replace") for start, end in spans]
        body = "\n".join(new) if form == "lines" else "[" + ",".join(new) + "]"
        return [_entry("transcript", fixed, body)]
    return []


def _entry(where: str, fixed: Repaired, body: str) -> dict[str, Any]:
    """What ``repaired_requests`` says of one request: where it is, its repairs, why it was
    not repaired ("" when it was) and its repaired ``body``."""
    refused = "" if fixed.refused is None else fixed.refused.line()
    repairs = [repair.record() for repair in fixed.repairs]
    return {"where": where, "repairs": repairs, "refused": refused, "body": body}


def repaired_lines(repaired: list[dict[str, Any]]) -> list[str]:
    """What ``repaired_requests`` found, for people: per request its repairs (or why it was not
    repaired) and the repaired body."""
    if not repaired:
        return []
    lines = []
    for one in repaired:
        if one["refused"]:
            lines.append(f"{one['where']}: not repaired: {one['refused']}")
            continue
        lines.append(f"{one['where']}: repaired:")
        lines.extend(
            f"  {r['code']} {show(r['id'])} at {r['path']}: {r['done']} {r['detail']}"
            for r in one["repairs"]
        )
        lines.append(one["body"])
    return lines


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "unreadable input"
