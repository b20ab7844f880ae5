"""StreamRewriter (toolid.stream): SSE bodies fed in arbitrary pieces, compressed or not."""

from __future__ import annotations

import gzip
import itertools
import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import brotli
import pytest
from backports import zstd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import streams
from toolid import body, native
from toolid.body import Direction, Policy, RewriteError
from toolid.codec import encode
from toolid.occurrence import CallIds, Taken
from toolid.positions import Api, Doc
from toolid.stream import StreamRewriter

ENCODE = Policy(Direction.ENCODE)
DECODE = Policy(Direction.DECODE)
KIMI = "functions.get_weather:0"
EOLS = {"lf": streams.LF, "crlf": streams.CRLF}


def run(
    pieces: Iterable[bytes],
    api: Api | None = None,
    policy: Policy = ENCODE,
    **kwargs: Any,
) -> tuple[bytes, StreamRewriter]:
    """Feed ``pieces`` to a fresh rewriter; return everything it forwarded, and the rewriter."""
    rewriter = StreamRewriter(api, policy, **kwargs)
    out = b"".join(rewriter.feed(piece) for piece in pieces)
    return out + rewriter.finish(), rewriter


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def buffered(api: Api, policy: Policy = ENCODE) -> Callable[[bytes], bytes]:
    """The buffered rewrite of one event's data, the client ids of the calls of all of them
    given once (one ``CallIds``): what the stream must do event by event."""
    calls = CallIds(policy.profile)

    def rewrite(document: bytes) -> bytes:
        try:
            return body.rewrite(document, api, Doc.EVENT, policy, calls)[0]
        except RewriteError:
            return document

    return rewrite


def chat_tool_event(raw_id: str, eol: str = streams.LF, index: int = 0) -> bytes:
    """The first chunk of a tool call ``index`` (a call of its own in one stream)."""
    event = streams.chat_events(raw_id)[2]
    event["data"]["choices"][0]["delta"]["tool_calls"][0]["index"] = index
    return streams.render_event(event, eol=eol)


# --- the recorded streams, as hypothesis cases ------------------------------------------------


@dataclass(frozen=True)
class Case:
    api: Api
    raw: str
    eol: str = streams.LF
    style: streams.Style = "compact"
    ensure_ascii: bool = False
    bom: bool = False
    odd_item_id: bool = False  # Responses: the item id is non-conforming too
    detect: bool = False  # give the rewriter no API: it must recognise the stream's shape

    @property
    def second(self) -> str:
        return "get_time:1#" + self.raw

    @property
    def item(self) -> str:
        return "fc:" + self.raw if self.odd_item_id else streams.ITEM_ID

    def events(self, ids: Callable[[str], str] = lambda raw: raw) -> list[streams.Event]:
        """The fixture events, with every id passed through ``ids``."""
        if self.api is Api.CHAT:
            return streams.chat_events(ids(self.raw), second_id=ids(self.second))
        if self.api is Api.RESPONSES:
            return streams.responses_events(ids(self.raw), item_id=ids(self.item))
        if self.api is Api.CONVERSE:
            return streams.converse_events(ids(self.raw))
        if self.api is Api.GEMINI:
            return streams.gemini_events(ids(self.raw), second_id=ids(self.second))
        return streams.messages_events(ids(self.raw))

    def render_events(
        self,
        ids: Callable[[str], str] = lambda raw: raw,
        transform: Callable[[bytes], bytes] | None = None,
    ) -> list[bytes]:
        return streams.render_events(
            self.events(ids),
            bom=self.bom,
            eol=self.eol,
            style=self.style,
            ensure_ascii=self.ensure_ascii,
            transform=transform,
        )

    def body(self) -> bytes:
        return b"".join(self.render_events())

    def expected(self) -> bytes:
        """Independent oracle: the same stream, built with the client ids."""
        return b"".join(self.render_events(encode))

    def rewriter_api(self) -> Api | None:
        return None if self.detect else self.api


RAW_ID = st.sampled_from(streams.RAW_IDS) | st.text(max_size=8)


@st.composite
def cases(draw: st.DrawFn, raw: st.SearchStrategy[str] = RAW_ID) -> Case:
    return Case(
        api=draw(st.sampled_from(list(Api))),
        raw=draw(raw),
        eol=draw(st.sampled_from([streams.LF, streams.CRLF, streams.CR])),
        style=draw(st.sampled_from(["compact", "spaced", "pretty"])),
        ensure_ascii=draw(st.booleans()),
        bom=draw(st.booleans()),
        odd_item_id=draw(st.booleans()),
        detect=draw(st.booleans()),
    )


@settings(max_examples=120, deadline=None)
@given(case=cases(), cuts=st.lists(st.integers(min_value=0), max_size=25))
def test_any_split_gives_the_buffered_rewrite(case: Case, cuts: list[int]) -> None:
    source = case.body()
    api = case.rewriter_api()
    whole, whole_rw = run([source], api)
    split, split_rw = run(split_at(source, cuts), api)
    single, single_rw = run(bytewise(source), api)
    assert whole == split == single
    # Event by event, the stream equals the buffered rewrite of each event's data ...
    assert whole == b"".join(case.render_events(transform=buffered(case.api)))
    # ... and the stream the upstream would have sent with the client ids.
    assert whole == case.expected()
    for rewriter in (whole_rw, split_rw, single_rw):
        assert rewriter.problems == []
        assert rewriter.changes == whole_rw.changes
        assert rewriter.decodes is False


@settings(max_examples=60, deadline=None)
@given(case=cases())
def test_client_ids_in_every_event_that_carries_one(case: Case) -> None:
    source = case.body()
    out, rewriter = run(bytewise(source), case.rewriter_api())
    before = streams.parse_stream(source)
    after = streams.parse_stream(out)
    assert len(before) == len(after)
    seen: dict[str, set[str]] = {}
    carrying = 0
    for old, new in zip(before, after, strict=True):
        assert new.event == old.event
        if old.data == "[DONE]":
            assert new.data == "[DONE]"
            continue
        old_ids = list(streams.tool_ids(case.api, json.loads(old.data)))
        new_ids = list(streams.tool_ids(case.api, json.loads(new.data)))
        assert [(path, encode(raw)) for path, raw in old_ids] == new_ids
        for (_, raw), (_, client) in zip(old_ids, new_ids, strict=True):
            seen.setdefault(raw, set()).add(client)
        carrying += any(raw in (case.raw, case.item, case.second) for _, raw in old_ids)
        if not old_ids:
            assert new.data == old.data
    # One raw id, one client id, everywhere it occurs.
    assert all(clients == {encode(raw)} for raw, clients in seen.items())
    carries = {Api.CHAT: 2, Api.RESPONSES: 8, Api.MESSAGES: 1, Api.CONVERSE: 1, Api.GEMINI: 2}
    assert carrying == carries[case.api]
    encoded = [raw for raw in seen if encode(raw) != raw]
    assert {c.raw for c in rewriter.changes} == set(encoded)
    assert all(c.client == encode(c.raw) and c.action == "encoded" for c in rewriter.changes)


@pytest.mark.parametrize("api", list(Api))
@pytest.mark.parametrize("eol", [streams.LF, streams.CRLF, streams.CR], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("raw", streams.RAW_IDS + streams.CONFORMING_IDS)
def test_each_event_goes_out_when_complete_and_unrelated_ones_byte_for_byte(
    api: Api, eol: str, raw: str
) -> None:
    case = Case(api=api, raw=raw, eol=eol, odd_item_id=True)
    rewriter = StreamRewriter(api, ENCODE)
    changed = 0
    for event, want in zip(case.render_events(), case.render_events(encode), strict=True):
        out = rewriter.feed(event)
        assert out == want
        if want != event:
            changed += 1
    assert rewriter.finish() == b""
    # A conforming raw id: only the second call's id and the odd item id change.
    seconds = {Api.CHAT: 1, Api.RESPONSES: 8, Api.MESSAGES: 0, Api.CONVERSE: 0, Api.GEMINI: 1}
    every = {Api.CHAT: 2, Api.RESPONSES: 8, Api.MESSAGES: 1, Api.CONVERSE: 1, Api.GEMINI: 2}
    assert changed == (seconds if raw in streams.CONFORMING_IDS else every)[api]


@pytest.mark.parametrize("raw", [KIMI, "", "tid1_x", "call_AbC123xyz"])
def test_chat_deltas_without_an_id_still_have_none(raw: str) -> None:
    case = Case(api=Api.CHAT, raw=raw)
    out, _ = run(chunks(case.body(), 5), Api.CHAT)
    before = streams.parse_stream(case.body())
    after = streams.parse_stream(out)
    with_id = 0
    for old, new in zip(before, after, strict=True):
        if old.data == "[DONE]":
            continue
        old_calls = [
            call
            for choice in json.loads(old.data)["choices"]
            for call in choice["delta"].get("tool_calls", [])
        ]
        new_calls = [
            call
            for choice in json.loads(new.data)["choices"]
            for call in choice["delta"].get("tool_calls", [])
        ]
        assert [("id" in call) for call in old_calls] == [("id" in call) for call in new_calls]
        for old_call, new_call in zip(old_calls, new_calls, strict=True):
            assert new_call.keys() == old_call.keys()
            assert new_call.get("function") == old_call.get("function")
            with_id += "id" in new_call
    assert with_id == 2


def test_text_only_stream_passes_byte_for_byte() -> None:
    for eol in (streams.LF, streams.CRLF, streams.CR):
        source = streams.text_stream(eol=eol)
        for api in (Api.CHAT, None):
            out, rewriter = run(bytewise(source), api)
            assert out == source
            assert rewriter.changes == []
            assert rewriter.problems == []


@settings(max_examples=40, deadline=None)
@given(
    case=cases(raw=st.sampled_from(streams.RAW_IDS) | st.text(st.characters(codec="utf-8"))),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
)
def test_decoding_the_client_stream_gives_back_the_upstream_bytes(
    case: Case, cuts: list[int]
) -> None:
    case = Case(**{**case.__dict__, "ensure_ascii": False})
    source = case.body()
    encoded, _ = run(split_at(source, cuts), case.api)
    restored, rewriter = run(split_at(encoded, cuts), case.api, DECODE)
    assert restored == source
    assert rewriter.problems == []


# --- the changes list -------------------------------------------------------------------------


def test_changes_name_each_chat_position() -> None:
    source = streams.render(streams.chat_events(KIMI, second_id="get_time:1"))
    _, rewriter = run(chunks(source, 3), Api.CHAT)
    assert [(c.path, c.raw, c.client, c.action) for c in rewriter.changes] == [
        ("choices[0].delta.tool_calls[0].id", KIMI, encode(KIMI), "encoded"),
        # The second call's first delta holds one entry (index 1) at list position 0.
        ("choices[0].delta.tool_calls[0].id", "get_time:1", encode("get_time:1"), "encoded"),
    ]


def two_calls_in_one_delta(first: str, second: str) -> list[streams.Event]:
    chunk = streams.chat_events(first)[2]["data"]
    calls = chunk["choices"][0]["delta"]["tool_calls"]
    calls.append({**calls[0], "index": 1, "id": second})
    return [{"data": chunk}, {"data": "[DONE]"}]


def test_changes_name_two_calls_in_one_chat_delta() -> None:
    source = streams.render(two_calls_in_one_delta(KIMI, "get_time:1"))
    out, rewriter = run(bytewise(source), None)
    assert [c.path for c in rewriter.changes] == [
        "choices[0].delta.tool_calls[0].id",
        "choices[0].delta.tool_calls[1].id",
    ]
    assert out == streams.render(two_calls_in_one_delta(encode(KIMI), encode("get_time:1")))


def test_changes_name_each_responses_position() -> None:
    raw_item = "fc:" + KIMI
    source = streams.responses_stream(KIMI, item_id=raw_item, eol=streams.CRLF)
    _, rewriter = run(chunks(source, 11), Api.RESPONSES)
    call, item = (KIMI, encode(KIMI)), (raw_item, encode(raw_item))
    assert Counter((c.path, c.raw, c.client) for c in rewriter.changes) == Counter(
        {
            ("item.call_id", *call): 2,  # output_item.added and output_item.done
            ("item.id", *item): 2,
            ("item_id", *item): len(streams.ARG_FRAGMENTS) + 1,  # deltas and .done
            ("response.output[1].call_id", *call): 1,  # response.completed
            ("response.output[1].id", *item): 1,
        }
    )
    # Only the call_id changes when the item id is an ordinary fc_ id.
    _, rewriter = run([streams.responses_stream(KIMI)], Api.RESPONSES)
    assert [c.path for c in rewriter.changes] == [
        "item.call_id",
        "item.call_id",
        "response.output[1].call_id",
    ]


def test_changes_name_the_messages_position() -> None:
    _, rewriter = run([streams.messages_stream(KIMI)], None)
    assert [(c.path, c.raw, c.client, c.action) for c in rewriter.changes] == [
        ("content_block.id", KIMI, encode(KIMI), "encoded")
    ]
    assert rewriter.api is Api.MESSAGES


def test_conforming_ids_make_no_changes() -> None:
    for api in Api:
        for raw in streams.CONFORMING_IDS:
            source = streams.render(streams.events_for(api, raw))
            out, rewriter = run(chunks(source, 2), api)
            assert out == source
            assert rewriter.changes == []


def test_ids_outside_the_positions_are_left_alone() -> None:
    """Chunk ids, message ids, response ids and item ids of messages are not tool-call ids."""
    chat = streams.chat_events(KIMI)
    for event in chat[:-1]:
        event["data"]["id"] = "chatcmpl:not-a-tool-id"
    messages = streams.messages_events("toolu_01")
    messages[1]["data"]["message"]["id"] = "msg:not-a-tool-id"
    responses = streams.responses_events("call_1")
    for event in responses:
        if "response" in event["data"]:
            event["data"]["response"]["id"] = "resp:not-a-tool-id"
    out, rewriter = run([streams.render(messages)], Api.MESSAGES)
    assert out == streams.render(messages)
    assert rewriter.changes == []
    out, rewriter = run([streams.render(responses)], Api.RESPONSES)
    assert out == streams.render(responses)
    assert rewriter.changes == []
    out, rewriter = run([streams.render(chat)], Api.CHAT)
    assert out == streams.render(streams.chat_events(encode(KIMI))).replace(
        streams.CHAT_ID.encode(), b"chatcmpl:not-a-tool-id"
    )
    assert [c.raw for c in rewriter.changes] == [KIMI]


# --- framing details seen through the rewriter ------------------------------------------------


def test_json_split_across_data_lines_between_members() -> None:
    event = (
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,\n'
        b'data: "id":"functions.get_weather:0","type":"function"}]}}]}\n\n'
    )
    out, rewriter = run(bytewise(event), Api.CHAT)
    assert out == event.replace(b"functions.get_weather:0", encode(KIMI).encode())
    assert [c.path for c in rewriter.changes] == ["choices[0].delta.tool_calls[0].id"]


@pytest.mark.parametrize("api", [Api.CHAT, None])
def test_json_split_across_data_lines_between_key_and_value(api: Api | None) -> None:
    event = (
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":\n'
        b'data: "functions.get_weather:0","type":"function"}]}}]}\n\n'
    )
    # The joined data is valid JSON, and the buffered rewrite does change it.
    document = b"\n".join(line.removeprefix(b"data: ") for line in event.split(b"\n")[:2])
    assert json.loads(document)["choices"][0]["delta"]["tool_calls"][0]["id"] == KIMI
    assert body.rewrite(document, Api.CHAT, Doc.EVENT, ENCODE)[0] != document
    out, rewriter = run([event], api)
    assert out == event.replace(b"functions.get_weather:0", encode(KIMI).encode())
    assert len(rewriter.changes) == 1


@pytest.mark.parametrize("eol", EOLS.values(), ids=EOLS.keys())
def test_bom_before_the_first_event(eol: str) -> None:
    events = streams.chat_events(KIMI)[2:]  # the first event carries the id
    source = streams.render(events, bom=True, eol=eol)
    out, rewriter = run(bytewise(source), Api.CHAT)
    assert out == streams.render(streams.chat_events(encode(KIMI))[2:], bom=True, eol=eol)
    assert out.startswith(streams.BOM)
    assert len(rewriter.changes) == 1
    # A BOM anywhere else is not skipped: that line is no data line.
    later = chat_tool_event("x:1") + streams.BOM + chat_tool_event(KIMI)
    out, rewriter = run([later], Api.CHAT)
    assert out == chat_tool_event(encode("x:1")) + streams.BOM + chat_tool_event(KIMI)


def test_stream_ending_mid_event_returns_the_tail_unchanged() -> None:
    complete = chat_tool_event(KIMI)
    partial = chat_tool_event("get_time:1")[:-1]  # its blank line never comes
    rewriter = StreamRewriter(Api.CHAT, ENCODE)
    forwarded = b"".join(rewriter.feed(piece) for piece in chunks(complete + partial, 9))
    assert forwarded == chat_tool_event(encode(KIMI))
    assert rewriter.finish() == partial
    assert [c.raw for c in rewriter.changes] == [KIMI]


def test_done_comment_and_non_json_events_pass() -> None:
    source = (
        b": keep-alive\n\nretry: 3000\n\ndata: [DONE]\n\ndata: hello world\n\n"
        b'event: error\ndata: {"error": {"message": "overloaded"}}\n\n'
    )
    for api in (*Api, None):
        out, rewriter = run(bytewise(source), api)
        assert out == source
        assert rewriter.problems == []
        assert rewriter.changes == []


def test_unparsable_event_with_an_id_is_forwarded_and_reported() -> None:
    broken = b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"functions.x:0"}\n\n'
    good = chat_tool_event(KIMI)
    out, rewriter = run(chunks(broken + good, 4), Api.CHAT)
    assert out == broken + chat_tool_event(encode(KIMI))
    assert [problem.code for problem in rewriter.problems] == ["unrewritable"]
    assert "JSON" in rewriter.problems[0].message
    # Without a known API a non-JSON event is simply not ours: no problem.
    out, rewriter = run([broken + good], None)
    assert out == broken + chat_tool_event(encode(KIMI))
    assert rewriter.problems == []


# --- arbitrary input --------------------------------------------------------------------------

NOISE = st.sampled_from(
    [
        b"\n",
        b"\r",
        b"\r\n",
        b"data: ",
        b"data:",
        b"event: x\n",
        b": c\n",
        b"\xef\xbb\xbf",
        b'{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"f.x:0"}]}}]}',
        b'{"choices":[{"delta":{"tool_calls":[{"id":""}]}}]}',
        b'{"type":"content_block_start","content_block":{"type":"tool_use","id":"a:b"}}',
        b'{"type":"response.function_call_arguments.delta","item_id":"fc:1"}',
        b'"id":"x.y"',
        b'"call_id":',
        b"{",
        b"}",
        b"[DONE]",
        b"\\",
        b'"',
    ]
)
ARBITRARY = st.lists(NOISE | st.binary(max_size=6), max_size=30).map(b"".join) | st.binary()


@settings(max_examples=300, deadline=None)
@given(
    data=ARBITRARY,
    cuts=st.lists(st.integers(min_value=0), max_size=15),
    api=st.sampled_from([None, *Api]),
)
def test_arbitrary_bytes_never_raise(data: bytes, cuts: list[int], api: Api | None) -> None:
    whole, whole_rw = run([data], api)
    split, split_rw = run(split_at(data, cuts), api)
    assert split == whole
    assert split_rw.changes == whole_rw.changes
    assert split_rw.problems == whole_rw.problems
    if not whole_rw.changes:
        assert whole == data
    if b"id" not in data:  # every id key ends in "id": nothing can change
        assert whole_rw.changes == []


@settings(max_examples=100, deadline=None)
@given(
    data=st.binary(),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    encoding=st.sampled_from(["gzip", "deflate", "br", "zstd"]),
)
def test_garbage_compressed_streams_never_raise(
    data: bytes, cuts: list[int], encoding: str
) -> None:
    out, rewriter = run(split_at(data, cuts), Api.CHAT, content_encoding=encoding)
    assert isinstance(out, bytes)
    assert rewriter.decodes is True


# --- compression ------------------------------------------------------------------------------


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush()


def flushed_gzip(data: bytes) -> bytes:
    """gzip written event by event with Z_SYNC_FLUSH, as a streaming server does."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    out = b"".join(
        compressor.compress(piece) + compressor.flush(zlib.Z_SYNC_FLUSH)
        for piece in chunks(data, 300)
    )
    return out + compressor.flush()


COMPRESSORS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": ("gzip", gzip.compress),
    "gzip-flushed": ("gzip", flushed_gzip),
    "x-gzip": ("x-gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),
    "deflate-raw": ("deflate", raw_deflate),
    "br": ("br", brotli.compress),
    "zstd": ("zstd", zstd.compress),
    "zstd-two-frames": ("zstd", lambda data: zstd.compress(data[:500]) + zstd.compress(data[500:])),
    "upper-case": ("GZIP", gzip.compress),
}


@pytest.mark.parametrize("name", COMPRESSORS)
@pytest.mark.parametrize("api", list(Api))
@pytest.mark.parametrize("piece", [1, 7, 100])
def test_compressed_streams_give_the_identity_output(name: str, api: Api, piece: int) -> None:
    encoding, compress = COMPRESSORS[name]
    source = streams.render(streams.events_for(api, KIMI), eol=streams.CRLF)
    identity, identity_rw = run([source], api)
    out, rewriter = run(chunks(compress(source), piece), api, content_encoding=encoding)
    assert rewriter.decodes is True
    assert out == identity
    assert out != source  # the id was rewritten
    assert rewriter.problems == []
    assert rewriter.changes == identity_rw.changes


@pytest.mark.parametrize("encoding", ["", "identity", "Identity "])
def test_identity_encoding_does_not_decode(encoding: str) -> None:
    source = streams.chat_stream(KIMI)
    out, rewriter = run([source], Api.CHAT, content_encoding=encoding)
    assert rewriter.decodes is False
    assert out == streams.chat_stream(encode(KIMI))


@pytest.mark.parametrize("encoding", ["compress", "xz", "gzip, br", "br;q=1", "chunked"])
def test_unsupported_content_encoding_raises_from_the_constructor(encoding: str) -> None:
    with pytest.raises(ValueError, match="content-encoding"):
        StreamRewriter(Api.CHAT, ENCODE, content_encoding=encoding)


def test_multi_member_gzip() -> None:
    source = streams.chat_stream(KIMI)
    half = len(source) // 2
    compressed = gzip.compress(source[:half]) + gzip.compress(source[half:])
    assert gzip.decompress(compressed) == source
    out, rewriter = run(chunks(compressed, 50), Api.CHAT, content_encoding="gzip")
    assert out == streams.chat_stream(encode(KIMI)) or rewriter.problems


def test_gzip_with_a_bad_header_is_passed_through_raw() -> None:
    """Not gzip at all: a problem, then the bytes exactly as they came (still compressed)."""
    bad = b"\x00\x00" + gzip.compress(streams.chat_stream(KIMI))[2:]
    rewriter = StreamRewriter(Api.CHAT, ENCODE, content_encoding="gzip")
    outs = [rewriter.feed(piece) for piece in chunks(bad, 10)]
    assert b"".join(outs) == bad
    assert outs == chunks(bad, 10)  # every piece forwarded as soon as it came
    assert rewriter.finish() == b""
    assert len(rewriter.problems) == 1
    assert rewriter.problems[0].message.startswith("cannot decompress")
    assert rewriter.problems[0].code == "compressed-corrupt"
    assert rewriter.changes == []


def test_gzip_with_a_bad_checksum() -> None:
    """The whole body decodes and is rewritten; the failing piece is forwarded raw."""
    source = streams.chat_stream(KIMI)
    good = gzip.compress(source)
    bad = good[:-8] + bytes(b ^ 0xFF for b in good[-8:-4]) + good[-4:]  # CRC32 flipped
    rewriter = StreamRewriter(Api.CHAT, ENCODE, content_encoding="gzip")
    first = rewriter.feed(bad[:-8])
    assert first == streams.chat_stream(encode(KIMI))
    assert rewriter.feed(bad[-8:]) == bad[-8:]
    assert rewriter.feed(b"more") == b"more"  # after the problem: pass-through
    assert rewriter.finish() == b""
    assert len(rewriter.problems) == 1
    assert "incorrect data check" in rewriter.problems[0].message


def test_gzip_failing_mid_event_forwards_the_held_tail_first() -> None:
    """Giving up forwards the decoded but incomplete event as is, then the raw bytes."""
    tail = b'data: {"choices":[{"delta":{"tool_calls":[{"index":1,"id":"x:1"'
    good = gzip.compress(streams.chat_stream(KIMI) + tail)
    bad = good[:-8] + bytes(b ^ 0xFF for b in good[-8:-4]) + good[-4:]
    rewriter = StreamRewriter(Api.CHAT, ENCODE, content_encoding="gzip")
    assert rewriter.feed(bad[:-8]) == streams.chat_stream(encode(KIMI))
    assert rewriter.feed(bad[-8:]) == tail + bad[-8:]
    assert rewriter.finish() == b""
    assert len(rewriter.problems) == 1


def test_truncated_gzip_reports_at_finish() -> None:
    source = streams.chat_stream(KIMI)
    truncated = gzip.compress(source)[:-30]
    plain_prefix = zlib.decompressobj(31).decompress(truncated)
    assert source.startswith(plain_prefix)
    expected, _ = run([plain_prefix], Api.CHAT)  # complete events rewritten, the tail as is
    out, rewriter = run(chunks(truncated, 13), Api.CHAT, content_encoding="gzip")
    assert out == expected
    assert len(rewriter.problems) == 1
    assert "end" in rewriter.problems[0].message
    assert rewriter.problems[0].code == "compressed-corrupt"


CODECS: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = {
    "deflate": (zlib.compress, lambda data: zlib.decompressobj().decompress(data)),
    "br": (brotli.compress, lambda data: brotli.Decompressor().process(data)),
    "zstd": (zstd.compress, lambda data: zstd.ZstdDecompressor().decompress(data)),
}


@pytest.mark.parametrize("encoding", CODECS)
def test_truncated_streams_of_other_encodings_report_at_finish(encoding: str) -> None:
    compress, decompress_prefix = CODECS[encoding]
    source = streams.messages_stream(KIMI)
    truncated = compress(source)[:-5]
    plain_prefix = decompress_prefix(truncated)
    assert source.startswith(plain_prefix)
    expected, _ = run([plain_prefix], Api.MESSAGES)
    out, rewriter = run(chunks(truncated, 16), Api.MESSAGES, content_encoding=encoding)
    assert out == expected
    assert len(rewriter.problems) == 1


def test_one_deflate_byte_is_a_problem_at_finish() -> None:
    out, rewriter = run([b"x"], Api.CHAT, content_encoding="deflate")
    assert out == b""
    assert len(rewriter.problems) == 1


# --- bounded memory ---------------------------------------------------------------------------


def big_event(size: int, eol: str = streams.LF) -> bytes:
    """A Chat chunk of ``size`` bytes that carries a tool id (too big to be rewritten)."""
    shell = streams.render_event(
        {"data": streams.chat_events("big:0")[2]["data"] | {"pad": ""}}, eol=eol
    )
    event = shell.replace(b'"pad":""', b'"pad":"' + b"x" * (size - len(shell)) + b'"')
    assert len(event) == size
    return event


@pytest.mark.parametrize("eol", [streams.LF, streams.CRLF, streams.CR], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("piece", [100, 1, 7, 999, 1001])
def test_oversized_event_is_forwarded_and_memory_stays_bounded(eol: str, piece: int) -> None:
    limit = 1000
    before, after = chat_tool_event(KIMI, eol), chat_tool_event("get_time:1", eol, 2)
    big = big_event(50_000, eol)
    source = before + big + after
    rewriter = StreamRewriter(Api.CHAT, ENCODE, max_event_bytes=limit)
    out = b""
    fed = 0
    for part in chunks(source, piece):
        out += rewriter.feed(part)
        fed += len(part)
        assert rewriter.held <= limit + piece
        if rewriter.problems and fed < len(before) + len(big) - 4:
            # Inside the oversized event once it is known: forwarded as it comes.
            assert rewriter.held <= 4
    out += rewriter.finish()
    assert out == chat_tool_event(encode(KIMI), eol) + big + chat_tool_event(
        encode("get_time:1"), eol, 2
    )
    assert len(rewriter.problems) == 1
    assert rewriter.problems[0].code == "event-too-large"
    assert rewriter.problems[0].line() == "an event larger than 1000 bytes was forwarded unchanged"
    assert [c.raw for c in rewriter.changes] == [KIMI, "get_time:1"]


def test_oversized_event_arriving_whole() -> None:
    big = big_event(5000)
    out, rewriter = run([big + chat_tool_event(KIMI)], Api.CHAT, max_event_bytes=1000)
    assert out == big + chat_tool_event(encode(KIMI))
    assert len(rewriter.problems) == 1


def test_event_of_exactly_the_limit_is_rewritten() -> None:
    event = big_event(1000)
    for pieces in ([event], chunks(event, 10)):
        out, rewriter = run(pieces, Api.CHAT, max_event_bytes=1000)
        assert out == event.replace(b'"big:0"', json.dumps(encode("big:0")).encode())
        assert rewriter.problems == []
        out, rewriter = run(pieces, Api.CHAT, max_event_bytes=999)
        assert out == event
        assert len(rewriter.problems) == 1


def test_stream_ending_inside_an_oversized_event() -> None:
    big = big_event(5000)[:-2]  # no blank line: the stream ends mid-event
    rewriter = StreamRewriter(Api.CHAT, ENCODE, max_event_bytes=1000)
    out = b"".join(rewriter.feed(part) for part in chunks(big, 100))
    assert rewriter.held <= 1100
    assert out + rewriter.finish() == big
    assert len(rewriter.problems) == 1


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0), max_size=40),
    eol=st.sampled_from([streams.LF, streams.CRLF, streams.CR]),
    size=st.integers(min_value=1001, max_value=6000),
)
def test_oversized_events_under_any_split(cuts: list[int], eol: str, size: int) -> None:
    limit = 1000
    normal = chat_tool_event(KIMI, eol)
    big = big_event(size, eol)
    source = normal + big + normal + big + normal
    rewriter = StreamRewriter(Api.CHAT, ENCODE, max_event_bytes=limit)
    out = b""
    for part in split_at(source, cuts):
        out += rewriter.feed(part)
        assert rewriter.held <= limit + len(part)
    out += rewriter.finish()
    rewritten = chat_tool_event(encode(KIMI), eol)
    assert out == rewritten + big + rewritten + big + rewritten
    assert len(rewriter.problems) == 2
    assert [c.raw for c in rewriter.changes] == [KIMI] * 3


# --- never raising ----------------------------------------------------------------------------


class BrokenTaken(Taken):
    """Ids taken by a request that cannot be read: an unexpected error (a bug; no input
    provokes one) the first time a call is given its client id."""

    def known(self) -> frozenset[str] | None:
        raise RuntimeError("boom")


def broken() -> StreamRewriter:
    """A Chat stream's rewriter whose first call meets an unexpected error."""
    return StreamRewriter(Api.CHAT, ENCODE, calls=CallIds("safe", BrokenTaken()))


def test_unexpected_error_switches_to_pass_through() -> None:
    first, second = chat_tool_event(KIMI), chat_tool_event("get_time:1")
    rewriter = broken()
    assert rewriter.feed(first) == first
    assert len(rewriter.problems) == 1
    assert rewriter.problems[0].code == "unexpected-error"
    assert "boom" in rewriter.problems[0].message
    assert not rewriter.changes
    # the rest passes as is: its call is never given a client id, so no second error
    assert rewriter.feed(second[:10]) == second[:10]
    assert rewriter.feed(second[10:]) == second[10:]
    assert rewriter.finish() == b""
    assert len(rewriter.problems) == 1


@pytest.mark.parametrize("cut", [0, 10, 40, 25 + len(chat_tool_event(KIMI))])
def test_unexpected_error_loses_no_byte_and_keeps_their_order(cut: int) -> None:
    source = chat_tool_event(KIMI) + chat_tool_event("get_time:1")[:25]
    rewriter = broken()
    out = rewriter.feed(source[:cut]) + rewriter.feed(source[cut:]) + rewriter.finish()
    assert len(rewriter.problems) == 1
    assert out == source


@pytest.mark.parametrize("accelerated", [True, False])
def test_events_about_a_reused_id_follow_the_call_of_their_number(
    monkeypatch: pytest.MonkeyPatch, accelerated: bool
) -> None:
    """Two calls of one response carry the same raw id: each event about a call gets the
    client id of the call it is numbered with, not of the latest (``CallIds.refer``, which
    the native encoder answers itself)."""
    if not accelerated:
        monkeypatch.setattr(native, "extension", None)

    def event(data: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    item = {"type": "function_call", "id": "fc:1", "call_id": "call:1", "name": "f"}
    added = "response.output_item.added"
    delta = "response.function_call_arguments.delta"
    source = b"".join(
        [
            event({"type": added, "output_index": 0, "item": item}),
            event({"type": added, "output_index": 1, "item": item}),
            event({"type": delta, "output_index": 0, "item_id": "fc:1", "delta": "{}"}),
            event({"type": delta, "output_index": 1, "item_id": "fc:1", "delta": "{}"}),
        ]
    )
    out, rewriter = run([source], Api.RESPONSES)
    first, second = encode("fc:1"), encode("fc:1", occurrence=2)
    assert sorted(c.client for c in rewriter.changes[:4]) == sorted(
        [first, second, encode("call:1"), encode("call:1", occurrence=2)]
    )
    assert [c.client for c in rewriter.changes[4:]] == [first, second]
    assert out.count(f'"item_id": "{first}"'.encode()) == 1
    assert out.count(f'"item_id": "{second}"'.encode()) == 1
