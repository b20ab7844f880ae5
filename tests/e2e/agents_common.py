"""Driving a real coding agent CLI headless against the Kimi-style stand-in, and checking the
ids on both sides of toolid.

An ``AgentDriver`` says how one agent (and API variant) is configured, started and read: its
pinned install, the files and variables that point it at a base URL, its command line, and
where its JSON output shows the tool-call ids it kept and its final answer. ``run_agent``
runs it in a temp ``HOME`` and working directory (three ``.txt`` files), with a minimal
environment in which every destination but loopback goes to a closed port, or everything
through an HTTPS proxy whose CA it trusts (``NODE_EXTRA_CA_CERTS``).

A ``Scenario`` is what the stand-in (``ReuseUpstream``) answers: ``parallel`` calls sharing
the Kimi-style id ``functions.<tool>:0`` in each of ``turns`` tool turns. The checks:
``check_completed`` (exit 0 and the stand-in's final text), ``check_client_ids`` (one safe,
distinct client id per call, as toolid's codec makes them), ``check_upstream_ids`` (every
request carried only the stand-in's own ids, each call and its result once).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from standin import API, FINAL_TEXT, Exchange, ReuseUpstream

from toolid import codec

from .conftest import free_port
from .helpers import Headless, request_id_positions, run_headless

RUN_TIMEOUT = 40.0  # seconds for one headless run, after which it is killed
PROMPT = "Which .txt files are in this directory? Use a tool to find out."
LOOPBACK = "127.0.0.1,localhost,::1"


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


ONE_TURN = Scenario("one-turn", parallel=1, turns=1)
REUSED_ACROSS_TURNS = Scenario("reused-across-turns", parallel=1, turns=3)
PARALLEL_ONE_ID = Scenario("parallel-one-id", parallel=2, turns=1)
SCENARIOS = (ONE_TURN, REUSED_ACROSS_TURNS, PARALLEL_ONE_ID)


@dataclass
class AgentRun:
    """One headless run: what ``run_headless`` saw, and the temp HOME it ran in."""

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

    def command(self) -> list[str]:
        """The command line (the pinned install, flags, the prompt ``PROMPT``)."""
        raise NotImplementedError

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        """Write the agent's settings pointing it at ``base_url`` (its API root, ``.../v1``);
        the environment variables it needs besides PATH, HOME and the proxy ones."""
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
        """The stand-in for ``scenario``, calling this agent's tool."""
        return ReuseUpstream(
            ids=[self.raw_id] * scenario.parallel,
            item_ids=scenario.item_ids,
            name=self.tool,
            arguments=self.arguments,
            turns=scenario.turns,
            **options,
        )


def stream_json_tool_use_ids(events: list[Any]) -> list[str]:
    """The tool_use ids of the ``assistant`` events of a ``stream-json`` output (Claude
    Code's format, which Qwen Code prints too), in order."""
    return [
        block["id"]
        for e in events
        if e.get("type") == "assistant"
        for block in e["message"]["content"]
        if block.get("type") == "tool_use"
    ]


def stream_json_result(events: list[Any]) -> Any:
    """The one ``result`` event of a ``stream-json`` output."""
    found = [e for e in events if e.get("type") == "result"]
    assert len(found) == 1, f"expected one result event, got {found!r}"
    return found[0]


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
    goes through that proxy, trusting ``ca_cert`` through ``NODE_EXTRA_CA_CERTS``."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / f"{name}.txt").write_text(f"{name}\n")
    proxy = https_proxy or f"http://127.0.0.1:{free_port()}"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy}
    if https_proxy is None:
        env["NO_PROXY"] = LOOPBACK
    if ca_cert is not None:
        env["NODE_EXTRA_CA_CERTS"] = str(ca_cert)
    env.update(driver.configure(home, work, base_url))
    return AgentRun(run_headless(driver.command(), work, env, RUN_TIMEOUT), home, work)


def tool_requests(up: ReuseUpstream, api: API) -> list[Exchange]:
    """The stand-in's model requests of ``api`` that offered tools (an agent's title or
    summary requests offer none), in order."""
    return [r for r in up.model_requests(api) if isinstance(r.json, dict) and r.json.get("tools")]


def summary(driver: AgentDriver, run: AgentRun, up: ReuseUpstream) -> str:
    """What a failed check shows: the run's outcome and what the stand-in answered."""
    h = run.headless
    answered = [(r.status, r.error) for r in up.model_requests(driver.api)]
    return (
        f"{driver.id}: exit {h.returncode} after {h.seconds:.1f}s, "
        f"final {driver.final_text(run)!r}, ids {driver.client_ids(run)!r}, "
        f"stand-in answered {answered!r}; stderr: {h.stderr[-1500:]}"
    )


def check_completed(driver: AgentDriver, run: AgentRun, up: ReuseUpstream) -> None:
    """The agent exited 0 with the stand-in's final text."""
    assert run.headless.returncode == 0, summary(driver, run, up)
    assert driver.final_text(run) == FINAL_TEXT, summary(driver, run, up)


def check_client_ids(driver: AgentDriver, scenario: Scenario, run: AgentRun) -> None:
    """The agent kept one client id per call: safe, distinct, the k-th use of the raw id
    tagged k (toolid's codec), in the order the calls came."""
    expected = [codec.encode(driver.raw_id, "safe", k) for k in range(1, scenario.calls + 1)]
    got = driver.client_ids(run)
    assert got == expected, f"{driver.id}: client ids {got!r}"
    assert all(codec.is_strict_safe(i) for i in got) and len(set(got)) == len(got)


def check_upstream_ids(driver: AgentDriver, scenario: Scenario, up: ReuseUpstream) -> None:
    """One tool request per turn and the final one, all answered 200; request t carried the
    calls of the t tool turns before it and their results, each once, with the stand-in's
    own call id and (Responses items) nothing but its own item ids."""
    reqs = tool_requests(up, driver.api)
    assert [r.status for r in reqs] == [200] * (scenario.turns + 1), [
        (r.status, r.error) for r in up.model_requests(driver.api)
    ]
    for t, rec in enumerate(reqs):
        positions = request_id_positions(driver.api, rec.json)
        calls = [v for k, v in positions if k == "call"]
        items = {v for k, v in positions if k == "item"}
        # each call appears twice: the assistant's call and its result
        assert Counter(calls) == Counter({driver.raw_id: 2 * scenario.parallel * t}), (
            f"request {t + 1}: call ids {calls!r}"
        )
        assert items <= set(scenario.item_ids), f"request {t + 1}: item ids {items!r}"
