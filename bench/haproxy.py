"""HAProxy for the scale-out test and measurement: install it, run ``deploy/haproxy.cfg``.

``tests/e2e/test_e2e_haproxy.py`` and ``python -m bench.scaleout`` run the deploy
configuration itself; :func:`render` changes only its addresses (``bind`` lines, and the
``server`` lines of a backend, one per process).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.proxy import read_log, stop_process

REPO_ROOT = Path(__file__).resolve().parents[1]
DEPLOY_CONFIG = REPO_ROOT / "deploy" / "haproxy.cfg"
SBIN = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin"])
STARTUP_TIMEOUT = 10.0
# what a process with toolid_status=HOST:0 logs: the port it got
_STATUS = re.compile(r"toolid: status endpoint on http://\S+:(\d+)/healthz")


class HAProxyError(RuntimeError):
    """HAProxy is missing and cannot be installed, or does not start."""


def executable() -> str | None:
    return shutil.which("haproxy", path=os.pathsep.join([os.environ.get("PATH", ""), SBIN]))


def status_port(log: str) -> int:
    """The status port (toolid_status) a toolid process logged it serves."""
    match = _STATUS.search(log)
    if match is None:
        raise HAProxyError(f"no status endpoint in the process's log:\n{log[-2000:]}")
    return int(match.group(1))


def _apt_get(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", *args],
        env=os.environ | {"DEBIAN_FRONTEND": "noninteractive"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ensure_installed() -> str:
    """The path of ``haproxy``, installed from the Debian packages first if it is missing
    (``apt-get install``, after ``apt-get update`` if the package is not found)."""
    found = executable()
    if found:
        return found
    why = "HAProxy is not installed"
    if shutil.which("apt-get") is None:
        raise HAProxyError(f"{why} and apt-get is not available: install haproxy (2.6 or newer)")
    if os.geteuid() != 0:
        raise HAProxyError(f"{why}; install it as root: apt-get install -y haproxy")
    install = ("install", "-y", "--no-install-recommends", "haproxy")
    try:
        done = _apt_get(*install, timeout=300)
        if done.returncode != 0:
            updated = _apt_get("update", timeout=180)
            done = _apt_get(*install, timeout=300) if updated.returncode == 0 else updated
    except subprocess.TimeoutExpired as e:
        raise HAProxyError(f"{why} and `{' '.join(map(str, e.cmd))}` timed out") from e
    found = executable()
    if done.returncode != 0 or not found:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise HAProxyError(f"{why} and `apt-get {' '.join(install)}` failed:\n{tail}")
    return found


type Server = tuple[str, int]  # a process's host:port, and its status port (toolid_status)


def render(text: str, binds: Mapping[str, str], servers: Mapping[str, Sequence[Server]]) -> str:
    """``text`` with the address of each section's ``bind`` line replaced by
    ``binds[section]``, and each backend's ``server`` lines replaced by one line per
    server in ``servers[backend]`` (named p1, p2, ..., with the first line's options, its
    ``port`` the server's status port). A section with a bind or server line that is not
    named is an error."""
    out: list[str] = []
    section = ""
    replaced: set[str] = set()
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            out.append(line)
            continue
        if not line[0].isspace():
            section = words[-1]
        elif words[0] == "bind":
            if section not in binds:
                raise KeyError(f"no bind address given for section {section!r}")
            out.append(" ".join(["    bind", binds[section], *words[2:]]))
            continue
        elif words[0] == "server":
            if section not in servers:
                raise KeyError(f"no servers given for backend {section!r}")
            if section in replaced:
                continue  # the first server line stood for all of them
            replaced.add(section)
            for n, (address, status) in enumerate(servers[section], 1):
                options = words[3:]
                if "port" in options:
                    options[options.index("port") + 1] = str(status)
                out.append(" ".join(["    server", f"p{n}", address, *options]))
            if not servers[section]:
                out.append("    # no servers")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def deploy_config(
    reverse: Sequence[Server], proxy: Sequence[Server], host: str = "127.0.0.1"
) -> tuple[str, dict[str, str]]:
    """``deploy/haproxy.cfg`` with its listeners on free ports of ``host`` and the given
    servers (host:port, status port) in its reverse and proxy backends; the text, and the
    listeners' addresses by section (toolid_reverse, toolid_proxy, stats)."""
    listeners: dict[str, str] = {}
    for section in ("toolid_reverse", "toolid_proxy", "stats"):
        with socket.socket() as s:
            s.bind((host, 0))
            listeners[section] = f"{host}:{s.getsockname()[1]}"
    servers = {"toolid_reverse": reverse, "toolid_proxy": proxy}
    return render(DEPLOY_CONFIG.read_text(), listeners, servers), listeners


class HAProxy:
    """One ``haproxy`` process in the foreground, its output in ``workdir/haproxy.log``."""

    def __init__(self, workdir: Path, config: str, stats: str) -> None:
        """``stats``: the host:port of the configuration's stats page."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "haproxy.cfg"
        self.config_path.write_text(config)
        self.log_path = workdir / "haproxy.log"
        self.stats_address = stats
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> HAProxy:
        """Check the configuration, start, and wait for the stats page (HAProxy binds every
        listener before it serves any)."""
        exe = executable()
        if exe is None:
            raise HAProxyError("haproxy is not installed (see ensure_installed)")
        check = subprocess.run(
            [exe, "-c", "-f", str(self.config_path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if check.returncode != 0:
            raise HAProxyError(
                f"haproxy -c rejects {self.config_path}:\n{check.stdout}{check.stderr}"
            )
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [exe, "-db", "-f", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        host, port = self.stats_address.rsplit(":", 1)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise HAProxyError(f"haproxy exited at startup:\n{self.log_text()}")
            try:
                with socket.create_connection((host, int(port)), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise HAProxyError(
                        f"haproxy is not listening on {self.stats_address}"
                    ) from None
                time.sleep(0.05)

    def stats(self) -> dict[tuple[str, str], dict[str, str]]:
        """The stats page as CSV: (proxy, server) -> column -> value (``svname`` is
        FRONTEND or BACKEND for the proxy's own row)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{self.stats_address}/;csv;norefresh", timeout=5) as reply:
            text = reply.read().decode()
        rows = csv.DictReader(text.removeprefix("# ").splitlines())
        return {(row["pxname"], row["svname"]): row for row in rows}

    def log_text(self) -> str:
        return read_log(self.log_path)

    def stop(self) -> None:
        stop_process(self.proc)
