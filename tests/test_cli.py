"""The ``toolid`` command line: ``main()`` in process and ``python -m toolid`` as a subprocess."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolid import cli
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
