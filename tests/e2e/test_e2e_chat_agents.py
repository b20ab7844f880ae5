"""End to end with real agents on Chat Completions: the Cline CLI and kimi-cli, headless, each
running the loops of ``agent_loops.py`` against the Kimi-style stand-in.

Through a reverse-mode mitmdump with toolid each agent completes every loop, keeps one distinct
safe id per call, and the stand-in only ever gets its own raw id back. Without toolid (the agent
at the stand-in itself), Cline merges two parallel calls with one id into one call and joins
their arguments, which its tool then rejects as invalid JSON; kimi-cli does not break, but keeps
the raw id, unsafe, and one identity for every call of the run. Through toolid as an HTTPS
proxy, each agent trusts mitmproxy's CA through the variable its runtime reads.

What the agent kept: Cline's stored session (``~/.cline/data/sessions/*/*.messages.json``, the
history it replays: its ``tool_use`` and ``tool_result`` blocks) and kimi-cli's
``--output-format stream-json`` output (every message of its history, as it sends it).

Each agent (pinned) is installed by the first run into the cache of ``cache.py``; later runs
reuse it. Cline runs with ``CLINE_SESSION_BACKEND_MODE=local``: in its default mode it starts a
detached "hub" daemon on a fixed port, which concurrent runs would share; every run also stops,
and fails on, any process left running with its HOME.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolid import codec

from .agent_loops import (
    LOOPS,
    THREE_TURNS,
    Loop,
    check_through_toolid,
    https_front,
    https_proxy,
    kimi_id,
    model_requests,
    origin,
    proxy_env,
    stop_leftovers,
)
from .cache import npm_bin, venv
from .conftest import MitmdumpPool
from .helpers import Headless, run_headless
from .reuse_upstream import FINAL_TEXT, count_tool_results

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

RUN_TIMEOUT = 60.0  # seconds for one headless run, after which it is killed
PROMPT = "Which .txt files are in this directory? Use a tool."


@dataclass
class Kept:
    """What an agent kept of a run: its calls' ids, the ids its tool results name, the texts
    of the results it marked as errors, and its final answer."""

    calls: list[str]
    results: list[str]
    errors: list[str]
    final_text: str | None


@dataclass(frozen=True)
class Agent:
    """How to run one agent headless against a Chat Completions base URL."""

    name: str
    tool: str  # the tool the stand-in calls, with ``arguments``
    arguments: str
    executable: Callable[[], Path]  # installs (once per machine) and returns it
    # (exe, home, work, base URL): writes its config, returns the command line
    command: Callable[[Path, Path, Path, str], list[str]]
    env: dict[str, str]
    kept: Callable[[Path, Headless], Kept]  # (home, run)
    ca_variable: str  # the CA variable its runtime reads, as an HTTPS proxy's client
    merges_parallel_calls: bool  # without toolid, two calls with one id become one

    def __str__(self) -> str:
        return self.name


# ----------------------------------------------------------------------------- Cline


def cline_command(exe: Path, home: Path, work: Path, base_url: str) -> list[str]:
    """What ``cline auth -p openai-compatible -k KEY -m kimi-k2 -b URL`` writes (``updatedAt``
    included: without it Cline ignores the provider), with its telemetry and updates off."""
    settings = home / ".cline" / "data" / "settings"
    settings.mkdir(parents=True)
    provider = {
        "settings": {
            "provider": "openai-compatible",
            "apiKey": "sk-e2e",
            "model": "kimi-k2",
            "baseUrl": base_url,
        },
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "tokenSource": "manual",
    }
    providers = {
        "version": 1,
        "lastUsedProvider": "openai-compatible",
        "modes": {},
        "providers": {"openai-compatible": provider},
    }
    (settings / "providers.json").write_text(json.dumps(providers))
    global_settings = {"telemetryOptOut": True, "autoUpdateEnabled": False}
    (settings / "global-settings.json").write_text(json.dumps(global_settings))
    return [str(exe), "--json", "-c", str(work), PROMPT]


def cline_kept(home: Path, ran: Headless) -> Kept:
    messages = [
        m
        for path in sorted((home / ".cline" / "data" / "sessions").glob("*/*.messages.json"))
        for m in json.loads(path.read_text())["messages"]
    ]
    blocks = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    final = [
        e["text"]
        for e in ran.events
        if e.get("type") == "run_result" and e.get("finishReason") == "completed"
    ]
    return Kept(
        calls=[b["id"] for b in blocks if b.get("type") == "tool_use"],
        results=[b["tool_use_id"] for b in results],
        errors=[str(b["content"]) for b in results if b.get("is_error")],
        final_text=final[-1] if final else None,
    )


# ----------------------------------------------------------------------------- kimi-cli


def kimi_command(exe: Path, home: Path, work: Path, base_url: str) -> list[str]:
    config = home / "kimi.toml"
    config.write_text(
        'default_model = "standin"\n\n[providers.standin]\ntype = "kimi"\n'
        f'base_url = "{base_url}"\napi_key = "sk-e2e"\n\n[models.standin]\n'
        'provider = "standin"\nmodel = "kimi-k2"\nmax_context_size = 131072\n'
    )
    return [
        str(exe),
        *("--print", "--output-format", "stream-json", "--config-file", str(config)),
        *("-w", str(work), "-p", PROMPT),
    ]


def kimi_kept(home: Path, ran: Headless) -> Kept:
    said = [e for e in ran.events if e.get("role") == "assistant"]
    return Kept(
        calls=[c["id"] for e in said for c in e.get("tool_calls") or []],
        results=[e["tool_call_id"] for e in ran.events if e.get("role") == "tool"],
        errors=[],  # it marks none; a failed tool's text is in its result
        final_text=next((e["content"] for e in said[::-1] if isinstance(e["content"], str)), None),
    )


AGENTS = [
    Agent(
        name="cline",
        tool="run_commands",
        arguments='{"commands": ["ls"]}',
        executable=lambda: npm_bin("cline", "3.0.65", "cline"),
        command=cline_command,
        env={"CLINE_SESSION_BACKEND_MODE": "local"},
        kept=cline_kept,
        ca_variable="NODE_EXTRA_CA_CERTS",
        merges_parallel_calls=True,
    ),
    Agent(
        name="kimi-cli",
        tool="Glob",
        arguments='{"pattern": "*.txt"}',
        executable=lambda: venv("kimi-cli", ["kimi-cli==1.50.0"]) / "bin" / "kimi",
        command=kimi_command,
        env={},
        kept=kimi_kept,
        ca_variable="SSL_CERT_FILE",
        merges_parallel_calls=False,
    ),
]


# ----------------------------------------------------------------------------- running


@dataclass
class Run:
    """One headless run of an agent, what it kept, and the processes it left running."""

    ran: Headless
    kept: Kept
    leftovers: list[int]

    def summary(self) -> str:
        return (
            f"exit {self.ran.returncode} after {self.ran.seconds:.1f}s, kept {self.kept!r}, "
            f"left {self.leftovers!r}; stderr: {self.ran.stderr[-1500:]}"
        )


def run_agent(
    agent: Agent,
    base_url: str,
    tmp_path: Path,
    *,
    https_proxy: str | None = None,
    ca_cert: Path | None = None,
) -> Run:
    """``agent`` headless in a temp HOME and working directory holding three .txt files, its
    base URL at ``base_url``, stdin from /dev/null, killed after RUN_TIMEOUT. Every other
    destination is sent to a closed port, or, given ``https_proxy``, everything goes through
    that proxy, trusting ``ca_cert`` through the agent's CA variable."""
    exe = agent.executable()
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / f"{name}.txt").write_text(f"{name}\n")
    cmd = agent.command(exe, home, work, base_url)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), **agent.env}
    env |= proxy_env(https_proxy, agent.ca_variable, ca_cert)
    ran = run_headless(cmd, work, env, RUN_TIMEOUT)
    run = Run(ran, agent.kept(home, ran), stop_leftovers(home))
    assert not run.leftovers, f"{agent} left processes running (stopped now): {run.summary()}"
    return run


@pytest.fixture(params=AGENTS, ids=str)
def agent(request: pytest.FixtureRequest) -> Agent:
    chosen: Agent = request.param
    return chosen


@pytest.mark.parametrize("loop", LOOPS, ids=str)
def test_through_toolid_the_agent_completes(
    agent: Agent, loop: Loop, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    """Through a reverse-mode mitmdump with toolid: the final answer, one distinct safe id per
    call, no failed tool, and the stand-in only ever got its own id."""
    raw = kimi_id(agent.tool)
    with loop.upstream(raw, agent.tool, agent.arguments) as up:
        proxy = mitm.get(mode=f"reverse:{origin(up.sdk_url('chat'))}")
        run = run_agent(agent, proxy.url + "/v1", tmp_path)
        assert run.ran.returncode == 0 and run.kept.final_text == FINAL_TEXT, run.summary()
        assert not run.kept.errors, run.summary()
        check_through_toolid(up, "chat", loop, raw, calls=run.kept.calls, results=run.kept.results)


@pytest.mark.parametrize("loop", LOOPS, ids=str)
def test_without_toolid(agent: Agent, loop: Loop, tmp_path: Path) -> None:
    """Straight at the stand-in: the agent keeps the raw id, unsafe, for every call. Cline
    merges the two parallel calls into one whose arguments (both calls' joined) are not JSON,
    so the upstream gets one call and one failed result where it sent two calls; the other
    agents complete, with one identity for every call of the run."""
    raw = kimi_id(agent.tool)
    with loop.upstream(raw, agent.tool, agent.arguments) as up:
        run = run_agent(agent, up.sdk_url("chat"), tmp_path)
        reqs = model_requests(up, "chat")
    assert not codec.is_strict_safe(raw) and set(run.kept.calls) == {raw}, run.summary()
    if agent.merges_parallel_calls and loop.parallel > 1:
        assert count_tool_results("chat", reqs[1].json) == 1, run.summary()
        assert run.kept.errors, run.summary()
        assert all("invalid JSON arguments" in e for e in run.kept.errors), run.summary()
    else:
        assert run.ran.returncode == 0 and run.kept.final_text == FINAL_TEXT, run.summary()
        assert run.kept.calls == [raw] * loop.calls and not run.kept.errors, run.summary()


def test_through_toolid_as_an_https_proxy(agent: Agent, mitm: MitmdumpPool, tmp_path: Path) -> None:
    """An ``https://`` base URL, ``HTTPS_PROXY`` at toolid in regular mode, and mitmproxy's CA
    in the agent's CA variable: the three-turn loop completes, rewritten."""
    loop, raw = THREE_TURNS, kimi_id(agent.tool)
    with loop.upstream(raw, agent.tool, agent.arguments) as up:
        proxy = https_proxy(mitm)
        base_url = https_front(mitm, up) + "/v1"
        run = run_agent(agent, base_url, tmp_path, https_proxy=proxy.url, ca_cert=proxy.ca_cert)
        assert run.ran.returncode == 0 and run.kept.final_text == FINAL_TEXT, run.summary()
        check_through_toolid(up, "chat", loop, raw, calls=run.kept.calls, results=run.kept.results)
