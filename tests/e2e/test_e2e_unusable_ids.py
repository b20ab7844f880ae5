"""End to end: Chat Completions tool calls whose ids a client cannot use as they are.

The stand-in (``standin.unusable_ids``) answers three tool turns whose calls carry, per
shape: no id at all, ``"id": null``, the number 7 every turn, ``""``, an id that changes
mid-stream (``chatcmpl-tool-<hex>`` in a call's first chunk, ``toolcall0`` in its later
ones), or an id on the first of two parallel calls only. It checks every later request's
history and answers 400 unless each id comes back exactly (the number as a number, the first
id of a changing call, ``""``), and unless a call it sent without an id comes back with a
non-empty ``[A-Za-z0-9_-]+`` string id of its own that its result repeats.

Through a reverse-mode mitmdump with toolid:

- the openai SDK, buffered and streamed, completes the loop. Every id it saw is a non-empty
  ``[A-Za-z0-9_-]+`` string, one per call, distinct across the conversation, the same in
  every chunk of a call that carries one, and the one toolid's wire format gives: a minted
  ``tid1_-n`` (``tid1_-n-_2`` ...) for a call without an id, ``tid1_-j7`` (``tid1_-j7-_2``
  ...) for the number 7, ``tid1_`` (``tid1_-_2`` ...) for ``""``, the first id of a changing
  call. A stream's call id is read as the AI SDK reads it (from the call's first chunk that
  has one) and as the openai SDK's own accumulator (``ChatCompletionStreamState``) builds
  it, which concatenates the ids of all the chunks of a call. The stand-in recorded no
  violation, and a minted id reached it as the client sent it.
- OpenCode (``@ai-sdk/openai-compatible``, streamed) completes the three-turn loop and the
  stand-in gets its ids back exactly.

Straight at the stand-in:

- the openai SDK gives ``None`` for a missing or null id; sent back, the stand-in answers
  400. It gives the number 7 as the int ``7`` (and ``""`` as ``""``), the same for every
  call: sent back, the stand-in accepts it, but the calls share one id that is no string (or
  an empty one). Of a changing call, the first chunk's id works; the SDK's accumulator joins
  it with the later ones (``chatcmpl-tool-<hex>toolcall0toolcall0toolcall0``), which the
  stand-in rejects.
- OpenCode fails the stream with ``Expected 'id' to be a string.`` for a missing or null id
  (also the second of two parallel calls), and with a type validation error ("expected
  string, received number") for the number; it runs no tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from standin import FINAL_TEXT, MODEL, SAFE_ID, Exchange, ScenarioHandle, UpstreamServer
from standin.apis import sdk_url
from standin.unusable_ids import (
    NUMBER,
    SHAPES,
    Shape,
    UnusableIdsScenario,
    UnusableIdsUpstream,
    calls_of,
    scenario,
    vllm_id,
)

from toolid import codec

from .agents_common import CAP, AgentRun, run_agent
from .conftest import Mitmdump
from .helpers import LoopResult, add_chat_chunk, chat_turn, sdk_http_client
from .test_e2e_coding_agents import OPENCODE_CHAT

pytestmark = pytest.mark.e2e

TURNS = 3
MAX_TURNS = 8  # a loop that has not ended by then never ends
PROMPT = "Which .txt files are in this directory? Use a tool to find out."
TOOL_OUTPUT = "a.txt\nb.txt\nc.txt"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]

# How a streamed call's id is read: from its first chunk with an id (the AI SDK's way), or
# as the openai SDK's ChatCompletionStreamState accumulates the chunks.
Read = Literal["buffered", "first-chunk", "accumulator"]
READS: tuple[Read, ...] = ("buffered", "first-chunk", "accumulator")


def cases() -> list[Any]:
    """(shape, read) for every shape and way to read it (a changing id is a stream's)."""
    return [
        pytest.param(shape, read, id=f"{shape}-{read}")
        for shape in SHAPES
        for read in READS
        if not (shape == "changing" and read == "buffered")
    ]


# ----------------------------------------------------------------------------- the client


@dataclass
class Conversation:
    """What the openai SDK client kept: per tool turn, the id of each call (what it sends
    back) and, streamed, the ids of each call's chunks (those that carry one)."""

    kept: list[list[Any]] = field(default_factory=list)
    chunk_ids: list[list[list[Any]]] = field(default_factory=list)
    final_text: str | None = None


def converse(base_url: str, read: Read, convo: Conversation) -> None:
    """A tool loop with the openai SDK at ``base_url`` until an answer has no tool call,
    replaying every call (with the id read as ``read`` says) and its result; what it kept
    goes into ``convo`` as it goes, so a failed request leaves it there."""
    client: Any = openai.OpenAI(
        api_key="sk-e2e",
        base_url=base_url,
        max_retries=0,
        http_client=sdk_http_client(LoopResult(api="chat")),
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    common: dict[str, Any] = {"model": MODEL, "tools": TOOLS}
    try:
        for _ in range(MAX_TURNS):
            if read == "buffered":
                reply = client.chat.completions.create(messages=messages, **common)
                message = reply.choices[0].message
                text = message.content or ""
                calls = [
                    {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
                    for tc in message.tool_calls or []
                ]
            else:
                text, calls, chunk_ids = _streamed(client, messages, common, read)
                if calls:
                    convo.chunk_ids.append(chunk_ids)
            if not calls:
                convo.final_text = text
                return
            convo.kept.append([c["id"] for c in calls])
            messages += chat_turn(calls, TOOL_OUTPUT)
        raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {convo.kept!r}")
    finally:
        client.close()


def _streamed(
    client: Any, messages: list[Any], common: dict[str, Any], read: Read
) -> tuple[str, list[dict[str, Any]], list[list[Any]]]:
    """One streamed answer: its text, its calls (id read as ``read`` says) and the ids of
    each call's chunks."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    slots: dict[int, dict[str, Any]] = {}
    text = ""
    for chunk in client.chat.completions.create(messages=messages, stream=True, **common):
        state.handle_chunk(chunk)
        text += add_chat_chunk(chunk, slots)
    ordered = [slots[i] for i in sorted(slots)]
    ids: list[Any]
    if read == "accumulator":
        final = state.get_final_completion().choices[0].message.tool_calls or []
        ids = [tc.id for tc in final]
    else:
        ids = [s["ids"][0] if s["ids"] else None for s in ordered]
    calls = [
        {"id": i, "name": s["name"], "arguments": s["arguments"]}
        for i, s in zip(ids, ordered, strict=True)
    ]
    return text, calls, [s["ids"] for s in ordered]


# ----------------------------------------------------------------------------- checks


def model_requests(handle: ScenarioHandle) -> list[Exchange]:
    """The stand-in's model requests of a scenario, in order."""
    return [e for e in handle.exchanges if e.method == "POST" and e.api is not None]


def tool_requests(handle: ScenarioHandle) -> list[Exchange]:
    """Those that offered tools (OpenCode's title request offers none)."""
    return [r for r in model_requests(handle) if isinstance(r.json, dict) and r.json.get("tools")]


def violations(handle: ScenarioHandle) -> list[str]:
    assert isinstance(handle.scenario, UnusableIdsScenario)
    return handle.scenario.violations


def minted(k: int) -> str:
    """The id toolid mints for the k-th call of a conversation that came without one."""
    return "tid1_-n" if k == 1 else f"tid1_-n-_{k}"


def documented_client_ids(shape: Shape) -> list[list[str]]:
    """The client ids toolid's wire format gives each tool turn's calls in ``shape``: the
    k-th use of an id tagged k; a safe id that is no one else's passes as it is."""
    per_turn: dict[Shape, Any] = {
        "missing": lambda t: [minted(t)],
        "null": lambda t: [minted(t)],
        "number": lambda t: ["tid1_-j7" if t == 1 else f"tid1_-j7-_{t}"],
        "empty": lambda t: [codec.encode("", "safe", t)],
        "changing": lambda t: [vllm_id(t, 0)],
        "index0-only": lambda t: [vllm_id(t, 0), minted(t)],
    }
    return [per_turn[shape](t) for t in range(1, TURNS + 1)]


def check_client_ids(kept: list[list[Any]], shape: Shape, *, ordered: bool = True) -> None:
    """``TURNS`` tool turns of the shape's calls, each under a non-empty safe string id,
    distinct across the conversation, the documented ones (a turn's parallel calls in any
    order unless ``ordered``)."""
    n = len(calls_of(shape, 1))
    assert [len(turn) for turn in kept] == [n] * TURNS, f"the client kept {kept!r}"
    flat = [i for turn in kept for i in turn]
    unsafe = [i for i in flat if not (isinstance(i, str) and SAFE_ID.fullmatch(i))]
    assert not unsafe, f"the client kept ids that are not safe strings: {unsafe!r} of {kept!r}"
    assert len(set(flat)) == len(flat), f"the client kept one id for two calls: {kept!r}"
    want = documented_client_ids(shape)
    if not ordered:
        kept, want = [sorted(t) for t in kept], [sorted(t) for t in want]
    assert kept == want, f"the client kept {kept!r}; toolid's wire format gives {want!r}"


def check_stable_chunk_ids(convo: Conversation) -> None:
    """Every chunk of a streamed call that carries an id carries the one the client kept."""
    for t, (kept, chunks) in enumerate(zip(convo.kept, convo.chunk_ids, strict=True), 1):
        for j, (kept_id, ids) in enumerate(zip(kept, chunks, strict=True)):
            assert ids and set(ids) == {kept_id}, (
                f"turn {t}, call {j}: the client kept {kept_id!r} from chunk ids {ids!r}"
            )


def check_standin_got_its_ids(handle: ScenarioHandle, kept: list[list[Any]]) -> None:
    """The stand-in answered the ``TURNS + 1`` tool requests 200 and recorded no violation
    (every id it emitted came back exactly); a call it sent without an id reached it under
    the id the client kept."""
    reqs = tool_requests(handle)
    assert violations(handle) == [], violations(handle)
    assert [r.status for r in reqs] == [200] * (TURNS + 1), [(r.status, r.error) for r in reqs]
    history = [m for m in reqs[-1].json["messages"] if m.get("tool_calls")]
    assert isinstance(handle.scenario, UnusableIdsScenario)
    shape = handle.scenario.shape
    for t, (message, kept_ids) in enumerate(zip(history, kept, strict=True), 1):
        got = [tc["id"] for tc in message["tool_calls"]]
        for e, got_id in zip(calls_of(shape, t), got, strict=True):
            if e.minted:
                assert got_id in kept_ids, f"turn {t}: the stand-in got {got!r}, kept {kept_ids}"
            else:
                assert got_id == e.first and type(got_id) is type(e.first), (t, got, e)


# ----------------------------------------------------------------------------- fixtures


type Route = Callable[[Shape], tuple[ScenarioHandle, str]]


@pytest.fixture
def through_toolid(upstream: UpstreamServer, reverse_proxy: Mitmdump) -> Route:
    """``(shape) -> (handle, base_url)``: a fresh scenario of ``shape`` on the session's
    stand-in and its SDK base URL through toolid (the reverse-mode mitmdump)."""

    def make(shape: Shape) -> tuple[ScenarioHandle, str]:
        handle = upstream.scenario(scenario(shape, max_requests=CAP))
        return handle, sdk_url("chat", reverse_proxy.url + f"/s/{handle.key}")

    return make


# ----------------------------------------------------------------------------- through toolid


@pytest.mark.parametrize(("shape", "read"), cases())
def test_sdk_through_toolid(shape: Shape, read: Read, through_toolid: Route) -> None:
    """The openai SDK completes the three-turn loop through toolid with one safe, distinct,
    documented client id per call, stable across a call's chunks; the stand-in got its own
    ids back."""
    handle, base_url = through_toolid(shape)
    convo = Conversation()
    converse(base_url, read, convo)
    assert convo.final_text == FINAL_TEXT
    check_client_ids(convo.kept, shape)
    if read != "buffered":
        check_stable_chunk_ids(convo)
    check_standin_got_its_ids(handle, convo.kept)


# ----------------------------------------------------------------------------- without toolid


@dataclass(frozen=True)
class Without:
    """What the openai SDK does with ``shape`` (read as ``read``) straight at the stand-in:
    the ids it kept, per tool turn (up to the failed request, if one failed), and the error
    the stand-in answered (None: the loop completes)."""

    shape: Shape
    read: Read
    kept: list[list[Any]]
    error: str | None = None

    @property
    def id(self) -> str:
        return f"{self.shape}-{self.read}"


NO_ID = (
    "Invalid 'messages[1].tool_calls[{j}].id': null (null). The stand-in sent this call "
    "without an id; expected a non-empty string matching ^[A-Za-z0-9_-]+$."
)
FIRST = vllm_id(1, 0)
JOINED = FIRST + "toolcall0" * 3  # the first chunk's id, then each argument chunk's
WITHOUT_TOOLID = [
    *(
        Without(shape, read, [[None]], NO_ID.format(j=0))
        for shape in ("missing", "null")
        for read in READS
    ),
    *(Without("index0-only", read, [[FIRST, None]], NO_ID.format(j=1)) for read in READS),
    *(Without("number", read, [[NUMBER]] * TURNS) for read in READS),
    *(Without("empty", read, [[""]] * TURNS) for read in READS),
    Without("changing", "first-chunk", [[vllm_id(t, 0)] for t in range(1, TURNS + 1)]),
    Without(
        "changing",
        "accumulator",
        [[JOINED]],
        f"Invalid 'messages[1].tool_calls[0].id': {json.dumps(JOINED)} (a string). The "
        f'stand-in sent this call with the id "{FIRST}" (a string).',
    ),
]


# Accumulating a chunk whose id is the int 7, the SDK's pydantic models warn that they
# expected a str ("PydanticSerializationUnexpectedValue"); the test asserts what it keeps.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("case", WITHOUT_TOOLID, ids=lambda c: c.id)
def test_sdk_without_toolid(case: Without, upstream: UpstreamServer) -> None:
    """Straight at the stand-in the openai SDK keeps ``case.kept``: ``None`` for a call
    without an id, which the stand-in rejects when it comes back; the int 7 or ``""`` for
    every call, which it accepts (one id, no usable string, for three calls); the first id of
    a changing call, which it accepts, or the accumulator's join of all of them, which it
    rejects."""
    handle = upstream.scenario(scenario(case.shape, max_requests=CAP))
    convo = Conversation()
    if case.error is None:
        converse(handle.base_url("chat"), case.read, convo)
        assert convo.final_text == FINAL_TEXT
        assert violations(handle) == []
    else:
        with pytest.raises(openai.BadRequestError) as caught:
            converse(handle.base_url("chat"), case.read, convo)
        assert violations(handle) == [case.error]
        assert case.error in str(caught.value)
        assert [r.status for r in model_requests(handle)] == [200, 400]
    assert convo.kept == case.kept
    assert [type(i) for t in convo.kept for i in t] == [type(i) for t in case.kept for i in t]
    if case.shape == "changing" and case.read == "first-chunk":
        # the call's id changes mid-stream: the later chunks carry another one
        assert convo.chunk_ids == [[[vllm_id(t, 0), *["toolcall0"] * 3]] for t in (1, 2, 3)]


# ----------------------------------------------------------------------------- OpenCode


def opencode_ids(run: AgentRun) -> list[str]:
    return OPENCODE_CHAT.client_ids(run)


def opencode_errors(run: AgentRun) -> list[str]:
    """The messages of OpenCode's ``error`` events."""
    return [str(e["error"]["data"]["message"]) for e in run.events if e.get("type") == "error"]


def opencode_summary(run: AgentRun, handle: ScenarioHandle) -> str:
    h = run.headless
    answered = [(r.status, r.error) for r in model_requests(handle)]
    return (
        f"opencode: exit {h.returncode} after {h.seconds:.1f}s, final "
        f"{OPENCODE_CHAT.final_text(run)!r}, ids {opencode_ids(run)!r}, errors "
        f"{opencode_errors(run)!r}, stand-in answered {answered!r}; stderr: {h.stderr[-1500:]}"
    )


@pytest.mark.agent
@pytest.mark.parametrize("shape", SHAPES)
def test_opencode_through_toolid(shape: Shape, through_toolid: Route, tmp_path: Path) -> None:
    """OpenCode completes the three-turn loop through toolid, keeping one safe, distinct,
    documented id per call, and the stand-in got its own ids back."""
    handle, base_url = through_toolid(shape)
    run = run_agent(OPENCODE_CHAT, base_url, tmp_path)
    said = opencode_summary(run, handle)
    assert run.headless.returncode == 0, said
    assert OPENCODE_CHAT.final_text(run) == FINAL_TEXT, said
    ids, n = opencode_ids(run), len(calls_of(shape, 1))
    kept = [ids[at : at + n] for at in range(0, len(ids), n)]
    check_client_ids(kept, shape, ordered=False)  # it runs a turn's parallel calls in any order
    check_standin_got_its_ids(handle, kept)


OPENCODE_FAILURES = {
    "missing": ["Expected 'id' to be a string."],
    "null": ["Expected 'id' to be a string."],
    "index0-only": ["Expected 'id' to be a string."],
    "number": [
        "Type validation failed",
        '"id":7',
        "Invalid input: expected string, received number",
    ],
}


@pytest.mark.agent
@pytest.mark.parametrize("shape", list(OPENCODE_FAILURES))
def test_opencode_without_toolid(shape: Shape, tmp_path: Path) -> None:
    """Straight at the stand-in, OpenCode's AI SDK rejects the stream of a call without a
    string id (missing, null, the second of two parallel calls, the number 7): OpenCode
    reports the error, runs no tool and exits 1; no tool result reaches the stand-in."""
    with UnusableIdsUpstream(
        shape, name=OPENCODE_CHAT.tool, arguments=OPENCODE_CHAT.arguments, max_requests=CAP
    ) as up:
        run = run_agent(OPENCODE_CHAT, up.sdk_url("chat"), tmp_path)
    handle = up.server.default
    assert handle is not None
    said = opencode_summary(run, handle)
    assert run.headless.returncode == 1, said
    errors = opencode_errors(run)
    assert len(errors) == 1 and all(part in errors[0] for part in OPENCODE_FAILURES[shape]), said
    assert opencode_ids(run) == [], said
    reqs = tool_requests(handle)
    assert [r.status for r in reqs] == [200], said
    assert up.violations == []
