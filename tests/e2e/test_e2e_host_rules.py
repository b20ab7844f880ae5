"""End to end: every request satisfies the id rules of the host it goes to.

Stand-ins (``strict_hosts.StrictHost``) enforce the rule sets of OpenAI, Mistral, Anthropic
and Bedrock and answer 400 with the real error texts. Histories that break them (83-character
ids; ``toolu_``, OpenAI and Kimi ids for Mistral; reused and unsafe raw ids for Anthropic;
Responses items without ``fc`` / ``ctc``) go through one real mitmdump configured with
``toolid_host_rules``, sent by the real openai and anthropic SDKs: 200, every id conforming,
calls and results paired as the client paired them, the same request mapped the same way
twice, each mapping recorded. Straight to the stand-ins, the same requests get the 400.
A session moves from a lenient Kimi-style host to a strict one and back: the strict host
accepts the history, the lenient one still gets its own raw ids.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from standin import API, MODEL, Exchange, ReuseUpstream
from standin.strict import NATIVE_IDS, RULE_SETS, StrictHost, links, positions, violation

from toolid import decode, encode

from .conftest import Mitmdump, MitmdumpPool
from .helpers import (
    TOOL_RESULT,
    TOOLS_ANTHROPIC,
    TOOLS_CHAT,
    TOOLS_RESPONSES,
    LoopResult,
    mask_strings,
    request_id_positions,
    sdk_http_client,
)
from .test_e2e_reuse import run_loop

pytestmark = pytest.mark.e2e

STRICT = ("openai", "mistral", "anthropic", "bedrock")
CASE_HEADER = "x-e2e-case"  # ties a request to what the stand-in and the recorder saw

# ids from the wild
KIMI_RAW = "functions.Glob:0"
KIMI = encode(KIMI_RAW, "safe")  # tid1_functions-2EGlob-3A0: what a client of toolid keeps
KIMI_2 = KIMI + "-_2"  # the 2nd call that carried functions.Glob:0 (occurrence tag)
DEVIN = encode("get_weather:0#62786027996b4c40886cc7262bdf7382", "safe")  # 55 characters
TOOLU = "toolu_01A09q90qw90lq917835lq9"
OPENAI_CALL = "call_PTLP8xhu3uwZk4l3nlnrrJha"
MISTRAL_ID = "D681PevKs"
# 83 characters each, safe, alike in their first 80: a cut stem alone would collide
LONG_A = "call_" + "9fQm2XvT8bLwK3rZ" * 4 + "x7Kq2aZbcde" + "AAA"
LONG_B = LONG_A[:-3] + "BBB"
assert (len(KIMI), len(DEVIN), len(LONG_A), len(LONG_B)) == (25, 55, 83, 83)

# mitmdump addon (loaded after toolid): one JSON line per tagged flow, with its records
RECORDER_ADDON = """
import json

PATH = {path!r}


class Recorder:
    def response(self, flow):
        case = flow.request.headers.get({header!r})
        if case:
            line = {{"case": case, "toolid": flow.metadata.get("toolid"), "comment": flow.comment}}
            with open(PATH, "a", encoding="utf-8") as f:
                f.write(json.dumps(line, default=repr) + "\\n")


addons = [Recorder()]
"""


# ----------------------------------------------------------------------------- histories


@dataclass(frozen=True)
class Call:
    """One tool call of a history: its id, and for Responses its item id and item type."""

    id: str
    item: str | None = None
    custom: bool = False  # Responses custom_tool_call (else function_call)


def history(api: API, turns: list[list[Call]]) -> dict[str, Any]:
    """A request body: a prompt, then per turn the (parallel) calls and their results."""
    args = '{"city": "Paris"}'
    if api == "chat":
        messages: list[Any] = [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Paris?"},
        ]
        for calls in turns:
            tool_calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": args},
                }
                for c in calls
            ]
            messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
            messages += [
                {"role": "tool", "tool_call_id": c.id, "content": TOOL_RESULT} for c in calls
            ]
        return {"model": MODEL, "messages": messages, "tools": TOOLS_CHAT}
    if api == "responses":
        items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        for calls in turns:
            for c in calls:
                item: dict[str, Any] = {"type": "custom_tool_call" if c.custom else "function_call"}
                if c.item is not None:
                    item["id"] = c.item
                item["call_id"] = c.id
                item |= (
                    {"name": "apply_patch", "input": "*** Begin Patch"}
                    if c.custom
                    else {
                        "name": "get_weather",
                        "arguments": args,
                        "status": "completed",
                    }
                )
                items.append(item)
            items += [
                {
                    "type": "custom_tool_call_output" if c.custom else "function_call_output",
                    "call_id": c.id,
                    "output": TOOL_RESULT,
                }
                for c in calls
            ]
        tools = [*TOOLS_RESPONSES, {"type": "custom", "name": "apply_patch"}]
        return {"model": MODEL, "input": items, "tools": tools}
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    for calls in turns:
        uses = [
            {"type": "tool_use", "id": c.id, "name": "get_weather", "input": {"city": "Paris"}}
            for c in calls
        ]
        messages.append({"role": "assistant", "content": uses})
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": TOOL_RESULT} for c in calls
        ]
        messages.append({"role": "user", "content": results})
    return {"model": MODEL, "max_tokens": 1024, "messages": messages, "tools": TOOLS_ANTHROPIC}


def calls(*ids: str) -> list[Call]:
    return [Call(i) for i in ids]


@dataclass(frozen=True)
class Case:
    """A history for a strict host, and the error that host answers it with directly."""

    api: API
    rules: str
    turns: list[list[Call]]
    error: str


LENGTH = "string too long. Expected a string with maximum length"
CASES = {
    # OpenAI's reported Chat error, at its index (system, user, then the assistant message)
    "openai-chat-83": Case(
        "chat",
        "openai",
        [calls(LONG_A, "call_abc123", LONG_B), calls(DEVIN)],
        f"Invalid 'messages[2].tool_calls[0].id': {LENGTH} 40, but got a string with length "
        "83 instead.",
    ),
    "openai-responses-83": Case(
        "responses",
        "openai",
        [[Call(LONG_A, "fc_01"), Call(DEVIN, "fc_02")], [Call(LONG_B, "fc_03")]],
        f"Invalid 'input[1].call_id': {LENGTH} 64, but got a string with length 83 instead.",
    ),
    "openai-responses-no-fc": Case(
        "responses",
        "openai",
        [[Call("call_a1", "item_5a1"), Call("call_b2", "fc_b2")], [Call("call_c3", KIMI)]],
        "Invalid 'input[1].id': 'item_5a1'. Expected an ID that begins with 'fc'.",
    ),
    "openai-responses-no-ctc": Case(
        "responses",
        "openai",
        [[Call("call_d4", "fc_d4"), Call("call_e5", "custom_e5", custom=True)]],
        "Invalid 'input[2].id': 'custom_e5'. Expected an ID that begins with 'ctc'.",
    ),
    # Mistral's reported error, then Anthropic, Kimi (also a 2nd use) and native ids
    "mistral-chat": Case(
        "chat",
        "mistral",
        [calls(OPENAI_CALL, TOOLU), calls(KIMI, MISTRAL_ID), calls(KIMI_2)],
        f"Tool call id was {OPENAI_CALL} but must be a-z, A-Z, 0-9, with a length of 9.",
    ),
    # a server that reuses ids (no toolid between): pwd_0 defined twice
    "anthropic-reused": Case(
        "anthropic",
        "anthropic",
        [calls("pwd_0"), calls("pwd_0", TOOLU)],
        "messages.3.content.0: `tool_use` ids must be unique",
    ),
    # raw Kimi ids (no toolid between): unsafe, and reused too
    "anthropic-unsafe-reused": Case(
        "anthropic",
        "anthropic",
        [calls(KIMI_RAW, "pwd_0"), calls(KIMI_RAW), calls("pwd_0")],
        "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
    ),
    "bedrock-chat-83": Case(
        "chat",
        "bedrock",
        [calls(LONG_A, KIMI_RAW), calls(LONG_B)],
        f"1 validation error detected: Value '{LONG_A}' at 'messages[2].tool_calls[0].id' "
        "failed to satisfy constraint: Member must have length less than or equal to 64",
    ),
}


# ----------------------------------------------------------------------------- fixtures


class Records:
    """What the recorder addon wrote: per case tag, toolid's metadata and the comment."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, case: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            if self.path.exists():
                for line in self.path.read_text("utf-8").splitlines():
                    if (found := json.loads(line))["case"] == case:
                        return found
            if time.monotonic() > deadline:
                raise AssertionError(f"the recorder addon wrote nothing for case {case}")
            time.sleep(0.02)


@dataclass
class StandIns:
    """The strict stand-ins, one per rule set, and a lenient Kimi-style upstream."""

    hosts: dict[str, StrictHost]
    lenient: ReuseUpstream


@dataclass
class Rig(StandIns):
    """The stand-ins behind a mitmdump that maps each strict one to its rule set."""

    proxy: Mitmdump
    records: Records


@pytest.fixture(scope="module")
def stand_ins() -> Iterator[StandIns]:
    item_ids = {"openai": ["fc_68a1f0c2e3b4d5a6"]}
    hosts = {n: StrictHost(n, turns=3, item_ids=item_ids.get(n)).start() for n in STRICT}
    lenient = ReuseUpstream(ids=[KIMI_RAW], turns=2).start()
    yield StandIns(hosts, lenient)
    for server in [*hosts.values(), lenient]:
        server.stop()


@pytest.fixture(scope="module")
def rig(
    stand_ins: StandIns, mitm: MitmdumpPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rig]:
    rules = ",".join(f"127.0.0.1:{h.port}={name}" for name, h in stand_ins.hosts.items())
    workdir = tmp_path_factory.mktemp("host-rules")
    with recording_proxy(mitm, workdir, {"toolid_host_rules": rules}) as (inst, records):
        yield Rig(stand_ins.hosts, stand_ins.lenient, inst, records)


@contextlib.contextmanager
def recording_proxy(
    mitm: MitmdumpPool, workdir: Path, options: dict[str, str]
) -> Iterator[tuple[Mitmdump, Records]]:
    """A regular-mode mitmdump with toolid, ``options`` and the recorder addon (each request
    as it came and as it went, by its CASE_HEADER), watched by the pool while in use."""
    script = workdir / "recorder_addon.py"
    records = Records(workdir / "records.jsonl")
    script.write_text(RECORDER_ADDON.format(path=str(records.path), header=CASE_HEADER))
    inst = Mitmdump(
        workdir / "mitmdump", "regular", {"ssl_insecure": "true", **options}, scripts=[script]
    )
    with mitm.watching(inst):
        yield inst, records


# ----------------------------------------------------------------------------- sending


@dataclass
class Sent:
    """One request: the body the client sent, what the host received, what the SDK returned
    (None for a stream) or raised."""

    case: str
    body: bytes
    got: Exchange
    answer: Any = None
    error: Exception | None = None
    json: Any = field(init=False)

    def __post_init__(self) -> None:
        self.json = json.loads(self.body)


def send(api: API, host: ReuseUpstream, body: dict[str, Any], proxy: str | None) -> Sent:
    """Send ``body`` with the real SDK of ``api`` to ``host`` (through ``proxy`` if given)."""
    case = uuid.uuid4().hex
    recorder = LoopResult(api=api)
    kwargs: dict[str, Any] = {
        "base_url": host.sdk_url(api),
        "max_retries": 0,
        "http_client": sdk_http_client(recorder, proxy),
        "default_headers": {CASE_HEADER: case},
    }
    answer, error = None, None
    if api == "anthropic":
        client: Any = anthropic.Anthropic(api_key="sk-ant-e2e", **kwargs)
        create = client.messages.create
    else:
        client = openai.OpenAI(api_key="sk-e2e", **kwargs)
        create = client.chat.completions.create if api == "chat" else client.responses.create
    try:
        answer = create(**body)
        if body.get("stream"):
            answer = [event for event in answer]  # read it to its end
    except (openai.BadRequestError, anthropic.BadRequestError) as exc:
        error = exc
    finally:
        client.close()
    got = [r for r in host.model_requests(api) if r.headers.get(CASE_HEADER) == case]
    assert len(got) == 1, f"the host got {len(got)} requests of case {case}"
    return Sent(case, recorder.requests[-1], got[0], answer, error)


# ----------------------------------------------------------------------------- checks


def expected_ids(rules: str, api: API, req: Any) -> dict[int, str]:
    """Position index -> the id the host must get there, by the contract's order of
    preference (the restored raw id if it conforms, else the client id if it does), for
    each call whose choice no other call contends for (and its results)."""
    ps = positions(api, req)
    table = RULE_SETS[rules]

    def choice(n: int) -> str | None:
        p = ps[n]
        return next(
            (v for v in (decode(p.value), p.value) if table[p.kind].problem(v) is None), None
        )

    defs = [n for n, p in enumerate(ps) if p.defines]
    claims = Counter(
        (ps[n].namespace, v)
        for n in defs
        for v in {ps[n].value, decode(ps[n].value), choice(n)} - {None}
    )
    out = {n: c for n in defs if (c := choice(n)) is not None and claims[(ps[n].namespace, c)] == 1}
    for n, link in enumerate(links(ps)):
        if not ps[n].defines and link in out:
            out[n] = out[link]
    return out


def check_sent(sent: Sent, rules: str, api: API) -> set[tuple[str, str]]:
    """The host answered 200 and got the client's request with conforming, unique ids,
    paired as the client paired them, preferred ids kept, nothing else changed. Returns
    the (client id, sent id) pairs that were mapped."""
    assert sent.got.status == 200, f"the host answered {sent.got.status}: {sent.got.error}"
    assert sent.error is None, sent.error
    cps, gps = positions(api, sent.json), positions(api, sent.got.json)
    assert cps, "the client request has no id positions (harness bug)"
    assert None not in links(cps), "the client history has an orphan result (harness bug)"
    where = [(p.kind, p.defines, p.name) for p in cps]
    assert [(p.kind, p.defines, p.name) for p in gps] == where, "id positions moved"
    assert violation(rules, api, sent.got.json) is None
    assert links(gps) == links(cps), (
        f"results no longer pair with their calls: client {[p.value for p in cps]}, "
        f"host got {[p.value for p in gps]}"
    )
    defs = [(p.namespace, p.value) for p in gps if p.defines]
    assert len(set(defs)) == len(defs), f"ids not unique: {defs}"
    for n, want in expected_ids(rules, api, sent.json).items():
        assert gps[n].value == want, f"{gps[n].name}: got {gps[n].value!r}, expected {want!r}"
    masked_client = mask_strings(sent.body, {p.value for p in cps})
    assert mask_strings(sent.got.body, {p.value for p in gps}) == masked_client, (
        f"the request changed outside its ids:\nclient: {sent.body!r}\nhost:   {sent.got.body!r}"
    )
    return {
        (c.value, g.value)
        for c, g in zip(cps, gps, strict=True)
        if g.value not in (c.value, decode(c.value))
    }


def check_records(rig: Rig, sent: Sent, mapped: set[tuple[str, str]], rules: str) -> None:
    """toolid recorded each mapping (``"action": "mapped"``, ``"sent"``) and named them
    in the flow's comment (``N mapped (client -> sent for RULES, ...)``)."""
    found = rig.records.get(sent.case)
    records = (found["toolid"] or {}).get("request", [])
    got = [r for r in records if r["action"] == "mapped"]
    assert {(r["client"], r["sent"]) for r in got} == mapped, records
    if not mapped:
        assert "mapped" not in (found["comment"] or ""), found["comment"]
        return
    comment = found["comment"]
    count = re.search(r"\b(\d+) mapped \(", comment)
    assert count is not None and int(count.group(1)) == len(got), comment
    shown = re.findall(rf" -> (\S+) for {rules}\b", comment)
    assert shown and set(shown) <= {s for _, s in mapped}, comment


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", list(CASES))
def test_strict_host_accepts_history_through_toolid(name: str, rig: Rig) -> None:
    """Through toolid the host answers 200 (twice, with byte-identical requests), every id
    it got conforms, pairs and is unique; each mapping is recorded."""
    case = CASES[name]
    host = rig.hosts[case.rules]
    body = history(case.api, case.turns)
    first = send(case.api, host, body, rig.proxy.url)
    mapped = check_sent(first, case.rules, case.api)
    assert mapped, "nothing was mapped: the case tests nothing"
    check_records(rig, first, mapped, case.rules)
    again = send(case.api, host, body, rig.proxy.url)
    assert again.got.body == first.got.body, "the same request was mapped differently"


@pytest.mark.parametrize("name", list(CASES))
def test_strict_host_rejects_history_without_toolid(name: str, stand_ins: StandIns) -> None:
    """Straight to the host, the same history gets a 400 with the real error text."""
    case = CASES[name]
    sent = send(case.api, stand_ins.hosts[case.rules], history(case.api, case.turns), None)
    assert (sent.got.status, sent.got.error) == (400, case.error)
    assert isinstance(sent.error, openai.BadRequestError | anthropic.BadRequestError)


UNPAIRED = {
    # the 2nd turn's result names the 1st turn's call (Chat, Messages) or no call (Responses)
    "chat": "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'.",
    "anthropic": "messages.4.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
    "call_a. Each `tool_result` block must have a corresponding `tool_use` block in the "
    "previous message.",
    "responses": "No tool call found for function call output with call_id call_z.",
}


@pytest.mark.parametrize("api", list(UNPAIRED))
def test_strict_host_rejects_unpaired_results(api: API, stand_ins: StandIns) -> None:
    """A stand-in rejects a result that answers no call where the real host looks for one
    (so a mapping that breaks pairing fails), like a real host."""
    body = history(api, [calls("call_a"), calls("call_b")])
    last = body["input" if api == "responses" else "messages"][-1]
    if api == "chat":
        last["tool_call_id"] = "call_a"
    elif api == "anthropic":
        last["content"][0]["tool_use_id"] = "call_a"
    else:
        last["call_id"] = "call_z"
    sent = send(api, stand_ins.hosts["anthropic" if api == "anthropic" else "openai"], body, None)
    assert (sent.got.status, sent.got.error) == (400, UNPAIRED[api])


MOVES = [
    pytest.param("chat", "mistral", id="chat-to-mistral"),
    pytest.param("responses", "openai", id="responses-to-openai"),
]
MOVE_ERRORS = {
    "chat": f"Tool call id was {KIMI_RAW} but must be a-z, A-Z, 0-9, with a length of 9.",
    "responses": "Invalid 'input[1].call_id': string does not match pattern. Expected a string "
    "that matches the pattern '^[a-zA-Z0-9_-]+$'.",
}


@pytest.mark.parametrize(("api", "rules"), MOVES)
def test_session_moves_to_strict_host_and_back(api: API, rules: str, rig: Rig) -> None:
    """Two tool turns with a lenient Kimi-style host (which reuses its ids), then the
    session moves to a strict host through the same proxy: it accepts the history and
    calls a tool itself (the client gets the host's own id); the next turn maps the old
    history the same way and gives the host its own id back. Back at the lenient host, it
    gets its raw ids again."""
    loop = run_loop(api, rig.lenient.sdk_url(api), stream=True, proxy=rig.proxy.url)
    assert loop.calls == [[KIMI], [KIMI_2]], loop.calls
    body = loop.sent[-1] | {"stream": False}  # the 2 calls and results the client kept
    host = rig.hosts[rules]

    turn2 = send(api, host, body, rig.proxy.url)
    mapped = check_sent(turn2, rules, api)
    assert mapped, "nothing was mapped: the move tests nothing"
    check_records(rig, turn2, mapped, rules)
    got = answer_calls(api, turn2.answer)
    assert [c.id for c in got] == [NATIVE_IDS[rules]], f"the client got {got}, not the host's id"
    body3 = continued(api, body, got)
    turn3 = send(api, host, body3, rig.proxy.url)
    check_sent(turn3, rules, api)
    n = len(positions(api, turn2.got.json))
    assert positions(api, turn3.got.json)[:n] == positions(api, turn2.got.json), (
        "the history sent in turn 2 was mapped differently in turn 3"
    )
    native = [p.value for p in positions(api, turn3.got.json)[n:] if p.kind != "responses.fc"]
    assert native == [NATIVE_IDS[rules]] * 2, native

    back = send(api, rig.lenient, body3, rig.proxy.url)
    assert back.got.status == 200, back.got.error
    got = [v for k, v in request_id_positions(api, back.got.json) if k == "call"]
    assert got == [KIMI_RAW] * 4 + [NATIVE_IDS[rules]] * 2, got


def answer_calls(api: API, answer: Any) -> list[Call]:
    """The tool calls of an SDK answer (Chat or Responses)."""
    if api == "chat":
        return [Call(tc.id) for tc in answer.choices[0].message.tool_calls or []]
    return [Call(o.call_id, o.id) for o in answer.output if o.type == "function_call"]


def continued(api: API, body: dict[str, Any], got: list[Call]) -> dict[str, Any]:
    """``body`` plus the calls ``got`` and their results: the client's next turn."""
    more = history(api, [got])
    body = json.loads(json.dumps(body))
    if api == "chat":
        body["messages"] += more["messages"][2:]
    else:
        body["input"] += more["input"][1:]
    return body


@pytest.mark.parametrize(("api", "rules"), MOVES)
def test_session_move_fails_without_toolid(api: API, rules: str, stand_ins: StandIns) -> None:
    """Without toolid the client keeps the lenient host's raw ids, and the strict host
    rejects the moved history."""
    loop = run_loop(api, stand_ins.lenient.sdk_url(api), stream=False)
    assert loop.calls == [[KIMI_RAW], [KIMI_RAW]], loop.calls
    sent = send(api, stand_ins.hosts[rules], loop.sent[-1], None)
    assert (sent.got.status, sent.got.error) == (400, MOVE_ERRORS[api])
