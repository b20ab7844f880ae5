#!/usr/bin/env python3
"""Make docs/mitmweb-toolid.png, the README's screenshot of mitmweb with toolid.

Run it with the project's venv (not run by the tests):

    .venv/bin/python scripts/screenshot.py [--out docs/mitmweb-toolid.png]

Needs Chromium (Debian: ``apt-get install -y chromium``; ``fonts-noto-color-emoji`` too, or
toolid's 🔧 flow mark shows as a box); ``pngquant`` or ImageMagick's ``convert``, if present,
shrink the PNG. Loopback only, no API key, about five seconds. The default window, 1680x900,
is just wide enough for the annotated lines of the response in mitmweb's half-width detail
pane (``--window-size`` changes it).

What it does:

1. starts the Kimi K2 stand-in of ``scripts/demo.py`` (OpenAI Chat Completions on
   127.0.0.1, tool-call id ``functions.get_weather:0``);
2. starts ``scripts/proxy --web`` as a reverse proxy in front of it, on free ports, with a
   throwaway confdir, the light theme and a ``comment`` column in the flow list, and reads
   the web UI's ``?token=...`` from mitmweb's startup log (the URL with the token logs the
   browser in);
3. drives the demo's two-turn tool loop through the proxy with the real ``openai`` SDK and a
   client that sanitizes ids (turn 1: toolid encodes the id in the response; turn 2: it
   restores the raw id in the request), and checks that the loop continued;
4. takes a headless Chromium screenshot of ``/?token=...#/flows/<turn-1 flow>/response``:
   the turn-1 flow selected, its response body shown by mitmweb's default ``auto`` view,
   which picks toolid's ``toolid`` contentview for LLM API flows (the script checks that
   through mitmweb's API first);
5. shrinks the PNG and stops everything (process groups, also on errors).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import demo  # noqa: E402  (scripts/demo.py: the stand-in upstream and the tool loop)

PROXY = REPO / "scripts" / "proxy"
DEFAULT_OUT = REPO / "docs" / "mitmweb-toolid.png"
WEB_URL = re.compile(r"Web server listening at (http://\S+/)\?token=([0-9a-f]+)")
COLUMNS = ("icon", "method", "path", "status", "size", "time", "comment")
START_TIMEOUT = 30.0
MAX_BYTES = 250_000


def log(message: str) -> None:
    print(f"screenshot: {message}", file=sys.stderr)


@contextlib.contextmanager
def mitmweb(upstream: str, workdir: Path) -> Iterator[tuple[str, str, str]]:
    """Run ``scripts/proxy --web`` in reverse mode; yield (proxy url, web url, token)."""
    proxy_port, web_port = demo.free_port(), demo.free_port()
    cmd = [
        "bash",
        str(PROXY),
        "--web",
        "--listen-port",
        str(proxy_port),
        "--web-port",
        str(web_port),
        "--mode",
        f"reverse:{upstream}",
        "--set",
        f"confdir={workdir / 'confdir'}",
        "--set",
        "web_theme=light",
    ]
    for column in COLUMNS:
        cmd += ["--set", f"web_columns={column}"]
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    out = workdir / "mitmweb.log"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not (match := WEB_URL.search(out.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"screenshot: mitmweb did not start:\n{out.read_text(errors='replace')}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{proxy_port}", match.group(1), match.group(2)
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def api(web: str, token: str, path: str) -> Any:
    request = urllib.request.Request(web + path, headers={"Authorization": f"Bearer {token}"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return json.load(response)


def turn_one_flow(web: str, token: str) -> str:
    """The id of the flow whose response toolid encoded, after checking what mitmweb shows."""
    deadline = time.monotonic() + 10
    while True:
        flows = api(web, token, "flows.json")
        done = [f for f in flows if f.get("response") and "encoded" in (f.get("comment") or "")]
        if done:
            break
        if time.monotonic() > deadline:
            sys.exit(f"screenshot: no flow with an 'encoded' toolid comment: {flows}")
        time.sleep(0.1)
    for flow in flows:
        log(f"flow {flow['id']}: {flow.get('comment')}")
    flow_id = str(done[0]["id"])
    view = api(web, token, f"flows/{flow_id}/response/content/auto.json")
    if view["view_name"] != "toolid" or demo.RAW_ID not in view["text"]:
        sys.exit(f"screenshot: the auto view is not toolid's: {view}")
    return flow_id


def find_chromium(given: str | None) -> str:
    for candidate in (given, "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    sys.exit("screenshot: Chromium not found (Debian: apt-get install -y chromium), or --chromium")


def screenshot(chromium: str, url: str, out: Path, size: str, workdir: Path) -> None:
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={size}",
        "--virtual-time-budget=5000",  # let the app fetch and render the flows first
        f"--screenshot={out}",
        url,
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        sys.exit("screenshot: Chromium did not finish within 60 s")
    finally:
        stop_group(proc)
    if proc.returncode != 0 or not out.exists():
        sys.exit(f"screenshot: Chromium failed ({proc.returncode}):\n{output.decode()}")


def shrink(png: Path) -> None:
    """Quantize ``png`` in place with pngquant or ImageMagick, when one works and helps."""
    smaller = png.with_name("small.png")
    tools = []
    if pngquant := shutil.which("pngquant"):
        tools.append([pngquant, "--force", "--output", str(smaller), "64", str(png)])
    if convert := shutil.which("convert"):
        tools.append([convert, str(png), "-strip", "-colors", "64", f"PNG8:{smaller}"])
    for cmd in tools:
        smaller.unlink(missing_ok=True)
        done = subprocess.run(cmd, capture_output=True, check=False)
        if done.returncode == 0 and smaller.exists():
            if smaller.stat().st_size < png.stat().st_size:
                smaller.replace(png)
            return
        log(f"{Path(cmd[0]).name} failed; trying the next tool, if any")
    log("the PNG was not shrunk (no working pngquant or ImageMagick convert)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/screenshot.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write")
    parser.add_argument("--chromium", help="the Chromium executable (default: from PATH)")
    parser.add_argument("--window-size", default="1680,900", help="WIDTH,HEIGHT in pixels")
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)

    stand_in = demo.KimiStandIn()
    stand_in.start()
    try:
        with tempfile.TemporaryDirectory(prefix="toolid-screenshot-") as tmp:
            workdir = Path(tmp)
            with mitmweb(stand_in.url, workdir) as (proxy_url, web, token):
                row = demo.run_way(demo.Row("c", "toolid"), proxy_url, stand_in, sanitizing=True)
                if row.error or not row.continued:
                    sys.exit(f"screenshot: the tool loop failed: {row}")
                log(f"client saw {row.saw}; upstream got back {', '.join(row.got_back)}")
                flow_id = turn_one_flow(web, token)
                raw = workdir / "raw.png"
                screenshot(
                    chromium,
                    f"{web}?token={token}#/flows/{flow_id}/response",
                    raw,
                    args.window_size,
                    workdir,
                )
            shrink(raw)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(raw, args.out)
    finally:
        stand_in.stop()
    size = args.out.stat().st_size
    log(f"wrote {args.out} ({size} bytes)")
    if size > MAX_BYTES:
        log(f"warning: larger than {MAX_BYTES} bytes; try a smaller --window-size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
