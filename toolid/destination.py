"""Which id rules a request's destination has: chosen by its model, its host and its path.

The first that applies wins:

1. the user's model rules (``toolid_model_rules``); a ``none`` there means "no model rule
   for this model": the host decides, the built-in model rules are skipped;
2. the user's host rules (``toolid_host_rules``), then ``toolid_strict_hosts`` (``safe``);
3. the built-in rules of the official provider hosts (``rules.DEFAULT_HOST_RULES``:
   api.mistral.ai is ``mistral`` whatever the model);
4. the built-in model rules (``rules.DEFAULT_MODEL_RULES``);
5. nothing: the destination takes any id (its own raw ids go back to it).

The model is read where the API puts it: the path for APIs that name it there (Vertex AI's
``/publishers/P/models/M:...``, Gemini's ``/models/M:...``, Azure's ``/deployments/D/``,
Bedrock's ``/model/M/...``), else the body's top-level ``model`` member, found with a byte
search and verified to be the top-level one by counting brackets on its shorter side, or by
parsing what follows it (``model_in_body``); the body is parsed whole only when neither tells.
A request whose host decides whatever its model is not read at all. Sans I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple
from urllib.parse import unquote

from toolid import jsonparse, scope
from toolid.apis import MODEL_ROUTES, api_from_path
from toolid.memo import memo
from toolid.positions import Api
from toolid.problem import show
from toolid.rules import (
    DEFAULT_HOST_RULES,
    DEFAULT_MODEL_RULES,
    MODEL_RULES_NOT_IN,
    NO_RULES,
    RULE_SETS,
    RuleSet,
)

NAMES: Final = (*RULE_SETS, NO_RULES)  # what an entry may name
_SHOWN_MODEL: Final = 100  # characters of a model name shown in a reason
_MATCHED_MODEL: Final = 256  # characters of a model name matched (a longer one: its start)
_REMEMBERED: Final = 256  # choices a Destinations remembers (then forgets, all at once)


class Destination(NamedTuple):
    """The rule set a request's destination has (None: it takes any id), and why, when its
    model chose it (``model mistralai/devstral-medium-2507``; empty when the host did: the
    flow names its host)."""

    rules: RuleSet | None
    why: str = ""


NO_DESTINATION_RULES: Final = Destination(None)


@dataclass(frozen=True, slots=True)
class HostRule:
    """``HOST[:PORT][/PATH]=NAME``: requests to HOST (and a path PATH matches) get NAME."""

    text: str
    host: scope.HostPattern
    path: re.Pattern[str] | None
    name: str

    def matches(self, host: str, port: int, route: str) -> bool:
        """Whether a request to ``host``:``port`` with path ``route`` (no query) is covered."""
        return self.host.matches(host, port) and (
            self.path is None or self.path.fullmatch(route) is not None
        )


@dataclass(frozen=True, slots=True)
class ModelRule:
    """``PATTERN=NAME``: requests for a model PATTERN matches get NAME (except requests of
    the APIs in ``not_in``)."""

    text: str
    pattern: re.Pattern[str]
    name: str
    not_in: frozenset[Api] = frozenset()

    def matches(self, forms: tuple[str, ...], api: Api | None) -> bool:
        """Whether a model, given as ``model_forms``, is covered in a request of ``api``."""
        if api is not None and api in self.not_in:
            return False
        fullmatch = self.pattern.fullmatch
        return any(fullmatch(form) is not None for form in forms)


def parse_host_rules(values: Iterable[str]) -> tuple[HostRule, ...]:
    """Parse ``HOST[:PORT][/PATH]=NAME`` entries (several per value, comma-separated); raise
    ValueError naming the first bad one."""
    out: list[HostRule] = []
    for text in _entries(values):
        target, name = _split(text, "HOST")
        host, slash, path = target.partition("/")
        pattern = scope.parse([host.strip()])
        if len(pattern) != 1:
            raise ValueError(f"invalid host pattern {host.strip()!r}")
        route = _glob("/" + path, ignore_case=False) if slash else None
        out.append(HostRule(text, pattern[0], route, name))
    return tuple(out)


def parse_model_rules(
    values: Iterable[str], not_in: Mapping[str, frozenset[Api]] | None = None
) -> tuple[ModelRule, ...]:
    """Parse ``PATTERN=NAME`` entries (several per value, comma-separated); raise ValueError
    naming the first bad one. ``not_in``: by pattern, the APIs whose requests an entry
    does not cover (the built-in ``rules.MODEL_RULES_NOT_IN``)."""
    out: list[ModelRule] = []
    for text in _entries(values):
        pattern, name = _split(text, "PATTERN")
        if not pattern or _NOT_IN_PATTERN.search(pattern):
            raise ValueError(
                f"invalid model pattern {pattern!r} in {text!r}: expected a model name with "
                "* and ? wildcards, such as mistralai/* or my-coder-*"
            )
        apis = (not_in or {}).get(pattern, frozenset())
        out.append(ModelRule(text, _glob(pattern, ignore_case=True), name, apis))
    return tuple(out)


_NOT_IN_PATTERN: Final = re.compile(r"[\s\x00-\x1f\x7f]")


def _entries(values: Iterable[str]) -> Iterable[str]:
    for value in values:
        for part in value.split(","):
            if text := part.strip():
                yield text


def _split(text: str, what: str) -> tuple[str, str]:
    target, equals, name = text.rpartition("=")
    if not equals or name.strip() not in NAMES:
        raise ValueError(
            f"invalid entry {text!r}: expected {what}=NAME with NAME one of "
            f"{', '.join(sorted(NAMES))}"
        )
    return target.strip(), name.strip()


def _glob(pattern: str, *, ignore_case: bool) -> re.Pattern[str]:
    regex = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern
    )
    return re.compile(regex, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


BUILT_IN_HOST_RULES: Final = parse_host_rules(DEFAULT_HOST_RULES)
BUILT_IN_MODEL_RULES: Final = parse_model_rules(DEFAULT_MODEL_RULES, MODEL_RULES_NOT_IN)


# --- the choice --------------------------------------------------------------------------------


def choose(
    host: str,
    port: int,
    path: str,
    model: str | None,
    *,
    model_rules: Iterable[ModelRule] = (),
    host_rules: Iterable[HostRule] = (),
    strict_hosts: Iterable[scope.HostPattern] = (),
) -> Destination:
    """The rule set of a request to ``host``:``port`` at ``path`` (query allowed) for
    ``model`` (None: it names none), in the order of precedence of the module docstring."""
    route = path.split("?", 1)[0]
    api = api_from_path(route)
    forms = model_forms(model) if model else ()
    user = _first_model(model_rules, forms, api)
    if user is not None and user != NO_RULES:
        return _by_model(user, model)
    by_host = host_level(host, port, route, host_rules=host_rules, strict_hosts=strict_hosts)
    if by_host is not None:
        return by_host
    if user is None:
        built_in = _first_model(BUILT_IN_MODEL_RULES, forms, api)
        if built_in is not None and built_in != NO_RULES:
            return _by_model(built_in, model)
    return NO_DESTINATION_RULES


def host_level(
    host: str,
    port: int,
    route: str,
    *,
    host_rules: Iterable[HostRule] = (),
    strict_hosts: Iterable[scope.HostPattern] = (),
) -> Destination | None:
    """The rule set the host (and path, no query) gives: the user's host rules, the strict
    hosts, the official hosts' built-ins; None when none of them covers it."""
    for rule in host_rules:
        if rule.matches(host, port, route):
            return Destination(RULE_SETS.get(rule.name))
    if scope.covers(strict_hosts, host, port):
        return Destination(RULE_SETS["safe"])
    for rule in BUILT_IN_HOST_RULES:
        if rule.matches(host, port, route):
            return Destination(RULE_SETS.get(rule.name))
    return None


def _first_model(rules: Iterable[ModelRule], forms: tuple[str, ...], api: Api | None) -> str | None:
    if not forms:
        return None
    return next((rule.name for rule in rules if rule.matches(forms, api)), None)


def _by_model(name: str, model: str | None) -> Destination:
    shown = model or ""
    if len(shown) > _SHOWN_MODEL:
        shown = shown[:_SHOWN_MODEL] + "..."
    return Destination(RULE_SETS[name], f"model {show(shown)}")


def model_forms(model: str) -> tuple[str, ...]:
    """The names a model rule's pattern is matched against: the model name (its first 256
    characters), and what follows each ``/`` or ``,`` in it (``openrouter,mistralai/devstral``:
    also ``mistralai/devstral`` and ``devstral``)."""
    return _forms(model[:_MATCHED_MODEL])


@memo(64 * 1024)
def _forms(model: str) -> tuple[str, ...]:
    return (model, *(model[at.end() :] for at in _VENDOR_SEPARATOR.finditer(model)))


_VENDOR_SEPARATOR: Final = re.compile(r"[/,]")


class Destinations:
    """The user's rules, parsed once, and ``choose`` with them, remembering its recent
    answers (an agent talks to a handful of hosts and models, again and again)."""

    def __init__(
        self,
        model_rules: Iterable[ModelRule] = (),
        host_rules: Iterable[HostRule] = (),
        strict_hosts: Iterable[scope.HostPattern] = (),
    ) -> None:
        self.model_rules = tuple(model_rules)
        self.host_rules = tuple(host_rules)
        self.strict_hosts = tuple(strict_hosts)
        self._chosen: dict[tuple[str, int, str, str | None], Destination] = {}
        self._by_host: dict[tuple[str, int, str], Destination | None] = {}

    def choose(self, host: str, port: int, path: str, model: str | None = None) -> Destination:
        """``choose`` with these rules."""
        key = (host, port, path.split("?", 1)[0], model)
        chosen = self._chosen.get(key)
        if chosen is None:
            if len(self._chosen) >= _REMEMBERED:
                self._chosen.clear()
            chosen = self._chosen[key] = choose(
                host,
                port,
                key[2],
                model,
                model_rules=self.model_rules,
                host_rules=self.host_rules,
                strict_hosts=self.strict_hosts,
            )
        return chosen

    def for_request(self, host: str, port: int, path: str, content: bytes | None) -> Destination:
        """``choose`` for a request, with the model it names (``model_of``). Where the host
        decides whatever the model (a host rule covers it, and there are no user model
        rules: api.anthropic.com, say), the body is not read at all."""
        route = path.split("?", 1)[0]
        if not self.model_rules:
            key = (host, port, route)
            if key in self._by_host:
                by_host = self._by_host[key]
            else:
                if len(self._by_host) >= _REMEMBERED:
                    self._by_host.clear()
                by_host = self._by_host[key] = host_level(
                    host, port, route, host_rules=self.host_rules, strict_hosts=self.strict_hosts
                )
            if by_host is not None:
                return by_host
        model = model_of(content, route)
        return self.choose(host, port, route, model[:_MATCHED_MODEL] if model else model)


# --- reading the model -------------------------------------------------------------------------


def model_of(content: bytes | None, path: str = "") -> str | None:
    """The model a request names: in its path if its API puts it there, else its body's
    top-level ``model`` member (a string), else None."""
    return model_in_path(path) or (model_in_body(content) if content else None)


@memo(64 * 1024)
def model_in_path(path: str) -> str | None:
    """The model a request path names (query string allowed), or None: each API record's
    ``model_routes`` (Vertex AI's publisher models, reported as "publisher/model":
    anthropic/claude-sonnet-4@20250514; Azure OpenAI's deployments; Bedrock Runtime's
    /model/{modelId}/ operations; Gemini's /models/{model}:method)."""
    route = path.split("?", 1)[0]
    for pattern in MODEL_ROUTES:
        if (match := pattern.search(route)) is not None:
            model = unquote(match["model"])
            vendor = match.groupdict().get("vendor")
            return f"{unquote(vendor)}/{model}" if vendor else model
    return None


# A member named model with a string value. In valid JSON this matches keys only, never text
# inside a string: a quote inside a string is escaped, so "model" followed by a quote cannot
# be spelled there. Its depth decides whether it is the top-level one.
_MODEL_KEY: Final = b'"model"'
# Its string's literal is group 1 (no match: the string is not terminated, not JSON).
_MODEL_MEMBER: Final = re.compile(rb'"model"\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"', re.DOTALL)
# The same member first in the body's object, where most agents and SDKs put it.
_FIRST_MEMBER: Final = re.compile(rb"\s*\{\s*" + _MODEL_MEMBER.pattern, re.DOTALL)
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_HEAD: Final = 512  # bytes searched first: most agents and SDKs put the model first
_COUNTED: Final = 4096  # the largest side of a member whose brackets are counted, not parsed


class Member(NamedTuple):
    """A ``"model": "..."`` member of a body: its value, and where it starts and ends."""

    value: str | None  # None: the string does not decode
    start: int
    end: int


def model_in_body(content: bytes) -> str | None:
    """The string value of a JSON object's top-level ``model`` member, or None: exactly (for
    valid JSON), at the cost of a byte search or two (``model_member``), and a count of the
    brackets on the member's shorter side or a parse of what follows it (``is_top_level``);
    the whole body is parsed only when neither tells (both sides long, the shorter before it,
    or a nested member found)."""
    if (first := _FIRST_MEMBER.match(content)) is not None:
        return _string_value(first[1])  # the top-level object's first member: no doubt
    found = _model_member(content)
    if found is None:
        return None
    member, top_level = found
    if top_level:
        return member.value
    return _parsed_model(content)  # not the top-level one (another may be), or cannot tell


def _parsed_model(content: bytes) -> str | None:
    try:
        document = jsonparse.loads_checked(content)[0]
    except ValueError:
        return None
    model = document.get("model") if isinstance(document, dict) else None
    return model if isinstance(model, str) else None


def model_member(content: bytes) -> Member | None:
    """The ``"model": "..."`` member most likely the top-level one, found without parsing:
    the first in the body's first bytes, else the last in the body (an SDK that puts the
    model after the messages puts only its other parameters after it). Not yet verified to be
    top-level (``is_top_level``)."""
    found = _model_member(content)
    return None if found is None else found[0]


def _model_member(content: bytes) -> tuple[Member, bool | None] | None:
    """``model_member``, and ``is_top_level`` of it."""
    at = content.find(_MODEL_KEY, 0, _HEAD)
    while at >= 0:
        if (member := _member_at(content, at)) is not None:
            if is_top_level(content, member):
                return member, True
            break
        at = content.find(_MODEL_KEY, at + 1, _HEAD)
    at = content.rfind(_MODEL_KEY)
    while at >= 0:
        if (member := _member_at(content, at)) is not None:
            return member, is_top_level(content, member)
        at = content.rfind(_MODEL_KEY, 0, at)
    return None


def _member_at(content: bytes, at: int) -> Member | None:
    match = _MODEL_MEMBER.match(content, at)
    return None if match is None else Member(_string_value(match[1]), at, match.end())


def is_top_level(content: bytes, member: Member) -> bool | None:
    """Whether ``member`` is a member of the top-level object (assuming the body is valid
    JSON); None when finding out would take a parse of the body. Its depth is counted on the
    shorter side of it: the brackets outside strings before it, or after it, where that side
    is short; else the rest of the body after it, opened with ``{``, must parse."""
    before, after = member.start, len(content) - member.end
    if min(before, after) <= _COUNTED:
        if before <= after:
            head = content[:before]
            if b'"' in head:
                head = _STRING.sub(b"", head)
            return head.lstrip().startswith(b"{") and _balance(head) == 1
        return _balance(_STRING.sub(b"", content[member.end :])) == -1
    if after < before:  # a top-level member: what follows it is "[, members]}"
        rest = content[member.end :].lstrip()
        rest = rest[1:] if rest.startswith(b",") else rest
        return _parses(b"{" + rest)
    return None


def _parses(document: bytes) -> bool:
    try:
        jsonparse.loads_checked(document)
    except ValueError:
        return False
    return True


def _balance(text: bytes) -> int:
    return text.count(b"{") + text.count(b"[") - text.count(b"}") - text.count(b"]")


def _string_value(literal: bytes) -> str | None:
    if b"\\" not in literal:
        try:
            return literal.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        value = json.loads(b'"' + literal + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None
