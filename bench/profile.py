"""Where a proxy workload's time goes inside a real mitmdump: ``python -m bench.profile``.

Runs the bench's upstream and one ``mitmdump`` with the addon (reverse mode, as the bench
does) under ``perf record --call-graph dwarf``, with CPython's perf support on
(``PYTHON_PERF_JIT_SUPPORT=1``: every Python frame gets a symbol), sends the workload's
request N times on one keep-alive connection, and prints, for the samples taken inside one of
the addon's hooks (``--root``), the share of each innermost Python function (what it does
itself, with the C it calls) and of each Python function with what it calls.

    python -m bench.profile sse.tools                 # row 1, with the native accelerator
    python -m bench.profile followup.500 --pure       # row 3 as pure Python
    python -m bench.profile resp.chat --root ToolId.request

Needs Linux ``perf`` (Debian: linux-perf) allowed to record the process; CPython's and perf's
files for the Python frames' symbols (``jit-*.dump``, ``jitted-*.so``) stay in /tmp. A profile
says where time goes, never how long it takes: ``scripts/bench`` measures that.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from bench import client, proxy, run

#: The hook whose samples are read by default: a stream's pieces, else the hook of the message
#: the workload rewrites (``ProxyWorkload.check``).
ROOTS = {
    "stream": "ToolId._stream_callable.<locals>.function",
    "request": "ToolId.request",
    "response": "ToolId.response",
}


def stacks(lines: Iterable[str]) -> Iterator[list[str]]:
    """The samples of ``perf script -F ip,sym``: each its frames' symbols, innermost first."""
    frames: list[str] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        _, _, symbol = line.partition(" ")
        frames.append(re.sub(r" \(.*\)$", "", symbol))
    if frames:
        yield frames


def _function(frame: str) -> str | None:
    """The Python function a frame symbol names (``py::qualname:file``), or None."""
    return frame[4:].split(":", 1)[0] if frame.startswith("py::") else None


def shares(
    samples: Iterable[list[str]], root: str
) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """Of the samples inside ``root`` (a Python qualname): how many, and per Python function the
    samples where it is the innermost Python frame (``own``) and where it is on the stack
    below ``root`` (``within``)."""
    count, own, within = 0, collections.Counter[str](), collections.Counter[str]()
    for frames in samples:
        names = [name for name in map(_function, frames) if name is not None]
        if root not in names:
            continue
        count += 1
        names = names[: names.index(root) + 1]
        own[names[0]] += 1
        within.update(set(names))
    return count, own, within


def _record(workload: run.ProxyWorkload, requests: int, pure: bool, work: Path) -> Path:
    """Run the workload through mitmdump under perf; the data perf wrote (in ``work``)."""
    upstream = proxy.Upstream()
    env = {"PYTHON_PERF_JIT_SUPPORT": "1", **({"TOOLID_NATIVE": "off"} if pure else {})}
    data = work / "perf.data"
    perf = ["perf", "record", "-F", "2000", "--call-graph", "dwarf,16384", "-k", "1"]
    target = proxy.Mitmdump(
        work,
        upstream.port,
        addon=True,  # streams an event stream itself, as users run it (no stream_large_bodies)
        env=env,
        under=[*perf, "-o", str(data), "--"],
        wait=False,
    )
    try:
        target.ready()
        request = run._request(workload, workload.body())

        async def send() -> None:
            connection = await client.Connection.open(run.LOCAL, target.port)
            try:
                for _ in range(requests):
                    await connection.request(request)
            finally:
                connection.close()

        asyncio.run(send())
    finally:
        target.proc.send_signal(signal.SIGINT)  # perf passes it on and writes its data
        target.proc.wait(60)
        upstream.stop()
    return data


def main(argv: list[str] | None = None) -> int:
    workloads = {w.id.removeprefix("proxy."): w for w in run.PROXY_WORKLOADS}
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("workload", choices=sorted(workloads))
    parser.add_argument("--requests", type=int, default=200, help="requests sent (default 200)")
    parser.add_argument("--pure", action="store_true", help="without the native accelerator")
    parser.add_argument("--root", help="the hook to read (a Python qualname; default: by workload)")
    parser.add_argument("--top", type=int, default=25, help="functions shown (default 25)")
    args = parser.parse_args(argv)
    if shutil.which("perf") is None:
        print(
            "bench.profile: needs Linux perf (Debian: apt-get install linux-perf)", file=sys.stderr
        )
        return 2
    workload = workloads[args.workload]
    root = args.root or ROOTS["stream" if workload.streamed else workload.check]
    with tempfile.TemporaryDirectory(prefix="toolid-profile-") as tmp:
        data = _record(workload, args.requests, args.pure, Path(tmp))
        jitted = data.with_name("perf.jit.data")
        subprocess.run(
            ["perf", "inject", "--jit", "-i", str(data), "-o", str(jitted)],
            check=True,
            capture_output=True,
        )
        script = subprocess.run(
            ["perf", "script", "-F", "ip,sym", "-i", str(jitted)],
            check=True,
            capture_output=True,
            text=True,
            errors="replace",
        )
    count, own, within = shares(stacks(script.stdout.splitlines()), root)
    mode = "pure Python" if args.pure else "native accelerator"
    print(f"{args.workload} ({mode}): {count} samples inside {root}")
    if not count:
        return 1
    for title, counter in (("own (innermost Python frame)", own), ("with what it calls", within)):
        print(f"\n  {title}")
        for name, samples in counter.most_common(args.top):
            print(f"  {100 * samples / count:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
