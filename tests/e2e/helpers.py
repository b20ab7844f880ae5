"""Clients and checks for the end-to-end tests (no pytest imports: also used by the
subprocess client in ``https_client.py``).

Two kinds of client drive a two-turn tool loop (turn 1 returns tool calls, turn 2 sends
the tool results back and gets the final answer):

- the real SDKs (``openai`` and ``anthropic``; both are built on ``httpx2``), to prove the
  payloads the proxy emits are accepted by them and that ids survive an agent's round trip;
- ``httpx`` directly ("wire" loops), to compare the exact bytes a client receives with the
  bytes the upstream sent.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
from standin import API, MODEL, WEATHER_TEXT, Exchange, ScenarioHandle

from toolid import decode, encode

SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")
USER_PROMPT = "What's the weather like in Paris today?"
TOOL_RESULT = "sunny, 22 °C, wind 8 km/h"

TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    for name in ("get_weather", "get_time", "get_news", "get_tide")
]
TOOLS_RESPONSES = [{"type": "function", **t["function"]} for t in TOOLS_CHAT]
TOOLS_ANTHROPIC = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS_CHAT
]


@dataclass
class LoopResult:
    """What the client saw during a two-turn loop."""

    api: API
    call_ids: list[str] = field(default_factory=list)  # one per tool call, in order
    item_ids: list[str] = field(default_factory=list)  # Responses item ids, in order
    srv_ids: list[str] = field(default_factory=list)  # Anthropic server tool ids, in order
    seen: list[str] = field(default_factory=list)  # every id occurrence the client saw
    final_text: str = ""
    turn1_body: bytes | None = None  # wire loops: response entity of turn 1 as received
    turn2_body: bytes | None = None
    requests: list[bytes] = field(default_factory=list)  # request bodies the client sent


# ----------------------------------------------------------------------------- id positions


def response_id_positions(api: API, obj: Any) -> list[tuple[str, str]]:
    """(kind, value) of every tool-call id in one response document or stream event;
    kind is "call" (call ids, tool_use ids) or "item" (Responses item ids)."""
    out: list[tuple[str, str]] = []
    if not isinstance(obj, dict):
        return out
    if api == "chat":
        for choice in obj.get("choices") or []:
            for key in ("message", "delta"):
                for tc in (choice.get(key) or {}).get("tool_calls") or []:
                    if tc.get("id") is not None:
                        out.append(("call", tc["id"]))
    elif api == "responses":
        items: list[Any] = []
        if isinstance(obj.get("item"), dict):
            items.append(obj["item"])
        if isinstance(obj.get("response"), dict):
            items.extend(obj["response"].get("output") or [])
        items.extend(obj.get("output") or [])
        for it in items:
            if it.get("type") == "function_call":
                out.append(("item", it["id"]))
                out.append(("call", it["call_id"]))
        if str(obj.get("type", "")).startswith("response.function_call_arguments"):
            out.append(("item", obj["item_id"]))
    else:
        blocks = list(obj.get("content") or [])
        if isinstance(obj.get("content_block"), dict):
            blocks.append(obj["content_block"])
        if isinstance(obj.get("message"), dict):
            blocks.extend(obj["message"].get("content") or [])
        out.extend(_anthropic_block_ids(blocks))
    return out


def _anthropic_block_ids(blocks: Iterable[Any]) -> list[tuple[str, str]]:
    """kind "call" for tool_use ids, "srv" for server/mcp tool ids, "ref" for
    tool_use_id and caller.tool_id (references to either)."""
    out: list[tuple[str, str]] = []
    for b in blocks:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "tool_use":
            out.append(("call", b["id"]))
        elif b.get("type") in ("server_tool_use", "mcp_tool_use"):
            out.append(("srv", b["id"]))
        if "tool_use_id" in b:
            out.append(("ref", b["tool_use_id"]))
        caller = b.get("caller")
        if isinstance(caller, dict) and "tool_id" in caller:
            out.append(("ref", caller["tool_id"]))
    return out


def request_id_positions(api: API, req: Any) -> list[tuple[str, str]]:
    """(kind, value) of every tool-call id position in a request body."""
    out: list[tuple[str, str]] = []
    if api == "chat":
        for m in req.get("messages", []):
            for tc in m.get("tool_calls") or []:
                out.append(("call", tc["id"]))
            if "tool_call_id" in m:
                out.append(("call", m["tool_call_id"]))
    elif api == "responses":
        items = req.get("input")
        for it in items if isinstance(items, list) else []:
            if it.get("type") == "function_call":
                if "id" in it:
                    out.append(("item", it["id"]))
                out.append(("call", it["call_id"]))
            elif it.get("type") == "function_call_output":
                out.append(("call", it["call_id"]))
    elif api in ("gemini", "code_assist"):
        inner = req.get("request", {}) if api == "code_assist" else req
        for content in inner.get("contents", []):
            for part in content.get("parts", []):
                for member in ("functionCall", "functionResponse"):
                    if "id" in part.get(member, {}):
                        out.append(("call", part[member]["id"]))
    else:
        for m in req.get("messages", []):
            content = m.get("content")
            out.extend(_anthropic_block_ids(content if isinstance(content, list) else []))
    return out


def check_upstream_got_its_own_ids(
    reqs: list[Exchange],
    api: API,
    raw: str,
    *,
    turns: int,
    parallel: int = 1,
    item_ids: Iterable[str] = (),
) -> None:
    """A tool loop's requests as the upstream got them (``parallel`` calls with the raw id
    ``raw`` in each of ``turns`` tool turns, then the final answer): all answered 200, the
    t-th holding the t tool turns before it, every call and every result under ``raw`` and
    every Responses item id one of ``item_ids``: the upstream's own ids, nothing else."""
    assert [r.status for r in reqs] == [200] * (turns + 1), [(r.status, r.error) for r in reqs]
    for t, rec in enumerate(reqs):
        positions = request_id_positions(api, rec.json)
        calls = t * parallel  # the calls in the history of the (t+1)-th request
        # each call's id stands twice: at the call and at its result
        want = {"call": calls, "ref": calls} if api == "anthropic" else {"call": 2 * calls}
        kinds = Counter(k for k, _ in positions if k != "item")
        assert kinds == Counter(want), f"request {t + 1}: {positions!r}"
        wrong = [(k, v) for k, v in positions if v not in ({*item_ids} if k == "item" else {raw})]
        assert not wrong, f"request {t + 1}: the upstream got {wrong!r}, not its own ids"


# ----------------------------------------------------------------------------- SSE


def add_chat_chunk(chunk: Any, slots: dict[int, dict[str, Any]]) -> str:
    """Read one streamed Chat chunk (openai SDK): each tool-call delta's ids (every one it
    carries), name and arguments added to its call's slot, by index; the text it carries."""
    text = ""
    for choice in chunk.choices:
        text += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            slot = slots.setdefault(tc.index, {"ids": [], "name": "", "arguments": ""})
            if tc.id is not None:
                slot["ids"].append(tc.id)
            if tc.function is not None:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
    return text


def sse_events(data: bytes) -> list[tuple[str | None, str]]:
    """Parse an SSE stream (WHATWG rules, any line ending) into (event name, data)."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    datas: list[str] = []
    for line in re.split(r"\r\n|\r|\n", data.decode("utf-8")):
        if line == "":
            if datas:
                events.append((name, "\n".join(datas)))
            name, datas = None, []
            continue
        if line.startswith(":"):
            continue
        fname, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if fname == "event":
            name = value
        elif fname == "data":
            datas.append(value)
    return events


def stream_documents(data: bytes) -> list[Any]:
    return [json.loads(d) for _, d in sse_events(data) if d.strip() != "[DONE]"]


# ----------------------------------------------------------------------------- byte checks

_STRING_LITERAL = re.compile(rb'"(?:[^"\\]|\\.)*"')


def mask_strings(body: bytes, values: Iterable[str]) -> bytes:
    """Replace every JSON string literal in ``body`` whose value is in ``values`` by a
    marker, whatever its escaping; everything else stays byte for byte."""
    wanted = set(values)

    def sub(m: re.Match[bytes]) -> bytes:
        try:
            value = json.loads(m.group(0))
        except ValueError:
            return m.group(0)
        return b'"\x00ID\x00"' if value in wanted else m.group(0)

    return _STRING_LITERAL.sub(sub, body)


def restore_all(client_id: str) -> str:
    """What a non-strict upstream should receive for ``client_id``."""
    return decode(client_id)


def restore_strict(client_id: str) -> str:
    """What a strict upstream should receive: the raw id only if it is itself safe."""
    raw = decode(client_id)
    return raw if SAFE_ID.fullmatch(raw) else client_id


def unchanged(client_id: str) -> str:
    return client_id


def check_turn2_request(
    handle: ScenarioHandle,
    client_body: bytes,
    restore: Callable[[str], str] = restore_all,
) -> None:
    """The turn-2 request reached the upstream with ``restore(client id)`` in every id
    position and every other byte as the client sent it."""
    ex = handle.turn(2)
    api = ex.api
    assert api is not None
    client_req = json.loads(client_body)
    client_pos = request_id_positions(api, client_req)
    assert client_pos, "the client request has no id positions (harness bug)"
    up_pos = request_id_positions(api, ex.json)
    expected = [(kind, restore(v)) for kind, v in client_pos]
    assert up_pos == expected, (
        f"upstream got ids {up_pos!r}, expected {expected!r} (client sent {client_pos!r})"
    )
    client_values = {v for _, v in client_pos} | {v for _, v in expected}
    masked_up = mask_strings(ex.body, {v for _, v in expected})
    masked_client = mask_strings(client_body, client_values)
    assert masked_up == masked_client, (
        "the upstream request differs from the client's outside the id literals:\n"
        f"client:   {client_body!r}\nupstream: {ex.body!r}"
    )


def check_client_ids(
    result: LoopResult, handle: ScenarioHandle, client_id: Callable[[str], str]
) -> None:
    """The client saw exactly ``client_id(raw)`` for every id, and only safe ids."""
    sc = handle.scenario
    assert sc.item_ids is not None
    want_calls = [client_id(r) for r in sc.ids]
    assert result.call_ids == want_calls, (
        f"client saw call ids {result.call_ids!r}, expected {want_calls!r} (raw {sc.ids!r})"
    )
    if result.api == "responses":
        want_items = [client_id(r) for r in sc.item_ids]
        assert result.item_ids == want_items, (
            f"client saw item ids {result.item_ids!r}, expected {want_items!r}"
        )
    if result.api == "anthropic" or sc.server_tool_ids:
        want_srv = [client_id(r) for r in sc.server_tool_ids]
        assert result.srv_ids == want_srv, (
            f"client saw server tool ids {result.srv_ids!r}, expected {want_srv!r}"
        )
    allowed = set(want_calls) | {client_id(r) for r in sc.item_ids}
    allowed |= {client_id(r) for r in sc.server_tool_ids}
    assert set(result.seen) <= allowed, f"client saw unexpected ids {set(result.seen) - allowed}"
    assert result.final_text == WEATHER_TEXT


def check_all_safe(result: LoopResult) -> None:
    bad = [i for i in result.seen if not SAFE_ID.fullmatch(i)]
    assert not bad, f"client saw non-conforming ids {bad!r}"


def check_response_bytes(
    received: bytes | None, ex: Exchange, client_id: Callable[[str], str]
) -> None:
    """The response entity reached the client byte for byte as the upstream sent it,
    except inside the id literals, which hold ``client_id(raw)``."""
    expected = ex.expected_client_bytes(client_id)
    assert received is not None
    if received != expected:
        at = next(
            (i for i, (a, b) in enumerate(zip(received, expected, strict=False)) if a != b),
            min(len(received), len(expected)),
        )
        raise AssertionError(
            f"response bytes differ at offset {at} (got {len(received)} bytes, expected "
            f"{len(expected)}):\n got: {received[max(0, at - 80) : at + 80]!r}\n"
            f"want: {expected[max(0, at - 80) : at + 80]!r}"
        )


def encode_safe(raw: str) -> str:
    return encode(raw, "safe")


def encode_call(raw: str) -> str:
    return encode(raw, "call")


# ----------------------------------------------------------------------------- SDK loops


def _record_requests(result: LoopResult) -> Callable[[Any], None]:
    def hook(request: Any) -> None:
        result.requests.append(request.read())

    return hook


def sdk_http_client(result: LoopResult, proxy: str | None = None, **kwargs: Any) -> Any:
    """An ``httpx2`` client (what both SDKs are built on) that records request bodies."""
    kwargs.setdefault("trust_env", False)
    kwargs.setdefault("timeout", 30.0)
    return httpx2.Client(proxy=proxy, event_hooks={"request": [_record_requests(result)]}, **kwargs)


def sdk_loop(
    api: API,
    base_url: str,
    *,
    stream: bool = False,
    proxy: str | None = None,
    http_client: Any = None,
    default_client: bool = False,
) -> LoopResult:
    """Run a two-turn tool loop with the real SDK for ``api`` against ``base_url``."""
    result = LoopResult(api=api)
    if not default_client and http_client is None:
        http_client = sdk_http_client(result, proxy)
    kwargs: dict[str, Any] = {"base_url": base_url, "max_retries": 0}
    if http_client is not None:
        kwargs["http_client"] = http_client
    if api == "anthropic":
        client: Any = anthropic.Anthropic(api_key="sk-ant-e2e", **kwargs)
        _anthropic_loop(client, stream, result)
    else:
        client = openai.OpenAI(api_key="sk-e2e", **kwargs)
        if api == "chat":
            _chat_loop(client, stream, result)
        else:
            _responses_loop(client, stream, result)
    client.close()
    return result


def _chat_loop(client: Any, stream: bool, result: LoopResult) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": USER_PROMPT}]
    calls: list[dict[str, Any]] = []
    if stream:
        by_index: dict[int, dict[str, Any]] = {}
        for chunk in client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS_CHAT, stream=True
        ):
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    slot = by_index.setdefault(
                        tc.index, {"id": "", "name": "", "arguments": "", "ids": 0}
                    )
                    if tc.id is not None:
                        result.seen.append(tc.id)
                        slot["ids"] += 1
                        slot["id"] += tc.id  # what the SDK's accumulator does
                    if tc.function is not None:
                        slot["name"] += tc.function.name or ""
                        slot["arguments"] += tc.function.arguments or ""
        for index in sorted(by_index):
            slot = by_index[index]
            assert slot["ids"] == 1, f"tool call {index} carried an id in {slot['ids']} deltas"
            calls.append(slot)
    else:
        resp = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS_CHAT)
        for tc in resp.choices[0].message.tool_calls or []:
            result.seen.append(tc.id)
            calls.append(
                {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            )
    result.call_ids = [c["id"] for c in calls]
    messages += chat_turn(calls, TOOL_RESULT)
    if stream:
        text = ""
        for chunk in client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS_CHAT, stream=True
        ):
            for choice in chunk.choices:
                text += choice.delta.content or ""
        result.final_text = text
    else:
        resp = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS_CHAT)
        result.final_text = resp.choices[0].message.content or ""


def chat_turn(calls: list[dict[str, Any]], output: str) -> list[dict[str, Any]]:
    """The Chat messages a client appends after a tool-call answer: the assistant message
    with its calls (``id``, ``name``, ``arguments`` each) and one tool result per call."""
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ],
    }
    results = [{"role": "tool", "tool_call_id": c["id"], "content": output} for c in calls]
    return [assistant, *results]


def _responses_loop(client: Any, stream: bool, result: LoopResult) -> None:
    inputs: list[Any] = [{"role": "user", "content": USER_PROMPT}]
    if stream:
        final = None
        for event in client.responses.create(
            model=MODEL, input=inputs, tools=TOOLS_RESPONSES, stream=True
        ):
            for kind, value in response_id_positions("responses", event.model_dump()):
                del kind
                result.seen.append(value)
            if event.type == "response.completed":
                final = event.response
        assert final is not None, "no response.completed event"
        output = final.output
    else:
        resp = client.responses.create(model=MODEL, input=inputs, tools=TOOLS_RESPONSES)
        output = resp.output
    calls = [o for o in output if o.type == "function_call"]
    for c in calls:
        result.seen += [c.id, c.call_id]
    result.call_ids = [c.call_id for c in calls]
    result.item_ids = [c.id for c in calls]
    inputs += [o.model_dump(exclude_none=True) for o in output]
    inputs += [
        {"type": "function_call_output", "call_id": c.call_id, "output": TOOL_RESULT} for c in calls
    ]
    if stream:
        text = ""
        for event in client.responses.create(
            model=MODEL, input=inputs, tools=TOOLS_RESPONSES, stream=True
        ):
            if event.type == "response.output_text.delta":
                text += event.delta
        result.final_text = text
    else:
        resp = client.responses.create(model=MODEL, input=inputs, tools=TOOLS_RESPONSES)
        result.final_text = resp.output_text


def _anthropic_loop(client: Any, stream: bool, result: LoopResult) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": USER_PROMPT}]
    common = {"model": MODEL, "max_tokens": 1024, "tools": TOOLS_ANTHROPIC}
    if stream:
        with client.messages.stream(messages=messages, **common) as s:
            for event in s:
                if event.type in ("content_block_start", "message_start"):
                    for _, value in response_id_positions("anthropic", event.model_dump()):
                        result.seen.append(value)
            message = s.get_final_message()
    else:
        message = client.messages.create(messages=messages, **common)
    uses = [b for b in message.content if b.type == "tool_use"]
    for _, value in _anthropic_block_ids(b.model_dump() for b in message.content):
        result.seen.append(value)
    result.call_ids = [b.id for b in uses]
    result.srv_ids = [b.id for b in message.content if b.type == "server_tool_use"]
    messages.append({"role": "assistant", "content": message.content})
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": b.id, "content": TOOL_RESULT} for b in uses
            ],
        }
    )
    if stream:
        with client.messages.stream(messages=messages, **common) as s:
            result.final_text = s.get_final_text()
    else:
        message = client.messages.create(messages=messages, **common)
        result.final_text = "".join(b.text for b in message.content if b.type == "text")


# ----------------------------------------------------------------------------- wire loops


def turn1_request(api: API, stream: bool) -> dict[str, Any]:
    if api == "chat":
        return {
            "model": MODEL,
            "messages": [{"role": "user", "content": USER_PROMPT}],
            "tools": TOOLS_CHAT,
            "stream": stream,
        }
    if api == "responses":
        return {
            "model": MODEL,
            "input": [{"role": "user", "content": USER_PROMPT}],
            "tools": TOOLS_RESPONSES,
            "stream": stream,
        }
    return {
        "model": MODEL,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": USER_PROMPT}],
        "tools": TOOLS_ANTHROPIC,
        "stream": stream,
    }


def turn2_request(
    api: API,
    stream: bool,
    call_ids: list[str],
    item_ids: list[str],
    assistant_content: list[Any] | None = None,
) -> Any:
    req = turn1_request(api, stream)
    args = '{"city": "Paris", "unit": "celsius"}'
    names = ("get_weather", "get_time", "get_news", "get_tide")
    if api == "chat":
        req["messages"].append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": names[i], "arguments": args},
                    }
                    for i, cid in enumerate(call_ids)
                ],
            }
        )
        req["messages"] += [
            {"role": "tool", "tool_call_id": cid, "content": TOOL_RESULT} for cid in call_ids
        ]
    elif api == "responses":
        req["input"] += [
            {
                "type": "function_call",
                "id": iid,
                "call_id": cid,
                "name": names[i],
                "arguments": args,
                "status": "completed",
            }
            for i, (cid, iid) in enumerate(zip(call_ids, item_ids, strict=True))
        ]
        req["input"] += [
            {"type": "function_call_output", "call_id": cid, "output": TOOL_RESULT}
            for cid in call_ids
        ]
    else:
        if assistant_content is None:
            assistant_content = [
                {"type": "tool_use", "id": cid, "name": names[i], "input": json.loads(args)}
                for i, cid in enumerate(call_ids)
            ]
        req["messages"].append({"role": "assistant", "content": assistant_content})
        req["messages"].append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": cid, "content": TOOL_RESULT}
                    for cid in call_ids
                ],
            }
        )
    return req


def _collect(result: LoopResult, api: API, docs: list[Any]) -> None:
    found: dict[str, list[str]] = {"call": [], "item": [], "srv": [], "ref": []}
    for doc in docs:
        for kind, value in response_id_positions(api, doc):
            result.seen.append(value)
            if value not in found[kind]:
                found[kind].append(value)
    result.call_ids, result.item_ids, result.srv_ids = found["call"], found["item"], found["srv"]


def anthropic_content(docs: list[Any], stream: bool) -> list[Any]:
    """The assistant content of an Anthropic response (accumulated from stream events)."""
    if not stream:
        return list(docs[0]["content"])
    blocks: list[Any] = []
    partial: dict[int, str] = {}
    for doc in docs:
        if doc["type"] == "message_start":
            blocks = list(doc["message"]["content"])
        elif doc["type"] == "content_block_start":
            assert doc["index"] == len(blocks), "content block indexes out of order"
            blocks.append(dict(doc["content_block"]))
        elif doc["type"] == "content_block_delta":
            delta = doc["delta"]
            if delta["type"] == "text_delta":
                blocks[doc["index"]]["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[doc["index"]] = partial.get(doc["index"], "") + delta["partial_json"]
        elif doc["type"] == "content_block_stop" and partial.get(doc["index"]):
            blocks[doc["index"]]["input"] = json.loads(partial[doc["index"]])
    return blocks


def _final_text(api: API, stream: bool, body: bytes) -> str:
    if not stream:
        doc = json.loads(body)
        if api == "chat":
            return str(doc["choices"][0]["message"]["content"])
        if api == "responses":
            return "".join(
                part["text"]
                for item in doc["output"]
                if item["type"] == "message"
                for part in item["content"]
            )
        return "".join(b["text"] for b in doc["content"] if b["type"] == "text")
    text = ""
    for doc in stream_documents(body):
        if api == "chat":
            for choice in doc.get("choices") or []:
                text += choice["delta"].get("content") or ""
        elif api == "responses":
            if doc["type"] == "response.output_text.delta":
                text += doc["delta"]
        elif doc["type"] == "content_block_delta" and doc["delta"]["type"] == "text_delta":
            text += doc["delta"]["text"]
    return text


def dump_json(obj: Any) -> bytes:
    """JSON as a client writes it (raw UTF-8; escapes only where UTF-8 cannot hold it)."""
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj).encode("ascii")


def wire_post(client: Any, url: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
    """POST ``body`` and return (response, decoded entity bytes)."""
    hdrs = {"content-type": "application/json", "authorization": "Bearer sk-e2e"}
    hdrs.update(headers or {})
    with client.stream("POST", url, content=body, headers=hdrs) as resp:
        data = b"".join(resp.iter_bytes())
    return resp, data


def wire_loop(
    client: Any,
    handle: ScenarioHandle,
    api: API,
    *,
    stream: bool,
    origin: str | None = None,
    headers: dict[str, str] | None = None,
) -> LoopResult:
    """Run a two-turn loop with a raw httpx client; ``origin`` replaces the upstream's
    scheme://host:port in the URL (reverse proxy)."""
    url = handle.url(api)
    if origin is not None:
        url = origin + url.removeprefix(handle.server.base_url)
    result = LoopResult(api=api)
    body1 = dump_json(turn1_request(api, stream))
    result.requests.append(body1)
    resp, data = wire_post(client, url, body1, headers)
    assert resp.status_code == 200, f"turn 1: HTTP {resp.status_code}: {data[:500]!r}"
    result.turn1_body = data
    docs = stream_documents(data) if stream else [json.loads(data)]
    _collect(result, api, docs)
    content = anthropic_content(docs, stream) if api == "anthropic" else None
    body2 = dump_json(turn2_request(api, stream, result.call_ids, result.item_ids, content))
    result.requests.append(body2)
    resp, data = wire_post(client, url, body2, headers)
    assert resp.status_code == 200, f"turn 2: HTTP {resp.status_code}: {data[:500]!r}"
    result.turn2_body = data
    result.final_text = _final_text(api, stream, data)
    return result


# ----------------------------------------------------------------------------- robustness
#
# For the fault, load and security tests: toolid's warnings in the mitmdump log, the
# memory of the mitmdump process, "the proxy still serves", and an asyncio wire loop.

# toolid's warning: "toolid: METHOD host/path: message" (its info lines read
# "toolid: 1 encoded (...) [METHOD host/path]").
_TOOLID_WARNING = re.compile(r"\btoolid: [A-Z]+ (\S+): ")


def toolid_warnings(log: str, path: str) -> list[str]:
    """toolid's warning lines about the flow(s) whose path contains ``path``."""
    return [
        line
        for line in log.splitlines()
        if (m := _TOOLID_WARNING.search(line)) is not None and path in m.group(1)
    ]


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` (VmRSS in /proc/PID/status), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class PeakRss:
    """Sample a process's RSS every ``interval`` s in a thread while the block runs."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(rss_mib(self.pid))
            self._stop.wait(self.interval)

    @property
    def peak(self) -> float:
        return max(self.samples, default=0.0)

    def __enter__(self) -> PeakRss:
        self.samples.append(rss_mib(self.pid))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.samples.append(rss_mib(self.pid))


def check_loop_bytes(result: LoopResult, handle: ScenarioHandle) -> None:
    """A wire loop went through untouched but for the id literals (as
    ``cases.check_wire_loop`` with the default profile)."""
    check_response_bytes(result.turn1_body, handle.turn(1), encode_safe)
    check_response_bytes(result.turn2_body, handle.turn(2), encode_safe)
    assert handle.turn(1).body == result.requests[0]
    check_client_ids(result, handle, encode_safe)
    check_turn2_request(handle, result.requests[1], restore_all)


def check_proxy_serves(
    client: Any, handle_for: Callable[[], ScenarioHandle], apis: Iterable[API] | None = None
) -> None:
    """The proxy still serves: a streamed and a buffered two-turn loop of each API (or of
    ``apis``) go through it, rewritten exactly. ``client``: an httpx client through the
    proxy; ``handle_for()``: a fresh scenario with a Kimi id."""
    for api in apis or ("chat", "responses", "anthropic"):
        for stream in (True, False):
            handle = handle_for()
            result = wire_loop(client, handle, api, stream=stream)
            check_loop_bytes(result, handle)


class Gauge:
    """Counts requests in flight (streamed ones apart) and keeps their latencies."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.streams = 0
        self.peak_in_flight = 0
        self.peak_streams = 0
        self.latencies: list[float] = []

    def start(self, stream: bool) -> float:
        self.in_flight += 1
        self.streams += stream
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.peak_streams = max(self.peak_streams, self.streams)
        return time.perf_counter()

    def stop(self, stream: bool, started: float) -> None:
        self.in_flight -= 1
        self.streams -= stream
        self.latencies.append(time.perf_counter() - started)


async def async_wire_post(
    client: Any,
    url: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    *,
    gauge: Gauge | None = None,
    stream: bool = False,
) -> tuple[int, bytes]:
    hdrs = {"content-type": "application/json", "authorization": "Bearer sk-e2e"}
    hdrs.update(headers or {})
    started = gauge.start(stream) if gauge else 0.0
    try:
        async with client.stream("POST", url, content=body, headers=hdrs) as resp:
            data = b"".join([piece async for piece in resp.aiter_bytes()])
    finally:
        if gauge:
            gauge.stop(stream, started)
    return resp.status_code, data


async def async_wire_loop(
    client: Any, handle: ScenarioHandle, api: API, *, stream: bool, gauge: Gauge | None = None
) -> LoopResult:
    """``wire_loop`` for an ``httpx.AsyncClient`` (``gauge`` counts its requests)."""
    url = handle.url(api)
    result = LoopResult(api=api)
    body1 = dump_json(turn1_request(api, stream))
    result.requests.append(body1)
    status, data = await async_wire_post(client, url, body1, gauge=gauge, stream=stream)
    assert status == 200, f"turn 1: HTTP {status}: {data[:500]!r}"
    result.turn1_body = data
    docs = stream_documents(data) if stream else [json.loads(data)]
    _collect(result, api, docs)
    content = anthropic_content(docs, stream) if api == "anthropic" else None
    body2 = dump_json(turn2_request(api, stream, result.call_ids, result.item_ids, content))
    result.requests.append(body2)
    status, data = await async_wire_post(client, url, body2, gauge=gauge, stream=stream)
    assert status == 200, f"turn 2: HTTP {status}: {data[:500]!r}"
    result.turn2_body = data
    result.final_text = _final_text(api, stream, data)
    return result


@dataclass
class Headless:
    """One run of an agent's command line: its exit code (None: killed at the timeout), how
    long it took, the JSON lines it printed, and its stderr."""

    returncode: int | None
    seconds: float
    events: list[Any]
    stderr: str


def run_headless(cmd: list[str], work: Path, env: dict[str, str], timeout: float) -> Headless:
    """Run an agent headless in ``work`` (stdin from /dev/null, in its own process group, so
    that a kill at ``timeout`` reaches its children too); its stdout read as JSON lines."""
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        returncode: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        returncode = None
    events = []
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return Headless(returncode, time.monotonic() - started, events, err.decode("utf-8", "replace"))
