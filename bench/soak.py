"""``python -m bench.soak``: how much a proxy process's memory grows under steady load with ids
it has never seen, toolid's mitmdump beside plain mitmdump (reverse mode, loopback).

Every request is a Chat Completions body whose history holds ``--ids`` encoded ids and whose
``choices`` hold as many raw ones, all new (``functions.soak_<n>_<k>:<k>``); the upstream
answers with the body it got as JSON (``?echo=json``), so toolid restores the history's ids on
the way up and encodes the choices' ids on the way down: its per-id memos see only new keys,
the worst case for them. ``--connections`` keep-alive connections per proxy, one request at a
time each, the two proxies loaded at once for ``--seconds``; after a warm-up the RSS of each
process is sampled (``/proc``) and its growth reported per 10,000 requests, from the first
sample after the warm-up to the last. A benchmark, not a test: nothing asserts on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import client
from bench.proxy import Mitmdump, Upstream
from toolid import encode

LOCAL = "127.0.0.1"
PATH = "/v1/chat/completions?echo=json"
KIB_PER_MIB = 1024
# the numeric options: flag, type, default, what it is
NUMBERS: tuple[tuple[str, type[float] | type[int], float, str], ...] = (
    ("--seconds", float, 300.0, "measured seconds"),
    ("--warmup", float, 20.0, "seconds of warm-up before"),
    ("--connections", int, 4, "keep-alive connections per proxy"),
    ("--ids", int, 4, "new ids per request, each way"),
)


def body(n: int, ids: int) -> bytes:
    """Request ``n``'s body: ``ids`` encoded ids in its history, ``ids`` raw ones in its
    choices, none of them in any other request."""
    raws = [f"functions.soak_{n}_{k}:{k}" for k in range(ids)]
    calls = [
        {"id": encode(raw), "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for raw in raws
    ]
    results = [{"role": "tool", "tool_call_id": encode(raw), "content": "ok"} for raw in raws]
    answer = [
        {"id": raw + ".new", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for raw in raws
    ]
    document = {
        "model": "soak",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": calls},
            *results,
        ],
        "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": answer}}],
    }
    return json.dumps(document).encode()


class Counter:
    """Requests answered through one proxy, numbered across its connections."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0


async def _connection(port: int, counter: Counter, numbers: range, ids: int, until: float) -> None:
    """One keep-alive connection, one request at a time (request ``n`` for each of
    ``numbers`` in turn), until ``until`` (monotonic)."""
    connection = await client.Connection.open(LOCAL, port)
    n, step = numbers.start, numbers.step
    try:
        while time.monotonic() < until:
            response = await connection.request(client.build_request(PATH, body(n, ids)))
            if response.status != 200:
                counter.failed += 1
            counter.sent += 1
            n += step
    finally:
        connection.close()


async def _sampler(
    procs: dict[str, Mitmdump], counters: dict[str, Counter], warmup: float, until: float
) -> dict[str, list[tuple[int, int]]]:
    """(requests so far, RSS KiB) of each process, every second after the warm-up."""
    samples: dict[str, list[tuple[int, int]]] = {name: [] for name in procs}
    await asyncio.sleep(warmup)
    while True:
        for name, proc in procs.items():
            samples[name].append((counters[name].sent, proc.status_kib("VmRSS")))
        if time.monotonic() >= until:
            return samples
        await asyncio.sleep(min(1.0, max(0.0, until - time.monotonic())))


def growth_per_10k(samples: list[tuple[int, int]]) -> float | None:
    """MiB of RSS growth per 10,000 requests, from the first sample to the last."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None
    (first_n, first_kib), (last_n, last_kib) = samples[0], samples[-1]
    return (last_kib - first_kib) / KIB_PER_MIB / (last_n - first_n) * 10_000


async def _run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    upstream = Upstream()
    procs: dict[str, Mitmdump] = {}
    try:
        procs = {
            "mitmdump": Mitmdump(workdir / "plain", upstream.port, addon=False),
            "toolid": Mitmdump(workdir / "toolid", upstream.port, addon=True),
        }
        if args.also:  # another tree of toolid beside (before a change, say)
            addon = Path(args.also).resolve() / "addons" / "toolid_addon.py"
            procs[args.also] = Mitmdump(workdir / "also", upstream.port, addon=addon)
        check = await client.fetch(
            LOCAL, procs["toolid"].port, client.build_request(PATH, body(0, 1))
        )
        if encode("functions.soak_0_0:0.new").encode() not in check.body:
            raise RuntimeError("toolid did not encode the soak response's ids")
        counters = {name: Counter() for name in procs}
        start = time.monotonic()
        until = start + args.warmup + args.seconds
        tasks = [
            _connection(
                proc.port,
                counters[name],
                range(first, sys.maxsize, args.connections),
                args.ids,
                until,
            )
            for name, proc in procs.items()
            for first in range(1, args.connections + 1)
        ]
        results = await asyncio.gather(_sampler(procs, counters, args.warmup, until), *tasks)
        samples = results[0]
        return {
            name: {
                "requests": counters[name].sent,
                "failed": counters[name].failed,
                "rss_first_mib": samples[name][0][1] / KIB_PER_MIB,
                "rss_last_mib": samples[name][-1][1] / KIB_PER_MIB,
                "growth_mib_per_10k": growth_per_10k(samples[name]),
                "samples": samples[name],
            }
            for name in procs
        }
    finally:
        for proc in procs.values():
            proc.stop()
        upstream.stop()


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"toolid soak: {meta['seconds']:.0f} s after a {meta['warmup']:.0f} s warm-up, "
        f"{meta['connections']} connections per proxy, {meta['ids']} new ids per request "
        "each way",
        "",
        f"{'process':10s} {'requests':>9s} {'RSS first':>10s} {'RSS last':>9s} "
        f"{'growth / 10k requests':>22s}",
    ]
    for name, row in report["processes"].items():
        growth = row["growth_mib_per_10k"]
        shown = "n/a" if growth is None else f"{growth:+.2f} MiB"
        lines.append(
            f"{name:10.10s} {row['requests']:>9,d} {row['rss_first_mib']:>8.1f} M "
            f"{row['rss_last_mib']:>7.1f} M {shown:>22s}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    for flag, kind, default, what in NUMBERS:
        parser.add_argument(flag, type=kind, default=default, help=f"{what} ({default:g})")
    parser.add_argument("--also", metavar="TREE", help="also another tree of toolid's addon")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("bench.soak: reads /proc for memory (Linux only)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="toolid-soak-") as tmp:
        processes = asyncio.run(_run(args, Path(tmp)))
    meta = {flag[2:]: getattr(args, flag[2:]) for flag, *_ in NUMBERS}
    report = {"meta": {**meta, "cpus": os.cpu_count()}, "processes": processes}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
