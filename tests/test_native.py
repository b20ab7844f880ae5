"""The native accelerator (toolid/_native.c, toolid/native.py, toolid/prune.py).

It must never change what toolid does, only how fast: whatever the pruned parse keeps, the
walkers read as they read a full parse; every span it reports is the literal of the id it
names; anything it does not vouch for gives None, never a wrong answer and never an
exception; ``splice`` is ``body.apply``. The body and stream differential tests and the
position tests run toolid with and without it as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import streams
from tests.fuzz.strategies import INVALID_UTF8
from tests.fuzz.test_fuzz_body import chaos_case
from tests.test_jsonparse import stdlib_only
from toolid import body, codec, jsonparse, native, prune, report
from toolid.body import Direction, Edit, Policy
from toolid.codec import Profile
from toolid.occurrence import CallIds, Taken
from toolid.positions import DEFINES, Api, Doc, find_ids
from toolid.stream import StreamRewriter


def _full(document: bytes) -> Any:
    try:
        return jsonparse.loads(document)
    except (ValueError, RecursionError):
        return None


def _ids(document: Any, api: Api, doc: Doc) -> list[tuple[str, str, str, str, tuple[int, ...]]]:
    return [(f.key, f.value, f.path, f.role.value, f.call) for f in find_ids(document, api, doc)]


def assert_vouched(document: bytes, api: Api, doc: Doc) -> None:
    """If the native parser reads ``document``, it is JSON, the ids read off the pruned
    document are those of a full parse, and each span is the literal of its id."""
    pruned = prune.parse(document, prune.SCHEMAS[(api, doc)])
    if pruned is None:
        return
    parsed, spans = pruned
    full = _full(document)
    assert full is not None, "vouched for a document that does not parse"
    assert _ids(parsed, api, doc) == _ids(full, api, doc)
    with stdlib_only():  # the generated Python walker reads the pruned document alike
        assert _ids(parsed, api, doc) == _ids(full, api, doc)
    for found in find_ids(parsed, api, doc):
        start, end = spans[(id(found.holder), found.key)]
        assert json.loads(document[start:end]) == found.value
    if doc is Doc.REQUEST and isinstance(full, dict):
        assert (parsed.get("stream") is True) == (full.get("stream") is True)


@settings(max_examples=300, deadline=None)
@given(case=chaos_case())
def test_documents_spelled_every_way(case: Any) -> None:
    document, api, doc, _, _ = case
    assert_vouched(document, api, doc)


@settings(max_examples=200, deadline=None)
@given(case=chaos_case(), data=st.data())
def test_every_prefix_and_any_byte_changed(case: Any, data: st.DataObject) -> None:
    document, api, doc, _, _ = case
    cut = data.draw(st.integers(0, len(document)))
    assert_vouched(document[:cut], api, doc)
    at = data.draw(st.integers(0, max(0, len(document) - 1)))
    byte = data.draw(st.sampled_from([*INVALID_UTF8, b"\\", b'"', b"\x00", b"\xed\xa0\x80", b"}"]))
    assert_vouched(document[:at] + byte + document[at + 1 :], api, doc)


@settings(max_examples=300, deadline=None)
@given(
    document=st.binary(max_size=200),
    api=st.sampled_from(list(Api)),
    doc=st.sampled_from(list(Doc)),
)
def test_any_bytes(document: bytes, api: Api, doc: Doc) -> None:
    assert_vouched(document, api, doc)


def assert_restores_as_python(document: bytes, api: Api) -> None:
    """The fused restore (``_native.restore``) gives the edits, changes and definitions that
    the walk and ``body._changes`` give, in the same order."""
    pruned = prune.parse(document, prune.SCHEMAS[(api, Doc.REQUEST)])
    if pruned is None:
        return
    parsed, spans = pruned
    try:
        plan = body.plan(document, api, Doc.REQUEST, Policy(Direction.DECODE))
    except body.RewriteError as exc:
        with pytest.raises(body.RewriteError, match=str(exc)):
            _python_restore(parsed, spans, api)
        return
    if plan is body.NOTHING:  # nothing to restore, by the byte check alone
        assert b"tid1_" not in document
        return
    assert plan.found is None, "the fused restore was not taken"
    assert (plan.edits, plan.changes, plan.definitions()) == _python_restore(parsed, spans, api)


def _python_restore(parsed: Any, spans: prune.Spans, api: Api) -> tuple[Any, ...]:
    found = find_ids(parsed, api, Doc.REQUEST)
    changes, targets = body._changes(found, api, Policy(Direction.DECODE), None)
    edits = sorted(
        Edit(*spans[(id(holder), key)], body._literal(new))
        for holder, key, _, new in targets.members
    )
    defined = frozenset(f.value for f in found if f.role is DEFINES)
    return tuple(edits), changes, defined


@settings(max_examples=300, deadline=None)
@given(case=chaos_case(), api=st.sampled_from(list(Api)))
def test_the_fused_restore_is_the_python_one(case: Any, api: Api) -> None:
    document, its_api, doc, policy, _ = case
    if doc is Doc.REQUEST and policy.direction is Direction.DECODE:  # client ids, all over
        assert_restores_as_python(document, its_api)
    assert_restores_as_python(document, api)  # and any document, read as any API's request


def _taken(ids: tuple[str, ...], lazy: bool) -> Taken:
    """The ids as a request's history defines them: known at once, or read off the request
    when first asked (as for a request whose restore was not fused)."""
    if not lazy:
        return Taken.of(ids)
    function = {"name": "f", "arguments": "{}"}
    calls = [{"id": i, "type": "function", "function": function} for i in ids]
    request = {"messages": [{"role": "assistant", "content": None, "tool_calls": calls}]}
    return Taken(json.dumps(request).encode(), Api.CHAT)


def assert_encodes_as_python(
    document: bytes,
    api: Api,
    doc: Doc,
    taken: tuple[str, ...],
    *,
    lazy: bool = False,
    references: bool = True,
) -> None:
    """The fused encode (``_native.encode``) gives the edits and changes that the walk and
    ``body._changes`` give, and leaves the call ids chosen alike (it answers ``CallIds`` on
    its state, see ``CallIds.native_state``); also when its ``CallIds`` keeps no maps for
    references (``references=False``), against one that does."""
    pruned = prune.parse(document, prune.SCHEMAS[(api, doc)])
    if pruned is None:
        return
    native_calls = CallIds("safe", _taken(taken, lazy), references=references)
    python_calls = CallIds("safe", _taken(taken, lazy))
    try:
        fused = body._encode_natively(document, api, doc, native_calls)
    except body.RewriteError as exc:
        with pytest.raises(body.RewriteError, match=str(exc)):
            body._plan_at_spans(pruned, api, doc, Policy(Direction.ENCODE), python_calls)
        return
    assert fused is not None
    python = body._plan_at_spans(pruned, api, doc, Policy(Direction.ENCODE), python_calls)
    assert (fused.edits, fused.changes) == (python.edits, python.changes)
    unkept = {"taken"} if references else {"taken", "_by_call", "_latest"}
    state = {k: v for k, v in vars(native_calls).items() if k not in unkept}
    assert state == {k: v for k, v in vars(python_calls).items() if k not in unkept}


@settings(max_examples=300, deadline=None)
@given(
    case=chaos_case(),
    history=st.lists(st.sampled_from(["tid1_a-3A1", "a", "call_0", "tid1_functions-2Ef-3A0"])),
    lazy=st.booleans(),
    references=st.booleans(),
)
def test_the_fused_encode_is_the_python_one(
    case: Any, history: list[str], lazy: bool, references: bool
) -> None:
    document, api, doc, _, _ = case
    assert_encodes_as_python(document, api, doc, tuple(history), lazy=lazy, references=references)


_RAW_IDS = st.text(st.characters(codec=None, exclude_categories=())) | st.sampled_from(
    ["", "tid1_x", "call_tid12_x", "call_", "call_x", "tid_", "tid1", "-", "\ud800", "日本"]
)


@settings(max_examples=1000, deadline=None)
@given(raw=_RAW_IDS, profile=st.sampled_from(["safe", "call"]))
def test_encode_id_is_the_codec_one(raw: str, profile: Profile) -> None:
    assert native.extension.encode_id(raw, profile) == codec.encode(raw, profile)


def test_the_fused_encode_tags_reused_ids_as_python_does() -> None:
    """Ids an upstream reuses across calls, some taken by the history: the occurrence tags
    (``CallIds.define``, called from native code) and the references to each call."""
    calls = [
        {"index": i, "id": raw, "type": "function", "function": {"name": "f", "arguments": ""}}
        for i, raw in enumerate(["functions.f:0", "functions.f:0", "call_0", "functions.f:0"])
    ]
    document = json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": calls}}]}
    ).encode()
    taken = ("tid1_functions-2Ef-3A0",)
    for lazy in (False, True):
        assert_encodes_as_python(document, Api.CHAT, Doc.RESPONSE, taken, lazy=lazy)
        native_calls = CallIds("safe", _taken(taken, lazy))
        plan = body._encode_natively(document, Api.CHAT, Doc.RESPONSE, native_calls)
        assert plan is not None
        assert [c.client for c in plan.changes] == [  # call_0 conforms: it stays as it is
            codec.encode("functions.f:0", occurrence=2),
            codec.encode("functions.f:0", occurrence=3),
            codec.encode("functions.f:0", occurrence=4),
        ]


_CHANGE_TEXT = st.sampled_from(["", "a", "tid1_a-_2", "-_", "functions.f:0", "\ud800", "é"])


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(
        st.builds(
            body.Change,
            path=_CHANGE_TEXT,
            raw=_CHANGE_TEXT,
            client=_CHANGE_TEXT,
            action=st.sampled_from(["restored", "encoded", "kept", "mapped"]),
            sent=_CHANGE_TEXT,
            rules=st.sampled_from(["", "mistral"]),
        ),
        max_size=6,
    )
)
def test_records_are_as_records(changes: list[body.Change]) -> None:
    records = report.as_records(changes)
    with stdlib_only():
        assert report.as_records(changes) == records
    assert records == [report.as_record(change) for change in changes]


def test_the_fused_restore_on_a_history() -> None:
    raw = ["functions.get_weather:0", "sessions_history:183", "\u00e9t\u00e9", "call_0"]
    calls = [codec.encode(json.loads(f'"{r}"')) for r in raw]
    tagged = codec.encode("call_0", occurrence=2)
    messages = [  # two turns: the positions of one walk step are not together in the bytes
        {"role": "assistant", "tool_calls": [{"id": c, "type": "function"} for c in calls[:2]]},
        *({"role": "tool", "tool_call_id": c, "content": "x"} for c in calls[:2]),
        {"role": "assistant", "tool_calls": [{"id": c, "type": "function"} for c in calls[2:]]},
        *({"role": "tool", "tool_call_id": c, "content": "x"} for c in [*calls[2:], tagged]),
        {"role": "tool", "tool_call_id": calls[0], "content": "again"},
    ]
    document = json.dumps({"messages": messages}).encode()
    assert_restores_as_python(document, Api.CHAT)
    plan = body.plan(document, Api.CHAT, Doc.REQUEST, Policy(Direction.DECODE))
    assert len(plan.edits) == len(plan.changes) == 8  # call_0 is no client id: kept
    assert plan.definitions() == frozenset(calls)


def test_the_fused_restore_sorts_its_edits() -> None:
    """Each walk step goes through all of ``input``: its finds are not in byte order."""
    item, call = codec.encode("fc.1"), codec.encode("call.1")
    document = json.dumps(
        {"input": [{"type": "function_call", "id": item, "call_id": call}] * 2}
    ).encode()
    assert_restores_as_python(document, Api.RESPONSES)
    plan = body.plan(document, Api.RESPONSES, Doc.REQUEST, Policy(Direction.DECODE))
    assert [edit.text for edit in plan.edits] == [b'"fc.1"', b'"call.1"'] * 2


@pytest.mark.parametrize(
    "document",
    [
        b'{"messages":[{"tool_call_id":"a","tool_call_id":"b"}]}',  # a member named twice
        b'{"messages":[{"content":{"x":1,"x":2}}]}',  # a key twice, even in a skipped object
        b'{"messages":[{"content":{"\\u0069d":"a"}}]}',  # an escaped key, even there
        b'{"a":{' + b",".join(b'"k%d":0' % i for i in range(65)) + b"}}",  # 65 members
        b'{"messages":[{"tool_call_id":"\\u0061"}]}',  # an escape in a kept string
        b'{"messages":[{"tool_c\\u0061ll_id":"a"}]}',  # an escape in a kept object's key
        b'{"messages":[{"content":"\\ud800"}]}',  # a lone surrogate escape, even skipped
        b'{"messages":[{"content":"\xed\xa0\x80"}]}',  # a raw surrogate
        b'{"messages":[{"content":NaN}]}',
        b'{"messages":[{"index":123456789012345678901234}]}',  # beyond 64 bits, kept
        b"\xef\xbb\xbf{}",  # a byte order mark
        b"[]",  # not an object
        b'{"messages":[]} x',
        b"[" * 10 + b"]" * 10,
        b'{"a":' + b"[" * 300 + b"]" * 300 + b"}",  # deeper than the native parser goes
    ],
)
def test_what_it_leaves_to_the_full_parse(document: bytes) -> None:
    assert prune.parse(document, prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)]) is None


def test_what_a_pruned_request_keeps() -> None:
    document = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "user", "content": "hi " * 100},
                {"role": "assistant", "tool_calls": [{"id": "x:1", "type": "function"}]},
                {"role": "tool", "tool_call_id": "x:1", "content": '{"id": "x:1"}'},
            ],
        }
    ).encode()
    pruned = prune.parse(document, prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)])
    assert pruned is not None
    parsed, spans = pruned
    assert parsed == {
        "stream": True,
        "messages": [
            {},
            {"tool_calls": [{"id": "x:1", "type": "function"}]},
            {"tool_call_id": "x:1"},
        ],
    }
    first = document.find(b'"x:1"')
    second = document.find(b'"x:1"', first + 1)
    assert sorted(spans.values()) == [(first, first + 5), (second, second + 5)]


@settings(max_examples=300, deadline=None)
@given(document=st.binary(max_size=300), data=st.data())
def test_splice_is_apply(document: bytes, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(document)), max_size=12)))
    edits = [
        Edit(start, end, data.draw(st.binary(max_size=8)))
        for start, end in zip(cuts[::2], cuts[1::2], strict=False)
    ]
    spliced = body.apply(document, edits)
    with stdlib_only():
        assert body.apply(document, edits) == spliced


@pytest.mark.parametrize("api", list(Api))
def test_sse_feed_finds_the_markers_wherever_they_fall(api: Api) -> None:
    """The marker search looks at 16 starts at a time: a marker at any offset from the start
    of a piece, and a piece ending anywhere in or after one, frames as the Python path does."""
    stream = streams.render(streams.events_for(api, "functions.f:0"))
    if api is Api.RESPONSES:  # and a marker that ends its event (the event type, last)
        stream += b'data: {"item_id":"fc:1","delta":"","type":"response.mcp_call.failed"}\n\n'
    for padding in range(34):
        source = b": " + b"x" * padding + b"\n\n" + stream
        for cut in [len(source), *range(len(source) - 48, len(source))]:
            pieces = [source[:cut], source[cut:]]
            native_out = _fed(api, pieces)
            with stdlib_only():
                assert _fed(api, pieces) == native_out


def _fed(api: Api, pieces: list[bytes]) -> list[bytes]:
    rewriter = StreamRewriter(api, Policy(Direction.ENCODE))
    first = rewriter.feed(b": the first piece, past the stream's start\n\n")
    assert rewriter._lane is not None or native.extension is None  # the rest: sse_feed
    return [first, *(rewriter.feed(piece) for piece in pieces), rewriter.finish()]


def test_splice_refuses_edits_out_of_order() -> None:
    with pytest.raises(ValueError):
        native.extension.splice(b"abcdef", [Edit(3, 4, b"x"), Edit(1, 2, b"y")])


def test_the_accelerator_is_built_in_the_dev_venv() -> None:
    """scripts/test and scripts/proxy build it (setup.py); a machine without a C compiler
    runs pure Python, which the rest of the suite covers too (stdlib_only)."""
    assert native.accelerated()


def test_the_environment_can_turn_it_off() -> None:
    code = (
        "from toolid import native, prune\n"
        "print(native.accelerated(), prune.parse(b'{}', next(iter(prune.SCHEMAS.values()))))"
    )
    env = {**os.environ, "TOOLID_NATIVE": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["False", "None"]
