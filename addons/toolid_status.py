"""toolid's status endpoint (``toolid_status=HOST:PORT``): ``GET /healthz`` for load balancers
and probes, ``GET /metrics`` in the Prometheus text exposition format (version 0.0.4).

Part of the mitmproxy glue (``toolid_addon.py`` owns one ``Metrics`` and one ``StatusServer``);
imported from this folder, as mitmproxy puts a script's own folder on ``sys.path``.

The endpoint is a small asyncio server of its own on mitmproxy's event loop, not an app
served through the proxy: its requests are no flows (never in the flow list or the log), and
a process whose loop is stuck answers nothing, so its check fails. It reads a request's head
only (no body, no auth) and answers each connection once.

The metrics are counters since the start and one histogram, their labels from short fixed
lists (actions, outcomes, pairing codes): never a host, path or id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Literal

from mitmproxy import http

from toolid import Change, api_from_path, codec
from toolid.pairing import CODES

logger = logging.getLogger(__name__)

State = Literal["starting", "serving", "stopping"]

ACTIONS = ("encoded", "restored", "tagged", "minted", "cleared", "mapped", "kept")
OUTCOMES = ("changed", "unchanged", "failed_open", "signed", "too_large", "websocket")
# seconds: the time toolid adds to one flow, from tens of microseconds to a huge history
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
HEAD_LIMIT = 8192  # bytes of a request's head read at most
HEAD_TIMEOUT = 5.0  # seconds a client has to send its request's head
STOP_GRACE = 1.0  # seconds connections already open have, at shutdown, to be answered (503)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_ACTION = itemgetter(3)  # a Change's action
_CLIENT = itemgetter(2)  # and its client id


class Metrics:
    """What toolid did since the start, counted for ``/metrics``."""

    def __init__(self) -> None:
        self.ids: Counter[str] = Counter(dict.fromkeys(ACTIONS, 0))
        self.flows: Counter[str] = Counter(dict.fromkeys(OUTCOMES, 0))
        self.pairing: Counter[str] = Counter(dict.fromkeys(CODES, 0))
        self.repairs = 0  # requests repaired (toolid_repair)
        self.rejections: Counter[str] = Counter(unknown=0)  # upstream 4xx answers, by code
        self.buckets = [0] * len(BUCKETS)  # not cumulative: observations per bucket
        self.seconds = 0.0
        self.observed = 0
        # the time toolid spent on each flow not finished yet
        self._spent: weakref.WeakKeyDictionary[http.HTTPFlow, float] = weakref.WeakKeyDictionary()

    def spend(self, flow: http.HTTPFlow, seconds: float) -> None:
        """Add to the time toolid spent on ``flow``; a flow is counted (``finish``) only if
        toolid spent time on it."""
        self._spent[flow] = self._spent.get(flow, 0.0) + seconds

    def finish(self, flow: http.HTTPFlow) -> None:
        """Count a flow whose exchange is over, once, by its outcome (``outcome_of``); a
        WebSocket is counted when it ends."""
        if flow.websocket is not None and flow.websocket.timestamp_end is None:
            return  # the upgrade's response: the WebSocket goes on
        seconds = self._spent.pop(flow, None)
        if seconds is not None:
            outcome = "websocket" if flow.websocket is not None else None
            self.count_flow(outcome or outcome_of(flow.metadata.get("toolid")), seconds)

    def count_ids(self, changes: Sequence[Change]) -> None:
        """Count each changed id position by its action (an encoded id that carries an
        occurrence tag counts as ``tagged``). The actions are counted in C, and the changes
        read one by one only when a client id spells a tag."""
        actions = Counter(map(_ACTION, changes))
        if actions["encoded"] and codec.TAG in " ".join(map(_CLIENT, changes)):
            tagged = sum(
                1
                for change in changes
                if change.action == "encoded" and codec.occurrence(change.client) > 1
            )
            actions["encoded"] -= tagged
            actions["tagged"] += tagged
        self.ids.update(actions)

    def count_pairing(self, codes: Iterable[str]) -> None:
        """Count a request's pairing problems by code."""
        self.pairing.update(codes)

    def count_rejection(self, flow: http.HTTPFlow) -> None:
        """Count an API response with a 4xx status that came from the upstream (toolid read
        its request: one the proxy answered itself, a 407 or 426, was not read), as
        ``unknown`` (the code is not read yet)."""
        status = flow.response.status_code if flow.response else 0
        if 400 <= status < 500 and flow in self._spent and api_from_path(flow.request.path):
            self.rejections["unknown"] += 1

    def count_flow(self, outcome: str, seconds: float) -> None:
        """Count a finished flow by its outcome, and the time toolid spent on it."""
        self.flows[outcome] += 1
        self.seconds += seconds
        self.observed += 1
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[index] += 1
                break

    def exposition(self) -> str:
        """The Prometheus text exposition format of every series."""
        lines: list[str] = []
        counters = (
            ("toolid_ids_total", "Tool-call id positions toolid changed, by action.", "action"),
            ("toolid_flows_total", "Flows toolid finished, by outcome.", "outcome"),
            ("toolid_pairing_problems_total", "Pairing problems in requests, by code.", "code"),
            ("toolid_upstream_rejections_total", "Upstream 4xx answers to API calls.", "code"),
        )
        for (name, text, label), values in zip(
            counters, (self.ids, self.flows, self.pairing, self.rejections), strict=True
        ):
            lines += [f"# HELP {name} {text}", f"# TYPE {name} counter"]
            lines += [f'{name}{{{label}="{key}"}} {value}' for key, value in values.items()]
        name = "toolid_repairs_total"
        lines += [f"# HELP {name} Requests repaired.", f"# TYPE {name} counter"]
        lines.append(f"{name} {self.repairs}")
        name = "toolid_rewrite_seconds"
        lines += [f"# HELP {name} Time toolid added to a flow.", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(BUCKETS, self.buckets, strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {self.observed}')
        lines += [f"{name}_sum {self.seconds!r}", f"{name}_count {self.observed}"]
        return "\n".join(lines) + "\n"


def outcome_of(record: Mapping[str, Any] | None) -> str:
    """A finished flow's outcome, from its ``metadata["toolid"]``: ``signed`` (passed byte
    for byte on purpose), ``too_large`` (an event over toolid_max_event_bytes passed as it
    was), ``failed_open`` (another problem: something passed unchanged), ``websocket`` (a
    Responses WebSocket), ``changed`` (an id changed; in observe mode, would have), or
    ``unchanged``."""
    if not record:
        return "unchanged"
    if "signed" in record:
        return "signed"
    problems = record.get("problems") or ()
    if any(" larger than " in problem for problem in problems):
        return "too_large"
    if problems:
        return "failed_open"
    for side in ("request", "response"):
        if any(change.get("action") != "kept" for change in record.get(side) or ()):
            return "changed"
    omitted = record.get("request_omitted") or record.get("response_omitted")
    return "changed" if omitted else "unchanged"


def parse_address(spec: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9091`` for IPv6) as a host and a port; ValueError if not."""
    host, colon, port = spec.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{spec!r} is not HOST:PORT (for example 127.0.0.1:9091)")
    return host.strip("[]"), int(port)


class StatusServer:
    """The status endpoint's listener and its state: ``starting`` (503) until the proxy runs,
    ``serving`` (200), ``stopping`` (503) from shutdown on."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.state: State = "starting"
        self.address: tuple[str, int] | None = None  # where it listens, once it does
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def listen(self, spec: str) -> None:
        """Bind ``spec`` (``HOST:PORT``) at once, so that a taken port is known now, and serve
        it on the running event loop. Raises ValueError or OSError."""
        host, port = parse_address(spec)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.address = sock.getsockname()[:2]
        asyncio.get_running_loop().create_task(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        try:
            self._server = await asyncio.start_server(self._connection, sock=sock)
        except Exception as exc:  # the proxy goes on without its status endpoint
            sock.close()
            logger.error(f"toolid: status endpoint failed: {exc!r}")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
            writer.write(self.answer(head))
            await writer.drain()
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except (OSError, asyncio.CancelledError):
            pass
        except Exception as exc:  # never let an error reach mitmproxy's loop
            logger.warning(f"toolid: status endpoint: unexpected error {exc!r}")
        finally:
            if task is not None:
                self._connections.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    def answer(self, head: bytes) -> bytes:
        """The response to a request whose head is ``head``."""
        method, _, rest = head[:HEAD_LIMIT].partition(b" ")
        target = rest.partition(b" ")[0].partition(b"?")[0]
        if method not in (b"GET", b"HEAD"):
            return _response(405, "method not allowed\n", method == b"HEAD")
        if target == b"/healthz":
            status = 200 if self.state == "serving" else 503
            return _response(status, f"{self.state}\n", method == b"HEAD")
        if target == b"/metrics":
            return _response(200, self.metrics.exposition(), method == b"HEAD", CONTENT_TYPE)
        return _response(404, "not found: /healthz and /metrics are served\n", method == b"HEAD")

    async def close(self) -> None:
        """Stop: answer 503 from now on, stop accepting, give the connections already open up
        to STOP_GRACE seconds to be answered, then close them."""
        self.state = "stopping"
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        pending = set(self._connections)
        if pending:
            _, late = await asyncio.wait(pending, timeout=STOP_GRACE)
            for task in late:
                task.cancel()


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _response(status: int, body: str, head_only: bool, content_type: str = "") -> bytes:
    data = body.encode()
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type or 'text/plain; charset=utf-8'}",
        f"Content-Length: {len(data)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head_only else data)
