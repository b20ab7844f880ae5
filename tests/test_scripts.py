"""Tests for the shell entry points: scripts/proxy, scripts/run, scripts/_bootstrap.sh,
scripts/test, .ci/run.

They never touch the repo's own .venv: each test copies scripts/ and pyproject.toml into a
temporary "repo". Where a venv is needed, a fake one is made whose python is the interpreter
running these tests, with an up-to-date install stamp, so the bootstrap has nothing to do.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
BASH = shutil.which("bash") or "/bin/bash"
TIMEOUT = 30

# The environment variables the scripts read; tests set them explicitly.
_SCRIPT_ENV = ("TOOLID_PYTHON", "TOOLID_DRY_RUN", "PYENV_ROOT", "CI")


def _copy_repo(tmp_path: Path, *, with_venv: bool, runs_toolid: bool = False) -> Path:
    """A temporary "repo"; ``with_venv``: with a fake .venv whose python is this one
    (``runs_toolid``: a script that executes it by its path, so that it is the venv it is,
    with toolid and mitmproxy: a link to it would run as its base Python)."""
    root = tmp_path / "repo"
    shutil.copytree(SCRIPTS, root / "scripts")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    root = Path(os.path.realpath(root))  # the bootstrap resolves the root with `pwd -P`
    if with_venv:
        venv_bin = root / ".venv" / "bin"
        venv_bin.mkdir(parents=True)
        if runs_toolid:
            (venv_bin / "python").write_text(
                f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n'
            )
            (venv_bin / "python").chmod(0o755)
        else:
            (venv_bin / "python").symlink_to(sys.executable)
        past = time.time() - 1000
        os.utime(root / "pyproject.toml", (past, past))
        (root / ".venv" / ".toolid-installed").write_text(f"{root}\n")
    return root


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRIPT_ENV}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def _run(
    script: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _dry_run(tmp_path: Path, *args: str) -> tuple[Path, list[str], str]:
    """Run `scripts/proxy ARGS` with TOOLID_DRY_RUN=1; return (root, command, instructions)."""
    root = _copy_repo(tmp_path, with_venv=True)
    home = tmp_path / "home"
    home.mkdir()
    result = _run(root / "scripts" / "proxy", *args, env=_env(home, TOOLID_DRY_RUN="1"))
    assert result.returncode == 0, result.stderr
    assert "installing" not in result.stderr  # the fake venv was accepted as up to date
    return root, shlex.split(result.stdout.strip()), result.stderr


def _defaults(root: Path, tool: str = "mitmdump") -> list[str]:
    defaults = [
        str(root / ".venv" / "bin" / "python"),
        str(root / "addons" / "toolid_launch.py"),
        tool,
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        "8080",
    ]
    if tool == "mitmdump":  # its flow lines would print query strings
        defaults += ["--set", "flow_detail=0"]
    return [*defaults, "--set", "toolid_status=127.0.0.1:0"]


def test_scripts_are_executable() -> None:
    for path in (SCRIPTS / "proxy", SCRIPTS / "run", SCRIPTS / "test", REPO / ".ci" / "run"):
        assert path.is_file(), path
        assert os.access(path, os.X_OK), f"{path} is not executable"


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_proxy_help(flag: str, tmp_path: Path) -> None:
    result = _run(SCRIPTS / "proxy", flag, env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Usage: scripts/proxy" in result.stdout
    assert "mitmdump" in result.stdout
    assert "--web" in result.stdout
    assert "TOOLID_DRY_RUN" in result.stdout


def test_dry_run_regular_mode(tmp_path: Path) -> None:
    root, cmd, out = _dry_run(tmp_path)
    assert cmd == _defaults(root)
    assert "HTTPS_PROXY=http://127.0.0.1:8080 HTTP_PROXY=http://127.0.0.1:8080" in out
    ca = tmp_path / "home" / ".mitmproxy" / "mitmproxy-ca-cert.pem"
    assert f"SSL_CERT_FILE={ca}" in out
    assert f"NODE_EXTRA_CA_CERTS={ca}" in out
    assert "created on first start" in out
    assert "ALL interfaces" not in out
    assert len(out.splitlines()) <= 15


def test_dry_run_reverse_mode_user_args_come_last(tmp_path: Path) -> None:
    user_args = [
        "--listen-port",
        "9000",
        "--mode",
        "reverse:http://127.0.0.1:8000",
        "--set",
        "toolid_profile=call",
    ]
    root, cmd, out = _dry_run(tmp_path, *user_args)
    assert cmd == _defaults(root) + user_args
    assert "OPENAI_BASE_URL=http://127.0.0.1:9000/v1" in out
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:9000" in out
    assert "-> http://127.0.0.1:8000" in out
    assert "HTTPS_PROXY" not in out
    assert "8080" not in out


def test_dry_run_reverse_mode_with_listen_port_in_spec(tmp_path: Path) -> None:
    _, _, out = _dry_run(tmp_path, "-p9000", "--mode=reverse:https://api.anthropic.com@9100")
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:9100" in out


def test_dry_run_web(tmp_path: Path) -> None:
    root, cmd, out = _dry_run(tmp_path, "--web", "--set", "confdir=/tmp/toolid-conf")
    assert cmd == [
        *_defaults(root, "mitmweb"),
        "--web-host",
        "127.0.0.1",
        "--set",
        "web_open_browser=false",
        "--set",
        "store_streamed_bodies=true",  # the UI shows streamed responses (before the user's)
        "--set",
        "confdir=/tmp/toolid-conf",
    ]
    assert "http://127.0.0.1:8081" in out
    assert "SSL_CERT_FILE=/tmp/toolid-conf/mitmproxy-ca-cert.pem" in out


def test_dry_run_console(tmp_path: Path) -> None:
    root, cmd, _ = _dry_run(tmp_path, "--console", "-p", "9002")
    assert cmd == [
        *_defaults(root, "mitmproxy"),
        "--set",
        "store_streamed_bodies=true",
        "-p",
        "9002",
    ]


def test_set_listen_options_replace_the_defaults(tmp_path: Path) -> None:
    # mitmproxy applies named options over --set, so our --listen-* defaults must go.
    root, cmd, out = _dry_run(tmp_path, "--set", "listen_port=9001", "--set", "listen_host=0.0.0.0")
    assert "--listen-port" not in cmd
    assert "--listen-host" not in cmd
    assert cmd[:3] == _defaults(root)[:3]
    assert "HTTPS_PROXY=http://127.0.0.1:9001" in out
    assert "ALL interfaces" in out


def test_the_status_endpoint_is_on_unless_set_otherwise(tmp_path: Path) -> None:
    _, cmd, out = _dry_run(tmp_path, "--set", "toolid_status=")
    assert [arg for arg in cmd if arg.startswith("toolid_status")] == ["toolid_status="]
    assert "/healthz" not in out
    _, _, out = _dry_run(tmp_path / "default")  # a free port: several proxies side by side
    assert "Status: /healthz and /metrics on a free port, logged at startup" in out
    _, cmd, out = _dry_run(tmp_path / "chosen", "--set", "toolid_status=127.0.0.1:9091")
    assert [arg for arg in cmd if arg.startswith("toolid_status")] == [
        "toolid_status=127.0.0.1:9091"
    ]
    assert "http://127.0.0.1:9091/healthz" in out


def test_a_free_listen_port_is_said_so(tmp_path: Path) -> None:
    _, cmd, out = _dry_run(tmp_path, "--listen-port", "0")
    assert cmd[-2:] == ["--listen-port", "0"]
    assert "HTTPS_PROXY=http://127.0.0.1:PORT HTTP_PROXY=http://127.0.0.1:PORT" in out
    assert 'a free port (PORT: see "listening at" below)' in out


def test_all_interfaces_needs_proxyauth_or_open_proxy(tmp_path: Path) -> None:
    _, _, out = _dry_run(tmp_path, "--listen-host", "0.0.0.0")
    assert "--set proxyauth=USER:PASS or --set toolid_open_proxy=true" in out
    _, _, out = _dry_run(tmp_path / "auth", "--listen-host", "0.0.0.0", "--set", "proxyauth=u:p")
    assert "toolid_open_proxy" not in out


def test_web_and_console_conflict(tmp_path: Path) -> None:
    result = _run(SCRIPTS / "proxy", "--web", "--console", env=_env(tmp_path))
    assert result.returncode == 1
    assert "mutually exclusive" in result.stderr


def test_bootstrap_without_python_fails_clearly(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path, with_venv=False)
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake_python = fake_bin / "python3"
    fake_python.write_text("#!/bin/sh\nexit 1\n")
    fake_python.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(fake_bin), "HOME": str(home)}
    result = _run(root / "scripts" / "proxy", env=env)
    assert result.returncode == 1
    assert "no Python >= 3.12 found" in result.stderr
    assert "TOOLID_PYTHON" in result.stderr
    assert str(fake_python) in result.stderr
    assert "command not found" not in result.stderr
    assert not (root / ".venv").exists()


# --- scripts/run ----------------------------------------------------------------------------


def _run_dry(tmp_path: Path, *args: str) -> tuple[list[str], list[str]]:
    """``scripts/run ARGS`` with TOOLID_DRY_RUN=1 (toolid run prints what it would run): the
    proxy's command and COMMAND, each as a list."""
    root = _copy_repo(tmp_path, with_venv=True, runs_toolid=True)
    home = tmp_path / "home"
    home.mkdir()
    result = _run(root / "scripts" / "run", *args, env=_env(home, TOOLID_DRY_RUN="1"))
    assert result.returncode == 0, result.stderr
    proxy, command = result.stdout.splitlines()
    return shlex.split(proxy), shlex.split(command)


RUN_DEFAULTS = [
    *("--listen-host", "127.0.0.1", "--listen-port", "0"),
    *("--set", "flow_detail=0", "--set", "toolid_status=127.0.0.1:0"),
]


def _launcher(tool: str = "mitmdump") -> list[str]:
    """The proxy command's start: this Python, the launcher of the toolid it imports, ``tool``
    (a dry run in a copied "repo" runs this checkout's toolid, which the venv holds)."""
    return [sys.executable, str(REPO / "addons" / "toolid_launch.py"), tool]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_run_help(flag: str, tmp_path: Path) -> None:
    """Answered before any venv is made (as scripts/proxy's)."""
    result = _run(SCRIPTS / "run", "--set", "x=y", flag, env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: scripts/run [--save FILE] [--web]")
    assert "TOOLID_DRY_RUN" in result.stdout and "CODEX_CA_CERTIFICATE" in result.stdout


def test_run_dry_run_puts_the_users_options_after_the_defaults(tmp_path: Path) -> None:
    user = ["--set", "toolid_repair=true", "--mode", "reverse:http://127.0.0.1:8000"]
    proxy, command = _run_dry(tmp_path, *user, "--", "sh", "-c", "exit 3", "--", "--help")
    assert proxy == [*_launcher(), *RUN_DEFAULTS, *user]
    assert command == [shutil.which("sh"), "-c", "exit 3", "--", "--help"]  # all COMMAND's


def test_run_save_and_web(tmp_path: Path) -> None:
    saved = str(tmp_path / "s.flows")
    proxy, _ = _run_dry(tmp_path, "--save", saved, "--web", "--", "true")
    assert proxy[:3] == _launcher("mitmweb")
    assert proxy[3:] == [
        *("--listen-host", "127.0.0.1", "--listen-port", "0"),
        *("--set", "toolid_status=127.0.0.1:0"),
        *("--web-host", "127.0.0.1", "--set", "web_open_browser=false"),
        *("--set", "store_streamed_bodies=true", "--save-stream-file", saved),
    ]


def test_run_leaves_out_a_default_set_with_set(tmp_path: Path) -> None:
    proxy, _ = _run_dry(tmp_path, "--set", "listen_port=9000", "--set=toolid_status=", "--", "true")
    assert "--listen-port" not in proxy
    assert [a for a in proxy if a.startswith(("toolid_status", "--set=toolid_status"))] == [
        "--set=toolid_status="
    ]


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["true"], 2, "put -- before the command to run"),
        (["--set", "x=y", "--"], 2, "no command after --"),
        (["--console", "--", "true"], 2, "--console needs the terminal"),
        (["--save", "--", "true"], 2, "--save needs a FILE"),
        (["--", "no-such-command-here"], 127, "no-such-command-here: command not found"),
    ],
)
def test_run_refuses_what_it_cannot_run(
    args: list[str], status: int, message: str, tmp_path: Path
) -> None:
    root = _copy_repo(tmp_path, with_venv=True, runs_toolid=True)
    result = _run(root / "scripts" / "run", *args, env=_env(tmp_path, TOOLID_DRY_RUN="1"))
    assert result.returncode == status, result.stderr
    assert message in result.stderr
    assert not result.stdout
