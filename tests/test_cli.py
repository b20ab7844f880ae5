"""The ``toolid`` command line: ``main()`` in process and ``python -m toolid`` as a subprocess."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolid import _run, cli
from toolid.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "toolid", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=30,
        check=False,
    )


def set_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)


# --- main() in process ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["encode", "functions.list_skills:0"], "tid1_functions-2Elist_skills-3A0\n"),
        (["encode", "call_abc-123"], "call_abc-123\n"),
        (["encode", "tid1_x"], "tid1_tid1_x\n"),
        (["encode", "--profile", "call", "toolu_01AbC"], "call_tid1_toolu_01AbC\n"),
        (["encode", "--profile", "call", "call_abc"], "call_abc\n"),
        (["encode", "--profile=safe", ""], "tid1_\n"),
        (["encode", "--", "-x", "-"], "-x\n-\n"),
        (["encode", "日本"], "tid1_-E6-97-A5-E6-9C-AC\n"),
        (["decode", "tid1_functions-2Elist_skills-3A0"], "functions.list_skills:0\n"),
        (["decode", "call_tid1_toolu_01AbC"], "toolu_01AbC\n"),
        (["decode", "tid1_"], "\n"),
        (["decode", "tid1_abc", "tid1_-2e", "tid1_-41"], "tid1_abc\ntid1_-2e\ntid1_-41\n"),
        (["decode", "tid1_-E6-97-A5-E6-9C-AC"], "日本\n"),
        (["decode", "tid1_-ED-A0-80"], "\\ud800\n"),  # lone surrogate: printable escape
    ],
)
def test_main(argv: list[str], out: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == out
    assert captured.err == ""


def test_main_multiple_ids(capsys: pytest.CaptureFixture[str]) -> None:
    raws = ["a.b", "call_x", "", "é", "tid1_q"]
    assert main(["encode", *raws]) == 0
    encoded = capsys.readouterr().out.splitlines()
    assert encoded == ["tid1_a-2Eb", "call_x", "tid1_", "tid1_-C3-A9", "tid1_tid1_q"]
    assert main(["decode", *encoded]) == 0
    assert capsys.readouterr().out.split("\n") == [*raws, ""]


def test_main_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    set_stdin(monkeypatch, "a.b\n\ncall_x\u2028y\ntid1_x\r\n".encode())
    assert main(["encode", "--profile", "call"]) == 0
    assert capsys.readouterr().out == (
        "call_tid1_a-2Eb\ncall_tid1_\ncall_tid1_call_x-E2-80-A8y\ncall_tid1_tid1_x-0D\n"
    )


def test_main_stdin_without_final_newline_and_empty(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_stdin(monkeypatch, b"tid1_-2E\ntid1_-3A")
    assert main(["decode"]) == 0
    assert capsys.readouterr().out == ".\n:\n"
    set_stdin(monkeypatch, b"")
    assert main(["decode"]) == 0
    assert capsys.readouterr().out == ""


def test_main_stdin_text_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("x.y\n"))
    assert main(["encode"]) == 0
    assert capsys.readouterr().out == "tid1_x-2Ey\n"


def test_main_stdin_not_utf8(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_stdin(monkeypatch, b"a\xff\n")
    assert main(["encode"]) == 1
    assert "not UTF-8" in capsys.readouterr().err


def test_main_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "encode" in capsys.readouterr().out
    assert main(["encode", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--profile" in out
    assert "backslash" in out


@pytest.mark.parametrize(
    "argv",
    [["encode", "--profile", "bad", "x"], [], ["frobnicate"], ["decode", "--profile", "call"]],
)
def test_main_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "error:" in captured.err


def test_main_addon_path_in_a_checkout(capsys: pytest.CaptureFixture[str]) -> None:
    """From a checkout: its addons/ file (installed, the wheel's copy: test_e2e_versions)."""
    assert main(["addon-path"]) == 0
    assert capsys.readouterr().out == f"{ROOT / 'addons' / 'toolid_addon.py'}\n"


def test_main_addon_path_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "__file__", str(tmp_path / "toolid" / "cli.py"))
    assert main(["addon-path"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no addons/toolid_addon.py" in captured.err


# --- python -m toolid -------------------------------------------------------------------


def test_module_encode_decode() -> None:
    r = run("encode", "functions.list_skills:0", "a-b.c", "call_abc-123")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"tid1_functions-2Elist_skills-3A0\ntid1_a-2Db-2Ec\ncall_abc-123\n"
    r = run("decode", "tid1_functions-2Elist_skills-3A0", "tid1_a-2Db-2Ec", "tid1_abc")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"functions.list_skills:0\na-b.c\ntid1_abc\n"


def test_module_profile_call() -> None:
    r = run("encode", "--profile", "call", "toolu_01AbC", "call_abc")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"call_tid1_toolu_01AbC\ncall_abc\n"


def test_module_stdin_round_trip() -> None:
    raws = ["functions.list_skills:0", "", "日本 \U0001f600", "tid1_x", "call_y"]
    data = "".join(raw + "\n" for raw in raws).encode()
    enc = run("encode", stdin=data)
    assert enc.returncode == 0, enc.stderr
    assert enc.stdout.decode("ascii").splitlines()[0] == "tid1_functions-2Elist_skills-3A0"
    dec = run("decode", stdin=enc.stdout)
    assert dec.returncode == 0, dec.stderr
    assert dec.stdout == data


def test_module_lone_surrogate_is_printable() -> None:
    r = run("decode", "tid1_-ED-A0-80")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\\ud800\n"


def test_module_help() -> None:
    r = run("--help")
    assert r.returncode == 0
    assert b"usage: toolid" in r.stdout


def test_module_bad_profile() -> None:
    r = run("encode", "--profile", "bad", "x")
    assert r.returncode == 2
    assert r.stdout == b""
    assert b"invalid choice: 'bad'" in r.stderr


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["encode", "--occurrence", "2", "functions.Glob:0"], "tid1_functions-2EGlob-3A0-_2\n"),
        (["encode", "--occurrence", "12", "pwd_0"], "tid1_pwd_0-_12\n"),
        (["encode", "--occurrence", "1", "call_0"], "call_0\n"),
        (["encode", "--profile", "call", "--occurrence", "2", "call_0"], "call_tid1_call_0-_2\n"),
        (
            ["decode", "tid1_functions-2EGlob-3A0-_3", "tid1_call_0-_02"],
            "functions.Glob:0\ntid1_call_0-_02\n",
        ),
    ],
)
def test_main_occurrence(argv: list[str], out: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize("bad", ["0", "-1", "two", ""])
def test_main_bad_occurrence(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["encode", f"--occurrence={bad}", "x"]) == 2
    assert "--occurrence" in capsys.readouterr().err


# --- toolid run: its command line and the pieces it runs with (tests/e2e/test_e2e_run.py runs
# it end to end, tests/test_scripts.py through scripts/run) ----------------------------------


def test_run_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {_run.USAGE}") and "--save FILE" in out
    assert main(["--help"]) == 0
    assert "    run " in capsys.readouterr().out


def test_run_passes_every_option_to_mitmproxy(capsys: pytest.CaptureFixture[str]) -> None:
    """What follows ``run`` is toolid run's (mitmproxy options, then -- and COMMAND), none
    of it the CLI parser's: -p, -s, --set, --help after --."""
    environ = {"PATH": os.environ["PATH"], "TOOLID_DRY_RUN": "1"}
    argv = ["-p", "9000", "-s", "x.py", "--set", "a=b", "--", "true", "--help", "-x"]
    assert _run.main(argv, environ) == 0
    proxy, command = capsys.readouterr().out.splitlines()
    assert proxy.endswith(" --set toolid_status=127.0.0.1:0 -p 9000 -s x.py --set a=b")
    assert command.endswith("true --help -x")


def test_run_saves_where_it_was_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"PATH": os.environ["PATH"], "TOOLID_DRY_RUN": "1"}
    for save, saved in (("s.flows", tmp_path / "s.flows"), ("+s.flows", f"+{tmp_path}/s.flows")):
        assert _run.main(["--save", save, "--", "true"], environ) == 0
        assert f"--save-stream-file {saved}\n" in capsys.readouterr().out


def test_run_without_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--", "no-such-command-here"]) == 127
    assert "toolid: no-such-command-here: command not found" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert "put -- before the command to run" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("localhost,127.0.0.1,::1,[::1],127.0.0.1:8000,[::1]:8000", ""),
        ("*.localhost,.localhost,127.0.0.0/8,0:0:0:0:0:0:0:1", ""),
        (
            " .internal, 10.0.0.0/8 ,localhost,example.com:443",
            ".internal,10.0.0.0/8,example.com:443",
        ),
        ("", ""),
    ],
)
def test_run_takes_loopback_out_of_no_proxy(value: str, kept: str) -> None:
    assert _run.without_loopback(value) == kept


def serving(
    tmp_path: Path, *servers: tuple[str, str], proxyauth: str | None = None
) -> _run.Serving:
    """A proxy's announcement: ``(type, mode spec)`` servers on ports 9001, 9002, ..."""
    ca = tmp_path / "mitmproxy-ca-cert.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMITMPROXY\n-----END CERTIFICATE-----")
    return _run.Serving.of(
        {
            "servers": [
                {"type": kind, "mode": mode, "addresses": [["127.0.0.1", 9001 + n]]}
                for n, (kind, mode) in enumerate(servers)
            ],
            "status": ["127.0.0.1", 9100],
            "ca": str(ca),
            "proxyauth": proxyauth,
        }
    )


def test_run_environment_as_an_https_proxy(tmp_path: Path) -> None:
    """The proxy variables; every CA variable at a bundle of the CAs trusted before (the
    SSL_CERT_FILE given) and mitmproxy's; NODE_EXTRA_CA_CERTS at both of Node's extra CAs;
    a tool's bundle variable that was set (PIP_CERT) too; no base URL."""
    corporate = tmp_path / "corporate.pem"
    corporate.write_text("CORPORATE")
    node = tmp_path / "node.pem"
    node.write_text("NODE")
    environ = {
        "SSL_CERT_FILE": str(corporate),
        "NODE_EXTRA_CA_CERTS": str(node),
        "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt",
        "NO_PROXY": "localhost,.corp",
        "no_proxy": "127.0.0.1",
        "OPENAI_BASE_URL": "https://api.example/v1",
    }
    folder = tmp_path / "private"
    folder.mkdir()
    env, warnings = _run.command_environment(
        environ, serving(tmp_path, ("regular", "regular")), folder
    )
    assert not warnings
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        assert env[name] == "http://127.0.0.1:9001"
    assert env["NO_PROXY"] == env["no_proxy"] == ".corp"
    bundle = Path(env["SSL_CERT_FILE"])
    assert (
        bundle.read_text()
        == "CORPORATE\n-----BEGIN CERTIFICATE-----\nMITMPROXY\n-----END CERTIFICATE-----\n"
    )
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "CODEX_CA_CERTIFICATE", "PIP_CERT"):
        assert env[name] == str(bundle)
    assert Path(env["NODE_EXTRA_CA_CERTS"]).read_text().startswith("NODE\n-----BEGIN")
    assert env["OPENAI_BASE_URL"] == "https://api.example/v1"  # left as it was
    assert "AWS_CA_BUNDLE" not in env  # one that was not set stays unset
    environ = {"HTTPS_PROXY": "http://me:secret@proxy.corp:3128"}
    _, warnings = _run.command_environment(
        environ, serving(tmp_path, ("regular", "regular")), folder
    )
    assert warnings == [
        "COMMAND's HTTPS_PROXY was http://me:***@proxy.corp:3128; toolid connects directly "
        "(--mode upstream:URL sends its traffic through that proxy)"
    ]


def test_run_environment_in_reverse_mode(tmp_path: Path) -> None:
    """Base URLs (/v1 added unless the upstream's URL ends in it), no proxy or CA variable."""
    for upstream, openai in (
        ("http://127.0.0.1:8000", "http://127.0.0.1:9001/v1"),
        ("https://api.example/v1/@9001", "http://127.0.0.1:9001"),
    ):
        env, _ = _run.command_environment(
            {}, serving(tmp_path, ("reverse", f"reverse:{upstream}")), tmp_path
        )
        assert env == {
            "OPENAI_BASE_URL": openai,
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9001",
            "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:9001",
        }


def test_run_proxy_url_carries_proxyauth(tmp_path: Path) -> None:
    regular = ("regular", "regular")
    assert (
        serving(tmp_path, regular, proxyauth="u@x:p/w").proxy_url()
        == "http://u%40x:p%2Fw@127.0.0.1:9001"
    )
    assert (
        serving(tmp_path, regular, proxyauth="@/etc/htpasswd").proxy_url()
        == "http://127.0.0.1:9001"
    )


def test_run_summary_from_metrics() -> None:
    from toolid_status import Metrics  # noqa: PLC0415 (the addon's: mitmproxy imported)

    metrics = Metrics()
    metrics.ids.update(encoded=2, restored=5, tagged=1)
    metrics.count_flow("changed", 0.001)
    metrics.pairing.update({"missing-result": 2})
    metrics.repairs = 1
    metrics.rejections["unknown"] += 3
    assert _run.summary(metrics.exposition()) == (
        "1 flow; ids 2 encoded, 5 restored, 1 tagged, 0 minted; 1 repair; "
        "pairing problems: 2 missing-result; upstream rejections: 3 unknown"
    )
    without = "\n".join(
        line for line in metrics.exposition().splitlines() if "rejections" not in line
    )
    assert "rejections" not in _run.summary(without)  # a series it lacks: left out
    assert _run.summary(None).startswith("no counts")


def test_run_log_folder_and_its_newest_logs(tmp_path: Path) -> None:
    assert _run.log_folder({"XDG_STATE_HOME": "relative", "HOME": "/h"}) == Path(
        "/h/.local/state/toolid"
    )
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    folder = tmp_path / "toolid"
    folder.mkdir()
    for n in range(25):
        old = folder / f"run-{n:02}.log"
        old.write_text("")
        os.utime(old, (1000 + n, 1000 + n))
    log = _run.new_log(environ)
    assert log.parent == folder and not log.exists()
    kept = sorted(path.name for path in folder.glob("run-*.log"))
    assert kept == [f"run-{n:02}.log" for n in range(6, 25)]  # with the new one: 20
