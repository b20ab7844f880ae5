"""End to end, Gemini's generateContent: the real google-genai SDK (pinned) and raw HTTP through a
real mitmdump running toolid, against the Gemini stand-in, which answers each tool turn with
two parallel calls sharing one Kimi-style id, each in a chunk of its own when streamed.

- The SDK, buffered and streamed (``?alt=sse``), in its Gemini API form (``api_key``,
  ``http_options.base_url``) and its Vertex AI form (``vertexai=True``, a project and location,
  dummy OAuth credentials, ``http_options.base_url``): over three tool turns every call gets its
  own safe client id (occurrence tags), the stand-in gets back its own raw id at every
  ``functionCall.id`` and ``functionResponse.id``, and the thought signature it sent, as it was.
- Raw HTTP, for every route (the Gemini API, Vertex AI, Code Assist's ``/v1internal`` with its
  ``request`` / ``response`` envelope) and every framing (buffered, SSE, the JSON array written
  element by element without ``?alt=sse``), the answer written in pieces of 1 to 7 bytes: the
  client gets every byte as sent but the id literals; the next request reaches the stand-in
  with the raw ids restored and every other byte as the client sent it.
- A streamed answer's first call reaches the client before the stand-in writes the rest.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials
from standin import WEATHER_TEXT, UpstreamServer, client_bytes
from standin.gemini import THOUGHT_SIGNATURE

from toolid import encode

from .cases import wire_client
from .conftest import Mitmdump
from .helpers import request_id_positions

pytestmark = pytest.mark.e2e

KIMI = "functions.get_weather:0"
MODEL = "gemini-2.5-flash"
TURNS = 3
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)
TOOLS = [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]


def client_ids(raw: str, turn: int) -> list[str]:
    """The client ids of the two calls of tool turn ``turn``: the history takes the earlier
    turns' four, ... (docs/wire-format.md, occurrence tags)."""
    return [encode(raw, occurrence=2 * turn - 1), encode(raw, occurrence=2 * turn)]


# ----------------------------------------------------------------------------- the SDK


def sdk_client(base_url: str, proxy: Mitmdump, vertex: bool) -> genai.Client:
    options = types.HttpOptions(base_url=base_url, client_args={"proxy": proxy.url})
    if vertex:
        credentials = Credentials(token="dummy-oauth-token")  # never refreshed: it has no expiry
        return genai.Client(
            vertexai=True,
            project="p",
            location="us-central1",
            credentials=credentials,
            http_options=options,
        )
    return genai.Client(api_key="dummy", http_options=options)


def answer(client: genai.Client, contents: list[types.Content], stream: bool) -> types.Content:
    """The model's turn, as the SDK gives it (a stream's chunks' parts joined)."""
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    if not stream:
        response = client.models.generate_content(model=MODEL, contents=contents, config=config)
        assert response.candidates and response.candidates[0].content
        return response.candidates[0].content
    parts: list[types.Part] = []
    for chunk in client.models.generate_content_stream(
        model=MODEL, contents=contents, config=config
    ):
        assert chunk.candidates and chunk.candidates[0].content
        parts += chunk.candidates[0].content.parts or []
    return types.Content(role="model", parts=parts)


@pytest.mark.parametrize("raw", [KIMI, "call_0"])
@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
@pytest.mark.parametrize("vertex", [False, True], ids=["gemini-api", "vertex"])
def test_sdk_loop_of_three_turns_of_two_calls_with_one_id(
    raw: str, stream: bool, vertex: bool, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=[raw, raw], turns=TURNS, writes="random")
    client = sdk_client(handle.prefix, proxy, vertex)
    contents = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])]
    for turn in range(1, TURNS + 1):
        model = answer(client, contents, stream)
        calls = [part for part in model.parts or [] if part.function_call]
        assert [part.function_call.id for part in calls] == client_ids(raw, turn)  # type: ignore[union-attr]
        assert calls[0].thought_signature == base64.b64decode(THOUGHT_SIGNATURE)
        contents.append(model)
        results = [
            types.Part(
                function_response=types.FunctionResponse(
                    id=part.function_call.id,
                    name="get_weather",
                    response={"output": "sunny"},  # type: ignore[union-attr]
                )
            )
            for part in calls
        ]
        contents.append(types.Content(role="user", parts=results))
    final = answer(client, contents, stream)
    assert "".join(part.text or "" for part in final.parts or []) == WEATHER_TEXT
    # The stand-in got its own raw id back at every position, and its thought signatures.
    for turn in range(2, TURNS + 2):
        request = handle.turn(turn)
        assert ("/publishers/google/models/" in request.path) is vertex
        ids = [value for _, value in request_id_positions("gemini", request.json)]
        assert ids == [raw] * (4 * (turn - 1)), ids
        signatures = [  # the SDK sends the bytes it got in base64url
            base64.urlsafe_b64decode(part["thoughtSignature"])
            if "thoughtSignature" in part
            else None
            for content in request.json["contents"]
            for part in content["parts"]
            if "functionCall" in part
        ]
        assert signatures == [base64.b64decode(THOUGHT_SIGNATURE), None] * (turn - 1)


# ----------------------------------------------------------------------------- raw HTTP

VERTEX = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro"
ROUTES = {  # route -> (the path of a method, whether bodies are wrapped)
    "gemini-api": (f"/v1beta/models/{MODEL}:{{method}}", False),
    "vertex": (VERTEX + ":{method}", False),
    "code-assist": ("/v1internal:{method}", True),
}
FRAMINGS = {  # framing -> the method and query
    "buffered": "generateContent",
    "sse": "streamGenerateContent?alt=sse",
    "json-array": "streamGenerateContent",
}


def wrap(body: dict[str, Any], wrapped: bool) -> dict[str, Any]:
    """A Gemini request, in Code Assist's envelope when ``wrapped``."""
    return {"model": MODEL, "project": "p", "request": body} if wrapped else body


QUESTION = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
FIRST = {"contents": [QUESTION], "tools": TOOLS}  # the first request: no id in it


def history(ids: list[str]) -> dict[str, Any]:
    """The request after the first tool turn, as a client sends it: the model turn with its
    calls (the first with the thought signature) and the user turn with their results."""
    calls = [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": i}} for i in ids
    ]
    calls[0]["thoughtSignature"] = THOUGHT_SIGNATURE
    results = [
        {"functionResponse": {"name": "get_weather", "id": i, "response": {"output": "sunny"}}}
        for i in ids
    ]
    return {
        "contents": [
            QUESTION,
            {"role": "model", "parts": calls},
            {"role": "user", "parts": results},
        ],
        "tools": TOOLS,
    }


@pytest.mark.parametrize("framing", list(FRAMINGS))
@pytest.mark.parametrize("route", list(ROUTES))
def test_raw_http_every_route_and_framing(
    route: str, framing: str, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    path, wrapped = ROUTES[route]
    handle = upstream.scenario(ids=[KIMI, KIMI], writes="random", gzip="never")
    url = handle.prefix + path.format(method=FRAMINGS[framing])
    first = json.dumps(wrap(FIRST, wrapped))
    with wire_client(proxy) as client:
        got = client.post(url, content=first, headers={"content-type": "application/json"})
        ex = handle.turn(1)
        assert ex.body == first.encode()  # nothing to restore: byte for byte
        assert ex.stream is (framing != "buffered") and (ex.framing == framing or not ex.stream)
        clients = dict(zip(sorted(ex.placeholders)[:2], client_ids(KIMI, 1), strict=True))
        assert got.content == client_bytes(ex.template, clients, lambda client: client)
        assert got.content.count(THOUGHT_SIGNATURE.encode()) == 1
        second = json.dumps(wrap(history(client_ids(KIMI, 1)), wrapped))
        done = client.post(url, content=second, headers={"content-type": "application/json"})
    ex2 = handle.turn(2)
    assert ex2.body == json.dumps(wrap(history([KIMI, KIMI]), wrapped)).encode()
    assert done.content == ex2.sent  # the final answer: nothing to change


@pytest.mark.parametrize("framing", ["sse", "json-array"])
def test_the_first_call_is_not_held_back(
    framing: str, upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    """The stand-in writes the chunks up to the first call's, then waits (up to 3 s) until the
    client has that chunk; a proxy that held the stream back would make it time out first."""
    handle = upstream.scenario(ids=[KIMI], pause_after_events=-1, pause_timeout=3.0)
    url = handle.prefix + f"/v1beta/models/{MODEL}:{FRAMINGS[framing]}"
    body = json.dumps(FIRST)
    seen_before_rest = None
    data = b""
    with (
        wire_client(proxy) as client,
        client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as r,
    ):
        for piece in r.iter_bytes():
            data += piece
            if seen_before_rest is None and call_arrived(data, framing, encode(KIMI)):
                ex = handle.turn(1)
                assert ex.first_part_sent.wait(5)
                seen_before_rest = not ex.rest_sent.is_set()
                handle.release.set()
    assert seen_before_rest, "the client got the first call only after the stand-in's rest"
    assert data == handle.turn(1).expected_client_bytes(encode)


def call_arrived(data: bytes, framing: str, client_id: str) -> bool:
    """Whether ``data``, a stream's start, holds the whole chunk with ``client_id``: its SSE
    event up to the blank line, or its JSON-array element up to its closing brace (the
    separator after it may come with the next element)."""
    at = data.find(client_id.encode())
    if at < 0:
        return False
    if framing == "sse":
        return b"\n\n" in data[at:]
    text, decoder = data.decode("utf-8", "replace"), json.JSONDecoder()
    position = text.find("[") + 1
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        try:
            _, end = decoder.raw_decode(text, position)
        except ValueError:
            return False  # the element is incomplete
        if client_id in text[position:end]:
            return True
        position = end


def test_a_gzip_json_array_stream_is_decoded_and_rewritten(
    upstream: UpstreamServer, proxy: Mitmdump
) -> None:
    handle = upstream.scenario(ids=[KIMI], writes="random", gzip="force")
    url = handle.prefix + f"/v1beta/models/{MODEL}:streamGenerateContent"
    body = json.dumps(FIRST)
    with wire_client(proxy) as client:
        got = client.post(url, content=body, headers={"content-type": "application/json"})
    assert "content-encoding" not in got.headers
    assert got.content == handle.turn(1).expected_client_bytes(encode)
    assert isinstance(httpx.Response(200, content=got.content).json(), list)
