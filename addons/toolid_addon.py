"""mitmproxy addon: safe tool-call ids for agents, exact ids for upstreams.

Load with ``mitmdump -s addons/toolid_addon.py`` (``scripts/proxy`` does). Glue only:
options, scope, and hooks that hand bytes plus a small policy to the ``toolid``
library and record what it changed. Every hook fails open: on anything unexpected
the flow's bytes stay as they were, one warning is logged, the flow is marked.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mitmproxy import ctx, exceptions, http

from toolid import PROFILES, body, report, scope
from toolid.apis import api_from_path
from toolid.body import Change, Direction, Policy, RewriteError
from toolid.positions import Api, Doc
from toolid.stream import DEFAULT_MAX_EVENT_BYTES, StreamRewriter

logger = logging.getLogger(__name__)

MODES = ("rewrite", "observe")
MARK_CHANGED = ":wrench:"
MARK_PROBLEM = ":warning:"
_STREAM_REQUESTED = re.compile(rb'"stream"\s*:\s*true')


class ToolId:
    """Encode non-conforming tool-call ids in responses, restore them in requests."""

    def __init__(self) -> None:
        self.hosts: tuple[scope.HostPattern, ...] = scope.parse(["*"])
        self.strict_hosts: tuple[scope.HostPattern, ...] = scope.parse(scope.DEFAULT_STRICT_HOSTS)

    def load(self, loader: Any) -> None:
        loader.add_option(
            "toolid_hosts",
            Sequence[str],
            ["*"],
            "Upstream hosts whose tool-call ids toolid rewrites: *, api.moonshot.ai, "
            "*.example.com, localhost:8000 (repeat the option or separate with commas).",
        )
        loader.add_option(
            "toolid_strict_hosts",
            Sequence[str],
            list(scope.DEFAULT_STRICT_HOSTS),
            "Upstreams that reject ids outside [A-Za-z0-9_-]+: requests to them keep the "
            "client id wherever the restored raw id would be rejected.",
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
            "toolid_max_event_bytes",
            int,
            DEFAULT_MAX_EVENT_BYTES,
            "Largest streamed (SSE) event toolid rewrites; larger events pass unchanged.",
        )

    def configure(self, updated: set[str]) -> None:
        if "toolid_hosts" in updated:
            self.hosts = _parse_hosts("toolid_hosts", ctx.options.toolid_hosts)
        if "toolid_strict_hosts" in updated:
            self.strict_hosts = _parse_hosts("toolid_strict_hosts", ctx.options.toolid_strict_hosts)
        for option, allowed in (("toolid_profile", PROFILES), ("toolid_mode", MODES)):
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

    # --- hooks -------------------------------------------------------------------------------

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live or not self._in_scope(flow):
            return
        try:
            self._rewrite_request(flow)
        except Exception as exc:
            self._problem(flow, f"request left unchanged: unexpected error {exc!r}")

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        if response is None or not flow.live or not self._in_scope(flow):
            return
        if not response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return
        try:
            self._start_stream(flow, response)
        except Exception as exc:
            self._problem(flow, f"stream passed unchanged: {exc}")

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.response is None or not flow.live or not self._in_scope(flow):
            return
        try:
            if not flow.response.stream:
                self._rewrite_response(flow, flow.response)
            elif not _record(flow).get("streamed"):
                self._problem(flow, "response was streamed by another option; ids not rewritten")
        except Exception as exc:
            self._problem(flow, f"response left unchanged: unexpected error {exc!r}")
        self._finish(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        if "toolid" in flow.metadata:
            self._finish(flow)

    # --- the work ----------------------------------------------------------------------------

    def _rewrite_request(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        if request.stream:
            self._problem(flow, "request body was streamed; ids not restored")
            return
        if not _is_json(request.headers.get("content-type", "json")):
            return
        try:
            content = request.get_content(strict=True)
        except ValueError as exc:
            self._problem(flow, f"request left unchanged: cannot decode body ({exc})")
            return
        if not content:
            return
        api = api_from_path(request.path)
        if api is not None and _STREAM_REQUESTED.search(content):
            request.headers["accept-encoding"] = "identity"
        policy = Policy(Direction.DECODE, ctx.options.toolid_profile, self._is_strict(flow))
        new, plan = self._apply(flow, content, api, Doc.REQUEST, policy)
        if plan.api is not None:
            _record(flow)["api"] = plan.api.value
        self._note(flow, "request", plan.changes)
        if new is not content:
            request.content = new

    def _rewrite_response(self, flow: http.HTTPFlow, response: http.Response) -> None:
        if response.raw_content is None or not _is_json(
            response.headers.get("content-type", "json")
        ):
            return
        try:
            content = response.get_content(strict=True)
        except ValueError as exc:
            self._problem(flow, f"response left unchanged: cannot decode body ({exc})")
            return
        if not content:
            return
        policy = Policy(Direction.ENCODE, ctx.options.toolid_profile)
        new, plan = self._apply(flow, content, _api_of(flow), Doc.RESPONSE, policy)
        self._note(flow, "response", plan.changes)
        if new is not content:
            response.content = new

    def _apply(
        self, flow: http.HTTPFlow, content: bytes, api: Api | None, doc: Doc, policy: Policy
    ) -> tuple[bytes, body.Plan]:
        try:
            new, plan = body.rewrite(content, api, doc, policy)
        except RewriteError as exc:
            self._problem(flow, f"{doc.value} left unchanged: {exc}")
            return content, body.NOTHING
        if ctx.options.toolid_mode == "observe":
            return content, plan
        return new, plan

    def _start_stream(self, flow: http.HTTPFlow, response: http.Response) -> None:
        encoding = response.headers.get("content-encoding", "")
        policy = Policy(Direction.ENCODE, ctx.options.toolid_profile)
        rewriter = StreamRewriter(
            _api_of(flow),
            policy,
            content_encoding=encoding,
            max_event_bytes=ctx.options.toolid_max_event_bytes,
        )
        observe = ctx.options.toolid_mode == "observe"
        _record(flow)["streamed"] = True
        if not observe:
            response.headers.pop("content-length", None)
            if rewriter.decodes:
                response.headers.pop("content-encoding", None)
        response.stream = self._stream_callable(flow, rewriter, observe)

    def _stream_callable(
        self, flow: http.HTTPFlow, rewriter: StreamRewriter, observe: bool
    ) -> Callable[[bytes], bytes | Iterable[bytes]]:
        reported = 0
        noted = 0

        def rewrite_chunk(data: bytes) -> bytes | Iterable[bytes]:
            nonlocal reported, noted
            try:
                out = rewriter.feed(data) if data else rewriter.finish()
                if len(rewriter.changes) > noted:
                    self._note(flow, "response", rewriter.changes[noted:])
                    noted = len(rewriter.changes)
                for problem in rewriter.problems[reported:]:
                    self._problem(flow, problem)
                reported = len(rewriter.problems)
            except Exception as exc:  # never let an exception reach mitmproxy's stream loop
                self._problem(flow, f"stream rewriting failed: {exc!r}")
                return data
            if observe:
                return data
            # An empty chunk mid-stream would end an HTTP/1 chunked body: hold with [].
            return out if (out or not data) else []

        return rewrite_chunk

    # --- scope and bookkeeping ---------------------------------------------------------------

    def _in_scope(self, flow: http.HTTPFlow) -> bool:
        return scope.covers(self.hosts, flow.request.host, flow.request.port)

    def _is_strict(self, flow: http.HTTPFlow) -> bool:
        return scope.covers(self.strict_hosts, flow.request.host, flow.request.port)

    def _note(self, flow: http.HTTPFlow, side: str, changes: Sequence[Change]) -> None:
        if not changes:
            return
        record = _record(flow)
        record.setdefault(side, []).extend(report.as_record(change) for change in changes)
        if any(change.action != "kept" for change in changes) and not flow.marked:
            flow.marked = MARK_CHANGED
        summary = report.summary(
            [*record.get("request", []), *record.get("response", [])],
            observe=record["observe"],
        )
        flow.comment = f"toolid{' (observe)' if record['observe'] else ''}: {summary}"

    def _problem(self, flow: http.HTTPFlow, message: str) -> None:
        record = _record(flow)
        problems = record.setdefault("problems", [])
        if not problems:
            logger.warning(f"toolid: {_describe(flow)}: {message}")
        problems.append(message)
        flow.marked = MARK_PROBLEM

    def _finish(self, flow: http.HTTPFlow) -> None:
        record = flow.metadata.get("toolid")
        if record and (record.get("request") or record.get("response")):
            logger.info(f"{flow.comment} [{_describe(flow)}]")


def _record(flow: http.HTTPFlow) -> dict[str, Any]:
    record: dict[str, Any] = flow.metadata.setdefault("toolid", {})
    record.setdefault("observe", ctx.options.toolid_mode == "observe")
    return record


def _api_of(flow: http.HTTPFlow) -> Api | None:
    known = flow.metadata.get("toolid", {}).get("api")
    return Api(known) if known else api_from_path(flow.request.path)


def _is_json(content_type: str) -> bool:
    return "json" in content_type.lower()


def _describe(flow: http.HTTPFlow) -> str:
    """Method, host and path: never headers, query strings or bodies."""
    request = flow.request
    return f"{request.method} {request.pretty_host}{request.path.split('?', 1)[0]}"


def _parse_hosts(option: str, values: Sequence[str]) -> tuple[scope.HostPattern, ...]:
    try:
        return scope.parse(values)
    except ValueError as exc:
        raise exceptions.OptionsError(f"{option}: {exc}") from None


addons = [ToolId()]
