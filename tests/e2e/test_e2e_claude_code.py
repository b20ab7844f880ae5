"""End to end with a real agent: the Claude Code CLI against a stand-in
Anthropic upstream that answers ``functions.Glob:0`` in every one of its three tool turns.

Claude Code takes the id as the identity of a call: without toolid it keeps one copy of
the "same" call, asks again, and never ends (the stand-in cuts it off after
``CAP`` requests); through a reverse-mode mitmdump with toolid it sees three distinct ids
and completes in three tool turns and a final answer, while the stand-in only ever sees its
own ``functions.Glob:0``. As an HTTPS proxy, Claude Code trusts mitmproxy's CA through
``NODE_EXTRA_CA_CERTS``.

Claude Code (npm ``@anthropic-ai/claude-code``, pinned) is installed by the first run into
the cache of ``cache.py``; later runs reuse it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from toolid import codec

from .agent_loops import https_front, https_proxy, proxy_env
from .cache import npm_bin
from .conftest import MitmdumpPool
from .helpers import request_id_positions, run_headless
from .reuse_upstream import CAP_MESSAGE, FINAL_TEXT, ReuseUpstream, count_tool_results

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197")
KIMI = "functions.Glob:0"
TURNS = 3
CAP = 24  # model requests the stand-in answers before it refuses (six times what 3 turns need)
RUN_TIMEOUT = 40.0  # seconds for one headless run, after which it is killed
PROMPT = "Which .txt files are in this directory? Use the Glob tool."


@pytest.fixture(scope="module")
def claude() -> Path:
    """The pinned Claude Code CLI (installed once per machine)."""
    return npm_bin(*CLAUDE_CODE, "claude")


@dataclass
class Run:
    """One headless Claude Code run."""

    returncode: int | None  # None: killed at the timeout
    seconds: float
    events: list[Any]  # the stream-json events on stdout
    stderr: str

    def tool_use_ids(self) -> list[str]:
        """The tool_use ids of the assistant messages Claude Code kept, in order."""
        return [
            block["id"]
            for e in self.events
            if e.get("type") == "assistant"
            for block in e["message"]["content"]
            if block.get("type") == "tool_use"
        ]

    def result(self) -> Any:
        found = [e for e in self.events if e.get("type") == "result"]
        assert len(found) == 1, f"expected one result event, got {found!r}; stderr: {self.stderr}"
        return found[0]


def run_claude(
    claude: Path,
    base_url: str,
    tmp_path: Path,
    *,
    https_proxy: str | None = None,
    ca_cert: Path | None = None,
) -> Run:
    """``claude -p`` headless in a temp HOME and working directory holding three .txt files,
    with ANTHROPIC_BASE_URL at ``base_url``, stdin from /dev/null, killed after RUN_TIMEOUT;
    given ``https_proxy``, through that proxy, trusting ``ca_cert``."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    for name in ("a", "b", "c"):
        (work / f"{name}.txt").write_text(f"{name}\n")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-e2e",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
    }
    env |= proxy_env(https_proxy, "NODE_EXTRA_CA_CERTS", ca_cert)
    cmd = [
        str(claude),
        "-p",
        PROMPT,
        "--output-format",
        "stream-json",
        "--verbose",
        "--no-session-persistence",
        "--allowedTools",
        "Glob Bash",
    ]
    ran = run_headless(cmd, work, env, RUN_TIMEOUT)
    return Run(ran.returncode, ran.seconds, ran.events, ran.stderr)


def test_without_toolid_claude_code_loops(claude: Path, tmp_path: Path) -> None:
    """Straight at the stand-in, Claude Code collapses the reused id's calls into one
    (never more than one tool result in its history) and asks again and again, until the
    stand-in's cap stops it: far more requests than three tool turns need."""
    with ReuseUpstream(ids=[KIMI], turns=TURNS, max_requests=CAP) as up:
        run = run_claude(claude, up.base_url, tmp_path)
        reqs = up.model_requests("anthropic")
    assert len(reqs) > CAP, f"only {len(reqs)} requests in {run.seconds:.1f}s: it did not loop"
    assert reqs[CAP].error == CAP_MESSAGE
    assert max(count_tool_results("anthropic", r.json) for r in reqs) == 1
    ids = run.tool_use_ids()
    assert len(ids) >= CAP - 1 and set(ids) == {KIMI}, ids
    if run.returncode is not None:  # it gave up on the stand-in's 400
        assert run.result()["is_error"] is True


def test_through_toolid_claude_code_completes(
    claude: Path, tmp_path: Path, mitm: MitmdumpPool
) -> None:
    """Through a reverse-mode mitmdump with toolid: three tool turns with three distinct
    ids, the final answer, and the stand-in only ever saw ``functions.Glob:0``."""
    with ReuseUpstream(ids=[KIMI], turns=TURNS, max_requests=CAP) as up:
        proxy = mitm.get(mode=f"reverse:{up.base_url}")
        run = run_claude(claude, proxy.url, tmp_path)
        reqs = up.model_requests("anthropic")
    ids = run.tool_use_ids()
    summary = (
        f"exit {run.returncode} after {run.seconds:.1f}s, {len(reqs)} model requests, "
        f"tool_use ids kept {ids[:5]!r}{'...' if len(ids) > 5 else ''}, "
        f"result {[e.get('result') for e in run.events if e.get('type') == 'result']!r}"
    )
    n = len(reqs)
    assert n == TURNS + 1 and run.returncode == 0, summary
    assert ids == [
        "tid1_functions-2EGlob-3A0",
        "tid1_functions-2EGlob-3A0-_2",
        "tid1_functions-2EGlob-3A0-_3",
    ], summary
    result = run.result()
    assert result["is_error"] is False and result["result"] == FINAL_TEXT, result
    assert [r.status for r in reqs] == [200] * (TURNS + 1), [(r.status, r.error) for r in reqs]
    for t, rec in enumerate(reqs):
        positions = request_id_positions("anthropic", rec.json)
        assert Counter(k for k, _ in positions) == Counter({"call": t, "ref": t}), positions
        assert {v for _, v in positions} <= {KIMI}, f"request {t + 1}: stand-in got {positions!r}"


def test_through_toolid_as_an_https_proxy(claude: Path, tmp_path: Path, mitm: MitmdumpPool) -> None:
    """An ``https://`` ANTHROPIC_BASE_URL, ``HTTPS_PROXY`` at toolid in regular mode and
    ``NODE_EXTRA_CA_CERTS`` at mitmproxy's CA: three distinct ids, the final answer."""
    with ReuseUpstream(ids=[KIMI], turns=TURNS, max_requests=CAP) as up:
        proxy = https_proxy(mitm)
        run = run_claude(
            claude, https_front(mitm, up), tmp_path, https_proxy=proxy.url, ca_cert=proxy.ca_cert
        )
        reqs = up.model_requests("anthropic")
    assert len(reqs) == TURNS + 1 and run.returncode == 0, run.events[-1:]
    assert run.tool_use_ids() == [codec.encode(KIMI, "safe", k) for k in range(1, TURNS + 1)]
    assert run.result()["result"] == FINAL_TEXT
    assert {v for r in reqs for _, v in request_id_positions("anthropic", r.json)} == {KIMI}
