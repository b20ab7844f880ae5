"""Which rule set a request's destination gets: model rules, host rules, their precedence,
and reading the model from the path or the body (exactly, without parsing the body)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolid import scope
from toolid.apis import api_from_path
from toolid.destination import (
    BUILT_IN_HOST_RULES,
    BUILT_IN_MODEL_RULES,
    Destination,
    Destinations,
    choose,
    model_forms,
    model_in_body,
    model_in_path,
    model_member,
    model_of,
    parse_host_rules,
    parse_model_rules,
)
from toolid.positions import Api
from toolid.rules import DEFAULT_MODEL_RULES, MODEL_RULES_NOT_IN, NO_RULES, RULE_SETS

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
GATEWAY = ("openrouter.example", 443)
VERTEX_CLAUDE = (
    "/v1/projects/p/locations/us-east5/publishers/anthropic/models/"
    "claude-sonnet-4@20250514:streamRawPredict"
)


def rule_set(
    model: str | None,
    host: tuple[str, int] = GATEWAY,
    path: str = CHAT,
    **rules: Any,
) -> str | None:
    """The name of the rule set ``choose`` gives (None: none)."""
    chosen = choose(*host, path, model, **rules)
    return chosen.rules.name if chosen.rules else None


# --- the built-in model rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("mistralai/devstral-medium-2507", "mistral"),
        ("devstral-small-2505", "mistral"),
        ("mistral-large-latest", "mistral"),
        ("codestral-2508", "mistral"),
        ("magistral-medium-latest", "mistral"),
        ("ministral-8b-latest", "mistral"),
        ("pixtral-large-latest", "mistral"),
        ("open-mixtral-8x22b", None),  # no rule matches a vendor prefix without a slash
        ("mistral/codestral-latest", "mistral"),  # LiteLLM's provider prefix
        ("Mistral-Large-Instruct-2411", "mistral"),  # case-insensitive
        ("gpt-4o", "openai"),
        ("gpt-5-codex", "openai"),
        ("o3-mini", "openai"),
        ("o4-mini-2025-04-16", "openai"),
        ("o1", "openai"),
        ("codex-mini-latest", "openai"),
        ("openai/gpt-4.1", "openai"),
        ("azure/gpt-4o", "openai"),  # what follows the slash
        ("gpt-oss-120b", None),  # open weights: no rule
        ("openai/gpt-oss-20b", None),
        ("groq/openai/gpt-oss-120b", None),
        ("claude-sonnet-4-5-20250929", "anthropic"),
        ("anthropic/claude-opus-4.1", "anthropic"),
        ("openrouter,anthropic/claude-sonnet-4", "anthropic"),  # claude-code-router
        ("moonshotai/kimi-k2", None),
        ("kimi-k2-0905-preview", None),
        ("deepseek-chat", None),
        ("qwen/qwen3-coder", None),
        ("", None),
        (None, None),
    ],
)
def test_built_in_model_rules(model: str | None, expected: str | None) -> None:
    assert rule_set(model) == expected


def test_claude_names_say_nothing_in_messages_requests() -> None:
    """Claude Code sends its default claude-* models to every Anthropic-compatible server."""
    assert rule_set("claude-sonnet-4-5", path=MESSAGES) is None
    assert rule_set("claude-sonnet-4-5", path="/v1/messages?beta=true") is None
    assert rule_set("anthropic/claude-sonnet-4", path=MESSAGES) == "anthropic"
    assert rule_set("claude-sonnet-4-5", path="/v1/responses") == "anthropic"
    assert rule_set("mistralai/devstral-medium", path=MESSAGES) == "mistral"
    user = parse_model_rules(["claude-*=anthropic"])  # the user's apply everywhere
    assert rule_set("claude-sonnet-4-5", path=MESSAGES, model_rules=user) == "anthropic"
    assert set(MODEL_RULES_NOT_IN) <= {entry.split("=")[0] for entry in DEFAULT_MODEL_RULES}


def test_every_built_in_model_rule_names_a_rule_set() -> None:
    assert {rule.name for rule in BUILT_IN_MODEL_RULES} <= {*RULE_SETS, NO_RULES}
    assert len(BUILT_IN_MODEL_RULES) == len(DEFAULT_MODEL_RULES)


def test_model_forms() -> None:
    assert model_forms("a/b,c/d") == ("a/b,c/d", "b,c/d", "c/d", "d")
    assert model_forms("gpt-4o") == ("gpt-4o",)


# --- precedence --------------------------------------------------------------------------------


def test_precedence() -> None:
    """User model rules, then user host rules and strict hosts, then the official hosts'
    built-ins, then the built-in model rules, then none."""
    user_models = parse_model_rules(["acme-*=mistral", "gpt-4o-local=none"])
    user_hosts = parse_host_rules(["llm.internal=openai", "lenient.internal=none"])
    strict = scope.parse(["strict.internal"])
    rules: dict[str, Any] = {
        "model_rules": user_models,
        "host_rules": user_hosts,
        "strict_hosts": strict,
    }
    mistral_api = ("api.mistral.ai", 443)
    # 1. the user's model rules beat everything, the official hosts included
    assert rule_set("acme-coder", mistral_api, **rules) == "mistral"
    assert rule_set("acme-coder", ("api.openai.com", 443), **rules) == "mistral"
    assert rule_set("acme-coder", ("lenient.internal", 443), **rules) == "mistral"
    # 2. the user's host rules, then the strict hosts, beat the built-ins
    assert rule_set("claude-sonnet-4", ("llm.internal", 443), **rules) == "openai"
    assert rule_set("mistral-large", ("lenient.internal", 443), **rules) is None
    assert rule_set("mistral-large", ("strict.internal", 443), **rules) == "safe"
    # 3. the official hosts' built-ins beat the built-in model rules
    assert rule_set("gpt-4o", mistral_api, **rules) == "mistral"
    assert rule_set("mistral-large", ("api.anthropic.com", 443), **rules) == "anthropic"
    # 4. the built-in model rules, where nothing else applies
    assert rule_set("mistral-large", GATEWAY, **rules) == "mistral"
    # a user's none: no model rule (the built-ins skipped), the host still decides
    assert rule_set("gpt-4o-local", GATEWAY, **rules) is None
    assert rule_set("gpt-4o-local", ("api.openai.com", 443), **rules) == "openai"
    assert rule_set("gpt-4o-local", ("strict.internal", 443), **rules) == "safe"
    # 5. nothing: a model no rule knows, behind a host no rule knows
    assert rule_set("moonshotai/kimi-k2", GATEWAY, **rules) is None
    assert rule_set(None, GATEWAY, **rules) is None


def test_the_first_matching_user_entry_wins() -> None:
    models = parse_model_rules(["acme-coder-2=openai,acme-*=mistral"])
    assert rule_set("acme-coder-2", model_rules=models) == "openai"
    assert rule_set("acme-coder-1", model_rules=models) == "mistral"
    assert rule_set("ACME-X", model_rules=models) == "mistral"


def test_why_names_the_model_only_when_it_chose() -> None:
    assert choose(*GATEWAY, CHAT, "mistralai/devstral-medium-2507").why == (
        "model mistralai/devstral-medium-2507"
    )
    assert choose("api.mistral.ai", 443, CHAT, "mistral-large").why == ""
    assert choose(*GATEWAY, CHAT, "kimi-k2") == Destination(None, "")
    long = "mistral-" + "x" * 300
    assert choose(*GATEWAY, CHAT, long).why == f"model {long[:100]}..."
    assert choose(*GATEWAY, CHAT, "mistral large").why == 'model "mistral large"'


@pytest.mark.parametrize(
    ("host", "path", "expected"),
    [
        ("chatgpt.com", "/backend-api/codex/responses", "openai"),
        ("chatgpt.com", "/backend-api/conversation", None),
        ("res.services.ai.azure.com", "/openai/v1/responses", "openai"),
        ("res.services.ai.azure.com", "/api/projects/p/openai/responses", "openai"),
        ("res.services.ai.azure.com", "/anthropic/v1/messages", "anthropic"),
        ("res.services.ai.azure.com", "/models/chat/completions", None),  # the model decides
        ("res.cognitiveservices.azure.com", "/openai/deployments/d/chat/completions", "openai"),
        ("api.githubcopilot.com", "/chat/completions", "openai"),
        ("api.business.githubcopilot.com", "/responses", "openai"),
        ("us-east5-aiplatform.googleapis.com", VERTEX_CLAUDE, "anthropic"),
        ("aiplatform.googleapis.com", VERTEX_CLAUDE.replace("streamRaw", "raw"), "anthropic"),
        (
            "us-central1-aiplatform.googleapis.com",
            "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent",
            "gemini",
        ),
        ("aiplatform.googleapis.com", "/v1/publishers/google/models/g:generateContent", "gemini"),
        (
            "us-central1-aiplatform.googleapis.com",
            "/v1/projects/p/locations/l/publishers/mistralai/models/m:rawPredict",
            "safe",
        ),
        ("generativelanguage.googleapis.com", "/v1beta/models/g:generateContent", "gemini"),
        ("cloudcode-pa.googleapis.com", "/v1internal:streamGenerateContent", "gemini"),
        ("api.anthropic.com", MESSAGES, "anthropic"),
        ("bedrock-runtime.us-east-1.amazonaws.com", "/model/m/converse", "bedrock"),
    ],
)
def test_built_in_hosts(host: str, path: str, expected: str | None) -> None:
    assert rule_set(None, (host, 443), path) == expected


def test_the_foundry_models_api_takes_the_model_rules() -> None:
    foundry = ("res.services.ai.azure.com", 443)
    assert rule_set("Mistral-Large-2411", foundry, "/models/chat/completions") == "mistral"
    assert rule_set("DeepSeek-R1", foundry, "/models/chat/completions") is None


def test_host_rules_with_a_path() -> None:
    rules = parse_host_rules(["gateway.example/mistral/*=mistral", "gateway.example=none"])
    assert rule_set(None, ("gateway.example", 443), "/mistral/v1/chat", host_rules=rules) == (
        "mistral"
    )
    assert rule_set("gpt-4o", ("gateway.example", 443), CHAT, host_rules=rules) is None


@pytest.mark.parametrize(
    ("parse", "entry", "message"),
    [
        (parse_model_rules, "devstral", "invalid entry 'devstral': expected PATTERN=NAME"),
        (parse_model_rules, "dev=strictest", "NAME one of anthropic, bedrock, gemini, mistral"),
        (parse_model_rules, "=mistral", "invalid model pattern ''"),
        (parse_model_rules, "my model=mistral", "invalid model pattern 'my model'"),
        (parse_host_rules, "localhost:8000", "invalid entry 'localhost:8000': expected HOST"),
        (parse_host_rules, "bad host!=mistral", "invalid host pattern"),
    ],
)
def test_bad_entries_are_named(parse: Any, entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse([entry])


def test_built_in_host_rules_parse() -> None:
    assert all(rule.name in RULE_SETS for rule in BUILT_IN_HOST_RULES)


def test_destinations_remember_and_agree() -> None:
    destinations = Destinations(parse_model_rules(["acme-*=mistral"]))
    for _ in range(2):
        assert destinations.choose(*GATEWAY, CHAT + "?x=1", "acme-1").why == "model acme-1"
    for n in range(300):  # more than it remembers
        assert destinations.choose(*GATEWAY, f"/{n}{CHAT}", "kimi").rules is None


# --- reading the model -------------------------------------------------------------------------


def test_vertex_paths_are_messages() -> None:
    assert api_from_path(VERTEX_CLAUDE) is Api.MESSAGES
    assert api_from_path(VERTEX_CLAUDE.replace("streamRaw", "raw")) is Api.MESSAGES
    assert api_from_path(VERTEX_CLAUDE.replace("anthropic", "mistralai")) is None
    assert api_from_path("/v1/projects/p/locations/l/publishers/anthropic/models/m:predict") is None


@pytest.mark.parametrize(
    ("path", "model"),
    [
        (VERTEX_CLAUDE, "anthropic/claude-sonnet-4@20250514"),
        ("/v1/projects/p/locations/l/publishers/mistralai/models/codestral-2501:rawPredict",
         "mistralai/codestral-2501"),
        ("/openai/deployments/my-gpt-4o/chat/completions?api-version=2024-10-21", "my-gpt-4o"),
        ("/model/us.anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse",
         "us.anthropic.claude-3-7-sonnet-20250219-v1:0"),
        ("/model/mistral.mistral-large-2407-v1:0/invoke-with-response-stream",
         "mistral.mistral-large-2407-v1:0"),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", "gemini-2.5-pro"),
        (CHAT, None),
        (MESSAGES, None),
    ],
)  # fmt: skip
def test_model_in_path(path: str, model: str | None) -> None:
    assert model_in_path(path) == model


def test_the_path_wins_over_the_body() -> None:
    body = b'{"model": "gpt-4o", "messages": []}'
    assert model_of(body, "/openai/deployments/dep/chat/completions") == "dep"
    assert model_of(body, CHAT) == "gpt-4o"
    assert model_of(None, CHAT) is None


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (b'{"model":"a"}', "a"),
        (b' {\n "model" :\t"a" , "x": 1}', "a"),
        (b'{"messages": [{"content": "\\"model\\": \\"no\\""}], "model": "yes"}', "yes"),
        (b'{"x": {"model": "nested"}}', None),
        (b'[{"model": "nested"}]', None),
        (b'{"x": {"model": "nested"}, "model": "top"}', "top"),
        (b'{"model": "top", "x": {"model": "nested"}}', "top"),
        (b'{"model": null, "x": {"model": "nested"}}', None),
        (b'{"model": "mistralai\\/devstral"}', "mistralai/devstral"),
        (b'{"model": "caf\\u00e9"}', "caf\u00e9"),
        (b'{"models": ["a"], "model_id": "b"}', None),
        (b'{"a": "\\\\", "model": "x"}', "x"),  # an escaped backslash ends no string
        (b'{"model": "unterminated', None),
        (b"", None),
    ],
)
def test_model_in_body(body: bytes, model: str | None) -> None:
    assert model_in_body(body) == model


def big_body(model_at: str, model: str = "mistralai/devstral", nested: bool = True) -> bytes:
    """A history far larger than the counted sides, with nested model members around."""
    messages: list[Any] = []
    for n in range(300):
        use = {"type": "tool_use", "id": f"t{n}", "input": {"model": "nested", "q": "[{"}}
        messages.append({"role": "assistant", "content": [use] if nested else "x" * 40})
        messages.append({"role": "user", "content": '\\"model\\": "x" ]}' * 3})
    tools = [{"name": f"t{n}", "input_schema": {"model": {"type": "string"}}} for n in range(200)]
    document: dict[str, Any] = {"max_tokens": 10, "messages": messages, "tools": tools}
    items = list(document.items())
    where = {"first": 0, "middle": 2, "last": len(items)}[model_at]
    items.insert(where, ("model", model))
    return json.dumps(dict(items)).encode()


@pytest.mark.parametrize("model_at", ["first", "middle", "last"])
def test_model_in_a_big_body(model_at: str) -> None:
    body = big_body(model_at)
    assert len(body) > 50_000
    assert model_in_body(body) == "mistralai/devstral"
    destinations = Destinations()
    chosen = destinations.for_request(*GATEWAY, CHAT, body)
    assert chosen.why == "model mistralai/devstral"
    assert destinations.for_request(*GATEWAY, CHAT, big_body(model_at, "kimi")).rules is None


def test_a_nested_model_is_never_taken_for_the_top_level_one() -> None:
    body = json.dumps({"messages": [{"input": {"model": "mistral-large"}}], "x": 1}).encode()
    assert model_member(body) is not None  # found, but not top-level
    assert Destinations().for_request(*GATEWAY, CHAT, body).rules is None
    big = big_body("last", "kimi").replace(b'"model": "kimi"', b'"other": "kimi"')
    big = big.replace(b'"model": "nested"', b'"model": "mistral-large"')
    assert Destinations().for_request(*GATEWAY, CHAT, big).rules is None


def test_a_later_nested_model_hides_no_top_level_one() -> None:
    """The last model member is nested and names no rule; the top-level one, past the first
    bytes, does: it is the one that counts."""
    messages = [{"role": "user", "content": [{"type": "tool_use", "input": {"model": "haiku"}}]}]
    document = {"system": "s" * 2000, "model": "mistral-large", "messages": messages * 200}
    body = json.dumps(document).encode()
    assert model_member(body) is not None and model_member(body).value == "haiku"  # type: ignore[union-attr]
    assert model_in_body(body) == "mistral-large"
    assert Destinations().for_request(*GATEWAY, CHAT, body).why == "model mistral-large"


def test_a_host_that_decides_is_not_read() -> None:
    destinations = Destinations()
    assert destinations.for_request("api.anthropic.com", 443, MESSAGES, b"not json") == (
        Destination(RULE_SETS["anthropic"])
    )
    user = Destinations(parse_model_rules(["acme-*=mistral"]))
    body = b'{"model": "acme-1"}'
    assert user.for_request("api.anthropic.com", 443, MESSAGES, body).rules is RULE_SETS["mistral"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["model", "m", "x", 'q"', "\\"]), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(["model", "messages", "a", "tools"]), json_values),
    st.sampled_from([None, {}, {"indent": 1}, {"separators": (",", ":")}]),
    st.booleans(),
)
def test_property_model_in_body_is_the_parsed_one(
    document: dict[str, Any], dump: dict[str, Any] | None, ascii_only: bool
) -> None:
    """For any JSON object, the byte-level read gives what a parser reads."""
    body = json.dumps(document, ensure_ascii=ascii_only, **(dump or {})).encode()
    expected = document.get("model")
    assert model_in_body(body) == (expected if isinstance(expected, str) else None)
    chosen = Destinations().for_request(*GATEWAY, CHAT, body)
    assert chosen == choose(*GATEWAY, CHAT, expected if isinstance(expected, str) else None)


model_names = st.one_of(
    st.sampled_from(
        ["gpt-4o", "gpt-oss-20b", "mistral-large", "claude-x", "kimi", "acme-1", "o3", "x"]
    ),
    st.text(max_size=20),
).flatmap(lambda name: st.sampled_from([name, f"vendor/{name}", f"p,{name}"]))
hosts = st.sampled_from(
    [("api.mistral.ai", 443), ("api.openai.com", 443), GATEWAY, ("strict.internal", 80)]
)


@settings(max_examples=300, deadline=None)
@given(model_names, hosts, st.sampled_from([CHAT, MESSAGES, "/v1/responses"]))
def test_property_precedence(model: str, host: tuple[str, int], path: str) -> None:
    """The choice is the first of the five levels that has an answer."""
    user_models = parse_model_rules(["acme-*=mistral", "x=none"])
    strict = scope.parse(["strict.internal"])
    got = choose(*host, path, model, model_rules=user_models, strict_hosts=strict)
    api = api_from_path(path)
    forms = model_forms(model) if model else ()
    user = next((r.name for r in user_models if r.matches(forms, api)), None)
    if user not in (None, NO_RULES):
        assert got.rules is RULE_SETS[user] and got.why.startswith("model ")
        return
    if host == ("strict.internal", 80):
        assert got == Destination(RULE_SETS["safe"])
        return
    official = next((r.name for r in BUILT_IN_HOST_RULES if r.matches(*host, path)), None)
    if official is not None:
        assert got == Destination(RULE_SETS[official])
        return
    built_in = next((r.name for r in BUILT_IN_MODEL_RULES if r.matches(forms, api)), None)
    if user is None and built_in not in (None, NO_RULES):
        assert got.rules is RULE_SETS[built_in] and got.why.startswith("model ")
    else:
        assert got == Destination(None)
