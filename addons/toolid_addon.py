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
import functools
import importlib.util
import logging
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from mitmproxy import command, contentviews, ctx, exceptions, http
from mitmproxy import flow as mflow

# mitmproxy puts only this file's folder on sys.path: an installed toolid is used if there is
# one, else the checkout this file is in (__file__ may be relative: resolve it now).
if importlib.util.find_spec("toolid") is None:
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from toolid import PROFILES, annotate, body, codec, report, rules, scope
from toolid.apis import api_from_path
from toolid.body import Change, Direction, Policy, RewriteError
from toolid.codec import Profile
from toolid.occurrence import NOTHING_TAKEN, CallIds, Taken
from toolid.positions import Api, Doc, has_references
from toolid.stream import DEFAULT_MAX_EVENT_BYTES, StreamRewriter, stream_function

logger = logging.getLogger(__name__)

MODES = ("rewrite", "observe")
MARK_CHANGED = ":wrench:"
MARK_PROBLEM = ":warning:"
MAX_RECORDS = 1000  # change records kept per flow side: memory stays bounded on endless streams
DRAIN_EVERY = 256  # a stream's changes are recorded in batches of this many, and at its end
LOG_EVERY = 0.25  # seconds: change lines are logged together at most this often
_HOSTS_REMEMBERED = 256  # upstreams whose rule set is remembered (then forgotten, all at once)
_STREAM_VALUE = re.compile(rb"\s*:\s*true")


class _EveryFlow(tuple[mflow.Flow, ...]):
    """The default of toolid.trace's ``flows``: every flow in mitmproxy's flow list."""


EVERY_FLOW: Sequence[mflow.Flow] = _EveryFlow()
_Command = TypeVar("_Command", bound=Callable[..., Any])


def _command(name: str) -> Callable[[_Command], _Command]:
    """``mitmproxy.command.command``, typed."""
    return cast(Callable[[_Command], _Command], command.command(name))


class ToolId:
    """Encode non-conforming tool-call ids in responses, restore them in requests."""

    def __init__(self) -> None:
        self.hosts: tuple[scope.HostPattern, ...] = scope.parse(["*"])
        # Which rule set each upstream host has: the user's toolid_host_rules, then
        # toolid_strict_hosts (the safe rule set), then the official APIs' own.
        self.host_rules: tuple[tuple[scope.HostPattern, str], ...] = ()
        self.strict_hosts: tuple[scope.HostPattern, ...] = ()
        self.view = ToolIdView()
        self._allow_hosts_set: list[str] = []  # the allow_hosts value toolid put in place
        # Options read on every flow, kept as attributes (an option lookup is not free).
        self.profile: Profile = "safe"
        self.observe = False
        self.max_event_bytes = DEFAULT_MAX_EVENT_BYTES
        self._every_host = True  # toolid_hosts covers every host
        self._rules_of_host: dict[tuple[str, int], rules.RuleSet | None] = {}
        # Change lines waiting to be logged together (see _log_change): comment and request.
        self._pending_lines: list[tuple[str, _Where]] = []
        # The ids each in-flight flow's request history defines, for its response's
        # occurrence tags: per flow, gone with the flow (the proxy keeps no state across).
        self._taken: weakref.WeakKeyDictionary[http.HTTPFlow, Taken] = (
            weakref.WeakKeyDictionary()
        )
        # What each flow's comment summarises (the number of records of each side): a comment
        # is rewritten only when there is more to say.
        self._summarised: weakref.WeakKeyDictionary[http.HTTPFlow, tuple[int, int, int]] = (
            weakref.WeakKeyDictionary()
        )

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
            f"commas); rule sets: {', '.join([*rules.RULE_SETS, rules.NO_RULES])}. Requests "
            "to such a host get ids it accepts (restored, as sent, or a mapped form), and "
            "distinct call ids. Adds to and overrides the built-in "
            f"{', '.join(rules.DEFAULT_HOST_RULES)}.",
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
            "toolid_max_event_bytes",
            int,
            DEFAULT_MAX_EVENT_BYTES,
            "Largest streamed (SSE) event toolid rewrites; larger events pass unchanged.",
        )

    def configure(self, updated: set[str]) -> None:
        if "toolid_hosts" in updated:
            self.hosts = _parse_hosts("toolid_hosts", ctx.options.toolid_hosts)
            self._every_host = scope.allow_hosts(self.hosts) is None
            self._tunnel_other_hosts()
        if updated & {"toolid_host_rules", "toolid_strict_hosts"}:
            self._rules_of_host.clear()
        if "toolid_strict_hosts" in updated:
            self.strict_hosts = _parse_hosts("toolid_strict_hosts", ctx.options.toolid_strict_hosts)
        if "toolid_host_rules" in updated:
            try:
                self.host_rules = scope.parse_assignments(
                    ctx.options.toolid_host_rules, [*rules.RULE_SETS, rules.NO_RULES]
                )
            except ValueError as exc:
                raise exceptions.OptionsError(f"toolid_host_rules: {exc}") from None
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
        self.profile = cast(Profile, ctx.options.toolid_profile)
        self.observe = ctx.options.toolid_mode == "observe"
        self.max_event_bytes = ctx.options.toolid_max_event_bytes

    def done(self) -> None:
        self._flush_lines()
        _unregister(self.view)

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
        return codec.encode(tool_id, ctx.options.toolid_profile, occurrence)

    @_command("toolid.decode")
    def decode_id(self, tool_id: str) -> str:
        """The raw upstream id inside a client id (other ids come back unchanged)."""
        return codec.decode(tool_id)

    @_command("toolid.trace")
    def trace(self, tool_id: str, flows: Sequence[mflow.Flow] = EVERY_FLOW) -> Sequence[str]:
        """Where a tool call appears: the response that created it and each request that
        replayed it. tool_id: its raw or its encoded form. flows: a flow spec (default:
        every flow in the flow list)."""
        if flows is EVERY_FLOW:
            flows = _every_flow()
        lines = trace_lines(tool_id, flows)
        header = f"toolid.trace {report.show(tool_id)}"
        if codec.decode(tool_id) != tool_id:
            header += f" (raw {report.show(codec.decode(tool_id))})"
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
        try:
            self._rewrite_request(flow)
        except Exception as exc:
            self._problem(flow, f"request left unchanged: unexpected error {exc!r}")

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        if response is None or not flow.live or not self._in_scope(flow):
            return
        if not (_header(response, b"content-type") or "").lower().startswith("text/event-stream"):
            return
        try:
            self._start_stream(flow, response)
        except Exception as exc:
            self._problem(flow, f"stream passed unchanged: {exc}")
            # Still streamed (as is): buffered, an event stream would reach the agent at its end.
            response.stream = True
            self._record(flow)["streamed"] = True

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.response is None or not flow.live or not self._in_scope(flow):
            return
        try:
            if not flow.response.stream:
                self._rewrite_response(flow, flow.response)
            elif not self._record(flow).get("streamed"):
                self._problem(flow, "response was streamed by another option; ids not rewritten")
        except Exception as exc:
            self._problem(flow, f"response left unchanged: unexpected error {exc!r}")
        self._taken.pop(flow, None)  # a flow kept for the UI keeps no request copy
        self._finish(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._taken.pop(flow, None)
        if "toolid" in flow.metadata:
            self._finish(flow)

    # --- the work ----------------------------------------------------------------------------

    def _rewrite_request(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        if request.stream:
            self._problem(flow, "request body was streamed; ids not restored")
            return
        content = self._json_body(flow, request, "request")
        if content is None:
            return
        api = api_from_path(request.path)
        policy = _policy(Direction.DECODE, self.profile, self._rules_for(flow))
        plan = self._rewrite_body(flow, request, content, api, policy)
        if api is not None and not self.observe and _streaming_requested(content, plan.document):
            _set_header(request, b"accept-encoding", b"identity")
        if plan.api is not None:
            self._record(flow)["api"] = plan.api.value
        defined = plan.definitions()
        if defined is not None:  # the request was read already: its definitions are known
            self._taken[flow] = Taken.of(defined)
        else:
            self._taken[flow] = Taken(content, plan.api or api)

    def _rewrite_response(self, flow: http.HTTPFlow, response: http.Response) -> None:
        content = self._json_body(flow, response, "response")
        if content is not None:
            policy = _policy(Direction.ENCODE, self.profile)
            api = _api_of(flow)
            calls = self._calls(flow, policy, api, Doc.RESPONSE)
            self._rewrite_body(flow, response, content, api, policy, calls=calls)

    def _calls(self, flow: http.HTTPFlow, policy: Policy, api: Api | None, doc: Doc) -> CallIds:
        """The client ids of the response's tool calls, tagged against its request's history."""
        taken = self._taken.pop(flow, NOTHING_TAKEN)
        return CallIds(policy.profile, taken, references=has_references(api, doc))

    def _json_body(self, flow: http.HTTPFlow, message: http.Message, side: str) -> bytes | None:
        """The decoded body of a JSON message; None when absent, empty or not JSON, or when
        it cannot be decoded (reported)."""
        content_type = _header(message, b"content-type")
        raw = message.raw_content
        if raw is None or not _is_json("json" if content_type is None else content_type):
            return None
        encoding = _header(message, b"content-encoding")
        if not encoding:  # as get_content gives it
            return raw or None
        try:
            content = message.get_content(strict=True)
        except ValueError:  # its message quotes the body's first bytes: never log it
            self._problem(flow, f"{side} left unchanged: cannot decode body ({encoding})")
            return None
        return content or None

    def _rewrite_body(
        self,
        flow: http.HTTPFlow,
        message: http.Message,
        content: bytes,
        api: Api | None,
        policy: Policy,
        *,
        calls: CallIds | None = None,
    ) -> body.Plan:
        side = "request" if policy.direction is Direction.DECODE else "response"
        doc = Doc.REQUEST if side == "request" else Doc.RESPONSE
        new, plan = self._apply(flow, content, api, doc, policy, calls=calls)
        self._note(flow, side, plan.changes)
        if side == "request":  # a response's comment is written once, by _finish
            self._comment(flow)
        if new is not content:
            _set_content(message, new)
        return plan

    def _apply(
        self,
        flow: http.HTTPFlow,
        content: bytes,
        api: Api | None,
        doc: Doc,
        policy: Policy,
        *,
        calls: CallIds | None,
    ) -> tuple[bytes, body.Plan]:
        try:
            new, plan = body.rewrite(content, api, doc, policy, calls)
        except RewriteError as exc:
            self._problem(flow, f"{doc.value} left unchanged: {exc}")
            return content, body.NOTHING
        if self.observe:
            return content, plan
        return new, plan

    def _start_stream(self, flow: http.HTTPFlow, response: http.Response) -> None:
        encoding = _header(response, b"content-encoding") or ""
        policy = _policy(Direction.ENCODE, self.profile)
        api = _api_of(flow)
        rewriter = StreamRewriter(
            api,
            policy,
            content_encoding=encoding,
            max_event_bytes=self.max_event_bytes,
            calls=self._calls(flow, policy, api, Doc.EVENT),
        )
        observe = self.observe
        self._record(flow)["streamed"] = True
        if not observe:
            if _header(response, b"content-length") is not None:  # event streams seldom have one
                response.headers.pop("content-length", None)
            if rewriter.decodes:
                response.headers.pop("content-encoding", None)
        response.stream = self._stream_callable(flow, rewriter, observe)

    def _stream_callable(
        self, flow: http.HTTPFlow, rewriter: StreamRewriter, observe: bool
    ) -> Callable[[bytes], bytes | Iterable[bytes]]:
        # The callbacks take the rewriter as an argument: the function drops it at the end.
        def report(rewriter: StreamRewriter, end: bool) -> None:
            # Drain what the rewriter reported, in batches (the UI shows a flow again at its
            # end anyway) and at the end: the flow's records are capped, so an endless stream
            # holds no growing list here either.
            if end or len(rewriter.changes) >= DRAIN_EVERY:
                self._note(flow, "response", rewriter.changes)
                rewriter.changes.clear()
            for problem in rewriter.problems:
                self._problem(flow, problem)
            rewriter.problems.clear()

        def on_error(exc: Exception) -> None:  # never let an exception reach mitmproxy's loop
            self._problem(flow, f"stream rewriting failed: {exc!r}")

        return stream_function(
            rewriter, report, on_error, drain_every=DRAIN_EVERY, forward_input=observe
        )

    # --- scope and bookkeeping ---------------------------------------------------------------

    def _in_scope(self, flow: http.HTTPFlow) -> bool:
        return self._every_host or scope.covers(self.hosts, flow.request.host, flow.request.port)

    def _rules_for(self, flow: http.HTTPFlow) -> rules.RuleSet | None:
        """The id rules of the flow's upstream (None: it takes any id); looked up once per
        host (agents talk to a handful)."""
        upstream = (flow.request.host, flow.request.port)
        if upstream not in self._rules_of_host:
            if len(self._rules_of_host) >= _HOSTS_REMEMBERED:
                self._rules_of_host.clear()
            self._rules_of_host[upstream] = self._lookup_rules(*upstream)
        return self._rules_of_host[upstream]

    def _lookup_rules(self, host: str, port: int) -> rules.RuleSet | None:
        name = scope.first(self.host_rules, host, port)
        if name is None and scope.covers(self.strict_hosts, host, port):
            name = "safe"
        if name is None:
            name = scope.first(_DEFAULT_HOST_RULES, host, port)
        return rules.RULE_SETS.get(name or rules.NO_RULES)

    def _note(self, flow: http.HTTPFlow, side: str, changes: Sequence[Change]) -> None:
        """Record changes in the flow's metadata (at most MAX_RECORDS per side) and mark it."""
        if not changes:
            return
        record = self._record(flow)
        records = record.setdefault(side, [])
        room = max(0, MAX_RECORDS - len(records))
        records.extend(report.as_records(changes[:room]))
        if len(changes) > room:
            record[f"{side}_omitted"] = record.get(f"{side}_omitted", 0) + len(changes) - room
        if not flow.marked and any(change.action != "kept" for change in changes):
            flow.marked = MARK_CHANGED

    def _comment(self, flow: http.HTTPFlow) -> None:
        """Summarise the flow's records in its comment (once per hook, never per chunk)."""
        record = flow.metadata.get("toolid")
        if not record or not (record.get("request") or record.get("response")):
            return
        observe = record["observe"]
        requests, responses = record.get("request", []), record.get("response", [])
        omitted = record.get("request_omitted", 0) + record.get("response_omitted", 0)
        summarised = (len(requests), len(responses), omitted)
        if self._summarised.get(flow) == summarised:
            return  # nothing recorded since the comment was written
        summary = report.summary([*requests, *responses] if requests else responses, observe)
        more = f" (+{omitted} more not recorded)" if omitted else ""
        flow.comment = f"toolid{' (observe)' if observe else ''}: {summary}{more}"
        self._summarised[flow] = summarised

    def _problem(self, flow: http.HTTPFlow, message: str) -> None:
        record = self._record(flow)
        problems = record.setdefault("problems", [])
        if not problems:
            logger.warning(f"toolid: {_describe(flow)}: {message}")
        problems.append(message)
        flow.marked = MARK_PROBLEM

    def _record(self, flow: http.HTTPFlow) -> dict[str, Any]:
        record: dict[str, Any] = flow.metadata.setdefault("toolid", {})
        record.setdefault("observe", self.observe)
        return record

    def _finish(self, flow: http.HTTPFlow) -> None:
        record = flow.metadata.get("toolid")
        if record and (record.get("request") or record.get("response")):
            self._comment(flow)
            self._log_change(flow.comment, _where(flow))

    def _log_change(self, comment: str, where: _Where) -> None:
        """Log one flow's change line (INFO): its comment and request. In mitmproxy's event
        loop, the lines are gathered, and written as one record at most every LOG_EVERY
        seconds (made then, after the flow's response has gone): mitmproxy hands every record
        to every addon (about a quarter of a millisecond here, more than rewriting a response
        costs), a line within a record costs next to nothing."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in an event loop (a script, a test): at once
            logger.info(_change_line(comment, where))
            return
        if not self._pending_lines:
            loop.call_later(LOG_EVERY, self._flush_lines)
        self._pending_lines.append((comment, where))

    def _flush_lines(self) -> None:
        lines, self._pending_lines = self._pending_lines, []
        if lines:
            logger.info("\n".join(_change_line(comment, where) for comment, where in lines))


_DEFAULT_HOST_RULES = scope.parse_assignments(rules.DEFAULT_HOST_RULES, rules.RULE_SETS)


def _streaming_requested(content: bytes, document: Any = None) -> bool:
    """Whether a request body says ``"stream": true``: read off the parsed ``document`` when
    there is one, else by a byte search for the member name (far cheaper on a long history
    than a regex tried at every quote)."""
    if isinstance(document, dict):
        return document.get("stream") is True
    at = content.find(b'"stream"')
    while at >= 0:
        if _STREAM_VALUE.match(content, at + 8):
            return True
        at = content.find(b'"stream"', at + 8)
    return False


def _policy(
    direction: Direction, profile: Profile, rule_set: rules.RuleSet | None = None
) -> Policy:
    """The flow's policy (frozen: those without rules are made once)."""
    if rule_set is None:
        return _plain_policy(direction, profile)
    return Policy(direction, profile, rule_set)


@functools.cache
def _plain_policy(direction: Direction, profile: Profile) -> Policy:
    return Policy(direction, profile)


def _header(message: http.Message, name: bytes) -> str | None:
    """``message.headers.get(name)`` (``name`` in lower case), read off the header fields:
    mitmproxy's own lookup costs microseconds, and each flow asks a few times."""
    values = [value for key, value in message.headers.fields if key.lower() == name]
    if not values:
        return None
    return ", ".join(value.decode("utf-8", "surrogateescape") for value in values)


def _set_header(message: http.Message, name: bytes, value: bytes) -> None:
    """``message.headers[name] = value`` (``name`` in lower case), as mitmproxy sets it (the
    first field of that name takes the value, keeping its spelling; the others go), on the
    header fields: mitmproxy's own setter costs some ten microseconds."""
    fields = []
    placed = False
    for field in message.headers.fields:
        if field[0].lower() != name:
            fields.append(field)
        elif not placed:
            fields.append((field[0], value))
            placed = True
    if not placed:
        fields.append((name, value))
    message.headers.fields = tuple(fields)


def _set_content(message: http.Message, content: bytes) -> None:
    """``message.content = content``, with fewer header lookups when there is nothing to
    encode (as mitmproxy does it: Content-Length follows, unless Transfer-Encoding is set)."""
    if _header(message, b"content-encoding") or _header(message, b"transfer-encoding") is not None:
        message.content = content
    else:
        message.raw_content = content
        _set_header(message, b"content-length", str(len(content)).encode())


def _api_of(flow: http.HTTPFlow) -> Api | None:
    known = _APIS.get(flow.metadata.get("toolid", {}).get("api"))
    return known or api_from_path(flow.request.path)


_APIS: dict[str, Api] = {api.value: api for api in Api}


def _is_json(content_type: str) -> bool:
    return "json" in content_type.lower()


type _Where = tuple[bytes, str, bytes]  # a request's method, host and path, as mitmproxy has them


def _where(flow: http.HTTPFlow) -> _Where:
    data = flow.request.data
    return data.method, data.host, data.path


def _describe(flow: http.HTTPFlow) -> str:
    """Method, upstream host and path: never headers, query strings or bodies."""
    return _description(_where(flow))


def _description(where: _Where) -> str:
    """``_describe`` of a request's method, host and path (as the request's properties
    decode them)."""
    method, host, path = where
    path_only = path.decode("utf-8", "surrogateescape").split("?", 1)[0]
    text = f"{method.decode('utf-8', 'surrogateescape').upper()} {host}{path_only}"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # undecodable path bytes


def _change_line(comment: str, where: _Where) -> str:
    return f"{comment} [{_description(where)}]"


def _parse_hosts(option: str, values: Sequence[str]) -> tuple[scope.HostPattern, ...]:
    try:
        return scope.parse(values)
    except ValueError as exc:
        raise exceptions.OptionsError(f"{option}: {exc}") from None


# --- toolid.trace ------------------------------------------------------------------------------


_ROLES = {"response": "created", "request": "replayed"}


def _every_flow() -> Sequence[mflow.Flow]:
    try:
        flows: Sequence[mflow.Flow] = ctx.master.commands.call("view.flows.resolve", "@all")
    except exceptions.CommandError:
        raise exceptions.CommandError(
            "toolid.trace needs mitmproxy's flow list (mitmproxy or mitmweb; mitmdump keeps none)"
        ) from None
    return flows


def trace_lines(tool_id: str, flows: Sequence[mflow.Flow]) -> list[str]:
    """One line per position of ``tool_id`` (raw or encoded) in ``flows``, in flow order.

    ``#N`` is the flow's position (from 1) among ``flows``; a response is where the id was
    created, a request where it was replayed.

    Each side of a flow is matched by toolid's records in ``flow.metadata`` when they
    mention the id (they always do for an id toolid changed or would change), else by
    scanning the stored body (conforming ids, flows toolid never saw, flows from a file).
    """
    raw = codec.decode(tool_id)
    lines = []
    for number, flow in enumerate(flows, 1):
        if not isinstance(flow, http.HTTPFlow):
            continue
        path = flow.request.path.split("?", 1)[0]
        for side, where, action in _sightings_in(flow, tool_id, raw):
            detail = f"{_ROLES[side]}, {action}" if action else _ROLES[side]
            lines.append(f"#{number} {flow.request.method} {path} {side} {where} ({detail})")
    return lines


def _sightings_in(
    flow: http.HTTPFlow, tool_id: str, raw: str
) -> list[tuple[annotate.Side, str, str]]:
    record = flow.metadata.get("toolid")
    record = record if isinstance(record, dict) else {}
    api = _api_of(flow)
    found: list[tuple[annotate.Side, str, str]] = []
    sides: tuple[tuple[annotate.Side, http.Message | None], ...] = (
        ("request", flow.request),
        ("response", flow.response),
    )
    # A tagged client id names one call: follow its client id, never the raw id that
    # other calls carry too.
    by_raw = codec.occurrence(tool_id) == 1
    for side, message in sides:
        recorded = [
            (side, str(change.get("path")), str(change.get("action")))
            for change in record.get(side) or ()
            if isinstance(change, dict)
            and (
                change.get("client") == tool_id
                or (by_raw and change.get("raw") in (raw, tool_id))
            )
        ]
        if recorded:
            found.extend(recorded)
            continue
        content = message.get_content(strict=False) if message is not None else None
        if not content or message is None:
            continue
        kind = annotate.body_kind(content, message.headers.get("content-type"))
        for sighting in annotate.sightings(content, side, api, kind=kind):
            if sighting.value == tool_id or (by_raw and sighting.raw == raw):
                event = "" if sighting.event is None else f"event {sighting.event} "
                found.append((side, event + sighting.path, ""))
    return found


# --- the contentview ---------------------------------------------------------------------------

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
        side, flow = _side_and_flow(metadata)
        if side is None:
            raise ValueError("not an HTTP body")
        api = _api_of(flow) if flow else None
        kind = annotate.body_kind(data, metadata.content_type)
        text = annotate.annotate(data, side, api, kind=kind, profile=_profile())
        notes = _flow_notes(flow, side) if flow else []
        return "\n".join([*notes, text])

    def render_priority(self, data: bytes, metadata: contentviews.Metadata) -> float:
        side, flow = _side_and_flow(metadata)
        if side is None or not data:
            return -1
        kind = annotate.body_kind(data, metadata.content_type)
        if kind is None:
            return -1
        if flow is not None and (_api_of(flow) is not None or _flow_notes(flow, side)):
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
    return notes


def _profile() -> codec.Profile:
    try:
        profile = ctx.options.toolid_profile
    except AttributeError:  # no master, or the option is not loaded
        return "safe"
    return "call" if profile == "call" else "safe"


def _unregister(view: ToolIdView) -> None:
    """Take ``view`` out of mitmproxy's contentview registry, if it is still the one there.

    mitmproxy 12 has no public way to remove a contentview (``contentviews.remove`` is a
    deprecated no-op), so this reaches into the registry's table, carefully.
    """
    table = getattr(contentviews.registry, "_by_name", None)
    if isinstance(table, dict) and table.get(view.name) is view:
        del table[view.name]


addons = [ToolId()]
