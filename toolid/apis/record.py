"""What a record says about one API: the vocabulary every API record is written in.

This module is the bottom of the library's data: the names of the APIs (``Api``), the kinds
of document ids are looked for in (``Doc``), the roles of a position (``Role``), the codes of
pairing problems, and ``ApiRecord``, the one place everything toolid knows about one API is
written. The records themselves are the modules beside this one (``chat.py``,
``responses.py``, ...); ``toolid.apis`` lists them, and every other module reads them there.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal


class Api(enum.StrEnum):
    """The LLM APIs whose tool-call ids toolid knows: one record each (``toolid.apis``)."""

    CHAT = "chat"
    RESPONSES = "responses"
    MESSAGES = "messages"
    CONVERSE = "converse"  # AWS Bedrock Converse and ConverseStream
    GEMINI = "gemini"  # Google's generateContent: the Gemini API, Vertex AI, Code Assist


class Role(enum.StrEnum):
    """What an id position does: define a tool call, or refer to one defined elsewhere."""

    DEFINES = "defines"  # a call's own id (Chat tool_calls[].id, tool_use.id, call_id of a call)
    REFERS = "refers"  # a result's or an event's pointer to a call (tool_call_id, tool_use_id)
    LABELS = "labels"  # not an id: a history element's role or type, which pairing reads
    # A call whose client requires an id where it has none it can use (the member missing,
    # null, a number or a boolean): the value's JSON text ("" when missing) stands for its id.
    LACKS = "lacks"


DEFINES: Final = Role.DEFINES
REFERS: Final = Role.REFERS
LABELS: Final = Role.LABELS
LACKS: Final = Role.LACKS


class Doc(enum.StrEnum):
    """Which kind of JSON document the ids are looked for in."""

    REQUEST = "request"
    RESPONSE = "response"
    EVENT = "event"  # one streamed event's data (an SSE event, a frame's payload, a message)
    # A request read for pairing as well: its ids, then the role and type of each element of
    # its history (the array its positions start in), so that rewriting and checking a
    # request read it once.
    HISTORY = "history"


# A position: its notation (docs/positions.md), its role, and the kind of id it holds. Kinds
# pair references with calls (a reference points at a call whose definition is of its kind)
# and name the positions destination rules apply to (``rules.RuleSet.kinds``):
# - ``call``: a tool call's id (Chat tool_calls[].id, Messages tool_use.id) and what points at it;
# - ``call_id``: a Responses call item's ``call_id``, and the outputs' ``call_id``;
# - ``item``: a Responses item's own ``id``, and what points at an item by it.
type Entry = tuple[str, Role, str]

#: How a streamed answer is framed: Server-Sent Events, AWS eventstream frames, a JSON array
#: written element by element, WebSocket messages.
type Framing = Literal["sse", "eventstream", "json-array", "websocket"]

# --- pairing ---------------------------------------------------------------------------------

ORPHAN: Final = "orphan-result"
MISSING: Final = "missing-result"
MISPLACED: Final = "misplaced-result"
EMPTY: Final = "empty-id"
DUPLICATE: Final = "duplicate-call"
COMPOSITE: Final = "composite-id"
# A call of an answer with no id its client can use (``Role.LACKS``): none, or not a string.
MISSING_ID: Final = "missing-id"
NOT_A_STRING: Final = "not-a-string"
#: Every problem code, in the order problems of one position are listed.
CODES: Final = (ORPHAN, MISSING, MISPLACED, EMPTY, DUPLICATE, COMPOSITE, MISSING_ID, NOT_A_STRING)


def lacking_code(text: str) -> str:
    """The code of a call lacking an id (``Role.LACKS``), by the JSON text it holds: none
    ("") or null is ``missing-id``, a number or a boolean ``not-a-string``."""
    return MISSING_ID if text in ("", "null") else NOT_A_STRING


#: What clients make of a call lacking an id, whatever its API (toolid's words).
LACKING_TEXTS: Final = {
    MISSING_ID: "the call has no id, which its clients require: the Vercel AI SDK (OpenCode) "
    "answers \"Expected 'id' to be a string.\"; toolid gives it one",
    NOT_A_STRING: "the call's id is {id}, not a string: typed clients reject it, others send "
    "it back as a string; toolid gives the call a string id and restores {id}",
}


@dataclass(frozen=True, slots=True)
class History:
    """What pairing means in one API's request history.

    ``results``: the (kind, member) of the reference positions that are results; ``calls``:
    those of the definitions that need one, ``call_types`` narrowing them to calls of those
    ``type`` values (None: every one). A call's results must come after it, before the first
    later element whose kind (``role``, else ``type``) is in ``closes``; with ``runs``, the
    closing elements right after the call are its own turn (Responses: parallel calls, a
    reasoning item, the model's message) and close nothing; with ``next_only``, only the
    element right after the call's holds its results, and with ``results_first`` they come
    before every other block of it (Anthropic). ``elsewhere``: root members
    that say the history is kept by the server (then results may answer calls not sent).
    ``texts``: what the destination answers per code (or ``code.kind``), with ``{id}``,
    ``{path}``, ``{block}``, ``{member}``, ``{element}`` and ``{next_element}`` (the element
    after it) filled in; a code in
    ``guesses`` has toolid's explanation, not the API's words."""

    results: frozenset[tuple[str, str]]
    calls: frozenset[tuple[str, str]]
    closes: frozenset[str]
    texts: Mapping[str, str]
    call_types: frozenset[str] | None = None
    runs: bool = False
    next_only: bool = False
    results_first: bool = False
    elsewhere: tuple[str, ...] = ()
    guesses: frozenset[str] = field(default_factory=frozenset)


# --- shapes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Element:
    """How an object found anywhere (a transcript line, a saved conversation) is read as one
    element of this API: wrapped as the only element of the array at ``wrap`` (members, the
    last an array: ``messages``, ``output.message.content``), so that the table's positions
    for ``doc`` apply; tried only when it has one of the members ``needs`` (any object: empty)
    and, with ``type_prefix``, a string ``type`` starting with it. ``wrap`` empty: the object
    is a whole ``doc`` of its own (a streamed event)."""

    wrap: str
    doc: Doc
    needs: frozenset[str] = frozenset()
    type_prefix: str | None = None

    def admits(self, node: Mapping[str, Any]) -> bool:
        """Whether ``node`` may be such an element."""
        if self.needs and self.needs.isdisjoint(node):
            return False
        if self.type_prefix is None:
            return True
        kind = node.get("type")
        return isinstance(kind, str) and kind.startswith(self.type_prefix)


type Shape = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Route:
    """A request path (searched at its end, so any prefix works) that names the API, unless
    ``veto`` is found in it too."""

    pattern: re.Pattern[str]
    veto: re.Pattern[str] | None = None


@dataclass(frozen=True, slots=True)
class Repairs:
    """How a pairing repair (``toolid.repair``) writes in one API's shape.

    ``blocks``: the member of a history element holding the blocks that results are (Messages'
    ``content``, Gemini's ``parts``), None where results are elements of their own (Chat's
    ``tool`` messages, Responses' output items); ``user`` and ``user_kind``: the members of a
    user's turn, and its kind, where a result block may go; ``result(call id, the call's
    holder, text)``: a result standing for one that was never recorded; ``as_text(result,
    note)``: what stands in the place of a result whose call is not there (the element or the
    block: its content kept, as text after ``note``); ``text_block(text)``: a text block."""

    result: Callable[[str, Mapping[str, Any], str], dict[str, Any]]
    as_text: Callable[[Mapping[str, Any], str], list[dict[str, Any]]]
    blocks: str | None = None
    user: Mapping[str, Any] = field(default_factory=dict)
    user_kind: str = "user"
    text_block: Callable[[str], dict[str, Any]] = lambda text: {"text": text}


@dataclass(frozen=True, slots=True)
class ApiRecord:
    """Everything toolid knows about one API.

    - ``api``, ``title``: its name, and how it is shown to people;
    - ``routes``: the request paths that name it; ``streamed_routes``: those that ask for a
      streamed answer by the route alone (whatever the body says); ``model_routes``: paths
      that name the model, as the group ``model`` (and ``vendor``, prefixed to it);
    - ``request_shape`` / ``answer_shape``: whether a parsed request, or a response or
      streamed event, whose path said nothing, is of this API (tried in the order of
      ``toolid.apis.RECORDS``);
    - ``positions``: where its ids live in a request, a response and a streamed event;
    - ``event_call_number``: the member of a streamed event that numbers the call it is
      about (None: the event's elements number their calls themselves);
      ``calls_by_mention``: its calls carry no number tying mentions together, so each
      definition is a call of its own;
    - ``history``: what pairing means in its requests;
    - ``framings``: how its streamed answers are framed;
    - ``elements``: how an object found anywhere is read as one of its elements;
    - ``untaken_model_rules``: built-in model rules (``rules.MODEL_RULES``) that requests of
      this API, named by their path, do not take;
    - ``ids_required``: the kinds of definition whose id its clients require in an answer (a
      response or a streamed event): a call there with no usable id (missing, null, a number,
      a boolean) gets one (``Role.LACKS``); ``id_on_first_mention``: in a stream, only a
      call's first mention must carry it (Chat: the later chunks of a call carry none);
    - ``repairs``: how a repair of its history's pairing writes in its shape (``Repairs``;
      None: toolid repairs none).
    """

    api: Api
    title: str
    routes: tuple[Route, ...]
    request_shape: Shape
    answer_shape: Shape
    positions: Mapping[Doc, tuple[Entry, ...]]
    history: History
    framings: frozenset[Framing]
    elements: tuple[Element, ...] = ()
    streamed_routes: tuple[re.Pattern[str], ...] = ()
    model_routes: tuple[re.Pattern[str], ...] = ()
    event_call_number: str | None = None
    calls_by_mention: bool = False
    untaken_model_rules: tuple[str, ...] = ()
    ids_required: frozenset[str] = frozenset()
    id_on_first_mention: bool = False
    repairs: Repairs | None = None


def under(prefix: str, relative: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """``relative`` positions, each below ``prefix`` (a path to the object they start in)."""
    return tuple((prefix + path, role, kind) for path, role, kind in relative)


def type_of(node: Any) -> str | None:
    """A JSON object's ``type`` when it is a string, else None."""
    kind = node.get("type") if isinstance(node, dict) else None
    return kind if isinstance(kind, str) else None


def holds_list(document: Mapping[str, Any], member: str, envelopes: tuple[str, ...]) -> bool:
    """Whether ``member`` is a list in ``document`` or in one of the objects ``envelopes``
    name around it."""
    if isinstance(document.get(member), list):
        return True
    return any(
        isinstance(inner := document.get(envelope), dict) and isinstance(inner.get(member), list)
        for envelope in envelopes
    )


def with_note(content: Any, note: str, part: Callable[[str], dict[str, Any]]) -> Any:
    """``content`` (a result's: a string, a list of parts, or anything else) kept after
    ``note``: one string, or the note as a ``part`` first among the parts."""
    if isinstance(content, str):
        return f"{note}\n{content}"
    if isinstance(content, list) and content:
        return [part(note), *content]
    if content is None or content == []:
        return note
    return f"{note}\n{json.dumps(content, ensure_ascii=False)}"


def some_message(document: Mapping[str, Any], test: Callable[[dict[str, Any]], bool]) -> bool:
    """Whether a request's ``messages`` is a list one of whose objects passes ``test``: the
    request shape of the APIs whose history is ``messages``."""
    messages = document.get("messages")
    return isinstance(messages, list) and any(
        isinstance(message, dict) and test(message) for message in messages
    )
