"""Strict pairing of tool calls and results, per API, as the real hosts enforce it.

``pairing_error(api, request)`` is the error text a strict host of ``api`` answers a request
whose history pairs calls and results wrongly (400), or None. It is written from the APIs'
rules and their own error texts, independently of toolid (nothing here imports it), so that
it can judge what toolid's repair makes of a history:

- **chat** (OpenAI Chat Completions, DeepSeek): every assistant message with ``tool_calls`` is
  followed right away by ``tool`` messages answering each of its ids once; a ``tool`` message
  answers a call of the assistant message its run of tool messages follows; ids are unique
  and not empty.
- **anthropic** (Messages): every ``tool_use`` of an assistant message has a ``tool_result``
  in the very next message (a user's), the results first among its blocks; every
  ``tool_result`` answers a ``tool_use`` of the message before it; ids are unique and match
  ``^[a-zA-Z0-9_-]+$``.
- **responses** (OpenAI Responses): every ``function_call`` / ``custom_tool_call`` has an
  output item with its ``call_id`` after it; every output's ``call_id`` is a call's before it
  (unless the server keeps the history: ``previous_response_id``, ``conversation``); a
  ``call_id`` is answered once in the whole input (a call_id two calls share too: OpenAI keys
  outputs by it); a ``call_id`` is not empty.
- **gemini** (and **code_assist**, its envelope): the user turn right after a model turn with
  N ``functionCall`` parts has exactly N ``functionResponse`` parts, and a turn after any
  other has none (Gemini pairs them by number and order, not by id); a model turn with
  ``functionCall`` parts comes right after a user's turn (not first, not after another model
  turn).
- **converse** (Bedrock Converse): every ``toolUse`` block has a ``toolResult`` block in the
  next message, and no message has a ``toolResult`` that answers no ``toolUse`` of the
  message before it (results need not come first); ``toolUseId`` is 1 to 64 characters of
  ``[a-zA-Z0-9_.:-]`` and unique.

A history that ends with the turn holding calls is not broken: their results are to come
(the message with the calls is the last one; some of its results after it are not that).
Each text is the host's own words where they are known (the docstring of each function says
which are), with the positions filled in the way the host names them.
"""

from __future__ import annotations

import re
from typing import Any, Final

# --- the hosts' texts ------------------------------------------------------------------------

CHAT_MISSING: Final = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
CHAT_ORPHAN: Final = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
CHAT_DUPLICATE: Final = (
    "Invalid parameter: Duplicate value for 'tool_call_id' of '{id}', in messages[{first}] and "
    "messages[{second}]."
)
OPENAI_EMPTY: Final = (
    "Invalid '{path}': empty string. Expected a string with minimum length 1, but got an empty "
    "string instead."
)
RESPONSES_MISSING: Final = "No tool output found for function call {id}."
RESPONSES_ORPHAN: Final = "No tool call found for function call output with call_id {id}."
RESPONSES_DUPLICATE: Final = (
    "Duplicate function_call_output for call_id '{id}'. Each function_call must have exactly "
    "one matching function_call_output"
)
ANTHROPIC_MISSING: Final = (
    "messages.{number}: `tool_use` ids were found without `tool_result` blocks immediately "
    "after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in the "
    "next message."
)
ANTHROPIC_ORPHAN: Final = (
    "messages.{number}.content.{block}: unexpected `tool_use_id` found in `tool_result` "
    "blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the "
    "previous message."
)
ANTHROPIC_NOT_FIRST: Final = (
    "messages.{number}: Did not find {count} tool_result block(s) at the beginning of this "
    "message. Messages following tool_use blocks must begin with a matching number of "
    "tool_result blocks."
)
ANTHROPIC_PATTERN: Final = "{path}: String should match pattern '^[a-zA-Z0-9_-]+$'"
ANTHROPIC_DUPLICATE: Final = "messages.{number}.content.{block}: `tool_use` ids must be unique"
GEMINI_CALL_TURN: Final = (
    "Please ensure that function call turn comes immediately after a user turn or after a "
    "function response turn."
)
GEMINI_RESPONSE_TURN: Final = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
GEMINI_COUNT: Final = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
CONVERSE_MISSING: Final = (
    "Expected toolResult blocks at messages.{number}.content for the following Ids: {ids}"
)
CONVERSE_EXCESS: Final = (
    "The number of toolResult blocks at messages.{number}.content exceeds the number of "
    "toolUse blocks of previous turn."
)
CONVERSE_DUPLICATE: Final = (
    "The toolUse blocks at messages.{number}.content contain duplicate Ids: {id}"
)
CONVERSE_DUPLICATE_EARLIER: Final = (
    "The model returned the following errors: messages.{number}.content.{block}: `tool_use` "
    "ids must be unique"
)
CONVERSE_INVALID: Final = (
    "1 validation error detected: Value '{value}' at 'messages.{number}.member.content.{block}"
    ".member.{kind}.toolUseId' failed to satisfy constraint: {constraint}"
)

ANTHROPIC_ID: Final = re.compile(r"[a-zA-Z0-9_-]+")
CONVERSE_ID: Final = re.compile(r"[a-zA-Z0-9_.:-]+")
RESPONSES_CALLS: Final = frozenset({"function_call", "custom_tool_call"})
RESPONSES_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output"})


def pairing_error(api: str, request: Any) -> str | None:
    """The error a strict host of ``api`` ("chat", "responses", "anthropic", "gemini",
    "code_assist", "converse") answers ``request`` (a parsed body) with, or None when its
    history pairs calls and results as the host wants."""
    if not isinstance(request, dict):
        return None
    if api == "chat":
        return chat_error(request)
    if api == "responses":
        return responses_error(request)
    if api == "anthropic":
        return anthropic_error(request)
    if api == "gemini":
        return gemini_error(request)
    if api == "code_assist":
        inner = request.get("request")
        return gemini_error(inner) if isinstance(inner, dict) else None
    if api == "converse":
        return converse_error(request)
    raise ValueError(f"no pairing rules for {api!r}")


def _objects(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """The (index, object) pairs of a JSON array (nothing for anything else)."""
    if not isinstance(value, list):
        return []
    return [(n, item) for n, item in enumerate(value) if isinstance(item, dict)]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- Chat Completions --------------------------------------------------------------------------


def chat_error(request: dict[str, Any]) -> str | None:
    """OpenAI's texts: the missing and orphan ones (verbatim, "preceeding" as OpenAI spells
    it), the empty id (verbatim), a tool_call_id answered twice in a run (verbatim, naming the
    two tool messages); a call id of an earlier assistant message called again gets that text
    too, naming the two assistant messages."""
    messages = _list(request.get("messages"))
    defined: dict[str, int] = {}  # call id -> the message that defined it
    open_calls: list[str] | None = None  # the calls of the run being answered (None: no run)
    answered: dict[str, int] = {}  # call id -> the tool message that answered it, in the run
    for number, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            value = message.get("tool_call_id")
            if value == "":
                return OPENAI_EMPTY.format(path=f"messages[{number}].tool_call_id")
            if open_calls is None or value not in open_calls:
                return CHAT_ORPHAN
            if value in answered:
                return CHAT_DUPLICATE.format(id=value, first=answered[value], second=number)
            answered[value] = number
            continue
        if open_calls is not None:  # the run of tool messages is over
            missing = _unanswered(open_calls, answered)
            if missing:
                return CHAT_MISSING.format(ids=", ".join(missing))
            open_calls = None
        calls = _objects(message.get("tool_calls")) if isinstance(message, dict) else []
        if role != "assistant" or not calls:
            continue
        open_calls, answered = [], {}
        for place, call in calls:
            value = call.get("id")
            if value == "" or not isinstance(value, str):
                return OPENAI_EMPTY.format(path=f"messages[{number}].tool_calls[{place}].id")
            if defined.setdefault(value, number) != number:  # twice in one: its answers say
                return CHAT_DUPLICATE.format(id=value, first=defined[value], second=number)
            open_calls.append(value)
    if open_calls is not None and answered:  # results at the end, but not every one
        missing = _unanswered(open_calls, answered)
        if missing:
            return CHAT_MISSING.format(ids=", ".join(missing))
    return None  # an assistant message with calls ends it: their results are to come


def _unanswered(calls: list[str], answered: dict[str, int]) -> list[str]:
    """The calls of a run that no tool message answered (an id called twice, answered once:
    one of them)."""
    return [one for one in dict.fromkeys(calls) if calls.count(one) > (one in answered)]


# --- Responses ---------------------------------------------------------------------------------


def responses_error(request: dict[str, Any]) -> str | None:
    """OpenAI's texts: the missing and orphan ones and the empty id (verbatim); an output
    given twice for one call_id gets the text OpenAI-compatible gateways answer."""
    items = _list(request.get("input"))
    kept_elsewhere = bool(request.get("previous_response_id") or request.get("conversation"))
    calls: dict[str, int] = {}  # call_id -> the latest call item with it
    outputs: dict[str, int] = {}  # call_id -> the output item that answered it
    pending: dict[str, int] = {}  # call_id -> its call item, while it has no output
    for number, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind in RESPONSES_CALLS:
            value = item.get("call_id")
            if value == "" or not isinstance(value, str):
                return OPENAI_EMPTY.format(path=f"input[{number}].call_id")
            calls[value] = number
            pending[value] = number
        elif kind in RESPONSES_OUTPUTS:
            value = item.get("call_id")
            if value == "" or not isinstance(value, str):
                return OPENAI_EMPTY.format(path=f"input[{number}].call_id")
            if value not in calls:
                if kept_elsewhere:
                    continue
                return RESPONSES_ORPHAN.format(id=value)
            if value in outputs:
                return RESPONSES_DUPLICATE.format(id=value)
            outputs[value] = number
            pending.pop(value, None)
    for value, number in pending.items():
        if not _only_model_items_after(items, number):
            return RESPONSES_MISSING.format(id=value)
    return None


_MODEL_ITEMS: Final = frozenset({"reasoning", *RESPONSES_CALLS})


def _only_model_items_after(items: list[Any], number: int) -> bool:
    """Whether everything after item ``number`` is the model's own turn (calls, reasoning, its
    message): a call there is the last turn's, its output to come."""
    for item in items[number + 1 :]:
        if not isinstance(item, dict):
            return False
        if item.get("type") in _MODEL_ITEMS or item.get("role") == "assistant":
            continue
        return False
    return True


# --- Anthropic Messages ------------------------------------------------------------------------


def anthropic_error(request: dict[str, Any]) -> str | None:
    """Anthropic's texts (verbatim): the missing one, the orphan one, the results not first,
    the id pattern; a tool_use id given twice gets its "ids must be unique"."""
    messages = _list(request.get("messages"))
    seen: set[str] = set()
    calls_before: list[str] = []  # the tool_use ids of the message before
    for number, message in enumerate(messages):
        blocks = message.get("content") if isinstance(message, dict) else None
        blocks = blocks if isinstance(blocks, list) else []  # a string holds no blocks
        results: list[str] = []
        calls: list[str] = []
        leading = True  # still in the blocks the message begins with that are results
        first_other = False
        for place, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_result":
                value = block.get("tool_use_id")
                if not isinstance(value, str) or not ANTHROPIC_ID.fullmatch(value):
                    path = f"messages.{number}.content.{place}.tool_result.tool_use_id"
                    return ANTHROPIC_PATTERN.format(path=path)
                if value not in calls_before:
                    return ANTHROPIC_ORPHAN.format(number=number, block=place, id=value)
                if not leading:
                    first_other = True
                results.append(value)
                continue
            leading = False
            if kind == "tool_use":
                value = block.get("id")
                if not isinstance(value, str) or not ANTHROPIC_ID.fullmatch(value):
                    return ANTHROPIC_PATTERN.format(
                        path=f"messages.{number}.content.{place}.tool_use.id"
                    )
                if value in seen:
                    return ANTHROPIC_DUPLICATE.format(number=number, block=place)
                seen.add(value)
                calls.append(value)
        if calls_before:
            missing = [one for one in calls_before if one not in results]
            if missing:
                return ANTHROPIC_MISSING.format(number=number - 1, ids=", ".join(missing))
            if first_other:
                return ANTHROPIC_NOT_FIRST.format(number=number, count=len(calls_before))
        calls_before = calls
    return None  # calls in the last message: their results to come


# --- Gemini ------------------------------------------------------------------------------------


def gemini_error(request: dict[str, Any]) -> str | None:
    """Gemini's texts (verbatim): a model turn with calls that does not follow a user's turn
    (the history starts with it, or another model turn is before it), a turn with function
    responses that does not follow one with calls, and the counts that differ."""
    contents = _list(request.get("contents"))
    calls_before = 0
    role_before: Any = None
    for content in contents:
        parts = content.get("parts") if isinstance(content, dict) else None
        parts = [part for part in _list(parts) if isinstance(part, dict)]
        role = content.get("role") if isinstance(content, dict) else None
        calls = sum("functionCall" in part for part in parts)
        answers = sum("functionResponse" in part for part in parts)
        if calls and role == "model" and role_before not in ("user", "function"):
            return GEMINI_CALL_TURN
        if answers and not calls_before:
            return GEMINI_RESPONSE_TURN
        if answers != calls_before:
            return GEMINI_COUNT
        calls_before = calls if role == "model" else 0
        role_before = role
    return None  # a model turn with calls at the end: their responses to come


# --- Bedrock Converse --------------------------------------------------------------------------


def converse_error(request: dict[str, Any]) -> str | None:
    """Bedrock's texts (verbatim): the missing one ("Expected toolResult blocks ..."), the
    excess one ("The number of toolResult blocks ..."), the toolUseId constraints, a
    duplicate within one message ("The toolUse blocks ... contain duplicate Ids"); a toolUse
    id of an earlier message again gets the model's "ids must be unique", as Bedrock passes it
    on. A toolResult that answers none of the calls before it, the count not exceeded, leaves
    a call without its result: the missing text."""
    messages = _list(request.get("messages"))
    seen: set[str] = set()
    calls_before: list[str] = []
    for number, message in enumerate(messages):
        blocks = message.get("content") if isinstance(message, dict) else None
        results: list[str] = []
        calls: list[str] = []
        for place, block in enumerate(_list(blocks)):
            if not isinstance(block, dict):
                continue
            kind = next((name for name in ("toolUse", "toolResult") if name in block), "")
            if not kind:
                continue
            inner = block[kind] if isinstance(block[kind], dict) else {}
            value = inner.get("toolUseId")
            invalid = _converse_id_problem(value)
            if invalid:
                return CONVERSE_INVALID.format(
                    value=value,
                    number=number + 1,
                    block=place + 1,
                    kind=kind,
                    constraint=invalid,
                )
            if kind == "toolResult":
                results.append(value)
            else:
                if value in calls:
                    return CONVERSE_DUPLICATE.format(number=number, id=value)
                if value in seen:
                    return CONVERSE_DUPLICATE_EARLIER.format(number=number, block=place)
                seen.add(value)
                calls.append(value)
        if len(results) > len(calls_before):
            return CONVERSE_EXCESS.format(number=number)
        missing = [one for one in calls_before if one not in results]
        if missing:
            return CONVERSE_MISSING.format(number=number, ids=", ".join(missing))
        calls_before = calls
    return None  # calls in the last message: their results to come


def _converse_id_problem(value: Any) -> str:
    """The constraint a toolUseId breaks (service-2.json, shape ToolUseId), or ""."""
    if not isinstance(value, str) or len(value) < 1:
        return "Member must have length greater than or equal to 1"
    if len(value) > 64:
        return "Member must have length less than or equal to 64"
    if not CONVERSE_ID.fullmatch(value):
        return "Member must satisfy regular expression pattern: [a-zA-Z0-9_.:-]+"
    return ""
