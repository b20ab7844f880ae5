"""``scripts/bench`` / ``python -m bench``: measure, print a table, optionally write JSON.

Three parts, in one run on the same machine:

1. proxy: the same workloads straight to the upstream (client-only), through plain ``mitmdump``,
   through ``mitmdump --set stream_large_bodies=1`` (streams only: plain mitmdump *buffers* an
   SSE response, which no agent can use, so this is the like-for-like baseline for streams) and
   through ``mitmdump -s addons/toolid_addon.py``. Repeats are interleaved (the order of the
   proxies rotates) so that drift on a shared machine hits every column alike.
2. library: ``bench.library``.
3. memory: peak RSS of ``mitmdump`` with the addon streaming a short and a 10x longer SSE body.

PASS/MISS next to a target is information for the reader; nothing fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import client, library, workloads
from bench.proxy import REPO_ROOT, Mitmdump, Upstream

KiB = 1024
MiB = 1024 * KiB
LOCAL = "127.0.0.1"


# --- the proxy workloads ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyWorkload:
    id: str
    what: str
    path: str
    body: Callable[[], bytes]
    check: str  # "response": ids encoded in the answer; "request": ids restored upstream
    events: int = 0  # SSE events per response (0: a buffered response)

    @property
    def streamed(self) -> bool:
        return self.events > 0


def _followup(calls: int) -> ProxyWorkload:
    return ProxyWorkload(
        f"proxy.followup.{calls}",
        f"chat request, {calls} prior tool call(s), tid1_ ids",
        "/v1/chat/completions?w=text",
        lambda: workloads.history_request("chat", calls, ids="client"),
        "request",
    )


PROXY_WORKLOADS: tuple[ProxyWorkload, ...] = (
    *(
        ProxyWorkload(
            f"proxy.resp.{shape}",
            f"{shape} response, 2 Kimi-style tool calls",
            f"{workloads.PATHS[shape]}?w=resp.{shape}",
            functools.partial(workloads.first_request, shape),
            "response",
        )
        for shape in workloads.SHAPES
    ),
    _followup(1),
    _followup(50),
    _followup(500),
    ProxyWorkload(
        "proxy.sse.tools",
        f"chat SSE, {workloads.STREAM_EVENTS} events, a tool call every "
        f"{workloads.STREAM_TOOL_EVERY}",
        "/v1/chat/completions?w=sse.tools",
        lambda: workloads.first_request("chat", stream=True),
        "response",
        events=workloads.STREAM_EVENTS,
    ),
    ProxyWorkload(
        "proxy.sse.text",
        f"chat SSE, {workloads.STREAM_EVENTS} events, text only",
        "/v1/chat/completions?w=sse.text",
        lambda: workloads.first_request("chat", stream=True),
        "response",
        events=workloads.STREAM_EVENTS,
    ),
)

#: Library body sizes (the same in --quick, which only repeats less).
LIB_SIZES = (10 * KiB, 1 * MiB, 10 * MiB)
LIB_SHAPE_SIZE = 1 * MiB


def expected_case_ids() -> list[str]:
    """Every case a run reports (full and --quick alike)."""
    ids = [w.id for w in PROXY_WORKLOADS]
    ids += [case.id for case in _library_cases(ids_only=True)]
    ids.append("memory.sse")
    return ids


def _library_cases(ids_only: bool = False) -> list[library.Case]:
    if ids_only:  # the same ids, without building 10 MiB bodies
        ids = [spec.id for spec in library.body_specs(LIB_SIZES, LIB_SHAPE_SIZE)]
        return [library.Case(i, "pass", "", 0, {}) for i in ids + library.stream_case_ids()]
    return [
        *library.body_cases(LIB_SIZES, LIB_SHAPE_SIZE),
        *library.stream_cases(workloads.STREAM_EVENTS, workloads.STREAM_TOOL_EVERY),
    ]


# --- settings ---------------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool
    repeats: int
    duration: float
    latency_duration: float
    connections: int
    lib_repeats: int
    lib_min_sample_ms: float
    memory_sizes: tuple[int, int]
    parts: tuple[str, ...]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        quick = args.quick
        small, large = (2 * MiB, 20 * MiB) if quick else (20 * MiB, 200 * MiB)
        if args.memory_mib:
            small, large = (int(x) * MiB for x in args.memory_mib.split(","))
        return cls(
            quick=quick,
            repeats=args.repeats or (1 if quick else 3),
            duration=args.duration or (0.2 if quick else 1.0),
            latency_duration=args.latency_duration or (0.1 if quick else 0.5),
            connections=args.connections or (4 if quick else 8),
            lib_repeats=args.lib_repeats or (2 if quick else 7),
            lib_min_sample_ms=0.5 if quick else 2.0,
            memory_sizes=(small, large),
            parts=tuple(args.only.split(",")) if args.only else ("proxy", "library", "memory"),
        )


# --- proxy ------------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    label: str
    port: int
    process: Mitmdump | None  # None: the upstream itself (client-only)


def _request(workload: ProxyWorkload, *, echo: bool = False) -> bytes:
    path = workload.path + ("&echo=1" if echo else "")
    return client.build_request(path, workload.body())


async def _check(workload: ProxyWorkload, target: Target) -> str:
    """'ok', or what is wrong with what this target delivers for this workload."""
    addon = target.name == "addon"
    raw, safe = workloads.raw_id(0).encode(), workloads.client_id(0).encode()
    if workload.check == "request":
        got = (await client.fetch(LOCAL, target.port, _request(workload, echo=True))).body
        want, unwanted = (raw, b"tid1_") if addon else (safe, raw)
        where = "the request the upstream got"
    else:
        response = await client.fetch(LOCAL, target.port, _request(workload))
        got = response.body
        where = "the response"
        if workload.id == "proxy.sse.text":
            canned = b"".join(workloads.canned("sse.text").events)
            return "ok" if got == canned else "the text-only stream was altered"
        want, unwanted = (safe, raw) if addon else (raw, safe)
    if want not in got or unwanted in got:
        return f"{where} has {unwanted!r} / lacks {want!r}: the addon is not doing its job"
    return "ok"


async def _proxy_phase(
    settings: Settings, targets: dict[str, Target], log: Callable[[str], None]
) -> list[dict[str, Any]]:
    checks: dict[str, dict[str, str]] = {}
    for workload in PROXY_WORKLOADS:
        checks[workload.id] = {}
        for target in _targets_for(workload, targets):
            if target.process is not None:
                checks[workload.id][target.name] = await _check(workload, target)
                if checks[workload.id][target.name] != "ok":
                    log(
                        f"WARNING {workload.id} via {target.label}: "
                        f"{checks[workload.id][target.name]}"
                    )
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rep in range(settings.repeats):
        for workload in PROXY_WORKLOADS:
            request = _request(workload)
            chosen = _targets_for(workload, targets)
            proxied = chosen[1:]
            shift = rep % len(proxied)
            order = [chosen[0], *proxied[shift:], *proxied[:shift]]
            for target in order:
                runs.setdefault((workload.id, target.name), []).append(
                    await _measure(settings, workload, target, request)
                )
        log(f"proxy: repeat {rep + 1}/{settings.repeats} done")
    return [_summarise_workload(w, targets, runs, checks[w.id]) for w in PROXY_WORKLOADS]


def _targets_for(workload: ProxyWorkload, targets: dict[str, Target]) -> list[Target]:
    names = (
        ["direct", "plain", "plain_stream", "addon"]
        if workload.streamed
        else ["direct", "plain", "addon"]
    )
    return [targets[n] for n in names]


async def _measure(
    settings: Settings, workload: ProxyWorkload, target: Target, request: bytes
) -> dict[str, Any]:
    cpu0 = target.process.cpu_seconds() if target.process else 0.0
    load = await client.run_load(
        LOCAL,
        target.port,
        request,
        connections=settings.connections,
        duration=settings.duration,
        events_per_response=workload.events,
    )
    cpu = (target.process.cpu_seconds() - cpu0) if target.process else 0.0
    single = await client.run_load(
        LOCAL, target.port, request, connections=1, duration=settings.latency_duration, warmup=1
    )
    out = load.summary()
    out["cpu_us_per_request"] = cpu / load.requests * 1e6 if load.requests and cpu else None
    out["latency_p50_ms"] = client.percentile(single.latencies, 50) * 1e3
    out["latency_p99_ms"] = client.percentile(single.latencies, 99) * 1e3
    out["latency_samples"] = len(single.latencies)
    return out


def _summarise_workload(
    workload: ProxyWorkload,
    targets: dict[str, Target],
    runs: dict[tuple[str, str], list[dict[str, Any]]],
    checks: dict[str, str],
) -> dict[str, Any]:
    per_target: dict[str, Any] = {}
    for target in _targets_for(workload, targets):
        reps = runs[(workload.id, target.name)]
        metrics = {}
        for key in (
            "rps",
            "events_per_s",
            "p50_ms",
            "p99_ms",
            "latency_p50_ms",
            "latency_p99_ms",
            "cpu_us_per_request",
        ):
            values = [r[key] for r in reps if r.get(key) is not None]
            if values and (key != "events_per_s" or workload.streamed):
                metrics[key] = library.spread(values)
        metrics["requests"] = sum(r["requests"] for r in reps)
        metrics["latency_samples"] = sum(r["latency_samples"] for r in reps)
        per_target[target.name] = metrics
    result: dict[str, Any] = {
        "id": workload.id,
        "group": "proxy",
        "what": workload.what,
        "request_bytes": len(workload.body()),
        "events": workload.events,
        "check": checks,
        "targets": per_target,
    }

    def paired(metric: str, num: str, den: str) -> dict[str, float]:
        a, b = runs[(workload.id, num)], runs[(workload.id, den)]
        return library.spread(
            [
                x[metric] / y[metric]
                for x, y in zip(a, b, strict=True)
                if x.get(metric) and y.get(metric)
            ]
            or [0.0]
        )

    med = {
        name: {k: v["median"] for k, v in m.items() if isinstance(v, dict)}
        for name, m in per_target.items()
    }
    result["ratio_rps"] = med["addon"]["rps"] / med["plain"]["rps"]
    result["ratio_rps_paired"] = paired("rps", "addon", "plain")
    result["ratio_latency_p50"] = med["addon"]["latency_p50_ms"] / med["plain"]["latency_p50_ms"]
    result["added_latency_p50_ms"] = med["addon"]["latency_p50_ms"] - med["plain"]["latency_p50_ms"]
    result["added_latency_p99_ms"] = med["addon"]["latency_p99_ms"] - med["plain"]["latency_p99_ms"]
    if "cpu_us_per_request" in med["addon"] and "cpu_us_per_request" in med["plain"]:
        result["ratio_cpu"] = (
            med["addon"]["cpu_us_per_request"] / med["plain"]["cpu_us_per_request"]
        )
    result["client_headroom"] = med["direct"]["rps"] / max(
        med[name]["rps"] for name in med if name != "direct"
    )
    if workload.streamed:
        base = med["plain_stream"]
        result["ratio_rps_stream"] = med["addon"]["rps"] / base["rps"]
        result["ratio_rps_stream_paired"] = paired("rps", "addon", "plain_stream")
        result["added_latency_p50_ms_stream"] = (
            med["addon"]["latency_p50_ms"] - base["latency_p50_ms"]
        )
        result["added_latency_p99_ms_stream"] = (
            med["addon"]["latency_p99_ms"] - base["latency_p99_ms"]
        )
        if "cpu_us_per_request" in med["addon"] and "cpu_us_per_request" in base:
            result["ratio_cpu_stream"] = (
                med["addon"]["cpu_us_per_request"] / base["cpu_us_per_request"]
            )
    return result


# --- memory -----------------------------------------------------------------------------------


STREAM_TIMEOUT = 120.0


async def _stream_through(proc: Mitmdump, size: int, sample_every: float = 0.01) -> dict[str, Any]:
    """Stream about ``size`` bytes of SSE through ``proc``, sampling its VmRSS meanwhile."""
    request = client.build_request(
        f"/v1/chat/completions?w=mem&bytes={size}", workloads.first_request("chat", stream=True)
    )
    conn = await client.Connection.open(LOCAL, proc.port)
    peak_sampled = proc.status_kib("VmRSS")
    t0 = time.perf_counter()
    received = 0
    try:
        future = conn.request(request)
        while not future.done() and time.perf_counter() - t0 < STREAM_TIMEOUT:
            await asyncio.sleep(sample_every)
            peak_sampled = max(peak_sampled, proc.status_kib("VmRSS"))
        if future.done():
            received = (await future).size
        else:  # too slow: report what arrived, flagged incomplete
            received = conn.size
            future.cancel()
    finally:
        conn.close()
    seconds = time.perf_counter() - t0
    return {
        "stream_bytes": workloads.memory_stream_size(size),
        "received_bytes": received,
        "seconds": seconds,
        "mb_per_s": received / seconds / 1e6,
        "peak_sampled_kib": peak_sampled,
        "vm_hwm_kib": proc.status_kib("VmHWM"),
        "rss_after_kib": proc.status_kib("VmRSS"),
    }


async def _memory_phase(
    settings: Settings, upstream: Upstream, workdir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    """A fresh mitmdump + addon per size, warmed up; VmHWM is reset just before the stream
    (``/proc/<pid>/clear_refs``) where the kernel allows it, and VmRSS is sampled as well."""
    runs = []
    for i, size in enumerate(settings.memory_sizes):
        proc = Mitmdump(workdir / f"memory-{i}", upstream.port, addon=True)
        try:
            warm = client.build_request(
                "/v1/chat/completions?w=sse.tools", workloads.first_request("chat", stream=True)
            )
            for _ in range(3):
                await client.fetch(LOCAL, proc.port, warm)
            baseline = proc.status_kib("VmRSS")
            reset = proc.reset_peak()  # VmHWM from here on is this stream's peak
            run = await _stream_through(proc, size)
            run["rss_before_kib"] = baseline
            run["peak_since"] = "stream start" if reset else "process start"
            runs.append(run)
            log(f"memory: {size // MiB} MiB streamed, peak {run['vm_hwm_kib'] / 1024:.1f} MiB")
        finally:
            proc.stop()
    small, large = runs
    growth = (large["vm_hwm_kib"] - small["vm_hwm_kib"]) / 1024
    limit = max(8.0, 0.05 * (large["stream_bytes"] - small["stream_bytes"]) / MiB)
    return {
        "id": "memory.sse",
        "group": "memory",
        "what": f"mitmdump + addon streaming chat SSE (~1 KiB events, a tool call every "
        f"{workloads.MEMORY_TOOL_EVERY})",
        "small": small,
        "large": large,
        "growth_mib": growth,
        "flat_limit_mib": limit,
        "complete": all(r["received_bytes"] >= r["stream_bytes"] for r in runs),
    }


# --- targets ----------------------------------------------------------------------------------


def _targets(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []

    def add(case: dict[str, Any], metric: str, op: str, limit: float, label: str) -> None:
        value = case.get(metric)
        if value is None:
            return
        ok = value >= limit if op == ">=" else value <= limit
        out.append(
            {
                "case": case["id"],
                "metric": metric,
                "value": value,
                "op": op,
                "limit": limit,
                "pass": ok,
                "label": label,
            }
        )

    for case in cases:
        cid = case["id"]
        if cid.startswith(("proxy.resp.", "proxy.sse.")):
            add(case, "ratio_rps", ">=", 0.95, "throughput addon/plain")
            add(case, "ratio_rps_stream", ">=", 0.95, "throughput addon/plain-stream")
        elif cid == "proxy.followup.500":
            add(case, "ratio_latency_p50", "<=", 1.5, "time through proxy addon/plain")
        elif case["group"] == "library":
            if case["kind"] == "rewrite":
                add(case, "ratio_json_loads", "<=", 1.5, "rewrite / json.loads")
            else:
                add(case, "ratio_bytes_find", "<=", 4.0, "pass-through / bytes.find")
            if cid.startswith("lib.sse.") and case["kind"] == "pass":
                add(case, "json_parses", "<=", 0, "JSON parses in a stream without ids")
        elif cid == "memory.sse":
            add(case, "growth_mib", "<=", case["flat_limit_mib"], "peak RSS growth, MiB")
    return out


# --- output -----------------------------------------------------------------------------------


def _num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _spread(s: dict[str, float] | None, digits: int = 0) -> str:
    if not s:
        return "-"
    if s["n"] < 2:
        return _num(s["median"], digits)
    return f"{_num(s['median'], digits)} [{_num(s['min'], digits)}-{_num(s['max'], digits)}]"


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / KiB:.1f} KiB"


def _mark(targets: list[dict[str, Any]], case_id: str, metric: str) -> str:
    for t in targets:
        if t["case"] == case_id and t["metric"] == metric:
            return f"{'PASS' if t['pass'] else 'MISS'} ({t['op']}{_num(t['limit'], 2)})"
    return ""


def render(report: dict[str, Any]) -> str:
    meta, cases, targets = report["meta"], report["cases"], report["targets"]
    lines = [
        f"toolid bench{' --quick' if meta['quick'] else ''}: {meta['cpus']} CPUs, Python "
        f"{meta['python']}, mitmproxy {meta['mitmproxy']}, toolid @ {meta['commit']}; "
        f"load average {meta['loadavg_before']} -> {meta['loadavg_after']}; "
        f"{meta['seconds']:.0f} s",
    ]
    proxy = [c for c in cases if c["group"] == "proxy"]
    if proxy:
        s = meta["settings"]
        lines += [
            "",
            f"PROXY: {s['connections']} connections busy for {s['duration']} s, then 1 connection "
            f"for {s['latency_duration']} s, x{s['repeats']} interleaved; median [min-max] over "
            "repeats.",
            "  req/s under load; latency = single-connection p50/p99 ms; cpu = mitmdump CPU us "
            "per request; plain-stream = mitmdump --set stream_large_bodies=1.",
            f"  {'case':<20}{'client-only':>12}{'plain req/s':>20}{'plain-stream':>20}"
            f"{'addon req/s':>20}{'addon/plain':>12}  {'+p50 ms':>8}{'+p99 ms':>8}"
            f"  {'cpu us plain>addon':>19}  target",
        ]
        for c in proxy:
            t = c["targets"]
            ps = t.get("plain_stream")
            stream = c["id"].startswith("proxy.sse.")
            ratio = c["ratio_rps_stream"] if stream else c["ratio_rps"]
            added50 = c["added_latency_p50_ms_stream"] if stream else c["added_latency_p50_ms"]
            added99 = c["added_latency_p99_ms_stream"] if stream else c["added_latency_p99_ms"]
            base = ps if stream else t["plain"]
            cpu = (
                f"{_num(base.get('cpu_us_per_request', {}).get('median'))}>"
                f"{_num(t['addon'].get('cpu_us_per_request', {}).get('median'))}"
            )
            metric = (
                "ratio_rps_stream"
                if stream
                else "ratio_latency_p50"
                if c["id"] == "proxy.followup.500"
                else "ratio_rps"
            )
            name = c["id"].removeprefix("proxy.")
            lines.append(
                f"  {name:<20}{_num(t['direct']['rps']['median']):>12}"
                f"{_spread(t['plain']['rps']):>20}{_spread(ps['rps'] if ps else None):>20}"
                f"{_spread(t['addon']['rps']):>20}{ratio:>12.2f}  {added50:>8.2f}{added99:>8.2f}"
                f"  {cpu:>19}  {_mark(targets, c['id'], metric)}"
            )
        lines.append(
            "  (sse rows: addon/plain and +p50/+p99 against plain-stream; against "
            "buffering plain mitmdump:"
        )
        for c in proxy:
            if c["events"]:
                t = c["targets"]
                lines.append(
                    f"   {c['id'].removeprefix('proxy.')}: addon/plain {c['ratio_rps']:.2f} "
                    f"{_mark(targets, c['id'], 'ratio_rps')}, events/s plain "
                    f"{_num(t['plain']['events_per_s']['median'])}, plain-stream "
                    f"{_num(t['plain_stream']['events_per_s']['median'])}, addon "
                    f"{_num(t['addon']['events_per_s']['median'])})"
                )
        for c in proxy:
            if c["id"] == "proxy.followup.500":
                t = c["targets"]
                lines.append(
                    f"  followup.500 single-connection p50 ms: plain "
                    f"{_spread(t['plain']['latency_p50_ms'], 2)}, addon "
                    f"{_spread(t['addon']['latency_p50_ms'], 2)} -> x{c['ratio_latency_p50']:.2f} "
                    f"{_mark(targets, c['id'], 'ratio_latency_p50')}"
                )
        bad = [(c["id"], k, v) for c in proxy for k, v in c["check"].items() if v != "ok"]
        for cid, name, problem in bad:
            lines.append(f"  CHECK FAILED {cid} via {name}: {problem}")
    lib = [c for c in cases if c["group"] == "library"]
    if lib:
        lines += [
            "",
            f"LIBRARY: per call, median [q1-q3] over {lib[0]['repeats']} samples; ratios of "
            "medians. rewrite cases: toolid / json.loads; pass cases: toolid / bytes.find.",
            "  SSE: StreamRewriter fed one event per feed() (as mitmproxy calls the stream "
            "callable per upstream chunk); json.loads = every event's data; framing = "
            "EventFramer alone.",
            f"  {'case':<32}{'size':>11}{'toolid ms [q1-q3]':>26}{'json.loads ms':>15}"
            f"{'bytes.find ms':>15}{'ratio':>9}  target",
        ]
        for c in lib:
            ns = c["ns"]
            ratio = c["ratio_json_loads"] if c["kind"] == "rewrite" else c.get("ratio_bytes_find")
            metric = "ratio_json_loads" if c["kind"] == "rewrite" else "ratio_bytes_find"
            tool = ns["toolid"]
            toolid_ms = f"{_ms(tool['median'])} [{_ms(tool['q1'])}-{_ms(tool['q3'])}]"
            find_ms = _ms(ns["bytes_find"]["median"]) if "bytes_find" in ns else "-"
            lines.append(
                f"  {c['id'].removeprefix('lib.'):<32}{_size(c['bytes']):>11}{toolid_ms:>26}"
                f"{_ms(ns['json_loads']['median']):>15}{find_ms:>15}"
                f"{_num(ratio, 2):>9}  {_mark(targets, c['id'], metric)}"
            )
        for c in lib:
            if c["id"].startswith("lib.sse."):
                ns = c["ns"]
                lines.append(
                    f"  {c['id'].removeprefix('lib.'):<22} json parses {c['json_parses']:>4} "
                    f"(tool events {c['tool_events']:>3}, changes {c['changes']:>3}) "
                    f"{_mark(targets, c['id'], 'json_parses') or '':<11}"
                    f" framing alone {_ms(ns['framing_only']['median'])} ms, "
                    f"64 KiB pieces {_ms(ns['toolid_64k_pieces']['median'])} ms, "
                    f"per event {ns['toolid']['median'] / c['events'] / 1e3:.2f} us"
                )
    for c in (c for c in cases if c["group"] == "memory"):
        lines += ["", f"MEMORY: {c['what']}; a fresh process per stream"]
        for run in (c["small"], c["large"]):
            lines.append(
                f"  {_size(run['stream_bytes'])} stream: peak RSS (VmHWM since "
                f"{run.get('peak_since', '?')}) {run['vm_hwm_kib'] / 1024:.1f} MiB, sampled max "
                f"{run['peak_sampled_kib'] / 1024:.1f} MiB, before "
                f"{run['rss_before_kib'] / 1024:.1f} MiB; {run['mb_per_s']:.0f} MB/s"
            )
        extra = (c["large"]["stream_bytes"] - c["small"]["stream_bytes"]) / MiB
        lines.append(
            f"  growth {c['growth_mib']:+.1f} MiB for {extra:.0f} MiB more stream: "
            f"{_mark(targets, c['id'], 'growth_mib')}"
            + ("" if c["complete"] else "  (WARNING: a stream arrived incomplete)")
        )
    passed = sum(t["pass"] for t in targets)
    lines += ["", f"targets: {passed} PASS, {len(targets) - passed} MISS"]
    return "\n".join(lines)


def _ms(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms:.4f}" if ms < 0.01 else f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


# --- main -------------------------------------------------------------------------------------


def _meta(settings: Settings) -> dict[str, Any]:
    try:
        import mitmproxy.version as mv  # noqa: PLC0415 - only for the report

        mitm = mv.VERSION
    except ImportError:  # pragma: no cover
        mitm = "?"
    commit = "?"
    git = shutil.which("git")
    if git:
        done = subprocess.run(
            [git, "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        commit = done.stdout.strip() or "?"
    return {
        "quick": settings.quick,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "mitmproxy": mitm,
        "commit": commit,
        "platform": platform.platform(),
        "loadavg_before": _loadavg(),
        "settings": settings.__dict__,
    }


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Measure toolid: proxy overhead (mitmdump with and without the addon), "
        "library cost against json.loads / bytes.find, and memory while streaming.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every case, small enough for CI (seconds; a smoke test only)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument(
        "--only", metavar="PARTS", help="comma-separated subset of proxy,library,memory"
    )
    parser.add_argument("--repeats", type=int, help="proxy repeats (default 3; quick 1)")
    parser.add_argument(
        "--duration",
        type=float,
        help="seconds of load per proxy measurement (default 1.0; quick 0.2)",
    )
    parser.add_argument(
        "--latency-duration",
        type=float,
        help="seconds of single-connection requests (default 0.5; quick 0.1)",
    )
    parser.add_argument("--connections", type=int, help="busy connections (default 8; quick 4)")
    parser.add_argument("--lib-repeats", type=int, help="library samples (default 7; quick 2)")
    parser.add_argument(
        "--memory-mib",
        metavar="SMALL,LARGE",
        help="memory stream sizes (default 20,200; quick 2,20)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings.from_args(args)
    unknown = set(settings.parts) - {"proxy", "library", "memory"}
    if unknown:
        print(f"bench: unknown part(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    started = time.monotonic()
    meta = _meta(settings)

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="toolid-bench-") as tmp:
        workdir = Path(tmp)
        if "proxy" in settings.parts or "memory" in settings.parts:
            upstream = Upstream()
            try:
                cases += asyncio.run(_proxy_and_memory(settings, upstream, workdir, log))
            finally:
                upstream.stop()
    if "library" in settings.parts:
        log("library: building bodies")
        lib_cases = _library_cases()
        for case in lib_cases:
            cases.append(
                library.measure(case, settings.lib_repeats, int(settings.lib_min_sample_ms * 1e6))
            )
        log("library: done")
    order = {cid: i for i, cid in enumerate(expected_case_ids())}
    cases.sort(key=lambda c: order.get(c["id"], len(order)))
    meta["loadavg_after"] = _loadavg()
    meta["seconds"] = time.monotonic() - started
    report = {"meta": meta, "cases": cases, "targets": _targets(cases)}
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0


async def _proxy_and_memory(
    settings: Settings, upstream: Upstream, workdir: Path, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    if "proxy" in settings.parts:
        procs = {
            "plain": Mitmdump(workdir / "plain", upstream.port, addon=False),
            "plain_stream": Mitmdump(
                workdir / "plain-stream",
                upstream.port,
                addon=False,
                options={"stream_large_bodies": "1"},
            ),
            "addon": Mitmdump(workdir / "addon", upstream.port, addon=True),
        }
        labels = {
            "plain": "mitmdump",
            "plain_stream": "mitmdump (stream_large_bodies=1)",
            "addon": "mitmdump -s toolid_addon.py",
        }
        try:
            targets = {"direct": Target("direct", "client-only", upstream.port, None)}
            targets.update(
                {name: Target(name, labels[name], proc.port, proc) for name, proc in procs.items()}
            )
            log("proxy: processes up; measuring")
            cases += await _proxy_phase(settings, targets, log)
        finally:
            for proc in procs.values():
                proc.stop()
    if "memory" in settings.parts:
        cases.append(await _memory_phase(settings, upstream, workdir, log))
    return cases
