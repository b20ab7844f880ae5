"""End to end with a real agent: the Claude Code CLI against a stand-in Anthropic upstream
that calls ``Glob`` with the Kimi-style id ``functions.Glob:0``.

Claude Code takes the id as the identity of a call: without toolid, with the id reused in
every turn, it keeps one copy of the "same" call, asks again, and never ends (the stand-in
cuts it off after ``LOOP_CAP`` requests). Through a reverse-mode mitmdump with toolid it runs
the loops of ``agents_common.SCENARIOS`` (one turn, the id reused in three turns, two parallel
calls with that id): it sees one distinct safe id per call and completes, while the stand-in
only ever sees its own ``functions.Glob:0``. As an HTTPS proxy's client, Claude Code trusts
mitmproxy's CA through ``NODE_EXTRA_CA_CERTS``.

Claude Code (npm ``@anthropic-ai/claude-code``, pinned) is installed by the first run into
the cache of ``cache.py``; later runs reuse it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from standin import CAP_MESSAGE, ReuseUpstream, count_tool_results

from .agents_common import (
    PROMPT,
    REUSED_ACROSS_TURNS,
    SCENARIOS,
    AgentDriver,
    AgentRun,
    Scenario,
    StreamJsonDriver,
    stream_json_result,
    through_https_proxy,
    through_toolid,
    without_toolid,
)
from .cache import npm_bin
from .conftest import MitmdumpPool

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197", "claude")
LOOP_CAP = 24  # model requests the stand-in answers without toolid (six times what 3 turns need)


class ClaudeCode(StreamJsonDriver):
    """``claude -p`` with ``--output-format stream-json``, its base URL ``ANTHROPIC_BASE_URL``."""

    id, api = "claude-code", "anthropic"
    tool, arguments = "Glob", '{"pattern": "*.txt"}'

    def command(self, home: Path, work: Path) -> list[str]:
        flags = ["--output-format", "stream-json", "--verbose", "--no-session-persistence"]
        return [str(npm_bin(*CLAUDE_CODE)), "-p", PROMPT, *flags, "--allowedTools", "Glob Bash"]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "sk-ant-e2e",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "1",
        }


CLAUDE = ClaudeCode()


def claude_code_loops(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """Claude Code collapses the reused id's calls into one (never more than one tool result
    in its history) and asks again and again, until the stand-in's cap stops it: far more
    requests than three tool turns need."""
    reqs = up.model_requests("anthropic")
    assert len(reqs) > LOOP_CAP, f"only {len(reqs)} requests in {run.headless.seconds:.1f}s"
    assert reqs[LOOP_CAP].error == CAP_MESSAGE
    assert max(count_tool_results("anthropic", r.json) for r in reqs) == 1
    ids = driver.client_ids(run)
    assert len(ids) >= LOOP_CAP - 1 and set(ids) == {driver.raw_id}, ids
    if run.headless.returncode is not None:  # it gave up on the stand-in's 400
        assert stream_json_result(run.events)["is_error"] is True


def test_without_toolid_claude_code_loops(tmp_path: Path) -> None:
    without_toolid(CLAUDE, REUSED_ACROSS_TURNS, claude_code_loops, tmp_path, max_requests=LOOP_CAP)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_through_toolid_claude_code_completes(
    scenario: Scenario, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    through_toolid(CLAUDE, scenario, mitm, tmp_path)


def test_through_toolid_as_an_https_proxy(mitm: MitmdumpPool, tmp_path: Path) -> None:
    """An ``https://`` ANTHROPIC_BASE_URL, ``HTTPS_PROXY`` at toolid in regular mode and
    ``NODE_EXTRA_CA_CERTS`` at mitmproxy's CA: an id reused across turns, rewritten."""
    through_https_proxy(CLAUDE, REUSED_ACROSS_TURNS, mitm, tmp_path)
