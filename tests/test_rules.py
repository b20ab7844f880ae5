"""Destination rules: every request to a host with a rule set satisfies it, calls
and results stay paired, call ids stay distinct, and a conforming request is untouched."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolid import codec
from toolid.body import Direction, Policy, rewrite
from toolid.positions import DEFINES, Api, Doc, Found, find_ids, path_order
from toolid.rules import DEFAULT_HOST_RULES, RULE_SETS, Rule, RuleSet, assign, conforming

GLOB = "functions.Glob:0"
DEVIN = "get_weather:0#62786027996b4c40886cc7262bdf7382"
LONG = codec.encode(DEVIN + DEVIN[:24])  # 83 characters


# --- requests of each API, built from (call id, item id) pairs per turn -----------------------


def chat(turns: list[list[str]]) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for ids in turns:
        calls = [{"id": i, "type": "function", "function": {"name": "f"}} for i in ids]
        messages.append({"role": "assistant", "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
    return {"model": "m", "messages": messages}


def messages(turns: list[list[str]]) -> dict[str, Any]:
    out: list[Any] = [{"role": "user", "content": "go"}]
    for ids in turns:
        out.append({"role": "assistant", "content": [{"type": "tool_use", "id": i} for i in ids]})
        results = [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids]
        out.append({"role": "user", "content": results})
    return {"model": "m", "messages": out}


def responses(turns: list[list[str]], item_ids: bool = True) -> dict[str, Any]:
    items: list[Any] = [{"role": "user", "content": "go"}]
    for turn, ids in enumerate(turns):
        for n, i in enumerate(ids):
            call: dict[str, Any] = {"type": "function_call", "call_id": i, "name": "f"}
            if item_ids:
                call["id"] = f"fc_{turn}_{n}" if not i.startswith("x") else i
            items.append(call)
        items += [{"type": "function_call_output", "call_id": i, "output": "ok"} for i in ids]
    return {"model": "m", "input": items}


BUILDERS = {Api.CHAT: chat, Api.MESSAGES: messages, Api.RESPONSES: responses}


def send(document: Any, api: Api, rule_set: str) -> tuple[bytes, bytes, Any]:
    body = json.dumps(document).encode()
    policy = Policy(Direction.DECODE, rules=RULE_SETS[rule_set])
    out, result = rewrite(body, api, Doc.REQUEST, policy)
    return body, out, result


def positions_of(document: Any, api: Api) -> list[Found]:
    once = {(id(f.holder), f.key): f for f in find_ids(document, api, Doc.REQUEST)}
    return sorted(once.values(), key=lambda f: path_order(f.path))


def check_rules(before: Any, after: Any, api: Api, rule_set: RuleSet) -> None:
    """The destination's rules hold, calls are distinct, results name their calls."""
    old, new = positions_of(before, api), positions_of(after, api)
    assert [f.path for f in old] == [f.path for f in new]
    defined: list[str] = []
    latest: dict[tuple[str, str], str] = {}
    for was, now in zip(old, new, strict=True):
        family = "call_id" if was.key == "call_id" else "id"
        if was.role is DEFINES:
            assert rule_set.rule(api, now).accepts(now.value), (now.path, now.value)
            defined.append(now.value)
            latest[(family, was.value)] = now.value
        elif (family, was.value) in latest:  # a result: the id of the nearest call before it
            assert now.value == latest[(family, was.value)], now.path
        else:
            assert rule_set.rule(api, now).accepts(now.value), (now.path, now.value)
    if rule_set.unique:
        assert len(defined) == len(set(defined)), defined


# --- examples of real errors -----------------------------------------------------------------


def test_openai_chat_gets_ids_of_at_most_40() -> None:
    _, out, result = send(chat([[LONG]]), Api.CHAT, "openai")
    sent = json.loads(out)["messages"]
    assert len(LONG) == 83 and len(sent[1]["tool_calls"][0]["id"]) <= 40
    assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"]
    assert sent[1]["tool_calls"][0]["id"].startswith("get_weather_0_")  # readable stem
    assert [c.action for c in result.changes] == ["mapped", "mapped"]
    assert result.changes[0].rules == "openai" and result.changes[0].client == LONG


def test_openai_responses_item_ids_get_their_prefix() -> None:
    document = responses([["xcall"]])  # an item id that does not start with fc
    _, out, _ = send(document, Api.RESPONSES, "openai")
    item = json.loads(out)["input"][1]
    assert item["id"].startswith("fc") and item["call_id"] == "xcall"


def test_mistral_gets_nine_alphanumerics() -> None:
    _, out, _ = send(chat([["toolu_01AbC", codec.encode(GLOB)]]), Api.CHAT, "mistral")
    sent = json.loads(out)["messages"]
    ids = [call["id"] for call in sent[1]["tool_calls"]]
    assert all(len(i) == 9 and i.isalnum() for i in ids) and len(set(ids)) == 2
    assert [sent[2]["tool_call_id"], sent[3]["tool_call_id"]] == ids


def test_anthropic_gets_a_reused_raw_history_made_unique() -> None:
    """A history from a server that reuses ids, with no toolid in between: each result names
    the nearest call before it."""
    _, out, _ = send(messages([[GLOB], [GLOB], ["call_0"], ["call_0"]]), Api.MESSAGES, "anthropic")
    sent = json.loads(out)["messages"]
    calls = [sent[i]["content"][0]["id"] for i in (1, 3, 5, 7)]
    results = [sent[i]["content"][0]["tool_use_id"] for i in (2, 4, 6, 8)]
    assert calls == results and len(set(calls)) == 4
    assert calls[2] == "call_0"  # conforming and first: as it was


def test_restored_raw_ids_are_preferred_and_tags_kept() -> None:
    tagged = codec.encode("call_0", "safe", 2)
    body, out, result = send(chat([[codec.encode("call.0"), "call_0", tagged]]), Api.CHAT, "safe")
    sent = json.loads(out)["messages"][1]["tool_calls"]
    assert [call["id"] for call in sent] == [codec.encode("call.0"), "call_0", tagged]
    assert [c.action for c in result.changes] == ["kept", "kept", "kept", "kept"]
    body, out, result = send(chat([["call_0", tagged]]), Api.CHAT, "anthropic")
    assert out is body  # call_0 conforms; the tagged id is never restored
    assert {c.action for c in result.changes} == {"kept"}
    body, out, result = send(chat([[codec.encode("call_a"), tagged]]), Api.CHAT, "bedrock")
    assert json.loads(out)["messages"][1]["tool_calls"][0]["id"] == "call_a"  # restored


def test_a_conforming_request_is_byte_identical() -> None:
    body, out, result = send(chat([["call_abc", "call_def"]]), Api.CHAT, "openai")
    assert out is body and not result.changes


def test_mapping_is_deterministic() -> None:
    one = send(chat([[LONG], [LONG + "x"]]), Api.CHAT, "mistral")[1]
    two = send(chat([[LONG], [LONG + "x"]]), Api.CHAT, "mistral")[1]
    assert one == two


def test_collisions_take_the_next_form() -> None:
    rule = Rule("A-Za-z0-9", max_len=9, min_len=9)
    second = conforming("x", rule, 1)
    assert second != conforming("x", rule) and rule.accepts(second)
    assert assign([], Api.CHAT, RULE_SETS["mistral"]) == []


def test_server_tool_ids_keep_their_prefix() -> None:
    document = {
        "messages": [
            {"role": "assistant", "content": [{"type": "server_tool_use", "id": "srvtoolu-a.b"}]}
        ]
    }
    _, out, _ = send(document, Api.MESSAGES, "anthropic")
    sent = json.loads(out)["messages"][0]["content"][0]["id"]
    assert sent.startswith("srvtoolu_") and "-" not in sent


def test_every_default_host_has_a_rule_set() -> None:
    assert {entry.split("=")[1] for entry in DEFAULT_HOST_RULES} <= set(RULE_SETS)


# --- properties ------------------------------------------------------------------------------

ids = st.one_of(
    st.sampled_from(["call_0", "call_1", GLOB, DEVIN, "toolu_01AbC", "aB3dE5fG7", "", "é"]),
    st.sampled_from(["call_0", GLOB, "x.y", "toolu_01AbC"]).map(codec.encode),
    st.tuples(st.sampled_from(["call_0", GLOB]), st.integers(2, 4)).map(
        lambda pair: codec.encode(pair[0], "safe", pair[1])
    ),
    st.text(min_size=0, max_size=90),
)
turns = st.lists(st.lists(ids, min_size=1, max_size=3), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns, st.sampled_from(list(BUILDERS)), st.sampled_from(sorted(RULE_SETS)))
def test_property_rules_hold(history: list[list[str]], api: Api, name: str) -> None:
    document = BUILDERS[api](history)
    body, out, result = send(document, api, name)
    after = json.loads(out)
    check_rules(json.loads(body), after, api, RULE_SETS[name])
    assert send(document, api, name)[1] == out  # deterministic
    # Only id literals changed, each as the records say.
    assert {c.action for c in result.changes} <= {"restored", "kept", "mapped"}
    for change in result.changes:
        if change.action == "restored":
            assert change.raw == codec.decode(change.client)


@settings(max_examples=200, deadline=None)
@given(turns, st.sampled_from(list(BUILDERS)), st.sampled_from(sorted(RULE_SETS)))
def test_property_raw_ids_come_first(history: list[list[str]], api: Api, name: str) -> None:
    """A call gets its raw id whenever the rules take it and no earlier call has it."""
    body, out, _ = send(BUILDERS[api](history), api, name)
    rule_set = RULE_SETS[name]
    used: set[str] = set()
    old = positions_of(json.loads(body), api)
    for was, now in zip(old, positions_of(json.loads(out), api), strict=True):
        if was.role is not DEFINES:
            continue
        raw, occurrence = codec.parse(was.value)
        if occurrence == 1 and rule_set.rule(api, was).accepts(raw) and raw not in used:
            assert now.value == raw
        used.add(now.value)


@pytest.mark.parametrize("name", sorted(RULE_SETS))
@given(client=st.text(max_size=100), attempt=st.integers(0, 50))
def test_property_conforming_forms_conform(name: str, client: str, attempt: int) -> None:
    rule_set = RULE_SETS[name]
    for rule in (rule_set.default, *rule_set.kinds.values()):
        assert rule.accepts(conforming(client, rule, attempt))
