"""Differential test of the body rewriter across its backends: with the standard library
alone, with the native parser (toolid/prune.py), and with orjson and the native parser, it
gives the same bytes, plan and changes (or the same error), on the recorded bodies and on
the fuzzed corpora: documents of every API spelled every legal way, duplicate members,
random bytes, occurrence tags with histories, and every rule set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.test_fuzz_body import chaos_case
from tests.test_jsonparse import stdlib_only
from toolid import body, codec
from toolid.body import Direction, Policy, RewriteError
from toolid.occurrence import CallIds, Taken
from toolid.positions import Api, Doc
from toolid.rules import RULE_SETS

DATA = Path(__file__).parent / "data"
DIFF = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL_POLICIES = [
    Policy(Direction.ENCODE),
    Policy(Direction.ENCODE, profile="call"),
    Policy(Direction.DECODE),
    Policy(Direction.DECODE, profile="call"),
    *(Policy(Direction.DECODE, rules=rule_set) for rule_set in RULE_SETS.values()),
]


def outcome(
    document: bytes,
    api: Api | None,
    doc: Doc,
    policy: Policy,
    *,
    history: tuple[str, ...],
) -> tuple[Any, ...]:
    """What one rewriter makes of ``document``: its bytes and plan, or its error."""
    calls = (
        CallIds(policy.profile, Taken.of(history)) if policy.direction is Direction.ENCODE else None
    )
    try:
        out, plan = body.rewrite(document, api, doc, policy, calls)
    except RewriteError as exc:
        return ("error", str(exc))
    return ("ok", out, plan)


def same(
    document: bytes, api: Api | None, doc: Doc, policy: Policy, history: tuple[str, ...] = ()
) -> None:
    """The backends agree: pure Python (the reference), the native parser alone, and both
    orjson and the native parser."""
    with stdlib_only():
        slow = outcome(document, api, doc, policy, history=history)
    with stdlib_only(native=True):
        native = outcome(document, api, doc, policy, history=history)
    fast = outcome(document, api, doc, policy, history=history)
    for new in (native, fast):
        assert new[0] == slow[0], (slow, new)
        if slow[0] == "ok":
            assert new[1] == slow[1]
            assert new[2] == slow[2]


@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")), ids=lambda p: p.name)
@pytest.mark.parametrize("policy", ALL_POLICIES, ids=repr)
def test_recorded_bodies(path: Path, policy: Policy) -> None:
    document = path.read_bytes()
    doc = Doc.REQUEST if "request" in path.name else Doc.RESPONSE
    for api in (None, *Api):
        same(document, api, doc, policy)
        encoded = document.replace(
            b"functions.get_weather:0", codec.encode("functions.get_weather:0").encode()
        )
        same(encoded, api, doc, policy)


@DIFF
@given(
    case=chaos_case(),
    known=st.booleans(),
    history=st.lists(
        st.sampled_from(["a:1", "tid1_a-3A1", "tid1_a-3A1-_2", "call_0", "x"]), max_size=3
    ),
)
def test_fuzzed_documents(case: Any, known: bool, history: list[str]) -> None:
    document, api, doc, policy, _ = case
    same(document, api if known else None, doc, policy, tuple(history))


@DIFF
@given(case=chaos_case(), rules=st.sampled_from(sorted(RULE_SETS)))
def test_fuzzed_documents_to_hosts_with_rules(case: Any, rules: str) -> None:
    document, api, doc, _, _ = case
    same(document, api, doc, Policy(Direction.DECODE, rules=RULE_SETS[rules]))


@DIFF
@given(
    st.binary(max_size=300),
    st.sampled_from([None, *Api]),
    st.sampled_from(list(Doc)),
    st.sampled_from(ALL_POLICIES),
)
def test_random_bytes(document: bytes, api: Api | None, doc: Doc, policy: Policy) -> None:
    same(document, api, doc, policy)
    same(b'{"messages":[{"tool_calls":[{"id":' + document + b'"}]}]}', api, doc, policy)
