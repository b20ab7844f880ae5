"""The JSON-array stream (Gemini's ``:streamGenerateContent`` without ``?alt=sse``): the framer
hands back each element when its closing brace arrives and every other byte at once, however
the body is split; the rewriter gives every split the same output, the elements' ids rewritten
and every other byte as it came."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import streams
from tests.test_stream import split_at
from toolid import ResponseStream, encode, framing_of
from toolid.jsonarray import ElementFramer

STREAM_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
KIMI = "functions.get_weather:0"


def frame(pieces: list[bytes]) -> tuple[list[tuple[bytes, bool]], bytes]:
    """What the framer hands back for ``pieces`` (consecutive non-element bytes joined), and
    what it still holds at the end."""
    framer = ElementFramer()
    out: list[tuple[bytes, bool]] = []
    for piece in pieces:
        for part, element in framer.feed(piece):
            if out and not element and not out[-1][1]:
                out[-1] = (out[-1][0] + part, False)
            elif part or element:
                out.append((part, element))
    return out, framer.take_tail()


def gemini_array(raw: str, **kwargs: Any) -> bytes:
    return streams.json_array(streams.gemini_events(raw, second_id=raw), **kwargs)


# --- the framer -------------------------------------------------------------------------------


def test_each_element_and_the_bytes_between() -> None:
    data = b'[{"a": 1}\r\n,\r\n{"b": "}]{["}\r\n]'
    pieces, tail = frame([data])
    assert pieces == [
        (b"[", False),
        (b'{"a": 1}', True),
        (b"\r\n,\r\n", False),
        (b'{"b": "}]{["}', True),
        (b"\r\n]", False),
    ]
    assert tail == b""


def test_a_top_level_object_is_one_element_and_other_values_are_bytes() -> None:
    assert frame([b' {"error": {"code": 400}} '])[0] == [
        (b" ", False),
        (b'{"error": {"code": 400}}', True),
        (b" ", False),
    ]
    assert frame([b'[1, "{", [{"x": 1}], null]'])[0] == [(b'[1, "{", [{"x": 1}], null]', False)]


def test_escapes_inside_strings_are_read_as_json_reads_them() -> None:
    element = b'{"t": "a \\" } \\\\", "u": "\\\\\\"{"}'
    assert json.loads(element)  # valid JSON
    for at in range(len(element) + 3):
        data = b"[" + element + b"]"
        assert frame([data[:at], data[at:]]) == (
            [(b"[", False), (element, True), (b"]", False)],
            b"",
        )


def test_byte_by_byte_each_element_comes_with_its_last_byte() -> None:
    data = gemini_array(KIMI)
    framer = ElementFramer()
    elements = json.loads(data)
    seen = 0
    for at in range(len(data)):
        for part, element in framer.feed(data[at : at + 1]):
            if element:
                assert part.endswith(b"}") and at == data.index(part, 0) + len(part) - 1
                assert json.loads(part) == elements[seen]
                seen += 1
            else:
                assert len(part) == 1  # never held
    assert seen == len(elements) and len(framer) == 0


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    style=st.sampled_from(["compact", "pretty"]),
)
def test_any_split_gives_the_same_pieces(cuts: list[int], style: streams.Style) -> None:
    data = gemini_array(KIMI, style=style)
    assert frame(split_at(data, cuts)) == frame([data])


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=200)
    | st.lists(
        st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b",", b"a", b" "]), max_size=80
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
)
def test_never_an_exception_never_a_lost_byte(data: bytes, cuts: list[int]) -> None:
    pieces, tail = frame(split_at(data, cuts))
    assert b"".join(part for part, _ in pieces) + tail == data
    assert frame([data]) == (pieces, tail)


def test_release_passes_the_rest_of_the_element_and_frames_on() -> None:
    framer = ElementFramer()
    assert framer.feed(b'[{"a": "xxxx') == [(b"[", False)]
    assert framer.release() == b'{"a": "xxxx'
    assert framer.feed(b'x"}, {"b": 1}]') == [
        (b'x"}', False),
        (b", ", False),
        (b'{"b": 1}', True),
        (b"]", False),
    ]


# --- the rewriter ----------------------------------------------------------------------------


def rewrite(pieces: list[bytes], **kwargs: Any) -> tuple[bytes, Any, Any]:
    stream = ResponseStream(path=STREAM_PATH, framing="json-array", **kwargs)
    out = [stream.feed(piece) for piece in pieces] + [stream.finish()]
    changes = [change for result in out for change in result.changes]
    problems = [problem for result in out for problem in result.problems]
    return b"".join(result.body for result in out), changes, problems


def test_the_framing_is_chosen_by_the_route_and_the_json_type() -> None:
    assert framing_of("application/json; charset=UTF-8", STREAM_PATH) == "json-array"
    assert framing_of("application/json", "/v1internal:streamGenerateContent") == "json-array"
    assert framing_of("text/event-stream", STREAM_PATH + "?alt=sse") == "sse"
    assert framing_of("application/json", "/v1beta/models/g:generateContent") is None
    assert framing_of("application/json") is None


@settings(max_examples=100, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0), max_size=30),
    raw=st.sampled_from(streams.RAW_IDS) | st.text(max_size=8),
    style=st.sampled_from(["compact", "spaced", "pretty"]),
)
def test_any_split_gives_the_same_output(cuts: list[int], raw: str, style: streams.Style) -> None:
    """Two calls with one raw id, one per element: the second gets an occurrence tag; the
    thought signatures and every byte but the id literals stay as they were."""
    source = gemini_array(raw, style=style)
    whole, changes, problems = rewrite([source])
    assert rewrite(split_at(source, cuts))[:2] == (whole, changes)
    assert problems == []
    expected = streams.json_array(
        streams.gemini_events(encode(raw), second_id=encode(raw, occurrence=2)), style=style
    )
    assert whole == expected
    assert whole.count(streams.THOUGHT_SIGNATURE.encode()) == 2


def test_elements_go_out_when_complete() -> None:
    source = gemini_array(KIMI)
    stream = ResponseStream(path=STREAM_PATH, framing="json-array")
    first_end = source.index(b"}\r\n,") + 1
    assert stream.feed(source[:first_end]).body == source[:first_end]
    assert stream.feed(b"\r\n,").body == b"\r\n,"


def test_an_oversized_element_passes_and_the_rest_is_rewritten() -> None:
    events = streams.gemini_events(KIMI, second_id="get_time:1")
    events[2]["data"]["pad"] = "x" * 5000
    source = streams.json_array(events)
    out, changes, problems = rewrite(split_at(source, [100, 2000, 4000]), max_event_bytes=1000)
    assert KIMI.encode() in out and encode("get_time:1").encode() in out
    assert [c.raw for c in changes] == ["get_time:1"]
    assert len(problems) == 1 and "larger than 1000 bytes" in problems[0].message
    assert problems[0].code == "event-too-large"


def test_a_body_ending_inside_an_element_passes_its_start() -> None:
    whole, _, _ = rewrite([gemini_array(KIMI)])
    out, _, problems = rewrite([gemini_array(KIMI)[:-40]])  # cut in the last element
    assert out == whole[:-40]
    assert [(problem.code, problem.line()) for problem in problems] == [
        ("stream-ended-inside", "the stream ended inside an array element (passed as is)")
    ]


def test_a_compressed_body_is_decoded() -> None:
    source = gemini_array(KIMI)
    stream = ResponseStream(path=STREAM_PATH, framing="json-array", content_encoding="gzip")
    assert stream.decodes
    packed = gzip.compress(source)
    out = b"".join(stream.feed(packed[i : i + 10]).body for i in range(0, len(packed), 10))
    out += stream.finish().body
    assert json.loads(out)[2]["candidates"][0]["content"]["parts"][0]["functionCall"]["id"] == (
        encode(KIMI)
    )


@pytest.mark.parametrize(
    "body", [b"[]", b'{"error": {"code": 400, "message": "bad"}}', b"not json"]
)
def test_answers_without_ids_pass_byte_for_byte(body: bytes) -> None:
    assert rewrite([body]) == (body, [], [])


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_any_bytes_pass_as_they_came(data: bytes, cuts: list[int]) -> None:
    out, changes, _ = rewrite(split_at(data, cuts))
    assert out == data and changes == []
