#!/usr/bin/env python3
"""toolid demo: why Kimi K2 stops calling tools behind a strict client, and the fix.

Run it with ``scripts/demo`` (which bootstraps the project's .venv), or directly with the
venv's python: ``.venv/bin/python scripts/demo.py``. Loopback only, no API key, a few
seconds.

A stand-in for Kimi K2 served by vLLM (an HTTP server on 127.0.0.1) answers a two-turn
tool loop driven by the real ``openai`` SDK, three ways:

a. direct: a lax client that keeps ids as they are. The loop works, but the agent holds
   the id ``functions.get_weather:0``, which strict (Anthropic-style) clients reject.
b. direct, through a sanitizing client that replaces every character outside
   ``[A-Za-z0-9_-]`` with ``_``: the upstream gets ``functions_get_weather_0`` back, a
   corrupted copy of its own id, and ends the turn empty. The loop dies.
c. the same sanitizing client, through a real ``mitmdump -s addons/toolid_addon.py``
   reverse proxy: the client sees a safe id that sanitizing leaves alone, toolid restores
   the exact id on the way back, the loop continues.

Exit status 0 when a and c continue and b dies, 1 otherwise (with the reason on stderr).
``TOOLID_DEMO_ADDON=/path/to/script.py`` loads another addon script in way c (the tests
use an empty one to check that the demo fails without toolid).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:
    import openai
except ImportError:
    sys.exit("toolid demo: the openai package is missing; run scripts/demo (it sets up .venv)")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ADDON = REPO / "addons" / "toolid_addon.py"
ADDON_ENV = "TOOLID_DEMO_ADDON"

MODEL = "moonshotai/Kimi-K2-Instruct"
RAW_ID = "functions.get_weather:0"  # what Kimi K2 on vLLM emits
FINAL_ANSWER = "It is 21°C in Paris."
PROMPT = "What's the weather in Paris?"
SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
START_TIMEOUT = 30.0  # seconds for mitmdump to start listening
REQUEST_TIMEOUT = 15.0


class DemoError(Exception):
    """Something went wrong in one way of the demo (not an expected outcome)."""


def sanitize(tool_call_id: str) -> str:
    """What strict agents and gateways do to ids: a lossy, irreversible rewrite."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", tool_call_id)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ----------------------------------------------------------------- the stand-in upstream


@dataclass
class Received:
    """One request the stand-in upstream answered."""

    turn: int
    emitted: str = ""  # turn 1: the tool-call id it sent
    got_back: list[str] = field(default_factory=list)  # turn 2: ids it was sent back
    reply: str = ""  # turn 2: the answer it gave


class KimiStandIn:
    """Kimi K2 on vLLM, as far as this demo needs: OpenAI Chat Completions, not streamed.

    Turn 1 (no tool results in the messages) calls ``get_weather`` with the id
    ``functions.get_weather:0``. Turn 2 answers only if every id it gets back is exactly
    that id; given a corrupted copy it returns an empty assistant turn, as Kimi does.
    """

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if self.path.split("?", 1)[0] != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route for {self.path}"}})
                    return
                try:
                    request = json.loads(body)
                    status, answer = stand_in.answer(request)
                except (ValueError, TypeError, AttributeError) as exc:
                    status, answer = 400, {"error": {"message": f"bad request: {exc}"}}
                self._send(status, answer)

            def _send(self, status: int, obj: dict[str, Any]) -> None:
                # vLLM (pydantic) writes compact JSON with raw UTF-8.
                data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="kimi-stand-in", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join(5)
        self.server.server_close()

    def answer(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if request.get("stream"):
            return 400, {"error": {"message": "this stand-in does not stream"}}
        got_back: list[str] = []
        has_tool_result = False
        for message in request.get("messages") or []:
            for call in message.get("tool_calls") or []:
                got_back.append(call.get("id"))
            if message.get("role") == "tool":
                has_tool_result = True
                got_back.append(message.get("tool_call_id"))
        if not has_tool_result:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": RAW_ID,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            }
            record = Received(turn=1, emitted=RAW_ID)
            finish = "tool_calls"
        else:
            # Kimi recognises only its own ids; a corrupted copy ends the turn empty.
            recognised = all(tool_call_id == RAW_ID for tool_call_id in got_back)
            reply = FINAL_ANSWER if recognised else ""
            message = {"role": "assistant", "content": reply, "tool_calls": []}
            record = Received(turn=2, got_back=got_back, reply=reply)
            finish = "stop"
        with self._lock:
            self.received.append(record)
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 61, "completion_tokens": 17, "total_tokens": 78},
        }

    def since(self, start: int) -> list[Received]:
        with self._lock:
            return list(self.received[start:])


# ----------------------------------------------------------------- mitmdump + toolid


@contextlib.contextmanager
def toolid_proxy(addon: Path, upstream: str, workdir: Path) -> Iterator[tuple[str, Path]]:
    """Run ``mitmdump -s <addon>`` as a reverse proxy to ``upstream``; yield (url, log)."""
    mitmdump = Path(sys.executable).parent / "mitmdump"
    if not mitmdump.exists():
        raise DemoError(f"{mitmdump} is missing (run the demo with scripts/demo)")
    if not addon.is_file():
        raise DemoError(f"the addon script {addon} does not exist")
    port = free_port()
    log = workdir / "mitmdump.log"
    cmd = [
        str(mitmdump),
        "-s",
        str(addon),
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        str(port),
        "--mode",
        f"reverse:{upstream}",
        "--set",
        f"confdir={workdir / 'mitmproxy'}",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with log.open("wb") as out:
        # A session of its own: Ctrl-C reaches only this script, which stops mitmdump.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise DemoError(f"mitmdump exited with status {proc.returncode}:\n{tail(log)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"mitmdump did not listen on port {port} within {START_TIMEOUT:.0f} s"
                    ) from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", log
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("    " + line for line in text.splitlines()[-lines:]) or "    (empty log)"


# ----------------------------------------------------------------- the agent's tool loop


@dataclass
class Row:
    """One way through the demo, as the table shows it."""

    key: str
    name: str
    emitted: str = ""
    saw: str = ""
    replayed: str = ""
    got_back: list[str] = field(default_factory=list)
    reply: str = ""
    continued: bool = False
    error: str = ""


def run_way(row: Row, base_url: str, stand_in: KimiStandIn, *, sanitizing: bool) -> Row:
    """The two-turn tool loop with the openai SDK, filling ``row`` as it goes."""
    start = len(stand_in.since(0))
    try:
        client = openai.OpenAI(
            base_url=f"{base_url}/v1",
            api_key="no-key-needed",
            max_retries=0,
            timeout=REQUEST_TIMEOUT,
            http_client=openai.DefaultHttpxClient(trust_env=False),  # ignore *_PROXY
        )
        with client:
            messages: list[Any] = [{"role": "user", "content": PROMPT}]
            first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            message = first.choices[0].message
            if not message.tool_calls:
                raise DemoError("turn 1 returned no tool call")
            call: Any = message.tool_calls[0]
            row.saw = call.id
            row.replayed = sanitize(call.id) if sanitizing else call.id
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    "tool_calls": [
                        {
                            "id": row.replayed,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                    ],
                }
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": row.replayed,
                    "content": '{"city": "Paris", "temperature_c": 21}',
                }
            )
            second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            answer = second.choices[0].message
            row.reply = answer.content or ""
            row.continued = bool(row.reply.strip() or answer.tool_calls)
    except Exception as exc:  # report any failure in the row, keep the demo going
        row.error = f"{type(exc).__name__}: {exc}"
    for received in stand_in.since(start):
        if received.turn == 1:
            row.emitted = received.emitted
        else:
            row.got_back = received.got_back
    return row


# ----------------------------------------------------------------- output


WAY_W, HOP_W, ID_W = 12, 17, 32


def show(value: str) -> str:
    return value if SAFE_ID.fullmatch(value) else f"{value} (unsafe)"


def table(rows: list[Row]) -> str:
    def line(way: str, hop: str, value: str, cont: str = "") -> str:
        return f"{way:<{WAY_W}}  {hop:<{HOP_W}}  {value:<{ID_W}}  {cont}".rstrip()

    out = [
        line("way", "hop", "tool-call id", "continued?"),
        line("-" * WAY_W, "-" * HOP_W, "-" * ID_W, "-" * 10),
    ]
    for i, row in enumerate(rows):
        if i:
            out.append("")
        back = ", ".join(dict.fromkeys(row.got_back)) or "-"
        reply = json.dumps(row.reply, ensure_ascii=False) if row.got_back else "-"
        if row.got_back and not row.reply:
            reply += " (empty turn)"
        cont = "error" if row.error else ("yes" if row.continued else "no")
        out.append(line(f"{row.key}. {row.name}", "upstream emitted", row.emitted or "-", cont))
        out.append(line("", "client saw", show(row.saw) if row.saw else "-"))
        out.append(line("", "client replayed", row.replayed or "-"))
        out.append(line("", "upstream got back", back))
        out.append(line("", "turn-2 reply", reply))
    return "\n".join(out)


LEGEND = """\
toolid demo: Kimi K2 on vLLM (a local stand-in) and a two-turn tool loop
  a. direct     a lax client talks to the upstream and keeps ids as they are
  b. sanitizer  the client forces ids into [A-Za-z0-9_-], like strict agents
  c. toolid     the same sanitizing client, through mitmdump + toolid
"""

EXPLANATION = """\
b: the sanitizer hands Kimi a corrupted copy of its own id; Kimi ends the turn.
c: toolid gives the client a safe id and the upstream its exact id back."""


def problems(rows: dict[str, Row]) -> list[str]:
    """Why the outcomes are not the expected ones (empty when they are)."""
    found = [f"{row.key}. {row.name}: {row.error}" for row in rows.values() if row.error]
    a, b, c = rows["a"], rows["b"], rows["c"]
    if not a.error and not a.continued:
        found.append("a. direct: the loop died, though the upstream got its own id back")
    if not b.error and b.continued:
        found.append("b. sanitizer: the loop continued with a corrupted id")
    if not c.error:
        if not c.continued:
            found.append("c. toolid: the loop died: the proxy did not keep the id intact")
        if c.saw and not SAFE_ID.fullmatch(c.saw):
            found.append(f"c. toolid: the client saw the unsafe id {c.saw!r}")
        if c.got_back and set(c.got_back) != {RAW_ID}:
            back = ", ".join(dict.fromkeys(c.got_back))
            found.append(f"c. toolid: the upstream got back {back}, not {RAW_ID}")
    return found


# ----------------------------------------------------------------- main


def _stop_on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/demo",
        description="Show, on loopback, how toolid keeps Kimi K2's tool loop alive behind "
        "a client that sanitizes tool-call ids.",
        epilog=f"{ADDON_ENV}=PATH loads another addon script instead of "
        f"{DEFAULT_ADDON.relative_to(REPO)} in way c.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print mitmdump's log at the end"
    )
    args = parser.parse_args(argv)
    addon = Path(os.environ.get(ADDON_ENV) or DEFAULT_ADDON)
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)

    stand_in = KimiStandIn()
    rows = {
        "a": Row("a", "direct"),
        "b": Row("b", "sanitizer"),
        "c": Row("c", "toolid"),
    }
    log: Path | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="toolid-demo-") as tmp:
            stand_in.start()
            run_way(rows["a"], stand_in.url, stand_in, sanitizing=False)
            run_way(rows["b"], stand_in.url, stand_in, sanitizing=True)
            try:
                with toolid_proxy(addon, stand_in.url, Path(tmp)) as (proxy_url, log):
                    run_way(rows["c"], proxy_url, stand_in, sanitizing=True)
            except DemoError as exc:
                rows["c"].error = str(exc)
            mitm_log = tail(log, 10_000) if log else ""
    except KeyboardInterrupt:
        print("\ntoolid demo: interrupted", file=sys.stderr)
        return 130
    finally:
        stand_in.stop()

    print(LEGEND)
    print(table(list(rows.values())))
    print()
    print(EXPLANATION)
    if args.verbose and mitm_log:
        print(f"\nmitmdump log:\n{mitm_log}")
    found = problems(rows)
    if found:
        print("\ntoolid demo FAILED:", *found, sep="\n  ", file=sys.stderr)
        if addon != DEFAULT_ADDON:
            print(f"  (way c loaded {addon} from ${ADDON_ENV})", file=sys.stderr)
        if mitm_log and not args.verbose:
            print(f"  mitmdump log (last lines):\n{tail_text(mitm_log)}", file=sys.stderr)
        return 1
    print("\nOK: a and c continued, b died, as expected.")
    return 0


def tail_text(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


if __name__ == "__main__":
    sys.exit(main())
