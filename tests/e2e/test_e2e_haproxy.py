"""Scale out: HAProxy running deploy/haproxy.cfg in front of three mitmdump processes.

Both layouts of the deploy configuration, in one HAProxy (only addresses changed):

- reverse: agents use HAProxy as their base URL; HTTP mode balances every request on its own
  over three ``mitmdump --mode reverse:<upstream>``;
- proxy: agents use HAProxy as their HTTPS proxy; TCP mode passes every connection (a CONNECT
  tunnel) to one of three regular-mode mitmdumps that share one CA.

Streamed two-turn tool loops with the real SDKs (Chat, Responses, Messages): the process that
encoded the ids in turn 1 is not the one that restores them in turn 2 (each process's toolid
log says which it did), and the upstream gets its exact ids back. Then the process HAProxy
would pick next is killed between two turns: HAProxy's retry sends the turn to another process
(redispatch), no id is lost; restarted on its port, the process is taken back into rotation.

HAProxy is installed from the Debian packages if it is missing (root and apt-get needed).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import httpx2
import pytest
from standin import API, ScenarioHandle, UpstreamServer

from bench import haproxy

from .cases import APIS
from .conftest import Mitmdump, free_port
from .helpers import (
    LoopResult,
    check_all_safe,
    check_client_ids,
    check_turn2_request,
    encode_safe,
    sdk_http_client,
    sdk_loop,
)

# the first test may install HAProxy (apt-get: up to a few minutes on a slow mirror)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

Layout = Literal["reverse", "proxy"]
LAYOUTS: list[Layout] = ["reverse", "proxy"]
BACKEND: dict[Layout, str] = {"reverse": "toolid_reverse", "proxy": "toolid_proxy"}
PROCESSES = 3
RAW_ID = "functions.get_weather:0"
# One change line per flow; the lines of a quarter second share one log record, so only
# the first of them carries the timestamp.
# Each process adds this header to the requests it forwards, with its number (0, 1, 2).
PROCESS_HEADER = "x-fleet-process"
LOG_LINE_DEADLINE = 60.0  # seconds: only a line that never comes takes this long
# seconds within which HAProxy takes a stuck process out: its first check after the stop
# (every 2s), answered by none within "timeout check 2s", then one more (fall 2) half a
# second later, failing the same way, with a margin for a loaded machine
TAKEN_OUT_WITHIN = 20.0
_TOOLID_LINE = re.compile(r"^(?:\[[\d:.]+\] )?toolid: \d+ (encoded|restored) .*\[POST \S+/s/(\w+)/")


class Served(NamedTuple):
    """The processes (0, 1, 2) that encoded the ids in turn 1 and restored them in turn 2."""

    turn1: int
    turn2: int


@dataclass
class Fleet:
    """Three mitmdumps behind HAProxy in one layout, and the upstream they serve."""

    layout: Layout
    procs: list[Mitmdump]
    balancer: haproxy.HAProxy
    address: str  # the host:port agents connect to
    upstream: UpstreamServer
    ca: Path | None = None  # what agents trust (proxy layout)
    history: list[int] = field(default_factory=list)  # the process of every turn so far

    @property
    def backend(self) -> str:
        return BACKEND[self.layout]

    def loop(self, api: API, before_turn2: Callable[[], None] | None = None) -> Served:
        """One streamed SDK loop through HAProxy, checked (the agent sees only encoded ids,
        the upstream gets its exact ids back and every other byte); which process served
        each turn."""
        handle = self.upstream.scenario(ids=[RAW_ID], writes="random")
        recorded = LoopResult(api=api)
        kwargs: dict[str, Any] = {}
        base = handle.base_url(api)
        if self.layout == "proxy":
            assert self.ca is not None
            # TCP mode balances connections: a kept-alive tunnel keeps its process, so the
            # agent opens a new one per turn (as after an idle pause) to get a new choice
            kwargs = {
                "proxy": f"http://{self.address}",
                "verify": ssl.create_default_context(cafile=self.ca),
                "limits": httpx2.Limits(max_keepalive_connections=0),
            }
        else:
            base = base.replace(self.upstream.base_url, f"http://{self.address}")
        client = sdk_http_client(recorded, **kwargs)

        def between_turns(request: Any) -> None:
            if len(recorded.requests) == 2:  # runs after the hook that records the request
                self.history.append(self._served_turn(handle, "encoded"))
                if before_turn2 is not None:
                    before_turn2()

        client.event_hooks["request"].append(between_turns)
        with client:
            result = sdk_loop(api, base, stream=True, http_client=client)
        check_client_ids(result, handle, encode_safe)
        check_all_safe(result)
        check_turn2_request(handle, recorded.requests[-1])
        served = Served(self.history[-1], self._served_turn(handle, "restored"))
        self.history.append(served.turn2)
        return served

    def _served_turn(self, handle: ScenarioHandle, what: str) -> int:
        """The process that forwarded the turn in which ids of ``handle``'s loop were ``what``
        (encoded: turn 1; restored: turn 2), as the upstream saw it (each process tags the
        requests it forwards), once that process's toolid log says it did so, and no other's.

        The upstream recorded the request before it answered, so the process is known at once;
        the log line is waited for (change lines are written in batches, a quarter of a second
        apart), as the event it is, with a deadline only against a line that never comes."""
        exchange = handle.turn(1 if what == "encoded" else 2)
        tag = exchange.header(PROCESS_HEADER)
        assert tag is not None and tag.isdigit(), (PROCESS_HEADER, exchange.headers)
        served = int(tag)

        def logged(proc: Mitmdump) -> bool:
            matches = map(_TOOLID_LINE.match, proc.log_text().splitlines())
            return any(m and m.groups() == (what, handle.key) for m in matches)

        deadline = time.monotonic() + LOG_LINE_DEADLINE
        while not logged(self.procs[served]):
            assert time.monotonic() < deadline, (
                f"process {served} forwarded turn {exchange.turn} of {handle.key}, and its log "
                f"never said the ids were {what}:\n{self.procs[served].log_text()[-4000:]}"
            )
            time.sleep(0.05)
        others = [n for n, proc in enumerate(self.procs) if n != served and logged(proc)]
        assert not others, f"ids of {handle.key} {what} by processes {others} too"
        return served

    def next_in_turn(self) -> int:
        """The process HAProxy picks next: it takes turns, so the least recently used."""
        last = {n: i for i, n in enumerate(self.history)}
        return min(range(len(self.procs)), key=lambda n: last.get(n, -1))

    def server_stats(self) -> dict[str, dict[str, str]]:
        """HAProxy's stats row per server of this layout's backend (p1, p2, p3; BACKEND)."""
        return {sv: row for (px, sv), row in self.balancer.stats().items() if px == self.backend}

    def wait_status(self, server: str, status: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while (now := self.server_stats()[server]["status"]) != status:
            assert time.monotonic() < deadline, f"{self.backend}/{server} stays {now}, not {status}"
            time.sleep(0.1)


def _options(process: int) -> dict[str, str]:
    """The options of process number ``process``: it tags the requests it forwards, and
    serves its status endpoint, which HAProxy checks, on a port of its own (kept across a
    restart, as the configuration names it)."""
    return {
        "modify_headers": f"/~q/{PROCESS_HEADER}/{process}",
        "toolid_status": f"127.0.0.1:{free_port()}",
    }


def _server(proc: Mitmdump) -> haproxy.Server:
    """The process as a server of HAProxy's configuration: its address and status port."""
    return f"127.0.0.1:{proc.port}", int(proc.options["toolid_status"].rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def fleets(
    tmp_path_factory: pytest.TempPathFactory, upstream: UpstreamServer, tls_upstream: UpstreamServer
) -> Iterator[dict[Layout, Fleet]]:
    """One HAProxy (the deploy configuration on free loopback ports) in front of three
    reverse-mode mitmdumps and three regular-mode mitmdumps."""
    try:
        haproxy.ensure_installed()
    except haproxy.HAProxyError as e:
        pytest.fail(f"this test needs HAProxy: {e}", pytrace=False)
    workdir = tmp_path_factory.mktemp("haproxy")
    reverse = [
        Mitmdump(workdir / f"reverse-{n}", f"reverse:{upstream.base_url}", _options(n))
        for n in range(PROCESSES)
    ]
    regular = [  # ssl_insecure: the TLS upstream's certificate is self-signed
        Mitmdump(workdir / f"regular-{n}", "regular", {"ssl_insecure": "true", **_options(n)})
        for n in range(PROCESSES)
    ]
    balancer = None
    try:
        with ThreadPoolExecutor(len(reverse) + 1) as pool:
            list(pool.map(Mitmdump.start, [*reverse, regular[0]]))
            # proxy layout: agents trust one CA, so every process signs with the first one's
            for proc in regular[1:]:
                shutil.copytree(regular[0].confdir, proc.confdir, dirs_exist_ok=True)
            list(pool.map(Mitmdump.start, regular[1:]))
        config, front = haproxy.deploy_config(
            reverse=[_server(proc) for proc in reverse], proxy=[_server(proc) for proc in regular]
        )
        balancer = haproxy.HAProxy(workdir / "haproxy", config, stats=front["stats"]).start()
        yield {
            "reverse": Fleet("reverse", reverse, balancer, front[BACKEND["reverse"]], upstream),
            "proxy": Fleet(
                "proxy",
                regular,
                balancer,
                front[BACKEND["proxy"]],
                tls_upstream,
                regular[0].confdir / "mitmproxy-ca-cert.pem",
            ),
        }
    finally:
        if balancer is not None:
            balancer.stop()
        for proc in reverse + regular:  # all asked at once: each takes a moment to exit
            proc.terminate()
        for proc in reverse + regular:
            proc.wait_exited()


@pytest.fixture
def fleet(request: pytest.FixtureRequest, fleets: dict[Layout, Fleet]) -> Iterator[Fleet]:
    """The layout's fleet; fails the test if one of its processes logged an error."""
    chosen = fleets[request.param]
    marks = [proc.mark() for proc in chosen.procs]
    yield chosen
    for proc, mark in zip(chosen.procs, marks, strict=True):
        text = proc.log_since(mark)
        for bad in ("Traceback", "has crashed", "Addon error"):
            assert bad not in text, f"mitmdump {proc.mode} logged an error:\n{text}"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fleet", LAYOUTS, indirect=True)
def test_turns_land_on_different_processes(fleet: Fleet, api: API) -> None:
    """Turn 1 is encoded by one process, turn 2 restored by another, ids exact."""
    served = fleet.loop(api)
    assert served.turn1 != served.turn2, f"both turns on process {served.turn1}"


@pytest.mark.parametrize("fleet", LAYOUTS, indirect=True)
def test_process_killed_between_turns(fleet: Fleet) -> None:
    """The process HAProxy picks next dies between turn 1 and turn 2: HAProxy sends turn 2
    to another process, and this loop and the ones after it complete with exact ids;
    restarted on its port, the process gets turns again."""
    before = fleet.server_stats()
    assert all(before[f"p{n + 1}"]["status"] == "UP" for n in range(PROCESSES)), before
    killed: list[int] = []

    def kill_next() -> None:
        killed.append(fleet.next_in_turn())
        process = fleet.procs[killed[0]].proc
        assert process is not None
        process.kill()
        process.wait(10)

    served = fleet.loop("chat", before_turn2=kill_next)
    victim = killed[0]
    name = f"p{victim + 1}"
    after = fleet.server_stats()
    assert victim not in served, served
    # turn 2 went to the dead process first (refused), then HAProxy moved it to another
    redispatched = int(after[name]["wredis"]) - int(before[name]["wredis"])
    assert redispatched == 1, (after[name], fleet.balancer.log_text())
    assert after[name]["status"].startswith("DOWN"), after[name]
    for api in APIS:
        assert victim not in fleet.loop(api)

    fleet.procs[victim].start(port=fleet.procs[victim].port)  # what a supervisor does
    fleet.wait_status(name, "UP")
    used = {n for api in APIS for n in fleet.loop(api)}
    assert victim in used, f"the restarted process got no turn (turns went to {used})"


@pytest.mark.parametrize("fleet", LAYOUTS, indirect=True)
def test_a_stuck_process_is_taken_out_by_its_health_check(fleet: Fleet) -> None:
    """The process HAProxy picks next is stopped (SIGSTOP): it still accepts connections, so
    a TCP check would keep it in, but its status endpoint answers nothing. HAProxy's
    /healthz check takes it out within TAKEN_OUT_WITHIN; every loop after that completes on
    the other processes, ids exact; after SIGCONT it is taken back and gets turns again."""
    for n in range(PROCESSES):  # a fleet just started may still be passing its first checks
        fleet.wait_status(f"p{n + 1}", "UP")
    victim = fleet.next_in_turn()
    name = f"p{victim + 1}"
    pid = fleet.procs[victim].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        fleet.wait_status(name, "DOWN", timeout=TAKEN_OUT_WITHIN)
        # the check timed out at layer 7: the connection itself was accepted
        assert fleet.server_stats()[name]["check_status"] == "L7TOUT", fleet.server_stats()
        for api in APIS:
            assert victim not in fleet.loop(api)
    finally:
        os.kill(pid, signal.SIGCONT)
    fleet.wait_status(name, "UP")
    used = {n for api in APIS for n in fleet.loop(api)}
    assert victim in used, f"the process taken back got no turn (turns went to {used})"
