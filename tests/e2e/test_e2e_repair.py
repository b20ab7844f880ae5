"""End to end: ``toolid_repair`` through a real mitmdump (reverse mode) in front of strict
stand-ins that judge pairing as each API's host does (``standin.pairing_rules``) and answer a
broken history with the host's own 400 text.

For Chat and Responses (the openai SDK), Messages (the anthropic SDK), Gemini (google-genai),
Converse (boto3, unsigned) and Responses over WebSocket (the ``websockets`` client), each
broken history (a result missing, one for no call, one out of place, a call id given twice,
an empty id, a joined id, where the host refuses them), buffered and streamed:

- through mitmdump without ``toolid_repair``, the client gets the host's 400, its text
  verbatim, and the stand-in got the history as the client sent it;
- through mitmdump with ``toolid_repair=true``, the client gets the answer (200), and the
  stand-in got the history ``toolid.repair_request`` makes of what the client sent, which its
  rules take.

A clean history reaches the stand-in byte for byte either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import boto3
import botocore
import httpx2
import openai
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from standin import Exchange, ScenarioHandle, UpstreamServer, responses
from standin.bedrock import BedrockStandIn, error
from standin.pairing_rules import pairing_error
from standin.replies import Reply
from standin.responses_ws import Connection, ResponsesWsUpstream
from websockets.sync.client import connect

import toolid

from .conftest import Mitmdump, MitmdumpPool

pytestmark = pytest.mark.e2e

QUESTION = "What is the weather in Paris and in Rome?"
ARGS = '{"city": "Paris"}'

# --- the broken histories, per API: (the history, words of the host's text) ----------------


def chat_calls(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": one, "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
        for one in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def chat_result(call_id: str, content: str = "sunny") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


CHAT: dict[str, tuple[list[Any], str]] = {
    "missing": (
        [user(QUESTION), chat_calls("call_a", "call_b"), chat_result("call_a"), user("and?")],
        "The following tool_call_ids did not have response messages: call_b",
    ),
    "orphan": (
        [
            user(QUESTION),
            chat_calls("call_a"),
            chat_result("call_a"),
            chat_result("call_zzz", "rainy"),
            user("and?"),
        ],
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
    ),
    "misplaced": (
        [user(QUESTION), chat_calls("call_a"), user("wait"), chat_result("call_a")],
        "The following tool_call_ids did not have response messages: call_a",
    ),
    "duplicate": (
        [
            user(QUESTION),
            chat_calls("call_a"),
            chat_result("call_a"),
            chat_calls("call_a"),
            chat_result("call_a"),
            user("and?"),
        ],
        "Duplicate value for 'tool_call_id' of 'call_a'",
    ),
    "empty": (
        [user(QUESTION), chat_calls(""), chat_result(""), user("and?")],
        "Invalid 'messages[1].tool_calls[0].id': empty string.",
    ),
}


def function_call(call_id: str, item: str = "fc_1") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item,
        "call_id": call_id,
        "name": "get_weather",
        "arguments": ARGS,
    }


def function_output(call_id: str, output: str = "sunny") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


SAID = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Let me check."}],
}

RESPONSES: dict[str, tuple[list[Any], str]] = {
    "missing": (
        [
            user(QUESTION),
            function_call("call_a", "fc_1"),
            function_call("call_b", "fc_2"),
            function_output("call_a"),
            SAID,
            user("and?"),
        ],
        "No tool output found for function call call_b.",
    ),
    "orphan": (
        [
            user(QUESTION),
            function_call("call_a"),
            function_output("call_a"),
            function_output("call_zzz", "rainy"),
            user("and?"),
        ],
        "No tool call found for function call output with call_id call_zzz.",
    ),
    "misplaced": (
        [user(QUESTION), function_output("call_a"), function_call("call_a"), user("and?")],
        "No tool call found for function call output with call_id call_a.",
    ),
    "duplicate": (
        [
            user(QUESTION),
            function_call("call_a", "fc_1"),
            function_output("call_a"),
            SAID,
            user("again"),
            function_call("call_a", "fc_2"),
            function_output("call_a"),
            user("and?"),
        ],
        "Duplicate function_call_output for call_id 'call_a'.",
    ),
    "empty": (
        [user(QUESTION), function_call(""), function_output(""), user("and?")],
        "Invalid 'input[1].call_id': empty string.",
    ),
}


def blocks(role: str, *content: Any) -> dict[str, Any]:
    return {"role": role, "content": list(content)}


def tool_use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": "Paris"}}


def tool_result(call_id: str, content: str = "sunny") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def one_call(call_id: str) -> list[Any]:
    """A question, a call of ``call_id`` and its result."""
    return [
        user(QUESTION),
        blocks("assistant", tool_use(call_id)),
        blocks("user", tool_result(call_id)),
    ]


PATTERN = "String should match pattern '^[a-zA-Z0-9_-]+$'"
MESSAGES: dict[str, tuple[list[Any], str]] = {
    "missing": (
        [
            user(QUESTION),
            blocks("assistant", tool_use("call_a"), tool_use("call_b")),
            blocks("user", tool_result("call_a"), text("go on")),
        ],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "call_b.",
    ),
    "orphan": (
        [
            user(QUESTION),
            blocks("assistant", tool_use("call_a")),
            blocks("user", tool_result("call_a"), tool_result("call_zzz", "rainy")),
        ],
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: call_zzz.",
    ),
    "misplaced": (
        [
            user(QUESTION),
            blocks("assistant", tool_use("call_a")),
            blocks("user", text("wait"), tool_result("call_a")),
        ],
        "messages.2: Did not find 1 tool_result block(s) at the beginning of this message.",
    ),
    "duplicate": (
        [*one_call("call_a"), *one_call("call_a")[1:]],
        "messages.3.content.0: `tool_use` ids must be unique",
    ),
    "empty": (one_call(""), f"messages.1.content.0.tool_use.id: {PATTERN}"),
    "composite": (one_call("call_x|fc_y"), f"messages.1.content.0.tool_use.id: {PATTERN}"),
}


def parts(role: str, *content: Any) -> dict[str, Any]:
    return {"role": role, "parts": list(content)}


def function_call_part(call_id: str) -> dict[str, Any]:
    return {"functionCall": {"id": call_id, "name": "get_weather", "args": {"city": "Paris"}}}


def function_response_part(call_id: str) -> dict[str, Any]:
    return {
        "functionResponse": {"id": call_id, "name": "get_weather", "response": {"sky": "sunny"}}
    }


COUNT = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
GEMINI: dict[str, tuple[list[Any], str]] = {
    "missing": (
        [
            parts("user", {"text": QUESTION}),
            parts("model", function_call_part("call_a"), function_call_part("call_b")),
            parts("user", function_response_part("call_a")),
        ],
        COUNT,
    ),
    "orphan": (
        [
            parts("user", {"text": QUESTION}),
            parts("model", function_call_part("call_a")),
            parts("user", function_response_part("call_a"), function_response_part("call_zzz")),
        ],
        COUNT,
    ),
    "misplaced": (
        [
            parts("user", {"text": QUESTION}),
            parts("model", function_call_part("call_a"), function_call_part("call_b")),
            parts("user", function_response_part("call_a")),
            parts("model", {"text": "One more moment."}),
            parts("user", function_response_part("call_b"), {"text": "and?"}),
        ],
        COUNT,
    ),
}


def use_block(call_id: str) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": "get_weather", "input": {"city": "Paris"}}}


def result_block(call_id: str) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": call_id, "content": [{"text": "sunny"}]}}


def converse_call(call_id: str) -> list[Any]:
    return [
        blocks("user", {"text": QUESTION}),
        blocks("assistant", use_block(call_id)),
        blocks("user", result_block(call_id)),
    ]


CONVERSE: dict[str, tuple[list[Any], str]] = {
    "missing": (
        [
            blocks("user", {"text": QUESTION}),
            blocks("assistant", use_block("call_a"), use_block("call_b")),
            blocks("user", result_block("call_a")),
        ],
        "Expected toolResult blocks at messages.2.content for the following Ids: call_b",
    ),
    "orphan": (
        [
            blocks("user", {"text": QUESTION}),
            blocks("assistant", use_block("call_a")),
            blocks("user", result_block("call_a"), result_block("call_zzz")),
        ],
        "The number of toolResult blocks at messages.2.content exceeds the number of toolUse "
        "blocks of previous turn.",
    ),
    "misplaced": (  # a user message for each result (Semantic Kernel, crewAI)
        [
            blocks("user", {"text": QUESTION}),
            blocks("assistant", use_block("call_a"), use_block("call_b")),
            blocks("user", result_block("call_a")),
            blocks("user", result_block("call_b")),
        ],
        "Expected toolResult blocks at messages.2.content for the following Ids: call_b",
    ),
    "duplicate": (
        [*converse_call("call_a"), *converse_call("call_a")[1:]],
        "`tool_use` ids must be unique",
    ),
    "empty": (converse_call(""), "Member must have length greater than or equal to 1"),
    "composite": (
        converse_call("call_x|fc_y"),
        "Member must satisfy regular expression pattern: [a-zA-Z0-9_.:-]+",
    ),
}

CASES = [
    pytest.param(api, problem, stream, id=f"{api}-{problem}-{'stream' if stream else 'buffered'}")
    for api, table in (
        ("chat", CHAT),
        ("responses", RESPONSES),
        ("anthropic", MESSAGES),
        ("gemini", GEMINI),
    )
    for problem in table
    for stream in (False, True)
]
HISTORIES = {"chat": CHAT, "responses": RESPONSES, "anthropic": MESSAGES, "gemini": GEMINI}


# --- the clients ------------------------------------------------------------------------------


class Refused(Exception):
    """The host's 400, as the client gave it: its status and the text of its error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


def http_client() -> httpx2.Client:
    return httpx2.Client(trust_env=False, timeout=30.0)


def send(api: str, handle: ScenarioHandle, proxy: Mitmdump, history: list[Any], stream: bool):
    """Send ``history`` with the API's SDK through ``proxy`` (reverse, in front of the
    stand-in); the answer's text, or Refused."""
    root = handle.prefix.replace(handle.server.base_url, proxy.url)
    try:
        if api == "chat":
            return _chat(root, history, stream)
        if api == "responses":
            return _responses(root, history, stream)
        if api == "anthropic":
            return _messages(root, history, stream)
        return _gemini(root, history, stream)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        raise Refused(exc.status_code, exc.response.json()["error"]["message"]) from exc
    except genai_errors.APIError as exc:
        raise Refused(exc.code, exc.message or "") from exc


def _chat(root: str, history: list[Any], stream: bool) -> str:
    client = openai.OpenAI(
        base_url=f"{root}/v1", api_key="sk-e2e", max_retries=0, http_client=http_client()
    )
    if not stream:
        answer = client.chat.completions.create(model="m", messages=history)
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(model="m", messages=history, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def _responses(root: str, history: list[Any], stream: bool) -> str:
    client = openai.OpenAI(
        base_url=f"{root}/v1", api_key="sk-e2e", max_retries=0, http_client=http_client()
    )
    if not stream:
        return client.responses.create(model="m", input=history).output_text
    events = client.responses.create(model="m", input=history, stream=True)
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def _messages(root: str, history: list[Any], stream: bool) -> str:
    client = anthropic.Anthropic(
        base_url=root, api_key="sk-ant-e2e", max_retries=0, http_client=http_client()
    )
    if not stream:
        answer = client.messages.create(model="m", max_tokens=64, messages=history)
        return "".join(block.text for block in answer.content if block.type == "text")
    events = client.messages.create(model="m", max_tokens=64, messages=history, stream=True)
    return "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )


def _gemini(root: str, history: list[Any], stream: bool) -> str:
    options = types.HttpOptions(base_url=root, client_args={"trust_env": False})
    client = genai.Client(api_key="dummy", http_options=options)
    contents = [types.Content.model_validate(content) for content in history]
    if not stream:
        answer = client.models.generate_content(model="gemini-2.5-flash", contents=contents)
        return answer.text or ""
    chunks = client.models.generate_content_stream(model="gemini-2.5-flash", contents=contents)
    return "".join(chunk.text or "" for chunk in chunks)


# --- the stand-ins and proxies ------------------------------------------------------------------


def strict(ex: Exchange) -> str | None:
    """The host's 400 text for this request's history, or None."""
    return pairing_error(ex.api or "", ex.json)


@pytest.fixture(scope="module")
def plain(mitm: MitmdumpPool, upstream: UpstreamServer) -> Mitmdump:
    """mitmdump (reverse) without ``toolid_repair``: the addon's defaults."""
    return mitm.get(mode=f"reverse:{upstream.base_url}")


@pytest.fixture(scope="module")
def repairing(mitm: MitmdumpPool, upstream: UpstreamServer) -> Mitmdump:
    return mitm.get(mode=f"reverse:{upstream.base_url}", toolid_repair=True)


def path_of(ex: Exchange) -> str:
    return ex.path.split("?", 1)[0]


def assert_repaired(broken: Exchange, repaired: Exchange, api: str) -> None:
    """The stand-in got, with repair, what ``toolid.repair_request`` makes of what it got
    without (the client's bytes, as toolid passes them on): a history its rules take."""
    made = toolid.repair_request(broken.body, path=path_of(broken))
    assert made.repairs and not made.refused, made.refused
    assert repaired.body == made.content
    assert pairing_error(api, json.loads(repaired.body)) is None


@pytest.mark.parametrize(("api", "problem", "stream"), CASES)
def test_a_broken_history_is_refused_without_repair_and_taken_with_it(
    api: str,
    problem: str,
    stream: bool,
    *,
    upstream: UpstreamServer,
    plain: Mitmdump,
    repairing: Mitmdump,
) -> None:
    history, words = HISTORIES[api][problem]
    handle = upstream.scenario(check=strict, turns=0)
    with pytest.raises(Refused) as refused:
        send(api, handle, plain, history, stream)
    (broken,) = handle.exchanges
    assert broken.status == 400 and words in broken.error
    assert (refused.value.status, refused.value.message) == (400, broken.error)
    assert broken.error == pairing_error(api, broken.json)  # the client's history, as sent

    mark = repairing.mark()
    answer = send(api, handle, repairing, history, stream)
    assert answer == handle.scenario.final_text
    assert f"/s/{handle.key}/" in repairing.wait_for_log(": repaired ", mark)
    repaired = handle.exchanges[-1]
    assert (repaired.status, repaired.stream) == (200, stream)
    assert_repaired(broken, repaired, api)


CLEAN = {
    "chat": [user(QUESTION), chat_calls("call_a"), chat_result("call_a"), user("and?")],
    "responses": [user(QUESTION), function_call("call_a"), function_output("call_a")],
    "anthropic": one_call("call_a"),
    "gemini": [
        parts("user", {"text": QUESTION}),
        parts("model", function_call_part("call_a")),
        parts("user", function_response_part("call_a")),
    ],
}


@pytest.mark.parametrize("api", list(CLEAN))
def test_a_clean_history_passes_byte_for_byte_with_repair_on(
    api: str, upstream: UpstreamServer, plain: Mitmdump, repairing: Mitmdump
) -> None:
    handle = upstream.scenario(check=strict, turns=0)
    send(api, handle, plain, CLEAN[api], stream=False)
    send(api, handle, repairing, CLEAN[api], stream=False)
    first, second = handle.exchanges
    assert (first.status, second.status) == (200, 200)
    assert first.body == second.body


# --- Bedrock Converse ---------------------------------------------------------------------------


class StrictBedrock(BedrockStandIn):
    """The Bedrock stand-in, Converse's pairing judged first (``pairing_rules``)."""

    def answer(self, exchange: Any) -> tuple[int, dict[str, str], bytes]:
        if "/converse" in exchange.path:
            try:
                request = json.loads(exchange.body)
            except ValueError:
                request = None
            problem = pairing_error("converse", request)
            if problem is not None:
                exchange.error = problem
                return error(400, "ValidationException", problem)
        return super().answer(exchange)


@pytest.fixture(scope="module")
def bedrock() -> Iterator[StrictBedrock]:
    server = StrictBedrock()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bedrock_proxies(mitm: MitmdumpPool, bedrock: StrictBedrock) -> tuple[Mitmdump, Mitmdump]:
    mode = f"reverse:{bedrock.base_url}"
    return mitm.get(mode=mode), mitm.get(mode=mode, toolid_repair=True)


def converse(proxy: Mitmdump, history: list[Any], stream: bool) -> None:
    """Converse (or ConverseStream) with boto3, unsigned, through ``proxy``; its parameter
    checks off, so that it sends an empty id as it is."""
    config = Config(
        signature_version=botocore.UNSIGNED,
        retries={"max_attempts": 1},
        parameter_validation=False,
    )
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=proxy.url, config=config
    )
    model = "moonshot.kimi-k2-thinking"
    try:
        if stream:
            list(client.converse_stream(modelId=model, messages=history)["stream"])
        else:
            client.converse(modelId=model, messages=history)
    except ClientError as exc:
        raise Refused(
            exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Message"]
        ) from exc


@pytest.mark.usefixtures("no_aws_configuration")
@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
@pytest.mark.parametrize("problem", list(CONVERSE))
def test_converse_a_broken_history_is_refused_without_repair_and_taken_with_it(
    problem: str, stream: bool, bedrock: StrictBedrock, bedrock_proxies: tuple[Mitmdump, Mitmdump]
) -> None:
    plain_proxy, repairing_proxy = bedrock_proxies
    history, words = CONVERSE[problem]
    with pytest.raises(Refused) as refused:
        converse(plain_proxy, history, stream)
    broken = bedrock.exchanges[-1]
    assert broken.status == 400 and words in broken.error
    assert (refused.value.status, refused.value.message) == (400, broken.error)
    assert broken.error == pairing_error("converse", json.loads(broken.body))

    mark = repairing_proxy.mark()
    converse(repairing_proxy, history, stream)
    repairing_proxy.wait_for_log(": repaired ", mark)
    repaired = bedrock.exchanges[-1]
    assert repaired.status == 200, repaired.error
    assert repaired.op == ("converse-stream" if stream else "converse")
    assert_repaired(broken, repaired, "converse")


# --- Responses over WebSocket -------------------------------------------------------------------


class StrictResponsesSocket(ResponsesWsUpstream):
    """The Responses WebSocket stand-in (``ResponsesWsUpstream``) judging each
    ``response.create``'s pairing: an ``error`` event with the host's text, else a streamed
    final text."""

    @property
    def received(self) -> list[str]:
        """Every client message, in order."""
        return [m.text for conn in self.connections for m in conn.messages if m.from_client]

    def _answer(self, conn: Connection, text: str, turns_of: dict[str, int]) -> list[Any]:
        problem = pairing_error("responses", json.loads(text))
        if problem is not None:
            return [self._error(400, problem)]
        return [event for _, event in responses.stream(Reply(text="Done.", model="m"))]


@pytest.fixture(scope="module")
def socket_standin() -> Iterator[StrictResponsesSocket]:
    server = StrictResponsesSocket().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def socket_proxies(
    mitm: MitmdumpPool, socket_standin: StrictResponsesSocket
) -> tuple[Mitmdump, Mitmdump]:
    mode = f"reverse:http://127.0.0.1:{socket_standin.port}"
    return mitm.get(mode=mode), mitm.get(mode=mode, toolid_repair=True)


def over_socket(proxy: Mitmdump, history: list[Any]) -> list[dict[str, Any]]:
    """One ``response.create`` with ``history`` on a connection through ``proxy``; the events
    of its answer."""
    url = proxy.url.replace("http://", "ws://") + "/v1/responses"
    beta = {"OpenAI-Beta": "responses_websockets=2026-02-06"}
    frame = {"type": "response.create", "model": "m", "input": history}
    with connect(url, additional_headers=beta, open_timeout=10) as ws:
        ws.send(json.dumps(frame))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(ws.recv(timeout=10)))
    return events


@pytest.mark.parametrize("problem", list(RESPONSES))
def test_websocket_a_broken_history_is_refused_without_repair_and_taken_with_it(
    problem: str,
    socket_standin: StrictResponsesSocket,
    socket_proxies: tuple[Mitmdump, Mitmdump],
) -> None:
    plain_proxy, repairing_proxy = socket_proxies
    history, words = RESPONSES[problem]
    events = over_socket(plain_proxy, history)
    assert events[-1]["type"] == "error" and events[-1]["status"] == 400
    broken = socket_standin.received[-1]
    assert events[-1]["error"]["message"] == pairing_error("responses", json.loads(broken))
    assert words in events[-1]["error"]["message"]

    mark = repairing_proxy.mark()
    events = over_socket(repairing_proxy, history)
    made = toolid.repair_request(broken.encode(), api=toolid.Api.RESPONSES)
    count = len(made.repairs)
    logged = f"message 1: repaired {count} pairing problem{'s' if count != 1 else ''}: "
    repairing_proxy.wait_for_log(logged, mark)
    assert events[-1]["type"] == "response.completed", events[-1]
    repaired = socket_standin.received[-1]
    assert made.repairs and repaired.encode() == made.content
    assert pairing_error("responses", json.loads(repaired)) is None
