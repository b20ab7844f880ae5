"""Differential test of ``StreamRewriter`` across its backends: with the native parser and
orjson, and as pure standard-library Python, fed the same pieces, it returns the same bytes
from every ``feed`` (so each event still goes out the moment it is complete) and ends with
the same ``finish``, changes, problems and API.

Corpora: the recorded streams (tests/data/*.sse) in every line ending; the fixture
streams of tests/streams.py as hypothesis cases (tests/test_stream.py ``cases``); those
streams mutated as tests/fuzz mutates them; arbitrary byte soups; long streams of many
events with blank-line runs of any length and mixed line endings; events whose JSON is
spelled by tests/fuzz/strategies.py ``chaos``; Gemini's JSON-array streams, with
``JsonArrayRewriter``. Each under random splits, fixed piece sizes
and single bytes, encoding (with and without occurrence tags from a request's history)
and decoding, at the default and at tiny ``max_event_bytes``, compressed and not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import streams
from tests.fuzz.budget import fuzz
from tests.fuzz.strategies import chaos
from tests.fuzz.test_fuzz_stream import mutated
from tests.test_jsonparse import stdlib_only
from tests.test_stream import (
    ARBITRARY,
    COMPRESSORS,
    DECODE,
    ENCODE,
    RAW_ID,
    Case,
    bytewise,
    cases,
    chunks,
    split_at,
)
from toolid import body, codec
from toolid.body import Direction, Policy
from toolid.jsonarray_rewrite import JsonArrayRewriter
from toolid.markers import Markers
from toolid.occurrence import CallIds, Taken
from toolid.positions import Api, Doc
from toolid.sse import EventFramer
from toolid.sse_events import EventReader
from toolid.stream import DEFAULT_MAX_EVENT_BYTES, PieceRewriter, StreamRewriter

DATA = Path(__file__).parent / "data"
RECORDED = {path.name: path.read_bytes() for path in sorted(DATA.glob("*.sse"))}
ENCODE_CALL = Policy(Direction.ENCODE, "call")
CUTS = st.lists(st.integers(min_value=0), max_size=30)
EOLS = [streams.LF, streams.CRLF, streams.CR]


@dataclass(frozen=True)
class Setup:
    """How the rewriters are built."""

    api: Api | None
    policy: Policy = ENCODE
    encoding: str = ""
    limit: int = DEFAULT_MAX_EVENT_BYTES
    taken: tuple[str, ...] | None = None  # the request's history: occurrence tags

    def build[R](self, cls: Callable[..., R]) -> R:
        calls = None
        if self.taken is not None:
            calls = CallIds(self.policy.profile, Taken.of(self.taken))
        return cls(
            self.api,
            self.policy,
            content_encoding=self.encoding,
            max_event_bytes=self.limit,
            calls=calls,
        )


def assert_same[R: PieceRewriter](
    pieces: list[bytes], setup: Setup, cls: Callable[..., R] = StreamRewriter
) -> R:
    """Feed ``pieces`` to the rewriter (of an SSE stream; ``cls``: of another framing) with
    its accelerators (when built) and as pure Python; everything observable must be equal."""
    new, slow = setup.build(cls), setup.build(cls)
    for index, piece in enumerate(pieces):
        expected = new.feed(piece)
        with stdlib_only():
            assert slow.feed(piece) == expected, f"piece {index} of {len(pieces)}, pure Python"
    expected = new.finish()
    with stdlib_only():
        assert slow.finish() == expected
    assert slow.changes == new.changes
    assert slow.problems == new.problems
    assert slow.api == new.api
    assert slow.decodes == new.decodes
    return new


def splits(data: bytes, cuts: list[int], size: int) -> Iterator[list[bytes]]:
    """``data`` whole, cut at ``cuts``, in pieces of ``size`` and (if small) byte by byte."""
    yield [data]
    yield split_at(data, cuts)
    yield chunks(data, size)
    if len(data) <= 2000:
        yield bytewise(data)


def assert_same_however_split(data: bytes, cuts: list[int], size: int, setup: Setup) -> None:
    for pieces in splits(data, cuts, size):
        assert_same(pieces, setup)


def history(case_raws: list[str], profile: codec.Profile, depth: int) -> tuple[str, ...]:
    """A request history that takes the first ``depth`` client ids of every raw id."""
    return tuple(
        codec.encode(raw, profile, occurrence)
        for raw in case_raws
        for occurrence in range(1, depth + 1)
    )


@st.composite
def setups(draw: st.DrawFn, api: Api | None, raws: list[str]) -> Setup:
    policy = draw(st.sampled_from([ENCODE, ENCODE, ENCODE_CALL, DECODE]))
    depth = draw(st.sampled_from([None, 1, 2]))
    taken = None if depth is None else history(raws, policy.profile, depth)
    limit = draw(st.sampled_from([DEFAULT_MAX_EVENT_BYTES] * 3 + [1, 40, 300, 1000]))
    return Setup(api=api, policy=policy, limit=limit, taken=taken)


SIZES = st.sampled_from([1, 2, 3, 5, 64, 333, 1024, 16 * 1024])


# --- the framer -------------------------------------------------------------------------------

MARKERS = [body.id_markers(api, Doc.EVENT) for api in Api] + [
    Markers([b"a"]),
    Markers([b":"]),
    Markers([b"a", b"\n\n", b"data"]),
]


@st.composite
def long_streams(draw: st.DrawFn) -> tuple[Api, bytes]:
    """Many fixture events (tool calls among text), with blank-line runs of any length
    between them, one line ending for the stream or a mix of two or three."""
    api = draw(st.sampled_from(list(Api)))
    raw = draw(RAW_ID)
    pool = streams.events_for(api, raw) + streams.events_for(api, raw + "#2")
    if api is Api.CHAT:
        pool += streams.chat_text_events() * 4
    events = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=120))
    eols = draw(st.lists(st.sampled_from(EOLS), min_size=1, max_size=3, unique=True))
    style: streams.Style = draw(st.sampled_from(["compact", "spaced", "pretty"]))
    out = [streams.BOM] if draw(st.integers(0, 9)) == 0 else []
    for event in events:
        eol = draw(st.sampled_from(eols))
        out.append(streams.render_event(event, eol=eol, style=style))
        out.append(eol.encode() * draw(st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5])))
    return api, b"".join(out)


SOUPS = ARBITRARY | long_streams().map(lambda pair: pair[1])


@settings(max_examples=300, deadline=None)
@given(data=SOUPS, cuts=CUTS, markers=st.sampled_from(MARKERS))
def test_feed_marked_frames_exactly_as_feed(data: bytes, cuts: list[int], markers: Markers) -> None:
    """Runs hold no marker and, framed again alone, are exactly the events ``feed`` gives."""
    plain, marked = EventFramer(), EventFramer()
    for piece in split_at(data, cuts):
        events = plain.feed(piece)
        framed: list[bytes] = []
        for part, unmarked in marked.feed_marked(piece, markers):
            if unmarked:
                assert not markers.in_(part)
                framed += EventFramer().feed(part)
            else:
                framed.append(part)
        assert framed == events
        assert len(marked) == len(plain)
    assert marked.take_tail() == plain.take_tail()


# --- the rewriter: recorded streams -----------------------------------------------------------


def recorded_variants() -> Iterator[tuple[str, Api, bytes]]:
    for name, data in RECORDED.items():
        api = Api(name.split("_")[0])
        lf = data.replace(b"\r\n", b"\n")
        for eol in EOLS:
            yield f"{name}-{eol!r}", api, lf.replace(b"\n", eol.encode())
        yield f"{name}-bom", api, streams.BOM + lf


@pytest.mark.parametrize(("name", "api", "data"), list(recorded_variants()))
def test_recorded_streams_every_cut_and_piece_size(name: str, api: Api, data: bytes) -> None:
    for setup in (
        Setup(api),
        Setup(None),
        Setup(api, ENCODE_CALL),
        Setup(api, taken=history(["functions.get_weather:0", "get_time:1"], "safe", 2)),
        Setup(api, limit=100),
    ):
        for cut in range(len(data) + 1):
            assert_same([data[:cut], data[cut:]], setup)
        for size in range(1, 17):
            assert_same(chunks(data, size), setup)


# --- the JSON-array stream (Gemini without ?alt=sse) --------------------------------------------


@fuzz(ci=60, long=1500)
@given(
    data=st.data(),
    raws=st.lists(RAW_ID, min_size=2, max_size=2),
    style=st.sampled_from(["compact", "spaced", "pretty"]),
    cuts=CUTS,
    size=SIZES,
)
def test_json_array_streams(
    data: st.DataObject, raws: list[str], style: streams.Style, cuts: list[int], size: int
) -> None:
    raw, second = raws
    events = streams.gemini_events(raw, second_id=second)
    events += [{"data": {"response": event["data"]}} for event in events]  # Code Assist's
    source = streams.json_array(events, style=style)
    setup = data.draw(setups(data.draw(st.sampled_from([Api.GEMINI, None])), raws))
    for pieces in splits(source, cuts, size):
        assert_same(pieces, setup, JsonArrayRewriter)


# --- the rewriter: fixture, mutated, arbitrary, long and chaotic streams ----------------------


def case_raws(case: Case) -> list[str]:
    return [case.raw, case.second, case.item]


@fuzz(ci=150, long=3000)
@given(data=st.data(), case=cases(), cuts=CUTS, size=SIZES)
def test_fixture_streams(data: st.DataObject, case: Case, cuts: list[int], size: int) -> None:
    setup = data.draw(setups(case.rewriter_api(), case_raws(case)))
    assert_same_however_split(case.body(), cuts, size, setup)


@fuzz(ci=150, long=3000)
@given(data=st.data(), case=cases(), cuts=CUTS, size=SIZES)
def test_mutated_streams(data: st.DataObject, case: Case, cuts: list[int], size: int) -> None:
    source = data.draw(mutated(case))
    setup = data.draw(setups(case.rewriter_api(), case_raws(case)))
    assert_same_however_split(source, cuts, size, setup)


@fuzz(ci=200, long=3000)
@given(
    data=st.data(),
    soup=ARBITRARY,
    api=st.sampled_from([None, *Api]),
    cuts=CUTS,
    size=SIZES,
)
def test_arbitrary_bytes(
    data: st.DataObject, soup: bytes, api: Api | None, cuts: list[int], size: int
) -> None:
    setup = data.draw(setups(api, ["f.x:0", "a:b", "fc:1"]))
    assert_same_however_split(soup, cuts, size, setup)


@fuzz(ci=100, long=2000)
@given(data=st.data(), stream=long_streams(), cuts=CUTS, size=SIZES)
def test_long_streams(
    data: st.DataObject, stream: tuple[Api, bytes], cuts: list[int], size: int
) -> None:
    api, source = stream
    setup = data.draw(setups(data.draw(st.sampled_from([api, api, None])), list(streams.RAW_IDS)))
    assert_same_however_split(source, cuts, size, setup)


@fuzz(ci=100, long=2000)
@given(data=st.data(), case=cases(), cuts=CUTS, size=SIZES)
def test_chaotically_spelled_events(
    data: st.DataObject, case: Case, cuts: list[int], size: int
) -> None:
    """Event data in every legal JSON spelling (escapes, duplicate members, whitespace with
    raw CR and LF, which then split the data across lines or end it early)."""
    spell = data.draw(chaos(dup_rate=st.sampled_from([0.0, 0.2])))
    parts = [streams.BOM] if case.bom else []
    for event in case.events():
        document = event.get("data")
        if isinstance(document, dict):
            spelled = spell.encode(document).decode("utf-8", "surrogatepass")
            event |= {"data": spelled}
        parts.append(streams.render_event(event, eol=case.eol))
    source = b"".join(parts)
    setup = data.draw(setups(case.rewriter_api(), case_raws(case)))
    assert_same_however_split(source, cuts, size, setup)


# --- compressed ------------------------------------------------------------------------------


@fuzz(ci=80, long=2000)
@given(
    data=st.data(),
    stream=long_streams(),
    codec_name=st.sampled_from(sorted(COMPRESSORS)),
    cuts=CUTS,
    size=SIZES,
)
def test_compressed_streams(
    data: st.DataObject, stream: tuple[Api, bytes], codec_name: str, cuts: list[int], size: int
) -> None:
    """Compressed, and corrupt: truncated or a byte flipped."""
    api, source = stream
    damage = data.draw(st.sampled_from([None, "truncate", "flip"]))
    encoding, compress = COMPRESSORS[codec_name]
    compressed = compress(source)
    if damage == "truncate":
        compressed = compressed[: len(compressed) * 2 // 3]
    elif damage == "flip":
        at = len(compressed) // 2
        compressed = compressed[:at] + bytes([compressed[at] ^ 0x55]) + compressed[at + 1 :]
    base = data.draw(setups(api, list(streams.RAW_IDS)))
    setup = Setup(base.api, base.policy, encoding, base.limit, base.taken)
    assert_same_however_split(compressed, cuts, size, setup)


# --- the point of it ---------------------------------------------------------------------------


def tool_call_every_20(eol: str = streams.LF) -> bytes:
    """2,000 Chat events, a tool call every 20."""
    events = []
    for i in range(2000):
        chat = streams.chat_events(f"functions.f:{i}")
        events.append(chat[2] if i % 20 == 19 else chat[1])
    return streams.render(events, eol=eol)


def events_looked_at(pieces: list[bytes]) -> list[bytes]:
    """``assert_same`` on ``pieces`` (Chat), and the events an ``EventReader`` reading them as
    a Chat stream's rewriter does says to look at: those to read whole, and those whose ids it
    located."""
    assert_same(pieces, Setup(Api.CHAT))
    reader = EventReader(DEFAULT_MAX_EVENT_BYTES, encodes=True)
    policy = Policy(Direction.ENCODE)
    markers = body.id_markers(Api.CHAT, Doc.EVENT)
    reader.read_as(Api.CHAT, markers, body.marked_event_filter(Api.CHAT, policy))
    seen: list[bytes] = []
    for piece in pieces:
        data, _, ids, unread, _ = reader.read(piece)
        seen.extend(data[start:stop] for start, stop, _ in unread)
        before = (data.rfind(b"\n\n", 0, one.span[0]) for one in ids if one.span)
        starts = sorted({0 if at < 0 else at + 2 for at in before})  # the located events'
        seen.extend(data[start : data.index(b"\n\n", start) + 2] for start in starts)
    return seen


@pytest.mark.parametrize("eol", [streams.LF, streams.CRLF], ids=["lf", "crlf"])
def test_only_events_around_hits_are_looked_at(eol: str) -> None:
    """2,000 Chat events, a tool call every 20, in 16 KiB pieces: besides the events with a
    tool call, at most one event per piece (the one completing the held tail) is
    looked at; the rest pass in runs. (Framed in Python, as without the native accelerator.)"""
    pieces = chunks(tool_call_every_20(eol), 16 * 1024)
    with stdlib_only():
        looked_at = events_looked_at(pieces)
    tool = sum(b'"tool_calls"' in data for data in looked_at)
    assert tool == 100
    assert len(looked_at) - tool <= len(pieces)
