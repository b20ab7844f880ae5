"""scripts/demo.py end to end: a real mitmdump, the real openai SDK, loopback only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

DEMO = Path(__file__).resolve().parent.parent / "scripts" / "demo.py"
RAW = "functions.get_weather:0"
ENCODED = "tid1_functions-2Eget_weather-3A0"
SANITIZED = "functions_get_weather_0"
FINAL = '"It is 21°C in Paris."'
EMPTY = '"" (empty turn)'
HOPS = ("upstream emitted", "client saw", "client replayed", "upstream got back", "turn-2 reply")


def run_demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TOOLID_DEMO_ADDON"}
    environ.update(env, PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, str(DEMO)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
        cwd=tmp_path,
        env=environ,
        check=False,
    )


def parse_table(stdout: str) -> dict[str, dict[str, str]]:
    """way ("a. direct", ...) -> {hop: value, "continued": yes/no/error}."""
    rows: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in stdout.splitlines():
        parts = re.split(r" {2,}", line.strip())
        hops = [i for i, part in enumerate(parts) if part in HOPS]
        if not hops:
            continue
        i = hops[0]
        if i and re.fullmatch(r"[abc]\. \w+", parts[0]):
            current = rows.setdefault(parts[0], {})
        assert current is not None, f"hop line before any way: {line!r}"
        current[parts[i]] = parts[i + 1]
        if len(parts) > i + 2:
            current["continued"] = parts[i + 2]
    return rows


def expect(*values: str) -> dict[str, str]:
    """A parsed row: the five hops in table order, then the continued? column."""
    return dict(zip((*HOPS, "continued"), values, strict=True))


DIRECT = expect(RAW, f"{RAW} (unsafe)", RAW, RAW, FINAL, "yes")
SANITIZER = expect(RAW, f"{RAW} (unsafe)", SANITIZED, SANITIZED, EMPTY, "no")


def test_demo_toolid_keeps_the_loop_alive(tmp_path: Path) -> None:
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert parse_table(result.stdout) == {
        "a. direct": DIRECT,
        "b. sanitizer": SANITIZER,
        "c. toolid": expect(RAW, ENCODED, ENCODED, RAW, FINAL, "yes"),
    }, result.stdout
    assert "OK: a and c continued, b died" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert not list(tmp_path.iterdir())  # nothing left behind in the working directory


def test_demo_fails_without_toolid(tmp_path: Path) -> None:
    empty = tmp_path / "empty_addon.py"
    empty.write_text("")
    result = run_demo(tmp_path, TOOLID_DEMO_ADDON=str(empty))
    assert result.returncode == 1, result.stdout + result.stderr
    assert parse_table(result.stdout) == {
        "a. direct": DIRECT,
        "b. sanitizer": SANITIZER,
        "c. toolid": SANITIZER,  # a plain proxy changes nothing: the loop dies
    }, result.stdout
    assert "toolid demo FAILED" in result.stderr
    assert "c. toolid: the loop died" in result.stderr
    assert "OK:" not in result.stdout


def test_demo_reports_a_missing_addon(tmp_path: Path) -> None:
    result = run_demo(tmp_path, TOOLID_DEMO_ADDON=str(tmp_path / "nope.py"))
    assert result.returncode == 1, result.stdout + result.stderr
    rows = parse_table(result.stdout)
    assert rows["c. toolid"]["continued"] == "error"
    assert "nope.py does not exist" in result.stderr
