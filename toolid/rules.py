"""Destination rules: the tool-call id rules of each kind of upstream, and ids that obey them.

A *rule set* says, for each kind of id position, which ids a destination accepts: the
characters, the length, a required prefix; and whether the tool calls of one request must
have distinct ids. ``assign`` chooses, for every id position of one request, the id to send:
the restored raw id if the destination accepts it (never for an occurrence-tagged id), else
the client id, else a deterministic conforming form derived from the client id; calls stay
distinct and each result gets the id of the nearest call before it with its client id. Data
first, like the position table; sans I/O.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from toolid import codec
from toolid.apis import untaken_model_rules
from toolid.positions import DEFINES, TYPE, Api, Found

_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_DIGEST: Final = 10  # base-62 digits of a mapped id's hash part (~60 bits)
_STEM_MIN: Final = 6  # room below which a mapped id is its hash alone
_UNBOUNDED: Final = 64  # how long a mapped id gets where the destination sets no limit


class Rule(NamedTuple):
    """The ids one kind of position accepts: ``prefix`` then characters of ``allowed`` (a
    regex character class body), ``min_len`` to ``max_len`` characters in all."""

    allowed: str = "A-Za-z0-9_-"
    max_len: int | None = None
    prefix: str = ""
    min_len: int = 1

    def accepts(self, value: str) -> bool:
        """Whether the destination takes ``value`` at such a position."""
        return _pattern(self).fullmatch(value) is not None


@functools.cache
def _pattern(rule: Rule) -> re.Pattern[str]:
    low = max(rule.min_len - len(rule.prefix), 0)
    high = "" if rule.max_len is None else rule.max_len - len(rule.prefix)
    return re.compile(f"{re.escape(rule.prefix)}[{rule.allowed}]{{{low},{high}}}")


@functools.cache
def _allowed_chars(rule: Rule) -> frozenset[str]:
    one = re.compile(f"[{rule.allowed}]")
    return frozenset(chr(c) for c in range(128) if one.fullmatch(chr(c)))


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The id rules of one kind of destination."""

    name: str
    default: Rule
    # Overrides by kind of position (the table's kinds, ``positions.Entry``): "<api>.<kind>"
    # or "<api>.<kind>.<holder type>", e.g. "chat.call", "responses.item.function_call".
    kinds: Mapping[str, Rule] = field(default_factory=dict)
    unique: bool = True  # the calls of one request must have distinct ids

    def rule(self, api: Api, found: Found) -> Rule:
        """The rule for the id position ``found`` of a request of ``api``."""
        holder_type = found.holder.get(TYPE)
        if isinstance(holder_type, str):
            typed = self.kinds.get(f"{api.value}.{found.kind}.{holder_type}")
            if typed is not None:
                return typed
        return self.kinds.get(f"{api.value}.{found.kind}", self.default)


_SAFE = Rule()

#: Every rule set, by the name ``toolid_host_rules`` uses.
RULE_SETS: Final[dict[str, RuleSet]] = {
    rule_set.name: rule_set
    for rule_set in (
        # toolid's own rule: what Anthropic, Bedrock and OpenAI Responses all accept.
        RuleSet("safe", _SAFE),
        # Anthropic Messages API errors: "tool_use.id: String should match pattern
        # '^[a-zA-Z0-9_-]+$'" and "tool_use ids must be unique"; server tool ids must match
        # '^srvtoolu_[a-zA-Z0-9_]+$' (docs/positions.md). No documented length limit.
        RuleSet(
            "anthropic",
            _SAFE,
            {"messages.call.server_tool_use": Rule("A-Za-z0-9_", prefix="srvtoolu_")},
        ),
        # OpenAI (and Azure OpenAI) errors: Chat "Invalid 'messages[2].tool_calls[0].id':
        # string too long. Expected a string with maximum length 40"; Responses
        # "Invalid 'input[95].call_id': string too long. Expected a string with maximum
        # length 64", item ids "Expected an ID that begins with 'fc'" (function_call) /
        # "'ctc'" (custom_tool_call); charset "letters, numbers, underscores, or dashes".
        RuleSet(
            "openai",
            Rule(max_len=64),
            {
                "chat.call": Rule(max_len=40),  # tool_calls[].id and tool_call_id
                "responses.item.function_call": Rule(max_len=64, prefix="fc"),
                "responses.item.custom_tool_call": Rule(max_len=64, prefix="ctc"),
            },
        ),
        # Mistral's API and vLLM with the Mistral tokenizer (mistral-common): "Tool call id
        # was call_PTLP8xhu3uwZk4l3nlnrrJha but must be a-z, A-Z, 0-9, with a length of 9."
        RuleSet("mistral", Rule("A-Za-z0-9", max_len=9, min_len=9)),
        # AWS Bedrock (bedrock-runtime). Converse and ConverseStream: the API's own contract,
        # botocore 1.44.8's service model (data/bedrock-runtime/2023-09-30/service-2.json,
        # shape ToolUseId, for toolUse and toolResult ids): 1 to 64 of [a-zA-Z0-9_.:-]. It
        # takes Kimi's ``functions.get_weather:0`` as it is (Kimi K2 is served on Bedrock),
        # so such a model gets its own ids back. (AWS's API reference long said
        # [a-zA-Z0-9_-]+; the model widened it.) Everything else there (InvokeModel carries
        # the model's own body, for Claude an Anthropic Messages body, whose ids Anthropic
        # checks against ^[a-zA-Z0-9_-]+$, no length documented): [A-Za-z0-9_-], at most 64
        # as Bedrock's own ids, server tool ids as Anthropic's.
        RuleSet(
            "bedrock",
            Rule(max_len=64),
            {
                "converse.call": Rule("A-Za-z0-9_.:-", max_len=64),
                "messages.call.server_tool_use": Rule("A-Za-z0-9_", max_len=64, prefix="srvtoolu_"),
            },
        ),
        # Google's Gemini API, Vertex AI's Gemini models and Code Assist. Google documents no
        # charset or length for FunctionCall.id and FunctionResponse.id ("Optional. The unique
        # id of the function call. If populated, the client to execute the function_call and
        # return the response with the matching id", ai.google.dev/api/caching#FunctionCall;
        # python-genai types.py), and mints short alphanumeric ids itself ("46ww9pp1"). What
        # it is seen to accept: gemini-cli sends ids it makes of a tool's name, a time and a
        # counter ("github.list_issues-1755899286321-24a24f35db1c2", gemini-cli#6974; turn.ts
        # `${name}_${Date.now()}_${n}`), so the characters of a function name, which Google
        # spells out ("Must be a-z, A-Z, 0-9, or contain underscores (_), dots (.), colons
        # (:), or dashes (-)", its 400 for a bad FunctionDeclaration.name), longer than 64.
        # So: that charset, no length limit, calls distinct as the reference says ("unique").
        RuleSet("gemini", Rule("A-Za-z0-9_.:-")),
    )
}
NO_RULES: Final = "none"  # the name that turns a built-in rule set off for a host

#: Official API hosts and their rule sets (toolid_host_rules entries add to and override these).
#: ``HOST[:PORT][/PATH]=RULESET``: PATH, a glob on the request's path without its query (``*``:
#: any characters, ``/`` included), narrows an entry to the APIs of a host that serves several;
#: the first matching entry wins.
DEFAULT_HOST_RULES: Final[tuple[str, ...]] = (
    "api.anthropic.com=anthropic",
    "api.openai.com=openai",
    "*.openai.azure.com=openai",
    # Azure AI Foundry: OpenAI's models under /openai/ (Codex CLI on Foundry: "Invalid
    # 'input[4].call_id': string too long. Expected a string with maximum length 64",
    # openai/codex#14355; "Expected an ID that contains letters, numbers, underscores, or
    # dashes", openai/codex#9360), Claude under /anthropic/ (Claude in Microsoft Foundry
    # speaks the Messages API). Its /models/ inference API serves every vendor's models:
    # there the model rules decide.
    "*.services.ai.azure.com/openai/*=openai",
    "*.services.ai.azure.com/api/projects/*/openai/*=openai",
    "*.services.ai.azure.com/anthropic/*=anthropic",
    "*.cognitiveservices.azure.com/openai/*=openai",
    # ChatGPT's Codex backend (Codex CLI signed in with ChatGPT): the Responses API, same
    # validator as OpenAI's ("Invalid 'input[95].call_id': string too long. Expected a string
    # with maximum length 64", endpoint POST /backend-api/codex/responses, AnswerDotAI/fastllm#45;
    # item ids likewise at most 64, openai/codex#39133). Only that path: chatgpt.com is a website.
    "chatgpt.com/backend-api/codex/*=openai",
    # GitHub Copilot's API (api.githubcopilot.com, api.individual/business/enterprise...):
    # OpenAI's validator for every model it serves, Claude included. Chat: "Invalid
    # 'messages[68].tool_calls[0].id': string too long. Expected a string with maximum length
    # 40" (anomalyco/opencode#12653); Responses: "Invalid 'input[1].id': string too long.
    # Expected a string with maximum length 64" (github/app#499) and item id prefixes
    # ("Expected an ID that begins with 'rs'", copilot-language-server-release#46): the same
    # limits as OpenAI's, no stricter. Copilot itself mints custom_tool_call item ids longer
    # than 64 and then rejects them (caozhiyuan/copilot-api#307): this rule set maps those too.
    "api.githubcopilot.com=openai",
    "api.*.githubcopilot.com=openai",
    "api.mistral.ai=mistral",
    # Gemini: the Gemini API, Gemini on Vertex AI (.../publishers/google/models/MODEL:...),
    # and Code Assist (gemini-cli signed in with Google: code_assist/server.ts
    # CODE_ASSIST_ENDPOINT): the gemini rule set (what Google accepts, see RULE_SETS).
    "generativelanguage.googleapis.com=gemini",
    "cloudcode-pa.googleapis.com=gemini",
    "*aiplatform.googleapis.com/*/publishers/google/*=gemini",
    # Claude on Vertex AI (.../publishers/anthropic/models/MODEL:rawPredict or
    # :streamRawPredict): Anthropic's own validator, uniqueness included ("tool_use.id: String
    # should match pattern '^[a-zA-Z0-9_-]+$'" from a req_vrtx_ request,
    # router-for-me/CLIProxyAPI#578). Every other Vertex model: toolid's safe rule.
    "*aiplatform.googleapis.com/*/publishers/anthropic/*=anthropic",
    "*aiplatform.googleapis.com=safe",
    "bedrock-runtime.*.amazonaws.com=bedrock",
)

#: Built-in model rules: ``PATTERN=RULESET``, a glob on the request's model name (``*`` any
#: characters, ``?`` one; case-insensitive), matched against the whole name and against what
#: follows each ``/`` or ``,`` in it (``mistralai/devstral-medium``, LiteLLM's
#: ``mistral/codestral-latest``, claude-code-router's ``openrouter,anthropic/claude-sonnet-4``).
#: Only names that mean one strict provider wherever they are sent; the first match wins, and a
#: ``none`` match ends the search (no model rule). They come last: after the user's model rules,
#: the host rules and the built-in host rules (``toolid.destination``).
DEFAULT_MODEL_RULES: Final[tuple[str, ...]] = (
    # gpt-oss is open weights (Apache 2.0), served by vLLM, Ollama, Groq and others, each with
    # its own ids (OpenRouter names it openai/gpt-oss-120b): not OpenAI's API, so no rule.
    "gpt-oss*=none",
    # OpenAI's model families (its model list: GPT, the o-series reasoning models, Codex
    # models), and OpenRouter's openai/ names: served by OpenAI, Azure OpenAI and Copilot,
    # all with OpenAI's validator (Chat ids at most 40, Responses at most 64; see "openai").
    "gpt-*=openai",
    "chatgpt-*=openai",
    "o1*=openai",
    "o3*=openai",
    "o4*=openai",
    "codex-*=openai",
    "openai/*=openai",
    # Mistral's models, its API's and its open weights' alike: La Plateforme checks every id
    # ("Tool call id was call_... but must be a-z, A-Z, 0-9, with a length of 9."), and so do
    # mistral-common (vLLM with the Mistral tokenizer) and the models' own chat templates
    # ("Tool call IDs should be alphanumeric strings with length 9!"). OpenRouter: mistralai/.
    "mistral*=mistral",
    "mixtral*=mistral",
    "codestral*=mistral",
    "devstral*=mistral",
    "magistral*=mistral",
    "ministral*=mistral",
    "pixtral*=mistral",
    "mistralai/*=mistral",
    # Claude: Anthropic's API, Vertex AI and Bedrock all check "tool_use.id: String should
    # match pattern '^[a-zA-Z0-9_-]+$'" and "tool_use ids must be unique". A bare claude-* name
    # in a Messages API request says nothing, though: Claude Code sends its default claude-*
    # models to whatever ANTHROPIC_BASE_URL names (Kimi's, DeepSeek's and GLM's Anthropic
    # endpoints, claude-code-router), so there it takes no rule (MODEL_RULES_NOT_IN).
    "claude-*=anthropic",
    "anthropic/*=anthropic",
)
#: Built-in model rules that requests of these APIs (named by their path) do not take.
MODEL_RULES_NOT_IN: Final[dict[str, frozenset[Api]]] = untaken_model_rules()


class Sent(NamedTuple):
    """The id one position of a request gets, and why."""

    value: str  # what goes to the destination
    source: str  # "raw" (the restored raw id), "client" (as the client sent it), "mapped"


def assign(found: Iterable[Found], api: Api, rule_set: RuleSet) -> list[Sent]:
    """The id each position of one request sends, in the order of ``found``.

    ``found``: the request's id positions in document order. Calls (definitions) are
    distinct when the rule set says so: a call whose preferred id is already used by an
    earlier call takes the next conforming form. A result (reference) takes the id of the
    nearest call before it of its kind with the same client id; one with no such call is
    judged alone.
    """
    sent: list[Sent] = []
    used: set[str] = set()
    by_client: dict[tuple[str, str], Sent] = {}  # (kind, client id) -> the latest call's
    for position in found:
        rule = rule_set.rule(api, position)
        if position.role is DEFINES:
            choice = _choose(position.value, rule, used if rule_set.unique else set())
            used.add(choice.value)
            by_client[(position.kind, position.value)] = choice
        else:
            call = by_client.get((position.kind, position.value))
            choice = call if call is not None else _choose(position.value, rule, set())
        sent.append(choice)
    return sent


def _choose(client_id: str, rule: Rule, used: set[str]) -> Sent:
    raw, occurrence = codec.parse(client_id)
    # Never a tagged id's raw id (wire format v1): a host with rules gets the tagged one. Nor
    # a number or a boolean (a ``codec.JsonText``): every host with rules wants a string.
    if occurrence == 1 and type(raw) is str and rule.accepts(raw) and raw not in used:
        return Sent(raw, "raw")
    if rule.accepts(client_id) and client_id not in used:
        return Sent(client_id, "client")
    attempt = 0
    while (value := conforming(client_id, rule, attempt)) in used:
        attempt += 1
    return Sent(value, "mapped")


def conforming(client_id: str, rule: Rule, attempt: int = 0) -> str:
    """A deterministic id ``rule`` accepts, made from ``client_id`` (and ``attempt``, which
    gives another one when the first is taken): the rule's prefix, a readable stem of the raw
    id where there is room, and a base-62 hash of the client id."""
    room = (rule.max_len or _UNBOUNDED) - len(rule.prefix)
    seed = f"{client_id}\x00{attempt}" if attempt else client_id
    digest = _hash(seed, min(room, max(_DIGEST, rule.min_len - len(rule.prefix))))
    allowed = _allowed_chars(rule)
    stem_room = room - len(digest) - 1
    if stem_room < _STEM_MIN or "_" not in allowed:
        return rule.prefix + digest
    stem = "".join(c if c in allowed else "_" for c in codec.decode(client_id))
    stem = re.sub("_+", "_", stem).strip("_")[:stem_room].rstrip("_")
    return f"{rule.prefix}{stem}_{digest}" if stem else rule.prefix + digest


def _hash(text: str, length: int) -> str:
    number = int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    digits = []
    for _ in range(length):
        number, digit = divmod(number, 62)
        digits.append(_BASE62[digit])
    return "".join(digits)
