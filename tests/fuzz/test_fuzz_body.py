"""Fuzzing the JSON body rewriter (toolid.body) beyond tests/test_body.py's properties.

tests/test_body.py already checks random documents of every API and kind serialised by
``json.dumps`` (with random options), a few mutated bodies and junk bytes. This adds what
it does not reach, each checked by the independent oracle of ``oracle.py`` (never raises
but RewriteError; no edit, or edits only inside id literals at id positions; nothing
missed; parsed output right):

- documents spelled every legal way (``strategies.Chaos``): escapes in member names and
  ids, escaped surrogate pairs and lone surrogates, whitespace anywhere, duplicate members;
- every prefix of a valid body (a truncated upload or response);
- invalid UTF-8 and raw surrogate bytes injected anywhere;
- nesting around and beyond the recursion limit, anywhere in the document;
- non-string values at id positions;
- strings and ids of a few MB, and thousands of ids (their time is bounded by the per-test
  timeout; scripts/bench measures speed);
- encode then decode, on all of the above, gives back the document.

CI runs a small budget; ``--long`` runs thousands of examples (tests/fuzz/budget.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from tests.test_body import API_DOCS, Builder, set_path
from toolid import codec
from toolid.body import Direction, Policy, RewriteError, rewrite
from toolid.positions import Api, Doc
from toolid.rules import RULE_SETS

from .budget import fuzz
from .oracle import ASCII_ESCAPE, EDITED, FAILED, SECRET, check_rewrite, deep_equal, parse
from .strategies import INVALID_UTF8, SURROGATE_BYTES, Chaos, chaos

# Every test here runs with each backend: native, orjson alone, the standard library.
pytestmark = pytest.mark.usefixtures("backend")

POLICIES = st.sampled_from(
    [
        Policy(Direction.ENCODE),
        Policy(Direction.ENCODE, profile="call"),
        Policy(Direction.DECODE),
        Policy(Direction.DECODE, rules=RULE_SETS["safe"]),
        Policy(Direction.DECODE, rules=RULE_SETS["mistral"]),
        Policy(Direction.DECODE, rules=RULE_SETS["openai"]),
        Policy(Direction.DECODE, rules=RULE_SETS["gemini"]),
        Policy(Direction.DECODE, profile="call"),
    ]
)


# A high surrogate right before a low one, as two separate code points: no JSON text holds
# that (the escapes "\ud800\udc00" are one astral character), so restoring the client id of
# such a raw id fails open (test_restoring_a_raw_id_json_cannot_hold). Most generators keep
# to ids JSON can hold, so that a failure to restore them stays visible.
SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def build(draw: st.DrawFn, api: Api, doc: Doc, policy: Policy) -> Builder:
    """A Builder whose positions hold what this direction rewrites: raw ids to encode,
    or client ids (of the policy's profile) to restore."""
    if policy.direction is Direction.ENCODE:
        return Builder(draw, lambda raw: raw)
    builder = Builder(draw, lambda raw: codec.encode(raw, policy.profile))
    return expressible(builder)


def expressible(builder: Builder) -> Builder:
    """Keep the decode direction to raw ids that JSON can hold (see SURROGATE_PAIR)."""
    builder.raws = [SURROGATE_PAIR.sub(lambda m: m[0][0] + "x" + m[0][1], r) for r in builder.raws]
    builder.looks = [builder.show(r) for r in builder.raws]
    return builder


def document(builder: Builder, api: Api, doc: Doc) -> dict[str, Any]:
    body = builder.document(api, doc)
    body["api_key"] = SECRET  # never quoted by an error message
    return body


@st.composite
def chaos_case(
    draw: st.DrawFn, dup_rate: st.SearchStrategy[float] | None = None
) -> tuple[bytes, Api, Doc, Policy, Chaos]:
    api, doc = draw(API_DOCS)
    policy = draw(POLICIES)
    builder = build(draw, api, doc, policy)
    writer = draw(chaos(dup_rate=dup_rate, raw_surrogates=draw(st.booleans())))
    return writer.encode(document(builder, api, doc)), api, doc, policy, writer


# --- documents spelled every legal way ----------------------------------------------------------


@fuzz(ci=150, long=5000)
@given(case=chaos_case(), known=st.booleans())
def test_chaos_spellings(case: tuple[bytes, Api, Doc, Policy, Chaos], known: bool) -> None:
    body, api, doc, policy, writer = case
    outcome = check_rewrite(body, api if known else None, doc, policy)
    event(outcome)
    if outcome == FAILED:
        # Failing open is for what bytes alone cannot pin down: member names spelled with
        # escapes, duplicate members, raw surrogate bytes (not UTF-8).
        assert writer.escaped_key_chars or writer.duplicates or writer.wrote_raw_surrogates, (
            f"failed open on a plain document: {body!r}"
        )


@fuzz(ci=100, long=3000)
@given(case=chaos_case(dup_rate=st.sampled_from([0.3, 0.7, 1.0])), known=st.booleans())
def test_duplicate_members(case: tuple[bytes, Api, Doc, Policy, Chaos], known: bool) -> None:
    """Duplicate members anywhere (JSON parsers keep the last): never a wrong edit."""
    body, api, doc, policy, _ = case
    event(check_rewrite(body, api if known else None, doc, policy))


@fuzz(ci=60, long=2000)
@given(case=chaos_case())
def test_encode_then_decode_gives_back_the_document(
    case: tuple[bytes, Api, Doc, Policy, Chaos],
) -> None:
    body, api, doc, policy, _ = case
    assume(policy.direction is Direction.ENCODE)
    if ASCII_ESCAPE.search(body):
        # The byte-level prefilter reads markers (type values, member names) as spelled:
        # a document that spells them with \u escapes of ASCII letters passes unchanged,
        # and if it also holds an upstream id that happens to be a canonical client id,
        # restoring that id changes it. No server spells ASCII that way (see the report).
        event("skipped: ASCII spelled as \\u escapes")
        return
    try:
        encoded, _ = rewrite(body, api, doc, policy)
        decoded, _ = rewrite(encoded, api, doc, Policy(Direction.DECODE, profile=policy.profile))
    except RewriteError:
        event("failed open")
        return
    assert deep_equal(parse(decoded), parse(body))


# --- truncated, corrupted --------------------------------------------------------------------


@fuzz(ci=25, long=800)
@given(data=st.data(), api_doc=API_DOCS, policy=POLICIES, known=st.booleans())
def test_every_prefix_of_a_body(
    data: st.DataObject, api_doc: tuple[Api, Doc], policy: Policy, known: bool
) -> None:
    """A body cut anywhere (a truncated upload or response) is left alone, or failed open."""
    api, doc = api_doc
    writer = data.draw(chaos())
    body = writer.encode(document(build(data.draw, api, doc, policy), api, doc))
    assume(len(body) < 4000)
    full = check_rewrite(body, api if known else None, doc, policy)
    for end in range(len(body)):
        prefix = body[:end]
        outcome = check_rewrite(prefix, api if known else None, doc, policy)
        if outcome == EDITED:
            # only a prefix that is itself a whole document can be edited
            assert prefix.rstrip(b" \t\r\n") == body.rstrip(b" \t\r\n"), prefix
    event(f"whole body {full}")


@fuzz(ci=120, long=4000)
@given(
    data=st.data(),
    api_doc=API_DOCS,
    policy=POLICIES,
    known=st.booleans(),
    junk=st.lists(st.sampled_from(INVALID_UTF8 + SURROGATE_BYTES), min_size=1, max_size=3),
)
def test_invalid_utf8_anywhere(
    data: st.DataObject, api_doc: tuple[Api, Doc], policy: Policy, known: bool, junk: list[bytes]
) -> None:
    api, doc = api_doc
    body = data.draw(chaos()).encode(document(build(data.draw, api, doc, policy), api, doc))
    for piece in junk:
        at = data.draw(st.integers(min_value=0, max_value=len(body)))
        body = body[:at] + piece + body[at:]
    outcome = check_rewrite(body, api if known else None, doc, policy)
    event(outcome)
    if any(piece in INVALID_UTF8 for piece in junk):
        assert outcome != EDITED  # not even Python's json module reads that


@fuzz(ci=60, long=2000)
@given(data=st.data(), api_doc=API_DOCS, policy=POLICIES)
def test_lone_surrogates_in_escapes(
    data: st.DataObject, api_doc: tuple[Api, Doc], policy: Policy
) -> None:
    """Ids made of lone and paired surrogates, spelled as \\u escapes (lower, upper case,
    pairs split across ids): rewritten exactly, or failed open."""
    api, doc = api_doc
    surrogates = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"])
    pieces = st.one_of(surrogates, st.sampled_from(["a", ":", "😀", "é", "tid1_"]))
    raw = "".join(data.draw(st.lists(pieces, min_size=1, max_size=6)))
    builder = build(data.draw, api, doc, policy)
    builder.raws = [raw, *builder.raws]  # split pairs included: restoring those fails open
    builder.looks = [builder.show(r) for r in builder.raws]
    writer = data.draw(chaos())
    body = writer.encode(document(builder, api, doc))
    event(check_rewrite(body, api, doc, policy))


# --- nesting ------------------------------------------------------------------------------------

DEPTHS = [10, 500, 900, 990, 1000, 1010, 1500, 3000, 100_000]
DEEP = "\x00deep\x00"


def deep_bytes(depth: int, leaf: bytes, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + leaf + b"]" * depth
    return b'{"id":' * depth + leaf + b"}" * depth


@fuzz(ci=40, long=1500)
@given(
    data=st.data(),
    api_doc=API_DOCS,
    policy=POLICIES,
    depth=st.sampled_from(DEPTHS),
    kind=st.sampled_from(["list", "object"]),
)
def test_deep_nesting_anywhere(
    data: st.DataObject, api_doc: tuple[Api, Doc], policy: Policy, depth: int, kind: str
) -> None:
    """A deep structure (whose innermost value may be an id look-alike) placed in a random
    container: never a RecursionError or a wrong edit, whatever the depth."""
    api, doc = api_doc
    builder = build(data.draw, api, doc, policy)
    body_doc = document(builder, api, doc)
    containers: list[Any] = []
    stack: list[Any] = [body_doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict | list):
            containers.append(node)
            stack.extend(node.values() if isinstance(node, dict) else node)
    target = data.draw(st.sampled_from(containers))
    if isinstance(target, dict):
        target["deep"] = DEEP
    else:
        target.insert(data.draw(st.integers(min_value=0, max_value=len(target))), DEEP)
    look = data.draw(st.sampled_from(builder.looks))
    leaf = json.dumps({"type": "tool_use", "id": look, "tool_use_id": look}).encode()
    body = (
        json.dumps(body_doc)
        .encode()
        .replace(json.dumps(DEEP).encode(), deep_bytes(depth, leaf, kind))
    )
    event(check_rewrite(body, api, doc, policy))


# --- non-string ids -----------------------------------------------------------------------------

NON_STRINGS = st.sampled_from(
    [None, 0, -1, 1.5, True, False, [], {}, ["a:1"], {"id": "a:1"}, {"call_id": "tid1_a-3A1"}]
)


@fuzz(ci=100, long=3000)
@given(data=st.data(), api_doc=API_DOCS, policy=POLICIES, known=st.booleans())
def test_non_string_values_at_id_positions(
    data: st.DataObject, api_doc: tuple[Api, Doc], policy: Policy, known: bool
) -> None:
    api, doc = api_doc
    builder = build(data.draw, api, doc, policy)
    body_doc = document(builder, api, doc)
    assume(builder.ids)
    for path, _ in builder.ids:
        if data.draw(st.booleans()):
            set_path(body_doc, path, data.draw(NON_STRINGS))
    body = json.dumps(body_doc).encode()  # ASCII, escapes only where needed
    outcome = check_rewrite(body, api if known else None, doc, policy)
    event(outcome)
    assert outcome != FAILED, f"a non-string id made the rewriter fail open: {body!r}"


# --- size ---------------------------------------------------------------------------------------

MIB = 1024 * 1024


def big_text(size: int, style: str) -> str:
    unit = {
        "ascii": "The weather in Paris is sunny. ",
        "escapes": 'say "hi"\\ \t/ é 😀 \ud800 ',
        "idlike": '"id": "functions.get_weather:0", "call_id": "tid1_a-3A1" ',
    }[style]
    return (unit * (size // len(unit) + 1))[:size]


@pytest.mark.parametrize("style", ["ascii", "escapes", "idlike"])
@pytest.mark.parametrize("direction", list(Direction))
def test_strings_of_a_few_mib(style: str, direction: Direction) -> None:
    """A 4 MiB message text (plain, full of escapes, or full of id look-alikes) beside
    the tool calls: rewritten exactly (a quadratic locating would meet the per-test timeout)."""
    raw = "functions.get_weather:0"
    shown = raw if direction is Direction.ENCODE else codec.encode(raw)
    if direction is Direction.ENCODE:
        body_doc: Any = {
            "choices": [
                {
                    "message": {
                        "content": big_text(4 * MIB, style),
                        "tool_calls": [{"id": shown, "type": "function"}] * 3,
                    }
                }
            ]
        }
        api, doc = Api.CHAT, Doc.RESPONSE
    else:
        body_doc = {
            "messages": [
                {"role": "user", "content": big_text(4 * MIB, style)},
                {"role": "assistant", "tool_calls": [{"id": shown, "type": "function"}]},
                {"role": "tool", "tool_call_id": shown, "content": big_text(MIB, style)},
            ]
        }
        api, doc = Api.CHAT, Doc.REQUEST
    for ensure_ascii in (False, True):
        text = json.dumps(body_doc, ensure_ascii=ensure_ascii)
        body = text.encode("utf-8", "surrogatepass") if not ensure_ascii else text.encode()
        outcome = check_rewrite(body, api, doc, Policy(direction))
        if b"\xed" in body:  # raw surrogate bytes in the text: may fail open
            assert outcome in (EDITED, FAILED)
        else:
            assert outcome == EDITED


@pytest.mark.parametrize("size", [MIB, 3 * MIB])
def test_an_id_of_a_few_mib(size: int) -> None:
    raw = big_text(size, "ascii").replace(" ", ":")
    body = json.dumps({"content": [{"type": "tool_use", "id": raw, "input": {}}]}).encode()
    outcome = check_rewrite(body, Api.MESSAGES, Doc.RESPONSE, Policy(Direction.ENCODE))
    assert outcome == EDITED
    client = codec.encode(raw)
    assert len(client) == 5 + size + 2 * len(re.findall(r"[^A-Za-z0-9_]", raw))  # "-XX"
    request = json.dumps(
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": client}]}]}
    ).encode()
    outcome = check_rewrite(request, Api.MESSAGES, Doc.REQUEST, Policy(Direction.DECODE))
    assert outcome == EDITED
    restored = rewrite(request, Api.MESSAGES, Doc.REQUEST, Policy(Direction.DECODE))[0]
    assert parse(restored)["messages"][0]["content"][0]["id"] == raw


def test_thousands_of_ids() -> None:
    calls = [{"id": f"functions.f{i}:{i}", "type": "function"} for i in range(20_000)]
    body = json.dumps({"choices": [{"message": {"tool_calls": calls}}]}).encode()
    outcome = check_rewrite(body, Api.CHAT, Doc.RESPONSE, Policy(Direction.ENCODE))
    assert outcome == EDITED


@fuzz(ci=10, long=300)
@given(
    data=st.data(),
    size=st.integers(min_value=MIB // 4, max_value=3 * MIB),
    api_doc=API_DOCS,
    policy=POLICIES,
)
def test_random_documents_with_a_big_string(
    data: st.DataObject, size: int, api_doc: tuple[Api, Doc], policy: Policy
) -> None:
    api, doc = api_doc
    body_doc = document(build(data.draw, api, doc, policy), api, doc)
    body_doc["big"] = big_text(size, data.draw(st.sampled_from(["ascii", "idlike"])))
    body = data.draw(chaos()).encode(body_doc) if size < MIB else json.dumps(body_doc).encode()
    event(check_rewrite(body, api, doc, policy))


def test_restoring_a_raw_id_json_cannot_hold() -> None:
    """Found by this fuzzing (fixed in c6baa17): the client id tid1_-ED-A0-80-ED-B0-80 is
    canonical (its raw id is a high and a low surrogate as two code points), but the JSON
    literal "\\ud800\\udc00" reads as ONE character, U+10000, so restoring it would send
    the upstream another id. An upstream reaches it by writing invalid UTF-8 (an escaped
    high surrogate, then a CESU-8 low surrogate). Restoring must fail open (or be exact)."""
    client = "tid1_-ED-A0-80-ED-B0-80"
    assert codec.decode(client) == "\ud800\udc00"  # two code points, not U+10000
    assert codec.encode("\U00010000") == "tid1_-F0-90-80-80"
    body = json.dumps({"messages": [{"role": "tool", "tool_call_id": client}]}).encode()
    try:
        out, _ = rewrite(body, Api.CHAT, Doc.REQUEST, Policy(Direction.DECODE))
    except RewriteError:
        return
    restored = parse(out)["messages"][0]["tool_call_id"]
    assert restored in (client, codec.decode(client)), restored
    # the upstream side of the round trip that reaches it:
    upstream = b'{"content":[{"type":"tool_use","id":"\\ud800\xed\xb0\x80"}]}'
    encoded, _ = rewrite(upstream, Api.MESSAGES, Doc.RESPONSE, Policy(Direction.ENCODE))
    assert parse(encoded)["content"][0]["id"] == client


# --- the messages -------------------------------------------------------------------------------


def test_error_messages_never_quote_the_body() -> None:
    """Each kind of RewriteError, provoked with a secret right where the error is."""
    cases = [
        b'{"content":[{"type":"tool_use","id":"a:1"}],"k":"' + SECRET.encode() + b'"',  # cut
        b'{"content":[{"type":"tool_use","id":"a:1"}],"k":' + SECRET.encode() + b"}",  # bad
        b'{"content":[{"type":"tool_use","id":"a:\xed\xa0\x80' + SECRET.encode() + b'"}]}',
        b'{"content":[{"type":"tool_use","id":"a:1","id":"a:1","k":"' + SECRET.encode() + b'"}]}',
        b'{"content":[{"type":"tool_use","\\u0069d":"a:1"},{"id":"a:1","s":"'
        + SECRET.encode()
        + b'"}]}',
    ]
    raised = 0
    for body in cases:
        try:
            rewrite(body, Api.MESSAGES, Doc.RESPONSE, Policy(Direction.ENCODE))
        except RewriteError as exc:
            raised += 1
            assert re.search(r"sk-|S3CR3T", str(exc)) is None, str(exc)
        check_rewrite(body, Api.MESSAGES, Doc.RESPONSE, Policy(Direction.ENCODE))
    assert raised >= 3
