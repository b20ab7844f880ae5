"""Fuzzing the SSE stream rewriter (toolid.stream: decompressor + framer + body rewriter)
beyond tests/test_stream.py and tests/test_sse.py.

Those already check recorded streams of all three APIs under any split (equal to the
buffered rewrite, event by event), arbitrary small byte soups, garbage fed to each
decompressor, well-formed compressed streams, truncated ones, and oversized events of a
fixed shape. This adds:

- recorded streams *mutated* (junk, invalid UTF-8, cut ranges, duplicated ranges, a cut
  end, oversized events under random limits, a secret in the data) and split anywhere:
  never raises, the same output and reports however split (down to single bytes), bytes
  unchanged when nothing changed, and decoding the output gives back the input exactly
  (so the output differs from the input only in id literals);
- arbitrary bytes under tiny ``max_event_bytes`` limits (the skip-ahead path);
- valid streams compressed by every codec, then corrupted (truncated, a byte flipped,
  junk inserted, prepended or appended) and split anywhere: the output is exactly the
  rewrite of what decoded, then the rest of the body as received (docs/design.md "Streams",
  "Compression"), with one problem reported;
- events of a few MiB at the default limit, and (``--long``) an event
  above the default 16 MiB limit;
- problem messages never quote the body.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests import streams
from tests.test_stream import (
    COMPRESSORS,
    DECODE,
    ENCODE,
    NOISE,
    Case,
    bytewise,
    cases,
    chunks,
    run,
    split_at,
)
from toolid import decompress
from toolid.codec import decode, encode
from toolid.positions import CALLS_BY_MENTION, Api
from toolid.problem import COMPRESSED_CORRUPT, EVENT_TOO_LARGE, Problem
from toolid.stream import DEFAULT_MAX_EVENT_BYTES, StreamRewriter

from .budget import fuzz
from .oracle import SECRET
from .strategies import INVALID_UTF8, SURROGATE_BYTES

# Every test here runs with each backend: native, orjson alone, the standard library.
pytestmark = pytest.mark.usefixtures("backend")

CUTS = st.lists(st.integers(min_value=0), max_size=30)
# Raw ids whose JSON literal json.dumps(ensure_ascii=False) spells as the rewriter does
# (no lone surrogates), so that decoding the output must give back the input byte for byte.
PLAIN_RAW = st.sampled_from(streams.RAW_IDS) | st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8
)
JUNK = NOISE | st.sampled_from(INVALID_UTF8 + SURROGATE_BYTES) | st.binary(max_size=8)


def id_event(api: Api, raw: str) -> streams.Event:
    """The first fixture event of ``api`` that carries ``raw`` at an id position."""
    for event_ in streams.events_for(api, raw):
        data = event_.get("data")
        if isinstance(data, dict) and any(v == raw for _, v in streams.tool_ids(api, data)):
            return event_
    raise AssertionError(f"no {api} fixture event carries the id")


def secret_event(eol: str) -> bytes:
    return streams.render_event(
        {"data": {"choices": [{"delta": {"content": SECRET}}], "api_key": SECRET}}, eol=eol
    )


@st.composite
def mutated(draw: st.DrawFn, case: Case) -> bytes:
    """``case``'s stream with a few random mutations."""
    data = case.body()
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        op = draw(st.sampled_from(["insert", "delete", "duplicate", "secret", "big", "cut"]))
        at = draw(st.integers(min_value=0, max_value=len(data)))
        if op == "insert":
            data = data[:at] + draw(JUNK) + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + draw(st.integers(min_value=1, max_value=40)) :]
        elif op == "duplicate":
            data = data[:at] + data[at : at + draw(st.integers(1, 400))] + data[at:]
        elif op == "secret":
            data = data[:at] + secret_event(case.eol) + data[at:]
        elif op == "big":  # an event of a few KB that carries an id
            pad = "x" * draw(st.integers(min_value=1000, max_value=20_000))
            big = id_event(case.api, case.raw)
            data = (
                data[:at] + streams.render_event(big | {"comment": pad}, eol=case.eol) + data[at:]
            )
        else:
            data = data[:at]
    return data


def crlf_kept(pieces: list[bytes]) -> list[bytes]:
    """``pieces``, joined wherever a CR ends one and an LF starts the next."""
    out: list[bytes] = []
    for piece in pieces:
        if out and out[-1].endswith(b"\r") and piece.startswith(b"\n"):
            out[-1] += piece
        elif piece:
            out.append(piece)
    return out


def _not_sizes(problems: list[Problem]) -> list[Problem]:
    return [problem for problem in problems if problem.code != EVENT_TOO_LARGE]


def assert_same_however_split(
    data: bytes, cuts: list[int], **kwargs: object
) -> tuple[bytes, StreamRewriter]:
    whole, whole_rw = run([data], **kwargs)  # type: ignore[arg-type]
    pieces = [split_at(data, cuts)]
    if len(data) <= 3000:
        pieces.append(bytewise(data))
    for split in pieces:
        kept = crlf_kept(split)
        out, rewriter = run(kept, **kwargs)  # type: ignore[arg-type]
        assert out == whole
        assert rewriter.changes == whole_rw.changes
        assert rewriter.problems == whole_rw.problems
        if kept != split:
            # A cut between the CR and the LF of a line ending: the LF goes out alone
            # (test_a_crlf_split_does_not_make_the_next_event_oversized).
            event("a cut between CR and LF")
            out, rewriter = run(split, **kwargs)  # type: ignore[arg-type]
            assert out == whole
            assert rewriter.changes == whole_rw.changes
            # The event ends at the CR there, one byte shorter: at the size limit it may be
            # oversized whole and not split (b"\0" * 6 + b"\n\r\n", limit 8).
            assert _not_sizes(rewriter.problems) == _not_sizes(whole_rw.problems)
    if not whole_rw.changes:
        assert whole == data
    for problem in whole_rw.problems:
        assert SECRET[:6] not in problem.message, problem
    return whole, whole_rw


@fuzz(ci=120, long=5000)
@given(data=st.data(), case=cases(raw=PLAIN_RAW), cuts=CUTS)
def test_mutated_streams(data: st.DataObject, case: Case, cuts: list[int]) -> None:
    case = Case(**{**case.__dict__, "ensure_ascii": False})
    limit = data.draw(st.sampled_from([DEFAULT_MAX_EVENT_BYTES, 5000, 1000]))
    source = data.draw(mutated(case))
    api = case.rewriter_api()
    _, rewriter = assert_same_however_split(source, cuts, api=api, max_event_bytes=limit)
    event(f"{len(rewriter.changes) > 0=} {len(rewriter.problems) > 0=}")
    # Decoding the client's stream gives back the upstream's, byte for byte: the output
    # differs from the input only in id literals (tests/fuzz/test_fuzz_body.py checks that
    # the body rewriter only ever edits literals at id positions). A call whose later event
    # carries another id (a mutation moved or repeated an event) keeps its first one's
    # client id, so that other id cannot come back.
    encoded, forth = run(split_at(source, cuts), case.api, max_event_bytes=limit)
    if not forth.problems and all(decode(c.client) == c.raw for c in forth.changes):
        restored, _ = run(split_at(encoded, cuts), case.api, DECODE)
        assert restored == source


@fuzz(ci=150, long=5000)
@given(
    data=st.lists(NOISE | st.binary(max_size=6), max_size=60).map(b"".join),
    cuts=CUTS,
    api=st.sampled_from([None, *Api]),
    limit=st.integers(min_value=1, max_value=64),
)
def test_arbitrary_bytes_under_tiny_event_limits(
    data: bytes, cuts: list[int], api: Api | None, limit: int
) -> None:
    """Nearly every event is oversized: the skip-ahead path under any split."""
    out, rewriter = assert_same_however_split(data, cuts, api=api, max_event_bytes=limit)
    assert out == data or rewriter.changes


def test_oversized_event_report_does_not_depend_on_the_split() -> None:
    """Found by this fuzzing (fixed in c6baa17): the whole-events fast path forwarded an
    oversized event without reporting it when it arrived in one piece, so whether the
    proxy warned depended on TCP segmentation."""
    source = b"data: " + b"x" * 100 + b"\n\n"
    whole, whole_rw = run([source], Api.CHAT, max_event_bytes=10)
    split, split_rw = run(bytewise(source), Api.CHAT, max_event_bytes=10)
    assert whole == split == source
    assert len(split_rw.problems) == 1  # reported when it arrives in pieces
    assert whole_rw.problems == split_rw.problems  # ... and not when it arrives whole


def test_a_crlf_split_does_not_make_the_next_event_oversized() -> None:
    first = b'data: {"choices":[]}\r\n\r\n'
    second = (
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"functions.f:0"}]}}]}\r\n\r\n'
    )
    limit = len(second)
    whole, whole_rw = run([first + second], Api.CHAT, max_event_bytes=limit)
    assert encode("functions.f:0").encode() in whole
    assert whole_rw.problems == []
    split, split_rw = run([first[:-1], first[-1:] + second], Api.CHAT, max_event_bytes=limit)
    assert split == whole
    assert split_rw.problems == []


# --- compressed, and corrupt ---------------------------------------------------------------------


def corrupt(data: bytes, how: str, at: int, junk: bytes) -> bytes:
    at %= len(data) + 1
    if how == "truncate":
        return data[:at]
    if how == "flip":
        if at == len(data):
            at -= 1
        return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    if how == "insert":
        return data[:at] + junk + data[at:]
    if how == "prepend":
        return junk + data
    if how == "append":
        return data + junk
    return data


def reference(
    pieces: list[bytes], encoding: str, identity: Callable[[bytes], bytes]
) -> tuple[bytes, bool]:
    """What the client must get, from docs/design.md: the rewrite of everything that decoded,
    then, from the first piece that did not decode, the rest as received (or, when only
    the end is bad, the rewrite of everything). And whether a problem must be reported."""
    decoder = decompress.for_encoding(encoding)
    assert decoder is not None
    decoded = []
    for index, piece in enumerate(pieces):
        try:
            decoded.append(decoder.decompress(piece))
        except Exception:
            return identity(b"".join(decoded)) + b"".join(pieces[index:]), True
    try:
        decoded.append(decoder.flush())
    except Exception:
        return identity(b"".join(decoded)), True
    return identity(b"".join(decoded)), False


@fuzz(ci=150, long=5000)
@given(
    case=cases(),
    codec=st.sampled_from(sorted(COMPRESSORS)),
    how=st.sampled_from(["none", "none", "truncate", "flip", "insert", "prepend", "append"]),
    damage=st.tuples(st.integers(min_value=0), st.binary(min_size=1, max_size=16)),
    cuts=CUTS,
)
def test_compressed_and_corrupt_streams(
    case: Case, codec: str, how: str, damage: tuple[int, bytes], cuts: list[int]
) -> None:
    encoding, compress = COMPRESSORS[codec]
    source = case.body()
    api = case.rewriter_api()
    body = corrupt(compress(source), how, *damage)
    pieces = split_at(body, cuts)
    out, rewriter = run(pieces, api, content_encoding=encoding)
    assert rewriter.decodes

    plain_problems: list[Problem] = []

    def identity(plain: bytes) -> bytes:
        plain_out, plain_rewriter = run([plain], api)
        plain_problems.extend(plain_rewriter.problems)  # events of garbage that decoded
        return plain_out

    expected, bad = reference(pieces, encoding, identity)
    assert out == expected
    compression = [p for p in rewriter.problems if p.code == COMPRESSED_CORRUPT]
    assert len(compression) == (1 if bad else 0), rewriter.problems
    assert [p for p in rewriter.problems if p not in compression] == plain_problems
    if how == "none":
        assert not bad
        assert out == identity(source) == case.expected()
    event(f"{how}: {'problem' if bad else 'clean'}")


@fuzz(ci=40, long=2000)
@given(case=cases(), cuts=CUTS, junk_at=st.integers(min_value=0), junk=st.binary(max_size=64))
def test_gzip_stream_broken_after_a_flush_point(
    case: Case, cuts: list[int], junk_at: int, junk: bytes
) -> None:
    """A server that writes gzip event by event (Z_SYNC_FLUSH), then garbage: every event
    before the garbage reaches the client rewritten, the rest passes as received."""
    source = case.body()
    events = case.render_events()
    cut = junk_at % (len(events) + 1)
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    good = compressor.flush(zlib.Z_SYNC_FLUSH)  # the gzip header (and an empty block)
    good += b"".join(
        compressor.compress(e) + compressor.flush(zlib.Z_SYNC_FLUSH) for e in events[:cut]
    )
    bad = b"\x07" + junk  # BFINAL=1, BTYPE=11: an invalid deflate block, at a byte boundary
    out, rewriter = run([*split_at(good, cuts), bad], case.rewriter_api(), content_encoding="gzip")
    assert out == run([b"".join(events[:cut])], case.rewriter_api())[0] + bad
    assert len(rewriter.problems) == 1
    assert source.startswith(b"".join(events[:cut]))


# --- size -------------------------------------------------------------------------------------

MIB = 1024 * 1024


def big_id_event(api: Api, raw: str, size: int, eol: str = streams.LF) -> bytes:
    """An event of about ``size`` bytes that carries ``raw`` at an id position (the padding
    is a comment line, so that the data stays the fixture's)."""
    event_ = id_event(api, raw)
    event_ = event_ | {
        "comment": "x" * (size // 2),
        "data": event_["data"] | {"pad": "y" * (size // 2)},
    }
    return streams.render_event(event_, eol=eol)


@pytest.mark.parametrize("api", list(Api))
@pytest.mark.parametrize("piece", [1024, 65536])
def test_an_event_of_a_few_mib_is_rewritten(api: Api, piece: int) -> None:
    raw = "functions.get_weather:0"
    event_ = big_id_event(api, raw, 3 * MIB)
    source = streams.render(streams.events_for(api, raw)[:2]) + event_ + event_
    out, rewriter = run(chunks(source, piece), api)
    # The event sent twice: one call mentioned twice, or (Gemini) a second call with that id.
    again = encode(raw, occurrence=2) if api in CALLS_BY_MENTION else encode(raw)
    assert out == (
        streams.render(streams.events_for(api, encode(raw))[:2])
        + big_id_event(api, encode(raw), 3 * MIB)
        + big_id_event(api, again, 3 * MIB)
    )
    assert rewriter.problems == []


@pytest.mark.long
@pytest.mark.parametrize("piece", [4096, 65536])
def test_event_above_the_default_limit_passes_with_bounded_memory(piece: int) -> None:
    raw = "functions.get_weather:0"
    big = big_id_event(Api.CHAT, raw, 20 * MIB)
    small = big_id_event(Api.CHAT, raw, 10)
    rewriter = StreamRewriter(Api.CHAT, ENCODE)
    out = []
    for part in chunks(small + big + small, piece):
        out.append(rewriter.feed(part))
        assert rewriter.held <= DEFAULT_MAX_EVENT_BYTES + piece
    out.append(rewriter.finish())
    client_small = big_id_event(Api.CHAT, encode(raw), 10)
    assert b"".join(out) == client_small + big + client_small
    assert len(rewriter.problems) == 1
