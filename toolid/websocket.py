"""The OpenAI Responses API over WebSocket (Codex CLI's default transport), sans I/O.

One ``ResponsesConnection`` per WebSocket connection. Each text message is one JSON
document, rewritten through the same table and code as HTTP (``body.rewrite``):

- a client message (``{"type": "response.create", ...}``) is one Responses request: its
  ids are restored (and obey the destination's rules), as ``rewrite_request`` does;
- a server message is one Responses streaming event (the JSON an SSE event's ``data:``
  would hold): its ids get client ids, one per call across the events of one response, as
  ``ResponseStream`` does.

**Which ids are taken** (occurrence tags, docs/wire-format.md, "One WebSocket connection"):
after the first turn a client sends only the new items, with ``previous_response_id``, so
the history a response's calls could collide with is not in any one request. On a
connection, *taken* is every client id at a definition position of any client message so
far, plus every client id already given to a call of a response on it. That state is the
connection's, and goes with it; restoring never depends on it.

**Where a response starts**: at its ``response.created`` event, or, from a server that sends
none, at the first server message after a ``response.create``. Calls are numbered per
response (``output_index``), so every response gets its own ``CallIds``; the client ids
given by the previous one are then added to what the connection takes.

Nothing raises for what a peer sends: a message that cannot be rewritten comes back
unchanged, with a problem that says why.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from toolid import body, codec
from toolid.apis import apis_framed_as
from toolid.decide import Direction, Policy
from toolid.edit import RewriteError
from toolid.occurrence import CallIds, Taken
from toolid.positions import Doc
from toolid.problem import UNEXPECTED_ERROR, UNREWRITABLE, Problem
from toolid.rewrite import Rewritten, RewrittenRequest, rewrite_request, rule_set_named
from toolid.rules import RuleSet

__all__ = ["ResponsesConnection"]

logger = logging.getLogger(__name__)

# The lifecycle events of a response, spelled as a member "type" (a JSON string holds no bare
# quote, so these bytes are a real key and value, never text inside a string).
_LIFECYCLE: Final = re.compile(
    rb'"type"\s*:\s*"(response\.(?:created|completed|failed|incomplete)|error)"'
)
_CREATE: Final = re.compile(rb'"type"\s*:\s*"response\.create"')
_ENDS: Final = frozenset({b"response.completed", b"response.failed", b"response.incomplete"})
_LAZY_FRAMES: Final = 8  # client messages whose taken ids are read only when asked
(_API,) = apis_framed_as("websocket")  # the one API spoken over WebSocket (Responses)


class ResponsesConnection:
    """Rewrite the messages of one Responses-over-WebSocket connection, in the order they
    pass (``client_message`` for each text message from the client, ``server_message`` for
    each one from the server). Binary messages are not part of the protocol: pass them on."""

    def __init__(
        self,
        *,
        rules: RuleSet | str | None = None,
        profile: codec.Profile = "safe",
    ) -> None:
        """``rules``: the destination's id rule set (or its name), as for
        ``rewrite_request``; ``profile``: which client ids the client accepts. Raises
        ValueError for an unknown rule set."""
        self.profile: codec.Profile = profile
        self._rules = rule_set_named(rules)
        self._encode = Policy(Direction.ENCODE, profile)
        self._defined: frozenset[str] = frozenset()  # read from client messages
        self._lazy: list[Taken] = []  # client messages' ids, read when asked
        self._given: set[str] = set()  # client ids given by the earlier responses
        self._calls: CallIds | None = None  # the current response's
        self._fresh = True  # a response.create came: the next server message starts one
        self.responses = 0  # responses begun so far
        self.ended = False  # the last server message ended a response

    @property
    def taken(self) -> Taken:
        """What the connection takes now (the next response's calls avoid these ids)."""
        given = self._given | set(self._calls.given) if self._calls else self._given
        return Taken.union([Taken.of(self._defined | given), *self._lazy])

    def client_message(self, content: bytes) -> RewrittenRequest:
        """A text message from the client: a Responses request (``response.create``)."""
        try:
            result = rewrite_request(content, api=_API, rules=self._rules, profile=self.profile)
            if _CREATE.search(content) is not None:
                self._fresh = True
            self._take(result.taken)
        except Exception as exc:  # a bug: never let it reach the caller's connection
            logger.debug("toolid websocket rewriter failed", exc_info=True)
            return RewrittenRequest(
                content,
                problems=(_unexpected(exc),),
                source=content,
            )
        return result

    def server_message(self, content: bytes) -> Rewritten:
        """A text message from the server: one Responses streaming event."""
        try:
            lifecycle = _LIFECYCLE.search(content)
            kind = lifecycle.group(1) if lifecycle else None
            if self._calls is None or self._fresh or kind == b"response.created":
                self._begin()
            self.ended = kind in _ENDS or kind == b"error"
            calls = self._calls
            assert calls is not None
            try:
                new, plan = body.rewrite(content, _API, Doc.EVENT, self._encode, calls)
            except RewriteError as exc:
                problem = Problem(UNREWRITABLE, f"event left unchanged: {exc}")
                return Rewritten(content, problems=(problem,), api=_API)
        except Exception as exc:
            logger.debug("toolid websocket rewriter failed", exc_info=True)
            return Rewritten(content, problems=(_unexpected(exc),))
        return Rewritten(new, plan.changes, (), _API)

    def _begin(self) -> None:
        """A new response: the previous one's client ids are taken from now on."""
        if self._calls is not None:
            self._given.update(self._calls.given)
        self._calls = CallIds(self.profile, self.taken)
        self._fresh = False
        self.responses += 1

    def _take(self, taken: Taken) -> None:
        known = taken.known()
        if known is not None:
            self._defined |= known
            return
        self._lazy.append(taken)
        if len(self._lazy) > _LAZY_FRAMES:  # bounded: the oldest is read now
            self._defined |= self._lazy.pop(0).ids()


def _unexpected(exc: Exception) -> Problem:
    """The problem of a message an unforeseen error left unchanged."""
    return Problem(UNEXPECTED_ERROR, f"message left unchanged: unexpected error {exc!r}")
