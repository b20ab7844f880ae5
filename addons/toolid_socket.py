"""The Responses API over WebSocket (Codex), for the addon's WebSocket hooks.

Each text message is one Responses document: a client's is a request (restore), a server's one
streaming event (encode), through ``toolid.ResponsesConnection``, which holds what the
connection takes for occurrence tags (docs/wire-format.md). Other messages, and the
WebSockets of other paths, pass as they are. Every step fails open: the message as it came,
one warning, the flow marked.

Part of the mitmproxy glue (``toolid_addon.py`` owns one ``ResponsesSockets``); imported from
this folder, as mitmproxy puts a script's own folder on ``sys.path``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from mitmproxy import http, websocket
from toolid_records import FlowRecords, describe, where

import toolid
from toolid import Change, Profile, Rewritten, RuleSet, api_from_path, apis_framed_as, report

#: The APIs spoken over WebSocket (the Responses API).
SOCKET_APIS = apis_framed_as("websocket")

logger = logging.getLogger(__name__)


class ResponsesSockets:
    """The open Responses WebSockets: each one's connection state, gone when it closes."""

    def __init__(self, records: FlowRecords) -> None:
        self.records = records
        self.repair = False  # toolid_repair: a client message's history repaired first
        self._sockets: weakref.WeakKeyDictionary[http.HTTPFlow, _Socket] = (
            weakref.WeakKeyDictionary()
        )

    def __contains__(self, flow: object) -> bool:
        """Whether the flow's WebSocket is one toolid holds state for (open, Responses)."""
        return isinstance(flow, http.HTTPFlow) and flow in self._sockets

    def refuse(self, flow: http.HTTPFlow) -> None:
        """Answer an upgrade of a Responses route with 426 (the client falls back to HTTP)."""
        try:
            if _responses_upgrade(flow.request):
                flow.response = http.Response.make(
                    426,
                    b"toolid: the Responses API over WebSocket is refused here; use HTTP\n",
                    {"content-type": "text/plain"},
                )
                self.records.of(flow)["websocket"] = {"refused": True}
                flow.comment = "toolid: WebSocket upgrade refused (426, toolid_websocket=refuse)"
                logger.info(f"{flow.comment} [{describe(flow)}]")
        except Exception as exc:
            self.records.problem(flow, f"WebSocket upgrade passed: unexpected error {exc!r}")

    def start(
        self,
        flow: http.HTTPFlow,
        rules_for: Callable[[http.HTTPFlow], RuleSet | None],
        profile: Profile,
    ) -> None:
        """A WebSocket opened: hold a connection for it if it is the Responses API's, with the
        id rules ``rules_for`` gives its upstream."""
        try:
            api = api_from_path(flow.request.path)
            if api not in SOCKET_APIS:
                return
            connection = toolid.ResponsesConnection(rules=rules_for(flow), profile=profile)
            self._sockets[flow] = _Socket(connection)
            record = self.records.of(flow)
            record["api"] = api.value
            record["websocket"] = {"messages": 0, "responses": 0}
        except Exception as exc:
            self.records.problem(flow, f"WebSocket passed unchanged: unexpected error {exc!r}")

    def message(self, flow: http.HTTPFlow) -> None:
        """Rewrite the flow's newest message (a text message of a held connection)."""
        socket = self._sockets.get(flow)
        if socket is None or flow.websocket is None or not flow.websocket.messages:
            return
        message = flow.websocket.messages[-1]
        if not message.is_text or message.dropped or message.injected:
            return
        number = len(flow.websocket.messages)
        try:
            self._rewrite(flow, socket, message, number)
        except Exception as exc:
            self.records.problem(flow, f"message {number} left unchanged: unexpected error {exc!r}")

    def end(self, flow: http.HTTPFlow) -> None:
        """The WebSocket closed: its last response's log line, its state let go."""
        socket = self._sockets.pop(flow, None)
        if socket is None:
            return
        try:
            self._end_response(flow, socket)
        except Exception as exc:
            self.records.problem(flow, f"WebSocket records incomplete: unexpected error {exc!r}")

    def _rewrite(
        self, flow: http.HTTPFlow, socket: _Socket, message: websocket.WebSocketMessage, number: int
    ) -> None:
        connection, records = socket.connection, self.records
        content = message.content
        result: Rewritten
        if message.from_client:
            side = "request"
            if self.repair:
                content = self._repaired(flow, content, number)
            result = connection.client_message(content)
            if content is not message.content and not records.observe:
                message.content = content  # repaired, whatever restoring changes
        else:
            side = "response"
            result = connection.server_message(content)
        for problem in result.problems:
            records.problem(flow, f"message {number}: {problem.line()}")
        stats = records.of(flow).setdefault("websocket", {})
        stats["messages"] = stats.get("messages", 0) + 1
        stats["responses"] = connection.responses
        if result.changes:
            for change in records.note(flow, side, result.changes):
                change["message"] = number  # each record says which message it is
            socket.note(result.changes, records.max_records)
            if not records.observe and result.changed:
                message.content = result.body
        if not message.from_client and connection.ended:
            self._end_response(flow, socket)

    def _repaired(self, flow: http.HTTPFlow, content: bytes, number: int) -> bytes:
        """A client message with its history's pairing repaired (``toolid_repair``), recorded
        with the message's number and logged (``FlowRecords.repaired``); as it came when there
        is nothing to repair, or observing."""
        if not toolid.check_pairing(content, api=toolid.Api.RESPONSES):  # the usual: one read
            return content
        fixed = toolid.repair_request(content, api=toolid.Api.RESPONSES)
        repaired = self.records.repaired(flow, fixed, number)
        if fixed.repairs:  # made, or observing: named in the comment
            self.records.comment(flow)
        return content if repaired is None else repaired

    def _end_response(self, flow: http.HTTPFlow, socket: _Socket) -> None:
        """A response on the connection ended (or the connection did): its log line, and the
        flow's comment brought up to date."""
        pending, omitted = socket.pending, socket.omitted
        if not pending:
            return
        socket.pending, socket.omitted = [], 0
        observe = self.records.observe
        self.records.comment(flow)
        summary = report.summary(pending, observe)
        if omitted:
            summary += f" (+{omitted} more)"
        label = "toolid (observe)" if observe else "toolid"
        detail = f"WebSocket response {socket.connection.responses}"
        self.records.log_change(f"{label}: {summary}", where(flow), detail)


class _Socket:
    """What toolid holds for one open Responses WebSocket."""

    __slots__ = ("connection", "omitted", "pending")

    def __init__(self, connection: toolid.ResponsesConnection) -> None:
        self.connection = connection
        # The current response's records, for its log line (at most max_records, then counted)
        self.pending: list[dict[str, Any]] = []
        self.omitted = 0

    def note(self, changes: Sequence[Change], max_records: int) -> None:
        room = max(0, max_records - len(self.pending))
        self.pending.extend(report.as_records(changes[:room]))
        self.omitted += max(0, len(changes) - room)


def _responses_upgrade(request: http.Request) -> bool:
    """Whether a request asks to upgrade a Responses route to WebSocket."""
    return (
        request.headers.get("upgrade", "").lower() == "websocket"
        and api_from_path(request.path) in SOCKET_APIS
    )
