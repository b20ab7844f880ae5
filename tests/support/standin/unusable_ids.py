"""``UnusableIdsUpstream``: a Chat Completions stand-in whose tool calls carry ids a client
cannot use as they are, and that checks every later request gives them back exactly.

One ``shape`` per server, the same every tool turn (``calls_of``):

- ``missing``: the call has no ``id`` member at all (in no chunk of a stream);
- ``null``: ``"id": null`` (in every chunk of a stream);
- ``number``: ``"id": 7``, the same number every turn, as MiniMax sends it;
- ``empty``: ``"id": ""``;
- ``changing``: a stream whose call starts with ``chatcmpl-tool-<hex>`` (fresh every turn)
  and whose later argument chunks of the same index carry ``"id": "toolcall0"``; a buffered
  answer carries the first id only;
- ``index0-only``: two parallel calls; the first has a ``chatcmpl-tool-<hex>`` id, the
  second none (in no chunk of a stream: SGLang's way).

Every request's history is checked (``history_problem``): the k-th assistant message with
tool calls must hold the calls of the k-th tool turn, each under the id the stand-in emitted,
of the same JSON type (the number 7, not "7"; the first id of a ``changing`` call; ``""``
for ``empty``); a call emitted with no id (missing or null) must come back with a non-empty
string id matching ``^[A-Za-z0-9_-]+$``, distinct from every other call id of the history.
Each ``tool`` message must answer, by that exact id, a call of the assistant message before
it that no other result answered, and every call must be answered before the next turn. A
violation is answered 400 with a message that says which position holds what, and is kept
in the scenario's ``violations``. Three tool turns (by default), then a final text.

``scenario(shape)`` registers on a shared ``UpstreamServer`` (one test's own path prefix);
``UnusableIdsUpstream(shape)`` is a server of its own, at the root:

    handle = server.scenario(scenario("number"))
    openai.OpenAI(base_url=handle.base_url("chat"), ...)
    handle.scenario.violations  # [] when every id came back exactly
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from . import chat, sse
from .agent import FINAL_TEXT, SAFE_ID, ReuseUpstream
from .apis import API, StreamFraming
from .replies import MODEL, Event, Reply, dict_items, dumps
from .server import Exchange, Scenario

Shape = Literal["missing", "null", "number", "empty", "changing", "index0-only"]
SHAPES: tuple[Shape, ...] = get_args(Shape)
NUMBER = 7  # the numeric id of the ``number`` shape, every turn
LATER_ID = "toolcall0"  # what the later chunks of a ``changing`` call carry


class Missing(enum.Enum):
    """No ``id`` member at all."""

    MISSING = "missing"


MISSING = Missing.MISSING
type IdValue = str | int | Missing | None  # an id position's JSON value, or its absence


@dataclass(frozen=True)
class Emitted:
    """The id one call carries: ``first`` in its buffered document or first stream chunk,
    ``later`` in the later chunks of its stream."""

    first: IdValue
    later: IdValue = MISSING

    @property
    def minted(self) -> bool:
        """Whether the call has no usable id (missing or null): the client must make one."""
        return self.first is MISSING or self.first is None


def vllm_id(turn: int, index: int) -> str:
    """A vLLM-style call id, fresh for every turn and call."""
    digest = hashlib.sha256(f"standin:{turn}:{index}".encode()).hexdigest()[:32]
    return f"chatcmpl-tool-{digest}"


def calls_of(shape: Shape, turn: int) -> list[Emitted]:
    """The ids of the calls of tool turn ``turn`` (1-based) in ``shape``."""
    if shape == "missing":
        return [Emitted(MISSING)]
    if shape == "null":
        return [Emitted(None, None)]
    if shape == "number":
        return [Emitted(NUMBER)]
    if shape == "empty":
        return [Emitted("")]
    if shape == "changing":
        return [Emitted(vllm_id(turn, 0), LATER_ID)]
    return [Emitted(vllm_id(turn, 0)), Emitted(MISSING)]


def describe(value: IdValue) -> str:
    """An id value as an error message shows it: its JSON text and type."""
    if value is MISSING:
        return "no id"
    kind = {str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    return f"{json.dumps(value)} ({kind.get(type(value), 'null')})"


def same(got: IdValue, want: IdValue) -> bool:
    """The same JSON value of the same JSON type (7 is not "7", 7.0 or true)."""
    return type(got) is type(want) and got == want


def _with_id(value: IdValue, rest: dict[str, Any]) -> dict[str, Any]:
    """A tool-call object with ``"id": value`` first (as vLLM writes it), or with no id."""
    return rest if value is MISSING else {"id": value, **rest}


@dataclass
class UnusableIdsScenario(Scenario):
    """A Scenario whose tool turns render ``shape``'s ids (Chat Completions only; the final
    answer is the usual one) and whose ``check`` first checks a Chat request's history
    (``history_problem``), keeping what it finds in ``violations``, then runs the ``check``
    it was given, if any."""

    shape: Shape = "missing"
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        assert len(self.ids) == len(calls_of(self.shape, 1)), "one id per call: they count calls"
        given = self.check

        def check(ex: Exchange) -> str | None:
            if ex.api == "chat" and isinstance(ex.json, dict):
                found = history_problem(self.shape, self.turns, ex.json)
                if found is not None:
                    self.violations.append(found)
                    return found
            return given(ex) if given is not None else None

        self.check: Callable[[Exchange], str | None] | None = check

    def placeholders(self, turn: int = 1) -> dict[str, str]:
        return {}  # the ids are written into the templates as they are

    def templates(
        self,
        api: API,
        stream: bool,
        turn: int = 1,
        model: str = MODEL,
        framing: StreamFraming = "sse",
    ) -> list[bytes]:
        if turn > self.turns:
            return super().templates(api, stream, turn, model, framing)
        assert api == "chat", f"the {self.shape!r} stand-in speaks Chat Completions, not {api}"
        reply = self.reply(api, turn, model)
        emitted = calls_of(self.shape, turn)
        if not stream:
            doc = chat.buffered(reply)
            calls = doc["choices"][0]["message"]["tool_calls"]
            for n, e in enumerate(emitted):
                rest = {k: v for k, v in calls[n].items() if k != "id"}
                calls[n] = _with_id(e.first, rest)
            return [dumps(doc).encode("utf-8")]
        return sse.frames(self._events(reply, emitted), self.sse_style)

    @staticmethod
    def _events(reply: Reply, emitted: list[Emitted]) -> list[Event]:
        """A role delta, each call (its first chunk with type and name, its argument chunks),
        the finish reason, ``[DONE]``."""
        m = reply.model
        events = [chat.chunk({"role": "assistant", "content": ""}, model=m)]
        for i, (c, e) in enumerate(zip(reply.calls, emitted, strict=True)):
            rest = {"type": "function", "index": i, "function": {"name": c.name, "arguments": ""}}
            events.append(chat.chunk({"tool_calls": [_with_id(e.first, rest)]}, model=m))
            for frag in c.fragments:
                part = _with_id(e.later, {"index": i, "function": {"arguments": frag}})
                events.append(chat.chunk({"tool_calls": [part]}, model=m))
        events.append(chat.chunk({}, "tool_calls", m))
        events.append(chat.DONE)
        return events


def history_problem(shape: Shape, turns: int, req: dict[str, Any]) -> str | None:
    """Why a request's history does not give back the ids ``shape`` emitted, or None."""
    turn = 0
    pending: list[IdValue] = []  # the latest turn's call ids no result answered yet
    call_ids: list[str] = []  # the ids of the minted calls so far
    for i, m in dict_items(req.get("messages")):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            if pending:
                return (
                    f"messages[{i}]: the calls {', '.join(map(describe, pending))} of the "
                    "assistant message before it have no result"
                )
            turn += 1
            if turn > turns:
                return f"messages[{i}]: tool turn {turn}, but the stand-in answered {turns}"
            emitted = calls_of(shape, turn)
            calls = dict_items(m["tool_calls"])
            if len(calls) != len(emitted):
                return (
                    f"messages[{i}].tool_calls holds {len(calls)} calls; the stand-in's tool "
                    f"turn {turn} had {len(emitted)}"
                )
            for (j, tc), e in zip(calls, emitted, strict=True):
                where = f"messages[{i}].tool_calls[{j}].id"
                got: IdValue = tc.get("id", MISSING)
                if e.minted:
                    if not (isinstance(got, str) and SAFE_ID.fullmatch(got)):
                        return (
                            f"Invalid '{where}': {describe(got)}. The stand-in sent this call "
                            "without an id; expected a non-empty string matching "
                            "^[A-Za-z0-9_-]+$."
                        )
                    if got in call_ids:
                        return f"Invalid '{where}': {describe(got)} names an earlier call too."
                    call_ids.append(got)
                elif not same(got, e.first):
                    return (
                        f"Invalid '{where}': {describe(got)}. The stand-in sent this call "
                        f"with the id {describe(e.first)}."
                    )
                pending.append(got)
        elif m.get("role") == "tool":
            got = m.get("tool_call_id", MISSING)
            answered = next((n for n, p in enumerate(pending) if same(got, p)), None)
            if answered is None:
                return (
                    f"Invalid 'messages[{i}].tool_call_id': {describe(got)} answers no "
                    "unanswered call of the assistant message before it "
                    f"(its calls left: {', '.join(map(describe, pending)) or 'none'})."
                )
            del pending[answered]
    return None


def scenario(
    shape: Shape,
    *,
    name: str = "bash",
    arguments: str = '{"command": "ls"}',
    turns: int = 3,
    **options: Any,
) -> UnusableIdsScenario:
    """The scenario of ``shape``: ``turns`` tool turns calling ``name`` with ``arguments`` (a
    JSON text, streamed in thirds), then ``FINAL_TEXT``; a request that offers no tools gets
    the final text, answered with the request's model. ``options``: more ``Scenario`` fields
    (``max_requests``, transport)."""
    settings: dict[str, Any] = {
        "argument_fragments": (),
        "final_text": FINAL_TEXT,
        "final_fragments": (),
        "preamble": {},
        "needs_tools": True,
        "echo_model": True,
        **options,
    }
    ids = [f"call{i}" for i in range(len(calls_of(shape, 1)))]  # they count the calls only
    return UnusableIdsScenario(
        ids=ids, names=(name,), arguments=arguments, turns=turns, shape=shape, **settings
    )


class UnusableIdsUpstream(ReuseUpstream):
    """A server of its own (127.0.0.1, free port, at the root) for the scenario of ``shape``;
    ``turns``, ``name``, ``arguments``, ``max_requests`` and the rest as for
    ``ReuseUpstream``."""

    scenario_type = UnusableIdsScenario

    def __init__(self, shape: Shape, *, turns: int = 3, **kwargs: Any) -> None:
        ids = [f"call{i}" for i in range(len(calls_of(shape, 1)))]  # they count the calls only
        super().__init__(ids, turns=turns, shape=shape, **kwargs)
        assert isinstance(self.scenario, UnusableIdsScenario)
        self.unusable = self.scenario

    @property
    def violations(self) -> list[str]:
        """The errors its history checks answered (400), in order."""
        return self.unusable.violations
