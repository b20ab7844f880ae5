"""The ``toolid`` contentview: annotated bodies of the three APIs, and when it is offered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from mitmproxy import contentviews
from mitmproxy.test import taddons, tflow
from toolid_view import VIEW_PRIORITY, ToolIdView

from addons.toolid_addon import ToolId
from toolid import annotate, encode, repair_request
from toolid.apis import RECORDS
from toolid.positions import Api

DATA = Path(__file__).parent / "data"

CHAT_RAW = "functions.get_weather:0"
RESPONSES_RAW = "get_weather:0#62786027996b4c40886cc7262bdf7382"
MESSAGES_RAW = "sessions_history:183"
WARN = "# ⚠ not [A-Za-z0-9_-]+"

PATHS = {
    Api.CHAT: "/v1/chat/completions",
    Api.RESPONSES: "/v1/responses",
    Api.MESSAGES: "/v1/messages",
}


@pytest.fixture
def tctx() -> Iterator[taddons.context]:
    with taddons.context(ToolId()) as context:
        yield context


def http_flow(
    side: str, body: bytes, *, path: str, content_type: str = "application/json"
) -> tflow.HTTPFlow:
    flow = tflow.tflow(resp=True)
    flow.request.path = path
    message = flow.request if side == "request" else flow.response
    message.headers["content-type"] = content_type
    message.content = body
    return flow


def render(flow: tflow.HTTPFlow, side: str) -> contentviews.ContentviewResult:
    """What mitmproxy shows for the body when no view is chosen (auto)."""
    message = flow.request if side == "request" else flow.response
    return contentviews.prettify_message(message, flow)


def line_with(text: str, needle: str) -> str:
    lines = [line for line in text.splitlines() if needle in line]
    assert len(lines) == 1, (needle, text)
    return lines[0]


# --- JSON bodies of the three APIs ----------------------------------------------------------

CASES = [
    # (fixture, API, side, {id literal: expected annotation})
    (
        "chat_response.json",
        Api.CHAT,
        "response",
        {f'"id": "{CHAT_RAW}"': f"{WARN} ⟶ client {encode(CHAT_RAW)}"},
    ),
    (
        "chat_request.json",
        Api.CHAT,
        "request",
        {
            f'"id": "{encode(CHAT_RAW)}"': f"# ⟵ raw {CHAT_RAW}",
            f'"tool_call_id": "{encode(CHAT_RAW)}"': f"# ⟵ raw {CHAT_RAW}",
        },
    ),
    (
        "responses_response.json",
        Api.RESPONSES,
        "response",
        {
            f'"call_id": "{RESPONSES_RAW}"': f"{WARN} ⟶ client {encode(RESPONSES_RAW)}",
            '"id": "fc_1"': "# tool-call id, conforms",
        },
    ),
    (
        "responses_request.json",
        Api.RESPONSES,
        "request",
        {f'"call_id": "{encode(RESPONSES_RAW)}"': f"# ⟵ raw {RESPONSES_RAW}"},
    ),
    (
        "messages_response.json",
        Api.MESSAGES,
        "response",
        {
            f'"id": "{MESSAGES_RAW}"': f"{WARN} ⟶ client {encode(MESSAGES_RAW)}",
            '"id": "toolu_01AbC"': "# tool-call id, conforms",
        },
    ),
    (
        "messages_request.json",
        Api.MESSAGES,
        "request",
        {
            f'"id": "{encode(MESSAGES_RAW)}"': f"# ⟵ raw {MESSAGES_RAW}",
            f'"tool_use_id": "{encode(MESSAGES_RAW)}"': f"# ⟵ raw {MESSAGES_RAW}",
        },
    ),
]


@pytest.mark.parametrize(("fixture", "api", "side", "expected"), CASES)
def test_json_bodies_are_annotated(tctx, fixture, api, side, expected):
    body = (DATA / fixture).read_bytes()
    result = render(http_flow(side, body, path=PATHS[api]), side)
    assert result.view_name == "toolid"
    assert result.syntax_highlight == "yaml"
    text = result.text
    assert text.startswith(f"# toolid: {RECORDS[api].title} {side}")
    for literal, annotation in expected.items():
        # every occurrence of the literal is a position, each carries its annotation
        lines = [line for line in text.splitlines() if literal in line]
        assert lines, (literal, text)
        for line in lines:
            assert line.rstrip(",").endswith(annotation) or f"  {annotation}" in line, line
    # the rest is the document, pretty-printed: strip the comments and it parses back
    stripped = "\n".join(
        line.split("  # ", 1)[0] for line in text.splitlines() if not line.startswith("#")
    )
    assert json.loads(stripped) == json.loads(body)


def test_annotated_json_exactly(tctx):
    body = json.dumps(
        {"choices": [{"message": {"tool_calls": [{"id": CHAT_RAW, "type": "function"}]}}]}
    ).encode()
    flow = http_flow("response", body, path="/v1/chat/completions")
    assert render(flow, "response").text == "\n".join(
        [
            "# toolid: OpenAI Chat Completions response · 1 tool-call id · ⚠ 1 not [A-Za-z0-9_-]+",
            "{",
            '  "choices": [',
            "    {",
            '      "message": {',
            '        "tool_calls": [',
            "          {",
            f'            "id": "{CHAT_RAW}",  {WARN} ⟶ client {encode(CHAT_RAW)}',
            '            "type": "function"',
            "          }",
            "        ]",
            "      }",
            "    }",
            "  ]",
            "}",
        ]
    )


def test_ids_outside_positions_are_not_annotated(tctx):
    body = json.dumps(
        {
            "messages": [
                {"role": "user", "content": f"call {CHAT_RAW}", "id": CHAT_RAW},
                {"role": "tool", "tool_call_id": CHAT_RAW, "content": "x"},
            ]
        }
    ).encode()
    text = render(http_flow("request", body, path="/v1/chat/completions"), "request").text
    assert "# " not in line_with(text, f'"id": "{CHAT_RAW}"')  # a message id: not a position
    assert WARN in line_with(text, f'"tool_call_id": "{CHAT_RAW}"')
    assert "1 tool-call id" in text.splitlines()[0]


# --- event streams ---------------------------------------------------------------------------


def events_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("# event ")]


def test_chat_stream_event_by_event(tctx):
    body = (DATA / "chat_stream.sse").read_bytes()
    flow = http_flow("response", body, path=PATHS[Api.CHAT], content_type="text/event-stream")
    result = render(flow, "response")
    assert result.view_name == "toolid"
    text = result.text
    assert text.splitlines()[0] == (
        "# toolid: OpenAI Chat Completions event stream · 4 events · 1 tool-call id"
        " · ⚠ 1 not [A-Za-z0-9_-]+"
    )
    assert events_of(text) == ["# event 1", "# event 2", "# event 3", "# event 4"]
    assert line_with(text, f'"id": "{CHAT_RAW}"').endswith(f"{WARN} ⟶ client {encode(CHAT_RAW)}")
    assert text.endswith("# event 4\ndata: [DONE]")  # non-JSON data shown as it came


def test_responses_stream_event_by_event(tctx):
    body = (DATA / "responses_stream.sse").read_bytes()
    flow = http_flow("response", body, path=PATHS[Api.RESPONSES], content_type="text/event-stream")
    text = render(flow, "response").text
    assert events_of(text) == [
        "# event 1: response.created",
        "# event 2: response.output_item.added",
        "# event 3: response.function_call_arguments.delta",
        "# event 4: response.completed",
    ]
    calls = [line for line in text.splitlines() if f'"call_id": "{RESPONSES_RAW}"' in line]
    assert len(calls) == 2 and all(WARN in line for line in calls)
    assert line_with(text, '"item_id": "fc_1"').endswith("# tool-call id, conforms")
    # each event's data is pretty-printed under its header
    start = text.index("# event 3")
    assert text[start:].splitlines()[1:3] == [
        "{",
        '  "type": "response.function_call_arguments.delta",',
    ]


def test_messages_stream_rewritten_by_toolid(tctx):
    """What a client received through toolid: encoded ids, shown with their raw form."""
    body = (
        (DATA / "messages_stream.sse")
        .read_bytes()
        .replace(MESSAGES_RAW.encode(), encode(MESSAGES_RAW).encode())
    )
    flow = http_flow("response", body, path=PATHS[Api.MESSAGES], content_type="text/event-stream")
    text = render(flow, "response").text
    assert "· 6 events · 1 tool-call id · 1 encoded" in text.splitlines()[0]
    assert events_of(text)[:3] == [
        "# event 1: message_start",
        "# event 2: content_block_start",
        "# event 3: ping",
    ]
    assert line_with(text, f'"id": "{encode(MESSAGES_RAW)}"').endswith(f"# ⟵ raw {MESSAGES_RAW}")


def test_incomplete_and_comment_events_are_shown_as_they_are():
    body = b': keep-alive\n\ndata: {"choices": []}\n\ndata: {"cho'
    text = annotate.annotate(body, "response", Api.CHAT)
    assert text.splitlines()[1:] == [
        "# event 1",
        ": keep-alive",
        "# event 2",
        "{",
        '  "choices": []',
        "}",
        "# event 3 (incomplete: the stream ended inside it)",
        'data: {"cho',
    ]


def test_what_toolid_did_to_the_flow_is_shown_first(tctx):
    addon = ToolId()
    with taddons.context(addon):
        flow = http_flow(
            "response", (DATA / "chat_response.json").read_bytes(), path=PATHS[Api.CHAT]
        )
        flow.live = True
        addon.response(flow)
        text = render(flow, "response").text
    assert text.splitlines()[0] == (
        f"# toolid on this response: 1 encoded ({CHAT_RAW} -> {encode(CHAT_RAW)})"
    )
    assert line_with(text, f'"id": "{encode(CHAT_RAW)}"').endswith(f"# ⟵ raw {CHAT_RAW}")


def test_profile_call_changes_the_counterpart(tctx):
    tctx.options.update(toolid_profile="call")
    body = json.dumps({"content": [{"type": "tool_use", "id": "toolu_01", "input": {}}]})
    text = render(http_flow("response", body.encode(), path="/v1/messages"), "response").text
    assert line_with(text, '"id": "toolu_01"').endswith(
        "# ⟶ client call_tid1_toolu_01 (profile call)"
    )


# --- render priority ---------------------------------------------------------------------------


def priority(flow: tflow.HTTPFlow, side: str) -> float:
    message = flow.request if side == "request" else flow.response
    metadata = contentviews.Metadata(
        flow=flow,
        http_message=message,
        content_type=message.headers.get("content-type"),
    )
    return ToolIdView().render_priority(message.content or b"", metadata)


@pytest.mark.parametrize(
    ("fixture", "path", "side", "content_type"),
    [
        ("chat_response.json", "/v1/chat/completions", "response", "application/json"),
        ("chat_request.json", "/openai/v1/chat/completions?x=1", "request", "application/json"),
        ("responses_request.json", "/v1/responses", "request", "application/json"),
        ("messages_stream.sse", "/anthropic/v1/messages", "response", "text/event-stream"),
        # an LLM API path, no tool ids (yet): still the view to show
        ("chat_stream.sse", "/v1/chat/completions", "response", "text/event-stream"),
    ],
)
def test_llm_api_flows_get_the_view_first(fixture, path, side, content_type):
    flow = http_flow(side, (DATA / fixture).read_bytes(), path=path, content_type=content_type)
    assert priority(flow, side) == VIEW_PRIORITY
    assert VIEW_PRIORITY > 1  # mitmproxy's JSON view answers 1


def test_llm_api_path_without_tool_ids_is_still_offered():
    flow = http_flow("request", b'{"model": "m", "messages": []}', path="/v1/chat/completions")
    assert priority(flow, "request") == VIEW_PRIORITY


@pytest.mark.parametrize(
    ("fixture", "content_type"),
    [
        ("messages_response.json", "application/json"),
        ("responses_stream.sse", "text/event-stream"),
        ("chat_request.json", "text/plain"),  # content type says little; the body says more
    ],
)
def test_tool_ids_on_an_unknown_path_get_the_view(fixture, content_type):
    side = "request" if "request" in fixture else "response"
    body = (DATA / fixture).read_bytes()
    flow = http_flow(side, body, path="/gateway/llm", content_type=content_type)
    assert priority(flow, side) == VIEW_PRIORITY


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b'{"users": [{"id": "a:b"}]}', "application/json", 0),
        (b'data: {"n": 1}\n\n', "text/event-stream", 0),
        (b"<html>hello</html>", "text/html", -1),
        (b"\x89PNG\r\n\x1a\n", "image/png", -1),
        (b"", "application/json", -1),
    ],
)
def test_other_flows_are_left_to_other_views(body, content_type, expected):
    flow = http_flow("response", body, path="/api/users", content_type=content_type)
    assert priority(flow, "response") == expected


def test_non_llm_json_flow_shows_as_json(tctx):
    flow = http_flow("response", b'{"users": [{"id": "a:b"}]}', path="/api/users")
    assert render(flow, "response").view_name == "JSON"


def test_not_http_is_not_ours():
    metadata = contentviews.Metadata(flow=None, http_message=None)
    assert ToolIdView().render_priority(b'{"a": 1}', metadata) == -1
    with pytest.raises(ValueError, match="not an HTTP body"):
        ToolIdView().prettify(b'{"a": 1}', metadata)


def test_broken_json_on_llm_path_falls_back_to_raw(tctx):
    flow = http_flow("response", b'{"choices": [', path="/v1/chat/completions")
    result = render(flow, "response")
    assert result.view_name == "Raw"
    assert "failed to parse as toolid" in result.description


# --- registration --------------------------------------------------------------------------------


def test_registered_on_load_replaced_on_reload():
    """mitmproxy keys contentviews by name: a reloaded script's view replaces the old one (it
    has no public way to remove one, so a stale instance going away leaves it alone)."""
    first, second = ToolId(), ToolId()
    with taddons.context(first) as context:
        assert contentviews.registry["toolid"] is first.view
        assert "toolid" in contentviews.registry.available_views()
        context.master.addons.remove(first)  # done
        context.master.addons.add(second)  # the reloaded script
        assert contentviews.registry["toolid"] is second.view
        assert list(contentviews.registry).count("toolid") == 1
        first.done()  # a stale instance going away leaves the current view alone
        assert contentviews.registry["toolid"] is second.view


def test_pairing_problems_are_shown_at_their_positions(tctx):
    addon = ToolId()
    body = json.dumps(
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "call_a"}]},
                {"role": "user", "content": "and?"},
                {"role": "tool", "tool_call_id": "call_zzz"},
            ]
        }
    ).encode()
    with taddons.context(addon):
        flow = http_flow("request", body, path=PATHS[Api.CHAT])
        flow.live, flow.response = True, None
        addon.request(flow)
        flow.response = tflow.tresp(status_code=400, content=b'{"error": {"message": "x"}}')
        flow.response.headers["content-type"] = "application/json"
        request = render(flow, "request").text
        response = render(flow, "response").text
    assert request.splitlines()[0].startswith("# toolid pairing: missing-result call_a at ")
    assert line_with(request, '"id": "call_a"').endswith("· ⚠ missing-result")
    assert line_with(request, '"tool_call_id": "call_zzz"').endswith("· ⚠ orphan-result")
    # the upstream's 400 has its explanation beside it
    assert "# toolid: the request's history has pairing problems" in response
    assert "# toolid pairing: orphan-result call_zzz at messages[2].tool_call_id: OpenAI" in (
        response
    )


def test_calls_lacking_an_id_are_annotated(tctx):
    """A missing id is noted on its call's ``{`` line, a null or a number on its own line,
    with what toolid gives the call; the header counts them."""
    calls = [
        {"type": "function"},
        {"id": None, "type": "function"},
        {"id": 7, "type": "function"},
    ]
    body = json.dumps({"choices": [{"message": {"tool_calls": calls}}]}).encode()
    text = render(http_flow("response", body, path="/v1/chat/completions"), "response").text
    assert "3 calls without a usable id" in text.splitlines()[0]
    lines = text.splitlines()
    opening = lines[lines.index('        "tool_calls": [') + 1]
    assert opening.endswith('⚠ missing-id: no "id", which clients require ⟶ toolid mints one')
    assert line_with(text, '"id": null').endswith("⚠ missing-id: null ⟶ toolid mints one")
    assert line_with(text, '"id": 7').endswith("⚠ not-a-string: 7 ⟶ client tid1_-j7")


def test_a_repaired_request_shows_each_repair(tctx):
    """The request as sent (repaired): each repair above it, and marked where it is."""
    broken = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": "call_a", "type": "function"}]},
            {"role": "user", "content": "and?"},
        ],
    }
    repaired = repair_request(json.dumps(broken).encode(), path="/v1/chat/completions")
    flow = http_flow("request", repaired.content, path="/v1/chat/completions")
    flow.metadata["toolid"] = {
        "observe": False,
        "repairs": [repair.record() for repair in repaired.repairs],
    }
    text = render(flow, "request").text
    assert text.splitlines()[0].startswith(
        "# toolid repaired: missing-result call_a at messages[1].tool_calls[0].id: inserted"
    )
    lines = text.splitlines()
    result = next(n for n, line in enumerate(lines) if line.startswith('      "tool_call_id"'))
    assert lines[result - 2] == "    {  # ✎ repaired: missing-result inserted"
