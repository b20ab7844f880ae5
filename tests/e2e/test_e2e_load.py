"""Load: 64 concurrent agents through one real mitmdump with the toolid addon, on loopback.

Each agent is an asyncio task with its own ``httpx.AsyncClient`` (its own connection to
the proxy) that runs two-turn tool loops back to back for a bounded time, cycling through
Chat Completions, Responses and Messages, streamed and buffered. Every loop has its own
non-conforming raw ids, so a mix-up between flows would show.

After the run (so that checking costs the proxy nothing), every loop is checked against
what the upstream recorded: every byte of every response the agent received equals what
the upstream sent with the ids mapped through encode, the agent saw only the encoded ids,
and the upstream got its exact native ids back with every other byte as the agent sent
it. No request may fail, and toolid may log no warning.

It prints the load held (flows/s, concurrent streams, latencies, mitmdump's CPU and
memory) and, if TOOLID_LOAD_REPORT names a file, writes the figures there as JSON.
Duration: TOOLID_LOAD_SECONDS, default 10 s (60 s with --long); agents: TOOLID_LOAD_AGENTS,
default 64.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from standin import API, ScenarioHandle, UpstreamServer

from .cases import APIS
from .conftest import Mitmdump, MitmdumpPool
from .helpers import Gauge, LoopResult, PeakRss, async_wire_loop, check_loop_bytes

pytestmark = pytest.mark.e2e


@dataclass
class Run:
    """What the agents did: every finished loop and every failure."""

    loops: list[tuple[ScenarioHandle, LoopResult, bool]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    gauge: Gauge = field(default_factory=Gauge)
    bytes_received: int = 0
    seconds: float = 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def agent(
    n: int, proxy: Mitmdump, upstream: UpstreamServer, deadline: float, run: Run
) -> None:
    async with httpx.AsyncClient(proxy=proxy.url, trust_env=False, timeout=60.0) as client:
        i = 0
        while time.monotonic() < deadline:
            api: API = APIS[(n + i) % 3]
            stream = (n + i // 3) % 2 == 0
            handle = upstream.scenario(
                ids=[f"functions.agent{n}_loop{i}:0", f"tool {n}/{i}"],
                item_ids=[f"fc.{n}.{i}", f"fc_{n}_{i}"],
                seed=n * 100_000 + i,
            )
            try:
                result = await async_wire_loop(client, handle, api, stream=stream, gauge=run.gauge)
            except Exception as exc:
                run.errors.append(f"agent {n} loop {i} ({api}, stream={stream}): {exc!r}")
            else:
                run.loops.append((handle, result, stream))
                run.bytes_received += len(result.turn1_body or b"") + len(result.turn2_body or b"")
            i += 1


async def run_agents(agents: int, seconds: float, proxy: Mitmdump, upstream: UpstreamServer) -> Run:
    run = Run()
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(*(agent(n, proxy, upstream, deadline, run) for n in range(agents)))
    run.seconds = time.monotonic() - start
    return run


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def test_64_concurrent_agents(upstream: UpstreamServer, mitm: MitmdumpPool, long_run: bool) -> None:
    proxy = mitm.get(tag="load")
    agents = int(os.environ.get("TOOLID_LOAD_AGENTS", "64"))
    seconds = float(os.environ.get("TOOLID_LOAD_SECONDS", "60" if long_run else "10"))
    mark = proxy.mark()
    cpu_before = cpu_seconds(proxy.pid)
    with PeakRss(proxy.pid, interval=0.25) as rss:
        run = asyncio.run(run_agents(agents, seconds, proxy, upstream))
    cpu = cpu_seconds(proxy.pid) - cpu_before

    assert not run.errors, f"{len(run.errors)} failed loops, e.g.:\n" + "\n".join(run.errors[:5])
    # every byte of every loop, checked against what the upstream recorded
    bad = []
    for handle, result, _ in run.loops:
        try:
            check_loop_bytes(result, handle)
        except AssertionError as exc:
            bad.append(f"{handle.key} {result.api}: {str(exc)[:300]}")
        handle.exchanges.clear()  # the bodies are checked: let them go
        upstream.handles.pop(handle.key, None)
    assert not bad, f"{len(bad)} of {len(run.loops)} loops differ:\n" + "\n".join(bad[:5])
    warnings = [line for line in proxy.log_since(mark).splitlines() if "toolid: POST" in line]
    assert not warnings, warnings[:5]

    flows = len(run.gauge.latencies)
    streamed = sum(1 for _, _, stream in run.loops if stream)
    report: dict[str, Any] = {
        "agents": agents,
        "seconds": round(run.seconds, 2),
        "loops": len(run.loops),
        "loops_streamed": streamed,
        "loops_buffered": len(run.loops) - streamed,
        "flows": flows,
        "flows_per_second": round(flows / run.seconds, 1),
        "loops_per_second": round(len(run.loops) / run.seconds, 1),
        "peak_concurrent_requests": run.gauge.peak_in_flight,
        "peak_concurrent_streams": run.gauge.peak_streams,
        "mean_concurrent_requests": round(sum(run.gauge.latencies) / run.seconds, 1),
        "latency_ms_p50": round(1000 * statistics.median(run.gauge.latencies), 1),
        "latency_ms_p95": round(1000 * percentile(run.gauge.latencies, 0.95), 1),
        "latency_ms_max": round(1000 * max(run.gauge.latencies), 1),
        "mib_received": round(run.bytes_received / 2**20, 1),
        "mitmdump_cpu_percent_of_one_core": round(100 * cpu / run.seconds, 1),
        "mitmdump_rss_mib_start": round(rss.samples[0], 1),
        "mitmdump_rss_mib_peak": round(rss.peak, 1),
        "errors": len(run.errors),
        "mismatches": len(bad),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
    }
    print("\ntoolid load: " + json.dumps(report, indent=1))
    if path := os.environ.get("TOOLID_LOAD_REPORT"):
        Path(path).write_text(json.dumps(report, indent=2) + "\n")
    assert len(run.loops) >= agents, "fewer loops than agents: the load never built up"
    assert run.gauge.peak_in_flight >= agents // 2, run.gauge.peak_in_flight
