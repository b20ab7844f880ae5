"""Wire format v1 (docs/wire-format.md): properties and examples of the codec."""

from __future__ import annotations

import itertools
import json
import operator
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from toolid.codec import (
    MINTED_LEAD,
    PREFIXES,
    PROFILES,
    TAG,
    VALUE_LEAD,
    JsonText,
    Profile,
    decode,
    encode,
    encode_value,
    is_strict_safe,
    mint,
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
@example("tid1_-j7")
@example("call_tid1_-jtrue-_3")
@example("tid1_-n-_2")
def test_decode_total_and_canonical(s: str) -> None:
    """decode never raises; it returns s itself or the one raw id that encode (a JsonText:
    encode_value) maps to s."""
    raw = decode(s)
    assert isinstance(raw, str)
    assert decode(s) == raw  # pure
    if raw != s:
        profile = profile_of(s)
        assert profile is not None
        if type(raw) is JsonText:
            assert encode_value(raw, profile, occurrence(s)) == s
        else:
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


# --- calls with no usable id: a number or boolean (encode_value), none (mint) --------------

# JSON's number grammar (RFC 8259), independent of the codec's own pattern
JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
NUMBER_EDGES = [
    "0",
    "-0",
    "0.0",
    "-0.0",
    "7",
    "-1",
    "1.5",
    "1e400",
    "-1e400",
    "1E+2",
    "1e-7",
    "0.1e-999",
    "9007199254740993",
    "18446744073709551616",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1" * 300,  # past the memo's longest key
]
json_numbers = st.one_of(
    st.sampled_from(NUMBER_EDGES),
    st.integers().map(str),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.from_regex(r"-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,8})?([eE][+-]?[0-9]{1,4})?", fullmatch=True),
)
# Every JSON text a raw id that is not a string may have (null: minted)
json_scalars = st.one_of(json_numbers, st.sampled_from(["true", "false"]))
occurrences_from_1 = st.integers(min_value=1, max_value=10**6)


def _is_json_scalar_text(text: str) -> bool:
    return text in ("true", "false") or JSON_NUMBER.fullmatch(text) is not None


@given(json_scalars)
def test_json_scalars_are_json(text: str) -> None:
    """The strategy itself: each text is one JSON number or boolean, as a parser reads it."""
    assert _is_json_scalar_text(text)
    value = json.loads(text)
    assert type(value) in (int, float, bool)


@given(json_scalars, profiles, occurrences_from_1)
@example("-0.0", "safe", 1)
@example("1e400", "call", 1)
@example("true", "safe", 2)
@example("false", "call", 10)
@example("0", "safe", 1)
def test_value_round_trip(text: str, profile: Profile, k: int) -> None:
    """decode(encode_value(text)) is a JsonText (written unquoted) equal to text."""
    client = encode_value(text, profile, k)
    raw = decode(client)
    assert type(raw) is JsonText
    assert raw == text
    assert parse(client) == (text, k)
    assert type(parse(client)[0]) is JsonText
    assert occurrence(client) == k
    assert SAFE_RULE.fullmatch(client)
    assert PROFILE_RULE[profile].fullmatch(client)
    assert profile_of(client) == profile
    assert client.startswith(PREFIXES[profile] + VALUE_LEAD)
    assert decode(client) == raw  # pure (the memo's answer is the same)
    assert type(decode(client)) is JsonText


@given(
    a=json_scalars,
    b=json_scalars,
    pa=profiles,
    pb=profiles,
    j=occurrences_from_1,
    k=occurrences_from_1,
)
def test_value_injective(*, a: str, b: str, pa: Profile, pb: Profile, j: int, k: int) -> None:
    if (a, pa, j) != (b, pb, k):
        assert encode_value(a, pa, j) != encode_value(b, pb, k)


@pytest.mark.parametrize("profile", PROFILES)
def test_value_distinct_spellings_of_one_number(profile: Profile) -> None:
    """The upstream's spelling travels: 1, 1.0, 1e0, 1E0 and 10e-1 are distinct ids."""
    spellings = ["1", "1.0", "1e0", "1E0", "1e+0", "10e-1", "0", "-0", "0.0", "-0.0"]
    clients = [encode_value(text, profile) for text in spellings]
    assert len(set(clients)) == len(spellings)
    assert [decode(client) for client in clients] == spellings


@given(
    text=json_scalars,
    raw=raw_ids,
    pv=profiles,
    ps=profiles,
    j=occurrences_from_1,
    k=occurrences_from_1,
)
def test_value_never_an_encoded_string(
    *, text: str, raw: str, pv: Profile, ps: Profile, j: int, k: int
) -> None:
    """A number's client id is never a string's (encode), so neither is ever mistaken for the
    other; the number's text as a string id is a different client id."""
    assert encode_value(text, pv, j) != encode(raw, ps, k)
    assert encode_value(text, pv, j) != encode(text, ps, k)


@given(
    st.one_of(
        st.text(max_size=12),
        st.text(st.sampled_from("-+.0123456789eE trufalsn\"'"), max_size=8),
        st.sampled_from(
            [
                "",
                "null",
                "01",
                "-01",
                "1.",
                ".5",
                "+1",
                "1e",
                "1e+",
                "-",
                "NaN",
                "Infinity",
                "-Infinity",
                " 7",
                "7 ",
                '"7"',
                "True",
                "TRUE",
                "0x1F",
                "1_000",
                "\u0663",
                "[]",
                "{}",
            ]
        ),
    ),
    profiles,
)
def test_value_rejects_other_texts(text: str, profile: Profile) -> None:
    """Only the JSON text of a number or a boolean has a value id (null is minted)."""
    if _is_json_scalar_text(text):
        assert decode(encode_value(text, profile)) == text
    else:
        with pytest.raises(ValueError, match="not the JSON text"):
            encode_value(text, profile)


@given(profiles, occurrences_from_1)
@example("safe", 1)
@example("safe", 2)
@example("call", 1)
def test_mint_round_trips_to_itself(profile: Profile, k: int) -> None:
    client = mint(profile, k)
    assert client == PREFIXES[profile] + MINTED_LEAD + ("" if k == 1 else f"{TAG}{k}")
    assert decode(client) == client
    assert type(decode(client)) is str  # a string id, written quoted, never a JsonText
    assert parse(client) == (client, k)
    assert occurrence(client) == k
    assert SAFE_RULE.fullmatch(client)
    assert PROFILE_RULE[profile].fullmatch(client)
    assert profile_of(client) == profile


def test_mint_examples() -> None:
    assert [mint("safe", k) for k in (1, 2, 3, 12)] == [
        "tid1_-n",
        "tid1_-n-_2",
        "tid1_-n-_3",
        "tid1_-n-_12",
    ]
    assert mint("call") == "call_tid1_-n"
    assert mint("call", 2) == "call_tid1_-n-_2"
    assert encode_value("7") == "tid1_-j7"
    assert encode_value("7", "safe", 2) == "tid1_-j7-_2"
    assert encode_value("-1.5e3") == "tid1_-j-2D1-2E5e3"
    assert encode_value("true", "call", 3) == "call_tid1_-jtrue-_3"


@given(profiles, profiles, occurrences_from_1, occurrences_from_1)
def test_mint_distinct(pa: Profile, pb: Profile, j: int, k: int) -> None:
    if (pa, j) != (pb, k):
        assert mint(pa, j) != mint(pb, k)


@given(
    pm=profiles,
    po=profiles,
    j=occurrences_from_1,
    k=occurrences_from_1,
    raw=raw_ids,
    text=json_scalars,
)
@example(pm="safe", po="safe", j=1, k=1, raw="tid1_-n", text="7")
@example(pm="safe", po="safe", j=1, k=1, raw="-n", text="7")
@example(pm="safe", po="safe", j=2, k=2, raw="", text="7")
def test_mint_is_no_other_id(
    *, pm: Profile, po: Profile, j: int, k: int, raw: str, text: str
) -> None:
    """A minted id is never the client id of any string, number or boolean."""
    minted = mint(pm, j)
    assert minted != encode(raw, po, k)
    assert minted != encode_value(text, po, k)


def test_bad_occurrence_of_the_additions() -> None:
    with pytest.raises(ValueError, match="occurrence"):
        mint("safe", 0)
    with pytest.raises(ValueError, match="occurrence"):
        encode_value("7", "safe", 0)


@given(profiles, occurrences_from_1)
def test_empty_string_round_trips(profile: Profile, k: int) -> None:
    """ "" is a string id (not a missing one): it is encoded, decodes to "", never minted."""
    client = encode("", profile, k)
    assert decode(client) == ""
    assert type(decode(client)) is str
    assert parse(client) == ("", k)
    assert client != mint(profile, k)
    assert not client[len(PREFIXES[profile]) :].startswith((VALUE_LEAD, MINTED_LEAD))


LEADS = [VALUE_LEAD, MINTED_LEAD, "-j7", "-jtrue", "-n-_2", "-J", "-N"]
string_ids_with_leads = st.one_of(
    raw_ids,
    st.builds(
        operator.add,
        st.sampled_from(["", "tid1_", "call_tid1_", "call_", "tid2_"]),
        st.builds(operator.add, st.sampled_from(LEADS), raw_ids),
    ),
)


@given(string_ids_with_leads, profiles, occurrences_from_1)
@example("-j7", "safe", 1)
@example("-n", "safe", 1)
@example("-n", "call", 1)
@example("tid1_-n", "safe", 1)
@example("tid1_-j7", "safe", 1)
@example("call_tid1_-n-_2", "call", 2)
@example("7", "safe", 1)
@example("true", "call", 1)
@example("null", "safe", 1)
def test_string_ids_never_take_the_new_leads(raw: str, profile: Profile, k: int) -> None:
    """Version-1 ids are unchanged by the addition: no string's client id has a payload that
    starts with -j or -n, and every string decodes to itself as a string (never a JsonText),
    also one that starts with -j / -n or spells a number."""
    client = encode(raw, profile, k)
    lead = profile_of(client)
    if lead is not None:
        assert not client[len(PREFIXES[lead]) :].startswith((VALUE_LEAD, MINTED_LEAD))
    assert decode(client) == raw
    assert type(decode(client)) is str
    assert parse(client) == (raw, k)


@given(
    st.sampled_from(list(PREFIXES.values())),
    st.sampled_from([VALUE_LEAD, MINTED_LEAD]),
    st.one_of(client_like(), st.text(st.sampled_from("0123456789-_ejEtruefalsn2DB+."), max_size=8)),
)
@example("tid1_", "-j", "")  # no text
@example("tid1_", "-j", "-2B1")  # +1: not JSON
@example("tid1_", "-j", "01")  # a leading zero: not JSON
@example("tid1_", "-j", "-30")  # an escaped digit: not canonical
@example("tid1_", "-j", "7-_1")  # tag 1: not canonical
@example("tid1_", "-j", "7-_02")
@example("tid1_", "-j", "null")  # null is minted, never a value id
@example("tid1_", "-n", "x")
@example("tid1_", "-n", "-_1")
@example("tid1_", "-n", "-_02")
@example("tid1_", "-n", "-_")
def test_addition_decodes_only_what_it_makes(prefix: str, lead: str, rest: str) -> None:
    """A client id with a new lead decodes to a value only when encode_value made it, is a
    minted id only when mint made it, and is otherwise left alone (as a string)."""
    client = prefix + lead + rest
    profile = profile_of(client)
    assert profile is not None
    raw = decode(client)
    if type(raw) is JsonText:
        assert encode_value(raw, profile, occurrence(client)) == client
    else:
        assert raw == client
        if occurrence(client) != 1 or client == mint(profile):
            assert client == mint(profile, occurrence(client))
