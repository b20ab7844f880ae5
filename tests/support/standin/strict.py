"""Stand-in strict hosts: each enforces one destination's tool-call id rules.

``StrictHost("mistral")`` is a ``ReuseUpstream`` (a real HTTP server on 127.0.0.1, free
port, daemon thread; Chat Completions, Responses and Messages) that checks the history of
every request against one rule set of ``RULE_SETS`` and answers 400 with the real host's
error text at the first id that breaks it, else 200 with a final text (or, with ``turns``,
tool calls carrying its own conforming ids). Besides each rule set's charset, length and
prefix, every strict host rejects what every real one does: an id defined twice, and a
result that answers no call where the host looks for one (Chat: the latest assistant
message with tool calls; Messages: the previous message; Responses: any call before it,
unless ``previous_response_id`` is given).

    with StrictHost("openai") as host:
        openai.OpenAI(base_url=host.sdk_url("chat"), ...)
        host.model_requests()[-1].error  # "Invalid 'messages[2].tool_calls[0].id': ..."

The id positions are those of function tools: Chat ``messages[].tool_calls[].id`` and
``messages[].tool_call_id``; Responses ``function_call`` / ``custom_tool_call`` items'
``call_id`` and ``id``, their ``*_output`` items' ``call_id``; Messages ``tool_use.id`` and
``tool_result.tool_use_id``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any, Final
from urllib.parse import unquote

from .agent import PATTERN_TEXT, ReuseUpstream
from .apis import API
from .messages import VERTEX_PATH
from .replies import dict_items
from .server import Exchange

# Position kinds: a call's id and the results that refer to it share one kind.
CHAT_CALL = "chat.call"  # messages[].tool_calls[].id, messages[].tool_call_id
RESPONSES_CALL = "responses.call"  # call items' call_id, *_output items' call_id
RESPONSES_FC = "responses.fc"  # function_call items' id
RESPONSES_CTC = "responses.ctc"  # custom_tool_call items' id
MESSAGES_TOOL_USE = "messages.tool_use"  # tool_use.id, tool_result.tool_use_id
CALL_KINDS = (CHAT_CALL, RESPONSES_CALL, MESSAGES_TOOL_USE)
ITEM_KINDS = (RESPONSES_FC, RESPONSES_CTC)


@dataclass(frozen=True)
class IdRule:
    """What one kind of id position accepts: ``pattern`` (full match), at most ``max_len``
    characters, starting with ``prefix``."""

    pattern: str = PATTERN_TEXT
    max_len: int | None = None
    prefix: str = ""

    def problem(self, value: Any) -> str | None:
        """The problem ("length", "prefix", "pattern") of ``value``, or None when it conforms."""
        if not isinstance(value, str):
            return "pattern"
        if self.max_len is not None and len(value) > self.max_len:
            return "length"
        if not value.startswith(self.prefix):
            return "prefix"
        return None if re.fullmatch(self.pattern, value) else "pattern"


SAFE: Final = IdRule()
MISTRAL: Final = IdRule(r"^[a-zA-Z0-9]{9}$")
RULE_SETS: Final[dict[str, dict[str, IdRule]]] = {
    # today's strict rule: [A-Za-z0-9_-]+ everywhere
    "safe": dict.fromkeys(CALL_KINDS + ITEM_KINDS, SAFE),
    # Chat: "maximum length 40" (observed); Responses call_id 1 to 64 (spec), item ids keep
    # their type prefix (observed: "Expected an ID that begins with 'fc'" / 'ctc')
    "openai": {
        CHAT_CALL: IdRule(max_len=40),
        RESPONSES_CALL: IdRule(max_len=64),
        RESPONSES_FC: IdRule(prefix="fc"),
        RESPONSES_CTC: IdRule(prefix="ctc"),
        MESSAGES_TOOL_USE: SAFE,
    },
    # tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$' (observed)
    "anthropic": dict.fromkeys(CALL_KINDS + ITEM_KINDS, SAFE),
    # mistral-common's validator: ^[a-zA-Z0-9]{9}$ for every tool call id and tool_call_id
    "mistral": dict.fromkeys(CALL_KINDS, MISTRAL) | dict.fromkeys(ITEM_KINDS, SAFE),
    # botocore: toolUseId 1 to 64 of [a-zA-Z0-9_-] (older docs; current ones also allow .:)
    "bedrock": dict.fromkeys(CALL_KINDS, IdRule(max_len=64)) | dict.fromkeys(ITEM_KINDS, SAFE),
}
# A conforming id each host mints itself (its tool calls, with ``turns``).
NATIVE_IDS: Final = {
    "safe": "call_0",
    "openai": "call_PTLP8xhu3uwZk4l3nlnrrJha",
    "anthropic": "toolu_01A09q90qw90lq917835lq9",
    "mistral": "D681PevKs",
    "bedrock": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
}


# ----------------------------------------------------------------------------- positions


@dataclass(frozen=True)
class Position:
    """One tool-call id position in a request: ``where`` names its object the way the host
    does in errors (``messages[2].tool_calls[0]``, ``input[95]``, ``messages.1.content.0``),
    ``field`` its member there (``id``, ``call_id``, ``tool_use.id``)."""

    kind: str
    defines: bool
    value: Any
    where: str
    field: str

    @property
    def namespace(self) -> str:
        """Ids that must be unique together (all Responses item ids are one namespace)."""
        return "responses.item" if self.kind in ITEM_KINDS else self.kind

    @property
    def name(self) -> str:
        return f"{self.where}.{self.field}"

    @property
    def message(self) -> int:
        """The index of its message (Chat, Messages) or item (Responses)."""
        return int(re.findall(r"[0-9]+", self.where)[0])


def positions(api: API, req: Any) -> list[Position]:
    """Every id position of a request's history, in document order."""
    out: list[Position] = []
    if not isinstance(req, dict):
        return out
    if api == "chat":
        for i, m in dict_items(req.get("messages")):
            for j, tc in dict_items(m.get("tool_calls")):
                where = f"messages[{i}].tool_calls[{j}]"
                out.append(Position(CHAT_CALL, True, tc.get("id"), where, "id"))
            if "tool_call_id" in m:
                out.append(
                    Position(CHAT_CALL, False, m["tool_call_id"], f"messages[{i}]", "tool_call_id")
                )
    elif api == "responses":
        for i, it in dict_items(req.get("input")):
            kind = {"function_call": RESPONSES_FC, "custom_tool_call": RESPONSES_CTC}
            where = f"input[{i}]"
            if it.get("type") in kind:
                out.append(Position(RESPONSES_CALL, True, it.get("call_id"), where, "call_id"))
                if "id" in it:
                    out.append(Position(kind[it["type"]], True, it["id"], where, "id"))
            elif it.get("type") in ("function_call_output", "custom_tool_call_output"):
                out.append(Position(RESPONSES_CALL, False, it.get("call_id"), where, "call_id"))
    else:
        for i, m in dict_items(req.get("messages")):
            for j, b in dict_items(m.get("content")):
                where = f"messages.{i}.content.{j}"
                if b.get("type") == "tool_use":
                    out.append(Position(MESSAGES_TOOL_USE, True, b.get("id"), where, "tool_use.id"))
                elif b.get("type") == "tool_result":
                    out.append(
                        Position(
                            MESSAGES_TOOL_USE,
                            False,
                            b.get("tool_use_id"),
                            where,
                            "tool_result.tool_use_id",
                        )
                    )
    return out


def links(ps: Sequence[Position]) -> list[int | None]:
    """For each position: itself (index) for a definition; for a result, the index of the
    nearest definition before it with its id (None: an orphan)."""
    out: list[int | None] = []
    latest: dict[tuple[str, str], int] = {}
    for n, p in enumerate(ps):
        key = (p.namespace, p.value if isinstance(p.value, str) else repr(p.value))
        if p.defines:
            latest[key] = n
            out.append(n)
        else:
            out.append(latest.get(key))
    return out


# ----------------------------------------------------------------------------- the rules


def violation(rule_set: str, api: API, req: dict[str, Any]) -> str | None:
    """The error the host of ``rule_set`` answers this request with (400), or None."""
    rules = RULE_SETS[rule_set]
    ps = positions(api, req)
    orphans_allowed = api == "responses" and req.get("previous_response_id") is not None
    defined: set[tuple[str, str]] = set()
    calls_in: dict[int, set[str]] = {}  # message index -> the call ids defined there
    for p, link in zip(ps, links(ps), strict=True):
        rule = rules[p.kind]
        if (problem := rule.problem(p.value)) is not None:
            return _rule_text(rule_set, api, p, rule, problem)
        if p.defines:
            if (p.namespace, p.value) in defined:
                return _duplicate_text(api, p)
            defined.add((p.namespace, p.value))
            if p.kind in CALL_KINDS:
                calls_in.setdefault(p.message, set()).add(p.value)
        elif not orphans_allowed and not _answers(api, p, link, calls_in):
            return _orphan_text(api, p)
    return None


def _answers(api: API, p: Position, link: int | None, calls_in: dict[int, set[str]]) -> bool:
    """Whether result ``p`` answers a call where the host looks for one: in Chat, a call of
    the latest assistant message with tool calls; in Messages, of the previous message; in
    Responses, any call before it."""
    if link is None:
        return False
    if api == "chat":
        return p.value in calls_in[max(calls_in)]
    if api == "anthropic":
        return p.value in calls_in.get(p.message - 1, set())
    return True


def _rule_text(rule_set: str, api: API, p: Position, rule: IdRule, problem: str) -> str:
    if rule_set == "mistral" and p.kind in CALL_KINDS:
        return f"Tool call id was {p.value} but must be a-z, A-Z, 0-9, with a length of 9."
    if rule_set == "bedrock" and p.kind in CALL_KINDS:
        constraint = (
            f"Member must have length less than or equal to {rule.max_len}"
            if problem == "length"
            else "Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+"
        )
        return (
            f"1 validation error detected: Value '{p.value}' at '{p.name}' failed to satisfy "
            f"constraint: {constraint}"
        )
    if api == "anthropic":
        return f"{p.name}: String should match pattern '{rule.pattern}'"
    if problem == "length":
        return (
            f"Invalid '{p.name}': string too long. Expected a string with maximum length "
            f"{rule.max_len}, but got a string with length {len(p.value)} instead."
        )
    if problem == "prefix":
        return f"Invalid '{p.name}': '{p.value}'. Expected an ID that begins with '{rule.prefix}'."
    return (
        f"Invalid '{p.name}': string does not match pattern. Expected a string that matches "
        f"the pattern '{rule.pattern}'."
    )


def _duplicate_text(api: API, p: Position) -> str:
    # Anthropic's and the Responses texts are the hosts' own; Chat's is the stand-in's
    if api == "anthropic":
        return f"{p.where}: `tool_use` ids must be unique"
    if p.namespace == "responses.item":
        return (
            f"Duplicate item found with id {p.value}. Remove duplicate items from your input "
            "and try again."
        )
    if api == "responses":
        return f"Duplicate call_id found: {p.value}."
    return f"Invalid '{p.name}': duplicate tool call id '{p.value}'."


def _orphan_text(api: API, p: Position) -> str:
    if api == "anthropic":
        return (
            f"{p.where}: unexpected `tool_use_id` found in `tool_result` blocks: {p.value}. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the "
            "previous message."
        )
    if api == "responses":
        return f"No tool call found for function call output with call_id {p.value}."
    return (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'."
    )


# ----------------------------------------------------------------------------- the host


class StrictHost(ReuseUpstream):
    """A stand-in that enforces ``rule_set`` (a key of ``RULE_SETS``) on every request;
    ``ids`` (default: one id the host mints itself) and the rest as for ``ReuseUpstream``,
    but ``turns`` defaults to 0: every answer is a final text."""

    def __init__(
        self, rule_set: str, ids: Sequence[str] | None = None, *, turns: int = 0, **kwargs: Any
    ) -> None:
        self.rule_set = rule_set
        check = functools.partial(violation, rule_set)
        super().__init__(ids or [NATIVE_IDS[rule_set]], turns=turns, check=check, **kwargs)


# ----------------------------------------------------------------------------- a gateway


class Gateway(ReuseUpstream):
    """An OpenRouter-like stand-in: one host in front of many providers, picked per request
    by its model (the body's ``model``; for a Vertex-style path, ``publisher/model`` from the
    path). ``providers``: model globs (``fnmatch``, first match) and the rule set of the
    provider each names, enforced with that provider's real 400 texts (``violation``); a
    model no glob matches (a Kimi model) is served leniently. The rest as for
    ``ReuseUpstream``: every model's tool calls carry the same ``ids``."""

    def __init__(
        self, providers: dict[str, str], ids: Sequence[str] = ("functions.Glob:0",), **kwargs: Any
    ) -> None:
        self.providers = providers
        super().__init__(ids, **kwargs)

    def model_of(self, rec: Exchange) -> str | None:
        vertex = VERTEX_PATH.search(unquote(rec.path.split("?", 1)[0]))
        if vertex is not None:
            return f"{vertex[1]}/{vertex[2]}"
        model = rec.json.get("model") if isinstance(rec.json, dict) else None
        return model if isinstance(model, str) else None

    def provider(self, rec: Exchange) -> str | None:
        """The rule set of the provider the request's model names, or None."""
        model = self.model_of(rec)
        if model is None:
            return None
        return next((rules for glob, rules in self.providers.items() if fnmatch(model, glob)), None)

    def problem(self, ex: Exchange) -> str | None:
        rules = self.provider(ex)
        if rules is not None and ex.api is not None and isinstance(ex.json, dict):
            problem = violation(rules, ex.api, ex.json)
            if problem:
                return problem
        return super().problem(ex)
