"""The tool loops every real-agent test runs against a Kimi-style stand-in, and their checks.

Each loop is one raw id (``functions.<tool>:0``, not ``[A-Za-z0-9_-]+``) put on every call:

- ``one-turn``: one call, then the final text;
- ``three-turns``: one call in each of three turns, with the same id every turn;
- ``two-parallel``: two parallel calls with that one id in one response.

Through toolid an agent completes every loop, the k-th call of the run reaches it as
``codec.encode(raw, "safe", k)`` (distinct and safe), and the stand-in gets its own raw id back
at every position, and nothing else. ``proxy_env`` keeps a run off the network (or sends it
through toolid as an HTTPS proxy, ``https_proxy``, to a stand-in behind TLS, ``https_front``);
``stop_leftovers`` finds the processes a run left behind (a daemon an agent detached) and
stops them, by their pids.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from toolid import codec

from .conftest import Mitmdump, MitmdumpPool, free_port
from .helpers import request_id_positions
from .reuse_upstream import ReuseUpstream, count_tool_results

type AgentAPI = Literal["chat", "responses"]

CAP = 12  # model requests the stand-in answers before it refuses (three times what a loop needs)
_ENDPOINT = {"chat": "/chat/completions", "responses": "/responses"}


@dataclass(frozen=True)
class Loop:
    """``parallel`` calls with one raw id in each of ``turns`` tool turns, then a final text."""

    name: str
    parallel: int
    turns: int

    def __str__(self) -> str:
        return self.name

    @property
    def calls(self) -> int:
        return self.parallel * self.turns

    def upstream(self, raw: str, tool: str, arguments: str) -> ReuseUpstream:
        """The stand-in for this loop, calling ``tool`` with ``arguments`` under ``raw``."""
        return ReuseUpstream(
            ids=[raw] * self.parallel,
            name=tool,
            arguments=arguments,
            turns=self.turns,
            max_requests=CAP,
        )

    def client_ids(self, raw: str) -> list[str]:
        """The ids toolid gives the loop's calls, in order: one per call, tagged from the 2nd."""
        return [codec.encode(raw, "safe", k) for k in range(1, self.calls + 1)]


THREE_TURNS = Loop("three-turns", 1, 3)
LOOPS = [Loop("one-turn", 1, 1), THREE_TURNS, Loop("two-parallel", 2, 1)]


def kimi_id(tool: str) -> str:
    """Kimi K2's id for the first call of ``tool`` in a response."""
    return f"functions.{tool}:0"


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (a reverse-mode proxy's upstream)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def https_front(mitm: MitmdumpPool, up: ReuseUpstream) -> str:
    """An ``https://`` origin for the stand-in (which speaks plain HTTP): a reverse-mode
    mitmdump that terminates TLS and changes nothing (``toolid_mode=observe``)."""
    front = mitm.get(mode=f"reverse:{origin(up.sdk_url('chat'))}", toolid_mode="observe")
    return front.url.replace("http://", "https://", 1)


def https_proxy(mitm: MitmdumpPool) -> Mitmdump:
    """toolid as an HTTPS proxy (regular mode) that reaches 127.0.0.1 only: an agent's own
    services never reach the network from a test."""
    return mitm.get(connection_strategy="lazy", block_list="/!~d 127.0.0.1/444")


def proxy_env(https_proxy: str | None, ca_variable: str, ca_cert: Path | None) -> dict[str, str]:
    """The proxy variables of an agent's run: everything through ``https_proxy``, trusting
    ``ca_cert`` through ``ca_variable``; or, with no proxy, every destination but loopback
    (its base URL) sent to a closed port, so that an agent's own services are never reached."""
    proxy = https_proxy or f"http://127.0.0.1:{free_port()}"
    env = {"HTTPS_PROXY": proxy, "HTTP_PROXY": proxy}
    if https_proxy is None:
        env["NO_PROXY"] = "127.0.0.1,localhost,::1"
    if ca_cert is not None:
        env[ca_variable] = str(ca_cert)
    return env


def model_requests(up: ReuseUpstream, api: AgentAPI) -> list[Any]:
    """The stand-in's recorded POSTs to ``api``'s endpoint, in order."""
    return [
        r
        for r in up.requests
        if r.method == "POST" and r.path.split("?", 1)[0].endswith(_ENDPOINT[api])
    ]


def check_through_toolid(
    up: ReuseUpstream, api: AgentAPI, loop: Loop, raw: str, *, calls: list[str], results: list[str]
) -> None:
    """``loop`` ran through toolid: the agent kept ``calls`` (its calls' ids) and ``results``
    (the ids its results name); see the two checks."""
    check_client_ids(calls, results, loop, raw)
    check_upstream_got_its_own_ids(up, api, loop, raw)


def check_client_ids(calls: list[str], results: list[str], loop: Loop, raw: str) -> None:
    """The agent kept one distinct safe id per call, toolid's, and its results name them."""
    expected = loop.client_ids(raw)
    assert calls == expected, f"the agent's calls: {calls!r}, expected {expected!r}"
    assert sorted(results) == sorted(expected), f"the agent's results: {results!r}"
    assert all(codec.is_strict_safe(i) for i in calls) and len(set(calls)) == loop.calls


def check_upstream_got_its_own_ids(up: ReuseUpstream, api: AgentAPI, loop: Loop, raw: str) -> None:
    """One request per turn and one for the final text, each answered 200, the t-th holding
    the t tool turns before it: every call and every result under the stand-in's own id."""
    reqs = model_requests(up, api)
    assert [r.status for r in reqs] == [200] * (loop.turns + 1), [(r.status, r.error) for r in reqs]
    for t, rec in enumerate(reqs):
        assert count_tool_results(api, rec.json) == t * loop.parallel, f"request {t + 1}"
        ids = Counter(v for kind, v in request_id_positions(api, rec.json) if kind == "call")
        # each call's id appears twice: in the call and in its result
        assert ids == Counter({raw: 2 * t * loop.parallel} if t else {}), f"request {t + 1}: {ids}"


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
