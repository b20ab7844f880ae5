"""Running toolid for a team, through real mitmdump processes: the status endpoint (/healthz,
/metrics parsed by prometheus_client), a mistyped option and a bad value that stop the
proxy in one line, the refusal to be an open proxy, and a proxy behind ``proxyauth``."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from standin import UpstreamServer

from .conftest import ADDON, Mitmdump, MitmdumpPool, _mitmdump_executable, free_port
from .helpers import check_loop_bytes, wire_loop

pytestmark = pytest.mark.e2e

RAW = "functions.get_weather:0"
STATUS_LINE = re.compile(r"toolid: status endpoint on http://([\d.]+):(\d+)/healthz")
REFUSED_TIMEOUT = 30.0  # seconds for a refused mitmdump to exit (it exits at once)


def status_address(proc: Mitmdump) -> tuple[str, int]:
    match = STATUS_LINE.search(proc.wait_for_log("toolid: status endpoint on"))
    assert match is not None
    return match.group(1), int(match.group(2))


def status_get(address: tuple[str, int], path: str) -> httpx.Response:
    with httpx.Client(trust_env=False, timeout=10) as client:
        return client.get(f"http://{address[0]}:{address[1]}{path}")


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels} in:\n{text}")


def test_status_endpoint_serves_health_and_metrics(
    tmp_path: Path, mitm: MitmdumpPool, upstream: UpstreamServer
) -> None:
    """200 and counters that moved by one tool loop, read with prometheus_client's parser;
    the status requests are no flows (not in mitmdump's flow log); at SIGTERM a connection
    already open gets 503."""
    proc = Mitmdump(tmp_path, f"reverse:{upstream.base_url}", {"toolid_status": "127.0.0.1:0"})
    with mitm.watching(proc):
        address = status_address(proc)
        health = status_get(address, "/healthz")
        assert (health.status_code, health.text) == (200, "serving\n")
        before = status_get(address, "/metrics").text
        assert metric(before, "toolid_ids_total", action="encoded") == 0
        with httpx.Client(trust_env=False, timeout=30) as client:
            handle = upstream.scenario(ids=[RAW])
            result = wire_loop(client, handle, "chat", stream=True, origin=proc.url)
            check_loop_bytes(result, handle)
        scraped = status_get(address, "/metrics")
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = scraped.text
        assert metric(text, "toolid_ids_total", action="encoded") == 1
        assert metric(text, "toolid_ids_total", action="restored") == 2
        assert metric(text, "toolid_flows_total", outcome="changed") == 2
        assert metric(text, "toolid_rewrite_seconds_count") == 2
        flows = [line for line in proc.log_text().splitlines() if "GET " in line]
        assert not flows, flows  # mitmdump logs every flow; these were none

        # shutting down: a connection open before answers 503
        waiting = socket.create_connection(address, timeout=10)
        waiting.sendall(b"GET /healthz HTTP/1.1\r\nHost: toolid\r\n")
        assert status_get(address, "/healthz").status_code == 200  # the one above: accepted
        mark = proc.mark()
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGTERM)
        proc.wait_for_log("toolid: status endpoint stopping", mark)
        waiting.sendall(b"\r\n")
        reply = b""
        while chunk := waiting.recv(4096):
            reply += chunk
        waiting.close()
        assert reply.startswith(b"HTTP/1.1 503 "), reply
        assert proc.proc.wait(10) == 0


def run_refused(tmp_path: Path, *args: str) -> str:
    """Run mitmdump with the addon and ``args``; it must exit 1 by itself; its output."""
    cmd = [
        _mitmdump_executable(),
        "-s",
        str(ADDON),
        "--listen-port",
        str(free_port()),
        "--set",
        f"confdir={tmp_path / 'confdir'}",
        *args,
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=REFUSED_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    return output


def toolid_errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if "] toolid: " in line]


def test_a_mistyped_option_stops_the_proxy_naming_it(tmp_path: Path) -> None:
    output = run_refused(tmp_path, "--listen-host", "127.0.0.1", "--set", "toolid_mod=observe")
    (line,) = toolid_errors(output)
    assert "unknown option toolid_mod (did you mean toolid_mode?)" in line
    assert "toolid_profile" in line


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("toolid_mode=bogus", "toolid_mode must be one of rewrite, observe, not 'bogus'"),
        ("toolid_max_event_bytes=abc", "toolid_max_event_bytes:"),
    ],
)
def test_a_bad_value_stops_the_proxy_in_one_line(
    tmp_path: Path, setting: str, message: str
) -> None:
    output = run_refused(tmp_path, "--listen-host", "127.0.0.1", "--set", setting)
    (line,) = toolid_errors(output)
    assert message in line


def test_a_taken_status_port_stops_the_proxy(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        output = run_refused(
            tmp_path, "--listen-host", "127.0.0.1", "--set", f"toolid_status=127.0.0.1:{port}"
        )
    (line,) = toolid_errors(output)
    assert f"toolid_status: cannot serve 127.0.0.1:{port}" in line


@pytest.mark.parametrize("listen", [["--listen-host", "0.0.0.0"], []])
def test_listening_beyond_loopback_without_proxyauth_is_refused(
    tmp_path: Path, listen: list[str]
) -> None:
    """``--listen-host 0.0.0.0``, and mitmproxy's own default (every interface)."""
    output = run_refused(tmp_path, *listen)
    (line,) = toolid_errors(output)
    assert "refusing to listen on" in line
    assert "proxyauth" in line and "toolid_open_proxy=true" in line


def test_a_team_proxy_with_proxyauth(tmp_path: Path, upstream: UpstreamServer) -> None:
    """On every interface with proxyauth: without credentials 407, with them rewritten."""
    port = free_port()
    proc = Mitmdump(tmp_path, f"regular@0.0.0.0:{port}", {"proxyauth": "team:s3cret"})
    proc.start(port=port)
    mark = proc.mark()  # after the command line, which holds the password
    try:
        handle = upstream.scenario(ids=[RAW])
        with httpx.Client(proxy=proc.url, trust_env=False, timeout=30) as client:
            refused = client.post(handle.url("chat"), json={"model": "m", "messages": []})
        assert refused.status_code == 407
        assert "proxy-authenticate" in refused.headers
        assert not handle.exchanges, "a request without credentials reached the upstream"
        authorised = f"http://team:s3cret@127.0.0.1:{port}"
        with httpx.Client(proxy=authorised, trust_env=False, timeout=30) as client:
            result = wire_loop(client, handle, "chat", stream=False)
        check_loop_bytes(result, handle)
        assert "s3cret" not in proc.log_since(mark)
    finally:
        proc.stop()
