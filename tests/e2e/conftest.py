"""Fixtures for the end-to-end tests: real upstream servers and real mitmdump processes.

``mitm.get(mode=..., **options)`` starts (once per session and option set) a
``mitmdump -s addons/toolid_addon.py`` subprocess on a free 127.0.0.1 port, waits until it
accepts connections, and logs its stdout/stderr to a file that tests can read.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from standin import UpstreamServer

from .helpers import rss_mib

REPO_ROOT = Path(__file__).resolve().parents[2]
ADDON = Path(os.environ.get("TOOLID_E2E_ADDON") or REPO_ROOT / "addons" / "toolid_addon.py")
STARTUP_TIMEOUT = 20.0

# A test-only helper addon (loaded after toolid, only into instances that ask for it with
# ``gc_probe=True``): ``GET http://toolid-gc.test/`` through the proxy runs gc.collect() in
# mitmdump and answers with its RSS. mitmproxy's flows hold reference cycles, so their
# memory comes back at the next full collection, not when the flow ends; memory tests
# collect first to measure what is really held.
GC_PROBE_HOST = "toolid-gc.test"
GC_PROBE_ADDON = f"""
import gc, json
from mitmproxy import http

class GcProbe:
    def request(self, flow):
        if flow.request.pretty_host == {GC_PROBE_HOST!r}:
            collected = gc.collect()
            with open("/proc/self/status") as f:
                rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            body = json.dumps({{"collected": collected, "rss_kib": rss}})
            flow.response = http.Response.make(200, body, {{"content-type": "application/json"}})

addons = [GcProbe()]
"""


def _mitmdump_executable() -> str:
    beside = Path(sys.executable).with_name("mitmdump")
    if beside.exists():
        return str(beside)
    found = shutil.which("mitmdump")
    if found is None:
        pytest.fail("mitmdump not found beside the Python interpreter or on PATH")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(repo_on_path: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file as they are written
    if not repo_on_path:
        env.pop("PYTHONPATH", None)
        return env
    # the addon imports toolid: find it in this checkout even if it is not installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


class Mitmdump:
    """One mitmdump subprocess."""

    def __init__(
        self,
        workdir: Path,
        mode: str,
        options: dict[str, str],
        env: dict[str, str] | None = None,
        scripts: list[Path] | None = None,
        *,
        executable: Path | None = None,
        addon: Path | None = ADDON,
        isolated: bool = False,
    ) -> None:
        self.mode = mode
        self.options = options
        self.env = env or {}  # extra environment variables for the subprocess
        self.scripts = scripts or []  # more addons, loaded after toolid
        self.executable = executable  # default: the suite's own mitmdump
        self.addon = addon  # None: no -s (e.g. the scripts of confdir/config.yaml)
        # isolated: run as a user would, in workdir, without this checkout on PYTHONPATH
        self.isolated = isolated
        self.cwd = workdir if isolated else REPO_ROOT  # a relative addon path starts here
        self.confdir = workdir / "confdir"
        self.confdir.mkdir(parents=True)
        self.log_path = workdir / "mitmdump.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_cert(self) -> Path:
        return self.confdir / "mitmproxy-ca-cert.pem"

    def command(self) -> list[str]:
        cmd = [
            str(self.executable or _mitmdump_executable()),
            *(["-s", str(self.addon)] if self.addon else []),
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(self.port),
            "--set",
            f"confdir={self.confdir}",
            "--set",
            "termlog_verbosity=info",
        ]
        for script in self.scripts:
            cmd += ["-s", str(script)]
        if self.mode != "regular":
            cmd += ["--mode", self.mode]
        for name, value in self.options.items():
            cmd += ["--set", f"{name}={value}"]
        return cmd

    def start(self, port: int = 0) -> None:
        """Start on ``port``, or on a free port if 0 (a restart passes its old port)."""
        if self.addon and not (self.cwd / self.addon).exists():
            pytest.fail(f"addon not found: {self.addon}")
        for attempt in range(3):
            self.port = port or free_port()
            with self.log_path.open("ab") as log:
                log.write(f"$ {' '.join(self.command())}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=_clean_env(repo_on_path=not self.isolated) | self.env,
                    cwd=self.cwd,
                )
            if self._wait_ready():
                return
            # the port may have been taken between free_port() and mitmdump binding it
            self.stop()
            if "Address already in use" not in self.log_text() or attempt == 2 or port:
                break
        pytest.fail(
            f"mitmdump did not start within {STARTUP_TIMEOUT:.0f}s "
            f"({' '.join(self.command())}); its output:\n{self.log_text()}"
        )

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_mib(self) -> float:
        """The process's resident set size now (from /proc), in MiB."""
        return rss_mib(self.pid)

    def collect_garbage(self) -> float:
        """Run a full garbage collection in mitmdump (needs ``gc_probe=True``); return
        its RSS afterwards, in MiB."""
        with httpx.Client(proxy=self.url, trust_env=False, timeout=30) as client:
            reply = client.get(f"http://{GC_PROBE_HOST}/")
        assert reply.status_code == 200, reply.text
        return int(reply.json()["rss_kib"]) / 1024

    def terminate(self) -> None:
        """Ask mitmdump to exit (``wait_exited`` waits for it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def wait_exited(self) -> None:
        """Wait for a mitmdump asked to exit; kill it after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        self.terminate()
        self.wait_exited()

    # the log

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def mark(self) -> int:
        """A position in the log; see :meth:`log_since`."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_since(self, mark: int) -> str:
        with self.log_path.open("rb") as f:
            f.seek(mark)
            return f.read().decode("utf-8", "replace")

    def wait_for_log(self, needle: str, mark: int = 0, timeout: float = 5.0) -> str:
        """Wait until a log line after ``mark`` contains ``needle``; return that line."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_since(mark).splitlines():
                if needle in line:
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no mitmdump log line containing {needle!r} within {timeout}s; "
                    f"log since mark:\n{self.log_since(mark)}"
                )
            time.sleep(0.05)


class MitmdumpPool:
    """Starts each distinct mitmdump configuration once per session.

    ``tag`` gives a test its own instance even with the same options (so that its log and
    memory are its own); ``env`` adds environment variables (also part of the key)."""

    def __init__(self, basedir: Path) -> None:
        self.basedir = basedir
        self.instances: dict[tuple[object, ...], Mitmdump] = {}

    def get(
        self,
        mode: str = "regular",
        *,
        tag: str = "",
        env: dict[str, str] | None = None,
        gc_probe: bool = False,
        **options: object,
    ) -> Mitmdump:
        opts = {"ssl_insecure": "true"}  # the TLS upstream's certificate is self-signed
        opts.update(
            {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
        )
        key: tuple[object, ...] = (mode, tuple(sorted(opts.items())))
        if tag or env or gc_probe:
            key += (tag, tuple(sorted((env or {}).items())), gc_probe)
        inst = self.instances.get(key)
        if inst is not None and inst.alive():
            return inst
        if inst is not None:
            pytest.fail(f"mitmdump ({mode}, {opts}) died earlier; its output:\n{inst.log_text()}")
        scripts = []
        if gc_probe:
            scripts.append(self.basedir / "gc_probe_addon.py")
            scripts[0].write_text(GC_PROBE_ADDON)
        workdir = self.basedir / f"mitmdump-{len(self.instances)}"
        inst = Mitmdump(workdir, mode, opts, env, scripts)
        self.instances[key] = inst
        inst.start()
        return inst

    @contextmanager
    def watching(self, inst: Mitmdump) -> Iterator[Mitmdump]:
        """Start ``inst`` (made by the caller: another mitmdump, addon or working directory)
        and health-check it after each test like the pool's own; stop it when done."""
        key = ("watched", id(inst))
        self.instances[key] = inst
        try:
            inst.start()
            yield inst
        finally:
            del self.instances[key]
            inst.stop()

    def close(self) -> None:
        for inst in self.instances.values():  # all asked at once: each takes a moment to exit
            inst.terminate()
        for inst in self.instances.values():
            inst.wait_exited()


@pytest.fixture(scope="session")
def upstream() -> Iterator[UpstreamServer]:
    server = UpstreamServer().start()
    yield server
    server.stop()
    assert not server.errors, f"upstream harness errors: {server.errors}"


@pytest.fixture(scope="session")
def tls_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamServer]:
    server = UpstreamServer(tls=True, cert_dir=tmp_path_factory.mktemp("upstream-tls")).start()
    yield server
    server.stop()
    assert not server.errors, f"upstream harness errors: {server.errors}"


@pytest.fixture(scope="session")
def mitm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MitmdumpPool]:
    pool = MitmdumpPool(tmp_path_factory.mktemp("mitmdump"))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def proxy(mitm: MitmdumpPool) -> Mitmdump:
    """mitmdump in regular proxy mode with the addon's defaults."""
    return mitm.get()


@pytest.fixture(scope="session")
def reverse_proxy(mitm: MitmdumpPool, upstream: UpstreamServer) -> Mitmdump:
    """mitmdump as a reverse proxy in front of the plain upstream."""
    return mitm.get(mode=f"reverse:{upstream.base_url}")


@pytest.fixture(autouse=True)
def _mitmdump_health(request: pytest.FixtureRequest, mitm: MitmdumpPool) -> Iterator[None]:
    """Fail a test after which a mitmdump crashed or logged a traceback, and attach
    what mitmdump logged during the test to the report."""
    marks = {key: inst.mark() for key, inst in mitm.instances.items()}
    yield
    problems = []
    for key, inst in mitm.instances.items():
        text = inst.log_since(marks.get(key, 0))
        if text.strip():
            request.node.add_report_section("call", f"mitmdump {inst.mode} {inst.options}", text)
        if not inst.alive():
            problems.append(f"mitmdump {inst.mode} {inst.options} exited:\n{text}")
        elif "Traceback" in text or "has crashed" in text or "Addon error" in text:
            problems.append(f"mitmdump {inst.mode} {inst.options} logged an error:\n{text}")
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def no_aws_configuration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS configuration of the machine reaches boto3."""
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
