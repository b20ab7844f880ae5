"""The library's entry points: rewrite a request, a response, a response stream.

Each takes bytes and a small policy (the API, the profile, the destination's rule set) and
gives a ``Rewritten``: the bytes to forward plus what changed and what went wrong. Nothing
raises for what a peer sends: a body that cannot be rewritten safely comes back unchanged,
with a problem that says why. The state that ties a response to its request (the ids its
history defines, for occurrence tags) travels in ``Rewritten.taken``; nothing else outlives
one call, so any number of processes restore any id.

    request = toolid.rewrite_request(body, path="/v1/chat/completions")
    upstream_body = request.body  # native ids restored
    response = toolid.rewrite_response(answer, api=request.api, taken=request.taken)
    client_body = response.body  # safe, reversible client ids
"""

from __future__ import annotations

import re
from typing import Final, Literal

from toolid import body, codec, eventstream
from toolid.apis import api_from_path, streamed_route
from toolid.decide import Change, Direction, Policy
from toolid.edit import RewriteError
from toolid.eventstream_rewrite import EventStreamRewriter
from toolid.jsonarray_rewrite import JsonArrayRewriter
from toolid.locate import Located
from toolid.occurrence import NOTHING_TAKEN, CallIds, Taken
from toolid.pairing import check_request
from toolid.positions import Api, Doc
from toolid.problem import UNREWRITABLE, Problem
from toolid.rules import NO_RULES, RULE_SETS, RuleSet
from toolid.stream import DEFAULT_MAX_EVENT_BYTES, PieceRewriter, StreamRewriter


class Rewritten:
    """What rewriting one body (or one piece of a stream, or one message) gives: the bytes to
    forward and what changed. Read-only: a plain class, not a frozen dataclass, because one is
    made for every piece of a stream (a fifth of the time). A request's is a
    ``RewrittenRequest``."""

    __slots__ = ("api", "body", "changes", "problems")

    def __init__(
        self,
        body: bytes,
        changes: tuple[Change, ...] = (),
        problems: tuple[Problem, ...] = (),
        api: Api | None = None,
    ) -> None:
        self.body = body  # what to forward: the input itself when nothing changed
        self.changes = changes
        self.problems = problems  # why something could not be rewritten (it passed as it came)
        self.api = api  # the API the body was read as (None: not recognised)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(body=<{len(self.body)} bytes>, changes={self.changes!r}, "
            f"problems={self.problems!r}, api={self.api!r})"
        )

    @property
    def changed(self) -> bool:
        """Whether ``body`` differs from the input."""
        return any(change.action != "kept" for change in self.changes)


class RewrittenRequest(Rewritten):
    """What rewriting a request gives: a ``Rewritten``, plus what its response needs
    (``taken``) and what can be asked of the request as the client sent it."""

    __slots__ = ("_located", "_source", "taken")

    def __init__(
        self,
        body: bytes,
        changes: tuple[Change, ...] = (),
        problems: tuple[Problem, ...] = (),
        api: Api | None = None,
        *,
        source: bytes,
        taken: Taken = NOTHING_TAKEN,
        located: Located | None = None,
    ) -> None:
        super().__init__(body, changes, problems, api)
        self.taken = taken  # the ids its history defines: for ``rewrite_response`` of its answer
        self._source = source  # the request as it came
        self._located = located  # what rewriting it read

    def pairing_problems(self) -> list[Problem]:
        """The pairing problems of the request's history as the client sent it
        (``check_pairing``), from what rewriting it read (nothing is read twice)."""
        return check_request(self._source, api=self.api, located=self._located)

    def asks_to_stream(self) -> bool:
        """Whether the request says ``"stream": true`` (its response will be an event stream).

        A body parsed in full is asked; otherwise the member is looked for in the first and
        the last ``STREAM_NEAR_ENDS`` bytes, where clients put it (a history fills the middle
        of a long body). This says only whether to ask the upstream for an uncompressed
        answer: a stream compressed anyway is decompressed on its way (``ResponseStream``)."""
        document = None if self._located is None else self._located.document
        if isinstance(document, dict):
            return document.get("stream") is True
        content = self.body
        near = STREAM_NEAR_ENDS
        ends = (
            [(0, len(content))]
            if len(content) <= 2 * near
            else [(0, near), (len(content) - near, len(content))]
        )
        for start, stop in ends:
            at = content.find(b'"stream"', start, stop)
            while at >= 0:
                if _STREAM_TRUE.match(content, at + 8):
                    return True
                at = content.find(b'"stream"', at + 8, stop)
        return False


#: How far from either end of a body ``Rewritten.asks_to_stream`` looks for "stream".
STREAM_NEAR_ENDS: Final = 64 * 1024
_STREAM_TRUE: Final = re.compile(rb"\s*:\s*true")


def rewrite_request(
    content: bytes,
    *,
    path: str = "",
    api: Api | str | None = None,
    rules: RuleSet | str | None = None,
    profile: codec.Profile = "safe",
) -> RewrittenRequest:
    """Restore the upstream's own ids in a request body (client to upstream).

    ``api``: the API of the body, else the one ``path`` names, else recognised by its shape.
    ``rules``: the destination's id rule set (or its name, see ``toolid.rules.RULE_SETS``):
    then each position gets an id the destination accepts. The result's ``taken`` goes to
    ``rewrite_response`` / ``ResponseStream`` for the answer to this request.
    """
    api = _api(api, path)
    policy = _policy(Direction.DECODE, profile, rule_set_named(rules))
    try:
        new, plan = body.rewrite(content, api, Doc.REQUEST, policy)
    except RewriteError as exc:
        return RewrittenRequest(
            content,
            problems=(Problem(UNREWRITABLE, f"request left unchanged: {exc}"),),
            api=api,
            source=content,
            taken=Taken(content, api),
        )
    defined = plan.definitions()
    taken = Taken.of(defined) if defined is not None else Taken(content, plan.api or api)
    return RewrittenRequest(
        new, plan.changes, (), plan.api or api, source=content, taken=taken, located=plan.located
    )


def rewrite_response(
    content: bytes,
    *,
    path: str = "",
    api: Api | str | None = None,
    taken: Taken = NOTHING_TAKEN,
    profile: codec.Profile = "safe",
) -> Rewritten:
    """Give the tool calls of a buffered response body safe, reversible client ids
    (upstream to client). ``taken``: what the request's ``Rewritten.taken`` says."""
    api = _api(api, path)
    policy = _policy(Direction.ENCODE, profile)
    try:
        new, plan = body.rewrite(content, api, Doc.RESPONSE, policy, CallIds(profile, taken))
    except RewriteError as exc:
        problem = Problem(UNREWRITABLE, f"response left unchanged: {exc}")
        return Rewritten(content, problems=(problem,), api=api)
    return Rewritten(new, plan.changes, (), plan.api or api)


type Framing = Literal["sse", "eventstream", "json-array"]
#: The response content type of each framing ``ResponseStream`` reads by its type alone.
FRAMINGS: Final[dict[str, Framing]] = {
    "text/event-stream": "sse",
    eventstream.CONTENT_TYPE: "eventstream",
}


def framing_of(content_type: str, path: str = "") -> Framing | None:
    """The framing of a response by its Content-Type, and by the request's ``path`` (query
    allowed) for a JSON answer to a streaming route (Gemini's ``:streamGenerateContent``
    without ``?alt=sse``: a JSON array written element by element). None: not a stream."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    framing = FRAMINGS.get(media_type)
    if framing is None and "json" in media_type and path and streamed_route(path):
        return "json-array"
    return framing


class ResponseStream:
    """Rewrite an event-stream response fed in pieces of any size, sans I/O: like
    ``rewrite_response`` for each event, one client id per call across all its events.

    ``framing``: ``"sse"`` (Server-Sent Events, ``text/event-stream``), ``"eventstream"``
    (AWS's binary ``application/vnd.amazon.eventstream``: Bedrock's ConverseStream and
    InvokeModelWithResponseStream) or ``"json-array"`` (a JSON array written element by
    element: Gemini's ``:streamGenerateContent`` without ``?alt=sse``); see ``framing_of``.
    ``feed`` each piece as it arrives, then ``finish`` once; each gives the bytes that can be
    forwarded now (possibly empty: an incomplete event is held). ``decodes``: the output is
    decompressed (a server compressed the stream anyway), so drop Content-Encoding."""

    def __init__(
        self,
        *,
        path: str = "",
        api: Api | str | None = None,
        taken: Taken = NOTHING_TAKEN,
        profile: codec.Profile = "safe",
        content_encoding: str = "",
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        framing: Framing = "sse",
    ) -> None:
        """Raises ValueError for a content-encoding it cannot decode."""
        rewriters: dict[Framing, type[PieceRewriter]] = {
            "sse": StreamRewriter,
            "eventstream": EventStreamRewriter,
            "json-array": JsonArrayRewriter,
        }
        self._rewriter: PieceRewriter = rewriters[framing](
            _api(api, path),
            _policy(Direction.ENCODE, profile),
            content_encoding=content_encoding,
            max_event_bytes=max_event_bytes,
            calls=CallIds(profile, taken),
        )

    @property
    def decodes(self) -> bool:
        """Whether the output is decompressed (the caller must drop Content-Encoding)."""
        return self._rewriter.decodes

    @property
    def api(self) -> Api | None:
        """The API the stream is read as (None until recognised)."""
        return self._rewriter.api

    def feed(self, piece: bytes) -> Rewritten:
        """The next piece of the body; what can be forwarded now, and what it changed."""
        return self._taken(self._rewriter.feed(piece))

    def finish(self) -> Rewritten:
        """The body has ended: everything still held (an incomplete event as it came)."""
        return self._taken(self._rewriter.finish())

    def _taken(self, out: bytes) -> Rewritten:
        rewriter = self._rewriter
        if not rewriter.changes and not rewriter.problems:
            return Rewritten(out, api=rewriter.api)
        changes, problems = tuple(rewriter.changes), tuple(rewriter.problems)
        rewriter.changes.clear()
        rewriter.problems.clear()
        return Rewritten(out, changes, problems, rewriter.api)


def taken_ids(request: bytes, api: Api | None = None) -> Taken:
    """The client ids a request's history defines (read only when a candidate id is asked
    for and spelled in it): what ``rewrite_response`` takes to tag reused ids."""
    return Taken(request, api)


def _api(api: Api | str | None, path: str) -> Api | None:
    """The API given (by name too: "chat", "responses", "gemini", ...), else the one ``path``
    names. Raises ValueError for a name that is no API's."""
    if api is None:
        return api_from_path(path)
    return Api(api)


def rule_set_named(value: RuleSet | str | None) -> RuleSet | None:
    """The rule set given, or the one of that name (``toolid.rules.RULE_SETS``; ``"none"``:
    None). Raises ValueError for a name that is no rule set's."""
    if value is None or isinstance(value, RuleSet):
        return value
    if value == NO_RULES:
        return None
    try:
        return RULE_SETS[value]
    except KeyError:
        names = ", ".join([*RULE_SETS, NO_RULES])
        raise ValueError(f"unknown rule set {value!r} (one of {names})") from None


_PLAIN_POLICIES: Final = {
    (direction, profile): Policy(direction, profile)
    for direction in Direction
    for profile in codec.PROFILES
}


def _policy(
    direction: Direction, profile: codec.Profile, rule_set: RuleSet | None = None
) -> Policy:
    if rule_set is None:
        return _PLAIN_POLICIES[(direction, profile)]
    return Policy(direction, profile, rule_set)
