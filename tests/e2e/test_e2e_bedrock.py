"""End to end: AWS Bedrock through a real mitmdump (regular mode), with real boto3 (pinned).

The stand-in (``standin.bedrock.BedrockStandIn``) verifies SigV4 with botocore's own signer and
enforces Bedrock's id rules, answering as Bedrock does (403 ``InvalidSignatureException``, 400
``ValidationException``). Each of Converse, ConverseStream, InvokeModel and
InvokeModelWithResponseStream:

- **SigV4-signed**: passes byte for byte both ways and verifies, whatever ids its history
  holds (a history Bedrock rejects is rejected by Bedrock, never by its signature); the client
  sees the upstream's raw ids; mitmdump logs ``signed request (SigV4): ids left as they are``.
  The same request with the body toolid would have sent (the rewrite a signature forbids)
  gets 403 from the stand-in: what toolid did before signed requests were left alone.
- **Bearer** (a Bedrock API key, over TLS as botocore requires) and **unsigned**: Kimi-style
  ids are encoded for the client, buffered and in the eventstream frames boto3 parses; the
  next request gives Bedrock its own ids back where its rules take them; a reused id gets one
  client id per call; a foreign history (Codex's composite ids, a duplicate) is mapped to the
  bedrock rule set, calls and results alike, the same way every time.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import boto3
import botocore
import httpx
import pytest
from botocore.config import Config
from botocore.eventstream import EventStreamBuffer
from botocore.exceptions import ClientError
from standin.bedrock import ACCESS_KEY, API_KEY, REGION, SECRET_KEY, BedrockStandIn

import toolid
from toolid import encode

from .conftest import Mitmdump, MitmdumpPool

pytestmark = pytest.mark.e2e

KIMI_MODEL = "moonshot.kimi-k2-thinking"  # Kimi K2 on Bedrock: Kimi's own ids
CLAUDE = "anthropic.claude-sonnet-4-5-20250929-v1:0"
CLAUDE_REUSING = "us.anthropic.claude-reuse-v1:0"  # the stand-in reuses one id every turn
RAW0 = "functions.get_weather:0"
CODEX = "call_65OReGAIB0M4612fiyF6YMbI|fc_0feebbbc39e113d4016969ff3539208191914ede46e71d5d06"
LONG = "toolu_" + "L" * 64  # 70 characters: Anthropic takes it, toolid's bedrock rule set not
SIGNED_LINE = "signed request (SigV4): ids left as they are"
OPS = ("converse", "converse_stream", "invoke_model", "invoke_model_with_response_stream")
ROUTES = {
    "converse": "converse",
    "converse_stream": "converse-stream",
    "invoke_model": "invoke",
    "invoke_model_with_response_stream": "invoke-with-response-stream",
}


@pytest.fixture(scope="module")
def standin() -> Iterator[BedrockStandIn]:
    server = BedrockStandIn().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def standin_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BedrockStandIn]:
    server = BedrockStandIn(tls=True, cert_dir=tmp_path_factory.mktemp("bedrock-tls")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bedrock_proxy(
    mitm: MitmdumpPool, standin: BedrockStandIn, standin_tls: BedrockStandIn
) -> Mitmdump:
    """Regular mode; the stand-ins get the bedrock rule set, as bedrock-runtime.*.amazonaws.com
    has it built in."""
    rules = f"{standin.authority}=bedrock,{standin_tls.authority}=bedrock"
    return mitm.get(toolid_host_rules=rules)


@pytest.fixture(autouse=True)
def aws_environment(no_aws_configuration: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS configuration of the machine (``no_aws_configuration``), and no proxy, reaches
    boto3."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


class Bedrock:
    """A boto3 bedrock-runtime client of one kind of auth, and what it sent."""

    def __init__(
        self,
        auth: str,
        standin: BedrockStandIn,
        proxy: Mitmdump | None,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        self.auth = auth
        self.standin = standin
        self.sent: list[tuple[bytes, dict[str, str]]] = []
        options: dict[str, Any] = {"retries": {"max_attempts": 1}, "read_timeout": 30}
        if proxy is not None:
            options["proxies"] = {"http": proxy.url, "https": proxy.url}
        kwargs: dict[str, Any] = {"region_name": REGION, "endpoint_url": standin.base_url}
        if auth == "sigv4":
            kwargs |= {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
        elif auth == "bearer":
            monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", API_KEY)
            kwargs["verify"] = str(proxy.ca_cert) if proxy else str(standin.cert_path)
        else:
            options["signature_version"] = botocore.UNSIGNED
        self.client = boto3.client("bedrock-runtime", config=Config(**options), **kwargs)
        self.client.meta.events.register("before-send.bedrock-runtime.*", self._record)

    def _record(self, request: Any, **_: Any) -> None:
        body = request.body
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        headers = {
            k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()
        }
        self.sent.append((data, headers))

    # --- one call of each operation, giving the ids the client sees and the next history ---

    def call(self, op: str, model: str, history: list[Any]) -> tuple[list[str], list[Any]]:
        """The tool-call ids of the answer as boto3 gives them, and the history with the
        answer and a result for each call appended."""
        if op.startswith("converse"):
            if op == "converse":
                answer = self.client.converse(modelId=model, messages=history)
                content = answer["output"]["message"]["content"]
            else:
                events = list(
                    self.client.converse_stream(modelId=model, messages=history)["stream"]
                )
                content = [
                    {"toolUse": {**e["contentBlockStart"]["start"]["toolUse"], "input": {}}}
                    for e in events
                    if "toolUse" in e.get("contentBlockStart", {}).get("start", {})
                ]
            ids = [block["toolUse"]["toolUseId"] for block in content if "toolUse" in block]
            calls = [{"toolUse": {**b["toolUse"], "input": {}}} for b in content if "toolUse" in b]
            results = [
                {"toolResult": {"toolUseId": i, "content": [{"text": "sunny"}]}} for i in ids
            ]
            more = [{"role": "assistant", "content": calls}, {"role": "user", "content": results}]
            return ids, [*history, *more]
        body = json.dumps(
            {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100, "messages": history}
        )
        if op == "invoke_model":
            answer = self.client.invoke_model(modelId=model, body=body)
            blocks = json.loads(answer["body"].read())["content"]
        else:
            answer = self.client.invoke_model_with_response_stream(modelId=model, body=body)
            events = [json.loads(e["chunk"]["bytes"]) for e in answer["body"] if "chunk" in e]
            blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
        uses = [b for b in blocks if b["type"] == "tool_use"]
        ids = [b["id"] for b in uses]
        results = [{"type": "tool_result", "tool_use_id": i, "content": "sunny"} for i in ids]
        more = [
            {"role": "assistant", "content": [{**b, "input": {}} for b in uses]},
            {"role": "user", "content": results},
        ]
        return ids, [*history, *more]


def first_turn(op: str) -> list[Any]:
    if op.startswith("converse"):
        return [{"role": "user", "content": [{"text": "Weather in Paris?"}]}]
    return [{"role": "user", "content": "Weather in Paris?"}]


def model_for(op: str) -> str:
    return KIMI_MODEL if op.startswith("converse") else CLAUDE


def history_with(op: str, *ids: str) -> list[Any]:
    """A history whose one assistant turn calls ``ids`` (each answered)."""
    if op.startswith("converse"):
        calls = [{"toolUse": {"toolUseId": i, "name": "get_weather", "input": {}}} for i in ids]
        results = [{"toolResult": {"toolUseId": i, "content": [{"text": "r"}]}} for i in ids]
    else:
        calls = [{"type": "tool_use", "id": i, "name": "get_weather", "input": {}} for i in ids]
        results = [{"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids]
    return [
        *first_turn(op),
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
    ]


def frames(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return [(m.headers, m.payload) for m in buffer]


# --- signed requests ------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_signed_requests_pass_byte_for_byte_and_verify(
    op: str, standin: BedrockStandIn, bedrock_proxy: Mitmdump, monkeypatch: pytest.MonkeyPatch
) -> None:
    bedrock = Bedrock("sigv4", standin, bedrock_proxy, monkeypatch)
    mark = bedrock_proxy.mark()
    # A history toolid would rewrite for Bedrock (a client id it would restore; on InvokeModel
    # a 70-character id it would map) passes as it is, and verifies.
    if op.startswith("converse"):
        history = history_with(op, RAW0, encode("functions.list_skills:1"))
    else:
        history = history_with(op, LONG, encode("functions.list_skills:1"))
    ids, _ = bedrock.call(op, model_for(op), history)
    exchange = standin.last(ROUTES[op])
    assert (exchange.auth, exchange.status, exchange.error) == ("sigv4", 200, "")
    assert (exchange.body, exchange.headers["authorization"]) == (
        bedrock.sent[-1][0],
        bedrock.sent[-1][1]["authorization"],
    )
    # The answer's Kimi-style id reaches the client as the upstream sent it (encoded, the
    # next signed request could not have it restored).
    assert ids == exchange.response_ids == ["functions.get_weather:1"]
    first, _ = bedrock.call(op, model_for(op), first_turn(op))
    assert first == standin.last(ROUTES[op]).response_ids == [RAW0]
    assert standin.last(ROUTES[op]).status == 200
    bedrock_proxy.wait_for_log(SIGNED_LINE, mark)
    exchange = next(e for e in reversed(standin.exchanges) if e.body == bedrock.sent[-2][0])
    # What toolid did before: the same request with toolid's rewrite of its body, the same
    # signature: Bedrock answers 403.
    path = exchange.path
    rewritten = toolid.rewrite_request(exchange.body, path=path, rules="bedrock")
    assert rewritten.changed and rewritten.body != exchange.body
    replay = httpx.post(
        standin.base_url + path,
        content=rewritten.body,
        headers={k: v for k, v in bedrock.sent[-1][1].items() if k != "content-length"},
    )
    assert replay.status_code == 403
    assert replay.headers["x-amzn-errortype"].startswith("InvalidSignatureException")
    assert "signature we calculated does not match" in replay.json()["message"]


@pytest.mark.parametrize("op", ["converse", "invoke_model"])
def test_a_signed_history_bedrock_rejects_is_rejected_by_bedrock_not_by_its_signature(
    op: str, standin: BedrockStandIn, bedrock_proxy: Mitmdump, monkeypatch: pytest.MonkeyPatch
) -> None:
    bedrock = Bedrock("sigv4", standin, bedrock_proxy, monkeypatch)
    history = history_with(op, CODEX, "call_0", "call_0")
    with pytest.raises(ClientError) as raised:
        bedrock.call(op, model_for(op), history)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    exchange = standin.last(ROUTES[op])
    assert exchange.auth == "sigv4" and exchange.status == 400  # verified, then refused
    assert exchange.body == bedrock.sent[-1][0]


def test_a_signed_invoke_models_answer_is_the_upstreams_bytes(
    standin: BedrockStandIn, bedrock_proxy: Mitmdump, monkeypatch: pytest.MonkeyPatch
) -> None:
    bedrock = Bedrock("sigv4", standin, bedrock_proxy, monkeypatch)
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "messages": first_turn("invoke")})
    answer = bedrock.client.invoke_model(modelId=CLAUDE, body=body)
    assert answer["body"].read() == standin.last("invoke").response
    stream = bedrock.client.invoke_model_with_response_stream(modelId=CLAUDE, body=body)
    chunks = [event["chunk"]["bytes"] for event in stream["body"]]
    sent = [
        base64.b64decode(json.loads(payload)["bytes"])
        for _, payload in frames(standin.last("invoke-with-response-stream").response)
    ]
    assert chunks == sent
    converse = bedrock.client.converse_stream(modelId=KIMI_MODEL, messages=first_turn("converse"))
    events = list(converse["stream"])
    sent_events = [
        {headers[":event-type"]: without_padding(json.loads(payload))}
        for headers, payload in frames(standin.last("converse-stream").response)
    ]
    assert events == sent_events


def without_padding(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "p"}  # boto3 drops the padding member


# --- Bearer and unsigned requests ---------------------------------------------------------------


@pytest.mark.parametrize("auth", ["bearer", "none"])
@pytest.mark.parametrize("op", OPS)
def test_kimi_ids_are_encoded_for_the_client_and_come_back(
    op: str,
    auth: str,
    *,
    standin: BedrockStandIn,
    standin_tls: BedrockStandIn,
    bedrock_proxy: Mitmdump,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = standin_tls if auth == "bearer" else standin
    bedrock = Bedrock(auth, server, bedrock_proxy, monkeypatch)
    ids, history = bedrock.call(op, model_for(op), first_turn(op))
    first = server.last(ROUTES[op])
    assert (first.auth, first.status) == (auth, 200)
    assert first.response_ids == [RAW0]
    assert ids == [encode(RAW0)]  # what boto3 parsed: the safe client id
    ids, history = bedrock.call(op, model_for(op), history)
    second = server.last(ROUTES[op])
    assert second.status == 200, second.error
    got = request_ids(op, json.loads(second.body))
    if op.startswith("converse"):
        # Converse takes Kimi's own id (service-2.json ToolUseId): Bedrock gets it back.
        assert got == [RAW0, RAW0]
    else:
        # Anthropic's pattern refuses it: the client id goes, which both accept.
        assert got == [encode(RAW0), encode(RAW0)]
    assert ids == [encode("functions.get_weather:1")]
    assert second.body != bedrock.sent[-1][0] or not op.startswith("converse")


def request_ids(op: str, request: dict[str, Any]) -> list[str]:
    """Every call's and result's id in a request, in order."""
    out = []
    for message in request["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            if op.startswith("converse"):
                for kind in ("toolUse", "toolResult"):
                    if kind in block:
                        out.append(block[kind]["toolUseId"])
            elif block.get("type") == "tool_use":
                out.append(block["id"])
            elif block.get("type") == "tool_result":
                out.append(block["tool_use_id"])
    return out


@pytest.mark.parametrize("op", OPS)
def test_a_reused_id_gets_one_client_id_per_call(
    op: str, standin: BedrockStandIn, bedrock_proxy: Mitmdump, monkeypatch: pytest.MonkeyPatch
) -> None:
    bedrock = Bedrock("none", standin, bedrock_proxy, monkeypatch)
    first, history = bedrock.call(op, CLAUDE_REUSING, first_turn(op))
    second, history = bedrock.call(op, CLAUDE_REUSING, history)
    third, history = bedrock.call(op, CLAUDE_REUSING, history)
    raw = "toolu_bdrk_01ReusedEveryTurn"
    assert [first, second, third] == [[raw], [encode(raw, "safe", 2)], [encode(raw, "safe", 3)]]
    exchange = standin.last(ROUTES[op])
    assert exchange.status == 200, exchange.error  # distinct ids: Bedrock takes the history
    sent = request_ids(op, json.loads(exchange.body))
    assert sent == [raw, raw, encode(raw, "safe", 2), encode(raw, "safe", 2)]


@pytest.mark.parametrize("auth", ["bearer", "none"])
@pytest.mark.parametrize("op", OPS)
def test_a_foreign_history_is_mapped_to_bedrocks_rules(
    op: str,
    auth: str,
    *,
    standin: BedrockStandIn,
    standin_tls: BedrockStandIn,
    bedrock_proxy: Mitmdump,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = standin_tls if auth == "bearer" else standin
    history = history_with(op, CODEX, "call_0", "call_0", LONG, "toolu_ok")
    # Straight to Bedrock, the history is refused.
    direct = Bedrock(auth, server, None, monkeypatch)
    with pytest.raises(ClientError) as raised:
        direct.call(op, model_for(op), history)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    # Through toolid: accepted, every id mapped where Bedrock refuses it, results with calls.
    bedrock = Bedrock(auth, server, bedrock_proxy, monkeypatch)
    sent = []
    for _ in range(2):
        bedrock.call(op, model_for(op), history)
        exchange = server.last(ROUTES[op])
        assert exchange.status == 200, exchange.error
        sent.append(request_ids(op, json.loads(exchange.body)))
    assert sent[0] == sent[1]  # the same request maps the same way: prompt caches hold
    calls, results = sent[0][:5], sent[0][5:]
    assert len(set(calls)) == 5 and all(0 < len(i) <= 64 for i in calls)
    assert results[0] == calls[0] and results[3:] == calls[3:]
    assert set(results[1:3]) <= {calls[1], calls[2]}  # each call_0 result names a call_0 call
    assert calls[4] == "toolu_ok"
    if op.startswith("converse"):
        assert all(c not in (CODEX, LONG) for c in calls)
