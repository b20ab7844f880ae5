"""End to end with a real agent resumed from a broken session: pi (Chat Completions) and
``toolid_repair``.

pi keeps a session as JSON lines in ``~/.pi/agent/sessions/--<cwd>--/``: ``message`` entries
linked by ``id``/``parentId``, the assistant's ``toolCall`` and its ``toolResult`` in entries
of their own. The module's fixture records a real session (pi asks the stand-in, which calls
``bash`` once with an OpenAI-style id, then answers a final text) and breaks it as a trimmed
or wrongly merged history is broken: the assistant entry holding the call is gone, its result
stays, re-parented to the user prompt. Resumed from it (``pi -c -p continue``), pi replays
the result as a ``tool`` message with no ``tool_calls`` before it.

A strict Chat host (``StrictHost("openai")``) answers that request 400 with OpenAI's text;
pi makes that one request, ends the turn with ``stopReason: "error"`` and exits 0 (the
failure shows in its JSON events only):

- straight at the host, and through toolid as it is by default, the turn fails (through
  toolid, mitmdump's log names the orphan result);
- through toolid with ``--set toolid_repair=true`` the orphan result reaches the host as a
  user message that keeps its text, and the turn completes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from standin import FINAL_TEXT, Exchange, ReuseUpstream
from standin.apis import sdk_url
from standin.strict import NATIVE_IDS, StrictHost

from .agents_common import AgentRun, run_agent, summary
from .cache import npm_bin
from .conftest import Mitmdump, MitmdumpPool
from .test_e2e_coding_agents import MODEL, PI, PI_CHAT, Pi

pytestmark = [pytest.mark.e2e, pytest.mark.agent]

CALL_ID = NATIVE_IDS["openai"]  # an id every strict host accepts: only the pairing is wrong
TOOL_OUTPUT = "a.txt\nb.txt\nc.txt\n"  # what ``ls`` prints in run_agent's working directory
ORPHAN_400 = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)
RESUME_PROMPT = "continue"
# what pi sends resumed from the broken session: the result replayed with no call before it
BROKEN_ROLES = ["system", "user", "tool", "assistant", "user"]


# ----------------------------------------------------------------------------- pi's sessions


def session_dir(home: Path, cwd: Path) -> Path:
    """Where pi keeps the sessions of working directory ``cwd`` (its getDefaultSessionDir:
    the path without its leading slash, ``/``, ``\\`` and ``:`` as ``-``, within ``--``)."""
    safe = re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", str(cwd)))
    return home / ".pi" / "agent" / "sessions" / f"--{safe}--"


def session_of(run: AgentRun) -> tuple[str, list[dict[str, Any]]]:
    """The one session file ``run`` left: its name and its entries."""
    files = sorted(session_dir(run.home, run.work).glob("*.jsonl"))
    assert len(files) == 1, files
    return files[0].name, [json.loads(line) for line in files[0].read_text().splitlines()]


def drop_the_call(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` with the assistant entry holding the tool call removed, and the result
    that answered it re-parented to that entry's parent (the user prompt)."""

    def message(entry: dict[str, Any]) -> dict[str, Any]:
        return entry["message"] if entry.get("type") == "message" else {}

    calls = [
        e
        for e in entries
        if message(e).get("role") == "assistant"
        and any(b.get("type") == "toolCall" for b in message(e)["content"])
    ]
    assert len(calls) == 1, calls
    call = calls[0]
    results = [e for e in entries if message(e).get("role") == "toolResult"]
    assert [e["parentId"] for e in results] == [call["id"]], results
    assert message(results[0])["toolCallId"] == CALL_ID, results
    return [
        {**e, "parentId": call["parentId"]} if e is results[0] else e
        for e in entries
        if e is not call
    ]


class RecordingPi(Pi):
    """pi as the coding-agents tests run it, but keeping its session."""

    def command(self, home: Path, work: Path) -> list[str]:
        return [arg for arg in super().command(home, work) if arg != "--no-session"]


class ResumedPi(Pi):
    """pi resumed (``-c -p continue``) from the session ``entries`` (file ``name``), written
    into its HOME for its working directory."""

    def __init__(self, name: str, entries: list[dict[str, Any]]) -> None:
        super().__init__("openai-completions", "chat")
        self.id = "pi-chat-resumed"
        self.name, self.entries = name, entries

    def command(self, home: Path, work: Path) -> list[str]:
        flags = ["--offline", "--provider", "standin", "--model", MODEL, "--mode", "json"]
        return [str(npm_bin(*PI)), *flags, "-c", "-p", RESUME_PROMPT]

    def configure(self, home: Path, work: Path, base_url: str) -> dict[str, str]:
        env = super().configure(home, work, base_url)
        folder = session_dir(home, work)
        folder.mkdir(parents=True)
        lines = [{**e, "cwd": str(work)} if e["type"] == "session" else e for e in self.entries]
        (folder / self.name).write_text("".join(json.dumps(e) + "\n" for e in lines))
        return env

    def turn_ends(self, run: AgentRun) -> list[dict[str, Any]]:
        """The assistant messages that ended the turns of this run."""
        return [
            e["message"]
            for e in run.events
            if e.get("type") == "turn_end" and e["message"].get("role") == "assistant"
        ]


@pytest.fixture(scope="module")
def broken_pi(tmp_path_factory: pytest.TempPathFactory) -> ResumedPi:
    """pi resumed from a real session of its own, broken: its tool call gone, the result kept."""
    recorder = RecordingPi("openai-completions", "chat")
    up = ReuseUpstream(ids=[CALL_ID], name=PI_CHAT.tool, arguments=PI_CHAT.arguments, turns=1)
    with up:
        run = run_agent(recorder, up.sdk_url("chat"), tmp_path_factory.mktemp("pi-record"))
    assert run.headless.returncode == 0, summary(recorder, run, up)
    assert recorder.final_text(run) == FINAL_TEXT, summary(recorder, run, up)
    name, entries = session_of(run)
    return ResumedPi(name, drop_the_call(entries))


# ----------------------------------------------------------------------------- checks


def the_one_request(up: ReuseUpstream) -> Exchange:
    """pi makes one model request when resumed, whatever its answer (no retry on a 400)."""
    reqs = up.model_requests("chat")
    assert len(reqs) == 1, [(r.status, r.error) for r in reqs]
    return reqs[0]


def check_turn_failed(pi: ResumedPi, run: AgentRun, up: ReuseUpstream) -> None:
    """The host answered the orphan result 400 with OpenAI's text, and pi ended the turn
    with that error (exit 0, no final text)."""
    req = the_one_request(up)
    assert (req.status, req.error) == (400, ORPHAN_400), summary(pi, run, up)
    messages = req.json["messages"]
    assert [m["role"] for m in messages] == BROKEN_ROLES, messages
    assert messages[2]["tool_call_id"] == CALL_ID and "tool_calls" not in messages[1]
    assert run.headless.returncode == 0, summary(pi, run, up)
    ends = pi.turn_ends(run)
    assert [e["stopReason"] for e in ends] == ["error"], summary(pi, run, up)
    assert ORPHAN_400 in ends[0]["errorMessage"], ends[0]
    assert pi.final_text(run) is None, summary(pi, run, up)


def resume(
    pi: ResumedPi, tmp_path: Path, mitm: MitmdumpPool | None = None, *, repair: bool = False
) -> tuple[AgentRun, ReuseUpstream, Mitmdump | None]:
    """Resume ``pi`` against a strict OpenAI host: straight, or through a reverse-mode
    mitmdump with toolid when ``mitm`` is given (``--set toolid_repair=true`` if ``repair``)."""
    with StrictHost("openai") as up:
        mode = f"reverse:{up.base_url}"
        proxy = None
        if mitm is not None:
            proxy = mitm.get(mode, toolid_repair=True) if repair else mitm.get(mode)
        base_url = sdk_url("chat", proxy.url if proxy else up.base_url)
        run = run_agent(pi, base_url, tmp_path)
    return run, up, proxy


# ----------------------------------------------------------------------------- tests


def test_straight_at_a_strict_host_the_resumed_turn_fails(
    broken_pi: ResumedPi, tmp_path: Path
) -> None:
    run, up, _ = resume(broken_pi, tmp_path)
    check_turn_failed(broken_pi, run, up)


def test_through_toolid_the_orphan_is_named_and_the_turn_fails(
    broken_pi: ResumedPi, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    run, up, proxy = resume(broken_pi, tmp_path, mitm)
    check_turn_failed(broken_pi, run, up)
    assert proxy is not None
    line = proxy.wait_for_log("pairing problem", timeout=30)
    assert "orphan-result" in line and CALL_ID in line, line
    assert "repaired" not in proxy.log_text()  # toolid_repair is off by default


def test_through_toolid_with_repair_the_resumed_turn_completes(
    broken_pi: ResumedPi, mitm: MitmdumpPool, tmp_path: Path
) -> None:
    run, up, proxy = resume(broken_pi, tmp_path, mitm, repair=True)
    req = the_one_request(up)
    assert req.status == 200, summary(broken_pi, run, up)
    assert run.headless.returncode == 0, summary(broken_pi, run, up)
    assert broken_pi.final_text(run) == FINAL_TEXT, summary(broken_pi, run, up)
    assert [e["stopReason"] for e in broken_pi.turn_ends(run)] == ["stop"]
    # the orphan result reached the host as a user message's text, the rest as pi sent it
    messages = req.json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "user", "assistant", "user"]
    assert not any("tool_call_id" in m or "tool_calls" in m for m in messages), messages
    kept = json.dumps(messages[2]["content"])
    assert CALL_ID in kept and json.dumps(TOOL_OUTPUT)[1:-1] in kept, messages[2]
    assert proxy is not None
    line = proxy.wait_for_log("repaired 1 pairing problem", timeout=30)
    assert "orphan-result" in line and CALL_ID in line, line
