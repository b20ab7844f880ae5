"""The native primitives (toolid/_native.c), each against its Python twin.

- ``id_spans``: whatever it vouches for, the full parse (``jsonparse.loads``, with orjson and
  with the standard library) reads alike: its ids, sorted by slot as ``locate.spanned`` sorts
  them, are those ``positions.find_ids`` finds (key, value, path, role, call, kind, the
  holder's type), and each span is the literal of its id (replaced, the full parse finds the
  replacement at that very position); anything else is None.
- ``event_ids``: the events ``sse.EventFramer.feed_marked`` frames (a fresh framer fed the
  piece, with the markers) and where the incomplete rest starts; of the marked events, those
  whose data is one line (``sse_events.data_line``) that ``id_spans`` vouches for give its rows,
  shifted, all in one list (an event of several rows named in groups), and the others are
  unread; None for a piece holding a CR.
- ``first_marker``: where ``bytes.find`` (a regex) finds the first of the words.
- ``splice``: ``body.apply``'s Python loop.
- Every argument of the wrong type or shape gives TypeError or ValueError (in a child
  process: a crash fails one test, not the run), and no Python code is called.
- The source compiles without a warning (gcc, clang: -Wall -Wextra -Werror).

tests/fuzz/native_fuzz.py fuzzes the same primitives under ASan and UBSan.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import streams
from tests.fuzz.budget import fuzz
from tests.fuzz.strategies import INVALID_UTF8, SURROGATE_BYTES
from tests.fuzz.test_fuzz_body import chaos_case
from tests.test_jsonparse import stdlib_only
from tests.test_stream import cases
from toolid import body, jsonparse, native, prune
from toolid.markers import Markers
from toolid.positions import LACKS, TYPE, Api, Doc, Role, Tree, find_ids, positions
from toolid.sse import EventFramer
from toolid.sse_events import data_line
from toolid.value_spans import value_span

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SOURCE = REPO / "toolid" / "_native.c"
EXTENSION: Any = native.extension
needs_it = pytest.mark.skipif(EXTENSION is None, reason="the native accelerator is not built")
API_DOCS = sorted(prune.TABLES, key=str)


@contextmanager
def python_only() -> Iterator[None]:
    """toolid's own Python paths (the primitives are called from EXTENSION directly)."""
    saved, native.extension = native.extension, None
    try:
        yield
    finally:
        native.extension = saved


# --- id_spans ------------------------------------------------------------------------------

type Row = tuple[str, str, str, Role, tuple[int, ...], str, str | None]  # an id, as compared


def _full(document: bytes) -> Any:
    try:
        return jsonparse.loads(document)
    except (ValueError, RecursionError):
        return None


def _holder_type(holder: dict[str, Any]) -> str | None:
    kind = holder.get(TYPE)
    return kind if isinstance(kind, str) else None


def _twin(parsed: Any, api: Api, doc: Doc, document: bytes) -> list[Row]:
    """The ids ``find_ids`` finds in a parsed document; each call lacking one with the JSON
    text ``document`` spells there (``value_spans``, as ``locate`` reads it)."""
    rows = []
    for f in find_ids(parsed, api, doc):
        value = f.value
        if f.role is LACKS:
            span = value_span(document, f.path)
            assert span is not None
            value = document[span[0] : span[1]].decode()
        rows.append((f.key, value, f.path, f.role, f.call, f.kind, _holder_type(f.holder)))
    return rows


def _rows(document: bytes, spans: list[Any], api: Api, doc: Doc) -> list[Row]:
    """What ``id_spans`` reported, in find_ids' order (``locate.spanned``'s sort)."""
    entries = positions(api, doc)
    rows = []
    for start, end, slot, call, path, holder_type, value in sorted(spans, key=itemgetter(2)):
        if slot >= len(entries):  # a call lacking an id: the text of what it holds
            entry = [p for p in entries if p.required][slot - len(entries)]
            assert entry.required and value == document[start:end].decode()
            rows.append((entry.key, value, path, LACKS, call, entry.kind, holder_type))
            continue
        entry = entries[slot]
        assert value == document[start + 1 : end - 1].decode()
        rows.append((entry.key, value, path, entry.role, call, entry.kind, holder_type))
    return rows


def assert_vouched(document: bytes, api: Api, doc: Doc) -> bool:
    """If ``id_spans`` reads ``document``, it is JSON, its ids are those of a full parse and
    each span is the literal of its id. Whether it read it."""
    spans = EXTENSION.id_spans(document, prune.TABLES[(api, doc)])
    if spans is None:
        return False
    assert type(spans) is list
    entries = positions(api, doc)
    for start, end, slot, call, path, holder_type, value in spans:
        assert 0 <= start <= end <= len(document) and type(slot) is int and type(path) is str
        assert type(value) is str
        assert type(call) is tuple and all(type(n) is int for n in call)
        assert holder_type is None or type(holder_type) is str
        if slot >= len(entries):  # a call lacking an id: where it is missing, or what it holds
            held = document[start:end]
            assert (held == b"" and document[start - 1 : start] == b"{") or (
                held and not isinstance(json.loads(held), str | list | dict)
            )
            continue
        assert start < end
        assert document[start : start + 1] == document[end - 1 : end] == b'"'
        assert json.loads(document[start:end]) == document[start + 1 : end - 1].decode()
    full = _full(document)
    assert full is not None, "vouched for a document that does not parse"
    rows = _rows(document, spans, api, doc)
    with python_only():
        assert rows == _twin(full, api, doc, document)
        with stdlib_only():
            assert rows == _twin(jsonparse.loads(document), api, doc, document)
        # Each span is its position's literal: replaced by a mark of its own, the full parse
        # finds each mark where the span's id was. (A history's labels are the values of the
        # members filters test, so they are not marked: their values were compared above.)
        ids = [
            span
            for span in spans
            if span[2] < len(entries) and entries[span[2]].role is not Role.LABELS
        ]
        distinct = sorted({(start, end) for start, end, *_ in ids})
        marks = {span: b'"@%d@"' % i for i, span in enumerate(distinct)}
        marked = EXTENSION.splice(document, [(*span, marks[span]) for span in distinct])
        expected = [
            marks[(start, end)][1:-1].decode() for start, end, *_ in sorted(ids, key=itemgetter(2))
        ]
        found = _twin(jsonparse.loads(marked), api, doc, marked)
        assert [row[1] for row in found if row[3] not in (Role.LABELS, LACKS)] == expected
    return True


def _corpus() -> list[bytes]:
    """Every document the repository holds: tests/data, its transcript, the data of its
    streams and of tests/streams.py's, with every raw id and spacing."""
    documents = [path.read_bytes() for path in sorted(DATA.glob("*.json"))]
    documents += (DATA / "transcript.jsonl").read_bytes().splitlines()
    for body_ in _bodies():
        documents += [b"\n".join(group) for group in streams.data_groups(body_)]
    return documents


def _bodies() -> list[bytes]:
    """The repository's streams and tests/streams.py's, with every raw id and spacing."""
    bodies = [path.read_bytes() for path in sorted(DATA.glob("*.sse"))]
    for api in Api:
        for raw in (*streams.RAW_IDS, *streams.CONFORMING_IDS):
            for style in ("compact", "spaced", "pretty"):
                bodies.append(streams.render(streams.events_for(api, raw), style=style))
    return bodies


CORPUS = _corpus()
BODIES = _bodies()


@needs_it
@pytest.mark.parametrize("api_doc", API_DOCS, ids=str)
def test_every_document_of_the_repository(api_doc: tuple[Api, Doc]) -> None:
    vouched = [assert_vouched(document, *api_doc) for document in CORPUS]
    assert sum(vouched) > len(CORPUS) // 2  # not a vacuous comparison


@needs_it
@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_the_recorded_documents_are_read_with_their_ids(name: str) -> None:
    api_name, doc_name = name.removesuffix(".json").split("_")
    api, doc = Api(api_name), Doc(doc_name)
    document = (DATA / name).read_bytes()
    assert assert_vouched(document, api, doc)
    assert EXTENSION.id_spans(document, prune.TABLES[(api, doc)])


@needs_it
@pytest.mark.parametrize(("name", "envelope"), [("request", "request"), ("response", "response")])
def test_gemini_documents_in_the_code_assist_envelope(name: str, envelope: str) -> None:
    """Code Assist's envelope is rows of the table: the native parser reads a wrapped body with
    the ids of the bare one, at paths under the envelope."""
    doc = Doc(name)
    bare = (DATA / f"gemini_{name}.json").read_bytes()
    wrapped = b'{"model": "gemini-2.5-pro", "%s": %s, "traceId": "t"}' % (envelope.encode(), bare)
    for kind in (doc, Doc.HISTORY) if doc is Doc.REQUEST else (doc,):
        assert assert_vouched(wrapped, Api.GEMINI, kind)
        inner = EXTENSION.id_spans(bare, prune.TABLES[(Api.GEMINI, kind)])
        outer = EXTENSION.id_spans(wrapped, prune.TABLES[(Api.GEMINI, kind)])
        assert [f"{envelope}.{row[4]}" for row in inner] == [row[4] for row in outer]


@needs_it
def test_the_recorded_events_are_read_with_their_ids() -> None:
    found = 0
    for path in sorted(DATA.glob("*.sse")):
        api = Api(path.name.split("_")[0])
        for group in streams.data_groups(path.read_bytes()):
            document = b"\n".join(group)
            if document != b"[DONE]":
                assert assert_vouched(document, api, Doc.EVENT)
                found += len(EXTENSION.id_spans(document, prune.TABLES[(api, Doc.EVENT)]))
    assert found > 0


@needs_it
@fuzz(ci=300, long=5000)
@given(case=chaos_case())
def test_documents_spelled_every_way(case: Any) -> None:
    document, api, doc, _, _ = case
    assert_vouched(document, api, doc)
    for other in API_DOCS:  # and read with every other table
        assert_vouched(document, *other)


@needs_it
@fuzz(ci=200, long=5000)
@given(case=chaos_case(), data=st.data())
def test_every_prefix_and_any_byte_changed(case: Any, data: st.DataObject) -> None:
    document, api, doc, _, _ = case
    cut = data.draw(st.integers(0, len(document)))
    assert_vouched(document[:cut], api, doc)
    at = data.draw(st.integers(0, max(0, len(document) - 1)))
    spoilers = [*INVALID_UTF8, *SURROGATE_BYTES, b"\\", b'"', b"\x00", b"}", b"]", b","]
    byte = data.draw(st.sampled_from(spoilers))
    assert_vouched(document[:at] + byte + document[at + 1 :], api, doc)


@needs_it
@fuzz(ci=300, long=5000)
@given(
    document=st.binary(max_size=200) | st.sampled_from(CORPUS).map(lambda d: d[:200]),
    api_doc=st.sampled_from(API_DOCS),
)
def test_any_bytes(document: bytes, api_doc: tuple[Api, Doc]) -> None:
    assert_vouched(document, *api_doc)


# Pieces of string content: escapes (valid, \\u, invalid, a lone backslash), quotes, bytes that
# are not ASCII (whole and cut) or are control bytes.
_WELL_FORMED = [b'\\"', b"\\\\", b"\\n", b"\\/", b"\\u0041", b"a", b"bcdefgh"]
_WELL_FORMED += [b"\xc3\xa9", b"\xe4\xb8\xad"]
_PIECES = [*_WELL_FORMED, b"\\ud800", b"\\x", b"\\", b'"', b"\xe4\xb8", b"\x01", b"\x7f", b"\xff"]


@needs_it
@fuzz(ci=300, long=5000)
@given(st.lists(st.sampled_from(_PIECES), max_size=40), st.integers(0, 17), st.integers(0, 3))
def test_strings_of_escapes_at_every_offset(pieces: list[bytes], pad: int, cut: int) -> None:
    # Runs of backslashes, escapes and bytes that are not ASCII at every offset of the 16-byte
    # blocks a string is read in, the document cut short or not.
    content = b"".join(pieces)
    document = (
        b'{"messages":[{"role":"' + b"x" * pad + b'","content":"' + content + b'"},'
        b'{"role":"tool","tool_call_id":"tid1_a","content":"' + b"".join(pieces[::-1]) + b'"}]}'
    )
    document = document[: len(document) - cut]
    vouched = assert_vouched(document, Api.CHAT, Doc.HISTORY)
    if cut == 0 and all(piece in _WELL_FORMED for piece in pieces):
        assert vouched


@needs_it
@pytest.mark.parametrize("run", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("named", [b'"', b"n", b"u0041", b"t\xe4\xb8\xad", b"/\xc3\xa9"])
def test_escapes_across_every_block_edge_are_read(run: int, named: bytes) -> None:
    # A run of backslashes (the odd ones escape what follows) ending at each offset of the
    # 16-byte blocks a string is read in: a well-formed string is always vouched for.
    escape = b"\\" * run + (named if run % 2 else b"")
    for offset in range(40):
        content = b"a" * offset + escape + b"b" * 17
        document = b'{"messages":[{"role":"tool","content":"' + content + b'"}]}'
        assert assert_vouched(document, Api.CHAT, Doc.HISTORY), (run, named, offset)


@needs_it
@pytest.mark.parametrize(
    "document",
    [
        b'{"messages":[{"tool_call_id":"a","tool_call_id":"b"}]}',  # a member named twice
        b'{"messages":[{"content":{"x":1,"x":2}}]}',  # a key twice, even in a skipped object
        b'{"messages":[{"content":{"\\u0069d":"a"}}]}',  # an escaped key, even there
        b'{"a":{' + b",".join(b'"k%d":0' % i for i in range(65)) + b"}}",  # 65 members
        b'{"messages":[{"tool_call_id":"\\u0061"}]}',  # an escape in a kept string
        b'{"messages":[{"tool_c\\u0061ll_id":"a"}]}',  # an escape in a kept object's key
        b'{"messages":[{"tool_calls":[{"id":"a","type":"\\n"}]}]}',  # ... in a kept type
        b'{"messages":[{"content":"\\ud800"}]}',  # a lone surrogate escape, even skipped
        b'{"messages":[{"content":"\xed\xa0\x80"}]}',  # a raw surrogate
        b'{"messages":[{"content":NaN}]}',
        b'{"messages":[{"index":123456789012345678901234}]}',  # beyond 64 bits, kept
        b'{"messages":[{"index":1234567890123456789}]}',  # 19 digits, kept
        b"\xef\xbb\xbf{}",  # a byte order mark
        b"[]",  # not an object
        b'"x"',
        b"",
        b'{"messages":[]} x',
        b'{"messages":[],}',
        b'{"messages":[1,]}',
        b"[" * 10 + b"]" * 10,
        b'{"a":' + b"[" * 300 + b"]" * 300 + b"}",  # deeper than the native parser goes
        b'{"a":"\\x"}',  # not an escape
        b'{"a":"\x1f"}',  # a control character
        b'{"a":01}',
        b'{"a":1.}',
        b'{"a":-}',
        b'{"a":tru}',
    ],
)
def test_what_it_leaves_to_the_full_parse(document: bytes) -> None:
    assert EXTENSION.id_spans(document, prune.TABLES[(Api.CHAT, Doc.REQUEST)]) is None


@needs_it
def test_the_walks_limits() -> None:
    """Paths of at most 4095 bytes, at most 64 call numbers: else None (the full parse)."""
    leaf = ("id", 0, Role.DEFINES, "call")
    ids: prune.Node = (((b"id", "id", prune.LEAF),), None)
    for size, vouched in ((4092, True), (4093, False)):  # the path: key + ".id"
        key = "k" * size
        table = (
            (((key.encode(), key, ids),), None),
            Tree((), ((key, Tree((leaf,), (), ())),), ()),
            (),
            True,
        )
        document = b'{"%s":{"id":"x"}}' % key.encode()
        got = EXTENSION.id_spans(document, table)
        assert (got is not None) == vouched, size
        assert got is None or got[0][4] == key + ".id"
    for depth, vouched in ((64, True), (65, False)):
        tree, schema = Tree((leaf,), (), ()), ids
        for _ in range(depth):
            tree = Tree((), (("a", Tree((), (), ((None, None, False, tree),))),), ())
            schema = (((b"a", "a", ((), schema)),), None)
        document = b'{"a":[' * depth + b'{"id":"x"}' + b"]}" * depth
        got = EXTENSION.id_spans(document, (schema, tree, (), True))
        assert (got is not None) == vouched, depth
        if vouched:
            assert got[0][3] == (0,) * depth and got[0][4] == "a[0]." * depth + "id"
        assert EXTENSION.id_spans(document, (schema, tree, (), False)) is not None  # unnumbered


@needs_it
def test_how_deep_it_goes() -> None:
    table = prune.TABLES[(Api.CHAT, Doc.REQUEST)]
    for depth in (198, 199, 200, 201):  # the root object is level 1
        document = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
        assert (EXTENSION.id_spans(document, table) is None) == (depth > 199)


@needs_it
def test_what_a_request_reports() -> None:
    document = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "user", "content": "hi " * 100},
                {"role": "assistant", "tool_calls": [{"id": "x:1", "type": "function"}]},
                {"role": "tool", "tool_call_id": "x:1", "content": '{"id": "x:1"}'},
                [1, "a", {"tool_call_id": "y"}],
                {"tool_call_id": 7, "tool_calls": {"id": "z"}},
            ],
        }
    ).encode()
    spans = EXTENSION.id_spans(document, prune.TABLES[(Api.CHAT, Doc.REQUEST)])
    first = document.find(b'"x:1"')
    second = document.find(b'"x:1"', first + 1)
    third = document.find(b'"z"')
    got = [(start, end, *rest) for start, end, _, *rest in spans]
    assert sorted(got) == [
        (first, first + 5, (), "messages[1].tool_calls[0].id", "function", "x:1"),
        (second, second + 5, (), "messages[2].tool_call_id", None, "x:1"),
        (third, third + 3, (), "messages[4].tool_calls.id", None, "z"),  # an object: one element
    ]
    assert assert_vouched(document, Api.CHAT, Doc.REQUEST)


@needs_it
def test_what_a_table_reads_of_each_value() -> None:
    """Call numbers (the root's, each element's ``index`` or position), holder types."""
    leaf, keep = prune.LEAF, prune.KEEP
    item: prune.Node = (
        ((b"id", "id", leaf), (b"type", "type", keep), (b"index", "index", keep)),
        None,
    )
    schema: prune.Node = (
        ((b"a", "a", (item[0], item)), (b"n", "n", keep), (b"\xc3\xa9", "é", item)),
        None,
    )
    inside = Tree((("id", 1, Role.REFERS, "call"),), (), ())
    tree = Tree((), (("a", Tree((), (), ((None, None, False, inside),))), ("é", inside)), ())
    table = (schema, tree, ("n",), True)
    document = (
        '{"n":3,"a":[{"id":"x","type":"t","index":5},{"id":"y","index":1.5},'
        '{"index":-2,"id":"z","type":7},"s",{"id":1},{"id":"ü","type":"ü","index":true}],'
        '"é":{"id":"w","type":"function"},"z":{"id":"q"}}'
    ).encode()
    got = [row[2:] for row in EXTENSION.id_spans(document, table)]
    assert got == [
        (1, (3, 5), "a[0].id", "t", "x"),
        (1, (3, 1), "a[1].id", None, "y"),
        (1, (3, -2), "a[2].id", None, "z"),
        (1, (3, 5), "a[5].id", "ü", "ü"),
        (1, (3,), "é.id", "function", "w"),
    ]
    row = EXTENSION.id_spans(b'{"n":3.0,"a":{"id":"x"}}', table)[0]
    assert row[2:] == (1, (), "a.id", None, "x")
    for spoiled in ('"\\n"', "12345678901234567890"):  # what it keeps but does not vouch for
        assert EXTENSION.id_spans(b'{"a":[{"type":%s}]}' % spoiled.encode(), table) is None
        assert EXTENSION.id_spans(b'{"n":%s}' % spoiled.encode(), table) is None
    assert EXTENSION.id_spans(b'{"n":"\\n","x":"\\n"}', (schema, tree, (), True)) is None
    assert EXTENSION.id_spans(b'{"n":7,"x":"\\n"}', (schema, tree, (), False)) == []


@needs_it
def test_any_document_buffer_reads_alike() -> None:
    document = (DATA / "chat_request.json").read_bytes()
    table = prune.TABLES[(Api.CHAT, Doc.REQUEST)]
    expected = EXTENSION.id_spans(document, table)
    assert expected
    assert EXTENSION.id_spans(bytearray(document), table) == expected
    assert EXTENSION.id_spans(memoryview(document), table) == expected
    assert EXTENSION.id_spans(memoryview(b"xx" + document + b"yy")[2:-2], table) == expected
    assert EXTENSION.id_spans(memoryview(b"xx" + document)[2:], table) == expected


# --- event_ids -----------------------------------------------------------------------------


def assert_framed(data: bytes, words: tuple[bytes, ...], limit: int, api: Api) -> Any:
    """``event_ids`` is the framer's twin on ``data`` (see the module's docstring)."""
    table = prune.TABLES[(api, Doc.EVENT)]
    got = EXTENSION.event_ids(data, words, limit, table)
    if b"\r" in data:
        assert got is None
        return got
    framer = EventFramer()
    rows: list[tuple[Any, ...]] = []
    unread: list[tuple[int, int, int]] = []
    groups: list[tuple[int, int]] = []
    end = 0
    for piece, unmarked in framer.feed_marked(data, Markers(words)):
        start, end = end, end + len(piece)
        if unmarked:
            continue
        at = data_line(data, start, end) if end - start <= limit else -1
        ids = None
        if at >= 0:
            assert_vouched(data[at : end - 2], api, Doc.EVENT)
            ids = EXTENSION.id_spans(data[at : end - 2], table)
        if ids is None:
            unread.append((start, end, len(rows)))
            continue
        if len(ids) > 1:
            groups.append((len(rows), len(ids)))
        rows.extend((s + at, e + at, *rest) for s, e, *rest in ids)
    assert end == len(data) - len(framer)
    assert type(got) is tuple and [type(part) for part in got] == [int, list, list, list]
    assert got == (end, rows, unread, groups)
    return got


_EVENT_DATA = sorted({d for d in CORPUS if b"\n" not in d and len(d) < 3000}, key=len)
_LINES = st.sampled_from([b"data: " + d for d in _EVENT_DATA]) | st.sampled_from(
    [
        b": ping",
        b":",
        b"event: message",
        b"data",
        b"data:x",
        b"id: 1",
        b"data: [DONE]",
        b"retry: 5",
        b"data: ",
        b"data:  {}",
        b'data: {"type":"item"}',
        b"x" * 40,
    ]
)
_EVENTS = st.lists(st.lists(_LINES, min_size=0, max_size=3).map(b"\n".join), max_size=10)
_WORDS = st.sampled_from([body.id_markers(api, Doc.EVENT).words for api in Api]) | st.lists(
    st.sampled_from([b'"id"', b'"', b"data", b"\n", b"\n\n", b": p", b"tid1_", b"{", b"x" * 30]),
    min_size=1,
    max_size=4,
).map(tuple)
_LIMITS = st.sampled_from([0, 7, 8, 9, 64, 200, 10**6, 2**62]) | st.integers(0, 400)


@st.composite
def lf_streams(draw: st.DrawFn) -> bytes:
    """Events of random lines (data of every corpus document, comments, other fields, lines
    that are no field) ended by runs of 1 to 5 LFs, cut anywhere."""
    events = draw(_EVENTS)
    stream = b"".join(event + b"\n" * draw(st.integers(1, 5)) for event in events)
    start = draw(st.integers(0, len(stream)))
    return stream[start : draw(st.integers(start, len(stream)))]


@needs_it
@fuzz(ci=300, long=5000)
@given(data=lf_streams(), words=_WORDS, limit=_LIMITS, api=st.sampled_from(list(Api)))
def test_event_ids_frames_as_the_framer(
    data: bytes, words: tuple[bytes, ...], limit: int, api: Api
) -> None:
    assert_framed(data, words, limit, api)


@needs_it
@fuzz(ci=150, long=3000)
@given(
    case=cases(),
    cuts=st.lists(st.integers(0, 10**5), min_size=2, max_size=2),
    limit=_LIMITS,
    cr=st.integers(0, 10**5),
)
def test_event_ids_on_the_test_streams(case: Any, cuts: list[int], limit: int, cr: int) -> None:
    source = case.body()
    start, end = sorted(cut % (len(source) + 1) for cut in cuts)
    words = body.id_markers(case.api, Doc.EVENT).words
    assert_framed(source, words, limit, case.api)
    assert_framed(source[start:end], words, limit, case.api)
    spoiled = source.replace(b"\r", b"")
    at = cr % (len(spoiled) + 1)
    assert assert_framed(spoiled[:at] + b"\r" + spoiled[at:], words, limit, case.api) is None


@needs_it
def test_event_ids_on_the_repository_streams() -> None:
    located = 0
    for stream in BODIES:
        for api in Api:
            words = body.id_markers(api, Doc.EVENT).words
            for limit in (0, 100, 10**6):
                located += len(assert_framed(stream, words, limit, api)[1])
            for cut in range(0, len(stream), max(1, len(stream) // 5)):
                assert_framed(stream[cut:], words, 10**6, api)
                assert_framed(stream[:cut], words, 10**6, api)
    assert located > 10  # Chat's events: the others have an event line


@needs_it
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=120))
def test_event_ids_names_many_calls_in_turn(mentions: list[tuple[int, int]]) -> None:
    """Events naming more calls, paths and types in turn than one call keeps the objects of
    (strings of equal bytes are taken from an earlier row): each row is as ``id_spans``
    reads its event alone, ``assert_framed`` shows, whatever the order."""
    kinds = ["response.function_call_arguments.delta", "response.function_call_arguments.done"]
    events = []
    for number, kind in mentions:
        if kind < 2:
            event = {"type": kinds[kind], "item_id": f"fc_{number}:{number % 7}"}
        else:
            item = {"type": "function_call", "id": f"fc_{number}", "call_id": f"c:{number}"}
            event = {"type": "response.output_item.added", "output_index": number, "item": item}
        if kind == 3:
            event["item"]["call_id"] = f"caf\u00e9 {number}"  # non-ASCII: never kept
        events.append(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
    stream = b"".join(events)
    _, rows, unread, groups = assert_framed(
        stream, body.id_markers(Api.RESPONSES, Doc.EVENT).words, 10**6, Api.RESPONSES
    )
    items = sum(kind >= 2 for _, kind in mentions)  # an item names two ids, a delta one
    assert not unread and len(rows) == len(mentions) + items and len(groups) == items


@needs_it
def test_event_ids_at_the_edges() -> None:
    table = prune.TABLES[(Api.CHAT, Doc.EVENT)]
    words = (b'"tool_calls"',)
    event = b'data: {"choices":[{"delta":{"tool_calls":[{"index":2,"id":"a"}]}}]}\n\n'
    n = len(event)
    ids = EXTENSION.id_spans(event[6:-2], table)
    assert [row[3:] for row in ids] == [((0, 2), "choices[0].delta.tool_calls[0].id", None, "a")]
    rows = [(start + 6, end + 6, *rest) for start, end, *rest in ids]
    assert event[rows[0][0] : rows[0][1]] == b'"a"'
    assert EXTENSION.event_ids(b"", words, 0, table) == (0, [], [], [])
    assert EXTENSION.event_ids(event, words, n, table) == (n, rows, [], [])
    assert EXTENSION.event_ids(event, words, n - 1, table) == (n, [], [(0, n, 0)], [])
    assert EXTENSION.event_ids(event[:-1], words, 10**6, table) == (0, [], [], [])
    assert EXTENSION.event_ids(b"\n" * 5 + event[:-1], words, 10**6, table) == (4, [], [], [])
    # Lines before the one data line (empty, other fields, comments) leave it the data.
    after_blank = [(start + 3, end + 3, *rest) for start, end, *rest in rows]
    assert EXTENSION.event_ids(b"\n\n\n" + event, words, 10**6, table) == (
        n + 3,
        after_blank,
        [],
        [],
    )
    named = b"event: message\nid: 7\n" + event
    after_fields = [(start + 21, end + 21, *rest) for start, end, *rest in rows]
    assert EXTENSION.event_ids(named, words, 10**6, table) == (n + 21, after_fields, [], [])
    for before in (b"data: {}\n", b"data\n", b"event: x\ndata:{}\n"):  # two data lines: unread
        size = n + len(before)
        assert EXTENSION.event_ids(before + event, words, 10**6, table) == (
            size,
            [],
            [(0, size, 0)],
            [],
        )
    assert EXTENSION.event_ids(event[:-2] + b"\nid: 7\n\n", words, 10**6, table) == (
        n + 6,
        [],
        [(0, n + 6, 0)],  # the data line is not the last
        [],
    )
    two = b": x\ndata: {}\n\n" + event  # the first vouched for, without an id
    shifted = [(start + 14, end + 14, *rest) for start, end, *rest in rows]
    assert EXTENSION.event_ids(two, (b"{",), 100, table) == (n + 14, shifted, [], [])
    assert EXTENSION.event_ids(two, words, 100, table) == (n + 14, shifted, [], [])
    # An event of two ids is a group; a marked event after it not read counts the rows before it.
    calls = b'[{"index":0,"id":"b"},{"index":1,"id":"c"}]'
    pair = b'data: {"choices":[{"delta":{"tool_calls":' + calls + b"}}]}\n\n"
    unreadable = b"data: {}\n" + event
    got = EXTENSION.event_ids(event + pair + unreadable, words, 10**6, table)
    assert got is not None
    assert got[2:] == ([(n + len(pair), 2 * n + len(pair) + 9, 3)], [(1, 2)])
    assert [row[-1] for row in got[1]] == ["a", "b", "c"]
    assert EXTENSION.event_ids(event.replace(b"\n\n", b"\r\n\r\n"), words, 100, table) is None
    assert EXTENSION.event_ids(b"x\r", words, 100, table) is None
    assert EXTENSION.event_ids(b"data: x\n\n", (b"data: x\n\n",), 2**100, table) == (
        9,
        [],
        [(0, 9, 0)],
        [],
    )


# --- first_marker --------------------------------------------------------------------------


def _first(data: bytes, words: tuple[bytes, ...]) -> int:
    hits = [hit for word in words if (hit := data.find(word)) >= 0]
    return min(hits, default=-1)


def _bytes(alphabet: bytes, min_size: int, max_size: int) -> st.SearchStrategy[bytes]:
    return st.lists(st.sampled_from(alphabet), min_size=min_size, max_size=max_size).map(bytes)


WORDS = st.lists(_bytes(b'ab"c', 1, 4) | _bytes(b'ab"c', 1, 24), min_size=1, max_size=64)
DATA_BYTES = _bytes(b'ab"cd', 0, 600) | st.sampled_from(CORPUS)
MARKERS = (b'"id"', b'"call_id"', b'"tool_call_id"', b'"tool_use_id"', b"tid1_", b'"item_id"')


@needs_it
@fuzz(ci=500, long=10000)
@given(words=WORDS, data=DATA_BYTES, padding=st.integers(0, 40), cut=st.integers(0, 40))
def test_first_marker_is_bytes_find(
    words: list[bytes], data: bytes, padding: int, cut: int
) -> None:
    data = b"d" * padding + data
    regex = re.compile(b"|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)))
    hit = regex.search(data)
    assert EXTENSION.first_marker(data, tuple(words)) == _first(data, tuple(words))
    assert EXTENSION.first_marker(data, tuple(words)) == (-1 if hit is None else hit.start())
    end = max(0, len(data) - cut)  # a view: the bytes after end are there, unread
    view = memoryview(data)[:end]
    assert EXTENSION.first_marker(view, tuple(words)) == _first(data[:end], tuple(words))
    assert EXTENSION.first_marker(bytearray(data), tuple(words)) == _first(data, tuple(words))


@needs_it
def test_first_marker_on_the_repository_documents() -> None:
    for document in CORPUS:
        for count in range(1, len(MARKERS) + 1):
            words = MARKERS[:count]
            assert EXTENSION.first_marker(document, words) == _first(document, words)


@needs_it
@pytest.mark.parametrize("size", range(1, 24))
def test_first_marker_reads_no_byte_past_the_end(size: int) -> None:
    word = b'"' + b"w" * (size - 2) + b'"' if size > 1 else b"w"
    for padding in range(40):
        data = b"d" * padding + word
        view = memoryview(data)
        assert EXTENSION.first_marker(view, (word,)) == padding
        assert EXTENSION.first_marker(view[:-1], (word,)) == -1  # the word's last byte
        assert EXTENSION.first_marker(view[1:-1], (word,)) == -1  # is past the end
        assert EXTENSION.first_marker(view[:-1], (b"zz", word, word[:-1] + b"x")) == -1


# --- splice --------------------------------------------------------------------------------


class Edit(NamedTuple):
    start: int
    end: int
    text: bytes


def _python_splice(document: bytes, edits: list[Edit]) -> bytes:
    """body.apply's Python loop."""
    parts: list[bytes] = []
    at = 0
    for start, end, text in edits:
        parts.append(document[at:start])
        parts.append(text)
        at = end
    parts.append(document[at:])
    return b"".join(parts)


@needs_it
@fuzz(ci=500, long=10000)
@given(document=st.binary(max_size=300) | st.sampled_from(CORPUS), data=st.data())
def test_splice_is_the_python_loop(document: bytes, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(document)), max_size=24)))
    edits = [
        Edit(start, end, data.draw(st.binary(max_size=8)))
        for start, end in zip(cuts[::2], cuts[1::2], strict=False)
    ]
    expected = _python_splice(document, edits)
    assert EXTENSION.splice(document, edits) == expected
    assert EXTENSION.splice(document, tuple(edits)) == expected
    assert EXTENSION.splice(document, [tuple(edit) for edit in edits]) == expected


@needs_it
def test_splice_at_the_edges() -> None:
    assert EXTENSION.splice(b"", []) == b""
    assert EXTENSION.splice(b"", [(0, 0, b"x"), (0, 0, b"y")]) == b"xy"
    assert EXTENSION.splice(b"abc", [(0, 3, b"")]) == b""
    assert EXTENSION.splice(b"abc", [(0, 1, b"X"), (1, 2, b""), (3, 3, b"!")]) == b"Xc!"
    assert EXTENSION.splice(b"abc", [(True, 2, b"-")]) == b"a-c"  # a bool is an int


# --- arguments -----------------------------------------------------------------------------

#: Calls that must raise TypeError or ValueError, run by _refusals in a child process. The
#: names: n (the extension), T (a real table: S its schema, R its tree, E an empty tree), t
#: (a table with some parts replaced), W (real words), D (an event), Str (a str whose hash and
#: equality raise), EVIL (a frozenset of an object whose hash is a str's and whose equality
#: raises), Index
#: (an int-like whose __index__ raises), Seq (a list whose items raise).
REFUSED = [
    "n.id_spans(b'{}')",
    "n.id_spans(b'{}', T, T)",
    "n.id_spans('{}', T)",
    "n.id_spans(None, T)",
    "n.id_spans(array.array('b', b'{}'), T)",
    "n.id_spans(memoryview(b'{}' * 4)[::2], T)",
    "n.id_spans(type('B', (bytes,), {})(b'{}'), T)",
    # the table
    "n.id_spans(b'{}', None)",
    "n.id_spans(b'{}', ())",
    "n.id_spans(b'{}', T[:3])",
    "n.id_spans(b'{}', T + (None,))",
    "n.id_spans(b'{}', list(T))",
    "n.id_spans(b'{}', type('T', (tuple,), {})(T))",
    "n.id_spans(b'{}', t(numbered=1))",
    "n.id_spans(b'{}', t(numbered=None))",
    "n.id_spans(b'{}', t(roots=['index']))",
    "n.id_spans(b'{}', t(roots=(b'index',)))",
    "n.id_spans(b'{}', t(roots=(Str('index'),)))",
    "n.id_spans(b'{}', t(roots=('index',) * 65))",
    # its schema
    "n.id_spans(b'{}', t(None))",
    "n.id_spans(b'{}', t(()))",
    "n.id_spans(b'{}', t(((),)))",
    "n.id_spans(b'{}', t(((), None, None)))",
    "n.id_spans(b'{}', t([(), None]))",
    "n.id_spans(b'{}', t(([], None)))",
    "n.id_spans(b'{}', t(((), 0)))",
    "n.id_spans(b'{}', t(((), ())))",
    "n.id_spans(b'{}', t(((), ([], None))))",
    "n.id_spans(b'{}', t((((b'a', 'a'),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', 0, 0),), None)))",
    "n.id_spans(b'{}', t((([b'a', 'a', 0],), None)))",
    "n.id_spans(b'{}', t(((('a', 'a', 0),), None)))",
    "n.id_spans(b'{}', t((((bytearray(b'a'), 'a', 0),), None)))",
    "n.id_spans(b'{}', t((((b'a', b'a', 0),), None)))",
    "n.id_spans(b'{}', t((((b'a', Str('a'), 0),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'b', 0),), None)))",
    "n.id_spans(b'{}', t((((b'\\xc3\\xa9', 'e', 0),), None)))",
    "n.id_spans(b'{}', t((((b'\\xed\\xa0\\x80', '\\ud800', 0),), None)))",
    "n.id_spans(b'{}', t((((b'\\xff', '\\xff', 0),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', 2),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', -1),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', 2**100),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', True),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', None),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', 0.0),), None)))",
    "n.id_spans(b'{}', t((((b'a', 'a', Index()),), None)))",
    "n.id_spans(b'{}', t(deep(300)))",
    "n.id_spans(b'{}', t(wide(40)))",
    "n.id_spans(b'{\"a\":1}', t((((b'x', 'x', 0), (b'a', 'a', ((), 7))), None)))",
    # its tree
    "n.id_spans(b'{}', t(tree=None))",
    "n.id_spans(b'{}', t(tree=()))",
    "n.id_spans(b'{}', t(tree=((), ())))",
    "n.id_spans(b'{}', t(tree=((), (), (), ())))",
    "n.id_spans(b'{}', t(tree=[(), (), ()]))",
    "n.id_spans(b'{}', t(tree=([], (), ())))",
    "n.id_spans(b'{}', t(tree=((), [], ())))",
    "n.id_spans(b'{}', t(tree=((), (), [])))",
    "n.id_spans(b'{}', t(tree=((('id',),), (), ())))",
    "n.id_spans(b'{}', t(tree=(((b'id', 0),), (), ())))",
    "n.id_spans(b'{}', t(tree=(((Str('id'), 0),), (), ())))",
    "n.id_spans(b'{}', t(tree=((('id', '0'),), (), ())))",
    "n.id_spans(b'{}', t(tree=((('id', 0.0),), (), ())))",
    "n.id_spans(b'{}', t(tree=((('id', Index()),), (), ())))",
    "n.id_spans(b'{}', t(tree=([('id', 0)], (), ())))",
    "n.id_spans(b'{}', t(tree=((), (('a',),), ())))",
    "n.id_spans(b'{}', t(tree=((), (('a', E, E),), ())))",
    "n.id_spans(b'{}', t(tree=((), ((b'a', E),), ())))",
    "n.id_spans(b'{}', t(tree=((), (('a', None),), ())))",
    "n.id_spans(b'{}', t(tree=((), (['a', E],), ())))",
    "n.id_spans(b'{}', t(tree=((), (), ((None, None, False),))))",
    "n.id_spans(b'{}', t(tree=((), (), ((None, None, False, E, E),))))",
    "n.id_spans(b'{}', t(tree=((), (), ((None, None, False, None),))))",
    "n.id_spans(b'{}', t(tree=((), (), ((None, None, 1, E),))))",
    "n.id_spans(b'{}', t(tree=((), (), ((set(), None, False, E),))))",
    "n.id_spans(b'{}', t(tree=((), (), ((None, {'a'}, False, E),))))",
    "n.id_spans(b'{}', t(tree=((), (), ((None, frozenset([1]), False, E),))))",
    'n.id_spans(b\'{"type":"function_call"}\', t(tree=((), (), ((EVIL, None, False, E),))))',
    'n.id_spans(b\'{"call_id":"c"}\', t(tree=((), (), ((None, EVIL, False, E),))))',
    "n.id_spans(b'{}', t(tree=((), (), ((None, type('F', (frozenset,), {})(), False, E),))))",
    "n.id_spans(b'{}', t(tree=((), (), ([None, None, False, E],))))",
    "n.id_spans(b'{}', t(tree=tree_deep(300)))",
    "n.id_spans(b'{}', t(tree=tree_wide(40)))",
    "n.id_spans(b'{\"a\":[{}]}', t(tree=((), (('a', ((), (), ((None, None, False, 7),))),), ())))",
    # event_ids
    "n.event_ids(D, W, 0)",
    "n.event_ids(D, W, 0, T, T)",
    "n.event_ids(D.decode(), W, 0, T)",
    "n.event_ids(None, W, 0, T)",
    "n.event_ids(array.array('b', D), W, 0, T)",
    "n.event_ids(memoryview(D * 2)[::2], W, 0, T)",
    "n.event_ids(D, list(W), 0, T)",
    "n.event_ids(D, W[0], 0, T)",
    "n.event_ids(D, (), 0, T)",
    "n.event_ids(D, (b'a',) * 65, 0, T)",
    "n.event_ids(D, (b'',), 0, T)",
    "n.event_ids(D, (b'a', b''), 0, T)",
    "n.event_ids(D, ('a',), 0, T)",
    "n.event_ids(D, (bytearray(b'a'),), 0, T)",
    "n.event_ids(D, (type('B', (bytes,), {})(b'a'),), 0, T)",
    "n.event_ids(D, (None,), 0, T)",
    "n.event_ids(D, W, -1, T)",
    "n.event_ids(D, W, -(2**100), T)",
    "n.event_ids(D, W, 1.0, T)",
    "n.event_ids(D, W, '1', T)",
    "n.event_ids(D, W, None, T)",
    "n.event_ids(D, W, True, T)",
    "n.event_ids(D, W, Index(), T)",
    "n.event_ids(D, W, 0, None)",
    "n.event_ids(D, W, 0, T[:3])",
    "n.event_ids(D, W, 0, t(None))",
    "n.event_ids(D, W, 0, t(deep(300)))",
    "n.event_ids(D, W, 0, t(tree=None))",
    "n.event_ids(D, W, 0, t(tree=tree_deep(300)))",
    "n.event_ids(D, W, 0, t(roots=('index',) * 65))",
    # first_marker
    "n.first_marker(b'a')",
    "n.first_marker(b'a', (b'a',), 1)",
    "n.first_marker(b'a', [b'a'])",
    "n.first_marker(b'a', b'a')",
    "n.first_marker(b'a', ())",
    "n.first_marker(b'a', (b'a',) * 65)",
    "n.first_marker(b'a', (b'',))",
    "n.first_marker(b'a', (b'a', b''))",
    "n.first_marker(b'a', ('a',))",
    "n.first_marker(b'a', (bytearray(b'a'),))",
    "n.first_marker(b'a', (None,))",
    "n.first_marker('a', (b'a',))",
    "n.first_marker(None, (b'a',))",
    "n.first_marker(array.array('b', b'a'), (b'a',))",
    "n.first_marker(memoryview(b'abab')[::2], (b'a',))",
    # splice
    "n.splice(b'ab')",
    "n.splice(b'ab', [], [])",
    "n.splice('ab', [])",
    "n.splice(bytearray(b'ab'), [])",
    "n.splice(memoryview(b'ab'), [])",
    "n.splice(b'ab', None)",
    "n.splice(b'ab', {})",
    "n.splice(b'ab', iter([]))",
    "n.splice(b'ab', Seq([(0, 1, b'x')]))",
    "n.splice(b'ab', [[0, 1, b'x']])",
    "n.splice(b'ab', [(0, 1)])",
    "n.splice(b'ab', [(0, 1, b'x', b'y')])",
    "n.splice(b'ab', [None])",
    "n.splice(b'ab', [(0, 1, 'x')])",
    "n.splice(b'ab', [(0, 1, bytearray(b'x'))])",
    "n.splice(b'ab', [(0, 1, memoryview(b'x'))])",
    "n.splice(b'ab', [(0, 1, None)])",
    "n.splice(b'ab', [(0.0, 1, b'x')])",
    "n.splice(b'ab', [(0, '1', b'x')])",
    "n.splice(b'ab', [(Index(), 1, b'x')])",
    "n.splice(b'ab', [(0, Index(), b'x')])",
    "n.splice(b'ab', [(-1, 1, b'x')])",
    "n.splice(b'ab', [(0, 3, b'x')])",
    "n.splice(b'ab', [(3, 3, b'x')])",
    "n.splice(b'ab', [(2, 1, b'x')])",
    "n.splice(b'ab', [(1, 2, b'x'), (0, 1, b'y')])",
    "n.splice(b'abc', [(0, 2, b'x'), (1, 3, b'y')])",
    "n.splice(b'ab', [(2**70, 2**70, b'x')])",
    "n.splice(b'ab', [(0, 2**64, b'x')])",
    "n.splice(b'ab', [(-(2**70), 1, b'x')])",
    "n.splice(b'ab', [(0, 1, b'x'), (1, 2, 'y')])",
]

_CHILD = """
import array, sys
from toolid import body, native, prune
from toolid.positions import Api, Doc
n = native.extension
T = prune.TABLES[(Api.RESPONSES, Doc.EVENT)]
S, R, E = T[0], T[1], ((), (), ())
W = body.id_markers(Api.RESPONSES, Doc.EVENT).words
D = (b'data: {"type":"response.output_item.added","output_index":0,'
     b'"item":{"type":"function_call","id":"fc_1","call_id":"c:1"}}\\n\\n')
called = []
class Str(str):
    def __hash__(self): called.append('hash'); raise AssertionError
    def __eq__(self, other): called.append('eq'); raise AssertionError
class Evil:
    def __hash__(self): return hash('function_call')
    def __eq__(self, other): called.append('eq'); raise AssertionError
class Index:
    def __index__(self): called.append('index'); return 0
    def __int__(self): called.append('int'); return 0
class Seq(list):
    def __getitem__(self, i): called.append('getitem'); raise AssertionError
    def __iter__(self): called.append('iter'); raise AssertionError
    def __len__(self): called.append('len'); raise AssertionError
EVIL = frozenset([Evil()])
def t(schema=S, tree=R, roots=T[2], numbered=T[3]):
    return (schema, tree, roots, numbered)
def deep(levels):
    node = ((), None)
    for _ in range(levels): node = (((b'a', 'a', node),), None)
    return node
def wide(levels):  # shared nodes: 3**levels paths
    node = ((), None)
    for _ in range(levels): node = (((b'a', 'a', node), (b'b', 'b', node)), node)
    return node
def tree_deep(levels):
    tree = E
    for _ in range(levels): tree = ((), (('a', tree),), ())
    return tree
def tree_wide(levels):
    tree = E
    for _ in range(levels): tree = ((), (('a', tree), ('b', tree)), ((None, None, True, tree),))
    return tree
for case in sys.stdin.read().splitlines():
    try:
        eval(case)
        print('accepted', flush=True)
    except (TypeError, ValueError) as exc:
        print(type(exc).__name__, flush=True)
print('called' if called else 'none called', *called)
"""


def _refusals(cases: list[str]) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input="\n".join(cases),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=60,
    )
    answers = run.stdout.splitlines()
    assert run.returncode == 0, f"after {cases[len(answers)]!r}: {run.stderr[-2000:]}"
    return answers


@needs_it
def test_arguments_of_the_wrong_type_or_shape_are_refused() -> None:
    answers = _refusals(REFUSED)
    assert answers[-1] == "none called"  # no __hash__, __eq__, __index__, __iter__, ...
    refused = dict(zip(REFUSED, answers, strict=False))
    assert {case: answer for case, answer in refused.items() if answer == "accepted"} == {}


@needs_it
def test_the_child_accepts_what_is_right() -> None:
    """The child's helpers are well formed: only their defects are refused."""
    cases = [
        "n.id_spans(b'{}', T)",
        "n.id_spans(b'{}', t())",
        "n.id_spans(b'{}', t(deep(150)))",
        "n.id_spans(b'{}', t(wide(6)))",
        "n.id_spans(b'{}', t((((b'\\xc3\\xa9', '\\xe9', 0),), None)))",
        "n.id_spans(b'{}', t(tree=E, roots=('index',) * 64, numbered=False))",
        "n.id_spans(b'{}', t(tree=tree_deep(150)))",
        "n.id_spans(b'{}', t(tree=tree_wide(6)))",
        "n.id_spans(b'{}', t(tree=((('id', 0, 0),), (), ((frozenset(['a']), None, False, E),))))",
        "n.event_ids(D, W, 0, T)",
        "n.event_ids(memoryview(D)[1:], W, 2**100, T)",
        "n.event_ids(bytearray(D), (b'a',) * 64, len(D), T)",
        "n.first_marker(memoryview(b'abab')[1:], (b'a',) * 64)",
        "n.splice(b'ab', [(0, 1, b'x'), (1, 2, b'y')])",
    ]
    assert _refusals(cases) == ["accepted"] * len(cases) + ["none called"]


@needs_it
def test_nothing_is_kept_or_held() -> None:
    """No reference leaks or stays (the table's, the document's), and each buffer is
    released (a bytearray can grow again)."""
    table = prune.TABLES[(Api.RESPONSES, Doc.EVENT)]
    keys = [entry[1] for entry in table[0][0]]
    words = body.id_markers(Api.RESPONSES, Doc.EVENT).words
    document = bytearray((DATA / "chat_request.json").read_bytes())
    stream = bytearray((DATA / "responses_stream.sse").read_bytes())
    text = b"new"

    def counts() -> list[int]:
        return [
            *map(sys.getrefcount, keys),
            *map(sys.getrefcount, words),
            *map(sys.getrefcount, (table, table[1], words, text)),
        ]

    before = counts()
    for _ in range(200):
        EXTENSION.id_spans(document, table)
        EXTENSION.id_spans(memoryview(document), table)
        EXTENSION.event_ids(stream, words, 10**6, table)
        EXTENSION.event_ids(memoryview(stream), words, 100, table)
        EXTENSION.first_marker(document, (b"tid1_", b'"id"'))
        EXTENSION.splice(bytes(document), [(0, 1, text), (2, 3, text)])
        with contextlib.suppress(ValueError):
            EXTENSION.splice(b"ab", [(0, 1, text), (0, 1, text)])
        with contextlib.suppress(TypeError):
            EXTENSION.event_ids(stream, words, 10**6, (*table[:3], None))
    assert counts() == before
    document += b" "  # no export is left
    stream += b" "


_NO_MEMORY = """
import _testcapi, sys
from pathlib import Path
from toolid import body, native, prune
from toolid.positions import Api, Doc
n = native.extension
T = prune.TABLES[(Api.RESPONSES, Doc.EVENT)]
W = body.id_markers(Api.RESPONSES, Doc.EVENT).words
document = Path('tests/data/chat_request.json').read_bytes()
stream = Path('tests/data/responses_stream.sse').read_bytes()
calls = [
    (n.id_spans, document, prune.TABLES[(Api.CHAT, Doc.REQUEST)]),
    (lambda data, table: n.event_ids(data, W, 10**6, table), stream, T),
    (n.first_marker, document * 4, (b'zz', b'tid1_x')),
    (n.splice, document, [(1, 2, b'x' * 300), (3, 3, b'y')]),
]
for function, first, second in calls:
    expected = function(first, second)
    for start in range(int(sys.argv[1])):
        for stop in (start + 1, 0):  # one allocation fails, or every one from start on
            _testcapi.set_nomemory(start, stop)
            try:
                got = function(first, second)
            except MemoryError:
                got = MemoryError
            finally:
                _testcapi.remove_mem_hooks()
            assert got is MemoryError or got == expected, (function, start, stop)
print('ok')
"""


@needs_it
def test_allocation_failures_raise_memory_error() -> None:
    """Each allocation made while a primitive runs fails in turn: MemoryError, or the same
    answer (in a child process: a crash fails this test only)."""
    pytest.importorskip("_testcapi")
    run = subprocess.run(
        [sys.executable, "-c", _NO_MEMORY, "300"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )
    assert (run.returncode, run.stdout) == (0, "ok\n"), run.stderr[-3000:]


# --- the module ----------------------------------------------------------------------------


@needs_it
def test_the_module_holds_only_the_four_primitives() -> None:
    public = {name for name in dir(EXTENSION) if not name.startswith("_")}
    assert public == {"id_spans", "event_ids", "first_marker", "splice"}


COMPILERS = [compiler for compiler in ("gcc", "clang") if shutil.which(compiler)]


@pytest.mark.skipif(not COMPILERS, reason="no C compiler here")
@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("level", ["-O0", "-O2"])
def test_the_source_compiles_without_a_warning(compiler: str, level: str, tmp_path: Path) -> None:
    include = sysconfig.get_paths()["include"]
    command = [compiler, level, "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{include}"]
    run = subprocess.run(
        [*command, "-c", str(SOURCE), "-o", str(tmp_path / "native.o")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr


#: "At most about 800 lines of C" (the design's bound on the native primitives); 843 with the
#: walker's calls lacking an id (null, boolean and number literals at id members, and each
#: object's brace and member count); 885 with the memo of the rows' strings and call within one
#: call (a stream names a call's id, path and type in event after event); 901 with event_ids'
#: one list of rows for a piece's events (no list and tuple per event); 914 with the byte after
#: a group's stem tested before its words (every Responses event spells the stem "response.).
MOST_LINES = 915


def test_the_source_is_small_and_uses_only_the_public_api() -> None:
    source = SOURCE.read_text()
    assert len(source.splitlines()) <= MOST_LINES
    assert re.findall(r"\b_Py\w*", source) == []


def test_the_accelerator_is_built_in_the_dev_venv() -> None:
    """scripts/test and scripts/proxy build it (setup.py); a machine without a C compiler
    runs pure Python, which the rest of the suite covers too (stdlib_only)."""
    assert native.accelerated()


def test_the_environment_can_turn_it_off() -> None:
    code = "from toolid import native\nprint(native.accelerated(), native.extension)"
    env = {**os.environ, "TOOLID_NATIVE": "off"}
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["False", "None"]
