"""End to end: tool calls whose ids a client cannot use as they are, on the Responses API
(HTTP and WebSocket), Anthropic Messages and Bedrock Converse.

The stand-ins (``standin.unusable_ids_apis``) answer three tool turns of one ``bash`` call
whose id position (Responses ``call_id``, Messages ``tool_use.id``, Converse ``toolUseId``)
is, per shape: missing, ``null``, or the number 7 every turn, in every event of a stream that
carries the call. They check every later request and answer it 400 unless each id comes back
exactly (7 as the number 7), and unless a call sent without an id comes back under a
non-empty ``[A-Za-z0-9_-]+`` string no other call has, which its result repeats.

Through a real mitmdump with toolid, a real client completes the three-turn loop: the openai
SDK (``responses.create``, buffered and SSE) in reverse mode; the ``websockets`` client on the
Responses WebSocket (reverse mode; ``previous_response_id`` and full history); the anthropic
SDK (buffered and streamed) in reverse mode; boto3 ``converse`` and ``converse_stream``
(unsigned: toolid never changes a SigV4-signed request; regular mode, the stand-in given the
bedrock rule set as ``test_e2e_bedrock`` does). Every call's id is the one toolid's wire
format gives: ``tid1_-n`` (``tid1_-n-_2``, ``tid1_-n-_3``) for a missing or null id,
``tid1_-j7`` (``tid1_-j7-_2`` ...) for 7, the same in every event that mentions the call; the
stand-in got a minted id as the client sent it and 7 as the number 7, except Bedrock: a host
with id rules (string ids of a pattern, distinct: ``bedrock.converse_problem``, which the
Converse stand-in applies too) gets no number and no occurrence-tagged raw id from toolid
(docs/rules.md), so it got ``tid1_-j7``, ``tid1_-j7-_2`` and ``tid1_-j7-_3`` as the client
sent them, which it takes.

Straight at the stand-ins the clients break: the openai and anthropic SDKs give ``None`` for
a missing or null id, which the stand-in rejects when it comes back, and the int 7 for every
call (one id, no string, for three calls); a WebSocket client gets no ``call_id`` or ``null``,
rejected when sent back; boto3 drops a ``null`` ``toolUseId`` (no member, as when it is
missing) and keeps 7 as an int, then refuses to send either back (parameter validation), so
the loop ends at its first tool turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import boto3
import botocore
import httpx2
import openai
import pytest
from botocore.config import Config
from botocore.exceptions import ParamValidationError
from standin import FINAL_TEXT, MODEL, UpstreamServer
from standin.apis import sdk_url
from standin.bedrock import REGION
from standin.responses_ws import FINAL_TEXT as WS_FINAL_TEXT
from standin.unusable_ids import MISSING
from standin.unusable_ids_apis import (
    SHAPES,
    ApisScenario,
    Shape,
    UnusableIdsBedrock,
    UnusableIdsWsUpstream,
    history_ids,
    model_id,
    scenario,
)

from .agents_common import CAP
from .conftest import Mitmdump, MitmdumpPool
from .test_e2e_unusable_ids import check_client_ids
from .test_e2e_websocket import USER, Client

pytestmark = pytest.mark.e2e

TURNS = 3
MAX_TURNS = 8  # a loop that has not ended by then never ends
PROMPT = "Which .txt files are in this directory? Use a tool to find out."
TOOL_OUTPUT = "a.txt\nb.txt\nc.txt"
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
RESPONSES_TOOLS = [{"type": "function", "name": "bash", "parameters": SCHEMA}]
ANTHROPIC_TOOLS = [{"name": "bash", "description": "Run a command", "input_schema": SCHEMA}]
NO_ID = (
    "The stand-in sent this call without an id; expected a non-empty string matching "
    "^[A-Za-z0-9_-]+$."
)

HttpApi = Literal["responses", "anthropic"]
Form = Literal["previous_response_id", "full-history"]
Op = Literal["converse", "converse_stream"]


@dataclass
class Kept:
    """What a client kept: per tool turn, the id of each call (what it sends back; MISSING:
    the call had none) and every id the events it read gave each call; its final text."""

    ids: list[list[Any]] = field(default_factory=list)
    mentions: list[list[list[Any]]] = field(default_factory=list)
    final_text: str | None = None


def check_mentions(kept: Kept) -> None:
    """Every event that mentions a call gives it the id the client kept."""
    assert len(kept.mentions) == len(kept.ids), kept
    for t, (ids, mentions) in enumerate(zip(kept.ids, kept.mentions, strict=True), 1):
        for j, (kept_id, seen) in enumerate(zip(ids, mentions, strict=True)):
            assert seen and all(s == kept_id for s in seen), f"turn {t} call {j}: {seen!r}"


def check_got_back(got: list[list[Any]], kept: Kept, shape: Shape, *, strict: bool = False) -> None:
    """The stand-in's last request held ``TURNS`` tool turns, each call under the id the
    client kept (a minted string as it is) or, for 7, the number 7; to a ``strict`` host (id
    rules: Bedrock's), which takes only string ids, under the client id for 7 too."""
    want = [[7] if shape == "number" and not strict else ids for ids in kept.ids]
    assert got == want and len(got) == TURNS, f"the stand-in got {got!r}, expected {want!r}"
    assert [type(i) for t in got for i in t] == [type(i) for t in want for i in t], got


def check_sdk_kept(kept: Kept, want: list[list[Any]]) -> None:
    """The ids a client kept straight at a stand-in: ``want``, of the same types."""
    assert kept.ids == want
    assert [type(i) for t in kept.ids for i in t] == [type(i) for t in want for i in t]


# ----------------------------------------------------------------------------- HTTP: SDKs


def responses_loop(base_url: str, stream: bool, kept: Kept) -> None:
    """A tool loop with the openai SDK's ``responses.create``, replaying each answer's
    output items (as the SDK dumps them) and a ``function_call_output`` per call."""
    client: Any = openai.OpenAI(
        api_key="sk-e2e", base_url=base_url, max_retries=0, http_client=_http()
    )
    inputs: list[Any] = [{"role": "user", "content": PROMPT}]
    common = {"model": MODEL, "tools": RESPONSES_TOOLS}
    with client:
        for _ in range(MAX_TURNS):
            mentions: dict[int, list[Any]] = {}
            if stream:
                events = list(client.responses.create(input=inputs, stream=True, **common))
                for e in events:
                    if (
                        e.type.startswith("response.output_item.")
                        and e.item.type == "function_call"
                    ):
                        mentions.setdefault(e.output_index, []).append(e.item.call_id)
                response = events[-1].response
                assert events[-1].type == "response.completed", events[-1]
            else:
                response = client.responses.create(input=inputs, **common)
            for n, item in enumerate(response.output):
                if item.type == "function_call":
                    mentions.setdefault(n, []).append(item.call_id)
            calls = [o for o in response.output if o.type == "function_call"]
            if not calls:
                kept.final_text = response.output_text
                return
            kept.ids.append([c.call_id for c in calls])
            kept.mentions.append([mentions[n] for n in sorted(mentions)])
            inputs += [o.model_dump(exclude_none=True) for o in response.output]
            inputs += [
                {"type": "function_call_output", "call_id": c.call_id, "output": TOOL_OUTPUT}
                for c in calls
            ]
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {kept.ids!r}")


def messages_loop(base_url: str, stream: bool, kept: Kept) -> None:
    """A tool loop with the anthropic SDK, replaying each answer's content (the SDK's
    blocks, as its quickstart does) and a ``tool_result`` per ``tool_use``."""
    client: Any = anthropic.Anthropic(
        api_key="sk-ant-e2e", base_url=base_url, max_retries=0, http_client=_http()
    )
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    common = {"model": MODEL, "max_tokens": 1024, "tools": ANTHROPIC_TOOLS}
    with client:
        for _ in range(MAX_TURNS):
            mentions: dict[int, list[Any]] = {}
            if stream:
                with client.messages.stream(messages=messages, **common) as events:
                    for e in events:  # content_block_start, and the helper's _stop
                        block = getattr(e, "content_block", None)
                        if block is not None and block.type == "tool_use":
                            mentions.setdefault(e.index, []).append(block.id)
                    message = events.get_final_message()
            else:
                message = client.messages.create(messages=messages, **common)
            for n, block in enumerate(message.content):
                if block.type == "tool_use":
                    mentions.setdefault(n, []).append(block.id)
            uses = [b for b in message.content if b.type == "tool_use"]
            if not uses:
                kept.final_text = "".join(b.text for b in message.content if b.type == "text")
                return
            kept.ids.append([b.id for b in uses])
            kept.mentions.append([mentions[n] for n in sorted(mentions)])
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": TOOL_OUTPUT} for b in uses
            ]
            messages += [
                {"role": "assistant", "content": message.content},
                {"role": "user", "content": results},
            ]
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {kept.ids!r}")


def _http() -> Any:
    return httpx2.Client(trust_env=False, timeout=30.0)


LOOPS: dict[HttpApi, Callable[[str, bool, Kept], None]] = {
    "responses": responses_loop,
    "anthropic": messages_loop,
}
HTTP_CASES = [
    pytest.param(api, stream, shape, id=f"{api}-{'stream' if stream else 'buffered'}-{shape}")
    for api in LOOPS
    for stream in (True, False)
    for shape in SHAPES
]


def tool_requests(handle: Any) -> list[Any]:
    return [e for e in handle.exchanges if e.method == "POST" and e.api is not None]


@pytest.mark.parametrize(("api", "stream", "shape"), HTTP_CASES)
def test_sdk_through_toolid(
    api: HttpApi, stream: bool, shape: Shape, upstream: UpstreamServer, reverse_proxy: Mitmdump
) -> None:
    """The SDK completes the three-turn loop through toolid, under the documented client id
    of each call, the same in every event; the stand-in got its own ids back."""
    handle = upstream.scenario(scenario(shape, max_requests=CAP))
    kept = Kept()
    LOOPS[api](sdk_url(api, f"{reverse_proxy.url}/s/{handle.key}"), stream, kept)
    assert kept.final_text == FINAL_TEXT
    check_client_ids(kept.ids, shape)
    check_mentions(kept)
    assert isinstance(handle.scenario, ApisScenario)
    assert handle.scenario.violations == []
    reqs = tool_requests(handle)
    assert [r.status for r in reqs] == [200] * (TURNS + 1), [(r.status, r.error) for r in reqs]
    check_got_back(history_ids(api, reqs[-1].json), kept, shape)


def _no_id_error(api: HttpApi, shape: Shape) -> str:
    """The stand-in's answer to a history giving back the ``None`` the SDK kept for a call
    sent without an id: the openai SDK's item dump leaves it out; the anthropic SDK's block
    dump leaves out a member that never came and keeps a ``null`` that did."""
    if api == "responses":
        return f"Invalid 'input[1].call_id': no id. {NO_ID}"
    value = "no id" if shape == "missing" else "null (null)"
    return f"Invalid 'messages[1].content[0].id': {value}. {NO_ID}"


# The SDKs' pydantic models warn when they dump the int 7 where they expect a str.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize(("api", "stream", "shape"), HTTP_CASES)
def test_sdk_without_toolid(
    api: HttpApi, stream: bool, shape: Shape, upstream: UpstreamServer
) -> None:
    """Straight at the stand-in the SDK keeps ``None`` for a missing or null id, which the
    stand-in rejects when it comes back; it keeps the int 7 for every call, which the stand-in
    takes: three calls, one id, no string."""
    handle = upstream.scenario(scenario(shape, max_requests=CAP))
    assert isinstance(handle.scenario, ApisScenario)
    kept = Kept()
    if shape == "number":
        LOOPS[api](handle.base_url(api), stream, kept)
        assert kept.final_text == FINAL_TEXT
        assert handle.scenario.violations == []
        check_sdk_kept(kept, [[7]] * TURNS)
        return
    errors = (openai.BadRequestError, anthropic.BadRequestError)
    with pytest.raises(errors) as caught:
        LOOPS[api](handle.base_url(api), stream, kept)
    assert handle.scenario.violations == [_no_id_error(api, shape)]
    assert _no_id_error(api, shape) in str(caught.value)
    assert [r.status for r in tool_requests(handle)] == [200, 400]
    check_sdk_kept(kept, [[None]])


# ----------------------------------------------------------------------------- WebSocket


@pytest.fixture(scope="module")
def ws_upstream() -> Iterator[UnusableIdsWsUpstream]:
    with UnusableIdsWsUpstream(turns=TURNS) as up:
        yield up


@pytest.fixture(scope="module")
def ws_proxy(mitm: MitmdumpPool, ws_upstream: UnusableIdsWsUpstream) -> Mitmdump:
    """Reverse mode in front of the WebSocket stand-in (a mitmdump of its own: the shared
    ones' logs are read by other tests)."""
    return mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}")


def ws_loop(client: Client, form: Form, kept: Kept) -> list[dict[str, Any]]:
    """A tool loop on one connection, giving each call's item back as it came (full
    history) and a ``function_call_output`` with the ``call_id`` it came with (none if it
    had none); the last response's events."""
    history: list[Any] = [USER]
    events = client.create(history)
    for _ in range(MAX_TURNS):
        if events[-1]["type"] == "error":
            return events
        mentions: dict[int, list[Any]] = {}
        for e in events:
            items = [(e.get("output_index"), e.get("item"))]
            items += enumerate((e.get("response") or {}).get("output") or [])
            for n, item in items:
                if isinstance(item, dict) and item.get("type") == "function_call":
                    mentions.setdefault(n, []).append(item.get("call_id", MISSING))
        done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        calls = [i for i in done if i["type"] == "function_call"]
        if not calls:
            kept.final_text = "".join(
                e["delta"] for e in events if e["type"] == "response.output_text.delta"
            )
            return events
        kept.ids.append([c.get("call_id", MISSING) for c in calls])
        kept.mentions.append([mentions[n] for n in sorted(mentions)])
        outputs = [
            {"type": "function_call_output", "output": TOOL_OUTPUT}
            | ({"call_id": c["call_id"]} if "call_id" in c else {})
            for c in calls
        ]
        if form == "full-history":
            history += [*calls, *outputs]
            events = client.create(history)
        else:
            events = client.create(outputs, previous=events[-1]["response"]["id"])
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {kept.ids!r}")


FORMS: tuple[Form, ...] = ("previous_response_id", "full-history")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape", SHAPES)
def test_websocket_through_toolid(
    shape: Shape, form: Form, ws_upstream: UnusableIdsWsUpstream, ws_proxy: Mitmdump
) -> None:
    """The WebSocket client completes the loop through toolid under the documented client
    ids, the same in every event; the stand-in got its own ids back."""
    before = len(ws_upstream.connections)
    kept = Kept()
    origin = ws_proxy.url.replace("http://", "ws://")
    with Client(ws_upstream.shape_url(shape, origin), None) as client:
        ws_loop(client, form, kept)
    assert kept.final_text == WS_FINAL_TEXT
    check_client_ids(kept.ids, shape)
    check_mentions(kept)
    (conn,) = ws_upstream.connections[before:]
    assert [e["type"] for e in conn.events() if e["type"] == "error"] == []
    requests = conn.requests()
    assert len(requests) == TURNS + 1
    got = [
        [i["call_id"] for i in r["input"] if i["type"] == "function_call_output"]
        for r in requests[1:]
    ]
    if form == "full-history":
        got = history_ids("responses", requests[-1])
    check_got_back(got, kept, shape)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape", SHAPES)
def test_websocket_without_toolid(
    shape: Shape, form: Form, ws_upstream: UnusableIdsWsUpstream
) -> None:
    """Straight at the stand-in the client gets a call without ``call_id`` or with ``null``,
    which the stand-in rejects when it comes back (an ``error`` event); or 7 for every call."""
    kept = Kept()
    with Client(ws_upstream.shape_url(shape), None) as client:
        last = ws_loop(client, form, kept)
    if shape == "number":
        assert kept.final_text == WS_FINAL_TEXT
        check_sdk_kept(kept, [[7]] * TURNS)
        return
    assert kept.ids == [[MISSING if shape == "missing" else None]]
    assert last[-1]["type"] == "error" and last[-1]["status"] == 400, last
    at = "input[0]" if form == "previous_response_id" else "input[1]"
    value = "no id" if shape == "missing" else "null (null)"
    assert last[-1]["error"]["message"] == f"Invalid '{at}.call_id': {value}. {NO_ID}"


# ----------------------------------------------------------------------------- Converse


@pytest.fixture(scope="module")
def converse_standin() -> Iterator[UnusableIdsBedrock]:
    server = UnusableIdsBedrock(turns=TURNS).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bedrock_proxy(mitm: MitmdumpPool, converse_standin: UnusableIdsBedrock) -> Mitmdump:
    """Regular mode; the stand-in gets the bedrock rule set (as test_e2e_bedrock's)."""
    return mitm.get(toolid_host_rules=f"{converse_standin.authority}=bedrock")


def bedrock_client(standin: UnusableIdsBedrock, proxy: Mitmdump | None) -> Any:
    """An unsigned boto3 bedrock-runtime client at the stand-in (through ``proxy``)."""
    options: dict[str, Any] = {
        "retries": {"max_attempts": 1},
        "read_timeout": 30,
        "signature_version": botocore.UNSIGNED,
    }
    if proxy is not None:
        options["proxies"] = {"http": proxy.url}
    return boto3.client(
        "bedrock-runtime",
        config=Config(**options),
        region_name=REGION,
        endpoint_url=standin.base_url,
    )


def converse_loop(client: Any, op: Op, shape: Shape, kept: Kept) -> None:
    """A tool loop with boto3, replaying each answer's content as it parsed it (a stream's
    blocks put together from its events) and a ``toolResult`` per ``toolUse``."""
    history: list[Any] = [{"role": "user", "content": [{"text": PROMPT}]}]
    for _ in range(MAX_TURNS):
        if op == "converse":
            answer = client.converse(modelId=model_id(shape), messages=history)
            content = answer["output"]["message"]["content"]
            mentions = [[b["toolUse"].get("toolUseId", MISSING)] for b in content if "toolUse" in b]
        else:
            answer = client.converse_stream(modelId=model_id(shape), messages=history)
            content, mentions = _blocks(list(answer["stream"]))
        uses = [b["toolUse"] for b in content if "toolUse" in b]
        if not uses:
            kept.final_text = "".join(b.get("text", "") for b in content)
            return
        kept.ids.append([u.get("toolUseId", MISSING) for u in uses])
        kept.mentions.append(mentions)
        results = [
            {"toolResult": {"content": [{"text": TOOL_OUTPUT}]}}
            for _ in uses  # the id as the client has it (none: no member)
        ]
        for r, u in zip(results, uses, strict=True):
            if "toolUseId" in u:
                r["toolResult"]["toolUseId"] = u["toolUseId"]
        history += [{"role": "assistant", "content": content}, {"role": "user", "content": results}]
    raise AssertionError(f"the loop did not end within {MAX_TURNS} turns: {kept.ids!r}")


def _blocks(events: list[Any]) -> tuple[list[Any], list[list[Any]]]:
    """A ConverseStream answer's content blocks, and the ids its events gave each call."""
    blocks: dict[int, Any] = {}
    mentions: dict[int, list[Any]] = {}
    for e in events:
        if "contentBlockStart" in e:
            start = e["contentBlockStart"]
            use = dict(start["start"]["toolUse"])
            blocks[start["contentBlockIndex"]] = {"toolUse": use | {"input": ""}}
            mentions[start["contentBlockIndex"]] = [use.get("toolUseId", MISSING)]
        elif "contentBlockDelta" in e:
            n, delta = e["contentBlockDelta"]["contentBlockIndex"], e["contentBlockDelta"]["delta"]
            if "toolUse" in delta:
                blocks[n]["toolUse"]["input"] += delta["toolUse"]["input"]
            elif "text" in delta:
                blocks.setdefault(n, {"text": ""})["text"] += delta["text"]
    for block in blocks.values():
        if "toolUse" in block:
            block["toolUse"]["input"] = json.loads(block["toolUse"]["input"])
    return [blocks[n] for n in sorted(blocks)], [mentions[n] for n in sorted(mentions)]


OPS: tuple[Op, ...] = ("converse", "converse_stream")


@pytest.mark.usefixtures("no_aws_configuration")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES)
def test_converse_through_toolid(
    op: Op, shape: Shape, converse_standin: UnusableIdsBedrock, bedrock_proxy: Mitmdump
) -> None:
    """boto3 completes the loop through toolid under the documented client ids; the
    stand-in got its own ids back (unsigned requests: toolid restores them)."""
    before = len(converse_standin.exchanges)
    kept = Kept()
    converse_loop(bedrock_client(converse_standin, bedrock_proxy), op, shape, kept)
    assert kept.final_text == FINAL_TEXT
    check_client_ids(kept.ids, shape)
    check_mentions(kept)
    exchanges = converse_standin.exchanges[before:]
    assert [(e.status, e.error, e.auth) for e in exchanges] == [(200, "", "none")] * (TURNS + 1)
    got = history_ids("converse", json.loads(exchanges[-1].body))
    check_got_back(got, kept, shape, strict=True)


@pytest.mark.usefixtures("no_aws_configuration")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES)
def test_converse_without_toolid(
    op: Op, shape: Shape, converse_standin: UnusableIdsBedrock
) -> None:
    """Straight at the stand-in boto3 parses the call without ``toolUseId`` (it drops a
    ``null`` member too) or with the int 7, and refuses to send it back: parameter
    validation, before any request."""
    before = len(converse_standin.exchanges)
    kept = Kept()
    with pytest.raises(ParamValidationError) as caught:
        converse_loop(bedrock_client(converse_standin, None), op, shape, kept)
    assert kept.ids == [[7 if shape == "number" else MISSING]]
    where = "messages[1].content[0].toolUse"
    if shape == "number":
        assert f"Invalid type for parameter {where}.toolUseId, value: 7" in str(caught.value)
    else:
        assert f'Missing required parameter in {where}: "toolUseId"' in str(caught.value)
    assert [e.status for e in converse_standin.exchanges[before:]] == [200]
