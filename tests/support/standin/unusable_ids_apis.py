"""Tool calls without a usable id on the Responses API (HTTP and WebSocket), Anthropic
Messages and Bedrock Converse, and the check that every later request gives them back
exactly: what ``unusable_ids`` is for Chat Completions.

Three tool turns of one ``bash`` call each (``turns``), then ``FINAL_TEXT``. The call's id
position is, per shape and the same every turn (``unusable_ids.calls_of``): ``missing`` (no
member, in none of the events that carry the call), ``null``, or the ``number`` 7. Those
positions: Responses ``function_call.call_id`` (buffered ``output[]``; streamed
``response.output_item.added`` / ``.done`` and ``response.completed``); Messages
``tool_use.id`` (buffered ``content[]``; streamed ``content_block_start``); Converse
``toolUse.toolUseId`` (buffered ``output.message.content[]``; ConverseStream
``contentBlockStart.start.toolUse``).

Every request's history is checked (``problem``, in ``unusable_ids.history_problem``'s words,
naming the request's own positions): the k-th assistant turn holds the call of tool turn k
under the id emitted, of the same JSON type (the number 7, not "7"); a call emitted without
an id (missing or null) under a non-empty ``^[A-Za-z0-9_-]+$`` string no other call of the
history has; each result answers, by that exact id, a call of the turn before it. The
Converse stand-in is a host with id rules, Bedrock's (``bedrock.converse_problem``: string
ids of its pattern, distinct): there a call emitted with an id no request may carry (7, and
7 again) must come back like one emitted without an id. A violation is answered 400
(Bedrock: a ``ValidationException``; the WebSocket: an ``error`` event).

- ``scenario(shape)``: a scenario for the shared ``UpstreamServer``, Responses and Messages
  over HTTP (Responses item ids fresh every turn); violations in ``scenario.violations``.
- ``UnusableIdsWsUpstream()``: ``responses_ws.ResponsesWsUpstream`` with these calls, the
  shape named by the path (``shape_url``); a ``previous_response_id`` request's
  ``function_call_output`` items must answer the calls of that response (a minted id: a
  safe string no earlier output on the connection had); violations in ``violations``.
- ``UnusableIdsBedrock()``: ``bedrock.BedrockStandIn`` whose Converse and ConverseStream
  answer with these calls, the shape named by the model id (``model_id``); a violation is
  its exchange's ``error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from toolid.eventstream import frame

from . import bedrock, messages, responses, sse
from .agent import FINAL_TEXT, SAFE_ID
from .apis import API, StreamFraming
from .placeholders import call_ph
from .replies import MODEL, dict_items, dumps
from .responses_ws import Connection, ResponsesWsUpstream
from .server import TOOL_USAGE, Exchange
from .unusable_ids import (
    MISSING,
    Emitted,
    IdValue,
    UnusableIdsScenario,
    calls_of,
    describe,
    same,
)
from .unusable_ids import Shape as AnyShape

Shape = Literal["missing", "null", "number"]
SHAPES: tuple[Shape, ...] = get_args(Shape)


def shape_of(name: str) -> Shape | None:
    """The shape called ``name``, or None."""
    return next((s for s in SHAPES if s == name), None)


Wire = Literal["responses", "anthropic", "converse"]  # the request shapes it reads
NAME = "bash"
ARGUMENTS = '{"command": "ls"}'


def emitted(shape: AnyShape) -> IdValue:
    """The value of the id position of every call in ``shape``."""
    return calls_of(shape, 1)[0].first


def put_ids(doc: Any, values: dict[str, IdValue]) -> Any:
    """``doc`` with every string that is a key of ``values`` replaced by its value, and a
    member whose value maps to ``MISSING`` left out."""
    if isinstance(doc, dict):
        return {
            k: put_ids(v, values)
            for k, v in doc.items()
            if not (isinstance(v, str) and values.get(v, 0) is MISSING)
        }
    if isinstance(doc, list):
        return [put_ids(v, values) for v in doc]
    if isinstance(doc, str) and doc in values:
        return values[doc]
    return doc


# ----------------------------------------------------------------------------- histories

# (kind, group, id, where): a call ("call", grouped by the assistant turn it belongs to) or a
# result ("result") of a request's history, its id (MISSING: no member) and its position.
type Mention = tuple[Literal["call", "result"], str, IdValue, str]


def mentions(wire: Wire, req: dict[str, Any]) -> list[Mention]:
    """The calls and results of a request's history, in order."""
    out: list[Mention] = []
    if wire == "responses":
        group = ""
        for i, item in dict_items(req.get("input")):
            kind = item.get("type")
            value = item.get("call_id", MISSING)
            if kind == "function_call":
                group = group or f"input[{i}]"  # consecutive calls: one assistant turn
                out.append(("call", group, value, f"input[{i}].call_id"))
                continue
            group = ""
            if kind == "function_call_output":
                out.append(("result", "", value, f"input[{i}].call_id"))
        return out
    for i, m in dict_items(req.get("messages")):
        content = m.get("content")
        for j, block in dict_items(content if isinstance(content, list) else []):
            at = f"messages[{i}].content[{j}]"
            if wire == "anthropic" and block.get("type") == "tool_use":
                out.append(("call", f"messages[{i}]", block.get("id", MISSING), f"{at}.id"))
            elif wire == "anthropic" and block.get("type") == "tool_result":
                value = block.get("tool_use_id", MISSING)
                out.append(("result", "", value, f"{at}.tool_use_id"))
            elif wire == "converse" and isinstance(block.get("toolUse"), dict):
                value = block["toolUse"].get("toolUseId", MISSING)
                out.append(("call", f"messages[{i}]", value, f"{at}.toolUse.toolUseId"))
            elif wire == "converse" and isinstance(block.get("toolResult"), dict):
                value = block["toolResult"].get("toolUseId", MISSING)
                out.append(("result", "", value, f"{at}.toolResult.toolUseId"))
    return out


def problem(
    wire: Wire, shape: AnyShape, turns: int, req: dict[str, Any], *, strict: bool = False
) -> str | None:
    """Why a request's history does not give back the ids ``shape`` emitted, or None: the
    k-th assistant turn holds the calls of tool turn k, each under the id emitted (a call
    emitted without one: a safe string no other call has), and each result answers, by that
    id, a call of the turn before it no other result answered. ``strict`` (a host with id
    rules, Bedrock: string ids, distinct): a call emitted with an id such a host refuses in a
    request (a number, an earlier call's id) must come back as one emitted without an id."""
    turn, group, index = 0, "", 0
    pending: list[IdValue] = []  # the latest turn's call ids no result answered yet
    calls: list[IdValue] = []  # every call's id so far
    for kind, in_group, got, at in mentions(wire, req):
        said = f"Invalid '{at}': {describe(got)}"
        if kind == "result":
            group = ""
            answered = next((n for n, p in enumerate(pending) if same(got, p)), None)
            if answered is None:
                left = ", ".join(map(describe, pending)) or "none"
                return f"{said} answers no unanswered call of the turn before it ({left} left)."
            del pending[answered]
            continue
        if in_group != group:
            if pending:
                return f"{at}: the calls {', '.join(map(describe, pending))} have no result"
            turn, group, index = turn + 1, in_group, 0
            if turn > turns:
                return f"{at}: tool turn {turn}, but the stand-in answered {turns}"
        emitted_calls = calls_of(shape, turn)
        if index >= len(emitted_calls):
            return f"{at}: tool turn {turn} had {len(emitted_calls)} calls"
        e = emitted_calls[index]
        index += 1
        refused = strict and (
            not isinstance(e.first, str)
            or any(same(e.first, c.first) for c in _earlier(shape, turn))
        )
        if e.minted or refused:
            if not (isinstance(got, str) and SAFE_ID.fullmatch(got)):
                why = (
                    "without an id"
                    if e.minted
                    else f"with the id {describe(e.first)}, which no request may carry here"
                )
                return (
                    f"{said}. The stand-in sent this call {why}; expected a non-empty string "
                    "matching ^[A-Za-z0-9_-]+$."
                )
            if got in calls:
                return f"{said} names an earlier call too."
        elif not same(got, e.first):
            return f"{said}. The stand-in sent this call with the id {describe(e.first)}."
        calls.append(got)
        pending.append(got)
    return None


def _earlier(shape: AnyShape, turn: int) -> list[Emitted]:
    """The calls of the tool turns before ``turn``."""
    return [e for t in range(1, turn) for e in calls_of(shape, t)]


def history_ids(wire: Wire, req: dict[str, Any]) -> list[list[IdValue]]:
    """The ids of the calls of each assistant turn of a request's history."""
    turns: dict[str, list[IdValue]] = {}
    for kind, group, value, _ in mentions(wire, req):
        if kind == "call":
            turns.setdefault(group, []).append(value)
    return list(turns.values())


# ----------------------------------------------------------------------------- HTTP


@dataclass
class ApisScenario(UnusableIdsScenario):
    """``UnusableIdsScenario`` that also renders Responses and Messages tool turns (one call
    with the shape's id; a Responses item id fresh every turn) and checks their histories."""

    def __post_init__(self) -> None:
        super().__post_init__()
        given = self.check

        def check(ex: Exchange) -> str | None:
            if ex.api in ("responses", "anthropic") and isinstance(ex.json, dict):
                found = problem(ex.api, self.shape, self.turns, ex.json)
                if found is not None:
                    self.violations.append(found)
                    return found
            return given(ex) if given is not None else None

        self.check = check

    def templates(
        self,
        api: API,
        stream: bool,
        turn: int = 1,
        model: str = MODEL,
        framing: StreamFraming = "sse",
    ) -> list[bytes]:
        if turn > self.turns or api == "chat":
            return super().templates(api, stream, turn, model, framing)
        assert api in ("responses", "anthropic"), f"the stand-in does not speak {api} here"
        reply = self.reply(api, turn, model)
        assert len(reply.calls) == 1 and not reply.text
        values = {
            call_ph(0): emitted(self.shape),
            reply.calls[0].item_id: f"fc_{turn}_0",
        }
        module = responses if api == "responses" else messages
        if not stream:
            return [dumps(put_ids(module.buffered(reply), values)).encode("utf-8")]
        events = [(name, put_ids(data, values)) for name, data in module.stream(reply)]
        return sse.frames(events, self.sse_style)


def scenario(shape: Shape, *, turns: int = 3, **options: Any) -> ApisScenario:
    """The scenario of ``shape``: ``turns`` tool turns calling ``bash`` with ``ls``, then
    ``FINAL_TEXT``; ``options``: more ``Scenario`` fields (``max_requests``, transport)."""
    settings: dict[str, Any] = {
        "argument_fragments": (),
        "final_text": FINAL_TEXT,
        "final_fragments": (),
        "preamble": {},
        "needs_tools": True,
        "echo_model": True,
        **options,
    }
    return ApisScenario(
        ids=["call0"], names=(NAME,), arguments=ARGUMENTS, turns=turns, shape=shape, **settings
    )


# ----------------------------------------------------------------------------- WebSocket


@dataclass
class _Conversation:
    """What the WebSocket stand-in keeps of one connection: the calls of each response it
    sent (by response id) and the minted ids its outputs gave so far."""

    calls: dict[str, list[Emitted]] = field(default_factory=dict)
    minted: list[str] = field(default_factory=list)


class UnusableIdsWsUpstream(ResponsesWsUpstream):
    """The Responses WebSocket stand-in (``ResponsesWsUpstream``), its calls in the shape the
    connection's path starts with (``ws_url(shape)``): a full history is checked as over
    HTTP; a ``previous_response_id`` request's outputs must each answer a call of that
    response (see the module docstring)."""

    def __init__(self, *, turns: int = 3) -> None:
        super().__init__(ids=[call_ph(0)], turns=turns, arguments=ARGUMENTS, name=NAME)
        self._conversations: dict[int, _Conversation] = {}

    def shape_url(self, shape: Shape, origin: str | None = None) -> str:
        """The URL a client connects to for ``shape``'s calls (at ``origin``, a reverse
        proxy's ``ws://host:port``, or the stand-in itself)."""
        return f"{origin or self.ws_url.removesuffix('/v1/responses')}/{shape}/v1/responses"

    def _answer(self, conn: Connection, text: str, turns_of: dict[str, int]) -> list[Any]:
        shape = shape_of(conn.path.split("/")[1])
        if shape is None:
            return [self._error(404, f"{conn.path}: no shape (the path starts with one)")]
        convo = self._conversations.setdefault(id(conn), _Conversation())
        try:
            req = json.loads(text)
        except ValueError:
            req = None
        if isinstance(req, dict) and req.get("type") == "response.create":
            previous = req.get("previous_response_id")
            if previous is None:
                found = problem("responses", shape, self.turns, req)
            else:
                found = outputs_problem(req, convo.calls.get(previous, []), convo.minted)
            if found is not None:
                return [self._error(400, found)]
            for _, item in dict_items(req.get("input")):  # checked here, not as the ids
                item.pop("call_id", None)  # the parent emitted (it knows no minted ones)
            text = json.dumps(req)
        events = [
            put_ids(e, {call_ph(0): emitted(shape)}) for e in super()._answer(conn, text, turns_of)
        ]
        done = events[-1].get("response") if events else None
        if isinstance(done, dict):
            calls = [o for o in done.get("output") or [] if o.get("type") == "function_call"]
            convo.calls[done["id"]] = [Emitted(emitted(shape))] * len(calls)
        return events


def outputs_problem(req: dict[str, Any], calls: list[Emitted], minted: list[str]) -> str | None:
    """Why a ``previous_response_id`` request's outputs do not answer ``calls`` (the calls
    of that response) each by its id, or None; ``minted`` (the ids the connection's outputs
    gave calls sent without one) grows by the new ones."""
    left = list(calls)
    for i, item in dict_items(req.get("input")):
        if item.get("type") != "function_call_output":
            continue
        got: IdValue = item.get("call_id", MISSING)
        where = f"Invalid 'input[{i}].call_id': {describe(got)}"
        safe = isinstance(got, str) and SAFE_ID.fullmatch(got) is not None
        answered = next(
            (e for e in left if (e.minted and safe) or (not e.minted and same(got, e.first))),
            None,
        )
        if answered is None and any(e.minted for e in left):
            return (
                f"{where}. The stand-in sent this call without an id; expected a non-empty "
                "string matching ^[A-Za-z0-9_-]+$."
            )
        if answered is None:
            return f"{where} answers no call of the previous response left ({left})."
        if answered.minted:
            if got in minted:
                return f"{where} names an earlier call too."
            minted.append(got)
        left.remove(answered)
    return None


# ----------------------------------------------------------------------------- Bedrock


class UnusableIdsBedrock(bedrock.BedrockStandIn):
    """``BedrockStandIn`` whose Converse and ConverseStream (unsigned or Bearer) answer
    ``turns`` tool turns, each one call with the ``toolUseId`` of the shape the model id
    names (``model_id(shape)``), then ``FINAL_TEXT``; every request's history is checked
    (see the module docstring; a violation is the exchange's ``error``)."""

    def __init__(self, *, turns: int = 3) -> None:
        super().__init__()
        self.turns = turns

    def answer(self, exchange: bedrock.Exchange) -> tuple[int, dict[str, str], bytes]:
        parts = exchange.path.split("?", 1)[0].split("/")
        if len(parts) != 4 or parts[1] != "model" or parts[3] not in CONVERSE_OPS:
            return super().answer(exchange)
        exchange.model, exchange.op = parts[2], parts[3]
        shape = shape_of(exchange.model.removeprefix(MODEL_PREFIX))
        if shape is None:
            return bedrock.error(404, "ResourceNotFoundException", f"no model {exchange.model}")
        denied = self.authenticate(exchange)
        if denied is not None:
            return denied
        try:
            req = json.loads(exchange.body)
        except ValueError:
            return bedrock.error(400, "ValidationException", "Malformed input request")
        found = bedrock.converse_problem(req) or problem(
            "converse", shape, self.turns, req, strict=True
        )
        if found is not None:
            exchange.error = found
            return bedrock.error(400, "ValidationException", found)
        done = sum(1 for _, m in dict_items(req.get("messages")) if m.get("role") == "assistant")
        value, final = emitted(shape), done >= self.turns
        stream = exchange.op == "converse-stream"
        if stream:
            body = converse_stream(value, final=final)
        else:
            body = dumps(converse_answer(value, final=final)).encode()
        return bedrock.ok(bedrock.EVENTSTREAM if stream else "application/json", body)


CONVERSE_OPS = ("converse", "converse-stream")
MODEL_PREFIX = "standin.unusable-"


def model_id(shape: Shape) -> str:
    """The model id whose Converse calls have ``shape``'s ids."""
    return MODEL_PREFIX + shape


_USAGE = {"inputTokens": TOOL_USAGE[0], "outputTokens": TOOL_USAGE[1], "totalTokens": 84}


def _tool_use(value: IdValue, **more: Any) -> dict[str, Any]:
    """A ``toolUse`` with ``value`` as its ``toolUseId`` (first, or no member)."""
    return ({} if value is MISSING else {"toolUseId": value}) | {"name": NAME, **more}


def converse_answer(value: IdValue, *, final: bool = False) -> dict[str, Any]:
    """A Converse answer: a call whose id is ``value``, or the ``final`` text."""
    if final:
        content: list[Any] = [{"text": FINAL_TEXT}]
    else:
        content = [{"toolUse": _tool_use(value, input=json.loads(ARGUMENTS))}]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": "end_turn" if final else "tool_use",
        "usage": _USAGE,
        "metrics": {"latencyMs": 3},
    }


def converse_stream(value: IdValue, *, final: bool = False) -> bytes:
    """A ConverseStream answer as eventstream frames: as ``converse_answer``."""
    if final:
        block = [("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": FINAL_TEXT}})]
    else:
        start = {"contentBlockIndex": 0, "start": {"toolUse": _tool_use(value)}}
        block = [("contentBlockStart", start)]
        block += [
            ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": part}}})
            for part in ('{"command', '": "ls"}')
        ]
    events = [
        ("messageStart", {"role": "assistant"}),
        *block,
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("messageStop", {"stopReason": "end_turn" if final else "tool_use"}),
        ("metadata", {"usage": _USAGE, "metrics": {"latencyMs": 3}}),
    ]
    headers = {":content-type": "application/json", ":message-type": "event"}
    return b"".join(
        frame({":event-type": kind, **headers}, dumps(payload).encode()) for kind, payload in events
    )
