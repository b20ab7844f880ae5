"""``python -m bench.scaleout``: requests per second of one toolid proxy process, and of N
behind HAProxy running ``deploy/haproxy.cfg``, on this machine (loopback only).

The targets, in interleaved repeats (the order rotates), all under the same load (``bench.client``:
C keep-alive connections, one request at a time each, for a fixed time):

- client-only: the bench upstream itself, the ceiling of this client and upstream here;
- 1 process: ``mitmdump -s addons/toolid_addon.py`` (reverse mode), no balancer;
- 1 behind HAProxy: the same process through HAProxy, to see what the balancer costs;
- N behind HAProxy: N such processes behind HAProxy.

It also reports the CPU cores each kind of process used: on a machine with few cores the
proxies share them with HAProxy, the client and the upstream, which caps what more processes
can add. Nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import client, haproxy, library, workloads
from bench.proxy import Mitmdump, Upstream, cpu_seconds
from bench.run import PROXY_WORKLOADS, ProxyWorkload

LOCAL = "127.0.0.1"
DEFAULT_WORKLOADS = ("proxy.resp.chat", "proxy.sse.tools")


@dataclass
class Target:
    name: str
    port: int
    proxies: list[int]  # pids of the mitmdump processes it uses
    balancer: int | None  # pid of HAProxy


async def _check(target: Target, workload: ProxyWorkload) -> None:
    """The addon is at work through this target: the response carries encoded ids."""
    body = (await client.fetch(LOCAL, target.port, _request(workload))).body
    safe, raw = workloads.client_id(0).encode(), workloads.raw_id(0).encode()
    if target.proxies and (safe not in body or raw in body):
        raise RuntimeError(f"{target.name}: the response to {workload.id} has no encoded ids")


def _request(workload: ProxyWorkload) -> bytes:
    return client.build_request(workload.path, workload.body())


async def _measure(
    args: argparse.Namespace, target: Target, workload: ProxyWorkload, upstream_pid: int
) -> dict[str, Any]:
    pids = {"mitmdump": target.proxies, "haproxy": [target.balancer] if target.balancer else []}
    pids["upstream"] = [upstream_pid]
    before = {kind: sum(map(cpu_seconds, p)) for kind, p in pids.items()}
    own = time.process_time()
    load = await client.run_load(
        LOCAL,
        target.port,
        _request(workload),
        connections=args.connections,
        duration=args.seconds,
        events_per_response=workload.events,
    )
    cores = {
        kind: (sum(map(cpu_seconds, p)) - before[kind]) / load.seconds for kind, p in pids.items()
    }
    cores["client"] = (time.process_time() - own) / load.seconds
    return load.summary() | {"cores": cores}


async def _run(args: argparse.Namespace, workdir: Path, log: Any) -> dict[str, Any]:
    chosen = [w for w in PROXY_WORKLOADS if w.id in args.workloads.split(",")]
    if not chosen:
        raise SystemExit(f"no such workload: {args.workloads}")
    upstream = Upstream()
    procs: list[Mitmdump] = []
    balancers: list[haproxy.HAProxy] = []
    try:
        procs = [
            Mitmdump(
                workdir / f"mitmdump-{n}",
                upstream.port,
                addon=True,
                options={"toolid_status": f"{LOCAL}:0"},  # HAProxy checks its /healthz
            )
            for n in range(args.processes)
        ]
        targets = [
            Target("client-only", upstream.port, [], None),
            Target("1 process", procs[0].port, [procs[0].pid], None),
        ]
        for group in (procs[:1], procs):
            servers = [(f"{LOCAL}:{p.port}", haproxy.status_port(p.log_text())) for p in group]
            config, front = haproxy.deploy_config(servers, [])
            lb = haproxy.HAProxy(workdir / f"haproxy-{len(group)}", config, front["stats"])
            balancers.append(lb.start())
            assert lb.proc is not None
            name = f"{len(group)} behind HAProxy"
            port = int(front["toolid_reverse"].rsplit(":", 1)[1])
            targets.append(Target(name, port, [p.pid for p in group], lb.proc.pid))
        for workload in chosen:
            for target in targets:
                await _check(target, workload)
        log(f"{args.processes} processes and HAProxy up; measuring")
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rep in range(args.repeats):
            for workload in chosen:
                shift = rep % len(targets)
                for target in targets[shift:] + targets[:shift]:
                    result = await _measure(args, target, workload, upstream.proc.pid)
                    runs.setdefault((workload.id, target.name), []).append(result)
            log(f"repeat {rep + 1}/{args.repeats} done")
    finally:
        for lb in balancers:
            lb.stop()
        for proc in procs:
            proc.stop()
        upstream.stop()
    return {
        "workloads": {
            w.id: {"what": w.what, "events": w.events, **_summary(w, targets, runs)} for w in chosen
        }
    }


def _summary(
    workload: ProxyWorkload,
    targets: list[Target],
    runs: dict[tuple[str, str], list[dict[str, Any]]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for target in targets:
        reps = runs[(workload.id, target.name)]
        metrics = {k: library.spread([r[k] for r in reps]) for k in ("rps", "p50_ms", "p99_ms")}
        if workload.events:
            metrics["events_per_s"] = library.spread([r["events_per_s"] for r in reps])
        kinds = reps[0]["cores"].keys()
        metrics["cores"] = {
            k: library.spread([r["cores"][k] for r in reps])["median"] for k in kinds
        }
        out[target.name] = metrics
    return {"targets": out}


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"toolid scale-out: {meta['processes']} proxy processes behind HAProxy {meta['haproxy']} "
        f"vs one; {meta['cpus']} CPUs, Python {meta['python']}, mitmproxy {meta['mitmproxy']}",
        f"{meta['connections']} connections, {meta['seconds']} s per run, median of "
        f"{meta['repeats']} interleaved repeats; load average before {meta['loadavg_before']}, "
        f"after {meta['loadavg_after']}",
        "",
        f"{'target':<20} {'req/s':>8} {'events/s':>9} {'p50 ms':>7} {'p99 ms':>7}   "
        "cores used: mitmdump haproxy upstream client",
    ]
    for wid, w in report["workloads"].items():
        lines.append(f"{wid}: {w['what']}")
        for name, m in w["targets"].items():
            events = f"{m['events_per_s']['median']:9,.0f}" if "events_per_s" in m else " " * 9
            c = m["cores"]
            lines.append(
                f"  {name:<18} {m['rps']['median']:8,.0f} {events} {m['p50_ms']['median']:7.1f} "
                f"{m['p99_ms']['median']:7.1f}   {c['mitmdump']:19.2f} {c['haproxy']:7.2f} "
                f"{c['upstream']:8.2f} {c['client']:6.2f}"
            )
        one = w["targets"]["1 process"]["rps"]["median"]
        many = w["targets"][f"{meta['processes']} behind HAProxy"]["rps"]["median"]
        lines.append(f"  {meta['processes']} behind HAProxy / 1 process: {many / one:.2f}x")
    return "\n".join(lines)


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    import mitmproxy.version  # noqa: PLC0415 - only for the report

    exe = haproxy.executable()
    version = "?"
    if exe:
        out = subprocess.run([exe, "-v"], capture_output=True, text=True, check=False).stdout
        version = out.split()[2] if len(out.split()) > 2 else "?"
    return {
        "processes": args.processes,
        "connections": args.connections,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "mitmproxy": mitmproxy.version.VERSION,
        "haproxy": version,
        "loadavg_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scaleout", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--processes", type=int, default=3, help="proxies behind HAProxy (3)")
    parser.add_argument("--connections", type=int, default=24, help="busy connections (24)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per run (3)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (3)")
    parser.add_argument(
        "--workloads",
        default=",".join(DEFAULT_WORKLOADS),
        help=f"comma-separated bench workload ids (default {','.join(DEFAULT_WORKLOADS)})",
    )
    parser.add_argument("--install", action="store_true", help="apt-get install haproxy if missing")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.install:
        haproxy.ensure_installed()
    elif haproxy.executable() is None:
        print("bench.scaleout: haproxy is not installed (--install installs it)", file=sys.stderr)
        return 2
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {message}", file=sys.stderr, flush=True)

    meta = _meta(args)
    with tempfile.TemporaryDirectory(prefix="toolid-scaleout-") as tmp:
        report = asyncio.run(_run(args, Path(tmp), log))
    meta["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    report = {"meta": meta, **report}
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
