"""mitmproxy addon: safe tool-call ids for agents, exact ids for upstreams.

Load with ``mitmdump -s addons/toolid_addon.py`` (``scripts/proxy`` does). Glue only:
options, scope, and hooks that hand bytes plus a small policy to the ``toolid``
library and record what it changed. Every hook fails open: on anything unexpected
the flow's bytes stay as they were, one warning is logged, the flow is marked.

For people looking at flows it adds the ``toolid`` contentview (bodies pretty-printed with
every tool-call id annotated, see ``toolid.annotate``) and the commands ``toolid.encode``,
``toolid.decode`` and ``toolid.trace``.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from mitmproxy import command, contentviews, ctx, exceptions, http
from mitmproxy import flow as mflow

# mitmproxy puts only this file's folder on sys.path: an installed toolid is used if there is
# one, else the checkout this file is in (__file__ may be relative: resolve it now). The
# sibling modules (the contentview) are imported from this folder, as mitmproxy does.
if importlib.util.find_spec("toolid") is None:
    sys.path.append(str(Path(__file__).resolve().parents[1]))
if importlib.util.find_spec("toolid_view") is None:
    sys.path.append(str(Path(__file__).resolve().parent))

import toolid_checks
from toolid_records import MARK_CHANGED, MARK_PROBLEM, MARK_SIGNED, FlowRecords, describe, where
from toolid_socket import ResponsesSockets
from toolid_status import StatusServer
from toolid_view import ToolIdView

import toolid
from toolid import (
    DEFAULT_MAX_EVENT_BYTES,
    PROFILES,
    RULE_SETS,
    Api,
    Change,
    Destinations,
    Framing,
    HostRule,
    ModelRule,
    Profile,
    Rewritten,
    RewrittenRequest,
    RuleSet,
    Taken,
    api_from_path,
    framing_of,
    parse_host_rules,
    parse_model_rules,
    report,
    rules,
    scope,
    signing,
    streamed_route,
    trace,
)

logger = logging.getLogger(__name__)
_NOTHING_TAKEN = Taken()  # a flow whose request history was not read

__all__ = ["MARK_CHANGED", "MARK_PROBLEM", "MARK_SIGNED", "ToolId", "addons", "trace_lines"]

MODES = ("rewrite", "observe")
WEBSOCKET_MODES = ("rewrite", "pass", "refuse")
DRAIN_EVERY = 256  # a stream's changes are recorded in batches of this many, and at its end


class _EveryFlow(tuple[mflow.Flow, ...]):
    """The default of toolid.trace's ``flows``: every flow in mitmproxy's flow list."""


EVERY_FLOW: Sequence[mflow.Flow] = _EveryFlow()
_Command = TypeVar("_Command", bound=Callable[..., Any])


def _command(name: str) -> Callable[[_Command], _Command]:
    """``mitmproxy.command.command``, typed."""
    return cast(Callable[[_Command], _Command], command.command(name))


def collector_deferred[**Args, Result](
    work: Callable[Args, Result], *args: Args.args, **kwargs: Args.kwargs
) -> Result:
    """``work(*args, **kwargs)`` with Python's cyclic garbage collector held off. Restoring
    and checking a long history makes thousands of small acyclic objects that reference
    counting frees as it returns; a collection in the middle would find them alive, move them
    to older generations and so, every few dozen requests, start a full collection over all
    of mitmproxy's heap (see docs/performance.md). Deferred, the collector runs after, when
    they are gone; so for a stream's pieces when many events carry calls. A collector the
    user turned off stays off. (A buffered response or a WebSocket message makes too few such
    objects for it to pay: row 2 is the same either way.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return work(*args, **kwargs)
    finally:
        if enabled:
            gc.enable()


class ToolId:
    """Encode non-conforming tool-call ids in responses, restore them in requests."""

    def __init__(self) -> None:
        self.hosts: tuple[scope.HostPattern, ...] = scope.parse(["*"])
        # Which rule set each request's destination has, by its model, host and path: the
        # user's toolid_model_rules, toolid_host_rules and toolid_strict_hosts, then the
        # built-in host and model rules (toolid.destination).
        self.model_rules: tuple[ModelRule, ...] = ()
        self.host_rules: tuple[HostRule, ...] = ()
        self.strict_hosts: tuple[scope.HostPattern, ...] = ()
        self.destinations = Destinations()
        self.view = ToolIdView()
        self._allow_hosts_set: list[str] = []  # the allow_hosts value toolid put in place
        # Options read on every flow, kept as attributes (an option lookup is not free).
        self.profile: Profile = "safe"
        self.observe = False
        self.max_event_bytes = DEFAULT_MAX_EVENT_BYTES
        self._every_host = True  # toolid_hosts covers every host
        self.records = FlowRecords()  # what toolid writes into flows and the log
        # What each in-flight flow's request was read as, for its response: its API and the
        # ids its history defines (occurrence tags). Per flow, gone with the flow or at its
        # response (the proxy keeps no state across flows).
        self._asked: weakref.WeakKeyDictionary[http.HTTPFlow, tuple[Api | None, Taken]] = (
            weakref.WeakKeyDictionary()
        )
        # Responses over WebSocket (toolid_websocket): each open connection's state (what it
        # takes, the current response), gone when the connection closes.
        self.websocket = "rewrite"
        self.repair = False
        self.sockets = ResponsesSockets(self.records)
        # toolid_status: /healthz and /metrics on a listener of its own (toolid_status.py)
        self.metrics = self.records.metrics
        self.status: StatusServer | None = None
        self._running = False  # the proxy runs (before: option errors stop it at startup)

    def load(self, loader: Any) -> None:
        contentviews.add(self.view)  # keyed by name: a reloaded script replaces it
        loader.add_option(
            "toolid_hosts",
            Sequence[str],
            ["*"],
            "Upstream hosts whose tool-call ids toolid rewrites: *, api.moonshot.ai, "
            "*.example.com, localhost:8000 (repeat the option or separate with commas).",
        )
        loader.add_option(
            "toolid_host_rules",
            Sequence[str],
            [],
            "Id rules of upstream hosts, as HOST=RULESET (repeat the option or separate with "
            f"commas); rule sets: {', '.join([*RULE_SETS, rules.NO_RULES])}. Requests "
            "to such a host get ids it accepts (restored, as sent, or a mapped form), and "
            "distinct call ids. Adds to and overrides the built-in "
            f"{', '.join(rules.DEFAULT_HOST_RULES)}. HOST may end in /PATH, a glob on the "
            "request's path. Below toolid_model_rules, above the built-in model rules.",
        )
        loader.add_option(
            "toolid_model_rules",
            Sequence[str],
            [],
            "Id rules by the request's model (the body's model, or the model a Vertex, Azure, "
            "Bedrock or Gemini path names), as PATTERN=RULESET (repeat the option or separate "
            "with commas): PATTERN a glob (* and ?) on the model name or on what follows a / "
            "or , in it (mistralai/*, my-coder-*); PATTERN=none switches a built-in off. "
            "Precedence: these, then toolid_host_rules and toolid_strict_hosts, then the "
            "official API hosts' built-in rule sets, then the built-in model rules "
            f"{', '.join(rules.DEFAULT_MODEL_RULES)} (claude-* not in Messages API requests), "
            "then none.",
        )
        loader.add_option(
            "toolid_strict_hosts",
            Sequence[str],
            [],
            "Upstreams that reject ids outside [A-Za-z0-9_-]+ (and duplicates): the same as "
            "toolid_host_rules HOST=safe for each (official API hosts have their own rule "
            "sets already).",
        )
        loader.add_option(
            "toolid_profile",
            str,
            "safe",
            "Which ids clients get unchanged: safe ([A-Za-z0-9_-]+, encoded as tid1_...) or "
            "call (call_[A-Za-z0-9_-]+, encoded as call_tid1_...).",
            choices=PROFILES,
        )
        loader.add_option(
            "toolid_mode",
            str,
            "rewrite",
            "rewrite: change ids on the wire. observe: only report what would change.",
            choices=MODES,
        )
        loader.add_option(
            "toolid_repair",
            bool,
            False,
            "Repair a request whose history pairs tool calls and results wrongly (missing, "
            "orphan or misplaced results, duplicate, empty or joined ids) before it is "
            "forwarded, so that its destination accepts it (docs/pairing.md). Off: the "
            "problems are named and the request passes as it is.",
        )
        loader.add_option(
            "toolid_max_event_bytes",
            int,
            DEFAULT_MAX_EVENT_BYTES,
            "Largest streamed event (SSE event, eventstream frame, JSON-array element) toolid "
            "rewrites; larger ones pass unchanged.",
        )
        loader.add_option(
            "toolid_websocket",
            str,
            "rewrite",
            "The Responses API over WebSocket (Codex): rewrite its messages' ids, pass them "
            "unchanged, or refuse the upgrade with 426 (the client falls back to HTTP).",
            choices=WEBSOCKET_MODES,
        )
        loader.add_option(
            "toolid_status",
            str,
            "",
            "HOST:PORT of toolid's status endpoint (GET /healthz, GET /metrics in Prometheus "
            "format), for example 127.0.0.1:9091; empty: none. No auth: keep it on a trusted "
            "network.",
        )
        loader.add_option(
            "toolid_open_proxy",  # toolid_checks.OPEN_PROXY_OPTION
            bool,
            False,
            "Listen beyond loopback without proxyauth (anyone who reaches the port may use "
            "the proxy). Without it, toolid refuses to start so.",
        )
        toolid_checks.apply_deferred()

    def configure(self, updated: set[str]) -> None:
        starting = not self._running and toolid_checks.under_errorcheck()
        try:
            if starting:
                toolid_checks.check_unknown()
            if starting or updated & _LISTEN_OPTIONS:
                toolid_checks.check_open_proxy()
            self._configure(updated)
        except exceptions.OptionsError as error:
            toolid_checks.refuse(error, starting)

    def _configure(self, updated: set[str]) -> None:
        if "toolid_hosts" in updated:
            self.hosts = _parse_hosts("toolid_hosts", ctx.options.toolid_hosts)
            self._every_host = scope.allow_hosts(self.hosts) is None
            self._tunnel_other_hosts()
        if "toolid_strict_hosts" in updated:
            self.strict_hosts = _parse_hosts("toolid_strict_hosts", ctx.options.toolid_strict_hosts)
        if "toolid_host_rules" in updated:
            self.host_rules = _parse_rules(
                "toolid_host_rules", parse_host_rules, ctx.options.toolid_host_rules
            )
        if "toolid_model_rules" in updated:
            self.model_rules = _parse_rules(
                "toolid_model_rules", parse_model_rules, ctx.options.toolid_model_rules
            )
        if updated & {"toolid_model_rules", "toolid_host_rules", "toolid_strict_hosts"}:
            self.destinations = Destinations(self.model_rules, self.host_rules, self.strict_hosts)
        for option, allowed in (
            ("toolid_profile", PROFILES),
            ("toolid_mode", MODES),
            ("toolid_websocket", WEBSOCKET_MODES),
        ):
            if option in updated and getattr(ctx.options, option) not in allowed:
                raise exceptions.OptionsError(
                    f"{option} must be one of {', '.join(allowed)}, "
                    f"not {getattr(ctx.options, option)!r}"
                )
        if "toolid_max_event_bytes" in updated and ctx.options.toolid_max_event_bytes <= 0:
            raise exceptions.OptionsError(
                f"toolid_max_event_bytes must be a positive number of bytes, "
                f"not {ctx.options.toolid_max_event_bytes}"
            )
        self.profile = cast(Profile, ctx.options.toolid_profile)
        self.observe = self.records.observe = ctx.options.toolid_mode == "observe"
        self.max_event_bytes = ctx.options.toolid_max_event_bytes
        self.websocket = ctx.options.toolid_websocket
        self.repair = self.sockets.repair = ctx.options.toolid_repair
        if "toolid_status" in updated:
            self._listen_status(ctx.options.toolid_status)

    def _listen_status(self, spec: str) -> None:
        """Serve the status endpoint on ``spec`` (HOST:PORT; empty: none), in place of the
        one before."""
        old, self.status = self.status, None
        if old is not None:
            asyncio.get_running_loop().create_task(old.close())
        if not spec:
            return
        status = StatusServer(self.metrics)
        try:
            status.listen(spec)
        except (OSError, ValueError) as exc:
            raise exceptions.OptionsError(
                f"toolid_status: cannot serve {spec}: {exc} (choose another HOST:PORT, or "
                "--set toolid_status= for none)"
            ) from None
        if self._running:
            status.state = "serving"
        self.status = status
        host, port = status.address or ("", 0)
        logger.info(f"toolid: status endpoint on http://{host}:{port}/healthz and /metrics")

    def running(self) -> None:
        self._running = True
        if self.status is not None:
            self.status.state = "serving"

    def done(self) -> Awaitable[None] | None:
        """Log what is pending; with a status endpoint, answer 503 from now on and close it
        (an awaitable, which mitmproxy awaits; None when there is nothing to wait for)."""
        self.records.flush()
        status, self.status = self.status, None
        if status is None:
            return None
        logger.info("toolid: status endpoint stopping: /healthz answers 503")
        return status.close()

    def _tunnel_other_hosts(self) -> None:
        """Leave TLS to hosts outside toolid_hosts uninterrupted (mitmproxy allow_hosts), so
        certificate pinning elsewhere keeps working. A user's own allow_hosts or ignore_hosts
        wins; toolid only ever replaces the value it set itself."""
        current = list(ctx.options.allow_hosts)
        if current != self._allow_hosts_set or ctx.options.ignore_hosts:
            return  # the user's own choice
        wanted = scope.allow_hosts(self.hosts) or []
        if wanted != current:
            self._allow_hosts_set = wanted
            ctx.options.update(allow_hosts=wanted)

    # --- commands ----------------------------------------------------------------------------

    @_command("toolid.encode")
    def encode_id(self, tool_id: str, occurrence: int = 1) -> str:
        """The client id for a raw upstream tool-call id (under the current toolid_profile);
        occurrence 2 or more: the tagged id of the k-th call that carries it."""
        if occurrence < 1:
            raise exceptions.CommandError(f"occurrence must be 1 or more, not {occurrence}")
        return toolid.encode(tool_id, ctx.options.toolid_profile, occurrence)

    @_command("toolid.decode")
    def decode_id(self, tool_id: str) -> str:
        """The raw upstream id inside a client id (other ids come back unchanged)."""
        return toolid.decode(tool_id)

    @_command("toolid.trace")
    def trace(self, tool_id: str, flows: Sequence[mflow.Flow] = EVERY_FLOW) -> Sequence[str]:
        """Where a tool call appears: the response that created it and each request that
        replayed it. tool_id: its raw or its encoded form. flows: a flow spec (default:
        every flow in the flow list)."""
        if flows is EVERY_FLOW:
            flows = _every_flow()
        lines = trace_lines(tool_id, flows)
        header = f"toolid.trace {report.show(tool_id)}"
        if toolid.decode(tool_id) != tool_id:
            header += f" (raw {report.show(toolid.decode(tool_id))})"
        if lines:
            count = f"{len(lines)} sighting{'s' if len(lines) != 1 else ''}"
            logger.info("\n  ".join([f"{header}: {count}", *lines]))
        else:
            logger.info(f"{header}: not in any of {len(flows)} flows")
        return lines

    # --- hooks -------------------------------------------------------------------------------

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live or not self._in_scope(flow):
            return
        start = time.perf_counter()
        self._request(flow)
        self.metrics.spend(flow, time.perf_counter() - start)

    def _request(self, flow: http.HTTPFlow) -> None:
        try:
            headers = _MessageHeaders(flow.request.headers, signing=True)
            if self._leave_signed(flow, headers):
                return
        except Exception as exc:  # never rewrite what might be signed
            self.records.problem(flow, f"request left unchanged: unexpected error {exc!r}")
            return
        try:
            # row 3 (a 500-call history) takes 4.3% more without the hold (10.54 / 10.11 ms)
            collector_deferred(self._rewrite_request, flow, headers)
        except Exception as exc:
            self.records.problem(flow, f"request left unchanged: unexpected error {exc!r}")

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        if response is None or not flow.live or not self._in_scope(flow):
            return
        headers = _MessageHeaders(response.headers)
        framing = framing_of(headers.content_type or "", flow.request.path)
        if _signed(flow):
            if framing is not None:  # streamed as it comes (buffered, it would reach the
                response.stream = True  # agent only at its end), never rewritten
            return
        if framing is None:
            return
        try:
            self._start_stream(flow, response, framing, headers)
        except Exception as exc:
            self.records.problem(flow, f"stream passed unchanged: {exc}")
            # Still streamed (as is): buffered, an event stream would reach the agent at its end.
            response.stream = True
            self.records.of(flow)["streamed"] = True

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.response is None or not flow.live or not self._in_scope(flow):
            return
        self.metrics.count_rejection(flow)
        if _signed(flow):
            self.metrics.finish(flow)
            return
        start = time.perf_counter()
        try:
            if not flow.response.stream:
                self._rewrite_response(flow, flow.response)
            elif not self.records.of(flow).get("streamed"):
                problem = "response was streamed by another option; ids not rewritten"
                self.records.problem(flow, problem)
        except Exception as exc:
            self.records.problem(flow, f"response left unchanged: unexpected error {exc!r}")
        self._asked.pop(flow, None)  # a flow kept for the UI keeps no request copy
        self.records.finish(flow)
        self.metrics.spend(flow, time.perf_counter() - start)
        self.metrics.finish(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._asked.pop(flow, None)
        if "toolid" in flow.metadata:
            self.records.finish(flow)
        self.metrics.finish(flow)

    # --- Responses over WebSocket (toolid_socket) -------------------------------------------

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.websocket == "refuse" and flow.live and self._in_scope(flow):
            self.sockets.refuse(flow)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        if self.websocket == "rewrite" and self._in_scope(flow):
            self.sockets.start(flow, self._rules_for, self.profile)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self.sockets.message(flow)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.sockets.end(flow)
        self.metrics.finish(flow)

    # --- the work ----------------------------------------------------------------------------

    def _rewrite_request(self, flow: http.HTTPFlow, headers: _MessageHeaders) -> None:
        request = flow.request
        if request.stream:
            self.records.problem(flow, "request body was streamed; ids not restored")
            return
        content = self._json_body(flow, request, "request", headers)
        if content is None:
            return
        path = request.path  # decoded by each read
        rule_set, why = self.destinations.for_request(request.host, request.port, path, content)
        result = toolid.rewrite_request(content, path=path, rules=rule_set, profile=self.profile)
        self._check_pairing(flow, result)
        repaired = self._repair(flow, content, path, result) if self.repair else None
        if repaired is not None:  # the repaired request, its ids restored as any request's
            self.metrics.repairs += 1
            result = toolid.rewrite_request(
                repaired, path=path, rules=rule_set, profile=self.profile
            )
        self._apply(flow, request, "request", headers, result, why=why, new=repaired is not None)
        self.records.comment(flow)  # a response's comment is written once, by records.finish
        if (
            not self.observe
            and api_from_path(path)
            and (result.asks_to_stream() or streamed_route(path))
        ):
            request.headers["accept-encoding"] = "identity"
        if result.api is not None:
            self.records.of(flow)["api"] = result.api.value
        self._asked[flow] = (result.api, result.taken)

    def _check_pairing(self, flow: http.HTTPFlow, result: RewrittenRequest) -> None:
        """Name the pairing problems of the request's history (as the client sent it): one
        WARNING line per flow, the flow marked, its comment, ``metadata["toolid"]["pairing"]``.
        The request goes on as it is (ids restored as always): toolid never adds or drops a
        call, and the upstream's answer then has its explanation beside it.

        The check reads what restoring read (``Rewritten.pairing_problems``) and runs at once,
        inside the request hook's hold on the collector (``collector_deferred``): nothing it
        reads outlives the hook. (Run at the loop's next turn instead, what it reads of a long
        history lived into the collector's next pass, which cost more than the under a
        millisecond the check takes on a 1 MiB history: docs/performance.md.)"""
        try:
            problems = result.pairing_problems()
            if not problems:
                return
            self.records.of(flow)["pairing"] = [problem.record() for problem in problems]
            self.metrics.count_pairing(problem.code for problem in problems)
            flow.marked = MARK_PROBLEM
            lines = [problem.line() for problem in problems]
            count = f"{len(lines)} pairing problem{'s' if len(lines) != 1 else ''}"
            logger.warning(f"toolid: {describe(flow)}: {count}: " + "; ".join(lines))
            self.records.comment(flow)
        except Exception as exc:  # a bug here must not cost the request
            self.records.problem(flow, f"pairing not checked: unexpected error {exc!r}")

    def _repair(
        self, flow: http.HTTPFlow, content: bytes, path: str, result: RewrittenRequest
    ) -> bytes | None:
        """Repair the pairing problems of the request's history (``toolid_repair``): the
        repaired body (None: none made, or observing), recorded and logged
        (``FlowRecords.repaired``); a request toolid cannot repair with certainty passes as
        it is, and the log says why."""
        if not self.records.of(flow).get("pairing"):
            return None
        try:
            repaired = toolid.repair_request(content, path=path, api=result.api)
        except Exception as exc:  # a bug here must not cost the request
            self.records.problem(flow, f"pairing not repaired: unexpected error {exc!r}")
            return None
        return self.records.repaired(flow, repaired)

    def _rewrite_response(self, flow: http.HTTPFlow, response: http.Response) -> None:
        headers = _MessageHeaders(response.headers)
        content = self._json_body(flow, response, "response", headers)
        if content is not None:
            api, taken = self._asked_of(flow)
            result = toolid.rewrite_response(content, api=api, taken=taken, profile=self.profile)
            self._apply(flow, response, "response", headers, result)

    def _apply(
        self,
        flow: http.HTTPFlow,
        message: http.Message,
        side: str,
        headers: _MessageHeaders,
        result: Rewritten,
        *,
        why: str = "",
        new: bool = False,
    ) -> None:
        """Record what rewriting a body did, and put the new body in (unless observing);
        ``new``: the body is another than the message's (a repaired request)."""
        for problem in result.problems:
            self.records.problem(flow, problem.line())
        self.records.note(flow, side, result.changes, why)
        if not self.observe and (result.changed or new):
            _set_body(message, headers, result.body)

    def _json_body(
        self, flow: http.HTTPFlow, message: http.Message, side: str, headers: _MessageHeaders
    ) -> bytes | None:
        """The decoded body of a JSON message; None when absent, empty or not JSON, or when
        it cannot be decoded (reported)."""
        content_type = headers.content_type
        raw = message.raw_content
        if raw is None or not _is_json("json" if content_type is None else content_type):
            return None
        encoding = headers.content_encoding
        if not encoding:  # as get_content gives it
            return raw or None
        try:
            content = message.get_content(strict=True)
        except ValueError:  # its message quotes the body's first bytes: never log it
            self.records.problem(flow, f"{side} left unchanged: cannot decode body ({encoding})")
            return None
        return content or None

    def _start_stream(
        self,
        flow: http.HTTPFlow,
        response: http.Response,
        framing: Framing,
        headers: _MessageHeaders,
    ) -> None:
        """Stream an event stream (SSE, or AWS eventstream: Bedrock's ConverseStream and
        InvokeModelWithResponseStream) through the rewriter of its framing."""
        api, taken = self._asked_of(flow)
        stream = toolid.ResponseStream(
            api=api,
            taken=taken,
            profile=self.profile,
            content_encoding=headers.content_encoding or "",
            max_event_bytes=self.max_event_bytes,
            framing=framing,
        )
        self.records.of(flow)["streamed"] = True
        if not self.observe:
            response.headers.pop("content-length", None)  # the size may change
            if stream.decodes:
                response.headers.pop("content-encoding", None)
        response.stream = self._stream_callable(flow, stream)

    def _stream_callable(
        self, flow: http.HTTPFlow, stream: toolid.ResponseStream
    ) -> Callable[[bytes], bytes | tuple[()]]:
        """The function mitmproxy calls with each piece of the body, and with b"" at its end.

        It gives what goes out now, and ``()`` to hold the piece back (b"" before the end
        would end a chunked body). Changes are recorded in batches of DRAIN_EVERY and at the
        end (the flow's records are capped, so an endless stream holds no growing list);
        problems at once. Observing, every piece goes out as it came. After the end, pieces
        pass as they come and the stream's state is let go (the flow may outlive it)."""
        current: list[toolid.ResponseStream] = [stream]
        pending: list[Change] = []
        observe = self.observe
        spent = [0.0]  # seconds spent on the stream's pieces so far

        def function(data: bytes) -> bytes | tuple[()]:
            if not current:
                return data
            rewriter = current[0]
            start = time.perf_counter()
            try:
                # the worst row (a call in every event) takes 4% more without the hold on its
                # pieces (14.08 / 13.52 ms); row 1 is the same either way
                if data:
                    result = collector_deferred(rewriter.feed, data)
                else:
                    result = collector_deferred(rewriter.finish)
            except Exception as exc:  # it never raises; should it, the piece as it came
                self.records.problem(flow, f"stream rewriting failed: {exc!r}")
                return data
            spent[0] += time.perf_counter() - start
            if not data:
                current.clear()
                self.metrics.spend(flow, spent[0])
            if result.changes or result.problems or not data:
                try:
                    pending.extend(result.changes)
                    if not data or len(pending) >= DRAIN_EVERY:
                        self.records.note(flow, "response", pending)
                        pending.clear()
                    for problem in result.problems:
                        self.records.problem(flow, problem.line())
                except Exception as exc:  # never let an exception reach mitmproxy's loop
                    self.records.problem(flow, f"stream rewriting failed: {exc!r}")
            if observe:
                return data
            return result.body if (result.body or not data) else ()

        return function

    # --- signed requests: never a byte changed ----------------------------------------------

    def _leave_signed(self, flow: http.HTTPFlow, headers: _MessageHeaders) -> bool:
        """Whether the request is signed over its bytes (``toolid.signing``); then it and its
        response pass byte for byte (not even accept-encoding changes: SigV4 signs it). An API
        call (a known route, or a JSON body) is also marked, commented and logged once as
        such. The signature's value is never recorded or logged, only its scheme."""
        request = flow.request
        scheme = signing.signature_of(headers.signing, request.path)
        if scheme is None:
            return False
        record = self.records.of(flow)
        record["signed"] = scheme
        api = api_from_path(request.path)
        if api is not None:
            record["api"] = api.value
        elif not _is_json(headers.content_type or ""):
            return True  # not an API call toolid reads (an S3 upload, say): nothing to say
        flow.marked = MARK_SIGNED
        flow.comment = f"toolid: signed request ({scheme}): ids left as they are"
        self.records.log_change(flow.comment, where(flow))
        return True

    # --- scope and bookkeeping ---------------------------------------------------------------

    def _asked_of(self, flow: http.HTTPFlow) -> tuple[Api | None, Taken]:
        """What the flow's request was read as (its API, the ids its history defines), taken
        for its response; a request toolid did not read: the API its path names."""
        asked = self._asked.pop(flow, None)
        return asked or (api_from_path(flow.request.path), _NOTHING_TAKEN)

    def _in_scope(self, flow: http.HTTPFlow) -> bool:
        return self._every_host or scope.covers(self.hosts, flow.request.host, flow.request.port)

    def _rules_for(self, flow: http.HTTPFlow) -> RuleSet | None:
        """The id rules of the flow's upstream by its host and path alone (no body to read
        a model from; ``toolid.destination``)."""
        request = flow.request
        return self.destinations.for_request(request.host, request.port, request.path, None).rules


def _signed(flow: http.HTTPFlow) -> bool:
    """Whether toolid left the flow alone as a signed request (``ToolId._leave_signed``)."""
    record = flow.metadata.get("toolid")
    return isinstance(record, dict) and "signed" in record


# row 2 takes 2.5% more with Headers.get and set_content in place of these two (2.07 / 2.02 ms)
class _MessageHeaders:
    """The few headers toolid reads of one message, found in one pass over its fields
    (mitmproxy's public ``Headers.fields``): each ``Headers.get`` makes a pass of its own
    and lowers every field's name in it, and a flow takes about eight (see
    docs/performance.md). A value is as ``Headers.get`` gives it: a repeated header's values
    joined with ", "."""

    __slots__ = ("content_encoding", "content_type", "signing", "transfer_encoding")

    def __init__(self, headers: http.Headers, *, signing: bool = False) -> None:
        values: dict[bytes, str] = {}
        #: With ``signing``, the headers that may sign the request (``signing.HEADERS``), in
        #: their order, as ``signing.signature_of`` takes them.
        self.signing: list[tuple[str, str]] = []
        for name, value in headers.fields:
            lowered = name.lower()
            if lowered in _BODY_HEADERS:
                text = value.decode("utf-8", "surrogateescape")  # as mitmproxy decodes it
                values[lowered] = f"{values[lowered]}, {text}" if lowered in values else text
            elif signing and lowered in _SIGNING_HEADERS:
                self.signing.append((lowered.decode(), value.decode("utf-8", "surrogateescape")))
        self.content_type = values.get(b"content-type")
        self.content_encoding = values.get(b"content-encoding")
        self.transfer_encoding = b"transfer-encoding" in values


_LISTEN_OPTIONS = frozenset({"mode", "listen_host", "proxyauth", toolid_checks.OPEN_PROXY_OPTION})
_BODY_HEADERS = frozenset({b"content-type", b"content-encoding", b"transfer-encoding"})
_SIGNING_HEADERS = frozenset(name.encode() for name in signing.HEADERS)


def _set_body(message: http.Message, headers: _MessageHeaders, body: bytes) -> None:
    """``message.content = body``: without a content-encoding, as mitmproxy's ``set_content``
    does it (the body as it is, its content-length unless there is a transfer-encoding),
    without reading the headers again."""
    if headers.content_encoding:
        message.content = body
        return
    message.raw_content = body
    if not headers.transfer_encoding:
        message.headers["content-length"] = str(len(body))


def _is_json(content_type: str) -> bool:
    return "json" in content_type.lower()


def _parse_hosts(option: str, values: Sequence[str]) -> tuple[scope.HostPattern, ...]:
    try:
        return scope.parse(values)
    except ValueError as exc:
        raise exceptions.OptionsError(f"{option}: {exc}") from None


def _parse_rules[Rule](
    option: str, parse: Callable[[Sequence[str]], tuple[Rule, ...]], values: Sequence[str]
) -> tuple[Rule, ...]:
    try:
        return parse(values)
    except ValueError as exc:
        raise exceptions.OptionsError(f"{option}: {exc}") from None


# --- toolid.trace ------------------------------------------------------------------------------


def _every_flow() -> Sequence[mflow.Flow]:
    try:
        flows: Sequence[mflow.Flow] = ctx.master.commands.call("view.flows.resolve", "@all")
    except exceptions.CommandError:
        raise exceptions.CommandError(
            "toolid.trace needs mitmproxy's flow list (mitmproxy or mitmweb; mitmdump keeps none)"
        ) from None
    return flows


def trace_lines(tool_id: str, flows: Sequence[mflow.Flow]) -> list[str]:
    """``toolid.trace.trace_lines`` of ``flows`` (``#N``: the flow's position among them)."""
    exchanges = [trace.exchange_of(f) if isinstance(f, http.HTTPFlow) else None for f in flows]
    return trace.trace_lines(tool_id, exchanges)


addons = [ToolId()]
