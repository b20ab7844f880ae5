"""End to end: in front of one gateway host, each model's requests satisfy the id rules of
the provider behind it.

One stand-in gateway (``strict_hosts.Gateway``, OpenRouter-like) serves every model on one
host and enforces, per request, the rules of the provider its model names, with the real 400
texts: Mistral for ``mistralai/*`` and ``devstral*``, OpenAI for ``openai/*`` and ``gpt-*``,
Anthropic for ``anthropic/*`` and ``claude-*``, Mistral for a custom ``acme-coder-*`` name;
a Kimi model is served leniently. Histories with foreign (Anthropic, OpenAI, Kimi), long and
reused ids go through one real mitmdump, sent by the real openai and anthropic SDKs (and the
anthropic SDK's Vertex client, whose ``:streamRawPredict`` path names the model): 400
straight to the gateway, 200 through toolid with no option for the well-known names and one
``toolid_model_rules`` entry for the custom name, mapped the same way on a repeat, each
mapping recorded with the model that chose it. A Kimi session through the same gateway gets
its own ids back, then moves to a Mistral model there.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from anthropic.lib.vertex import AnthropicVertex
from standin import API, MODEL
from standin.strict import Gateway

from .conftest import Mitmdump, MitmdumpPool
from .helpers import LoopResult, request_id_positions, sdk_http_client
from .test_e2e_host_rules import (
    CASE_HEADER,
    DEVIN,
    KIMI,
    KIMI_2,
    KIMI_RAW,
    LENGTH,
    LONG_A,
    LONG_B,
    MISTRAL_ID,
    OPENAI_CALL,
    TOOLU,
    Call,
    Records,
    Sent,
    calls,
    check_records,
    check_sent,
    history,
    recording_proxy,
)
from .test_e2e_reuse import run_loop

pytestmark = pytest.mark.e2e

# The gateway's own routing: which provider (rule set) each model name reaches.
PROVIDERS = {
    "mistralai/*": "mistral",
    "devstral*": "mistral",
    "acme-coder-*": "mistral",  # a company's own name for a Mistral model
    "openai/*": "openai",
    "gpt-*": "openai",
    "anthropic/*": "anthropic",
    "claude-*": "anthropic",
}
CUSTOM = "acme-coder-*=mistral"  # the one option the custom name needs
VERTEX_MODEL = "claude-sonnet-4@20250514"
MISTRAL_TEXT = "but must be a-z, A-Z, 0-9, with a length of 9."
PATTERN = "String should match pattern '^[a-zA-Z0-9_-]+$'"


@dataclass(frozen=True)
class Case:
    """A history for one model behind the gateway, and the gateway's answer to it directly.
    ``api`` ``vertex``: the Messages API through the anthropic SDK's Vertex client."""

    api: API | str
    model: str
    rules: str
    turns: list[list[Call]]
    error: str

    @property
    def wire_api(self) -> API:
        return "anthropic" if self.api == "vertex" else self.api  # type: ignore[return-value]


CASES = {
    # the reported one: a session with Anthropic and Kimi ids moved to a Mistral model
    "mistral-chat": Case(
        "chat",
        "mistralai/devstral-medium-2507",
        "mistral",
        [calls(TOOLU, KIMI), calls(KIMI_2, MISTRAL_ID), calls(OPENAI_CALL)],
        f"Tool call id was {TOOLU} {MISTRAL_TEXT}",
    ),
    "mistral-messages": Case(
        "anthropic",
        "devstral-small-2505",
        "mistral",
        [calls(KIMI, TOOLU), calls(KIMI_2)],
        f"Tool call id was {KIMI} {MISTRAL_TEXT}",
    ),
    "openai-chat-83": Case(
        "chat",
        "openai/gpt-4.1",
        "openai",
        [calls(LONG_A, "call_abc123", LONG_B), calls(DEVIN)],
        f"Invalid 'messages[2].tool_calls[0].id': {LENGTH} 40, but got a string with length "
        "83 instead.",
    ),
    "openai-responses-83": Case(
        "responses",
        "gpt-5-codex",
        "openai",
        [[Call(LONG_A, "fc_01"), Call(DEVIN, "fc_02")], [Call(LONG_B, "fc_03")]],
        f"Invalid 'input[1].call_id': {LENGTH} 64, but got a string with length 83 instead.",
    ),
    "claude-messages-reused": Case(
        "anthropic",
        "anthropic/claude-sonnet-4",
        "anthropic",
        [calls("pwd_0"), calls("pwd_0", TOOLU)],
        "messages.3.content.0: `tool_use` ids must be unique",
    ),
    "claude-chat-unsafe": Case(
        "chat",
        "claude-sonnet-4-5",
        "anthropic",
        [calls(KIMI_RAW, "pwd_0"), calls(KIMI_RAW)],
        "Invalid 'messages[2].tool_calls[0].id': string does not match pattern. Expected a "
        "string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
    ),
    # the model in the path (:streamRawPredict), no model in the body
    "claude-vertex-path": Case(
        "vertex",
        VERTEX_MODEL,
        "anthropic",
        [calls(KIMI_RAW, "pwd_0"), calls(KIMI_RAW), calls("pwd_0")],
        f"messages.1.content.0.tool_use.id: {PATTERN}",
    ),
    # a name toolid cannot know: one toolid_model_rules entry
    "custom-name": Case(
        "chat",
        "acme-coder-7",
        "mistral",
        [calls(OPENAI_CALL, TOOLU), calls(KIMI)],
        f"Tool call id was {OPENAI_CALL} {MISTRAL_TEXT}",
    ),
}


# ----------------------------------------------------------------------------- fixtures


@dataclass
class Rig:
    gateway: Gateway
    proxy: Mitmdump
    records: Records


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    server = Gateway(PROVIDERS, ids=[KIMI_RAW], turns=2).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rig(
    gateway: Gateway, mitm: MitmdumpPool, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rig]:
    workdir = tmp_path_factory.mktemp("model-rules")
    with recording_proxy(mitm, workdir, {"toolid_model_rules": CUSTOM}) as (inst, records):
        yield Rig(gateway, inst, records)


# ----------------------------------------------------------------------------- sending


def send(case: Case, gateway: Gateway, body: dict[str, Any], proxy: str | None) -> Sent:
    """Send ``body`` as ``case`` says, with the real SDK, to the gateway (through ``proxy``)."""
    tag = uuid.uuid4().hex
    recorder = LoopResult(api=case.wire_api)
    kwargs: dict[str, Any] = {
        "max_retries": 0,
        "http_client": sdk_http_client(recorder, proxy),
        "default_headers": {CASE_HEADER: tag},
    }
    client: Any
    if case.api == "vertex":
        client = AnthropicVertex(
            region="us-east5",
            project_id="e2e-project",
            access_token="ya29.e2e",
            base_url=f"{gateway.base_url}/v1",
            **kwargs,
        )
        create = client.messages.create
    elif case.api == "anthropic":
        client = anthropic.Anthropic(api_key="sk-ant-e2e", base_url=gateway.base_url, **kwargs)
        create = client.messages.create
    else:
        client = openai.OpenAI(api_key="sk-e2e", base_url=f"{gateway.base_url}/v1", **kwargs)
        create = client.chat.completions.create if case.api == "chat" else client.responses.create
    answer: Any = None
    error: Exception | None = None
    try:
        answer = create(**body)
        if body.get("stream"):
            answer = list(answer)
    except (openai.BadRequestError, anthropic.BadRequestError) as exc:
        error = exc
    finally:
        client.close()
    got = [r for r in gateway.model_requests() if r.headers.get(CASE_HEADER) == tag]
    assert len(got) == 1, f"the gateway got {len(got)} requests of case {tag}"
    return Sent(tag, recorder.requests[-1], got[0], answer, error)


def body_of(case: Case) -> dict[str, Any]:
    body = history(case.wire_api, case.turns) | {"model": case.model}
    return body | {"stream": True} if case.api == "vertex" else body


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", list(CASES))
def test_gateway_rejects_history_without_toolid(name: str, gateway: Gateway) -> None:
    """Straight to the gateway, the model's provider answers 400 with its real error text."""
    case = CASES[name]
    sent = send(case, gateway, body_of(case), None)
    assert (sent.got.status, sent.got.error) == (400, case.error)
    assert gateway.provider(sent.got) == case.rules
    assert isinstance(sent.error, openai.BadRequestError | anthropic.BadRequestError)


@pytest.mark.parametrize("name", list(CASES))
def test_gateway_accepts_history_through_toolid(name: str, rig: Rig) -> None:
    """Through toolid the same request gets a 200 (twice, with byte-identical requests):
    every id conforms to the model's provider, pairs and is unique; each mapping is recorded
    with the model that chose the rule set."""
    case = CASES[name]
    first = send(case, rig.gateway, body_of(case), rig.proxy.url)
    mapped = check_sent(first, case.rules, case.wire_api)
    assert mapped, "nothing was mapped: the case tests nothing"
    check_records(rig, first, mapped, case.rules)  # type: ignore[arg-type]
    found = rig.records.get(first.case)
    model = f"anthropic/{VERTEX_MODEL}" if case.api == "vertex" else case.model
    records = found["toolid"]["request"]
    assert {r["why"] for r in records if r["action"] == "mapped"} == {f"model {model}"}
    assert f"for {case.rules} (model {model})" in found["comment"], found["comment"]
    if case.api == "vertex":
        assert ":streamRawPredict" in first.got.path and "model" not in first.got.json
        assert found["toolid"]["api"] == "messages"
    again = send(case, rig.gateway, body_of(case), rig.proxy.url)
    assert again.got.body == first.got.body, "the same request was mapped differently"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_kimi_behind_the_gateway_gets_its_own_ids_then_the_session_moves(
    api: API, rig: Rig
) -> None:
    """A Kimi model no rule names, behind the same gateway: two tool turns, the client gets
    safe ids and the gateway its own raw ids back, nothing mapped. Then the session moves to
    a Mistral model at the same host: 200, the history mapped for it."""
    loop = run_loop(api, rig.gateway.sdk_url(api), stream=True, proxy=rig.proxy.url)
    assert loop.calls == [[KIMI], [KIMI_2]], loop.calls
    last = rig.gateway.model_requests(api)[-1]  # the loop's last turn, as the gateway got it
    assert last.status == 200 and last.json.get("model") == MODEL
    ids = [v for k, v in request_id_positions(api, last.json) if k == "call"]
    assert len(ids) >= 2 and set(ids) == {KIMI_RAW}, ids  # its own ids, every call

    case = Case(api, "mistralai/devstral-medium-2507", "mistral", [], "")
    moved = send(case, rig.gateway, loop.sent[-1] | {"stream": False, "model": case.model}, None)
    assert moved.got.status == 400 and MISTRAL_TEXT in moved.got.error
    moved = send(
        case, rig.gateway, loop.sent[-1] | {"stream": False, "model": case.model}, rig.proxy.url
    )
    mapped = check_sent(moved, "mistral", api)
    assert mapped, "nothing was mapped"
    assert re.search(
        r"for mistral \(model mistralai/devstral-medium-2507\)",
        str(rig.records.get(moved.case)["comment"]),
    )


def test_the_cases_are_what_the_gateway_routes(gateway: Gateway) -> None:
    """The harness: the gateway's routing names the provider each case means."""
    for case in CASES.values():
        model = f"anthropic/{case.model}" if case.api == "vertex" else case.model
        rules = next(
            r for glob, r in PROVIDERS.items() if re.fullmatch(glob.replace("*", ".*"), model)
        )
        assert rules == case.rules, (case, rules)
    assert json.dumps(PROVIDERS)  # plain data
