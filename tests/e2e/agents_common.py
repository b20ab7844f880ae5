"""Driving a real coding agent CLI headless against the Kimi-style stand-in, and checking the
ids on both sides of toolid.

An ``AgentDriver`` says how one agent (and API variant) is configured, started and read: its
pinned install, the files and variables that point it at a base URL, its command line, where
its output (or stored session) shows the tool-call ids it kept and its final answer, and the
CA variable its runtime reads. ``run_agent`` runs it in a temp ``HOME`` and working directory
(three ``.txt`` files) with a minimal environment: every destination but loopback goes to a
closed port, or everything goes through an HTTPS proxy whose CA it trusts. A run that leaves
a process running with its HOME (a daemon the agent detached) fails; the process is stopped.

A ``Scenario`` is what the stand-in (``ReuseUpstream``) answers: ``parallel`` calls sharing
the Kimi-style id ``functions.<tool>:0`` in each of ``turns`` tool turns (``SCENARIOS``: one
turn, one id reused in three turns, two parallel calls with one id). ``through_toolid`` and
``through_https_proxy`` run one through toolid (reverse mode; a regular-mode proxy before a
TLS stand-in) and check it (``check_through_toolid``): the agent completes with the
stand-in's final text, keeps one safe, distinct client id per call, as toolid's codec makes
them, and the stand-in gets exactly its own ids back. ``without_toolid`` runs one straight at
the stand-in and hands the run to a check of what the agent does wrong there.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from standin import API, FINAL_TEXT, Exchange, ReuseUpstream
from standin.apis import sdk_url

from toolid import codec

from .conftest import Mitmdump, MitmdumpPool, free_port
from .helpers import Headless, check_upstream_got_its_own_ids, run_headless

RUN_TIMEOUT = 60.0  # seconds for one headless run, after which it is killed
PROMPT = "Which .txt files are in this directory? Use a tool to find out."
LOOPBACK = "127.0.0.1,localhost,::1"
CAP = 12  # model requests the stand-in answers (a runaway agent is cut off there)


@dataclass(frozen=True)
class Scenario:
    """``parallel`` calls with one Kimi-style id in each of ``turns`` tool turns."""

    name: str
    parallel: int
    turns: int

    @property
    def calls(self) -> int:
        return self.parallel * self.turns

    @property
    def item_ids(self) -> list[str]:
        """The Responses item ids of one turn's calls (the same every turn)."""
        return [f"fc_{i}" for i in range(self.parallel)]

    def client_ids(self, raw: str) -> list[str]:
        """The client ids toolid gives the calls, in order: the k-th use of ``raw`` tagged k."""
        return [codec.encode(raw, "safe", k) for k in range(1, self.calls + 1)]


ONE_TURN = Scenario("one-turn", parallel=1, turns=1)
REUSED_ACROSS_TURNS = Scenario("reused-across-turns", parallel=1, turns=3)
PARALLEL_ONE_ID = Scenario("parallel-one-id", parallel=2, turns=1)
SCENARIOS = (ONE_TURN, REUSED_ACROSS_TURNS, PARALLEL_ONE_ID)


@dataclass
class AgentRun:
    """One headless run: what ``run_headless`` saw, and the temp HOME and work dir it ran in."""

    headless: Headless
    home: Path
    work: Path

    @property
    def events(self) -> list[Any]:
        return self.headless.events


class AgentDriver:
    """How to run one agent (and API variant); subclasses fill in the agent's own parts."""

    id: str  # the test id, e.g. "opencode-chat"
    api: API  # the API it speaks to the base URL
    tool: str  # the tool the stand-in calls ...
    arguments: str  # ... with these arguments (a JSON text)
    ca_variable = "NODE_EXTRA_CA_CERTS"  # where its runtime takes an extra CA from

    def __str__(self) -> str:
        return self.id

    def command(self, home: Path, work: Path) -> list[str]:
        """The command line (the pinned install, flags, a prompt)."""
        raise NotImplementedError

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        """Write the agent's settings pointing it at ``base_url`` (its SDK's base URL for
        ``api``: ``.../v1`` for OpenAI's APIs); the environment variables it needs besides
        PATH, HOME and the proxy ones."""
        raise NotImplementedError

    def client_ids(self, run: AgentRun) -> list[str]:
        """The tool-call ids the agent kept, one per call it ran, in order."""
        raise NotImplementedError

    def final_text(self, run: AgentRun) -> str | None:
        """The agent's final answer, None when it gave none."""
        raise NotImplementedError

    @property
    def raw_id(self) -> str:
        """The stand-in's Kimi-style call id for this agent's tool."""
        return f"functions.{self.tool}:0"

    def upstream(self, scenario: Scenario, **options: Any) -> ReuseUpstream:
        """The stand-in for ``scenario``, calling this agent's tool; ``options`` go to
        ``ReuseUpstream`` (``max_requests`` is ``CAP`` unless given)."""
        options.setdefault("max_requests", CAP)
        return ReuseUpstream(
            ids=[self.raw_id] * scenario.parallel,
            item_ids=scenario.item_ids,
            name=self.tool,
            arguments=self.arguments,
            turns=scenario.turns,
            **options,
        )


class StreamJsonDriver(AgentDriver):
    """An agent that prints Claude Code's ``stream-json`` output (Claude Code, Qwen Code):
    its ``assistant`` events hold the tool_use blocks it kept, its ``result`` event the answer."""

    def client_ids(self, run: AgentRun) -> list[str]:
        return [
            block["id"]
            for e in run.events
            if e.get("type") == "assistant"
            for block in e["message"]["content"]
            if block.get("type") == "tool_use"
        ]

    def final_text(self, run: AgentRun) -> str | None:
        results = [e for e in run.events if e.get("type") == "result" and not e.get("is_error")]
        return results[-1].get("result") if results else None


def stream_json_result(events: list[Any]) -> Any:
    """The one ``result`` event of a ``stream-json`` output."""
    found = [e for e in events if e.get("type") == "result"]
    assert len(found) == 1, f"expected one result event, got {found!r}"
    return found[0]


# ----------------------------------------------------------------------------- running


def proxy_env(https_proxy: str | None, ca_variable: str, ca_cert: Path | None) -> dict[str, str]:
    """The proxy variables of an agent's run: everything through ``https_proxy``, trusting
    ``ca_cert`` through ``ca_variable``; or, with no proxy, every destination but loopback
    (its base URL) sent to a closed port, so that an agent's own services are never reached."""
    proxy = https_proxy or f"http://127.0.0.1:{free_port()}"
    env = {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy}
    if https_proxy is None:
        env["NO_PROXY"] = LOOPBACK
    if ca_cert is not None:
        env[ca_variable] = str(ca_cert)
    return env


def processes_of(home: Path) -> list[int]:
    """The pids of the running processes whose environment has ``HOME=home``."""
    needle = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def stop_leftovers(home: Path) -> list[int]:
    """Kill (SIGKILL, by pid) every process still running with ``HOME=home``; their pids."""
    leftovers = processes_of(home)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return leftovers


def run_agent(
    driver: AgentDriver,
    base_url: str,
    tmp_path: Path,
    *,
    https_proxy: str | None = None,
    ca_cert: Path | None = None,
) -> AgentRun:
    """Run ``driver``'s agent headless with its base URL at ``base_url``, in a temp HOME and
    a working directory holding a.txt, b.txt and c.txt. Only loopback is reached directly
    (every other destination goes to a closed port), or, given ``https_proxy``, everything
    goes through that proxy, trusting ``ca_cert`` through the driver's CA variable."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / f"{name}.txt").write_text(f"{name}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    env |= proxy_env(https_proxy, driver.ca_variable, ca_cert)
    env |= driver.configure(home, work, base_url)
    run = AgentRun(run_headless(driver.command(home, work), work, env, RUN_TIMEOUT), home, work)
    leftovers = stop_leftovers(home)
    assert not leftovers, f"{driver} left processes {leftovers} running (stopped now)"
    return run


def https_proxy(mitm: MitmdumpPool) -> Mitmdump:
    """toolid as an HTTPS proxy (regular mode) that reaches 127.0.0.1 only: every other host
    gets its connection closed, so an agent's own services never reach the network."""
    return mitm.get(connection_strategy="lazy", block_list="/!~d 127.0.0.1/444")


# ----------------------------------------------------------------------------- checks


def tool_requests(up: ReuseUpstream, api: API) -> list[Exchange]:
    """The stand-in's model requests of ``api`` that offered tools (an agent's title or
    summary requests offer none), in order."""
    return [r for r in up.model_requests(api) if isinstance(r.json, dict) and r.json.get("tools")]


def summary(driver: AgentDriver, run: AgentRun, up: ReuseUpstream | None = None) -> str:
    """What a failed check shows: the run's outcome and what the stand-in ``up`` answered."""
    h = run.headless
    answered = [(r.status, r.error) for r in up.model_requests(driver.api)] if up else None
    return (
        f"{driver}: exit {h.returncode} after {h.seconds:.1f}s, "
        f"final {driver.final_text(run)!r}, ids {driver.client_ids(run)!r}, "
        f"stand-in answered {answered!r}; stderr: {h.stderr[-1500:]}"
    )


def check_completed(driver: AgentDriver, run: AgentRun, up: ReuseUpstream) -> None:
    """The agent exited 0 with the stand-in's final text."""
    assert run.headless.returncode == 0, summary(driver, run, up)
    assert driver.final_text(run) == FINAL_TEXT, summary(driver, run, up)


def check_through_toolid(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """``scenario`` ran through toolid: the agent completed, kept one client id per call
    (safe, distinct, the k-th use of the raw id tagged k, turn by turn in the order the turns
    came; the parallel calls of one turn in any order, as the agent runs them), and its tool
    requests reached the stand-in with nothing but the stand-in's own ids."""
    check_completed(driver, run, up)
    got = driver.client_ids(run)
    want, step = scenario.client_ids(driver.raw_id), scenario.parallel
    turns = [sorted(got[at : at + step]) for at in range(0, len(got), step)]
    assert turns == [sorted(want[at : at + step]) for at in range(0, len(want), step)], summary(
        driver, run, up
    )
    assert all(codec.is_strict_safe(i) for i in got) and len(set(got)) == len(got)
    check_upstream_got_its_own_ids(
        tool_requests(up, driver.api),
        driver.api,
        driver.raw_id,
        turns=scenario.turns,
        parallel=scenario.parallel,
        item_ids=scenario.item_ids,
    )


def check_keeps_the_raw_id(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """Without toolid the agent completes, but keeps the stand-in's raw id, unsafe, for
    every call: one identity for all of them."""
    check_completed(driver, run, up)
    assert driver.client_ids(run) == [driver.raw_id] * scenario.calls, summary(driver, run, up)
    assert not codec.is_strict_safe(driver.raw_id)


# ----------------------------------------------------------------------------- the loops


def through_toolid(
    driver: AgentDriver, scenario: Scenario, mitm: MitmdumpPool, tmp_path: Path
) -> tuple[AgentRun, ReuseUpstream]:
    """Run ``scenario`` through a reverse-mode mitmdump with toolid; check it."""
    with driver.upstream(scenario) as up:
        proxy = mitm.get(mode=f"reverse:{up.base_url}")
        run = run_agent(driver, sdk_url(driver.api, proxy.url), tmp_path)
    check_through_toolid(driver, scenario, run, up)
    return run, up


def through_https_proxy(
    driver: AgentDriver, scenario: Scenario, mitm: MitmdumpPool, tmp_path: Path
) -> tuple[AgentRun, ReuseUpstream]:
    """Run ``scenario`` against a TLS stand-in (an ``https://`` base URL) with ``HTTPS_PROXY``
    at toolid in regular mode and mitmproxy's CA in the driver's CA variable; check it."""
    with driver.upstream(scenario, tls_dir=tmp_path / "tls") as up:
        proxy = https_proxy(mitm)
        base_url = up.sdk_url(driver.api)
        run = run_agent(driver, base_url, tmp_path, https_proxy=proxy.url, ca_cert=proxy.ca_cert)
    check_through_toolid(driver, scenario, run, up)
    return run, up


type RunCheck = Callable[[AgentDriver, Scenario, AgentRun, ReuseUpstream], None]


def without_toolid(
    driver: AgentDriver,
    scenario: Scenario,
    check: RunCheck,
    tmp_path: Path,
    *,
    max_requests: int = CAP,
) -> None:
    """Run ``scenario`` straight at the stand-in (which answers ``max_requests`` model
    requests) and ``check`` what the agent did."""
    with driver.upstream(scenario, max_requests=max_requests) as up:
        run = run_agent(driver, up.sdk_url(driver.api), tmp_path)
    check(driver, scenario, run, up)
