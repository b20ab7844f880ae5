"""``toolid run [options] -- COMMAND [ARGS...]``: COMMAND with a toolid proxy of its own.

run starts mitmproxy with toolid's addon on a free loopback port, runs COMMAND with the
terminal as its own and an environment that sends its HTTP(S) through the proxy and trusts
mitmproxy's CA, stops the proxy when COMMAND is done, prints a short summary on stderr and
exits with COMMAND's exit status (128+N when signal N ended it, as shells say it). The
library never imports mitmproxy: run starts the proxy as a process of this Python, which has
mitmproxy where toolid is installed with its ``proxy`` extra (``scripts/run`` uses the
checkout's ``.venv``).

The proxy
    ``python toolid_launch.py mitmdump --listen-host 127.0.0.1 --listen-port 0 --set
    flow_detail=0 --set toolid_status=127.0.0.1:0``, then the user's options (the defaults of
    ``scripts/proxy``, on free ports). The launcher (``addons/toolid_launch.py``) registers
    toolid before mitmproxy binds anything, so an option toolid refuses stops the proxy
    before it listens; run then shows the end of its log and never starts COMMAND. The proxy
    runs in a session of its own, so no signal of the terminal reaches it. Its output goes to
    the log file only, never to the terminal, which is COMMAND's. It inherits one end of a
    socket pair: once it serves, it writes there where it listens (each server's address,
    the status endpoint's, the CA file), which is what run waits for (no port is picked or
    polled, and whatever log level the user sets changes nothing); and it shuts down when
    the other end closes, so that even a run killed by SIGKILL leaves no proxy behind. At the
    end run reads ``/metrics`` from the status endpoint for its summary, then stops the proxy
    (SIGTERM; SIGKILL after 10 s) and waits for it.

The log
    ``$XDG_STATE_HOME/toolid/run-<time>-<pid>.log`` (``~/.local/state/toolid/`` without
    XDG_STATE_HOME): the XDG base directories' place for logs, state that outlives a run but
    is no document of the user's; not the working directory, which is the agent's (a
    repository it reads and commits), nor /tmp, shared and emptied at boot. One file per run,
    so that runs side by side never mix their lines; the newest 20 are kept.

COMMAND's environment
    run's own, with:

    - ``HTTPS_PROXY``, ``HTTP_PROXY``, ``https_proxy``, ``http_proxy``: the proxy (for a
      regular or upstream mode), which every runtime the agents use reads (Node and Bun, Codex's
      Rust client, Python's httpx, requests and aiohttp). Loopback is taken out of
      ``NO_PROXY`` and ``no_proxy`` (their other entries stay): an upstream on 127.0.0.1, a
      local vLLM, then goes through toolid too, as none of those runtimes bypasses a proxy for
      loopback unless told to. (Go's net/http never proxies loopback: a Go program reaches
      such an upstream through toolid in reverse mode.)
    - ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE`` and
      ``CODEX_CA_CERTIFICATE``: a bundle of the CAs COMMAND trusted before (the file
      SSL_CERT_FILE or REQUESTS_CA_BUNDLE named, else the system's, from
      ``ssl.get_default_verify_paths()``, the usual Debian, Red Hat, SUSE and macOS paths, or
      certifi) and mitmproxy's: those variables replace a runtime's own list, and HTTPS that
      toolid does not intercept (hosts outside ``toolid_hosts``, a program's own checks) keeps
      working. It is written to a private temporary folder, removed at the end. Other tools'
      bundle variables that are set already (``AWS_CA_BUNDLE``, ``PIP_CERT``,
      ``GIT_SSL_CAINFO``, ...: ``IF_SET_VARIABLES``) name it too.
    - ``NODE_EXTRA_CA_CERTS``: mitmproxy's CA, which Node and Bun add to their own list (with
      the certificates of a NODE_EXTRA_CA_CERTS set before, in one file).
    - in reverse mode, the base URLs instead: ``OPENAI_BASE_URL`` (``/v1`` added unless the
      upstream's URL ends in it), ``ANTHROPIC_BASE_URL`` and ``GOOGLE_GEMINI_BASE_URL``.

The terminal and signals
    When run's process group owns its terminal (a shell started run in the foreground),
    COMMAND runs in a process group of its own that run makes the terminal's foreground group,
    as a shell's job control does. The terminal's signals (Ctrl-C's SIGINT, Ctrl-\\'s SIGQUIT,
    Ctrl-Z, a new window size) then reach COMMAND and its children, once, and never run,
    which is in the background: run never passes on a Ctrl-C that COMMAND had already got
    (a second Ctrl-C makes Claude Code exit). So every SIGINT, SIGTERM, SIGHUP or SIGQUIT run
    gets was sent to run itself (kill, a supervisor, the shell at hang-up): run passes it on
    to COMMAND's group, waits for COMMAND to exit (it may still be finishing a request), then
    stops the proxy. When COMMAND stops (Ctrl-Z), run takes the terminal back and stops
    itself with the same signal, so that the shell shows the job stopped; continued in the
    foreground (``fg``), it gives the terminal back to COMMAND and continues it. At the end
    run takes the terminal back, and restores its modes if a signal ended COMMAND (which may
    have left it raw).

    Without a terminal to own (no controlling terminal, or run in the background), COMMAND
    runs in run's process group, as under ``env``, so that whatever stops or kills that group
    (a CI runner, ``timeout``) reaches COMMAND too, even a SIGKILL, and run passes on each
    relayed signal it gets to COMMAND. One sent to the whole group then reaches COMMAND twice
    (run cannot tell it from one sent to run alone): no terminal is there to send a Ctrl-C,
    and a program asked to terminate or hang up stops at the first.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import termios
import time
import types
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

USAGE = "toolid run [--save FILE] [--web] [mitmproxy options...] -- COMMAND [ARGS...]"
DESCRIPTION = f"""usage: {USAGE}

Run COMMAND (an agent, an SDK script) with its HTTP(S) through a toolid proxy of its own: toolid
starts mitmproxy with its addon on a free 127.0.0.1 port, runs COMMAND on your terminal with
HTTPS_PROXY, HTTP_PROXY, NO_PROXY (loopback removed) and the CA variables of every runtime set
(SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE and CODEX_CA_CERTIFICATE at your CAs plus
mitmproxy's, NODE_EXTRA_CA_CERTS at mitmproxy's), stops the proxy when COMMAND ends, prints a
summary (flows, ids encoded, restored, tagged, minted, repairs, pairing problems, upstream
rejections) and exits with COMMAND's exit status. With --mode reverse:URL, COMMAND gets
OPENAI_BASE_URL, ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL at the proxy instead. The
proxy's log goes to a file under ${{XDG_STATE_HOME:-~/.local/state}}/toolid/, named at the
start and in the summary.

options:
  --save FILE   keep the flows in FILE (mitmproxy's --save-stream-file, streamed bodies
                included) for `toolid inspect FILE` and mitmweb
  --web         run mitmweb instead of mitmdump; its URL is printed at the start
  -h, --help    show this help

Every other option before -- goes to mitmproxy after toolid's defaults (--listen-host
127.0.0.1 --listen-port 0 --set flow_detail=0 --set toolid_status=127.0.0.1:0), as for
scripts/proxy: --set toolid_repair=true, --mode reverse:http://127.0.0.1:8000, --set
ssl_verify_upstream_trusted_ca=FILE. TOOLID_DRY_RUN=1 prints the proxy's command and
COMMAND, and runs neither."""

KEEP_LOGS = 20  # run logs kept in the log folder
READY_TIMEOUT = 60.0  # seconds the proxy has to start serving
STOP_TIMEOUT = 10.0  # seconds the proxy has to exit once asked, before SIGKILL
SCRAPE_TIMEOUT = 5.0  # seconds for /metrics
LOG_TAIL = 15  # lines of the log shown when the proxy does not start
FD_VARIABLE = "TOOLID_LAUNCH_FD"  # addons/toolid_launch.py reads it
# Signals run passes on to COMMAND (SIGTSTP, SIGCONT and SIGWINCH are the terminal's affair).
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
PROXY_MODES = frozenset({"regular", "upstream"})
BUNDLE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "CODEX_CA_CERTIFICATE")
# Other tools' CA bundle variables: one that is set already names the bundle too, or that tool
# would not trust mitmproxy's CA (boto3, pip, git, httplib2, Nix, gcloud, Deno, npm).
IF_SET_VARIABLES = (
    "AWS_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "HTTPLIB2_CA_CERTS",
    "NIX_SSL_CERT_FILE",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
    "DENO_CERT",
    "NPM_CONFIG_CAFILE",
    "npm_config_cafile",
)
# Where systems keep their CA bundle, when ssl.get_default_verify_paths() names none there.
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Alpine, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL, CentOS
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  # RHEL 7 and later
    "/etc/ssl/ca-bundle.pem",  # openSUSE, SLES
    "/etc/ssl/cert.pem",  # macOS, FreeBSD, Alpine
    "/opt/homebrew/etc/ca-certificates/cert.pem",  # Homebrew (Apple silicon)
    "/usr/local/etc/ca-certificates/cert.pem",  # Homebrew (Intel)
)
_SAMPLE = re.compile(r'^([A-Za-z_:][\w:]*)(?:\{(\w+)="((?:[^"\\]|\\.)*)"\})? (\S+)$')


class UsageError(Exception):
    """The command line is wrong (exit status 2)."""


class Failed(Exception):
    """run cannot go on; the message says why (exit status 1, or ``status``)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class Interrupted(Exception):
    """run itself got signal ``signum`` while COMMAND was not running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Invocation:
    """What ``toolid run`` was asked: the mitmproxy tool, the user's mitmproxy options, the
    file to save flows in, and COMMAND."""

    tool: str = "mitmdump"
    options: list[str] = field(default_factory=list)
    save: str | None = None
    command: list[str] = field(default_factory=list)
    help: bool = False


def parse(argv: Sequence[str]) -> Invocation:
    """Split ``argv`` at the first ``--``: run's options and mitmproxy's before it, COMMAND
    after it. Raises ``UsageError``."""
    invocation = Invocation()
    if "--" not in argv:
        if any(arg in ("-h", "--help") for arg in argv):
            invocation.help = True
            return invocation
        raise UsageError("put -- before the command to run")
    at = list(argv).index("--")
    before, invocation.command = list(argv[:at]), list(argv[at + 1 :])
    i = 0
    while i < len(before):
        arg = before[i]
        if arg in ("-h", "--help"):
            invocation.help = True
        elif arg == "--web":
            invocation.tool = "mitmweb"
        elif arg == "--console":
            raise UsageError("--console needs the terminal, which is COMMAND's; use --web")
        elif arg == "--save" or arg.startswith("--save="):
            if arg == "--save":
                if i + 1 >= len(before):
                    raise UsageError("--save needs a FILE")
                i += 1
                value = before[i]
            else:
                value = arg.partition("=")[2]
            if not value:
                raise UsageError("--save needs a FILE")
            invocation.save = value
        else:
            invocation.options.append(arg)
        i += 1
    if not invocation.command and not invocation.help:
        raise UsageError("no command after --")
    return invocation


def set_names(options: Sequence[str]) -> set[str]:
    """The option names the user sets with ``--set NAME=VALUE`` (or ``--set=NAME=VALUE``)."""
    names = set()
    for i, arg in enumerate(options):
        if arg == "--set" and i + 1 < len(options):
            names.add(options[i + 1].partition("=")[0])
        elif arg.startswith("--set="):
            names.add(arg.removeprefix("--set=").partition("=")[0])
    return names


def launcher() -> Path | None:
    """``toolid_launch.py`` of this toolid: inside the package when installed (the wheel
    carries addons/ as toolid/addons/), beside it in a checkout."""
    package = Path(__file__).resolve().parent
    for addons in (package / "addons", package.parent / "addons"):
        if (addons / "toolid_launch.py").is_file():
            return addons / "toolid_launch.py"
    return None


def proxy_command(invocation: Invocation, launch: Path) -> list[str]:
    """The proxy's command line: toolid's defaults, then the user's options (later ones
    win). A default the user sets with ``--set`` is left out, as mitmproxy applies a named
    option (``--listen-port``) over ``--set``."""
    given = set_names(invocation.options)
    command = [sys.executable, str(launch), invocation.tool]
    if "listen_host" not in given:
        command += ["--listen-host", "127.0.0.1"]
    if "listen_port" not in given:
        command += ["--listen-port", "0"]
    if invocation.tool == "mitmdump":  # its flow lines would print whole URLs, ?key= included
        command += ["--set", "flow_detail=0"]
    if "toolid_status" not in given:  # the summary's counts come from /metrics
        command += ["--set", "toolid_status=127.0.0.1:0"]
    if invocation.tool == "mitmweb":
        if "web_host" not in given:
            command += ["--web-host", "127.0.0.1"]
        command += ["--set", "web_open_browser=false"]
    if invocation.tool == "mitmweb" or invocation.save:  # agents' traffic is nearly all streamed
        command += ["--set", "store_streamed_bodies=true"]
    if invocation.save:
        append = "+" if invocation.save.startswith("+") else ""
        command += ["--save-stream-file", append + os.path.abspath(invocation.save.lstrip("+"))]
    return command + invocation.options


# --- the log ----------------------------------------------------------------------------------


def log_folder(environ: Mapping[str, str]) -> Path:
    """``$XDG_STATE_HOME/toolid``, or ``~/.local/state/toolid``."""
    state = environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):  # the XDG spec: a relative path is to be ignored
        state = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(state) / "toolid"


def new_log(environ: Mapping[str, str]) -> Path:
    """A new log file's path for this run (its folder made), the oldest beyond KEEP_LOGS
    removed."""
    folder = log_folder(environ)
    folder.mkdir(parents=True, exist_ok=True)
    logs = sorted(folder.glob("run-*.log"), key=_modified)
    for old in logs[: max(0, len(logs) - KEEP_LOGS + 1)]:
        with contextlib.suppress(OSError):  # another run's pruning was first
            old.unlink()
    return folder / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # gone meanwhile
        return 0.0


def tail(path: Path, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` lines of ``path``."""
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --- the proxy ---------------------------------------------------------------------------------


@dataclass
class Serving:
    """Where the proxy serves, as the launcher announced it."""

    servers: list[dict[str, Any]]
    status: tuple[str, int] | None
    ca: Path
    proxyauth: str | None
    web: str | None

    @classmethod
    def of(cls, announced: Mapping[str, Any]) -> Serving:
        """The launcher's announcement (``addons/toolid_launch.py``'s ``serving``), read."""
        status = announced.get("status")
        return cls(
            servers=list(announced.get("servers") or ()),
            status=(str(status[0]), int(status[1])) if status else None,
            ca=Path(announced["ca"]),
            proxyauth=announced.get("proxyauth"),
            web=announced.get("web"),
        )

    def url(self, *types: str) -> tuple[str, str] | None:
        """The first server of one of ``types``: its URL (``http://HOST:PORT``, a wildcard
        address as loopback) and its mode spec."""
        for server in self.servers:
            if server["type"] in types and server["addresses"]:
                host, port = server["addresses"][0][:2]
                host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
                return f"http://{f'[{host}]' if ':' in host else host}:{port}", server["mode"]
        return None

    def proxy_url(self) -> str | None:
        """The URL COMMAND's proxy variables hold (with the credentials of a ``proxyauth``
        of the ``USER:PASS`` form), or None without a regular or upstream server."""
        found = self.url(*PROXY_MODES)
        if found is None:
            return None
        url, _ = found
        auth = self.proxyauth or ""
        if ":" in auth and not auth.startswith(("@", "ldap")):
            user, _, password = auth.partition(":")
            quoted = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
            url = url.replace("http://", f"http://{quoted}@", 1)
        return url


class Proxy:
    """The proxy process: started, waited for until it serves, asked for its counts, stopped."""

    def __init__(self, command: list[str], log: Path, environ: Mapping[str, str]) -> None:
        self.log = log
        ours, theirs = socket.socketpair()
        self.control = ours
        env = {**environ, FD_VARIABLE: str(theirs.fileno()), "PYTHONUNBUFFERED": "1"}
        try:
            with log.open("ab") as out:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # the terminal's signals never reach it
                    pass_fds=(theirs.fileno(),),
                )
        finally:
            theirs.close()

    def wait_serving(self) -> Serving:
        """The announcement the proxy makes once it serves; ``Failed`` (its log's last lines)
        if it exits (or closes the socket) first, or takes longer than READY_TIMEOUT."""
        self.control.settimeout(READY_TIMEOUT)
        data = b""
        try:
            while not data.endswith(b"\n"):
                piece = self.control.recv(65536)
                if not piece:
                    break
                data += piece
        except TimeoutError:
            raise Failed(
                f"the proxy did not start within {READY_TIMEOUT:.0f} s; the end of its log, "
                f"{self.log}:\n{tail(self.log)}"
            ) from None
        if not data.endswith(b"\n"):
            try:
                status = self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                status = None
            raise Failed(
                f"the proxy did not start (exit status {status}); the end of its log, "
                f"{self.log}:\n{tail(self.log)}"
            )
        return Serving.of(json.loads(data))

    def metrics(self, serving: Serving) -> str | None:
        """The status endpoint's ``/metrics`` text, or None (no endpoint, or no answer)."""
        if serving.status is None or self.process.poll() is not None:
            return None
        host, port = serving.status
        connection = http.client.HTTPConnection(host, port, timeout=SCRAPE_TIMEOUT)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read()
        except OSError:
            return None
        finally:
            connection.close()
        return body.decode("utf-8", "replace") if response.status == 200 else None

    def stop(self) -> int | None:
        """Ask the proxy to exit (SIGTERM, and the control socket closed), wait for it; kill
        its process group after STOP_TIMEOUT. Its exit status if it had exited by itself
        before, else None."""
        early = self.process.poll()
        if early is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
        self.control.close()
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        return early


# --- COMMAND's environment ----------------------------------------------------------------------


def system_bundle(environ: Mapping[str, str]) -> Path | None:
    """The CA bundle COMMAND would trust without toolid: the file its SSL_CERT_FILE or
    REQUESTS_CA_BUNDLE names, else the system's, else certifi's (None: none found)."""
    paths = ssl.get_default_verify_paths()
    candidates = [environ.get("SSL_CERT_FILE"), environ.get("REQUESTS_CA_BUNDLE")]
    candidates += [paths.cafile, paths.openssl_cafile, *SYSTEM_BUNDLES]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return Path(candidate)
    if importlib.util.find_spec("certifi") is not None:
        import certifi  # noqa: PLC0415 (optional: only when the system has no bundle)

        return Path(certifi.where())
    return None


def pem(path: Path) -> bytes:
    """A PEM file's bytes, ending in a newline."""
    data = path.read_bytes()
    return data if data.endswith(b"\n") else data + b"\n"


def without_loopback(value: str) -> str:
    """A NO_PROXY list without its loopback entries (localhost and its subdomains,
    127.0.0.0/8, ::1; with or without a port), the others as they were."""
    kept = []
    for entry in value.split(","):
        name = entry.strip()
        host = name.lower()
        if host.startswith("["):  # [::1], [::1]:8000
            host = host[1:].partition("]")[0]
        elif host.count(":") == 1:  # HOST:PORT
            host = host.partition(":")[0]
        host = host.removeprefix("*").removeprefix(".")
        if not name or host in LOOPBACK_NAMES or host.endswith(".localhost"):
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(host.partition("/")[0]).is_loopback:
                continue
        kept.append(name)
    return ",".join(kept)


def command_environment(
    environ: Mapping[str, str], serving: Serving, folder: Path
) -> tuple[dict[str, str], list[str]]:
    """COMMAND's environment (see the module's docstring), with the CA files it needs
    written to ``folder``; and warnings for the user."""
    env = dict(environ)
    warnings: list[str] = []
    proxy = serving.proxy_url()
    if proxy is not None:
        before = environ.get("HTTPS_PROXY") or environ.get("https_proxy")
        if before and serving.url("upstream") is None:
            warnings.append(
                f"COMMAND's HTTPS_PROXY was {_hide_password(before)}; toolid connects "
                "directly (--mode upstream:URL sends its traffic through that proxy)"
            )
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            env[name] = proxy
        no_proxy = ",".join(filter(None, (environ.get("NO_PROXY"), environ.get("no_proxy"))))
        kept = without_loopback(no_proxy)
        for name in ("NO_PROXY", "no_proxy"):
            if kept:
                env[name] = kept
            else:
                env.pop(name, None)
    reverse = serving.url("reverse")
    if reverse is not None:
        url, mode = reverse
        upstream = re.sub(r"@[^/]*$", "", mode.partition(":")[2])  # without a listen @PORT
        v1 = urllib.parse.urlsplit(upstream).path.rstrip("/").endswith("/v1")
        env["OPENAI_BASE_URL"] = url if v1 else f"{url}/v1"
        env["ANTHROPIC_BASE_URL"] = url
        env["GOOGLE_GEMINI_BASE_URL"] = url
    if serving.servers and all(server["type"] == "reverse" for server in serving.servers):
        return env, warnings  # plain HTTP to the proxy: no CA to trust
    ca = pem(serving.ca)
    base = system_bundle(environ)
    if base is None:
        warnings.append(
            "no system CA bundle found: COMMAND trusts only mitmproxy's CA, so HTTPS that "
            "toolid does not intercept fails in it"
        )
    bundle = folder / "ca-bundle.pem"
    bundle.write_bytes((pem(base) if base else b"") + ca)
    for name in BUNDLE_VARIABLES + tuple(name for name in IF_SET_VARIABLES if environ.get(name)):
        env[name] = str(bundle)
    extra = environ.get("NODE_EXTRA_CA_CERTS")
    if extra and os.path.isfile(extra):
        node = folder / "node-extra-ca-certs.pem"
        node.write_bytes(pem(Path(extra)) + ca)
        env["NODE_EXTRA_CA_CERTS"] = str(node)
    else:
        env["NODE_EXTRA_CA_CERTS"] = str(serving.ca)
    return env, warnings


# --- the summary -------------------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, dict[str, float]]:
    """A Prometheus text exposition as {series name: {label value: sample value}} (``""``
    for a sample without a label); comments and malformed lines are skipped."""
    series: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        name, _, label, value = match.groups()
        with contextlib.suppress(ValueError):
            series.setdefault(name, {})[label or ""] = float(value)
    return series


def _count(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _by_code(values: Mapping[str, float], what: str) -> str:
    found = [f"{_count(value)} {code}" for code, value in sorted(values.items()) if value]
    return f"{what}: {', '.join(found)}" if found else f"no {what}"


def summary(metrics: str | None) -> str:
    """One line of what toolid did, from its ``/metrics`` (a series it lacks is left out)."""
    if metrics is None:
        return "no counts (no status endpoint to read them from)"
    series = parse_metrics(metrics)
    parts = []
    if "toolid_flows_total" in series:
        flows = int(sum(series["toolid_flows_total"].values()))
        parts.append(f"{flows} flow{'s' if flows != 1 else ''}")
    ids = series.get("toolid_ids_total", {})
    actions = [
        f"{_count(ids[action])} {action}"
        for action in ("encoded", "restored", "tagged", "minted")
        if action in ids
    ]
    if actions:
        parts.append("ids " + ", ".join(actions))
    if "toolid_repairs_total" in series:
        repairs = int(sum(series["toolid_repairs_total"].values()))
        parts.append(f"{repairs} repair{'s' if repairs != 1 else ''}")
    if "toolid_pairing_problems_total" in series:
        parts.append(_by_code(series["toolid_pairing_problems_total"], "pairing problems"))
    if "toolid_upstream_rejections_total" in series:
        parts.append(_by_code(series["toolid_upstream_rejections_total"], "upstream rejections"))
    return "; ".join(parts) or "no counts"


# --- COMMAND on the terminal -------------------------------------------------------------------


def controlling_terminal() -> int | None:
    """A descriptor of run's controlling terminal when run's process group is its foreground
    group, else None."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def give_terminal(fd: int, group: int) -> None:
    """Make ``group`` the terminal's foreground group (from the background too: SIGTTOU
    ignored meanwhile); a terminal that has gone is left alone."""
    before = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, group)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, before)


class Relay:
    """run's handler of the RELAYED signals: passed on to COMMAND while it runs (to its
    process group when it has one), else ``Interrupted`` raised in run."""

    def __init__(self) -> None:
        self.target: int | None = None  # COMMAND's pid, or its group's id (negative)
        self.installed: dict[int, Any] = {}

    def install(self) -> None:
        """Handle each RELAYED signal that is not ignored (one ignored stays so, for COMMAND
        too, as it would without toolid)."""
        for signum in RELAYED:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                self.installed[signum] = signal.signal(signum, self)

    def uninstall(self) -> None:
        """Put back the handlers ``install`` replaced."""
        for signum, before in self.installed.items():
            signal.signal(signum, before)
        self.installed.clear()

    def __call__(self, signum: int, frame: types.FrameType | None) -> None:
        if self.target is None:
            raise Interrupted(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.target, signum)

    def reset_in_child(self) -> None:
        """In COMMAND's process before it executes: the relayed signals as run found them."""
        for signum in self.installed:
            signal.signal(signum, signal.SIG_DFL)


def run_command(
    command: Sequence[str], executable: str, env: Mapping[str, str], relay: Relay
) -> int:
    """Run COMMAND on run's terminal (see the module's docstring); its exit status. The
    relayed signals are blocked while it is spawned: one that comes meanwhile reaches it
    once it is known."""
    terminal = controlling_terminal()
    saved = None
    if terminal is not None:
        with contextlib.suppress(termios.error):
            saved = termios.tcgetattr(terminal)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, relay.installed)

    def in_child() -> None:
        relay.reset_in_child()
        if terminal is not None:  # as a shell does, in the child too: no race with run
            give_terminal(terminal, os.getpgrp())
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    try:
        try:
            process = subprocess.Popen(
                list(command),
                executable=executable,
                env=dict(env),
                process_group=0 if terminal is not None else None,
                preexec_fn=in_child,  # noqa: PLW1509 (run has no other thread)
            )
        except OSError as error:  # found, but it does not execute (a bad #! line, ...)
            if terminal is not None:
                os.close(terminal)
            raise Failed(f"{command[0]}: {error.strerror or error}", 126) from None
        if terminal is not None:
            relay.target = -process.pid
            give_terminal(terminal, process.pid)
        else:
            relay.target = process.pid
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    status: int | None = None
    try:
        status = wait(process, terminal)
    finally:
        relay.target = None
        if terminal is not None:
            give_terminal(terminal, os.getpgrp())
            if saved is not None and status is not None and os.WIFSIGNALED(status):
                with contextlib.suppress(termios.error):
                    termios.tcsetattr(terminal, termios.TCSADRAIN, saved)
            os.close(terminal)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def wait(process: subprocess.Popen[bytes], terminal: int | None) -> int:
    """Wait for COMMAND to exit; its wait status. With a terminal, a COMMAND that stops
    (Ctrl-Z) stops run too, with the same signal, and is continued with it, in the
    foreground if run is."""
    options = os.WUNTRACED if terminal is not None else 0
    while True:
        _, status = os.waitpid(process.pid, options)
        if terminal is None or not os.WIFSTOPPED(status):
            process.returncode = os.waitstatus_to_exitcode(status)
            return status
        give_terminal(terminal, os.getpgrp())
        os.kill(os.getpid(), os.WSTOPSIG(status))
        # continued: by fg, which gave run the terminal, or by bg, which did not
        if os.tcgetpgrp(terminal) == os.getpgrp():
            give_terminal(terminal, process.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGCONT)


# --- run ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def private_folder() -> Iterator[Path]:
    """A temporary folder only this user can read, removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="toolid-run-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def resolve(command: Sequence[str], environ: Mapping[str, str]) -> str:
    """COMMAND's executable, looked up on COMMAND's PATH; ``Failed`` (127, 126) if none."""
    name = command[0]
    found = shutil.which(name, path=environ.get("PATH", os.defpath))
    if found is not None:
        return found
    if os.sep in name and os.path.exists(name):
        raise Failed(f"{name}: not executable", 126)
    raise Failed(f"{name}: command not found", 127)


def say(stderr: TextIO, line: str) -> None:
    """Write ``toolid: line`` to ``stderr`` (a terminal that has gone is left alone)."""
    with contextlib.suppress(OSError):
        stderr.write(f"toolid: {line}\n")
        stderr.flush()


def main(
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """``toolid run`` with ``argv`` (what follows ``run``); the exit status: COMMAND's,
    2 for a wrong command line, 1 when the proxy cannot run, 127 when COMMAND is not found."""
    environ = os.environ if environ is None else environ
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    try:
        invocation = parse(argv)
    except UsageError as error:
        stderr.write(f"usage: {USAGE}\ntoolid run: error: {error}\n")
        return 2
    if invocation.help:
        stdout.write(DESCRIPTION + "\n")
        return 0
    relay = Relay()
    relay.install()
    try:
        return _run(invocation, environ, stdout, stderr, relay)
    except Failed as failure:
        say(stderr, str(failure))
        return failure.status
    except Interrupted as interrupted:
        say(stderr, f"stopped by {interrupted}")
        return 128 + interrupted.signum
    finally:
        relay.uninstall()


def _run(
    invocation: Invocation,
    environ: Mapping[str, str],
    stdout: TextIO,
    stderr: TextIO,
    relay: Relay,
) -> int:
    executable = resolve(invocation.command, environ)
    launch = launcher()
    if launch is None:
        raise Failed(f"no addons/toolid_launch.py in or beside {Path(__file__).resolve().parent}")
    command = proxy_command(invocation, launch)
    if environ.get("TOOLID_DRY_RUN", "0") not in ("", "0"):
        stdout.write(shlex.join(command) + "\n")
        stdout.write(shlex.join([executable, *invocation.command[1:]]) + "\n")
        return 0
    if importlib.util.find_spec("mitmproxy") is None:
        raise Failed(
            f"toolid run needs mitmproxy in {sys.executable}: pip install 'toolid[proxy]' "
            "(or run scripts/run in a checkout)"
        )
    log = new_log(environ)
    with private_folder() as folder:
        proxy = Proxy(command, log, environ)
        metrics: str | None = None
        try:
            serving = proxy.wait_serving()
            env, warnings = command_environment(environ, serving, folder)
            where = serving.proxy_url() or (serving.url("reverse") or ("?", ""))[0]
            say(stderr, f"proxy at {_hide_password(where)}, log {log}")
            if serving.web:
                say(stderr, f"web UI at {serving.web}")
            for warning in warnings:
                say(stderr, f"warning: {warning}")
            status = run_command(invocation.command, executable, env, relay)
            metrics = proxy.metrics(serving)
        finally:
            early = proxy.stop()
    if early is not None:
        say(stderr, f"the proxy exited by itself while COMMAND ran (exit status {early})")
    say(stderr, summary(metrics))
    if invocation.save:
        say(stderr, f"flows saved in {os.path.abspath(invocation.save.lstrip('+'))}")
    say(stderr, f"log {log}")
    return status


def _hide_password(url: str) -> str:
    """``url`` with the password of its user information starred out."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)
