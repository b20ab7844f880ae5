"""``scripts/run -- COMMAND`` end to end, and two ``scripts/proxy`` side by side.

Each run is ``scripts/run`` as a user types it (a HOME of its own, whose ~/.mitmproxy already
holds a CA), around a real program:

- the openai SDK's own client against a Kimi-style stand-in on 127.0.0.1, through the
  HTTPS_PROXY and NO_PROXY run sets (loopback taken out of the user's NO_PROXY): the client
  sees safe ``tid1_`` ids, the stand-in gets its own ids back, COMMAND's exit status (3)
  passes through, the flows are saved for ``toolid inspect``, and nothing is left: no process
  with that HOME, the proxy's and the status endpoint's ports closed;
- the same in reverse mode, the client at the OPENAI_BASE_URL run sets;
- the same client of an https stand-in (its first turn streamed) with certificate verification
  on, mitmproxy verifying the stand-in's certificate: the bundle run makes holds the system's
  CAs and mitmproxy's;
- the real Claude Code CLI, headless, with an https ANTHROPIC_BASE_URL and no proxy or CA
  variable of its own (marker ``agent``);
- in a real terminal (util-linux ``script``): COMMAND sees a tty on stdin and stdout, owns
  its foreground process group (run is in another one), gets a Ctrl-C once and the proxy
  goes on serving; SIGTERM to scripts/run ends COMMAND (143) and the proxy;
- a proxy that refuses to start (every interface, no proxyauth): run shows its log's end and
  never starts COMMAND.

Every wait is on an event: a process's exit, a line in a file or a pipe.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from standin import FINAL_TEXT, ReuseUpstream, UpstreamServer

from toolid import _run, encode

from .agents_common import (
    REUSED_ACROSS_TURNS,
    RUN_TIMEOUT,
    AgentRun,
    check_through_toolid,
    stop_leftovers,
)
from .conftest import REPO_ROOT, Mitmdump, free_port
from .helpers import check_loop_bytes, check_upstream_got_its_own_ids, run_headless, wire_loop
from .test_e2e_claude_code import CLAUDE

pytestmark = pytest.mark.e2e

BASH = shutil.which("bash") or "/bin/bash"
SCRIPT = shutil.which("script")
RUN = REPO_ROOT / "scripts" / "run"
TIMEOUT = 90.0  # seconds for one run of a quick COMMAND
START_TIMEOUT = 30.0  # seconds for a proxy to listen
RAW = "functions.get_weather:0"
STATUS_LINE = re.compile(r"toolid: status endpoint on http://127\.0\.0\.1:(\d+)/healthz")
PROXY_LINE = re.compile(r"toolid: proxy at http://127\.0\.0\.1:(\d+), log (\S+)")

# COMMAND for the SDK runs: a two-turn tool loop with the openai SDK's default client: the proxy
# and the CA come from the environment only. argv: the base URL ($NAME expanded), the exit
# status, "stream" to stream the first turn. Prints the call ids it saw, the final text, and how
# many CAs its default SSL context trusts (mitmproxy's among them).
CLIENT = """
import json, os, ssl, sys
import openai
base_url, status, stream = os.path.expandvars(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
client = openai.OpenAI(base_url=base_url, api_key="sk-e2e", max_retries=0)
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
messages = [{"role": "user", "content": "What's the weather in Paris?"}]
ask = {"model": "kimi-k2", "messages": messages, "tools": tools}
calls = {}
if stream:
    for chunk in client.chat.completions.create(**ask, stream=True):
        for tc in [tc for c in chunk.choices for tc in c.delta.tool_calls or []]:
            call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += tc.id or ""
            call["name"] += (tc.function and tc.function.name) or ""
            call["arguments"] += (tc.function and tc.function.arguments) or ""
else:
    for n, tc in enumerate(client.chat.completions.create(**ask).choices[0].message.tool_calls):
        calls[n] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
made = [{"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls.values()]
messages.append({"role": "assistant", "content": None, "tool_calls": made})
messages += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in made]
final = client.chat.completions.create(model="kimi-k2", messages=messages, tools=tools)
cas = ssl.create_default_context().get_ca_certs()
ours = sum("mitmproxy" in str(ca["subject"]) for ca in cas)
text = final.choices[0].message.content
seen = {"call_ids": [c["id"] for c in made], "final_text": text}
seen |= {"cas": len(cas), "mitmproxy_cas": ours}
print(json.dumps(seen))
sys.exit(status)
"""


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without proxy and CA variables, with ``home`` as HOME."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    for name in ("TOOLID_DRY_RUN", "XDG_STATE_HOME", "NODE_EXTRA_CA_CERTS"):
        env.pop(name, None)
    for name in (*_run.BUNDLE_VARIABLES, *_run.IF_SET_VARIABLES):
        env.pop(name, None)
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def home_with_ca(tmp_path: Path, proxy: Mitmdump) -> Path:
    """A HOME whose ~/.mitmproxy holds a CA already (``proxy``'s), as after a first start."""
    home = tmp_path / "home"
    (home / ".mitmproxy").mkdir(parents=True)
    for pem in proxy.confdir.glob("mitmproxy-ca*"):
        shutil.copy2(pem, home / ".mitmproxy" / pem.name)
    return home


def accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` accepts a connection."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Ran:
    """One ``scripts/run``: its exit status, COMMAND's stdout, run's stderr, and the ports
    and log file it named."""

    returncode: int
    stdout: str
    stderr: str
    home: Path

    @property
    def log(self) -> Path:
        match = PROXY_LINE.search(self.stderr)
        assert match is not None, self.stderr
        return Path(match.group(2))

    @property
    def ports(self) -> list[int]:
        """The proxy's port and the status endpoint's."""
        proxy = PROXY_LINE.search(self.stderr)
        status = STATUS_LINE.search(self.log.read_text())
        assert proxy is not None and status is not None, (self.stderr, self.log.read_text())
        return [int(proxy.group(1)), int(status.group(1))]

    def check_nothing_left(self) -> None:
        """No process runs with its HOME (the proxy, COMMAND) and its ports are closed."""
        left = stop_leftovers(self.home)
        assert not left, f"processes {left} were left running (killed now)"
        for port in self.ports:
            assert not accepts(port), f"port {port} still accepts connections"


def scripts_run(home: Path, *args: str, env: dict[str, str] | None = None) -> Ran:
    """``scripts/run ARGS`` (options, --, COMMAND) in a session of its own (no terminal)."""
    done = subprocess.run(
        [BASH, str(RUN), *args],
        cwd=home,
        env=env or clean_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        start_new_session=True,
        check=False,
    )
    return Ran(done.returncode, done.stdout, done.stderr, home)


# ----------------------------------------------------------------------------- around an SDK


def test_an_sdk_client_through_scripts_run(tmp_path: Path, proxy: Mitmdump) -> None:
    """As an HTTPS proxy, in front of a stand-in on 127.0.0.1 (which the user's NO_PROXY
    lists): the client sees the safe id, the stand-in its own; exit status 3; the flows
    saved; the summary's counts; nothing left."""
    home = home_with_ca(tmp_path, proxy)
    env = clean_env(home) | {"NO_PROXY": "localhost,127.0.0.1,::1,.internal", "no_proxy": "::1"}
    saved = tmp_path / "session.flows"
    with ReuseUpstream(ids=[RAW], name="get_weather", turns=1) as up:
        client = [sys.executable, "-c", CLIENT, up.sdk_url("chat"), "3"]
        ran = scripts_run(home, "--save", str(saved), "--", *client, env=env)
    assert ran.returncode == 3, ran.stderr
    seen = json.loads(ran.stdout)
    assert seen["call_ids"] == [encode(RAW)] and seen["final_text"] == FINAL_TEXT, seen
    check_upstream_got_its_own_ids(up.model_requests("chat"), "chat", RAW, turns=1)
    assert "2 flows; ids 1 encoded, 2 restored, 0 tagged, 0 minted; 0 repairs" in ran.stderr
    assert "no pairing problems; no upstream rejections" in ran.stderr
    assert f"flows saved in {saved}" in ran.stderr and f"log {ran.log}" in ran.stderr
    assert "toolid: 1 encoded" in ran.log.read_text()  # the proxy's own lines: in its log
    ran.check_nothing_left()
    inspected = subprocess.run(
        [sys.executable, "-m", "toolid", "inspect", str(saved)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )
    assert RAW in inspected.stdout and encode(RAW) in inspected.stdout, inspected


def test_reverse_mode_gives_the_base_urls(tmp_path: Path, proxy: Mitmdump) -> None:
    """``--mode reverse:URL``: the client, at $OPENAI_BASE_URL, reaches the stand-in through
    toolid; exit status 0."""
    home = home_with_ca(tmp_path, proxy)
    with ReuseUpstream(ids=[RAW], name="get_weather", turns=1) as up:
        client = [sys.executable, "-c", CLIENT, "$OPENAI_BASE_URL", "0"]
        ran = scripts_run(home, "--mode", f"reverse:{up.base_url}", "--", *client)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["call_ids"] == [encode(RAW)]
    check_upstream_got_its_own_ids(up.model_requests("chat"), "chat", RAW, turns=1)
    ran.check_nothing_left()


def test_an_https_upstream_with_verification_on(tmp_path: Path, proxy: Mitmdump) -> None:
    """A TLS stand-in whose certificate mitmproxy verifies (ssl_verify_upstream_trusted_ca),
    the client verifying mitmproxy's through the bundle run made: the system's CAs and
    mitmproxy's."""
    home = home_with_ca(tmp_path, proxy)
    with ReuseUpstream(ids=[RAW], name="get_weather", turns=1, tls_dir=tmp_path / "tls") as up:
        cert = up.server.cert_path
        assert cert is not None
        client = [sys.executable, "-c", CLIENT, up.sdk_url("chat"), "0", "stream"]
        ran = scripts_run(home, "--set", f"ssl_verify_upstream_trusted_ca={cert}", "--", *client)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert seen["call_ids"] == [encode(RAW)], seen
    check_upstream_got_its_own_ids(up.model_requests("chat"), "chat", RAW, turns=1)
    system = _run.system_bundle(clean_env(home))
    assert system is not None
    assert seen["mitmproxy_cas"] == 1
    assert seen["cas"] == system.read_text().count("BEGIN CERTIFICATE") + 1, seen
    ran.check_nothing_left()


# ----------------------------------------------------------------------------- Claude Code


@pytest.mark.agent
def test_claude_code_headless_through_scripts_run(tmp_path: Path, proxy: Mitmdump) -> None:
    """``scripts/run -- claude -p ...`` with an https ANTHROPIC_BASE_URL and no proxy or CA
    variable of Claude Code's own: an id reused across turns, rewritten; nothing left."""
    home = home_with_ca(tmp_path, proxy)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / f"{name}.txt").write_text(f"{name}\n")
    scenario = REUSED_ACROSS_TURNS
    with CLAUDE.upstream(scenario, tls_dir=tmp_path / "tls") as up:
        assert up.server.cert_path is not None
        env = {"PATH": os.environ["PATH"], "HOME": str(home)}
        env |= CLAUDE.configure(home, work, up.sdk_url(CLAUDE.api))
        options = ["--set", f"ssl_verify_upstream_trusted_ca={up.server.cert_path}"]
        # other hosts (Claude Code's own services) get their connection closed
        options += ["--set", "connection_strategy=lazy", "--set", "block_list=/!~d 127.0.0.1/444"]
        command = [BASH, str(RUN), *options, "--", *CLAUDE.command(home, work)]
        run = AgentRun(run_headless(command, work, env, RUN_TIMEOUT), home, work)
    left = stop_leftovers(home)
    assert not left, f"processes {left} were left running (killed now)"
    assert "toolid: proxy at http://127.0.0.1:" in run.headless.stderr, run.headless.stderr
    check_through_toolid(CLAUDE, scenario, run, up)
    # the three turns' calls: one encoded id, then two tagged; 2 + 4 + 6 ids restored
    assert "ids 1 encoded, 12 restored, 2 tagged, 0 minted" in run.headless.stderr


# ----------------------------------------------------------------------------- a terminal

# COMMAND in a terminal: prints whether it has a tty and owns the foreground; takes one
# SIGINT (the terminal's Ctrl-C) by sigwait, then asks the stand-in (HEAD URL) through the
# proxy, and prints the SIGINTs still pending (a second one passed on by run would be); or,
# given "wait", waits for any signal, which ends it.
IN_TERMINAL = """
import json, os, signal, sys, urllib.request
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
print(json.dumps({"tty": [os.isatty(0), os.isatty(1)],
                  "foreground": os.tcgetpgrp(0) == os.getpgrp(),
                  "own_group": os.getpgid(os.getppid()) != os.getpgrp(),
                  "run": os.getppid()}), flush=True)
print("ready", flush=True)
if sys.argv[1] == "wait":
    signal.pause()
signal.sigwait({signal.SIGINT})
request = urllib.request.Request(sys.argv[2], method="HEAD")
answer = urllib.request.urlopen(request, timeout=30).status
print(json.dumps({"answer": answer, "pending": sorted(signal.sigpending())}), flush=True)
"""


@contextlib.contextmanager
def in_terminal(home: Path, command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """``scripts/run -- COMMAND`` in a terminal of its own (util-linux ``script``: a pty it
    makes the controlling terminal of a new session); the test types on its stdin."""
    if SCRIPT is None:
        pytest.skip("no script(1) (util-linux) here")
    line = " ".join(map(_quote, [BASH, str(RUN), "--", *command]))
    proc = subprocess.Popen(
        [SCRIPT, "-q", "-e", "-c", line, "/dev/null"],
        cwd=home,
        env=clean_env(home) | {"SHELL": BASH},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def read_until(proc: subprocess.Popen[bytes], needle: bytes, seen: bytearray) -> None:
    """Read ``proc``'s output into ``seen`` until ``needle`` is in it."""
    assert proc.stdout is not None
    deadline = time.monotonic() + TIMEOUT
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, bytes(seen)
        ready, _, _ = select.select([proc.stdout], [], [], left)
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        assert chunk or ready == [], f"the terminal closed: {bytes(seen)!r}"
        seen += chunk


def json_lines(output: bytes) -> list[dict[str, object]]:
    """The JSON objects COMMAND printed on the terminal (which echoes a Ctrl-C as ^C)."""
    lines = output.decode().splitlines()
    return [json.loads(line[line.index("{") :]) for line in lines if "{" in line]


def test_in_a_terminal_the_command_owns_it_and_gets_ctrl_c_once(
    tmp_path: Path, proxy: Mitmdump
) -> None:
    home = home_with_ca(tmp_path, proxy)
    seen = bytearray()
    with ReuseUpstream() as up:
        command = [sys.executable, "-c", IN_TERMINAL, "ctrl-c", f"{up.base_url}/"]
        with in_terminal(home, command) as proc:
            read_until(proc, b"ready", seen)
            assert proc.stdin is not None
            proc.stdin.write(b"\x03")  # Ctrl-C, typed on the terminal
            proc.stdin.flush()
            read_until(proc, b"toolid: log ", seen)
            assert proc.wait(TIMEOUT) == 0, bytes(seen)
        assert [r.method for r in up.requests] == ["HEAD"]  # through toolid, after Ctrl-C
    facts, after = json_lines(bytes(seen))
    assert facts["tty"] == [True, True] and facts["foreground"] and facts["own_group"], facts
    assert after == {"answer": 200, "pending": []}, after  # served; no second SIGINT


def test_sigterm_to_scripts_run_ends_the_command_and_the_proxy(
    tmp_path: Path, proxy: Mitmdump
) -> None:
    home = home_with_ca(tmp_path, proxy)
    seen = bytearray()
    with in_terminal(home, [sys.executable, "-c", IN_TERMINAL, "wait"]) as proc:
        read_until(proc, b"ready", seen)
        (facts,) = json_lines(bytes(seen))
        run = facts["run"]
        assert isinstance(run, int)
        os.kill(run, signal.SIGTERM)
        read_until(proc, b"toolid: log ", seen)
        assert proc.wait(TIMEOUT) == 128 + signal.SIGTERM, bytes(seen)
    text = bytes(seen).decode()
    ran = Ran(128 + signal.SIGTERM, "", text, home)
    ran.check_nothing_left()


# ----------------------------------------------------------------------------- failing


def test_a_proxy_that_refuses_to_start_runs_nothing(tmp_path: Path, proxy: Mitmdump) -> None:
    home = home_with_ca(tmp_path, proxy)
    marker = tmp_path / "ran"
    ran = scripts_run(home, "--listen-host", "0.0.0.0", "--", "touch", str(marker))
    assert ran.returncode == 1, ran.stderr
    assert "toolid: the proxy did not start (exit status 1)" in ran.stderr
    assert "refusing to listen on 0.0.0.0 without proxyauth" in ran.stderr
    assert not marker.exists()
    assert not stop_leftovers(home)


# ----------------------------------------------------------------------------- two proxies


@dataclass
class Started:
    """A ``scripts/proxy`` started by a test: its process and its output file."""

    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_bytes().decode("utf-8", "replace")

    def wait_for(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first match of ``pattern`` in the output, once it is there."""
        deadline = time.monotonic() + START_TIMEOUT
        while (match := pattern.search(self.text())) is None:
            assert self.proc.poll() is None, f"scripts/proxy exited:\n{self.text()}"
            assert time.monotonic() < deadline, f"not in the output:\n{self.text()}"
            time.sleep(0.05)
        return match


@contextlib.contextmanager
def scripts_proxy(tmp_path: Path, home: Path, *args: str) -> Iterator[Started]:
    """``scripts/proxy ARGS`` in its own session, stopped (SIGTERM) at the end."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [BASH, str(REPO_ROOT / "scripts" / "proxy"), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=clean_env(home),
            start_new_session=True,
        )
    started = Started(proc, log)
    try:
        yield started
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


LISTENING = re.compile(r"HTTP\(S\) proxy listening at 127\.0\.0\.1:(\d+)\.")


def test_two_default_proxies_run_side_by_side(
    tmp_path: Path, proxy: Mitmdump, upstream: UpstreamServer
) -> None:
    """Two ``scripts/proxy`` at once with their defaults (but the listen port), sharing one
    HOME and CA: each starts, announces a status endpoint of its own, and rewrites."""
    home = home_with_ca(tmp_path, proxy)
    with (
        scripts_proxy(tmp_path / "one", home, "--listen-port", str(free_port())) as one,
        scripts_proxy(tmp_path / "two", home, "--listen-port", str(free_port())) as two,
    ):
        ports = [int(started.wait_for(LISTENING).group(1)) for started in (one, two)]
        statuses = {started.wait_for(STATUS_LINE).group(1) for started in (one, two)}
        assert len(statuses) == 2, statuses
        for port in ports:
            handle = upstream.scenario(ids=[RAW])
            with httpx.Client(proxy=f"http://127.0.0.1:{port}", trust_env=False) as client:
                result = wire_loop(client, handle, "chat", stream=True)
            check_loop_bytes(result, handle)
