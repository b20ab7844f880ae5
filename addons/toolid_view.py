"""The ``toolid`` contentview: request and response bodies (JSON, SSE) and the messages of a
Responses WebSocket with every tool-call id annotated (``toolid.annotate``), and what toolid
recorded for the flow (or the message) on top.

Part of the mitmproxy glue (``toolid_addon.py`` registers it); imported from this folder, as
mitmproxy puts a script's own folder on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mitmproxy import contentviews, ctx, http, websocket

from toolid import Profile, annotate, apis_framed_as, report
from toolid.trace import api_of

_SOCKET_APIS = apis_framed_as("websocket")  # a WebSocket message of theirs is a document


VIEW_PRIORITY = 2.0  # above mitmproxy's JSON view (1): offered first for LLM API flows
_PRIORITY_SCAN_LIMIT = 4 * 1024 * 1024  # larger bodies of unrecognised paths are not parsed


class ToolIdView(contentviews.Contentview):
    """Request and response bodies (JSON, SSE) with every tool-call id annotated."""

    @property
    def name(self) -> str:
        return "toolid"

    @property
    def syntax_highlight(self) -> contentviews.SyntaxHighlight:
        return "yaml"  # JSON is YAML; the annotations are YAML comments

    def prettify(self, data: bytes, metadata: contentviews.Metadata) -> str:
        if (found := _websocket_message(metadata)) is not None:
            return _prettify_message(data, *found)
        side, flow = _side_and_flow(metadata)
        if side is None:
            raise ValueError("not an HTTP body")
        api = api_of(flow) if flow else None
        kind = annotate.body_kind(data, metadata.content_type)
        record = flow.metadata.get("toolid") if flow else None
        marks: dict[str, str] = {}
        if side == "request" and isinstance(record, dict):
            marks = repair_marks(record) if _repaired(record) else pairing_marks(record)
        text = annotate.annotate(data, side, api, kind=kind, profile=_profile(), marks=marks)
        notes = _flow_notes(flow, side) if flow else []
        return "\n".join([*notes, text])

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        if (found := _websocket_message(metadata)) is not None:
            return _message_priority(data, *found)
        side, flow = _side_and_flow(metadata)
        if side is None or not data:
            return -1
        kind = annotate.body_kind(data, metadata.content_type)
        if kind is None:
            return -1
        if flow is not None and (api_of(flow) is not None or _flow_notes(flow, side)):
            return VIEW_PRIORITY
        if len(data) <= _PRIORITY_SCAN_LIMIT and annotate.sightings(data, side, kind=kind):
            return VIEW_PRIORITY
        return 0


def _side_and_flow(
    metadata: contentviews.Metadata,
) -> tuple[annotate.Side | None, http.HTTPFlow | None]:
    message = metadata.http_message
    flow = metadata.flow if isinstance(metadata.flow, http.HTTPFlow) else None
    if isinstance(message, http.Request):
        return "request", flow
    if isinstance(message, http.Response):
        return "response", flow
    return None, None


# --- WebSocket messages (the Responses API over WebSocket) ---------------------------------


def _websocket_message(
    metadata: contentviews.Metadata,
) -> tuple[websocket.WebSocketMessage, http.HTTPFlow] | None:
    message = metadata.websocket_message
    if message is None or not isinstance(metadata.flow, http.HTTPFlow):
        return None
    return message, metadata.flow


def _prettify_message(data: bytes, message: websocket.WebSocketMessage, flow: http.HTTPFlow) -> str:
    if not message.is_text:
        raise ValueError("a binary WebSocket message")
    text = annotate.annotate_message(data, message.from_client, api_of(flow), profile=_profile())
    return "\n".join([*_message_notes(flow, message), text])


def _message_priority(
    data: bytes, message: websocket.WebSocketMessage, flow: http.HTTPFlow
) -> float:
    if not message.is_text or annotate.body_kind(data) != "json":
        return -1
    if api_of(flow) in _SOCKET_APIS:
        return VIEW_PRIORITY
    if len(data) <= _PRIORITY_SCAN_LIMIT and annotate.message_sightings(data, message.from_client):
        return VIEW_PRIORITY
    return 0


def _message_notes(flow: http.HTTPFlow, message: websocket.WebSocketMessage) -> list[str]:
    """What toolid recorded for this WebSocket message (its records carry its number)."""
    record = flow.metadata.get("toolid")
    if not isinstance(record, dict) or flow.websocket is None:
        return []
    number = next((n for n, m in enumerate(flow.websocket.messages, 1) if m is message), None)
    side = "request" if message.from_client else "response"
    changes = [c for c in record.get(side, ()) if c.get("message") == number]
    if not changes:
        return []
    observe = bool(record.get("observe"))
    label = "toolid (observe)" if observe else "toolid"
    return [f"# {label} on this message: {report.summary(changes, observe=observe)}"]


def _flow_notes(flow: http.HTTPFlow, side: annotate.Side) -> list[str]:
    """What toolid recorded for this side of the flow, as comment lines."""
    record = flow.metadata.get("toolid")
    if not isinstance(record, dict):
        return []
    notes = []
    if changes := record.get(side):
        observe = bool(record.get("observe"))
        label = "toolid (observe)" if observe else "toolid"
        notes.append(f"# {label} on this {side}: {report.summary(changes, observe=observe)}")
    notes.extend(f"# toolid problem: {problem}" for problem in record.get("problems", ()))
    lines = pairing_lines(record)
    if lines and side == "response":
        notes.append("# toolid: the request's history has pairing problems (see the request):")
    notes.extend(f"# toolid pairing: {line}" for line in lines)
    if side == "request":
        verb = "would repair" if record.get("observe") else "repaired"
        notes.extend(f"# toolid {verb}: {line}" for line in repair_lines(record))
    return notes


def pairing_lines(record: Mapping[str, Any]) -> list[str]:
    """The lines naming the pairing problems toolid recorded for a flow's request."""
    problems = record.get("pairing")
    if not isinstance(problems, list):
        return []
    return [
        str(problem["line"])
        for problem in problems
        if isinstance(problem, dict) and isinstance(problem.get("line"), str)
    ]


def repair_lines(record: Mapping[str, Any]) -> list[str]:
    """The lines naming the repairs toolid made (or, observing, would make) to a flow's
    request (``toolid_repair``)."""
    repairs = record.get("repairs")
    if not isinstance(repairs, list):
        return []
    return [
        f"{repair.get('code')} {report.show(str(repair.get('id')))} at {repair.get('path')}: "
        f"{repair.get('done')} {repair.get('detail')}"
        for repair in repairs
        if isinstance(repair, dict)
    ]


def _repaired(record: Mapping[str, Any]) -> bool:
    """Whether the request on the wire is the repaired one (its paths are no longer the
    problems')."""
    return bool(record.get("repairs")) and not record.get("observe")


def repair_marks(record: Mapping[str, Any]) -> dict[str, str]:
    """Path -> note for what the repairs of a flow's request put in, moved or renamed (paths
    of the repaired request, as sent)."""
    marks: dict[str, list[str]] = {}
    for repair in record.get("repairs") or ():
        if isinstance(repair, dict) and isinstance(repair.get("at"), str) and repair["at"]:
            marks.setdefault(repair["at"], []).append(f"{repair.get('code')} {repair.get('done')}")
    return {path: f"✎ repaired: {'; '.join(done)}" for path, done in marks.items()}


def pairing_marks(record: Mapping[str, Any]) -> dict[str, str]:
    """Path -> note for the positions of the recorded pairing problems (request bodies)."""
    marks: dict[str, list[str]] = {}
    for problem in record.get("pairing") or ():
        if isinstance(problem, dict) and isinstance(problem.get("path"), str):
            marks.setdefault(problem["path"], []).append(str(problem.get("code")))
    return {path: f"⚠ {', '.join(codes)}" for path, codes in marks.items()}


def _profile() -> Profile:
    try:
        profile = ctx.options.toolid_profile
    except AttributeError:  # no master, or the option is not loaded
        return "safe"
    return "call" if profile == "call" else "safe"
