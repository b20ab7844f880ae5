"""End to end: the Responses API over WebSocket through a real mitmdump, reverse and regular
mode, between a real WebSocket client (the ``websockets`` library) and a stand-in upstream
that speaks the protocol (``standin.responses_ws``: Kimi-style ids, the same ones every turn, and a
conforming upstream that rejects any id it did not emit).

Each tool loop runs on one connection, in both forms a client uses: ``previous_response_id``
with only the new items, and the whole history every turn. Every id position of the server's
messages reaches the client encoded and tagged per turn; every client message reaches the
stand-in with its own ids; a message with nothing to change passes byte for byte, and a
rewritten one differs only inside the id literals. Without toolid (``toolid_websocket=pass``)
the client gets the raw ids, one id for the calls of every turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from standin.responses_ws import Connection, ResponsesWsUpstream
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from toolid import codec

from .conftest import Mitmdump, MitmdumpPool

pytestmark = pytest.mark.e2e

KIMI = "functions.exec_command:0"
ITEM = "item:0"  # the stand-in reuses its item ids too: every position of an id is tested
TURNS = 3
BETA = {"OpenAI-Beta": "responses_websockets=2026-02-06"}
TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
SAFE = {codec.encode(raw, "safe", k) for raw in (KIMI, ITEM) for k in range(1, TURNS + 1)}


def client_id(raw: str, turn: int) -> str:
    """The client id of the call of tool turn ``turn`` (0-based) on one connection."""
    return codec.encode(raw, "safe", turn + 1)


@pytest.fixture(scope="module")
def ws_upstream() -> Iterator[ResponsesWsUpstream]:
    with ResponsesWsUpstream(ids=[KIMI], item_ids=[ITEM], turns=TURNS) as up:
        yield up
    assert not [v for v in up.violations if "not JSON" not in v], up.violations


@pytest.fixture(params=["reverse", "regular"])
def way(
    request: pytest.FixtureRequest, mitm: MitmdumpPool, ws_upstream: ResponsesWsUpstream
) -> Any:
    """(proxy, the URL the client connects to, the proxy argument of the client)."""
    if request.param == "reverse":
        proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}")
        return proxy, proxy.url.replace("http://", "ws://") + "/v1/responses", None
    proxy = mitm.get()
    return proxy, ws_upstream.ws_url, proxy.url


class Client:
    """One WebSocket connection speaking the Responses protocol (a context manager)."""

    def __init__(self, url: str, proxy: str | None) -> None:
        self._connect = connect(
            url, proxy=proxy, additional_headers=BETA, open_timeout=10, max_size=None
        )
        self.ws: ClientConnection = self._connect.__enter__()
        self.sent: list[str] = []
        self.received: list[str] = []

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self._connect.__exit__(None, None, None)

    def create(self, items: list[Any], previous: str | None = None) -> list[dict[str, Any]]:
        """One response.create; the events of its response, as received."""
        frame: dict[str, Any] = {"type": "response.create", "model": "kimi-k3", "tools": TOOLS}
        frame["input"] = items
        if previous is not None:
            frame["previous_response_id"] = previous
        return self.send(json.dumps(frame))

    def send(self, text: str) -> list[dict[str, Any]]:
        self.sent.append(text)
        self.ws.send(text)
        events = []
        while True:
            message = self.ws.recv(timeout=10)
            assert isinstance(message, str)
            self.received.append(message)
            events.append(json.loads(message))
            if events[-1]["type"] in ("response.completed", "error"):
                return events


def id_positions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(position, id) for every id position of a response's events."""
    found = []
    for event in events:
        items = [event.get("item"), *(event.get("response") or {}).get("output", [])]
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call":
                found += [("call_id", item["call_id"]), ("id", item["id"])]
        if "item_id" in event and event["type"].startswith("response.function_call"):
            found.append(("item_id", event["item_id"]))
    return found


def tool_loop(client: Client, *, full: bool) -> list[set[str]]:
    """TURNS tool turns and the final answer on one connection; the ids of each turn's
    response, as the client saw them."""
    history: list[Any] = [USER]
    events = client.create(history)
    seen = []
    for turn in range(TURNS + 1):
        assert events[-1]["type"] == "response.completed", events[-1]
        positions = id_positions(events)
        if turn == TURNS:
            assert positions == []  # the final text
            return seen
        assert {k for k, _ in positions} == {"call_id", "id", "item_id"}, positions
        seen.append({v for _, v in positions})
        call = next(e["item"] for e in events if e["type"] == "response.output_item.done")
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "hello"}
        if full:
            history += [call, output]
            events = client.create(history)
        else:
            events = client.create([output], previous=events[-1]["response"]["id"])
    raise AssertionError("unreachable")


def check_bytes(client: Client, conn: Connection) -> None:
    """Client and stand-in saw the same messages, each the same bytes but for the id
    literals that changed (raw on the stand-in's side, client ids on the client's)."""
    upstream_sent = [m.text for m in conn.messages if not m.from_client]
    upstream_got = [m.text for m in conn.messages if m.from_client]
    assert len(upstream_sent) == len(client.received)
    assert len(upstream_got) == len(client.sent)
    for raw_side, client_side in [
        *zip(upstream_sent, client.received, strict=True),
        *zip(upstream_got, client.sent, strict=True),
    ]:
        literals = {f'"{x}"' for x in SAFE if f'"{x}"' in client_side}
        if not literals:
            assert client_side == raw_side  # untouched: byte for byte
            continue
        restored = client_side
        for literal in literals:
            restored = restored.replace(literal, json.dumps(codec.decode(literal[1:-1])))
        assert restored == raw_side


@pytest.mark.parametrize("full", [False, True], ids=["previous_response_id", "full-history"])
def test_ids_are_encoded_tagged_and_restored_on_one_connection(
    way: tuple[Mitmdump, str, str | None], ws_upstream: ResponsesWsUpstream, full: bool
) -> None:
    proxy, url, via = way
    before = len(ws_upstream.connections)
    with Client(url, via) as client:
        assert "permessage-deflate" in client.ws.response.headers["Sec-WebSocket-Extensions"]
        seen = tool_loop(client, full=full)
    assert seen == [{client_id(KIMI, t), client_id(ITEM, t)} for t in range(TURNS)]
    (conn,) = ws_upstream.connections[before:]
    assert conn.headers["openai-beta"] == BETA["OpenAI-Beta"]
    for request in conn.requests():  # the stand-in got only its own ids back
        for item in request["input"]:
            assert item.get("call_id") in (None, KIMI), item
            assert item.get("type") != "function_call" or item["id"] == ITEM, item
    assert len(conn.requests()) == TURNS + 1
    check_bytes(client, conn)
    line = proxy.wait_for_log("WebSocket response")
    assert "encoded" in line and "GET 127.0.0.1/v1/responses" in line


def test_without_toolid_the_client_gets_one_raw_id_for_every_turn(
    mitm: MitmdumpPool, ws_upstream: ResponsesWsUpstream
) -> None:
    """``toolid_websocket=pass``: every message passes as it is, and what a client gets is
    what breaks it: ids no strict client accepts, and one id for the calls of all turns."""
    proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}", toolid_websocket="pass")
    before = len(ws_upstream.connections)
    with Client(proxy.url.replace("http://", "ws://") + "/v1/responses", None) as client:
        seen = tool_loop(client, full=False)
    assert seen == [{KIMI, ITEM}] * TURNS  # three calls, one identity
    assert not codec.is_strict_safe(KIMI)
    (conn,) = ws_upstream.connections[before:]
    assert [m.text for m in conn.messages if not m.from_client] == client.received
    assert [m.text for m in conn.messages if m.from_client] == client.sent


def test_refuse_answers_the_upgrade_with_426(
    mitm: MitmdumpPool, ws_upstream: ResponsesWsUpstream
) -> None:
    proxy = mitm.get(mode=f"reverse:http://127.0.0.1:{ws_upstream.port}", toolid_websocket="refuse")
    before = len(ws_upstream.connections)
    with pytest.raises(InvalidStatus) as refused:
        Client(proxy.url.replace("http://", "ws://") + "/v1/responses", None)
    assert refused.value.response.status_code == 426
    assert len(ws_upstream.connections) == before  # never reached the upstream


def test_messages_that_are_not_responses_json_pass_unchanged(
    way: tuple[Mitmdump, str, str | None], ws_upstream: ResponsesWsUpstream
) -> None:
    """Non-JSON text (even one spelling a client id: reported, not touched) and an error
    event pass as they are; the connection goes on."""
    proxy, url, via = way
    before = len(ws_upstream.connections)
    mark = proxy.mark()
    with Client(url, via) as client:
        odd = f"not json {client_id(KIMI, 1)}"
        (error,) = client.send(odd)
        assert error["type"] == "error"
        events = client.create([USER])
        assert events[-1]["type"] == "response.completed"
    (conn,) = ws_upstream.connections[before:]
    assert conn.messages[0].text == odd
    check_bytes(client, conn)
    assert "request left unchanged" in proxy.wait_for_log("toolid", mark)
