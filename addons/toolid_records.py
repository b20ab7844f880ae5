"""What toolid writes into flows and the log: the change records in each flow's
``metadata["toolid"]``, its mark and comment, one warning per flow with a problem, and the
change lines, logged together. Never headers, query strings or bodies.

Part of the mitmproxy glue (``toolid_addon.py`` owns one ``FlowRecords``); imported from this
folder, as mitmproxy puts a script's own folder on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from mitmproxy import http
from toolid_status import Metrics
from toolid_view import pairing_lines, repair_lines

from toolid import Change, Repaired, report

logger = logging.getLogger(__name__)

MARK_CHANGED = ":wrench:"
MARK_PROBLEM = ":warning:"
# A signed request (and its response), passed byte for byte on purpose: not a change, and not
# a problem of the flow, so neither of the marks above.
MARK_SIGNED = ":lock:"
# Change records kept per flow side (the rest counted): memory stays bounded on endless streams,
# and a long history's thousand restores cost one dict each (docs/performance.md); the
# contentview and toolid.trace still show every id.
MAX_RECORDS = 100
LOG_EVERY = 0.25  # seconds: change lines are logged together at most this often

type Where = tuple[bytes, str, bytes]  # a request's method, host and path, as mitmproxy has them


class FlowRecords:
    """The records, marks, comments and log lines of the flows toolid sees."""

    def __init__(self) -> None:
        self.observe = False  # toolid_mode=observe: records say what would change
        self.max_records = MAX_RECORDS  # per flow side
        self.metrics = Metrics()  # the counts /metrics serves (toolid_status)
        # Change lines waiting to be logged together (see log_change): comment and request.
        self._pending_lines: list[tuple[str, Where, str]] = []
        # What each flow's comment summarises (the number of records of each side): a comment
        # is rewritten only when there is more to say.
        self._summarised: weakref.WeakKeyDictionary[http.HTTPFlow, tuple[int, int, int, int]] = (
            weakref.WeakKeyDictionary()
        )

    def of(self, flow: http.HTTPFlow) -> dict[str, Any]:
        """The flow's ``metadata["toolid"]``, made if need be."""
        record: dict[str, Any] = flow.metadata.setdefault("toolid", {})
        record.setdefault("observe", self.observe)
        return record

    def note(
        self, flow: http.HTTPFlow, side: str, changes: Sequence[Change], why: str = ""
    ) -> list[dict[str, Any]]:
        """Record changes in the flow's metadata (at most ``max_records`` per side) and mark
        it, and count them (``metrics``); ``why``: why the rule set of the changes made under
        one applied. Returns the records made."""
        if not changes:
            return []
        self.metrics.count_ids(changes)
        record = self.of(flow)
        records = record.setdefault(side, [])
        room = max(0, self.max_records - len(records))
        new = report.as_records(changes if len(changes) <= room else changes[:room])
        if why:
            report.add_why(new, why)
        records.extend(new)
        if len(changes) > room:
            record[f"{side}_omitted"] = record.get(f"{side}_omitted", 0) + len(changes) - room
        if not flow.marked and any(change.action != "kept" for change in changes):
            flow.marked = MARK_CHANGED
        return new

    def problem(self, flow: http.HTTPFlow, message: str) -> None:
        """Record a problem of the flow and mark it; the flow's first is logged (WARNING)."""
        record = self.of(flow)
        problems = record.setdefault("problems", [])
        if not problems:
            logger.warning(f"toolid: {describe(flow)}: {message}")
        problems.append(message)
        flow.marked = MARK_PROBLEM

    def repaired(
        self, flow: http.HTTPFlow, repaired: Repaired, message: int | None = None
    ) -> bytes | None:
        """Record and log what repairing a request's pairing did (``toolid_repair``): each
        repair in ``metadata["toolid"]["repairs"]`` (with ``message``, a WebSocket message's
        number) and one line for them all; a refusal's reason in ``repair_refused`` and one
        warning. The repaired bytes, or None (none made, or observing)."""
        record = self.of(flow)
        at = describe(flow) + (f": message {message}" if message is not None else "")
        if repaired.refused is not None:
            why = repaired.refused.line()
            logger.warning(f"toolid: {at}: pairing not repaired: {why}")
            record["repair_refused"] = why
            return None
        if not repaired.repairs:
            return None
        number = {} if message is None else {"message": message}
        records = record.setdefault("repairs", [])
        records.extend({**repair.record(), **number} for repair in repaired.repairs)
        verb = "would repair" if self.observe else "repaired"
        count = len(repaired.repairs)
        logger.info(
            f"toolid: {at}: {verb} {count} pairing problem{'s' if count != 1 else ''}: "
            + "; ".join(repair.line() for repair in repaired.repairs)
        )
        return None if self.observe else repaired.content

    def comment(self, flow: http.HTTPFlow) -> None:
        """Summarise the flow's records in its comment (once per hook, never per chunk)."""
        record = flow.metadata.get("toolid")
        if not record:
            return
        requests, responses = record.get("request", ()), record.get("response", ())
        pairing = record.get("pairing", ())
        repairs = record.get("repairs", ())
        if not (requests or responses or pairing or repairs):
            return
        omitted = record.get("request_omitted", 0) + record.get("response_omitted", 0)
        summarised = (len(requests), len(responses), omitted, len(pairing) + len(repairs))
        if self._summarised.get(flow) == summarised:
            return  # nothing recorded since the comment was written
        self._summarised[flow] = summarised
        lines = [f"toolid pairing: {line}" for line in pairing_lines(record)] if pairing else []
        verb = "toolid would repair" if record["observe"] else "toolid repaired"
        lines += [f"{verb}: {line}" for line in repair_lines(record)] if repairs else []
        if requests or responses:
            records = [*requests, *responses] if requests and responses else requests or responses
            observe = record["observe"]
            line = f"toolid{' (observe)' if observe else ''}: {report.summary(records, observe)}"
            lines.insert(0, f"{line} (+{omitted} more not recorded)" if omitted else line)
        flow.comment = "\n".join(lines)

    def finish(self, flow: http.HTTPFlow) -> None:
        """The flow's exchange is over: its comment brought up to date, its change line."""
        record = flow.metadata.get("toolid")
        if record and (record.get("request") or record.get("response")):
            self.comment(flow)
            # the change line only: the pairing lines were logged as a warning
            self.log_change(flow.comment.partition("\n")[0], where(flow))

    def log_change(self, comment: str, at: Where, detail: str = "") -> None:
        """Log one flow's change line (INFO): its comment and request. In mitmproxy's event
        loop, the lines are gathered, and written as one record at most every LOG_EVERY
        seconds (made then, after the flow's response has gone): mitmproxy hands every record
        to every addon (about a quarter of a millisecond here, more than rewriting a response
        costs), a line within a record costs next to nothing."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in an event loop (a script, a test): at once
            logger.info(change_line(comment, at, detail))
            return
        if not self._pending_lines:
            loop.call_later(LOG_EVERY, self.flush)
        self._pending_lines.append((comment, at, detail))

    def flush(self) -> None:
        """Log the change lines gathered so far."""
        lines, self._pending_lines = self._pending_lines, []
        if lines:
            logger.info("\n".join(change_line(*line) for line in lines))


def where(flow: http.HTTPFlow) -> Where:
    """The flow's request method, host and path, as mitmproxy holds them."""
    data = flow.request.data
    return data.method, data.host, data.path


def describe(flow: http.HTTPFlow) -> str:
    """Method, upstream host and path: never headers, query strings or bodies."""
    return description(where(flow))


def description(at: Where) -> str:
    """``describe`` of a request's method, host and path (as the request's properties
    decode them)."""
    method, host, path = at
    path_only = path.decode("utf-8", "surrogateescape").split("?", 1)[0]
    text = f"{method.decode('utf-8', 'surrogateescape').upper()} {host}{path_only}"
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # undecodable path bytes


def change_line(comment: str, at: Where, detail: str = "") -> str:
    """A change line: the flow's comment, then its request (and ``detail``) in brackets."""
    return f"{comment} [{description(at)}{', ' + detail if detail else ''}]"
