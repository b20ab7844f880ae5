"""Versions of toolid side by side on one proxy workload: ``python -m bench.sidebyside``.

Each TREE is a directory holding ``toolid/`` and ``addons/`` (this checkout, or another version
taken out with ``git archive REV toolid addons | tar -x -C TREE``; ``--build`` compiles the
native accelerator in it first). Plain mitmdump (the bench's reference for the workload) and one
mitmdump with each tree's addon run at once, in reverse mode to the bench's upstream, and the
workload's request goes to each in turn, one at a time (``bench.client.run_alternating``): the
machine's drift weighs on them alike, which makes this the way to tell whether a change made a
row faster. It prints each tree's median time per request, its ratio to the reference and
what it adds in milliseconds.

``--floor`` adds one more mitmdump, with ``bench/floor_addon.py``: toolid's hooks with nothing
in them but a stream callable that passes each piece as it came. What it adds to the reference
no rewriter of streams can avoid; what a tree adds beyond it is that tree's own work.

    python -m bench.sidebyside sse.tools . /tmp/old --seconds 8
    python -m bench.sidebyside sse.tools . --floor
    TOOLID_NATIVE=off python -m bench.sidebyside followup.500 . /tmp/old
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from bench import client, proxy, run


def build(tree: Path) -> None:
    """Compile ``tree``'s native accelerator in place, as ``setup.py`` builds it (this Python's
    flags, every warning an error). Raises CalledProcessError when the compiler fails."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    flags = str(sysconfig.get_config_var("CFLAGS") or "").split()
    source = tree / "toolid" / "_native.c"
    command = ["cc", "-shared", "-fPIC", *flags, "-Wall", "-Wextra", "-Werror"]
    command += ["-I", sysconfig.get_paths()["include"], str(source)]
    subprocess.run([*command, "-o", str(source.with_name(f"_native{suffix}"))], check=True)


#: The script of ``--floor``: toolid's hooks, and a stream callable that passes every piece.
FLOOR = Path(__file__).with_name("floor_addon.py")


def _start(script: Path | None, upstream: int, options: dict[str, str]) -> proxy.Mitmdump:
    """Plain mitmdump (``script`` None), or mitmdump with ``script`` (a tree's addon imports
    that tree's toolid)."""
    work = Path(tempfile.mkdtemp(prefix="toolid-sidebyside-"))
    addon = False if script is None else script
    return proxy.Mitmdump(work, upstream, addon=addon, options=options, wait=False)


def main(argv: list[str] | None = None) -> int:
    workloads = {w.id.removeprefix("proxy."): w for w in run.PROXY_WORKLOADS}
    parser = argparse.ArgumentParser(
        prog="python -m bench.sidebyside", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("workload", choices=sorted(workloads))
    parser.add_argument("trees", nargs="+", type=Path, help="directories with toolid/, addons/")
    parser.add_argument("--seconds", type=float, default=6.0, help="per proxy (default 6)")
    parser.add_argument("--build", action="store_true", help="compile each tree's native code")
    parser.add_argument(
        "--floor", action="store_true", help="also a mitmdump with bench/floor_addon.py"
    )
    args = parser.parse_args(argv)
    trees = [tree.resolve() for tree in args.trees]
    for tree in trees:
        if not (tree / "addons" / "toolid_addon.py").is_file():
            parser.error(f"{tree} holds no addons/toolid_addon.py")
        if args.build:
            build(tree)
    workload = workloads[args.workload]
    upstream = proxy.Upstream()
    # Plain mitmdump streams a stream workload's bodies only when told to (the bench's
    # reference); toolid streams them itself, as users run it (``scripts/bench`` likewise).
    reference = {"stream_large_bodies": "1"} if workload.streamed else {}
    scripts = [tree / "addons" / "toolid_addon.py" for tree in trees]
    names = [str(tree) for tree in trees]
    if args.floor:
        scripts.append(FLOOR)
        names.append("floor (a pass-through stream callable)")
    targets = [_start(None, upstream.port, reference)]
    targets += [_start(script, upstream.port, {}) for script in scripts]
    try:
        for target in targets:
            target.ready()
        request = run._request(workload, workload.body())
        results = asyncio.run(
            client.run_alternating(
                run.LOCAL,
                [target.port for target in targets],
                request,
                duration=args.seconds,
                warmup=3,
                min_requests=10,
            )
        )
    finally:
        for target in targets:
            target.stop()
        upstream.stop()
    reference = statistics.median(results[0].latencies)
    print(f"{args.workload}: plain mitmdump {reference * 1e3:.2f} ms per request")
    for name, result in zip(names, results[1:], strict=True):
        median = statistics.median(result.latencies)
        added = (median - reference) * 1e3
        print(f"  {name}: {median * 1e3:.2f} ms, {median / reference:.3f}x, {added:+.2f} ms")
    print(f"  ({len(results[0].latencies)} requests to each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
