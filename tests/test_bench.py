"""Smoke test of the benchmark harness: ``python -m bench --quick`` runs every case and
reports sane numbers. Nothing here looks at speed (PASS/MISS is information, not a test)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import client, workloads
from bench.proxy import Upstream
from bench.run import expected_case_ids

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for memory"),
]


def _positive(value: Any, what: str) -> None:
    assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (what, value)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for section in ("ISSUE #12", "SCALING", "PROXY", "LIBRARY", "MEMORY"):
        assert section in done.stdout, section
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _cases(report: dict[str, Any], group: str) -> list[dict[str, Any]]:
    return [case for case in report["cases"] if case["group"] == group]


def test_every_case_is_reported_once(report: dict[str, Any]) -> None:
    ids = [case["id"] for case in report["cases"]]
    assert sorted(ids) == sorted(expected_case_ids())
    assert report["meta"]["quick"] is True


def test_proxy_cases(report: dict[str, Any]) -> None:
    for case in _cases(report, "proxy"):
        streamed = case["events"] > 0
        reference = "plain_stream" if streamed else "plain"
        assert case["reference"] == reference, case["id"]
        assert set(case["targets"]) == {"direct", reference, "addon"}, case["id"]
        for name, metrics in case["targets"].items():
            where = f"{case['id']} via {name}"
            assert metrics["requests"] > 0, where
            for key in ("time_ms", "mean_ms", "p99_ms"):
                _positive(metrics[key]["median"], f"{where}: {key}")
            if streamed:
                _positive(metrics["events_per_s"]["median"], f"{where}: events/s")
        for key in ("ratio_time", "client_headroom"):
            _positive(case[key], f"{case['id']}: {key}")
        assert case["ratio_time_spread"]["min"] <= case["ratio_time"]
        assert case["ratio_time"] <= case["ratio_time_spread"]["max"]
        # The proxies delivered what they should (ids encoded/restored by the addon only).
        assert case["check"] and all(v == "ok" for v in case["check"].values()), case["check"]


def test_library_cases(report: dict[str, Any]) -> None:
    for case in _cases(report, "library"):
        for op, stats in case["ns"].items():
            _positive(stats["median"], f"{case['id']}: {op}")
        _positive(case["ratio_json_loads"], f"{case['id']}: ratio_json_loads")
        _positive(case["ratio_json_loads_spread"]["median"], f"{case['id']}: ratio spread")
        if case["kind"] == "pass":
            _positive(case["ratio_bytes_find"], f"{case['id']}: ratio_bytes_find")
        else:
            assert case["changes"] > 0, case["id"]
        if case["id"].startswith("lib.sse."):
            assert case["json_parses"] >= 0
            if case["kind"] == "pass":
                assert case["changes"] == 0, case["id"]


def test_scaling_case(report: dict[str, Any]) -> None:
    (case,) = _cases(report, "scaling")
    assert [row["calls"] for row in case["rows"]] == [50, 500, 5000]
    for row in case["rows"]:
        for key in ("proxy_toolid_ms", "proxy_plain_ms", "lib_toolid_ms", "lib_us_per_call"):
            _positive(row[key], f"scaling {row['calls']}: {key}")
    # Ratios of added times: reported, as a number or None (not measurable in a short run,
    # when the smallest history's added time is not above zero); never judged here.
    for key in ("proxy_per_call_growth", "lib_per_call_growth"):
        assert key in case, key
        assert case[key] is None or math.isfinite(case[key]), (key, case[key])


def test_memory_case(report: dict[str, Any]) -> None:
    (case,) = _cases(report, "memory")
    assert case["complete"]
    for size in ("small", "large"):
        run = case[size]
        for key in ("vm_hwm_kib", "peak_sampled_kib", "rss_before_kib", "mb_per_s"):
            _positive(run[key], f"memory {size}: {key}")
        assert run["received_bytes"] >= run["stream_bytes"]
    assert case["large"]["stream_bytes"] > case["small"]["stream_bytes"]


def test_every_target_is_judged(report: dict[str, Any]) -> None:
    targets = report["targets"]
    assert targets
    for target in targets:
        # None: not measurable in this run (see test_scaling_case); speed is never judged here
        assert target["pass"] is None or isinstance(target["pass"], bool)
        assert target["value"] is None or math.isfinite(target["value"])
        assert math.isfinite(target["limit"])
    # The five rows and the scaling, each judged once, in order.
    rows = [(t["row"], t["case"]) for t in targets if t["row"]]
    assert rows == [
        ("1", "proxy.sse.tools"),
        ("2", "proxy.resp.chat"),
        ("3", "proxy.followup.500"),
        ("4", "lib.restore.chat.500"),
        ("5", "lib.encode.chat.1MiB"),
        ("scaling", "scaling.followup"),
        ("scaling", "scaling.followup"),
    ]
    judged = {target["case"] for target in targets}
    assert "memory.sse" in judged


@pytest.mark.parametrize(
    ("flag", "reported"),
    [
        ("--no-orjson", "(JSON: json (standard library);"),  # a machine without the fast extra
        ("--no-native", "native accelerator: off)"),  # a machine without a C compiler
    ],
)
def test_without_an_accelerator(flag: str, reported: str) -> None:
    """``--no-orjson`` / ``--no-native`` measure what a machine without it gets."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "library", flag],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert reported in done.stdout


def test_proxies_are_measured_side_by_side() -> None:
    """``client.run_alternating``: one request to each target in turn, as many to each."""
    upstream = Upstream()
    try:
        body = workloads.first_request("chat")
        request = client.build_request("/v1/chat/completions?w=resp.chat", body)
        ports = [upstream.port, upstream.port]
        results = asyncio.run(
            client.run_alternating("127.0.0.1", ports, request, duration=0.05, min_requests=3)
        )
    finally:
        upstream.stop()
    assert len(results) == 2
    assert results[0].requests == results[1].requests >= 3
    assert all(len(result.latencies) == result.requests for result in results)
