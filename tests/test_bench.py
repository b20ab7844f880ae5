"""Smoke test of the benchmark harness: ``python -m bench --quick`` runs every case, in each
mode it can (the native accelerator when it is built, and pure Python), and reports every row
with a number, or None where it is not measurable in this run, and a verdict.

Nothing here depends on the machine's speed: no ratio is compared with its target, no
difference of times is expected to be positive (PASS/MISS is information, not a test).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mitmproxy.test import tflow

import toolid
from bench import client, workloads
from bench.floor_addon import Floor
from bench.profile import ROOTS, shares, stacks
from bench.proxy import Upstream
from bench.run import MODES, TARGET_ROWS, expected_case_ids

REPO_ROOT = Path(__file__).resolve().parents[1]
#: A quick run takes seconds; on a busy 2-core machine, several times that.
RUN_TIMEOUT = 240

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(RUN_TIMEOUT + 60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for memory"),
]


def _positive(value: Any, what: str) -> None:
    assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (what, value)


def _number_or_none(value: Any, what: str) -> None:
    assert value is None or (isinstance(value, int | float) and math.isfinite(value)), (
        what,
        value,
    )


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """The JSON report and the printed table of one quick run."""
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    done = _bench("--json", str(out))
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    data: dict[str, Any] = json.loads(out.read_text())
    return data, done.stdout


@pytest.fixture(scope="module")
def report(run: tuple[dict[str, Any], str]) -> dict[str, Any]:
    return run[0]


def _measured(report: dict[str, Any]) -> list[str]:
    return [mode for mode in MODES if report["meta"]["modes"][mode] == "measured"]


def _cases(report: dict[str, Any], group: str) -> list[dict[str, Any]]:
    return [case for case in report["cases"] if case["group"] == group]


def test_both_modes_when_the_accelerator_is_built(report: dict[str, Any]) -> None:
    status = report["meta"]["modes"]
    assert status["pure"] == "measured"
    # The bench inherits this process's environment; whether the accelerator is built is
    # asked of a fresh toolid (a test in this process may have switched it off for a while).
    built = subprocess.run(
        [sys.executable, "-c", "from toolid import native; print(native.accelerated())"],
        cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "TOOLID_NATIVE"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if os.environ.get("TOOLID_NATIVE") == "off":
        assert status["native"] == "off (TOOLID_NATIVE=off)"
    elif built == "True":
        assert status["native"] == "measured"
    else:
        assert status["native"] == "not built"


def test_the_table_has_every_section(run: tuple[dict[str, Any], str]) -> None:
    report, table = run
    for section in ("TARGETS:", "SCALING:", "PROXY:", "LIBRARY (", "MEMORY ("):
        assert section in table, section
    for mode in MODES:
        # Each mode's column in the TARGETS table, and its tally (or why it was not judged).
        assert f"TARGETS, {'native accelerator' if mode == 'native' else 'pure Python'}: " in table
    if report["meta"]["modes"]["native"] == "not built":
        assert "native accelerator: not built" in table


def test_every_case_is_reported_once_per_mode(report: dict[str, Any]) -> None:
    assert report["meta"]["quick"] is True
    for mode in MODES:
        ids = [case["id"] for case in report["cases"] if case["mode"] == mode]
        if mode in _measured(report):
            assert sorted(ids) == sorted(expected_case_ids()), mode
        else:
            assert ids == [], mode


def test_proxy_cases(report: dict[str, Any]) -> None:
    for case in _cases(report, "proxy"):
        where = f"{case['id']} ({case['mode']})"
        streamed = case["events"] > 0
        reference = "plain_stream" if streamed else "plain"
        assert case["reference"] == reference, where
        assert set(case["targets"]) == {"direct", reference, "addon"}, where
        for name, metrics in case["targets"].items():
            assert metrics["requests"] > 0, f"{where} via {name}"
            for key in ("time_ms", "mean_ms", "p99_ms"):
                _positive(metrics[key]["median"], f"{where} via {name}: {key}")
            if streamed:
                _positive(metrics["events_per_s"]["median"], f"{where} via {name}: events/s")
                _positive(metrics["first_event_ms"]["median"], f"{where} via {name}: 1st event")
        for key in ("ratio_time", "client_headroom"):
            _positive(case[key], f"{where}: {key}")
        _number_or_none(case["added_ms"], f"{where}: added_ms")  # either sign
        assert case["ratio_time_spread"]["min"] <= case["ratio_time"]
        assert case["ratio_time"] <= case["ratio_time_spread"]["max"]
        if streamed:
            for key in ("first_event_ms", "first_event_ref_ms", "first_event_limit_ms"):
                _positive(case[key], f"{where}: {key}")
            _number_or_none(case["first_event_added_ms"], f"{where}: first_event_added_ms")
        # The proxies delivered what they should (ids encoded/restored by the addon only).
        assert set(case["check"]) == {reference, "addon"}, where
        assert all(v == "ok" for v in case["check"].values()), (where, case["check"])


def test_the_reference_is_shared_by_the_modes(report: dict[str, Any]) -> None:
    """Both modes are measured side by side against one reference measurement."""
    if len(_measured(report)) < 2:
        pytest.skip("one mode only in this run")
    by_mode = {
        mode: {c["id"]: c for c in _cases(report, "proxy") if c["mode"] == mode} for mode in MODES
    }
    for case_id, case in by_mode["native"].items():
        other = by_mode["pure"][case_id]
        ref = case["reference"]
        assert case["targets"][ref] == other["targets"][ref], case_id


def test_library_cases(report: dict[str, Any]) -> None:
    for case in _cases(report, "library"):
        where = f"{case['id']} ({case['mode']})"
        for op, stats in case["ns"].items():
            _positive(stats["median"], f"{where}: {op}")
        _positive(case["ratio_json_loads"], f"{where}: ratio_json_loads")
        _positive(case["ratio_json_loads_spread"]["median"], f"{where}: ratio spread")
        if case["kind"] == "pass":
            _positive(case["ratio_bytes_find"], f"{where}: ratio_bytes_find")
        else:
            assert case["changes"] > 0, where
        if case["id"].startswith("lib.sse."):
            assert isinstance(case["json_parses"], int) and case["json_parses"] >= 0, where
            if case["kind"] == "pass":
                assert case["changes"] == 0, where


def test_scaling_case(report: dict[str, Any]) -> None:
    scaling = _cases(report, "scaling")
    assert [case["mode"] for case in scaling] == _measured(report)
    for case in scaling:
        assert [row["calls"] for row in case["rows"]] == [50, 500, 5000]
        for row in case["rows"]:
            for key in ("proxy_toolid_ms", "proxy_plain_ms", "lib_toolid_ms", "lib_us_per_call"):
                _positive(row[key], f"scaling {case['mode']} {row['calls']}: {key}")
        # Ratios of added times: reported, as a number or None (not measurable in a short
        # run, when the smallest history's added time is not above zero); never judged here.
        for key in ("proxy_per_call_growth", "lib_per_call_growth"):
            assert key in case, key
            _number_or_none(case[key], f"scaling {case['mode']}: {key}")


def test_memory_case(report: dict[str, Any]) -> None:
    memory = _cases(report, "memory")
    assert [case["mode"] for case in memory] == _measured(report)
    for case in memory:
        assert case["complete"], case["mode"]
        for size in ("small", "large"):
            run = case[size]
            for key in ("vm_hwm_kib", "peak_sampled_kib", "rss_before_kib", "mb_per_s"):
                _positive(run[key], f"memory {case['mode']} {size}: {key}")
            assert run["received_bytes"] >= run["stream_bytes"]
        assert case["large"]["stream_bytes"] > case["small"]["stream_bytes"]
        _number_or_none(case["growth_mib"], f"memory {case['mode']}: growth")  # either sign


def test_every_target_is_judged(report: dict[str, Any]) -> None:
    targets = report["targets"]
    assert targets
    for target in targets:
        # A number or None (not measurable in this run), and a verdict (None with None);
        # whether it passes depends on the machine, and is never judged here.
        _number_or_none(target["value"], target["case"])
        assert target["pass"] is None or isinstance(target["pass"], bool)
        assert (target["pass"] is None) == (target["value"] is None), target
        assert math.isfinite(target["limit"])
    # Every row of the TARGETS table and the scaling, judged once per mode measured, in order.
    for mode in MODES:
        rows = [(t["row"], t["case"]) for t in targets if t["row"] and t["mode"] == mode]
        if mode not in _measured(report):
            assert rows == [], mode
            continue
        assert rows == [
            *((spec.row, spec.case) for spec in TARGET_ROWS),
            ("scaling", "scaling.followup"),
            ("scaling", "scaling.followup"),
        ], mode
        judged = {t["case"] for t in targets if t["mode"] == mode}
        assert "memory.sse" in judged


@pytest.mark.parametrize(
    ("flag", "reported"),
    [
        ("--no-orjson", "(JSON: json (standard library);"),  # a machine without the fast extra
        ("--no-native", "native accelerator: off (TOOLID_NATIVE=off)"),  # without a C compiler
    ],
)
def test_without_an_accelerator(flag: str, reported: str) -> None:
    """``--no-orjson`` / ``--no-native`` measure what a machine without it gets."""
    done = _bench("--only", "library", flag)
    assert done.returncode == 0, done.stderr
    assert reported in done.stdout
    if flag == "--no-native":
        assert "TARGETS, native accelerator: off (TOOLID_NATIVE=off) (not judged)" in done.stdout


def test_the_responses_stream_names_a_call_in_every_event() -> None:
    """``sse.responses``: every event but the last names its call by the item's id, a call
    every ``CALL_EVENTS`` events, and toolid encodes every one of those ids."""
    events = workloads.responses_call_events(workloads.STREAM_EVENTS)
    assert len(events) == workloads.STREAM_EVENTS
    body = b"".join(workloads.canned("sse.responses").chunks)
    assert body == b"".join(events)
    for n, event in enumerate(events[:-1]):
        item = workloads.patch_item_id(n // workloads.CALL_EVENTS).encode()
        assert event.count(b'"' + item + b'"') == 1, event
    assert b"response.completed" in events[-1]
    stream = toolid.ResponseStream(path=workloads.PATHS["responses"])
    out = b"".join(stream.feed(piece).body for piece in workloads.pieces(body, 16 * 1024))
    out += stream.finish().body
    calls = -(-(workloads.STREAM_EVENTS - 1) // workloads.CALL_EVENTS)
    for k in range(calls):
        raw, client = workloads.patch_item_id(k), workloads.patch_client_item_id(k)
        assert f'"{raw}"'.encode() not in out and out.count(f'"{client}"'.encode()) >= 48, k


def test_the_client_reads_a_chunked_response_split_anywhere() -> None:
    """``client.Connection`` de-chunks a response whatever its reads' boundaries (a chunk-size
    line's CRLF may straddle two)."""
    pieces = (b"data", b': {"id": "a"}\n\n')
    response = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces
    )
    response += b"0\r\n\r\n"

    async def read(cuts: tuple[int, ...]) -> client.Response:
        connection = client.Connection()
        connection._reset(keep=True)
        waiter = connection.waiter = asyncio.get_running_loop().create_future()
        for start, end in itertools.pairwise((0, *cuts, len(response))):
            connection.data_received(response[start:end])
        return await waiter

    for cut in range(1, len(response)):
        for second in (cut + 1, cut + 2):
            got = asyncio.run(read((cut, second) if second < len(response) else (cut,)))
            assert (got.body, got.chunks) == (b'data: {"id": "a"}\n\n', 2), cut


def test_proxies_are_measured_side_by_side() -> None:
    """``client.run_alternating``: one request to each target in turn, as many to each."""
    upstream = Upstream()
    try:
        body = workloads.first_request("chat", stream=True)
        request = client.build_request("/v1/chat/completions?w=sse.first", body)
        ports = [upstream.port] * 3
        results = asyncio.run(
            client.run_alternating("127.0.0.1", ports, request, duration=0.05, min_requests=3)
        )
    finally:
        upstream.stop()
    assert len(results) == 3
    assert results[0].requests == results[1].requests == results[2].requests >= 3
    for result in results:
        assert len(result.latencies) == result.requests
        # Every response's first byte came, and no later than its last.
        assert len(result.first_bytes) == result.requests
        pairs = zip(result.first_bytes, result.latencies, strict=True)
        assert all(0 <= first <= whole for first, whole in pairs)


# --- bench.profile: reading perf's samples ----------------------------------------------------

PERF_SCRIPT = """
\t7f01 _PyEval_EvalFrameDefault (/usr/lib/libpython3.13.so)
\t7f02 py::decide:/work/toolid/decide.py (/tmp/jitted-1-2.so)
\t7f03 py::StreamRewriter._frame:/work/toolid/stream.py (/tmp/jitted-1-3.so)
\t7f04 py::ToolId._stream_callable.<locals>.function:/work/addons/toolid_addon.py (/tmp/j.so)
\t7f05 py::BaseEventLoop._run_once:/usr/lib/asyncio/base_events.py (/tmp/j.so)

\t7f06 memmem (/usr/lib/libc.so.6)
\t7f07 py::StreamRewriter._frame:/work/toolid/stream.py (/tmp/jitted-1-3.so)
\t7f08 py::ToolId._stream_callable.<locals>.function:/work/addons/toolid_addon.py (/tmp/j.so)

\t7f09 py::BaseEventLoop._run_once:/usr/lib/asyncio/base_events.py (/tmp/j.so)
"""


def test_profile_reads_each_sample_innermost_first() -> None:
    samples = list(stacks(PERF_SCRIPT.splitlines()))
    assert [len(frames) for frames in samples] == [5, 3, 1]
    assert samples[1][0] == "memmem"


def test_profile_shares_count_the_samples_inside_the_root_only() -> None:
    count, own, within = shares(stacks(PERF_SCRIPT.splitlines()), ROOTS["stream"])
    assert count == 2  # the event loop's own sample is outside the hook
    assert own == {"decide": 1, "StreamRewriter._frame": 1}
    assert within["StreamRewriter._frame"] == 2 and "BaseEventLoop._run_once" not in within


# --- bench.sidebyside: versions of toolid against each other -----------------------------------


def _sidebyside(*args: str) -> list[str]:
    """The lines ``python -m bench.sidebyside ARGS`` prints, its proxies run for 0.2 s each."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.sidebyside", *args, "--seconds", "0.2"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    )
    return done.stdout.splitlines()


def test_sidebyside_runs_a_tree_against_plain_mitmdump() -> None:
    """This checkout as the one tree: a median, a ratio and the added time for it (their values
    are the machine's business)."""
    lines = _sidebyside("resp.chat", str(REPO_ROOT))
    assert lines[0].startswith("resp.chat: plain mitmdump ")
    assert lines[1].startswith(f"  {REPO_ROOT}: ") and "x, " in lines[1], lines


def test_sidebyside_floor_is_one_more_proxy() -> None:
    """``--floor``: after the trees, the pass-through stream callable's line, on a stream."""
    lines = _sidebyside("sse.text", str(REPO_ROOT), "--floor")
    assert lines[1].startswith(f"  {REPO_ROOT}: "), lines
    assert lines[2].startswith("  floor (a pass-through stream callable): "), lines
    assert "x, " in lines[2], lines


def test_floor_addon_streams_event_streams_as_they_come() -> None:
    """The floor's callable passes each piece as it came, and only streams toolid would stream
    (``framing_of``) get one."""
    floor = Floor()
    flow = tflow.tflow(resp=True)
    flow.response.headers["content-type"] = "text/event-stream"
    floor.responseheaders(flow)
    assert "content-length" not in flow.response.headers
    assert callable(flow.response.stream) and flow.response.stream(b"data: 1\n") == b"data: 1\n"
    buffered = tflow.tflow(resp=True)
    floor.responseheaders(buffered)
    assert buffered.response.stream is False


def test_sidebyside_refuses_a_directory_without_the_addon(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.sidebyside", "resp.chat", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "holds no addons/toolid_addon.py" in done.stderr


def test_soak_reports_rss_growth_beside_plain_mitmdump(tmp_path: Path) -> None:
    """``bench.soak``, a few seconds of it: both processes served requests with new ids,
    none failed, and each has a growth figure (what it is, is not a test)."""
    out = tmp_path / "soak.json"
    short = ["--seconds", "3", "--warmup", "1", "--connections", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.soak", *short, "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    report = json.loads(out.read_text())
    assert set(report["processes"]) == {"mitmdump", "toolid"}
    for name, row in report["processes"].items():
        _positive(row["requests"], f"{name} requests")
        assert row["failed"] == 0, (name, row["failed"])
        _number_or_none(row["growth_mib_per_10k"], f"{name} growth")
        _positive(row["rss_last_mib"], f"{name} RSS")
    assert "growth / 10k requests" in done.stdout
