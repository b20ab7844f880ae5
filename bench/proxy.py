"""Start the processes under test: the upstream and ``mitmdump`` (plain, or with the addon).

Each ``mitmdump`` listens on a free 127.0.0.1 port (``--listen-port 0``; the port is read from
its log), has its own ``confdir`` and proxies in reverse mode to the local upstream.

Every subprocess imports toolid from this checkout (its root first on ``PYTHONPATH``): a venv's
editable install may point at another checkout of the project, and mitmdump does not put the
working directory on ``sys.path``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ADDON = REPO_ROOT / "addons" / "toolid_addon.py"
STARTUP_TIMEOUT = 30.0
_LISTENING = re.compile(r"listening at 127\.0\.0\.1:(\d+)")


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment for a subprocess: no proxy variables, unbuffered output, this checkout
    first on ``PYTHONPATH``, and ``extra`` (``TOOLID_NATIVE=off``, for one)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])
    env.update(extra or {})
    return env


def mitmdump_executable() -> str:
    beside = Path(sys.executable).with_name("mitmdump")
    if beside.exists():
        return str(beside)
    found = shutil.which("mitmdump")
    if found is None:
        raise RuntimeError("mitmdump not found beside the Python interpreter or on PATH")
    return found


class Upstream:
    """``python -m bench.upstream`` as a subprocess."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.upstream"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "READY":
            self.stop()
            raise RuntimeError(f"the upstream did not start (said {line!r})")
        self.port = int(line[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Mitmdump:
    """One ``mitmdump`` subprocess in reverse mode to ``upstream_port``. ``addon``: this
    checkout's addon (True), none (False), or the addon script of another tree of toolid (its
    ``addons/toolid_addon.py``: that tree's toolid is the one imported). ``env``: variables to
    set in its environment (``TOOLID_NATIVE=off``: the addon without the native accelerator).
    ``under``: a command it runs under (``perf record ... --``). ``wait=False``: return at
    once, and ``ready()`` waits (to start several side by side)."""

    def __init__(
        self,
        workdir: Path,
        upstream_port: int,
        *,
        addon: bool | Path,
        options: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        under: Sequence[str] = (),
        wait: bool = True,
    ) -> None:
        self.confdir = workdir / "confdir"
        self.confdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "mitmdump.log"
        script = ADDON if addon is True else addon if isinstance(addon, Path) else None
        tree = REPO_ROOT if script is None else script.resolve().parents[1]
        cmd = [mitmdump_executable()]
        if script is not None:
            cmd += ["-s", str(script)]
        cmd += [
            "--mode",
            f"reverse:http://127.0.0.1:{upstream_port}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            "0",
            "--set",
            f"confdir={self.confdir}",
            "--set",
            "flow_detail=0",  # no per-flow line on stdout: measure the proxy, not the tty
        ]
        for name, value in (options or {}).items():
            cmd += ["--set", f"{name}={value}"]
        self.command = cmd
        if tree != REPO_ROOT:  # another tree's toolid first on the import path
            env = {**(env or {}), "PYTHONPATH": str(tree)}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [*under, *cmd],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=subprocess_env(env),
                cwd=tree,
            )
        self.port = 0
        if wait:
            self.ready()

    def ready(self) -> Mitmdump:
        """Wait until it listens (``port`` is set then)."""
        if not self.port:
            self.port = self._wait_port()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_port(self) -> int:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.log_text())
            if match:
                return int(match.group(1))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mitmdump did not start: {' '.join(self.command)}\n{self.log_text()}")

    def log_text(self) -> str:
        return read_log(self.log_path)

    def stop(self) -> None:
        stop_process(self.proc)

    # --- memory (Linux /proc) --------------------------------------------------------------

    def status_kib(self, field: str) -> int:
        """A ``/proc/<pid>/status`` field in KiB (VmRSS, VmHWM); 0 where unavailable."""
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0
        match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
        return int(match.group(1)) if match else 0

    def reset_peak(self) -> bool:
        """Reset VmHWM to the current RSS (``/proc/<pid>/clear_refs`` 5); False if not allowed."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far."""
        return cpu_seconds(self.pid)

    def cpu_ns(self) -> int:
        """Nanoseconds on a CPU of all the process's threads so far (precise, unlike ticks)."""
        return cpu_ns(self.pid)


def read_log(path: Path) -> str:
    """A subprocess's log file so far ("" before it exists)."""
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """Terminate ``proc`` if it still runs (killed after 10 s), and reap it."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (0.0 if it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def cpu_ns(pid: int) -> int:
    """Nanoseconds process ``pid``'s threads ran on a CPU (``/proc/<pid>/task/*/schedstat``);
    0 if it cannot be read."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total
