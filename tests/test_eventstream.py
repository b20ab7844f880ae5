"""toolid.eventstream (framing) and toolid.eventstream_rewrite (ids in Bedrock's streams).

botocore's own parser (``botocore.eventstream.EventStreamBuffer``) is the oracle for what a
client reads; every split of a stream must give the same frames and the same output."""

from __future__ import annotations

import gzip
import itertools
import json
import struct

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolid
from tests import eventstreams, streams
from toolid import encode, eventstream
from toolid.body import Direction, Policy
from toolid.eventstream import FrameSplitter, frame, headers_of, payload_of, replace_payload
from toolid.eventstream_rewrite import EventStreamRewriter
from toolid.positions import Api
from toolid.problem import EVENT_TOO_LARGE, FRAME_CORRUPT, STREAM_ENDED_INSIDE

RAW = "functions.get_weather:0"
CLIENT = encode(RAW)
ENCODE = Policy(Direction.ENCODE, "safe")
# aws-c-event-stream's test vector: the empty frame.
EMPTY = bytes.fromhex("00000010 00000000 05c248eb 7d98c8ff")


# Every test here runs with the accelerators as installed and as pure Python.
pytestmark = pytest.mark.usefixtures("backend")


def split_feed(splitter: FrameSplitter, pieces: list[bytes]) -> list[bytes]:
    return [f for piece in pieces for f in splitter.feed(piece)]


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def rewrite(
    pieces: list[bytes], api: Api | None, **kwargs: object
) -> tuple[bytes, EventStreamRewriter]:
    rewriter = EventStreamRewriter(api, ENCODE, **kwargs)  # type: ignore[arg-type]
    out = []
    for piece in pieces:
        out.append(rewriter.feed(piece))
    out.append(rewriter.finish())
    return b"".join(out), rewriter


# --- framing -------------------------------------------------------------------------------------


def test_the_empty_frame_is_awss_test_vector():
    assert frame({}, b"") == EMPTY
    assert FrameSplitter().feed(EMPTY) == [EMPTY]


def test_botocore_reads_the_frames_built_here():
    built = frame({":event-type": "chunk", ":message-type": "event"}, b'{"bytes":"e30="}')
    assert eventstreams.parsed(built) == [
        ({":event-type": "chunk", ":message-type": "event"}, b'{"bytes":"e30="}')
    ]
    assert headers_of(built) == {":event-type": "chunk", ":message-type": "event"}
    assert payload_of(built) == b'{"bytes":"e30="}'


def test_headers_of_every_type():
    def header(name: str, kind: int, value: bytes) -> bytes:
        return bytes([len(name)]) + name.encode() + bytes([kind]) + value

    block = b"".join(
        [
            header("t", 0, b""),
            header("f", 1, b""),
            header("i8", 2, b"\xff"),
            header("i16", 3, struct.pack("!h", -2)),
            header("i32", 4, struct.pack("!i", 7)),
            header("i64", 5, struct.pack("!q", -9)),
            header("b", 6, b"\x00\x02\x01\x02"),
            header("s", 7, b"\x00\x03abc"),
            header("ts", 8, struct.pack("!q", 1700000000000)),
            header("u", 9, bytes(range(16))),
        ]
    )
    built = frame(block, b"x")
    expected = {
        "t": True, "f": False, "i8": -1, "i16": -2, "i32": 7, "i64": -9,
        "b": b"\x01\x02", "s": "abc", "ts": 1700000000000, "u": bytes(range(16)),
    }  # fmt: skip
    assert headers_of(built) == expected
    buffer = EventStreamBuffer()
    buffer.add_data(built)
    assert next(iter(buffer)).headers["s"] == "abc"  # botocore agrees on the layout
    with pytest.raises(eventstream.FrameError):
        headers_of(frame(header("x", 42, b""), b""))
    with pytest.raises(eventstream.FrameError):
        headers_of(frame(header("s", 7, b"\x00\x09ab"), b""))
    with pytest.raises(eventstream.FrameError):
        headers_of(frame(header("s", 7, b"\x00\x01a") * 2, b""))


def test_replace_payload_keeps_the_headers_and_recomputes_lengths_and_crcs():
    old = eventstreams.event_frame("contentBlockStart", b'{"a":1}')
    new = replace_payload(old, b'{"a":12345}')
    assert eventstreams.parsed(new) == [(headers_of(old), b'{"a":12345}')]
    assert new[12 : eventstream.headers_end(new)] == old[12 : eventstream.headers_end(old)]


STREAM = b"".join(eventstreams.converse_frames(RAW) + eventstreams.invoke_frames(RAW, "abcd"))
FRAMES = eventstreams.converse_frames(RAW) + eventstreams.invoke_frames(RAW, "abcd")


def test_every_split_in_two_gives_the_same_frames():
    for at in range(len(STREAM) + 1):
        splitter = FrameSplitter()
        assert split_feed(splitter, [STREAM[:at], STREAM[at:]]) == FRAMES
        assert splitter.error is None and len(splitter) == 0


def test_byte_by_byte_gives_each_frame_with_its_last_byte():
    splitter = FrameSplitter()
    done = 0
    for at in range(len(STREAM)):
        got = splitter.feed(STREAM[at : at + 1])
        if got:
            assert got == [FRAMES[done]]
            done += 1
            assert len(splitter) == 0
        else:
            assert 0 < len(splitter) <= len(FRAMES[done])  # never more than the frame
    assert done == len(FRAMES)


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_gives_the_same_frames(cuts):
    splitter = FrameSplitter()
    assert split_feed(splitter, cut(STREAM, cuts)) == FRAMES
    assert splitter.take_tail() == b""


@pytest.mark.parametrize("where", ["prelude length", "prelude crc", "headers", "payload", "crc"])
def test_a_corrupted_frame_stops_framing_and_keeps_every_byte(where):
    offset = {"prelude length": 1, "prelude crc": 9, "headers": 14, "payload": -10, "crc": -1}
    bad = bytearray(FRAMES[4])
    bad[offset[where]] ^= 0x40
    body = b"".join(FRAMES[:4]) + bytes(bad) + b"".join(FRAMES[5:])
    for at in range(0, len(body) + 1, 7):
        splitter = FrameSplitter()
        got = split_feed(splitter, [body[:at], body[at:]])
        assert got == FRAMES[:4]
        assert splitter.error is not None
        assert "CRC" in splitter.error or "length" in splitter.error
        assert b"".join(got) + splitter.take_tail() == body


# --- rewriting -----------------------------------------------------------------------------------


def test_converse_stream_ids_are_encoded_and_botocore_reads_them():
    source = b"".join(eventstreams.converse_frames(RAW))
    out, rewriter = rewrite([source], Api.CONVERSE)
    assert out == b"".join(eventstreams.converse_frames(CLIENT))  # the oracle: built with it
    frames = eventstreams.parsed(out)
    starts = [json.loads(p) for h, p in frames if h[":event-type"] == "contentBlockStart"]
    assert starts[0]["start"]["toolUse"]["toolUseId"] == CLIENT
    assert [c.raw for c in rewriter.changes] == [RAW]
    assert rewriter.problems == []


def test_frames_with_nothing_to_change_pass_byte_for_byte():
    source = eventstreams.converse_frames(RAW)
    rewriter = EventStreamRewriter(Api.CONVERSE, ENCODE)
    for one in source:
        out = rewriter.feed(one)
        if b"toolUseId" in one:
            assert out != one and len(out) == len(one) + len(CLIENT) - len(RAW)
        else:
            assert out is one or out == one
    conforming = b"".join(eventstreams.converse_frames("tooluse_Ab12"))
    assert rewrite([conforming], Api.CONVERSE)[0] == conforming


@pytest.mark.parametrize("api", [Api.MESSAGES, None])
@pytest.mark.parametrize("padding", ["", "abcdefgh"])
def test_invoke_stream_chunks_are_decoded_rewritten_and_encoded_again(api, padding):
    source = b"".join(eventstreams.invoke_frames(RAW, padding))
    out, rewriter = rewrite([source], api)
    assert out == b"".join(eventstreams.invoke_frames(CLIENT, padding))
    events = eventstreams.chunk_events(out)
    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert blocks[1] == {"type": "tool_use", "id": CLIENT, "name": "get_weather", "input": {}}
    assert [c.raw for c in rewriter.changes] == [RAW]


def test_a_reused_id_gets_one_client_id_per_call():
    frames = eventstreams.converse_frames("call_0")
    second = eventstreams.event_frame(
        "contentBlockStart",
        eventstreams.compact(
            {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "call_0", "name": "x"}}}
        ),
    )
    out, _ = rewrite([b"".join([*frames[:-2], second, *frames[-2:]])], Api.CONVERSE)
    ids = [
        json.loads(p)["start"]["toolUse"]["toolUseId"]
        for h, p in eventstreams.parsed(out)
        if h[":event-type"] == "contentBlockStart"
    ]
    assert ids == ["call_0", encode("call_0", "safe", 2)]


def test_through_the_public_response_stream():
    stream = toolid.ResponseStream(path="/model/m/converse-stream", framing="eventstream")
    source = b"".join(eventstreams.converse_frames(RAW))
    out = b"".join(stream.feed(source[i : i + 5]).body for i in range(0, len(source), 5))
    out += stream.finish().body
    assert out == b"".join(eventstreams.converse_frames(CLIENT))
    assert toolid.rewrite.framing_of("application/vnd.amazon.eventstream") == "eventstream"
    assert toolid.rewrite.framing_of("text/event-stream; charset=utf-8") == "sse"
    assert toolid.rewrite.framing_of("application/json") is None


BOTH = (
    b"".join(eventstreams.converse_frames(RAW)),
    b"".join(eventstreams.invoke_frames(RAW, "xyz")),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.sampled_from([0, 1]),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=10),
)
def test_any_split_gives_the_same_output(which, cuts):
    source = BOTH[which]
    api = Api.CONVERSE if which == 0 else Api.MESSAGES
    whole, _ = rewrite([source], api)
    split, rewriter = rewrite(cut(source, cuts), api)
    assert split == whole
    assert rewriter.problems == []


def test_every_split_in_two_gives_the_same_output_and_holds_at_most_a_frame():
    source = BOTH[1]
    whole, _ = rewrite([source], Api.MESSAGES)
    longest = max(len(f) for f in eventstreams.invoke_frames(RAW, "xyz"))
    for at in range(len(source) + 1):
        rewriter = EventStreamRewriter(Api.MESSAGES, ENCODE)
        first = rewriter.feed(source[:at])
        assert rewriter.held <= longest
        assert first + rewriter.feed(source[at:]) + rewriter.finish() == whole


@pytest.mark.parametrize("offset", [1, 9, 20, -3])
def test_a_bad_crc_fails_open_with_one_warning(offset):
    frames = eventstreams.converse_frames(RAW)
    bad = bytearray(frames[0])
    bad[offset] ^= 1
    source = bytes(bad) + b"".join(frames[1:])
    for at in (0, 5, 13, len(source) // 2, len(source)):
        out, rewriter = rewrite([source[:at], source[at:]], Api.CONVERSE)
        assert out == source  # the stream passes as it came
        assert [problem.code for problem in rewriter.problems] == [FRAME_CORRUPT]


def test_a_bad_crc_later_keeps_what_went_before():
    frames = eventstreams.converse_frames(RAW)
    bad = bytearray(frames[-1])
    bad[-1] ^= 1
    source = b"".join(frames[:-1]) + bytes(bad)
    out, rewriter = rewrite([source], Api.CONVERSE)
    assert out == b"".join(eventstreams.converse_frames(CLIENT)[:-1]) + bytes(bad)
    assert len(rewriter.problems) == 1 and "CRC" in rewriter.problems[0].message


def test_an_oversized_frame_passes_the_rest_as_it_came():
    frames = eventstreams.converse_frames(RAW)
    big = eventstreams.event_frame("contentBlockDelta", b'{"x":"' + b"a" * 5000 + b'"}')
    source = big + b"".join(frames)
    out, rewriter = rewrite([source[:3000], source[3000:]], Api.CONVERSE, max_event_bytes=1000)
    assert out == source
    assert [problem.code for problem in rewriter.problems] == [EVENT_TOO_LARGE]


def test_an_oversized_frame_that_comes_whole_passes_and_the_rest_is_rewritten():
    frames = eventstreams.converse_frames(RAW)
    big = eventstreams.event_frame(
        "contentBlockStart",
        b'{"start":{"toolUse":{"toolUseId":"' + RAW.encode() + b'"}},"x":"' + b"a" * 5000 + b'"}',
    )
    out, rewriter = rewrite([big + b"".join(frames)], Api.CONVERSE, max_event_bytes=1000)
    assert out == big + b"".join(eventstreams.converse_frames(CLIENT))
    assert len(rewriter.problems) == 1 and "larger than 1000" in rewriter.problems[0].line()


def test_a_stream_ending_inside_a_frame_passes_its_start():
    frames = eventstreams.converse_frames(RAW)
    source = b"".join(frames) + frames[0][:7]
    out, rewriter = rewrite([source], Api.CONVERSE)
    assert out.endswith(frames[0][:7])
    assert [problem.line() for problem in rewriter.problems] == [
        "the stream ended inside an eventstream frame (passed as is)"
    ]
    assert rewriter.problems[0].code == STREAM_ENDED_INSIDE


def test_frames_that_are_not_events_pass():
    exception = frame(
        {":exception-type": "throttlingException", ":message-type": "exception"},
        b'{"message":"toolUseId functions.x:0"}',
    )
    out, rewriter = rewrite([exception], Api.CONVERSE)
    assert out == exception and not rewriter.changes


def test_gzip_is_decoded():
    source = b"".join(eventstreams.converse_frames(RAW))
    rewriter = EventStreamRewriter(Api.CONVERSE, ENCODE, content_encoding="gzip")
    assert rewriter.decodes
    out = rewriter.feed(gzip.compress(source)) + rewriter.finish()
    assert out == b"".join(eventstreams.converse_frames(CLIENT))


JUNK = st.binary(max_size=64)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    which=st.sampled_from([0, 1]),
    api=st.sampled_from([Api.CONVERSE, Api.MESSAGES, None, Api.CHAT]),
)
def test_never_an_exception_and_never_a_lost_byte(data, which, api):
    source = bytearray(BOTH[which])
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        at = data.draw(st.integers(min_value=0, max_value=len(source)))
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if op == "flip" and at < len(source):
            source[at] ^= data.draw(st.integers(min_value=1, max_value=255))
        elif op == "insert":
            source[at:at] = data.draw(JUNK)
        else:
            del source[at : at + data.draw(st.integers(min_value=1, max_value=20))]
    body = bytes(source)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(body)), max_size=6))
    out, rewriter = rewrite(cut(body, cuts), api)
    if rewriter.problems and not rewriter.changes:
        assert out == body
    if not rewriter.changes:
        assert out == body
    # Whatever came out parses as far as the input did: every rewritten frame checks.
    for piece in FrameSplitter().feed(out):
        eventstream.check_message(piece)


@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=5))
def test_random_bytes_pass_as_they_came(data, cuts):
    out, _ = rewrite(cut(data, cuts), Api.CONVERSE)
    assert out == data


def test_streams_fixture_is_what_the_sse_fixture_says():
    # The eventstream fixtures carry the same events as the SSE ones (tests/streams.py).
    payloads = [p for _, p in eventstreams.parsed(BOTH[0])]
    assert [json.loads(p) for p in payloads] == [e["data"] for e in streams.converse_events(RAW)]


def test_each_frame_goes_out_with_its_last_byte():
    """No added latency: a frame is forwarded as soon as it is complete, never later."""
    sources = eventstreams.converse_frames(RAW)
    wanted = eventstreams.converse_frames(CLIENT)
    rewriter = EventStreamRewriter(Api.CONVERSE, ENCODE)
    for one, want in zip(sources, wanted, strict=True):
        assert rewriter.feed(one[:-1]) == b""
        assert rewriter.held == len(one) - 1
        assert rewriter.feed(one[-1:]) == want
        assert rewriter.held == 0
    assert rewriter.finish() == b""


HEADER_NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=10).filter(
    lambda name: len(name.encode()) < 256
)
RANDOM_FRAME = st.tuples(
    st.dictionaries(HEADER_NAMES, st.text(max_size=20), max_size=4), st.binary(max_size=200)
)


@settings(max_examples=150)
@given(frames_=st.lists(RANDOM_FRAME, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 2000)))
def test_round_trip_of_random_frames_split_anywhere(frames_, cuts):
    built = [frame(headers, payload) for headers, payload in frames_]
    splitter = FrameSplitter()
    got = split_feed(splitter, cut(b"".join(built), cuts))
    assert got == built and splitter.error is None and len(splitter) == 0
    for one, (headers, payload) in zip(got, frames_, strict=True):
        assert headers_of(one) == headers and payload_of(one) == payload
        assert eventstreams.parsed(one) == [(headers, payload)]  # botocore agrees
        assert replace_payload(one, payload) == one
