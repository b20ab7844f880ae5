"""SSE framing (toolid.sse): EventFramer and data_lines, against the WHATWG rules."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import streams
from toolid.sse import EventFramer, data_lines

EOLS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}
_EOL_TOKEN = re.compile(rb"\r\n|\r|\n")


def frame(*pieces: bytes) -> tuple[list[bytes], bytes]:
    """Feed ``pieces`` to a fresh framer; return the events and the held tail."""
    framer = EventFramer()
    events: list[bytes] = []
    for piece in pieces:
        events += framer.feed(piece)
    return events, framer.take_tail()


def values(event: bytes, stream_start: bool = False) -> list[bytes]:
    return [event[f.start : f.end] for f in data_lines(event, stream_start=stream_start)]


def eol_tokens(data: bytes) -> list[tuple[int, int]]:
    """Spans of the line endings in ``data`` (CRLF counts as one), left to right."""
    return [m.span() for m in _EOL_TOKEN.finditer(data)]


def has_blank_line(data: bytes) -> bool:
    """Whether two line endings follow each other directly somewhere in ``data``."""
    spans = eol_tokens(data)
    return any(a[1] == b[0] for a, b in itertools.pairwise(spans))


def ends_with_first_blank_line(event: bytes) -> bool:
    """``event`` ends with a blank line, and has no earlier one."""
    spans = eol_tokens(event)
    if len(spans) < 2 or spans[-1][1] != len(event) or spans[-2][1] != spans[-1][0]:
        return False
    return not has_blank_line(event[: spans[-1][0]])


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# --- line endings -----------------------------------------------------------------------------


@pytest.mark.parametrize("eol", EOLS.values(), ids=EOLS.keys())
def test_each_line_ending_frames_events(eol: bytes) -> None:
    body = (
        b"event: a"
        + eol
        + b"data: 1"
        + eol
        + eol
        + b"data: 2"
        + eol
        + b"data: 3"
        + eol
        + eol
        + b"data: 4"
    )
    events, tail = frame(body)
    assert events == [
        b"event: a" + eol + b"data: 1" + eol + eol,
        b"data: 2" + eol + b"data: 3" + eol + eol,
    ]
    assert tail == b"data: 4"
    assert [values(e) for e in events] == [[b"1"], [b"2", b"3"]]


@pytest.mark.parametrize(
    ("body", "expected_events"),
    [
        (
            b"data: a\n\r\ndata: b\r\n\ndata: c\r\rx",
            [b"data: a\n\r\n", b"data: b\r\n\n", b"data: c\r\r"],
        ),
        (b"data: a\r\n\r\rdata: b\n\n", [b"data: a\r\n\r", b"\rdata: b\n\n"]),
        (b"data: a\r\r\n", [b"data: a\r\r\n"]),  # CR, then CRLF: one blank line
        (b"data: a\n\rdata: b\r\n\n", [b"data: a\n\r", b"data: b\r\n\n"]),
        (b"\n\n\n\n", [b"\n\n", b"\n\n"]),
    ],
)
def test_mixed_line_endings(body: bytes, expected_events: list[bytes]) -> None:
    events, tail = frame(body)
    assert events == expected_events
    assert b"".join(events) + tail == body


def test_crlf_line_inside_an_event_is_not_a_blank_line() -> None:
    events, tail = frame(b"data: a\r\ndata: b\r\n")
    assert events == []
    assert tail == b"data: a\r\ndata: b\r\n"


def test_cr_ending_a_blank_line_dispatches_before_its_lf_arrives() -> None:
    """A CR at the end of what arrived already ends the blank line (CR or CRLF alike).

    The event goes out at once; the LF that completes its CRLF goes out as a piece of its
    own when it arrives, so it never counts as part of the next event and no byte is lost or
    reordered.
    """
    framer = EventFramer()
    assert framer.feed(b"data: x\r\n\r") == [b"data: x\r\n\r"]
    assert len(framer) == 0
    assert framer.feed(b"\n") == [b"\n"]
    assert len(framer) == 0
    assert framer.feed(b"data: y\r\n\r\n") == [b"data: y\r\n\r\n"]
    assert framer.take_tail() == b""


def test_split_crlf_is_not_two_line_endings() -> None:
    framer = EventFramer()
    assert framer.feed(b"data: x\r") == []
    assert framer.feed(b"\n") == []  # CR LF split across pieces: one line ending
    assert framer.feed(b"data: y\r") == []
    assert framer.feed(b"\n\r\n") == [b"data: x\r\ndata: y\r\n\r\n"]


# --- fields -----------------------------------------------------------------------------------


def test_comment_lines() -> None:
    events, tail = frame(b": ping\n\n:\n\n: keep-alive\ndata: 1\n\n")
    assert events == [b": ping\n\n", b":\n\n", b": keep-alive\ndata: 1\n\n"]
    assert tail == b""
    assert values(events[0]) == []
    assert values(events[1]) == []
    assert values(events[2]) == [b"1"]
    assert values(b":data: not a field\n\n") == []


def test_event_id_retry_fields_are_not_data() -> None:
    event = b'event: response.created\nid: 42\nretry: 3000\ndata: {"a": 1}\n\n'
    events, _ = frame(event)
    assert events == [event]
    fields = data_lines(event)
    assert len(fields) == 1
    assert event[fields[0].start : fields[0].end] == b'{"a": 1}'
    assert event[fields[0].end : fields[0].end + 2] == b"\n\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"data: x", [b"x"]),
        (b"data:x", [b"x"]),
        (b"data:  x", [b" x"]),  # only one leading space is removed
        (b"data: x  ", [b"x  "]),  # trailing whitespace is part of the value
        (b"data", [b""]),
        (b"data:", [b""]),
        (b"data: ", [b""]),
        (b"dataset: x", []),
        (b"Data: x", []),
        (b" data: x", []),
        (b"event: data", []),
        (b"data: [DONE]", [b"[DONE]"]),
        (b"data: not json {", [b"not json {"]),
    ],
)
def test_data_field_spelling(line: bytes, expected: list[bytes]) -> None:
    for eol in EOLS.values():
        assert values(line + eol + eol) == expected
    assert values(line) == expected  # an unterminated last line counts too


def test_several_data_lines() -> None:
    event = b'event: x\r\ndata: {"a":\r\nid: 7\r\ndata:  1}\r\ndata\r\n\r\n'
    assert values(event) == [b'{"a":', b" 1}", b""]
    fields = data_lines(event)
    joined = b"\n".join(event[f.start : f.end] for f in fields)
    assert joined == b'{"a":\n 1}\n'
    assert json.loads(joined) == {"a": 1}


def test_spans_point_into_the_event() -> None:
    event = b"data: ab\ndata:cd\r\ndata: \r\n\n"
    spans = [(f.start, f.end) for f in data_lines(event)]
    assert spans == [(6, 8), (14, 16), (24, 24)]


# --- byte order mark --------------------------------------------------------------------------


def test_bom_on_the_first_event() -> None:
    body = streams.BOM + b"data: 1\n\ndata: 2\n\n"
    events, _ = frame(body[:2], body[2:5], body[5:])
    assert events == [streams.BOM + b"data: 1\n\n", b"data: 2\n\n"]
    assert values(events[0], stream_start=True) == [b"1"]
    fields = data_lines(events[0], stream_start=True)
    assert fields[0].start == len(streams.BOM) + 6  # offsets stay offsets into the event
    # Without stream_start the BOM is part of the field name: not a data line.
    assert values(events[0]) == []
    # Only one BOM is skipped, and only at the very start.
    assert values(streams.BOM + streams.BOM + b"data: 1\n\n", stream_start=True) == []
    assert values(b"data: 2\n\n", stream_start=True) == [b"2"]


# --- incomplete events and timing -------------------------------------------------------------


@pytest.mark.parametrize("eol", EOLS.values(), ids=EOLS.keys())
def test_stream_ending_mid_event_keeps_the_tail(eol: bytes) -> None:
    framer = EventFramer()
    complete = b"data: 1" + eol + eol
    partial = b"event: e" + eol + b'data: {"half'
    assert framer.feed(complete + partial) == [complete]
    assert len(framer) == len(partial)
    assert framer.take_tail() == partial
    assert len(framer) == 0
    assert framer.take_tail() == b""
    # The framer can be used again after take_tail.
    assert framer.feed(complete) == [complete]


def test_event_is_emitted_in_the_call_that_completes_it() -> None:
    framer = EventFramer()
    assert framer.feed(b"data: 1\n") == []
    assert len(framer) == 8
    assert framer.feed(b"\n") == [b"data: 1\n\n"]
    assert len(framer) == 0
    assert framer.feed(b"data: 2\n\ndata: 3\n\ndata") == [b"data: 2\n\n", b"data: 3\n\n"]
    assert len(framer) == 4


@pytest.mark.parametrize("eol", EOLS.values(), ids=EOLS.keys())
def test_fixture_streams_one_byte_at_a_time(eol: bytes) -> None:
    """Every event comes out exactly when its last byte goes in."""
    events = streams.render_events(
        streams.messages_events("functions.get_weather:0"), eol=eol.decode()
    )
    body = b"".join(events)
    framer = EventFramer()
    emitted: list[bytes] = []
    ends = set()
    at = 0
    for event in events:
        at += len(event)
        ends.add(at)
    for i in range(len(body)):
        out = framer.feed(body[i : i + 1])
        if eol == b"\r\n":  # the CR of the final CRLF already ends the blank line ...
            assert bool(out) == (i + 2 in ends or i + 1 in ends)
            if i + 1 in ends:  # ... and its LF then goes out alone
                assert out == [b"\n"]
                continue
        else:
            assert bool(out) == (i + 1 in ends)
        emitted += out
    assert len(emitted) == len(events)
    assert [values(e) for e in emitted] == [values(e) for e in events]


@pytest.mark.timeout(60)
def test_one_byte_pieces_are_framed_in_linear_time() -> None:
    """2 MB in 1-byte pieces: a framer that rescans its buffer would never finish."""
    framer = EventFramer()
    huge = b"data: " + b"y" * 2_000_000
    for i in range(len(huge)):
        assert not framer.feed(huge[i : i + 1])
    assert len(framer) == len(huge)
    assert framer.feed(b"\n\n") == [huge + b"\n\n"]
    many = (b"data: " + b"x" * 1000 + b"\n\n") * 500
    count = 0
    for i in range(len(many)):
        count += len(framer.feed(many[i : i + 1]))
    assert count == 500
    assert len(framer) == 0


# --- properties -------------------------------------------------------------------------------

SSE_PIECES = st.sampled_from(
    [
        b"\n",
        b"\r",
        b"\r\n",
        b"data: ",
        b"data:",
        b"data",
        b": c",
        b"event: x",
        b"id: 1",
        b"retry: 9",
        b'{"a": 1}',
        b"[DONE]",
        b"x",
        b" ",
        b"\xef\xbb\xbf",
        b"\xff",
    ]
)
SSE_BYTES = st.lists(SSE_PIECES | st.binary(max_size=4), max_size=40).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(body=SSE_BYTES, cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_framing_properties(body: bytes, cuts: list[int]) -> None:
    pieces = split_at(body, cuts)
    framer = EventFramer()
    emitted: list[bytes] = []
    fed = 0
    for piece in pieces:
        out = framer.feed(piece)
        fed += len(piece)
        before = emitted[-1] if emitted else b""
        emitted += out
        consumed = sum(map(len, emitted))
        held = body[consumed:fed]
        # Nothing is lost, reordered or invented; nothing complete is held back.
        assert body[:consumed] == b"".join(emitted)
        assert len(framer) == len(held)
        assert not has_blank_line(held)
        for event in out:
            # An event, or the LF completing the CRLF the event before ended on.
            lf_alone = event == b"\n" and before.endswith(b"\r")
            assert lf_alone or ends_with_first_blank_line(event)
            before = event
    tail = framer.take_tail()
    assert b"".join(emitted) + tail == body
    # Data grouping agrees with a reference parser of the whole stream, however split.
    groups = [values(e, stream_start=(i == 0)) for i, e in enumerate(emitted)]
    assert [g for g in groups if g] == streams.data_groups(body)


@settings(max_examples=200, deadline=None)
@given(body=SSE_BYTES)
def test_whole_body_events_match_reference_tokenizer(body: bytes) -> None:
    """Fed at once, events end exactly at each first blank line of the rest."""
    events, tail = frame(body)
    rest = body
    expected = []
    while True:
        spans = eol_tokens(rest)
        pairs = [b[1] for a, b in itertools.pairwise(spans) if a[1] == b[0]]
        if not pairs:
            break
        expected.append(rest[: pairs[0]])
        rest = rest[pairs[0] :]
    assert events == expected
    assert tail == rest
