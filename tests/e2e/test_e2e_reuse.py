"""End to end: upstreams that reuse tool-call ids in every turn.

The real openai and anthropic SDKs run three-tool-turn loops through a real mitmdump
against ``ReuseUpstream``, which answers every tool turn with the same raw ids. Through
toolid the client must see a distinct safe id for every call (the occurrence tags of
docs/wire-format.md), the upstream must get back exactly its own raw ids, and a strict host
must get unique safe ids. Without toolid the client sees the same id turn after turn.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest
from standin import API, FINAL_TEXT, MODEL, SAFE_ID, ReuseUpstream
from standin.strict import StrictHost

from .conftest import Mitmdump, MitmdumpPool
from .helpers import (
    LoopResult,
    add_chat_chunk,
    chat_turn,
    check_upstream_got_its_own_ids,
    request_id_positions,
    response_id_positions,
    sdk_http_client,
)

pytestmark = pytest.mark.e2e

APIS: list[API] = ["chat", "responses", "anthropic"]
KIMI = "functions.Glob:0"
CALL0 = "call_0"
ITEM0 = "fc_0"
TURNS = 3

# The client id of the 1st, 2nd, 3rd ... call that carries each raw id (docs/wire-format.md,
# "Occurrence tags"): untagged first, then prefix + escaped raw + "-_" + k.
CLIENT_IDS = {
    KIMI: ["tid1_functions-2EGlob-3A0"] + [f"tid1_functions-2EGlob-3A0-_{k}" for k in range(2, 7)],
    CALL0: ["call_0"] + [f"tid1_call_0-_{k}" for k in range(2, 7)],
    ITEM0: ["fc_0"] + [f"tid1_fc_0-_{k}" for k in range(2, 7)],
}
assert CLIENT_IDS[KIMI][:3] == [
    "tid1_functions-2EGlob-3A0",
    "tid1_functions-2EGlob-3A0-_2",
    "tid1_functions-2EGlob-3A0-_3",
]
assert CLIENT_IDS[CALL0][:3] == ["call_0", "tid1_call_0-_2", "tid1_call_0-_3"]

RAWS = [pytest.param(KIMI, id="kimi"), pytest.param(CALL0, id="call_0")]
STREAMS = [pytest.param(False, id="buffered"), pytest.param(True, id="stream")]

GLOB = {
    "name": "Glob",
    "description": "Find files by glob pattern",
    "parameters": {
        "type": "object",
        "properties": {"pattern": {"type": "string"}},
        "required": ["pattern"],
    },
}
TOOLS_CHAT = [{"type": "function", "function": GLOB}]
TOOLS_RESPONSES = [{"type": "function", **GLOB}]
TOOLS_ANTHROPIC = [
    {"name": GLOB["name"], "description": GLOB["description"], "input_schema": GLOB["parameters"]}
]
PROMPT = "Which text files are there?"
TOOL_OUTPUT = "a.txt\nb.txt\nc.txt"
MAX_TURNS = 8  # a loop that has not ended by then is a loop that never ends


# ----------------------------------------------------------------------------- the agent loop


@dataclass
class ToolLoop:
    """What an SDK client kept during a multi-turn tool loop."""

    api: API
    calls: list[list[str]] = field(default_factory=list)  # call ids of each tool turn
    items: list[list[str]] = field(default_factory=list)  # Responses item ids of each turn
    final_text: str = ""
    recorder: LoopResult | None = None  # .requests: the request bodies the client sent

    @property
    def sent(self) -> list[Any]:
        assert self.recorder is not None
        return [json.loads(body) for body in self.recorder.requests]


def run_loop(api: API, base_url: str, *, stream: bool, proxy: str | None = None) -> ToolLoop:
    """Run a tool loop with the real SDK for ``api`` until the model answers without a
    tool call, replaying every call and its result as an agent does."""
    recorder = LoopResult(api=api)
    loop = ToolLoop(api, recorder=recorder)
    http_client = sdk_http_client(recorder, proxy)
    kwargs: dict[str, Any] = {"base_url": base_url, "max_retries": 0, "http_client": http_client}
    if api == "anthropic":
        client: Any = anthropic.Anthropic(api_key="sk-ant-e2e", **kwargs)
    else:
        client = openai.OpenAI(api_key="sk-e2e", **kwargs)
    turn = {"chat": _chat_loop, "responses": _responses_loop, "anthropic": _anthropic_loop}[api]
    try:
        turn(client, stream, loop)
    finally:
        client.close()
    return loop


def _chat_loop(client: Any, stream: bool, loop: ToolLoop) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    common = {"model": MODEL, "tools": TOOLS_CHAT}
    for _ in range(MAX_TURNS):
        calls: list[dict[str, Any]] = []
        if stream:
            text = ""
            slots: dict[int, dict[str, Any]] = {}
            for chunk in client.chat.completions.create(messages=messages, stream=True, **common):
                text += add_chat_chunk(chunk, slots)
            for index, slot in sorted(slots.items()):
                assert len(slot["ids"]) == 1, f"call {index} had ids in deltas {slot['ids']!r}"
                calls.append({"id": slot["ids"][0], **{k: slot[k] for k in ("name", "arguments")}})
        else:
            message = client.chat.completions.create(messages=messages, **common).choices[0].message
            text = message.content or ""
            calls = [
                {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
                for tc in message.tool_calls or []
            ]
        if not calls:
            loop.final_text = text
            return
        loop.calls.append([c["id"] for c in calls])
        messages += chat_turn(calls, TOOL_OUTPUT)
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {loop.calls!r}")


def _responses_loop(client: Any, stream: bool, loop: ToolLoop) -> None:
    inputs: list[Any] = [{"role": "user", "content": PROMPT}]
    common = {"model": MODEL, "tools": TOOLS_RESPONSES}
    for _ in range(MAX_TURNS):
        if stream:
            # every id mention of a call, by output_index: added, deltas, done, completed
            mentions: dict[int, set[tuple[str, str]]] = defaultdict(set)
            final = None
            for event in client.responses.create(input=inputs, stream=True, **common):
                doc = event.model_dump()
                if isinstance(doc.get("output_index"), int):
                    mentions[doc["output_index"]] |= set(response_id_positions("responses", doc))
                for i, item in enumerate((doc.get("response") or {}).get("output") or []):
                    mentions[i] |= set(response_id_positions("responses", {"output": [item]}))
                if event.type == "response.completed":
                    final = event.response
            assert final is not None, "no response.completed event"
            output = final.output
            for i, o in enumerate(output):
                if o.type == "function_call":
                    want = {("item", o.id), ("call", o.call_id)}
                    assert mentions[i] == want, f"output {i}: events disagree: {mentions[i]!r}"
        else:
            output = client.responses.create(input=inputs, **common).output
        calls = [o for o in output if o.type == "function_call"]
        if not calls:
            loop.final_text = "".join(
                part.text for o in output if o.type == "message" for part in o.content
            )
            return
        loop.calls.append([c.call_id for c in calls])
        loop.items.append([c.id for c in calls])
        inputs += [o.model_dump(exclude_none=True) for o in output]
        inputs += [
            {"type": "function_call_output", "call_id": c.call_id, "output": TOOL_OUTPUT}
            for c in calls
        ]
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {loop.calls!r}")


def _anthropic_loop(client: Any, stream: bool, loop: ToolLoop) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    common = {"model": MODEL, "max_tokens": 1024, "tools": TOOLS_ANTHROPIC}
    for _ in range(MAX_TURNS):
        if stream:
            started: dict[int, str] = {}
            with client.messages.stream(messages=messages, **common) as s:
                for event in s:
                    if (
                        event.type == "content_block_start"
                        and event.content_block.type == "tool_use"
                    ):
                        started[event.index] = event.content_block.id
                message = s.get_final_message()
            kept = {i: b.id for i, b in enumerate(message.content) if b.type == "tool_use"}
            assert kept == started, f"content_block_start ids {started!r}, message {kept!r}"
        else:
            message = client.messages.create(messages=messages, **common)
        uses = [b for b in message.content if b.type == "tool_use"]
        if not uses:
            loop.final_text = "".join(b.text for b in message.content if b.type == "text")
            return
        loop.calls.append([b.id for b in uses])
        messages.append({"role": "assistant", "content": message.content})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": TOOL_OUTPUT}
                    for b in uses
                ],
            }
        )
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {loop.calls!r}")


# ----------------------------------------------------------------------------- checks


def per_turn(ids: list[str], n: int) -> list[list[str]]:
    return [ids[t * n : (t + 1) * n] for t in range(TURNS)]


def definition_ids(api: API, req: Any) -> list[str]:
    """The ids at the tool-call definition positions of a request's history."""
    if api == "chat":
        return [tc["id"] for m in req["messages"] for tc in m.get("tool_calls") or []]
    if api == "responses":
        return [
            v
            for it in req["input"]
            if it.get("type") == "function_call"
            for v in (it["call_id"], it["id"])
        ]
    return [
        b["id"]
        for m in req["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def check_client_ids(loop: ToolLoop, raw: str, n: int = 1) -> None:
    """Turn after turn, the client got the k-th client id of ``raw`` for its k-th call."""
    want = per_turn(CLIENT_IDS[raw], n)
    assert loop.calls == want, f"client kept call ids {loop.calls!r}, expected {want!r}"
    if loop.api == "responses":
        want_items = per_turn(CLIENT_IDS[ITEM0], n)
        assert loop.items == want_items, f"client kept item ids {loop.items!r}, want {want_items!r}"
    seen = [i for turn in loop.calls + loop.items for i in turn]
    assert len(set(seen)) == len(seen) and all(SAFE_ID.match(i) for i in seen), seen
    assert loop.final_text == FINAL_TEXT


def check_upstream_got_raw(up: ReuseUpstream, api: API, raw: str, n: int = 1) -> None:
    """Every request reached the upstream with its own raw ids (``n`` calls a turn) at every
    call and result position, and its own item id."""
    reqs = up.model_requests(api)
    check_upstream_got_its_own_ids(reqs, api, raw, turns=TURNS, parallel=n, item_ids=[ITEM0])


def check_strict_host(up: StrictHost, loop: ToolLoop) -> None:
    """The strict host answered every request (so it saw unique, safe ids) and got the
    client's ids exactly as the client sent them."""
    reqs = up.model_requests(loop.api)
    assert [r.status for r in reqs] == [200] * (TURNS + 1), [(r.status, r.error) for r in reqs]
    for rec, sent in zip(reqs, loop.sent, strict=True):
        got = request_id_positions(loop.api, rec.json)
        assert got == request_id_positions(loop.api, sent), f"strict host got {got!r}"
        defs = definition_ids(loop.api, rec.json)
        assert len(set(defs)) == len(defs) and all(SAFE_ID.match(d) for d in defs), defs


# ----------------------------------------------------------------------------- through toolid


@pytest.mark.parametrize("raw", RAWS)
@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("api", APIS)
def test_reused_id_gets_a_tag_per_call(api: API, stream: bool, raw: str, proxy: Mitmdump) -> None:
    """The upstream sends ``raw`` in all three tool turns: the client gets the 1st, 2nd and
    3rd client id of ``raw``; the upstream gets ``raw`` back everywhere."""
    with ReuseUpstream(ids=[raw]) as up:
        loop = run_loop(api, up.sdk_url(api), stream=stream, proxy=proxy.url)
        check_client_ids(loop, raw)
        check_upstream_got_raw(up, api, raw)


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("api", APIS)
def test_parallel_calls_with_one_id(api: API, stream: bool, proxy: Mitmdump) -> None:
    """Two parallel calls of one response carry the same raw id (and item id), three turns
    in a row: six calls, six distinct client ids, the raw ids back upstream."""
    with ReuseUpstream(ids=[KIMI, KIMI], item_ids=[ITEM0, ITEM0]) as up:
        loop = run_loop(api, up.sdk_url(api), stream=stream, proxy=proxy.url)
        check_client_ids(loop, KIMI, n=2)
        check_upstream_got_raw(up, api, KIMI, n=2)


@pytest.fixture(scope="module")
def strict_proxy(mitm: MitmdumpPool) -> Mitmdump:
    """mitmdump for which every upstream on 127.0.0.1 is a strict host."""
    return mitm.get(toolid_strict_hosts="127.0.0.1")


@pytest.mark.parametrize("raw", RAWS)
@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("api", APIS)
def test_strict_host_gets_unique_safe_ids(
    api: API, stream: bool, raw: str, strict_proxy: Mitmdump
) -> None:
    """A strict host (rejects duplicate or unsafe ids like Anthropic) gets the tagged client
    ids as they are, answers 200 every turn, and the loop completes."""
    with StrictHost("safe", ids=[raw], turns=TURNS) as up:
        loop = run_loop(api, up.sdk_url(api), stream=stream, proxy=strict_proxy.url)
        check_client_ids(loop, raw)
        check_strict_host(up, loop)


# ----------------------------------------------------------------------------- the problem


@pytest.mark.parametrize("route", ["direct", "observe"])
@pytest.mark.parametrize("api", APIS)
def test_without_toolid_ids_repeat(api: API, route: str, mitm: MitmdumpPool) -> None:
    """Straight to the upstream, or through toolid in observe mode, the client gets the
    same id in every turn: nothing tells its calls apart."""
    proxy = mitm.get(toolid_mode="observe").url if route == "observe" else None
    with ReuseUpstream(ids=[KIMI]) as up:
        loop = run_loop(api, up.sdk_url(api), stream=True, proxy=proxy)
        assert loop.calls == [[KIMI]] * TURNS
        if api == "responses":
            assert loop.items == [[ITEM0]] * TURNS
        check_upstream_got_raw(up, api, KIMI)


STRICT_ERRORS = {
    # raw id: (statuses of the requests, the error of the last one, per API)
    CALL0: (
        [200, 200, 400],  # the 3rd request defines call_0 twice
        {
            "chat": "duplicate tool call id 'call_0'",
            "responses": "Duplicate call_id found: call_0.",
            "anthropic": "`tool_use` ids must be unique",
        },
    ),
    KIMI: (
        [200, 400],  # the 2nd request replays an id outside [a-zA-Z0-9_-]
        {
            "chat": "does not match pattern",
            "responses": "does not match pattern",
            "anthropic": "tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        },
    ),
}


@pytest.mark.parametrize("raw", RAWS)
@pytest.mark.parametrize("api", APIS)
def test_strict_host_rejects_reused_ids_without_toolid(api: API, raw: str) -> None:
    """Straight to a strict host, the client's replayed history is rejected: ``call_0``
    twice (duplicate definition), or ``functions.Glob:0`` at all (pattern)."""
    statuses, errors = STRICT_ERRORS[raw]
    with StrictHost("safe", ids=[raw], turns=TURNS) as up:
        with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
            run_loop(api, up.sdk_url(api), stream=True)
        reqs = up.model_requests(api)
        assert [r.status for r in reqs] == statuses
        assert errors[api] in reqs[-1].error
        assert reqs[-1].error in str(caught.value)
