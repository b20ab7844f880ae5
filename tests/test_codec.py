"""Wire format v1 (docs/wire-format.md): properties and examples of the codec."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from toolid.codec import (
    PREFIXES,
    PROFILES,
    TAG,
    Profile,
    decode,
    encode,
    is_strict_safe,
    occurrence,
    parse,
    passes,
    profile_of,
)

SAFE_RULE = re.compile(r"[A-Za-z0-9_-]+")
PROFILE_RULE: dict[Profile, re.Pattern[str]] = {
    "safe": SAFE_RULE,
    "call": re.compile(r"call_[A-Za-z0-9_-]+"),
}
RESERVED = re.compile(r"(?:call_)?tid[0-9]+_")

# Pieces that sit on the edges of the format: escapes, prefixes, non-ASCII, surrogates.
TRICKY = [
    "",
    "a",
    "Z",
    "0",
    "_",
    "-",
    ".",
    ":",
    "#",
    "/",
    " ",
    "\n",
    "\r",
    "\x00",
    "\x7f",
    "é",
    "日本",
    "\U0001f600",
    "\ud83d",
    "\ude00",
    "\ud800",
    "\udfff",
    "\u0663",
    "\uff41",
    "2E",
    "-2E",
    "-2e",
    "-41",
    "tid1_",
    "call_",
    "call_tid1_",
    "tid2_",
    "tid10_",
    "tid_",
]

profiles = st.sampled_from(PROFILES)
any_char = st.characters(exclude_categories=())  # every code point, lone surrogates (Cs) too
surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
ascii_char = st.characters(max_codepoint=0x7F, exclude_categories=())
raw_ids = st.one_of(
    st.text(any_char),
    st.text(st.one_of(ascii_char, surrogate, any_char)),
    st.lists(st.sampled_from(TRICKY), max_size=6).map("".join),
    st.from_regex(r"(call_)?[A-Za-z0-9_-]{0,12}", fullmatch=True),
    st.from_regex(r"(call_)?tid[0-9]{1,3}_[A-Za-z0-9_.:-]{0,8}", fullmatch=True),
)


def _spell(data: bytes, *, escape_all: bool = False) -> str:
    out = []
    for b in data:
        c = chr(b)
        literal = c.isascii() and (c.isalnum() or c == "_")
        out.append(c if literal and not escape_all else f"-{b:02X}")
    return "".join(out)


@st.composite
def client_like(draw: st.DrawFn) -> str:
    """Strings that look like client ids: a prefix then payload-ish tokens, often malformed."""
    prefix = draw(st.sampled_from(["tid1_", "call_tid1_", "tid2_", "call_", "tid1", "", "x"]))
    token = st.one_of(
        st.sampled_from(list("aZ09_.")),
        st.builds(
            lambda h: "-" + h,
            st.text(st.sampled_from("0123456789ABCDEFabcdefgZ-"), min_size=0, max_size=3),
        ),
        st.binary(max_size=4).map(_spell),
        st.binary(max_size=4).map(lambda b: _spell(b, escape_all=True)),
        raw_ids.map(lambda s: _spell(s.encode("utf-8", "surrogatepass"))),
        any_char,
        st.from_regex(r"-_[0-9]{0,3}", fullmatch=True),  # occurrence tags, canonical or not
    )
    return prefix + "".join(draw(st.lists(token, max_size=8)))


# --- properties -------------------------------------------------------------------------


@given(raw_ids, profiles)
@example("", "safe")
@example("", "call")
@example("\ud800", "safe")
@example("\ud83d\ude00", "call")  # a surrogate *pair* as two code points, not U+1F600
def test_round_trip(raw: str, profile: Profile) -> None:
    assert decode(encode(raw, profile)) == raw


@given(raw_ids, profiles)
def test_encode_output_is_safe_and_matches_profile_rule(raw: str, profile: Profile) -> None:
    enc = encode(raw, profile)
    assert SAFE_RULE.fullmatch(enc)
    assert is_strict_safe(enc)
    assert PROFILE_RULE[profile].fullmatch(enc)


@given(raw_ids, profiles)
def test_encoded_shape(raw: str, profile: Profile) -> None:
    """Unchanged exactly when it passes; else prefix + payload, +2 chars per escaped byte."""
    enc = encode(raw, profile)
    if passes(raw, profile):
        assert enc == raw
        assert enc.encode("utf-8", "surrogatepass") == raw.encode("utf-8", "surrogatepass")
        assert decode(enc) == enc
        return
    prefix = PREFIXES[profile]
    assert enc.startswith(prefix)
    assert profile_of(enc) == profile
    data = raw.encode("utf-8", "surrogatepass")
    n_escaped = sum(not (chr(b).isascii() and (chr(b).isalnum() or b == 0x5F)) for b in data)
    assert len(enc) == len(prefix) + len(data) + 2 * n_escaped
    assert enc[len(prefix) :] == _spell(data)


@given(raw_ids, raw_ids, profiles)
def test_injective(a: str, b: str, profile: Profile) -> None:
    if a != b:
        assert encode(a, profile) != encode(b, profile)


@pytest.mark.parametrize("profile", PROFILES)
def test_injective_and_round_trip_exhaustive(profile: Profile) -> None:
    """All strings of up to 3 characters over a tricky alphabet, and up to 2 tricky pieces."""
    chars = [
        "a",
        "A",
        "0",
        "_",
        "-",
        ".",
        "t",
        "2",
        "E",
        "é",
        "\x00",
        "\ud800",
        "\udc00",
        "\U0001f600",
    ]
    strings = {"".join(t) for n in range(4) for t in itertools.product(chars, repeat=n)}
    strings |= {"".join(t) for n in range(3) for t in itertools.product(TRICKY, repeat=n)}
    seen: dict[str, str] = {}
    for raw in strings:
        enc = encode(raw, profile)
        assert enc not in seen, (raw, seen.get(enc), enc)
        seen[enc] = raw
        assert decode(enc) == raw


@given(
    st.one_of(
        st.from_regex(r"[A-Za-z0-9_-]+", fullmatch=True),
        st.from_regex(
            r"(toolu_|call_|chatcmpl-tool-|tid[0-9]_)[A-Za-z0-9_-]{1,24}", fullmatch=True
        ),
    ),
    profiles,
)
def test_passing_ids_untouched(raw: str, profile: Profile) -> None:
    expected = PROFILE_RULE[profile].fullmatch(raw) is not None and not RESERVED.match(raw)
    assert passes(raw, profile) == expected
    if expected:
        assert encode(raw, profile) == raw
        assert decode(raw) == raw
    else:
        assert encode(raw, profile).startswith(PREFIXES[profile])


@given(raw_ids, profiles, profiles)
def test_already_encoded_upstream_id_is_encoded_again(
    raw: str, inner_p: Profile, outer_p: Profile
) -> None:
    """Two proxies in a chain: each undoes exactly its own layer."""
    inner = encode(raw, inner_p)
    outer = encode(inner, outer_p)
    if inner != raw:  # inner carries a reserved prefix, so the outer proxy must wrap it
        assert outer != inner
        assert outer.startswith(PREFIXES[outer_p])
    assert decode(outer) == inner
    assert decode(decode(outer)) == raw


@given(st.from_regex(r"(call_)?tid[0-9]+_", fullmatch=True), st.text(any_char), profiles)
def test_reserved_prefix_never_passes(prefix: str, rest: str, profile: Profile) -> None:
    raw = prefix + rest
    assert not passes(raw, profile)
    enc = encode(raw, profile)
    assert enc == PREFIXES[profile] + _spell(raw.encode("utf-8", "surrogatepass"))
    assert decode(enc) == raw


@given(st.one_of(st.text(any_char), client_like(), raw_ids))
@example("tid1_-ED-A0-80")
@example("tid1_-C3")
@example("call_tid1_-")
def test_decode_total_and_canonical(s: str) -> None:
    """decode never raises; it returns s itself or the one raw id that encode maps to s."""
    raw = decode(s)
    assert isinstance(raw, str)
    assert decode(s) == raw  # pure
    if raw != s:
        profile = profile_of(s)
        assert profile is not None
        assert encode(raw, profile, occurrence(s)) == s


# --- occurrence tags --------------------------------------------------------------------

occurrences = st.integers(min_value=2, max_value=10**6)


@given(raw_ids, profiles, occurrences)
@example("call_0", "safe", 2)
@example("", "call", 10)
def test_tagged_round_trip(raw: str, profile: Profile, k: int) -> None:
    client = encode(raw, profile, k)
    assert parse(client) == (raw, k)
    assert decode(client) == raw
    assert SAFE_RULE.fullmatch(client)
    assert client.startswith(PREFIXES[profile])  # always escaped, even for a passing raw id


@given(raw_ids, raw_ids, profiles, occurrences, st.integers(min_value=1, max_value=10**6))
def test_tagged_injective_and_never_untagged(
    a: str, b: str, profile: Profile, k: int, j: int
) -> None:
    """(raw, k) -> client id is injective, and a tagged id is never any untagged one."""
    tagged = encode(a, profile, k)
    assert tagged != encode(b, profile)
    if (a, k) != (b, j):
        assert tagged != encode(b, profile, j)


@given(raw_ids, profiles, occurrences)
def test_non_canonical_tags_are_left_alone(raw: str, profile: Profile, k: int) -> None:
    client = encode(raw, profile, k)
    payload, _, number = client.rpartition(TAG)
    variants = (f"{payload}{TAG}0{number}", f"{payload}{TAG}1", f"{payload}{TAG}", client + "-_2")
    for variant in variants:
        assert decode(variant) == variant


def test_huge_occurrence_still_decodes() -> None:
    digits = "9" * 5000  # past Python's default int-from-text limit
    assert parse(f"tid1_x-_{digits}") == ("x", 10**5000 - 1)


def test_bad_occurrence() -> None:
    with pytest.raises(ValueError, match="occurrence"):
        encode("x", "safe", 0)


TAG_EXAMPLES: list[tuple[str, int, Profile, str]] = [
    ("functions.Glob:0", 1, "safe", "tid1_functions-2EGlob-3A0"),
    ("functions.Glob:0", 2, "safe", "tid1_functions-2EGlob-3A0-_2"),
    ("call_0", 1, "safe", "call_0"),
    ("call_0", 3, "safe", "tid1_call_0-_3"),
    ("call_0", 2, "call", "call_tid1_call_0-_2"),
    ("pwd_0", 12, "safe", "tid1_pwd_0-_12"),
]


@pytest.mark.parametrize(("raw", "k", "profile", "client"), TAG_EXAMPLES)
def test_tag_spec_examples(raw: str, k: int, profile: Profile, client: str) -> None:
    assert encode(raw, profile, k) == client
    assert parse(client) == (raw, k)


@pytest.mark.parametrize(
    "client", ["tid1_call_0-_1", "tid1_call_0-_02", "tid1_call_0-_", "tid1_x-_2-_3"]
)
def test_tag_spec_not_decoded(client: str) -> None:
    assert decode(client) == client
    assert parse(client) == (client, 1)


# --- examples ---------------------------------------------------------------------------

SPEC_EXAMPLES: list[tuple[str, Profile, str]] = [
    ("functions.list_skills:0", "safe", "tid1_functions-2Elist_skills-3A0"),
    (
        "get_weather:0#62786027996b4c40886cc7262bdf7382",
        "safe",
        "tid1_get_weather-3A0-2362786027996b4c40886cc7262bdf7382",
    ),
    ("call_abc-123", "safe", "call_abc-123"),
    ("", "safe", "tid1_"),
    ("a-b.c", "safe", "tid1_a-2Db-2Ec"),
    ("tid1_x", "safe", "tid1_tid1_x"),
    ("toolu_01AbC", "call", "call_tid1_toolu_01AbC"),
    ("call_abc", "call", "call_abc"),
]


@pytest.mark.parametrize(("raw", "profile", "client"), SPEC_EXAMPLES)
def test_spec_examples(raw: str, profile: Profile, client: str) -> None:
    assert encode(raw, profile) == client
    assert decode(client) == raw


CLASS_EXAMPLES: list[tuple[str, Profile, str]] = [
    (".", "safe", "tid1_-2E"),
    (":", "safe", "tid1_-3A"),
    ("#", "safe", "tid1_-23"),
    ("/", "safe", "tid1_-2F"),
    ("a b", "safe", "tid1_a-20b"),
    (" ", "call", "call_tid1_-20"),
    ("é", "safe", "tid1_-C3-A9"),
    ("日本", "safe", "tid1_-E6-97-A5-E6-9C-AC"),
    ("\U0001f600", "safe", "tid1_-F0-9F-98-80"),
    ("\ud800", "safe", "tid1_-ED-A0-80"),
    ("\ud83d\ude00", "safe", "tid1_-ED-A0-BD-ED-B8-80"),
    ("", "call", "call_tid1_"),
    ("-", "safe", "-"),
    ("-", "call", "call_tid1_-2D"),
    ("abc", "call", "call_tid1_abc"),
    ("call_", "call", "call_tid1_call_"),
    ("call_x.y", "call", "call_tid1_call_x-2Ey"),
    ("tid1_", "safe", "tid1_tid1_"),
    ("tid1_", "call", "call_tid1_tid1_"),
    ("tid1_abc", "call", "call_tid1_tid1_abc"),
    ("call_tid1_x", "safe", "tid1_call_tid1_x"),
    ("call_tid1_x", "call", "call_tid1_call_tid1_x"),
    ("tid2_x", "safe", "tid1_tid2_x"),
    ("tid99_", "safe", "tid1_tid99_"),
    ("call_tid2_x", "call", "call_tid1_call_tid2_x"),
    ("tid_x", "safe", "tid_x"),  # no digits: not reserved
    ("tid1x", "safe", "tid1x"),
    ("abc\n", "safe", "tid1_abc-0A"),  # no `$` loophole in the pass rule
    ("\u0663", "safe", "tid1_-D9-A3"),  # a non-ASCII digit is not a safe character
    ("\uff41", "safe", "tid1_-EF-BD-81"),  # nor is a fullwidth letter
    ("toolu_01A09q90qw90lq917835lq9", "safe", "toolu_01A09q90qw90lq917835lq9"),
    ("chatcmpl-tool-8f3a", "safe", "chatcmpl-tool-8f3a"),
]


@pytest.mark.parametrize(("raw", "profile", "client"), CLASS_EXAMPLES)
def test_class_examples(raw: str, profile: Profile, client: str) -> None:
    assert encode(raw, profile) == client
    assert decode(client) == raw


@pytest.mark.parametrize(
    "client",
    [
        "tid1_abc",  # encode("abc") is "abc": not produced by encode
        "tid1_a-2eb",  # lowercase hex
        "tid1_-41",  # an escaped letter
        "tid1_-5F",  # an escaped underscore
        "call_tid1_-30",  # an escaped digit
        "tid1_call_x",  # encode("call_x", "safe") is "call_x"
        "call_tid1_call_x",  # encode("call_x", "call") is "call_x"
        "tid1_-",  # truncated escapes
        "tid1_-2",
        "tid1_-ZZ",
        "tid1_a.b",  # a character a payload never holds
        "tid1_a b",
        "tid1_abc\n",
        "tid1_\u0663",
        "tid1_-C3",  # invalid UTF-8: lone lead byte
        "tid1_-A9",  # lone continuation byte
        "tid1_-C0-80",  # overlong
        "tid1_-F4-90-80-80",  # beyond U+10FFFF
        "tid2_-2E",  # reserved for later versions
        "call_tid2_-2E",
        "TID1_-2E",
        "",
        "abc",
        "call_abc",
        "-2E",
        "\ud800",
    ],
)
def test_decode_leaves_non_canonical_alone(client: str) -> None:
    assert decode(client) == client


def test_profile_of() -> None:
    assert profile_of("tid1_x") == "safe"
    assert profile_of("call_tid1_x") == "call"
    assert profile_of("call_x") is None
    assert profile_of("tid2_x") is None
    assert profile_of("") is None
