"""End to end with real coding agents: OpenCode, Qwen Code, Cline, kimi-cli and pi,
headless, against the Kimi-style stand-in, in the three shapes an upstream like Kimi gives
them (``agents_common.SCENARIOS``): a one-turn loop, three tool turns with one id reused
every turn, and two parallel calls that share one id.

Through a reverse-mode mitmdump with toolid every agent completes, the tool-call ids it kept
(read from its JSON output or stored session) are safe and distinct, one per call, and the
stand-in gets back exactly its own ids. Straight at the stand-in, the agents fail where they
fail:

- OpenCode (Chat Completions and Responses) keeps one of two parallel calls sharing an id;
- Qwen Code rejects two parallel calls sharing an id as "a malformed tool call", and renames
  an id reused in a later turn ``<id>__qwen_dup_2``, which it sends to the upstream, then halts;
- Cline merges two parallel calls sharing an id into one and joins their arguments, which its
  tool rejects as invalid JSON;
- pi (Chat Completions) gives the second of two parallel calls sharing an id the id ``""`` and
  no name, so that call fails ("Tool  not found") and ``""`` goes to the upstream;
- kimi-cli does not break, but keeps the raw id, unsafe, one identity for every call.

(OpenCode with an id reused across turns, and pi on the Responses API, whose ids join the
call id and the item id, work without toolid: no test asserts a failure there.) Each agent
also runs once as a client of toolid as an HTTPS proxy, trusting its CA through the variable
its runtime reads (``NODE_EXTRA_CA_CERTS``; ``SSL_CERT_FILE`` for kimi-cli, a Python program).

The agents (npm and PyPI, pinned) are installed by the first run into the cache of
``cache.py``. Cline runs with ``CLINE_SESSION_BACKEND_MODE=local``: in its default mode it
starts a detached "hub" daemon on a fixed port, which concurrent runs would share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from standin import API, ReuseUpstream, count_tool_results

from .agents_common import (
    CAP,
    PARALLEL_ONE_ID,
    PROMPT,
    REUSED_ACROSS_TURNS,
    SCENARIOS,
    AgentDriver,
    AgentRun,
    RunCheck,
    Scenario,
    StreamJsonDriver,
    check_keeps_the_raw_id,
    stream_json_result,
    summary,
    through_https_proxy,
    through_toolid,
    tool_requests,
    without_toolid,
)
from .cache import npm_bin, venv
from .conftest import MitmdumpPool
from .helpers import request_id_positions

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

OPENCODE = ("opencode-ai", "1.18.33", "opencode")
QWEN_CODE = ("@qwen-code/qwen-code", "0.24.4", "qwen")
CLINE = ("cline", "3.0.65", "cline")
KIMI_CLI = "kimi-cli==1.50.0"
PI = ("@mariozechner/pi-coding-agent", "0.73.1", "pi")
MODEL = "kimi-k2"


# ----------------------------------------------------------------------------- drivers


class OpenCode(AgentDriver):
    """OpenCode with a provider of the AI SDK package ``provider``: ``@ai-sdk/openai-compatible``
    speaks Chat Completions, ``@ai-sdk/openai`` the Responses API."""

    tool, arguments = "bash", '{"command": "ls"}'

    def __init__(self, provider: str, api: API) -> None:
        self.provider, self.api, self.id = provider, api, f"opencode-{api}"

    def command(self, home: Path, work: Path) -> list[str]:
        run = ["run", "--format", "json", "--auto", "-m", f"standin/{MODEL}", PROMPT]
        return [str(npm_bin(*OPENCODE)), *run]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        provider = {
            "npm": self.provider,
            "name": "Standin",
            "options": {"baseURL": base_url, "apiKey": "dummy"},
            "models": {MODEL: {"name": "Kimi K2", "tool_call": True}},
        }
        config = {
            "provider": {"standin": provider},
            "model": f"standin/{MODEL}",
            "small_model": f"standin/{MODEL}",
            "autoupdate": False,
            "share": "disabled",
        }
        (work / "opencode.json").write_text(json.dumps(config))
        off = ("MODELS_FETCH", "AUTOUPDATE", "DEFAULT_PLUGINS", "LSP_DOWNLOAD")
        return {f"OPENCODE_DISABLE_{name}": "1" for name in off}

    def client_ids(self, run: AgentRun) -> list[str]:
        return [e["part"]["callID"] for e in run.events if e.get("type") == "tool_use"]

    def final_text(self, run: AgentRun) -> str | None:
        texts = [e["part"]["text"] for e in run.events if e.get("type") == "text"]
        return texts[-1] if texts else None


class QwenCode(StreamJsonDriver):
    """Qwen Code on its OpenAI (Chat Completions) auth type; ``--debug`` makes it log why it
    rejected a response to ``~/.qwen/debug/<session>.txt``."""

    id, api = "qwen-code", "chat"
    tool, arguments = "glob", '{"pattern": "*.txt"}'

    def command(self, home: Path, work: Path) -> list[str]:
        flags = ["--auth-type", "openai", "-m", MODEL, "--yolo", "--debug", "-o", "stream-json"]
        return [str(npm_bin(*QWEN_CODE)), *flags, PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        settings = {
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "telemetry": {"enabled": False},
            "privacy": {"usageStatisticsEnabled": False},
            "security": {"auth": {"selectedType": "openai"}},
        }
        (home / ".qwen").mkdir()
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
        return {
            "OPENAI_API_KEY": "dummy",
            "OPENAI_BASE_URL": base_url,
            "OPENAI_MODEL": MODEL,
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }

    def debug_log(self, run: AgentRun) -> str:
        return "".join(p.read_text() for p in sorted((run.home / ".qwen" / "debug").glob("*.txt")))


class Cline(AgentDriver):
    """The Cline CLI on its ``openai-compatible`` provider (Chat Completions). What it kept is
    its stored session, ``~/.cline/data/sessions/*/*.messages.json``: the history it replays."""

    id, api = "cline", "chat"
    tool, arguments = "run_commands", '{"commands": ["ls"]}'

    def command(self, home: Path, work: Path) -> list[str]:
        return [str(npm_bin(*CLINE)), "--json", "-c", str(work), PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        """What ``cline auth -p openai-compatible -k KEY -m MODEL -b URL`` writes (``updatedAt``
        included: without it Cline ignores the provider), with telemetry and updates off."""
        settings = home / ".cline" / "data" / "settings"
        settings.mkdir(parents=True)
        provider = {
            "settings": {
                "provider": "openai-compatible",
                "apiKey": "dummy",
                "model": MODEL,
                "baseUrl": base_url,
            },
            "updatedAt": "2026-01-01T00:00:00.000Z",
            "tokenSource": "manual",
        }
        providers = {
            "version": 1,
            "lastUsedProvider": "openai-compatible",
            "modes": {},
            "providers": {"openai-compatible": provider},
        }
        (settings / "providers.json").write_text(json.dumps(providers))
        global_settings = {"telemetryOptOut": True, "autoUpdateEnabled": False}
        (settings / "global-settings.json").write_text(json.dumps(global_settings))
        return {"CLINE_SESSION_BACKEND_MODE": "local"}

    def blocks(self, run: AgentRun) -> list[Any]:
        """The content blocks of its stored session's messages, in order."""
        sessions = run.home / ".cline" / "data" / "sessions"
        messages = [
            m
            for path in sorted(sessions.glob("*/*.messages.json"))
            for m in json.loads(path.read_text())["messages"]
        ]
        return [b for m in messages if isinstance(m["content"], list) for b in m["content"]]

    def client_ids(self, run: AgentRun) -> list[str]:
        return [b["id"] for b in self.blocks(run) if b.get("type") == "tool_use"]

    def failed_results(self, run: AgentRun) -> list[str]:
        """The texts of the tool results it marked as errors."""
        return [
            str(b["content"])
            for b in self.blocks(run)
            if b.get("type") == "tool_result" and b.get("is_error")
        ]

    def final_text(self, run: AgentRun) -> str | None:
        texts = [
            e["text"]
            for e in run.events
            if e.get("type") == "run_result" and e.get("finishReason") == "completed"
        ]
        return texts[-1] if texts else None


class KimiCli(AgentDriver):
    """kimi-cli (a Python program) on a provider of type ``kimi`` (Chat Completions); its
    ``stream-json`` output prints every message of its history as it sends it."""

    id, api = "kimi-cli", "chat"
    tool, arguments = "Glob", '{"pattern": "*.txt"}'
    ca_variable = "SSL_CERT_FILE"

    def command(self, home: Path, work: Path) -> list[str]:
        kimi = venv("kimi-cli", [KIMI_CLI]) / "bin" / "kimi"
        config = ["--config-file", str(home / "kimi.toml")]
        flags = ["--print", "--output-format", "stream-json", *config, "-w", str(work)]
        return [str(kimi), *flags, "-p", PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        (home / "kimi.toml").write_text(
            'default_model = "standin"\n\n[providers.standin]\ntype = "kimi"\n'
            f'base_url = "{base_url}"\napi_key = "dummy"\n\n[models.standin]\n'
            f'provider = "standin"\nmodel = "{MODEL}"\nmax_context_size = 131072\n'
        )
        return {}

    def client_ids(self, run: AgentRun) -> list[str]:
        said = [e for e in run.events if e.get("role") == "assistant"]
        return [c["id"] for e in said for c in e.get("tool_calls") or []]

    def final_text(self, run: AgentRun) -> str | None:
        said = [e for e in run.events if e.get("role") == "assistant"]
        return next((e["content"] for e in said[::-1] if isinstance(e["content"], str)), None)


class Pi(AgentDriver):
    """pi with a provider of API ``kind``: ``openai-completions`` or ``openai-responses``."""

    tool, arguments = "bash", '{"command": "ls"}'

    def __init__(self, kind: str, api: API) -> None:
        self.kind, self.api, self.id = kind, api, f"pi-{api}"

    def command(self, home: Path, work: Path) -> list[str]:
        flags = ["--offline", "--provider", "standin", "--model", MODEL, "--mode", "json"]
        return [str(npm_bin(*PI)), *flags, "--no-session", "-p", PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        provider = {
            "baseUrl": base_url,
            "api": self.kind,
            "apiKey": "dummy",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [
                {
                    "id": MODEL,
                    "name": "Kimi K2",
                    "reasoning": False,
                    "contextWindow": 131072,
                    "maxTokens": 8192,
                }
            ],
        }
        (home / ".pi" / "agent").mkdir(parents=True)
        (home / ".pi" / "agent" / "models.json").write_text(
            json.dumps({"providers": {"standin": provider}})
        )
        return {}

    def client_ids(self, run: AgentRun) -> list[str]:
        # On the Responses API pi keeps "<call_id>|<item id>": the call id is the first part.
        return [
            e["toolCallId"].split("|")[0]
            for e in run.events
            if e.get("type") == "tool_execution_start"
        ]

    def final_text(self, run: AgentRun) -> str | None:
        texts = [
            block["text"]
            for e in run.events
            if e.get("type") == "message_end" and e["message"].get("role") == "assistant"
            for block in e["message"]["content"]
            if block.get("type") == "text"
        ]
        return texts[-1] if texts else None


OPENCODE_CHAT = OpenCode("@ai-sdk/openai-compatible", "chat")
OPENCODE_RESPONSES = OpenCode("@ai-sdk/openai", "responses")
QWEN = QwenCode()
CLINE_CHAT = Cline()
KIMI_CHAT = KimiCli()
PI_CHAT = Pi("openai-completions", "chat")
PI_RESPONSES = Pi("openai-responses", "responses")
DRIVERS = [OPENCODE_CHAT, OPENCODE_RESPONSES, QWEN, CLINE_CHAT, KIMI_CHAT, PI_CHAT, PI_RESPONSES]


# ----------------------------------------------------------------------------- failures


def opencode_keeps_one_of_two_calls(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """Of two calls sharing an id, OpenCode runs and sends back one; the stand-in, one result
    short, asks again."""
    reqs = tool_requests(up, driver.api)
    assert len(reqs) >= 2, summary(driver, run, up)
    after_first = reqs[1].json
    assert count_tool_results(driver.api, after_first) == 1, summary(driver, run, up)
    calls = [v for k, v in request_id_positions(driver.api, after_first) if k == "call"]
    assert calls == [driver.raw_id, driver.raw_id], calls  # one call and its one result
    assert driver.client_ids(run)[0] == driver.raw_id


def qwen_rejects_two_calls_with_one_id(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """Qwen Code rejects the response as a malformed tool call and retries (the stand-in
    refuses the retry, so the test does not wait out its four back-offs): no tool ran."""
    assert isinstance(driver, QwenCode)
    assert "Invalid stream [MALFORMED_TOOL_CALL]" in driver.debug_log(run), summary(driver, run, up)
    assert driver.client_ids(run) == []
    reqs = tool_requests(up, driver.api)
    assert len(reqs) == 2 and count_tool_results(driver.api, reqs[1].json) == 0
    assert run.headless.returncode == 1 and stream_json_result(run.events)["is_error"] is True


def qwen_renames_a_reused_id(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """Qwen Code renames the id's second use, skips the call as a duplicate, sends the renamed
    id to the upstream and halts on its loop detection."""
    assert isinstance(driver, QwenCode)
    renamed = f"{driver.raw_id}__qwen_dup_2"
    assert driver.client_ids(run)[:2] == [driver.raw_id, renamed], summary(driver, run, up)
    reqs = tool_requests(up, "chat")
    sent = {v for r in reqs for _, v in request_id_positions("chat", r.json)}
    assert renamed in sent, sent
    result = stream_json_result(run.events)
    assert run.headless.returncode == 1 and result["is_error"] is True
    assert "Loop detection" in result["error"]["message"], result


def cline_merges_two_calls_with_one_id(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """Cline merges the two calls into one whose arguments (both calls' joined) are not JSON:
    the upstream gets one call and one failed result where it sent two calls."""
    assert isinstance(driver, Cline)
    assert driver.client_ids(run) == [driver.raw_id], summary(driver, run, up)
    assert count_tool_results("chat", tool_requests(up, "chat")[1].json) == 1
    failed = driver.failed_results(run)
    assert failed and all("invalid JSON arguments" in e for e in failed), summary(driver, run, up)


def pi_empties_the_second_id(
    driver: AgentDriver, scenario: Scenario, run: AgentRun, up: ReuseUpstream
) -> None:
    """pi gives the second call the id "" and no name: that call fails, and "" goes to the
    upstream as a call id and a result's id."""
    assert driver.client_ids(run) == [driver.raw_id, ""], summary(driver, run, up)
    ends = {e["toolCallId"]: e for e in run.events if e.get("type") == "tool_execution_end"}
    assert ends[""]["isError"] is True and ends[""]["toolName"] == ""
    assert ends[""]["result"]["content"][0]["text"] == "Tool  not found"
    calls = [v for _, v in request_id_positions("chat", tool_requests(up, "chat")[1].json)]
    assert sorted(calls) == ["", "", driver.raw_id, driver.raw_id], calls


@dataclass(frozen=True)
class Without:
    """What ``driver`` does in ``scenario`` without toolid, checked by ``check``, against a
    stand-in that answers ``max_requests`` model requests."""

    driver: AgentDriver
    scenario: Scenario
    check: RunCheck
    max_requests: int = CAP

    @property
    def id(self) -> str:
        return f"{self.driver.id}-{self.scenario.name}"


WITHOUT_TOOLID = [
    Without(OPENCODE_CHAT, PARALLEL_ONE_ID, opencode_keeps_one_of_two_calls),
    Without(OPENCODE_RESPONSES, PARALLEL_ONE_ID, opencode_keeps_one_of_two_calls),
    Without(QWEN, PARALLEL_ONE_ID, qwen_rejects_two_calls_with_one_id, max_requests=1),
    Without(QWEN, REUSED_ACROSS_TURNS, qwen_renames_a_reused_id),
    Without(CLINE_CHAT, PARALLEL_ONE_ID, cline_merges_two_calls_with_one_id),
    Without(KIMI_CHAT, PARALLEL_ONE_ID, check_keeps_the_raw_id),
    Without(KIMI_CHAT, REUSED_ACROSS_TURNS, check_keeps_the_raw_id),
    Without(PI_CHAT, PARALLEL_ONE_ID, pi_empties_the_second_id),
]


# ----------------------------------------------------------------------------- tests


def by_id(value: Any) -> str:
    return str(getattr(value, "id", None) or value.name)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=by_id)
@pytest.mark.parametrize("driver", DRIVERS, ids=by_id)
def test_through_toolid_the_agent_completes(
    driver: AgentDriver, scenario: Scenario, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    through_toolid(driver, scenario, mitm, tmp_path)


@pytest.mark.parametrize("case", WITHOUT_TOOLID, ids=by_id)
def test_without_toolid(case: Without, tmp_path: Path) -> None:
    without_toolid(case.driver, case.scenario, case.check, tmp_path, max_requests=case.max_requests)


@pytest.mark.parametrize("driver", [OPENCODE_CHAT, QWEN, CLINE_CHAT, KIMI_CHAT, PI_CHAT], ids=by_id)
def test_through_toolid_as_an_https_proxy(
    driver: AgentDriver, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    """An https:// base URL, ``HTTPS_PROXY`` at toolid in regular mode and mitmproxy's CA in
    the agent's CA variable: an id reused across turns comes through rewritten."""
    through_https_proxy(driver, REUSED_ACROSS_TURNS, mitm, tmp_path)
