"""End to end with the real gemini-cli (npm ``@google/gemini-cli``, pinned), headless, against a
Gemini stand-in that answers in the Kimi-style shapes: a one-turn loop, three tool turns with
one id reused every turn, and two parallel calls that share one id, each call in a chunk of
its own (``streamGenerateContent?alt=sse``).

gemini-cli reaches the stand-in through ``GOOGLE_GEMINI_BASE_URL`` with API-key auth (the
``gemini-api-key`` auth type and ``GEMINI_API_KEY``). Through a reverse-mode mitmdump with
toolid it completes every shape, the call ids it kept are safe and distinct (it shows each as
``<tool>__<id>`` and strips the prefix before sending), and the stand-in gets back exactly its
own ids, beside the thought signature it sent. Straight at the stand-in, two parallel calls
with one id break it: gemini-cli keys the calls it runs by id, runs one, answers one, and the
stand-in, checking the parts as Gemini does, answers 400 ("Please ensure that the number of
function response parts is equal to the number of function call parts of the function call
turn."). It also runs once with toolid as an HTTPS proxy, trusting its CA through
``NODE_EXTRA_CA_CERTS``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from standin import ReuseUpstream, count_tool_results, host_check
from standin.gemini import COUNT_MESSAGE, THOUGHT_SIGNATURE

from .agents_common import (
    ONE_TURN,
    PARALLEL_ONE_ID,
    PROMPT,
    SCENARIOS,
    AgentDriver,
    AgentRun,
    Scenario,
    check_completed,
    summary,
    through_https_proxy,
    through_toolid,
    tool_requests,
    without_toolid,
)
from .cache import npm_bin
from .conftest import MitmdumpPool

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

GEMINI_CLI = ("@google/gemini-cli", "0.61.0", "gemini")
MODEL = "gemini-2.5-flash"


class GeminiCli(AgentDriver):
    """gemini-cli headless (``-p``, ``--output-format stream-json``, ``--yolo``), in a
    workspace it trusts for the run (``--skip-trust``), with telemetry, usage statistics and
    update checks off, against a stand-in that checks the parts as Gemini does."""

    id, api = "gemini-cli", "gemini"
    tool, arguments = "list_directory", '{"dir_path": "."}'

    def command(self, home: Path, work: Path) -> list[str]:
        flags = ["--yolo", "--skip-trust", "--output-format", "stream-json", "-m", MODEL]
        return [str(npm_bin(*GEMINI_CLI)), *flags, "-p", PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
        return {"GEMINI_API_KEY": "dummy", "GOOGLE_GEMINI_BASE_URL": base_url}

    def client_ids(self, run: AgentRun) -> list[str]:
        """The ids of the calls it ran, without the ``<tool>__`` it shows them with."""
        return [
            e["tool_id"].removeprefix(f"{e['tool_name']}__")
            for e in run.events
            if e.get("type") == "tool_use"
        ]

    def final_text(self, run: AgentRun) -> str | None:
        """Its answer after the last tool result, joined from the streamed deltas."""
        texts: list[str] = []
        for e in run.events:
            if e.get("type") == "tool_result":
                texts = []
            elif e.get("type") == "message" and e.get("role") == "assistant":
                texts.append(e["content"])
        return "".join(texts) if texts else None

    def upstream(self, scenario: Scenario, **options: Any) -> ReuseUpstream:
        options.setdefault("check", host_check)  # Gemini's check of the parts' counts
        return super().upstream(scenario, **options)


GEMINI = GeminiCli()


def check_signatures(up: ReuseUpstream) -> None:
    """Every request after a tool turn carries each of its tool turns' thought signatures
    back, byte for byte, on the turn's first functionCall part."""
    for request in tool_requests(up, "gemini")[1:]:
        models = [c for c in request.json["contents"] if c.get("role") == "model"]
        turns = [m for m in models if any("functionCall" in p for p in m["parts"])]
        firsts = [next(p for p in m["parts"] if "functionCall" in p) for m in turns]
        assert firsts and all(p.get("thoughtSignature") == THOUGHT_SIGNATURE for p in firsts)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_through_toolid_gemini_cli_completes(
    scenario: Scenario, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    _, up = through_toolid(GEMINI, scenario, mitm, tmp_path)
    check_signatures(up)


def two_calls_with_one_id_get_a_400(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """gemini-cli runs one of the two calls and answers it alone; Gemini's check of the parts
    answers 400, and gemini-cli ends with that error."""
    assert driver.client_ids(run) == [driver.raw_id, driver.raw_id], summary(driver, run, up)
    reqs = tool_requests(up, "gemini")
    assert [r.status for r in reqs] == [200, 400], summary(driver, run, up)
    assert reqs[1].error == COUNT_MESSAGE
    assert count_tool_results("gemini", reqs[1].json) == 1  # two calls, one response
    assert run.headless.returncode != 0
    results = [e for e in run.events if e.get("type") == "result"]
    assert results and results[-1]["status"] == "error"
    assert COUNT_MESSAGE in results[-1]["error"]["message"]


def test_without_toolid_two_calls_with_one_id_get_a_400(tmp_path: Path) -> None:
    without_toolid(GEMINI, PARALLEL_ONE_ID, two_calls_with_one_id_get_a_400, tmp_path)


def one_call_completes(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    check_completed(driver, run, up)


def test_without_toolid_one_call_completes(tmp_path: Path) -> None:
    """The stand-in and the driver are sound: one call with its own id needs no toolid."""
    without_toolid(GEMINI, ONE_TURN, one_call_completes, tmp_path)


def test_through_toolid_as_an_https_proxy(mitm: MitmdumpPool, tmp_path: Path) -> None:
    """An https:// base URL, ``HTTPS_PROXY`` at a regular-mode mitmdump that reaches only
    127.0.0.1 and ``NODE_EXTRA_CA_CERTS`` at its CA: two parallel calls sharing one id come
    through rewritten."""
    through_https_proxy(GEMINI, PARALLEL_ONE_ID, mitm, tmp_path)
