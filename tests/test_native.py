"""The native primitives (toolid/_native.c), each against its Python twin.

- ``parse``: whatever it vouches for, the full parse (``jsonparse.loads``) reads alike: the
  ids ``positions.find_ids`` finds in the pruned document are those of the full one (key,
  value, path, role, call), and each span is the literal of its id; anything else is None.
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
from toolid import jsonparse, native, prune
from toolid.positions import Api, Doc, find_ids

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
SOURCE = REPO / "toolid" / "_native.c"
EXTENSION: Any = native.extension
needs_it = pytest.mark.skipif(EXTENSION is None, reason="the native accelerator is not built")
API_DOCS = sorted(prune.SCHEMAS, key=str)


@contextmanager
def python_only() -> Iterator[None]:
    """toolid's own Python paths (the primitives are called from EXTENSION directly)."""
    saved, native.extension = native.extension, None
    try:
        yield
    finally:
        native.extension = saved


# --- parse ---------------------------------------------------------------------------------


def _full(document: bytes) -> Any:
    try:
        return jsonparse.loads(document)
    except (ValueError, RecursionError):
        return None


def _ids(document: Any, api: Api, doc: Doc) -> list[tuple[str, str, str, str, tuple[int, ...]]]:
    return [(f.key, f.value, f.path, f.role.value, f.call) for f in find_ids(document, api, doc)]


def assert_vouched(document: bytes, api: Api, doc: Doc) -> bool:
    """If ``parse`` reads ``document``, it is JSON, the ids read off the pruned document are
    those of a full parse, and each span is the literal of its id. Whether it read it."""
    result = EXTENSION.parse(document, prune.SCHEMAS[(api, doc)])
    if result is None:
        return False
    parsed, spans = result
    full = _full(document)
    assert full is not None, "vouched for a document that does not parse"
    with python_only():
        assert _ids(parsed, api, doc) == _ids(full, api, doc)
        with stdlib_only():
            assert _ids(parsed, api, doc) == _ids(full, api, doc)
        for found in find_ids(parsed, api, doc):
            start, end = spans[(id(found.holder), found.key)]
            assert document[start : start + 1] == document[end - 1 : end] == b'"'
            assert json.loads(document[start:end]) == found.value
    if doc is Doc.REQUEST:
        assert (parsed.get("stream") is True) == (full.get("stream") is True)
    return True


def _corpus() -> list[bytes]:
    """Every document the repository holds: tests/data, its transcript, the data of its
    streams and of tests/streams.py's, with every raw id and spacing."""
    documents = [path.read_bytes() for path in sorted(DATA.glob("*.json"))]
    documents += (DATA / "transcript.jsonl").read_bytes().splitlines()
    bodies = [path.read_bytes() for path in sorted(DATA.glob("*.sse"))]
    for api in Api:
        for raw in (*streams.RAW_IDS, *streams.CONFORMING_IDS):
            for style in ("compact", "spaced", "pretty"):
                bodies.append(streams.render(streams.events_for(api, raw), style=style))
    for body in bodies:
        documents += [b"\n".join(group) for group in streams.data_groups(body)]
    return documents


CORPUS = _corpus()


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
    parsed, spans = EXTENSION.parse(document, prune.SCHEMAS[(api, doc)])
    with python_only():
        assert len(find_ids(parsed, api, doc)) > 0
    assert spans


@needs_it
@fuzz(ci=300, long=5000)
@given(case=chaos_case())
def test_documents_spelled_every_way(case: Any) -> None:
    document, api, doc, _, _ = case
    assert_vouched(document, api, doc)
    for other in API_DOCS:  # and read with every other schema
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
        b'{"messages":[{"content":"\\ud800"}]}',  # a lone surrogate escape, even skipped
        b'{"messages":[{"content":"\xed\xa0\x80"}]}',  # a raw surrogate
        b'{"messages":[{"content":NaN}]}',
        b'{"messages":[{"index":123456789012345678901234}]}',  # beyond 64 bits, kept
        b'{"stream":1234567890123456789}',  # 19 digits, kept
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
    assert EXTENSION.parse(document, prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)]) is None


@needs_it
def test_how_deep_it_goes() -> None:
    schema = prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)]
    for depth in (198, 199, 200, 201):  # the root object is level 1
        document = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
        assert (EXTENSION.parse(document, schema) is None) == (depth > 199)


@needs_it
def test_what_a_pruned_request_keeps() -> None:
    document = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [
                {"role": "user", "content": "hi " * 100},
                {"role": "assistant", "tool_calls": [{"id": "x:1", "type": "function"}]},
                {"role": "tool", "tool_call_id": "x:1", "content": '{"id": "x:1"}'},
                [1, "a", {"tool_call_id": "y"}],
            ],
        }
    ).encode()
    parsed, spans = EXTENSION.parse(document, prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)])
    assert parsed == {
        "stream": True,
        "messages": [
            {},
            {"tool_calls": [{"id": "x:1", "type": "function"}]},
            {"tool_call_id": "x:1"},
            None,
        ],
    }
    first = document.find(b'"x:1"')
    second = document.find(b'"x:1"', first + 1)
    assert sorted(spans.values()) == [(first, first + 5), (second, second + 5)]
    message = parsed["messages"][2]
    assert spans[(id(message), "tool_call_id")] == (second, second + 5)


@needs_it
def test_what_a_schema_keeps_of_each_value() -> None:
    leaf, keep = prune.LEAF, prune.KEEP
    inner: prune.Node = (((b"k", "k", keep),), None)
    listed: prune.Node = ((), inner)  # arrays of objects read as inner
    schema: prune.Node = (
        ((b"l", "l", leaf), (b"k", "k", keep), (b"n", "n", listed), (b"\xc3\xa9", "é", keep)),
        None,
    )
    document = '{"l":"a","k":-12,"n":[{"k":true,"x":1},{"k":1.5},2],"é":"ü","z":{"k":1}}'
    parsed, spans = EXTENSION.parse(document.encode(), schema)
    assert parsed == {"l": "a", "k": -12, "n": [{"k": True}, {"k": None}, None], "é": "ü"}
    assert list(spans) == [(id(parsed), "l")]
    for value, kept in [("1", 1), ("null", None), ("false", False), ('"\\n"', "?"), ("{}", None)]:
        result = EXTENSION.parse(f'{{"k":{value}}}'.encode(), schema)
        assert (result and result[0]) == ({"k": kept} if kept != "?" else None)


@needs_it
def test_any_document_buffer_reads_alike() -> None:
    document = (DATA / "chat_request.json").read_bytes()
    schema = prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)]
    expected = EXTENSION.parse(document, schema)
    for buffer in (bytearray(document), memoryview(document), memoryview(b"xx" + document)[2:]):
        parsed, spans = EXTENSION.parse(buffer, schema)
        assert parsed == expected[0] and sorted(spans.values()) == sorted(expected[1].values())


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
#: names: n (the extension), S (a real schema), Str (a str whose hash and equality raise),
#: Index (an int-like whose __index__ raises), Seq (a list whose items raise).
REFUSED = [
    "n.parse(b'{}')",
    "n.parse(b'{}', S, S)",
    "n.parse('{}', S)",
    "n.parse(None, S)",
    "n.parse(array.array('b', b'{}'), S)",
    "n.parse(memoryview(b'{}' * 4)[::2], S)",
    "n.parse(type('B', (bytes,), {})(b'{}'), S)",
    "n.parse(b'{}', None)",
    "n.parse(b'{}', ())",
    "n.parse(b'{}', ((),))",
    "n.parse(b'{}', ((), None, None))",
    "n.parse(b'{}', [(), None])",
    "n.parse(b'{}', ([], None))",
    "n.parse(b'{}', ((), 0))",
    "n.parse(b'{}', ((), ()))",
    "n.parse(b'{}', ((), ([], None)))",
    "n.parse(b'{}', (((b'a', 'a'),), None))",
    "n.parse(b'{}', (((b'a', 'a', 0, 0),), None))",
    "n.parse(b'{}', (([b'a', 'a', 0],), None))",
    "n.parse(b'{}', ((('a', 'a', 0),), None))",
    "n.parse(b'{}', (((bytearray(b'a'), 'a', 0),), None))",
    "n.parse(b'{}', (((b'a', b'a', 0),), None))",
    "n.parse(b'{}', (((b'a', Str('a'), 0),), None))",
    "n.parse(b'{}', (((b'a', 'b', 0),), None))",
    "n.parse(b'{}', (((b'\\xc3\\xa9', 'e', 0),), None))",
    "n.parse(b'{}', (((b'\\xed\\xa0\\x80', '\\ud800', 0),), None))",
    "n.parse(b'{}', (((b'\\xff', '\\xff', 0),), None))",
    "n.parse(b'{}', (((b'a', 'a', 2),), None))",
    "n.parse(b'{}', (((b'a', 'a', -1),), None))",
    "n.parse(b'{}', (((b'a', 'a', 2**100),), None))",
    "n.parse(b'{}', (((b'a', 'a', True),), None))",
    "n.parse(b'{}', (((b'a', 'a', None),), None))",
    "n.parse(b'{}', (((b'a', 'a', 0.0),), None))",
    "n.parse(b'{}', (((b'a', 'a', Index()),), None))",
    "n.parse(b'{}', deep(300))",
    "n.parse(b'{}', wide(40))",
    "n.parse(b'{\"a\":1}', (((b'x', 'x', 0), (b'a', 'a', ((), 7))), None))",
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
from toolid import native, prune
n = native.extension
S = prune.SCHEMAS[next(iter(prune.SCHEMAS))]
called = []
class Str(str):
    def __hash__(self): called.append('hash'); raise AssertionError
    def __eq__(self, other): called.append('eq'); raise AssertionError
class Index:
    def __index__(self): called.append('index'); return 0
    def __int__(self): called.append('int'); return 0
class Seq(list):
    def __getitem__(self, i): called.append('getitem'); raise AssertionError
    def __iter__(self): called.append('iter'); raise AssertionError
    def __len__(self): called.append('len'); raise AssertionError
def deep(levels):
    node = ((), None)
    for _ in range(levels): node = (((b'a', 'a', node),), None)
    return node
def wide(levels):  # shared nodes: 3**levels paths
    node = ((), None)
    for _ in range(levels): node = (((b'a', 'a', node), (b'b', 'b', node)), node)
    return node
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
        "n.parse(b'{}', S)",
        "n.parse(b'{}', deep(150))",
        "n.parse(b'{}', wide(6))",
        "n.parse(b'{}', (((b'\\xc3\\xa9', '\\xe9', 0),), None))",
        "n.first_marker(memoryview(b'abab')[1:], (b'a',) * 64)",
        "n.splice(b'ab', [(0, 1, b'x'), (1, 2, b'y')])",
    ]
    assert _refusals(cases) == ["accepted"] * len(cases) + ["none called"]


@needs_it
def test_nothing_is_kept_or_held() -> None:
    """No reference leaks or stays (the schema's, the document's), and each buffer is
    released (a bytearray can grow again)."""
    schema = prune.SCHEMAS[(Api.CHAT, Doc.REQUEST)]
    keys = [entry[1] for entry in schema[0]]
    document = bytearray((DATA / "chat_request.json").read_bytes())
    text = b"new"
    before = [sys.getrefcount(k) for k in keys], sys.getrefcount(schema), sys.getrefcount(text)
    for _ in range(200):
        EXTENSION.parse(document, schema)
        EXTENSION.parse(memoryview(document), schema)
        EXTENSION.first_marker(document, (b"tid1_", b'"id"'))
        EXTENSION.splice(bytes(document), [(0, 1, text), (2, 3, text)])
        with contextlib.suppress(ValueError):
            EXTENSION.splice(b"ab", [(0, 1, text), (0, 1, text)])
    after = [sys.getrefcount(k) for k in keys], sys.getrefcount(schema), sys.getrefcount(text)
    assert before == after
    document += b" "  # no export is left


_NO_MEMORY = """
import _testcapi, sys
from pathlib import Path
from toolid import native, prune
n = native.extension
S = prune.SCHEMAS[('chat', 'request')]
document = Path('tests/data/chat_request.json').read_bytes()
calls = [
    (n.parse, document, S),
    (n.first_marker, document * 4, (b'zz', b'tid1_x')),
    (n.splice, document, [(1, 2, b'x' * 300), (3, 3, b'y')]),
]
def same(got):  # the spans' keys are ids, new each time
    return (got[0], sorted(got[1].values())) if type(got) is tuple else got
for function, first, second in calls:
    expected = same(function(first, second))
    for start in range(int(sys.argv[1])):
        for stop in (start + 1, 0):  # one allocation fails, or every one from start on
            _testcapi.set_nomemory(start, stop)
            try:
                got = function(first, second)
            except MemoryError:
                got = MemoryError
            finally:
                _testcapi.remove_mem_hooks()
            assert got is MemoryError or same(got) == expected, (function, start, stop)
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
def test_the_module_holds_only_the_three_primitives() -> None:
    public = {name for name in dir(EXTENSION) if not name.startswith("_")}
    assert public == {"parse", "first_marker", "splice"}


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


def test_the_source_is_small_and_uses_only_the_public_api() -> None:
    source = SOURCE.read_text()
    assert len(source.splitlines()) <= 800
    assert re.findall(r"\b_Py\w*", source) == []


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
