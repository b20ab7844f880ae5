"""``toolid inspect``: every input kind, the table, the exit-code rule, malformed input."""

from __future__ import annotations

import base64
import io
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import io as mitmproxy_io
from mitmproxy.test import taddons, tflow

from addons.toolid_addon import ToolId
from toolid import annotate, encode, pairing
from toolid.cli import main
from toolid.inspect import InspectError, detect, scan
from toolid.positions import Api

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
CHAT_RAW = "functions.get_weather:0"
MESSAGES_RAW = "sessions_history:183"
RESPONSES_RAW = "get_weather:0#62786027996b4c40886cc7262bdf7382"
CHAT, MESSAGES, RESPONSES = CHAT_RAW, MESSAGES_RAW, RESPONSES_RAW
CHAT_ENC, MESSAGES_ENC, RESPONSES_ENC = encode(CHAT), encode(MESSAGES), encode(RESPONSES)
TOOL_CALL = "choices[0].message.tool_calls[0].id"


def inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """Run ``toolid inspect ARGV``; return the exit status, stdout rows (split), stderr."""
    status = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return status, [line.split() for line in out.splitlines()], err


HEADINGS = ["WHERE", "PATH", "API", "ID", "RAW", "CLIENT", "SAFE", "CALL", "REUSED", "PROBLEMS"]
CODES = set(pairing.CODES)


def rows_of(table: list[list[str]]) -> list[list[str]]:
    """The data rows (after the headings, before the summary), without the CLIENT, REUSED
    and PROBLEMS columns (see ``client_columns``, ``problem_columns``)."""
    return [row[:-3] + row[-2:] for row in full_rows(table)]


def _split(row: list[str]) -> tuple[list[str], str, str]:
    """A data row's words, its REUSED and its PROBLEMS cell (empty cells are no words)."""
    row = list(row)
    problems = row.pop() if set(row[-1].split(",")) <= CODES else ""
    reused = row.pop() if re.fullmatch(r"[0-9]+x", row[-1]) else ""
    return row, reused, problems


def data_rows(table: list[list[str]]) -> list[list[str]]:
    """The lines between the headings and the summary lines."""
    assert table[0] == HEADINGS
    return list(
        itertools.takewhile(
            lambda row: not (row[0][0].isdigit() or row[0].rstrip(":") in CODES), table[1:]
        )
    )


def full_rows(table: list[list[str]]) -> list[list[str]]:
    """The data rows with every column but REUSED and PROBLEMS."""
    return [_split(row)[0] for row in data_rows(table)]


def client_columns(table: list[list[str]]) -> list[tuple[str, str]]:
    """(CLIENT, REUSED) of each data row."""
    return [(words[-3], reused) for words, reused, _ in map(_split, data_rows(table))]


def problem_columns(table: list[list[str]]) -> list[str]:
    """PROBLEMS of each data row."""
    return [problems for _, _, problems in map(_split, data_rows(table))]


def problems_by_path(table: list[list[str]]) -> dict[str, str]:
    """PATH -> PROBLEMS of each data row."""
    return {words[-7]: problems for words, _, problems in map(_split, data_rows(table))}


def summary_lines(table: list[list[str]]) -> list[str]:
    """The lines after the data rows: the summary, then one per pairing code."""
    return [" ".join(row) for row in table[1 + len(data_rows(table)) :]]


# --- every input kind ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "status", "expected"),
    [
        (
            "chat_response.json",
            1,
            [["body", TOOL_CALL, "chat", CHAT, CHAT, "no", "no"]],
        ),
        (
            "chat_request.json",
            0,
            [
                ["body", "messages[1].tool_calls[0].id", "chat", CHAT_ENC, CHAT, "yes", "no"],
                ["body", "messages[2].tool_call_id", "chat", CHAT_ENC, CHAT, "yes", "no"],
            ],
        ),
        (
            "messages_response.json",
            1,
            [
                ["body", "content[1].id", "messages", MESSAGES, MESSAGES, "no", "no"],
                ["body", "content[2].id", "messages", "toolu_01AbC", "toolu_01AbC", "yes", "no"],
            ],
        ),
        (
            "responses_request.json",
            0,
            [
                ["body", "input[1].call_id", "responses", RESPONSES_ENC, RESPONSES, "yes", "no"],
                ["body", "input[1].id", "responses", "fc_1", "fc_1", "yes", "no"],
                ["body", "input[2].call_id", "responses", RESPONSES_ENC, RESPONSES, "yes", "no"],
            ],
        ),
    ],
)
def test_json_bodies(capsys, fixture, status, expected):
    code, table, err = inspect(capsys, str(DATA / fixture))
    assert (code, err) == (status, "")
    assert rows_of(table) == expected


def test_sse_captures(capsys):
    code, table, _ = inspect(capsys, str(DATA / "responses_stream.sse"))
    assert code == 1
    assert [row[:4] for row in rows_of(table)] == [
        ["event", "2", "(response.output_item.added)", "item.call_id"],
        ["event", "2", "(response.output_item.added)", "item.id"],
        ["event", "3", "(response.function_call_arguments.delta)", "item_id"],
        ["event", "4", "(response.completed)", "response.output[0].call_id"],
        ["event", "4", "(response.completed)", "response.output[0].id"],
    ]
    code, table, _ = inspect(capsys, str(DATA / "messages_stream.sse"))
    assert code == 1
    assert rows_of(table) == [
        [
            "event", "2", "(content_block_start)", "content_block.id", "messages",
            MESSAGES_RAW, MESSAGES_RAW, "no", "no",
        ]
    ]  # fmt: skip


def test_sse_after_toolid_conforms(capsys, tmp_path):
    encoded = (
        (DATA / "chat_stream.sse")
        .read_bytes()
        .replace(CHAT_RAW.encode(), encode(CHAT_RAW).encode())
    )
    path = tmp_path / "through-proxy.sse"
    path.write_bytes(encoded)
    code, table, _ = inspect(capsys, str(path))
    assert code == 0
    assert rows_of(table) == [
        [
            "event", "2", "choices[0].delta.tool_calls[0].id", "chat",
            encode(CHAT_RAW), CHAT_RAW, "yes", "no",
        ]
    ]  # fmt: skip
    assert summary_lines(table) == [
        "1 tool-call id position, 1 distinct id; all match [A-Za-z0-9_-]+"
    ]


def test_jsonl_transcript(capsys):
    code, table, _ = inspect(capsys, str(DATA / "transcript.jsonl"))
    assert code == 1
    assert [row[:6] for row in rows_of(table)] == [
        ["line", "2", "message.content[1].id", "messages", MESSAGES_RAW, MESSAGES_RAW],
        ["line", "3", "message.content[0].tool_use_id", "messages", MESSAGES_ENC, MESSAGES],
        ["line", "5", "tool_calls[0].id", "chat", CHAT_RAW, CHAT_RAW],
        ["line", "6", "tool_call_id", "chat", encode(CHAT_RAW), CHAT_RAW],
        ["line", "7", "payload.call_id", "responses", "call_Ab12", "call_Ab12"],
        ["line", "7", "payload.id", "responses", "fc_1", "fc_1"],
    ]  # fmt: skip
    assert len(summary_lines(table)) == 1  # no pairing problems
    assert summary_lines(table)[0].startswith("6 tool-call id positions, 4 distinct ids; 2 not")


def test_jsonl_of_whole_requests_and_chat_chunks(capsys, tmp_path):
    lines = [
        json.loads((DATA / "messages_request.json").read_bytes()),
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "call_x"}]}}]},
        [{"type": "function_call_output", "call_id": "call_y", "output": "ok"}],
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1  # the output of line 3 answers no call of the file
    assert problem_columns(table) == ["", "", "", "orphan-result"]
    assert [row[:4] for row in rows_of(table)] == [
        ["line", "1", "messages[1].content[0].id", "messages"],
        ["line", "1", "messages[2].content[0].tool_use_id", "messages"],
        ["line", "2", "choices[0].delta.tool_calls[0].id", "chat"],
        ["line", "3", "[0].call_id", "responses"],
    ]


def har(entries: list[dict[str, dict[str, object]]]) -> bytes:
    log = {"version": "1.2", "creator": {"name": "t"}, "entries": entries}
    return json.dumps({"log": log}).encode()


def har_entry(
    url: str, request: bytes | None, response: bytes | None, mime: str, b64: bool = False
) -> dict[str, dict[str, object]]:
    content: dict[str, str] = {"mimeType": mime}
    entry: dict[str, dict[str, object]] = {
        "request": {"method": "POST", "url": url, "headers": []},
        "response": {"status": 200, "headers": [], "content": content},
    }
    if request is not None:
        entry["request"]["postData"] = {"mimeType": "application/json", "text": request.decode()}
    if response is not None:
        if b64:
            content.update(text=base64.b64encode(response).decode(), encoding="base64")
        else:
            content["text"] = response.decode()
    return entry


def test_har(capsys, tmp_path):
    path = tmp_path / "capture.har"
    path.write_bytes(
        har(
            [
                har_entry(
                    "https://api.moonshot.ai/v1/chat/completions",
                    (DATA / "chat_request.json").read_bytes(),
                    (DATA / "chat_response.json").read_bytes(),
                    "application/json",
                ),
                har_entry(
                    "http://127.0.0.1:8000/v1/messages?beta=true",
                    None,
                    (DATA / "messages_stream.sse").read_bytes(),
                    "text/event-stream",
                    b64=True,
                ),
                har_entry("https://example.com/", None, b"<html>functions.x:1</html>", "text/html"),
            ]
        )
    )
    code, table, err = inspect(capsys, str(path))
    assert (code, err) == (1, "")
    rows = rows_of(table)
    assert [row[:5] for row in rows] == [
        ["entry", "1", "POST", "/v1/chat/completions", "request"],
        ["entry", "1", "POST", "/v1/chat/completions", "request"],
        ["entry", "1", "POST", "/v1/chat/completions", "response"],
        ["entry", "2", "POST", "/v1/messages", "response"],
    ]
    assert [row[5:] for row in rows[:3]] == [
        ["messages[1].tool_calls[0].id", "chat", CHAT_ENC, CHAT, "yes", "no"],
        ["messages[2].tool_call_id", "chat", CHAT_ENC, CHAT, "yes", "no"],
        [TOOL_CALL, "chat", CHAT, CHAT, "no", "no"],
    ]
    assert rows[3][5:] == [
        "event", "2", "(content_block_start)", "content_block.id", "messages",
        MESSAGES, MESSAGES, "no", "no",
    ]  # fmt: skip


def test_mitmproxy_flow_file(capsys, tmp_path):
    """Flows saved from a toolid session: rewritten bodies, and a streamed one not stored."""
    addon = ToolId()
    with taddons.context(addon):
        created = tflow.tflow(resp=True, live=True)
        created.request.method, created.request.path = "POST", "/v1/chat/completions"
        created.response.headers["content-type"] = "application/json"
        created.response.content = (DATA / "chat_response.json").read_bytes()
        addon.response(created)  # the client got the encoded id

        replay = tflow.tflow(live=True)
        replay.request.method, replay.request.path = "POST", "/v1/chat/completions"
        replay.request.headers["content-type"] = "application/json"
        replay.request.content = (DATA / "chat_request.json").read_bytes()
        addon.request(replay)  # restored: the raw id went upstream

        streamed = tflow.tflow(resp=True, live=True)
        streamed.request.method, streamed.request.path = "POST", "/v1/messages"
        streamed.response.headers["content-type"] = "text/event-stream"
        addon.responseheaders(streamed)
        streamed.response.stream((DATA / "messages_stream.sse").read_bytes())
        streamed.response.stream(b"")
        streamed.response.content = None
    path = tmp_path / "session.flows"
    with path.open("wb") as file:
        writer = mitmproxy_io.FlowWriter(file)
        for flow in (created, replay, tflow.ttcpflow(), streamed):
            flow.live = False
            writer.add(flow)

    code, table, err = inspect(capsys, str(path))
    assert (code, err) == (1, "")  # the restored request carries the raw id
    rows = rows_of(table)
    assert [row[:5] for row in rows] == [
        ["flow", "1", "POST", "/v1/chat/completions", "response"],
        ["flow", "2", "POST", "/v1/chat/completions", "request"],
        ["flow", "2", "POST", "/v1/chat/completions", "request"],
        ["flow", "4", "POST", "/v1/messages", "response"],
    ]
    assert [row[5:] for row in rows[:3]] == [
        [TOOL_CALL, "chat", CHAT_ENC, CHAT, "yes", "no"],
        ["messages[1].tool_calls[0].id", "chat", CHAT, CHAT, "no", "no"],
        ["messages[2].tool_call_id", "chat", CHAT, CHAT, "no", "no"],
    ]
    assert rows[3][5:] == [
        "(toolid", "record;", "body", "not", "stored)",
        "content_block.id", "messages", MESSAGES_ENC, MESSAGES, "yes", "no",
    ]  # fmt: skip


def test_stdin(capsys, monkeypatch):
    data = (DATA / "chat_request.json").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, table, _ = inspect(capsys, "-")
    assert code == 0
    assert len(rows_of(table)) == 2


def test_no_ids_at_all(capsys, tmp_path):
    path = tmp_path / "plain.json"
    path.write_text('{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    code, table, _ = inspect(capsys, str(path))
    assert code == 0
    assert table == [["no", "tool-call", "ids", "found"]]


@pytest.mark.parametrize(
    ("ids", "status"),
    [
        (["call_abc", "toolu_01", "tid1_a-2Eb", "chatcmpl-tool-1f"], 0),
        (["call_abc", "a.b"], 1),
        (["has space"], 1),
        ([""], 1),  # the empty id: strict APIs reject it too
        (["日本"], 1),
    ],
)
def test_exit_code_rule(capsys, tmp_path, ids, status):
    path = tmp_path / "ids.json"
    calls = {"role": "assistant", "tool_calls": [{"id": i} for i in ids]}
    results = [{"role": "tool", "tool_call_id": i} for i in ids]
    path.write_text(json.dumps({"messages": [calls, *results]}), encoding="utf-8")
    code, table, _ = inspect(capsys, str(path))
    assert code == status
    assert len(rows_of(table)) == 2 * len(ids)


def test_odd_ids_are_shown_on_one_line(capsys, tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"messages": [{"tool_call_id": "a\nb"}, {"tool_call_id": ""}]}))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert [row[3] for row in rows_of(table)] == ['"a\\nb"', '""']


# --- format detection and --format -----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b'{"a": 1}', "json"),
        (b'\xef\xbb\xbf  [{"a": 1}]', "json"),
        (b'{"a": 1}\n{"b": 2}\n', "jsonl"),
        (b'{"log": {"entries": []}}', "har"),
        (b"event: x\ndata: {}\n\n", "sse"),
        (b": comment\n\ndata: {}\n\n", "sse"),
        (b"123:abc,", "flows"),
    ],
)
def test_detect(data, fmt):
    assert detect(data) == fmt


def test_format_can_be_forced(capsys, tmp_path):
    path = tmp_path / "one-line.txt"
    path.write_bytes((DATA / "chat_response.json").read_bytes().replace(b"\n", b""))
    code, table, _ = inspect(capsys, "--format", "jsonl", str(path))
    assert code == 1
    assert rows_of(table)[0][:2] == ["line", "1"]


# --- unreadable input: exit 2, one clear line, no traceback ----------------------------------


def broken_flow_file(tmp_path: Path) -> bytes:
    buffer = io.BytesIO()
    mitmproxy_io.FlowWriter(buffer).add(tflow.tflow(resp=True))
    return buffer.getvalue()[:-40]


@pytest.mark.parametrize(
    ("data", "argv", "message"),
    [
        (b"", [], "the input is empty"),
        (b"  \n", [], "the input is empty"),
        (b'{"choices": [', [], "not valid JSON (Expecting value: line 1 column 14"),
        (b'{"a": 1}\n{"b": \n', [], "line 2: not valid JSON"),
        (b"\x00\x01\x02binary", [], "cannot tell the format"),
        (b"hello world", [], "name it with --format"),
        (b'{"a": 1}', ["--format", "har"], "not a HAR file (no log.entries list)"),
        (b'{"a": 1}', ["--format", "sse"], "no server-sent events"),
        (b"[1, 2", ["--format", "json"], "not valid JSON"),
        (b'{"a": 1}', ["--format", "flows"], "not a readable mitmproxy flow file"),
        (b"12:not a flow,", ["--format", "flows"], "not a readable mitmproxy flow file"),
        (None, [], "not a readable mitmproxy flow file"),  # truncated flow file
        (b'{"log": {"entries": [1]}}', [], "entry 1 is not an object"),
        (b'{"log": {"entries": [{"request": []}]}}', [], "entry 1: request is not an object"),
        (
            har(
                [har_entry("http://h/v1/messages", None, b"x", "text/event-stream", b64=True)]
            ).replace(b'"eA=="', b'"!!!"'),
            [],
            "entry 1: response content.text is not valid base64",
        ),
        (b"[" * 100_000 + b"]" * 100_000, [], "nested too deeply"),
    ],
)
def test_malformed_input(capsys, tmp_path, data, argv, message):
    path = tmp_path / "input"
    path.write_bytes(broken_flow_file(tmp_path) if data is None else data)
    code, table, err = inspect(capsys, *argv, str(path))
    assert code == 2
    assert table == []
    assert err.startswith(f"toolid inspect: {path}: ")
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_and_directory(capsys, tmp_path):
    code, _, err = inspect(capsys, str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read it (No such file or directory)" in err
    code, _, err = inspect(capsys, str(tmp_path))
    assert code == 2 and "cannot read it (Is a directory)" in err


def test_unknown_format_is_a_usage_error(capsys):
    assert main(["inspect", "--format", "xml", "f"]) == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err


def test_library_raises_a_one_line_error():
    with pytest.raises(InspectError, match="line 1: not valid JSON"):
        scan(b"{\n", "jsonl")


# --- the real command --------------------------------------------------------------------------


def test_as_a_process(tmp_path):
    path = tmp_path / "broken.flows"
    path.write_bytes(broken_flow_file(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolid", "inspect", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
            check=False,
        )

    broken = run(str(path))
    assert broken.returncode == 2
    assert broken.stdout == ""
    assert broken.stderr.startswith("toolid inspect: ") and broken.stderr.count("\n") == 1
    good = run(str(DATA / "messages_request.json"))
    assert (good.returncode, good.stderr) == (0, "")
    assert "tid1_sessions_history-3A183" in good.stdout


# --- the library underneath --------------------------------------------------------------------


def test_deep_scan_finds_elements_anywhere():
    document = {
        "turns": [
            {"request": json.loads((DATA / "responses_request.json").read_bytes())},
            {"event": {"type": "response.function_call_arguments.delta", "item_id": "fc_9"}},
            {"block": {"type": "tool_use", "id": "toolu_1", "caller": {"tool_id": "x.y"}}},
            {"note": {"id": "not-a-tool-call"}},
        ]
    }
    assert [(s.path, s.api.value, s.value) for s in annotate.deep_ids(document)] == [
        ("turns[0].request.input[1].call_id", "responses", encode(RESPONSES_RAW)),
        ("turns[0].request.input[1].id", "responses", "fc_1"),
        ("turns[0].request.input[2].call_id", "responses", encode(RESPONSES_RAW)),
        ("turns[1].event.item_id", "responses", "fc_9"),
        ("turns[2].block.id", "messages", "toolu_1"),
        ("turns[2].block.caller.tool_id", "messages", "x.y"),
    ]


def test_sightings_use_the_table_for_a_known_api():
    body = (DATA / "chat_request.json").read_bytes()
    found = annotate.sightings(body, "request")
    assert [(s.path, s.encoded, s.raw) for s in found] == [
        ("messages[1].tool_calls[0].id", True, CHAT_RAW),
        ("messages[2].tool_call_id", True, CHAT_RAW),
    ]
    assert annotate.sightings(body, "response") == []  # not a response shape
    assert annotate.sightings(b"<html>", "response") == []


# --- reused ids: the CLIENT and REUSED columns, --json ------------------------------------------

GLOB = "functions.Glob:0"


def reused_history() -> bytes:
    """A Messages history as a server that reuses ids left it (no toolid in between)."""
    messages: list[object] = [{"role": "user", "content": "list"}]
    for _ in range(3):
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": GLOB}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": GLOB}]})
    return json.dumps({"model": "m", "messages": messages}).encode()


def test_reused_ids_are_flagged_with_the_client_ids_toolid_gives(capsys, tmp_path):
    path = tmp_path / "history.json"
    path.write_bytes(reused_history())
    code, table, _ = inspect(capsys, str(path))
    assert code == 1  # Anthropic rejects a history that defines one id three times
    tags = [encode(GLOB, "safe", k) for k in (1, 2, 3)]
    assert client_columns(table) == [
        (tags[0], "3x"),
        (tags[0], ""),  # each result refers to the nearest call before it
        (tags[1], "3x"),
        (tags[1], ""),
        (tags[2], "3x"),
        (tags[2], ""),
    ]
    assert "1 defined by more than one call of a conversation" in summary_lines(table)[0]
    assert problem_columns(table) == ["", "", "duplicate-call", "", "duplicate-call", ""]


def test_one_call_in_many_events_is_not_reused(capsys):
    """A stream mentions each call in several events: still one definition."""
    _, table, _ = inspect(capsys, str(DATA / "responses_stream.sse"))
    assert [reused for _, reused in client_columns(table)] == [""] * 5
    assert {client for client, _ in client_columns(table)} == {RESPONSES_ENC, "fc_1"}


def test_json_output(capsys, tmp_path):
    path = tmp_path / "history.json"
    path.write_bytes(reused_history())
    assert main(["inspect", "--json", str(path)]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert rows[0] == {
        "where": "body",
        "path": "messages[1].content[0].id",
        "api": "messages",
        "role": "defines",
        "id": GLOB,
        "raw": GLOB,
        "client": encode(GLOB),
        "safe": False,
        "call": False,
        "defined": 3,
        "problems": [],
    }
    assert [row["role"] for row in rows] == ["defines", "refers"] * 3
    assert [row["client"] for row in rows][4] == encode(GLOB, "safe", 3)
    duplicate = ["duplicate-call"]
    assert [row["problems"] for row in rows] == [[], [], duplicate, [], duplicate, []]


def test_a_history_through_toolid_conforms(capsys, tmp_path):
    """What the client holds after three turns through toolid: unique, safe, unchanged."""
    history = reused_history()
    for k in (1, 2, 3):  # each call and its result
        history = history.replace(f'"{GLOB}"'.encode(), f'"{encode(GLOB, "safe", k)}"'.encode(), 2)
    path = tmp_path / "history.json"
    path.write_bytes(history)
    code, table, _ = inspect(capsys, str(path))
    assert code == 0
    tags = [encode(GLOB, "safe", k) for k in (1, 2, 3)]
    assert client_columns(table) == [(tag, "") for tag in tags for _ in range(2)]


# --- pairing: a PROBLEMS column, --json problems, one summary line per code ------------------


def broken_chat() -> dict[str, object]:
    """A Chat history with each pairing problem once."""
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"id": "call_a"}, {"id": "call_b"}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "r"},
            {"role": "tool", "tool_call_id": "call_zzz", "content": "r"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "tool_calls": [{"id": ""}, {"id": "call_x|fc_y"}]},
            {"role": "tool", "tool_call_id": "", "content": "r"},
            {"role": "tool", "tool_call_id": "call_x|fc_y", "content": "r"},
            {"role": "assistant", "tool_calls": [{"id": "call_a"}]},
            {"role": "tool", "tool_call_id": "call_a", "content": "r"},
        ],
    }


BROKEN_CHAT_PROBLEMS = [
    "",  # call_a
    "missing-result",  # call_b
    "",
    "orphan-result",  # call_zzz
    "empty-id",
    "composite-id",
    "empty-id",
    "composite-id",
    "duplicate-call",  # call_a again
    "",
]


BROKEN_CHAT_BY_PATH = {
    "messages[1].tool_calls[0].id": "",
    "messages[1].tool_calls[1].id": "missing-result",
    "messages[2].tool_call_id": "",
    "messages[3].tool_call_id": "orphan-result",
    "messages[5].tool_calls[0].id": "empty-id",
    "messages[5].tool_calls[1].id": "composite-id",
    "messages[6].tool_call_id": "empty-id",
    "messages[7].tool_call_id": "composite-id",
    "messages[8].tool_calls[0].id": "duplicate-call",
    "messages[9].tool_call_id": "",
}


def test_each_pairing_code_in_a_json_body(capsys, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken_chat()))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problem_columns(table) == BROKEN_CHAT_PROBLEMS
    lines = summary_lines(table)
    assert lines[1:] == [
        "orphan-result: 1, first call_zzz at body messages[3].tool_call_id: "
        "OpenAI Chat Completions answers \"Invalid parameter: messages with role 'tool' "
        "must be a response to a preceeding message with 'tool_calls'.\"",
        "missing-result: 1, first call_b at body messages[1].tool_calls[1].id: "
        "OpenAI Chat Completions answers \"An assistant message with 'tool_calls' must be "
        "followed by tool messages responding to each 'tool_call_id'. The following "
        'tool_call_ids did not have response messages: call_b"',
        'empty-id: 2, first "" at body messages[5].tool_calls[0].id (and 1 more): '
        "OpenAI Chat Completions answers \"Invalid 'messages[5].tool_calls[0].id': empty "
        'string. Expected a string with minimum length 1, but got an empty string instead."',
        "duplicate-call: 1, first call_a at body messages[8].tool_calls[0].id: "
        "OpenAI Chat Completions: two calls carry one id, so their results cannot be told "
        "apart: strict servers reject the request, others answer one call twice",
        "composite-id: 2, first call_x|fc_y at body messages[5].tool_calls[1].id (and 1 more): "
        "OpenAI Chat Completions: the id joins two ids ('call_...|fc_...') or holds "
        "whitespace: strict APIs accept [A-Za-z0-9_-]+ only",
    ]


def test_pairing_problems_in_json_output(capsys, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken_chat()))
    assert main(["inspect", "--json", str(path)]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [",".join(row["problems"]) for row in rows] == BROKEN_CHAT_PROBLEMS
    by_path = {row["path"]: row for row in rows}
    assert by_path["messages[3].tool_call_id"]["role"] == "refers"  # orphan: on the result
    assert by_path["messages[1].tool_calls[1].id"]["role"] == "defines"  # missing: on the call


def test_the_issue_example_exits_1_and_names_each(capsys, tmp_path):
    """A result for an unknown call, a call without a result, an empty id."""
    path = tmp_path / "history.json"
    path.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"id": "call_1"}]},
                    {"role": "tool", "tool_call_id": "call_9"},
                    {"role": "user", "content": "and?"},
                    {"role": "assistant", "tool_calls": [{"id": ""}]},
                ]
            }
        )
    )
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problem_columns(table) == ["missing-result", "orphan-result", "empty-id"]
    assert [line.split(":")[0] for line in summary_lines(table)[1:]] == [
        "orphan-result",
        "missing-result",
        "empty-id",
    ]


@pytest.mark.parametrize("fixture", ["chat_request.json", "messages_request.json"])
def test_a_clean_history_stays_silent(capsys, fixture):
    code, table, _ = inspect(capsys, str(DATA / fixture))
    assert code == 0
    assert set(problem_columns(table)) == {""}
    assert len(summary_lines(table)) == 1


def test_pairing_across_a_claude_code_transcript(capsys, tmp_path):
    """Lines are turns: a call interrupted before its result, a result whose call is gone."""
    lines = [
        {"type": "user", "message": {"role": "user", "content": "go"}},
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1"}]},
        },
        {"type": "user", "message": {"role": "user", "content": "[Request interrupted]"}},
        {"type": "summary", "summary": "compacted"},
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        },
        {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]},
        },
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert [row[:3] for row in rows_of(table)] == [
        ["line", "2", "message.content[0].id"],
        ["line", "6", "message.content[0].tool_use_id"],
    ]
    assert problem_columns(table) == ["missing-result", "orphan-result"]
    assert (
        "toolu_1 at line 2 message.content[0].id: Anthropic Messages answers"
        in (summary_lines(table)[2])
    )


def test_pairing_across_a_codex_rollout(capsys, tmp_path):
    """Responses items, one per line: an output whose call was compacted away."""
    items = [
        {"type": "message", "role": "user", "content": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        {"type": "function_call_output", "call_id": "call_gone", "output": "ok"},
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text(
        "".join(json.dumps({"type": "response_item", "payload": item}) + "\n" for item in items)
    )
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problem_columns(table) == ["", "", "", "orphan-result"]
    assert summary_lines(table)[1].endswith(
        'OpenAI Responses answers "No tool call found for function call output with call_id '
        'call_gone."'
    )


def test_pairing_in_a_saved_conversation_array(capsys, tmp_path):
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(broken_chat()["messages"]))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problem_columns(table) == BROKEN_CHAT_PROBLEMS
    assert rows_of(table)[3][1] == "[3].tool_call_id"


def test_pairing_in_an_event_stream(capsys, tmp_path):
    """A stream's own ids: empty, composite, and one id for two calls (its several mentions of
    one call are one call)."""
    blocks = ["toolu_1", "toolu_1", "", "a b"]
    events = [
        {"type": "message_start", "message": {"content": []}},
        *(
            {"type": "content_block_start", "index": i, "content_block": tool_use}
            for i, tool_use in enumerate({"type": "tool_use", "id": b} for b in blocks)
        ),
    ]
    path = tmp_path / "stream.sse"
    path.write_text("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problem_columns(table) == ["", "duplicate-call", "empty-id", "composite-id"]
    code, table, _ = inspect(capsys, str(DATA / "responses_stream.sse"))
    assert set(problem_columns(table)) == {""}


def test_pairing_in_a_har_request(capsys, tmp_path):
    path = tmp_path / "capture.har"
    body = json.dumps(broken_chat()).encode()
    path.write_bytes(
        har(
            [
                har_entry(
                    "https://api.openai.com/v1/chat/completions",
                    body,
                    (DATA / "chat_response.json").read_bytes(),
                    "application/json",
                )
            ]
        )
    )
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problems_by_path(table) == BROKEN_CHAT_BY_PATH | {TOOL_CALL: ""}
    assert "first call_zzz at entry 1 POST /v1/chat/completions request" in summary_lines(table)[1]


def test_pairing_in_a_flow_file(capsys, tmp_path):
    addon = ToolId()
    with taddons.context(addon):
        flow = tflow.tflow(resp=True, live=True)
        flow.request.method, flow.request.path = "POST", "/v1/chat/completions"
        flow.request.headers["content-type"] = "application/json"
        flow.request.content = json.dumps(broken_chat()).encode()
        addon.request(flow)
    path = tmp_path / "session.flows"
    with path.open("wb") as file:
        flow.live = False
        mitmproxy_io.FlowWriter(file).add(flow)
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert problems_by_path(table) == BROKEN_CHAT_BY_PATH
    assert "first call_zzz at flow 1 POST /v1/chat/completions request" in summary_lines(table)[1]


# --- calls with no usable id ------------------------------------------------------------------

LACKING_CALLS = [
    {"type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": None, "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": 7, "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "call_ok", "type": "function", "function": {"name": "f", "arguments": "{}"}},
]


def test_a_saved_response_names_calls_lacking_an_id(capsys, tmp_path):
    """A missing or null id is ``missing-id``, a number ``not-a-string``; each row shows what
    the call holds and the client id toolid gives it, in document order."""
    path = tmp_path / "answer.json"
    message = {"role": "assistant", "tool_calls": LACKING_CALLS}
    path.write_text(json.dumps({"choices": [{"index": 0, "message": message}]}))
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    calls = [f"choices[0].message.tool_calls[{i}].id" for i in range(4)]
    assert [(row[1], row[3], row[4]) for row in full_rows(table)] == [
        (calls[0], "(none)", "(none)"),
        (calls[1], "null", "null"),
        (calls[2], "7", "7"),
        (calls[3], "call_ok", "call_ok"),
    ]
    assert [client for client, _ in client_columns(table)] == [
        "tid1_-n",
        "tid1_-n-_2",
        "tid1_-j7",
        "call_ok",
    ]
    assert problem_columns(table) == ["missing-id", "missing-id", "not-a-string", ""]
    lines = summary_lines(table)
    assert lines[1].startswith(f"missing-id: 2, first (none) at body {calls[0]} (and 1 more): ")
    assert lines[2].startswith(f"not-a-string: 1, first 7 at body {calls[2]}: ")


def test_a_chat_stream_names_a_call_lacking_its_id_on_its_first_chunk_only(capsys, tmp_path):
    """Later chunks of a Chat call carry no id (the API's way): only a first chunk without
    one is named."""

    def chunk(call: dict[str, object]) -> str:
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})

    first = {"index": 0, "type": "function", "function": {"name": "f", "arguments": ""}}
    later = {"index": 0, "function": {"arguments": "{}"}}
    path = tmp_path / "stream.sse"
    path.write_text("\n\n".join([chunk(first), chunk(later), "data: [DONE]"]) + "\n\n")
    code, table, _ = inspect(capsys, str(path))
    assert code == 1
    assert [row[:2] for row in full_rows(table)] == [["event", "1"]]  # not event 2
    assert problem_columns(table) == ["missing-id"]
    assert client_columns(table) == [("tid1_-n", "")]


# --- --repair ---------------------------------------------------------------------------------


def _broken_history(tmp_path: Path, *messages: dict[str, Any]) -> Path:
    """A Chat request whose history is ``messages``, in a file."""
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"model": "m", "messages": list(messages)}))
    return path


GO = {"role": "user", "content": "go"}
ORPHAN_RESULT = {"role": "tool", "tool_call_id": "zzz", "content": "r"}


def test_repair_prints_each_repair_and_the_repaired_body(capsys, tmp_path):
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]}
    path = _broken_history(tmp_path, GO, call, {"role": "user", "content": "and?"}, ORPHAN_RESULT)
    code, _, _ = inspect(capsys, "--repair", str(path))
    assert code == 1  # the file as it is
    status = main(["inspect", "--repair", str(path)])
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    start = out.index("body: repaired:")
    assert out[start + 1].startswith(
        "  missing-result c1 at messages[1].tool_calls[0].id: inserted"
    )
    assert (
        out[start + 2]
        == "  orphan-result zzz at messages[3].tool_call_id: kept as text messages[3]"
    )
    repaired = json.loads(out[start + 3])
    assert [m["role"] for m in repaired["messages"]] == [
        "user",
        "assistant",
        "tool",
        "user",
        "user",
    ]
    assert pairing.check(repaired, Api.CHAT) == []


def test_repair_as_json(capsys, tmp_path):
    path = _broken_history(tmp_path, GO, ORPHAN_RESULT)
    main(["inspect", "--repair", "--json", str(path)])
    out = json.loads(capsys.readouterr().out)
    assert [row["path"] for row in out["ids"]] == ["messages[1].tool_call_id"]
    [one] = out["repaired"]
    assert (one["where"], one["refused"]) == ("body", "")
    assert [r["done"] for r in one["repairs"]] == ["kept as text"]
    assert json.loads(one["body"])["messages"][1]["role"] == "user"


def test_repair_of_a_clean_request_prints_nothing_more(capsys):
    main(["inspect", "--repair", str(DATA / "chat_request.json")])
    assert "repaired" not in capsys.readouterr().out


def test_repair_of_a_transcript_keeps_one_message_per_line(capsys, tmp_path):
    """A JSONL transcript of one API's messages is repaired as one history; every line not
    repaired comes out as it was."""
    lines = [
        '{"role": "user", "content": "go"}',
        '{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "f"}]}',
        '{"role": "user", "content": "interrupted"}',
        '{"role": "assistant", "content": "ok"}',
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n")
    main(["inspect", "--repair", str(path)])
    out = capsys.readouterr().out.splitlines()
    start = out.index("transcript: repaired:")
    assert out[start + 1].startswith("  missing-result toolu_a at messages[1].content[0].id")
    repaired = out[start + 2 :]
    assert [repaired[0], repaired[1], repaired[3]] == [lines[0], lines[1], lines[3]]
    assert json.loads(repaired[2])["content"][0]["tool_use_id"] == "toolu_a"
    history = {"messages": [json.loads(line) for line in repaired]}
    assert pairing.check(history, Api.MESSAGES) == []
