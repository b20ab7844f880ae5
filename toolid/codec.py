"""Wire format v1: encode and decode one tool-call id (standard library only).

The contract is ``docs/wire-format.md``: a raw id that a client
would not accept is turned into ``prefix + payload``, where the payload spells
the id's UTF-8 bytes with ``A-Za-z0-9_`` as themselves and every other byte as
``-XX`` (uppercase hex). The raw id travels inside the client id, so decoding
needs no state. This format is persistent: never change it, add a version.

Occurrence tags (same contract): the k-th tool call (k >= 2) of a conversation that carries
an already-used raw id gets ``prefix + payload + "-_" + k``, which decodes to the same raw id.

Calls with no usable id (same contract, an addition that leaves every version-1 id as it
was): a raw id that is not a string (a number or a boolean) travels as its JSON text,
``prefix + "-j" + payload`` (``encode_value``), and decodes to that text as a ``JsonText``,
written back as it is; a call that had no id (missing, or null) gets a minted one,
``prefix + "-n"`` (``mint``), which decodes to itself. Both take occurrence tags.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Final, Literal

from toolid.memo import memo

Profile = Literal["safe", "call"]
PROFILES: Final[tuple[Profile, ...]] = ("safe", "call")

# What every client id's prefix ends with: one search for it finds every client id.
MARK: Final = "tid1_"
MARK_BYTES: Final = MARK.encode()
PREFIXES: Final[dict[Profile, str]] = {"safe": MARK, "call": "call_" + MARK}
# How far before its MARK a client id's prefix begins, at most (``call_``).
LONGEST_LEAD: Final = max(len(prefix) for prefix in PREFIXES.values()) - len(MARK)

_RESERVED = re.compile(r"(?:call_)?tid[0-9]+_")
_PASSES: Final[dict[Profile, re.Pattern[str]]] = {
    "safe": re.compile(r"[A-Za-z0-9_-]+"),
    "call": re.compile(r"call_[A-Za-z0-9_-]+"),
}
_PAYLOAD = re.compile(r"(?:[A-Za-z0-9_]|-[0-9A-F]{2})*")
# A payload never holds "-_" (its "-" always starts a hex escape), so the tag is unambiguous.
_TAGGED = re.compile(r"((?:[A-Za-z0-9_]|-[0-9A-F]{2})*)-_([2-9]|[1-9][0-9]+)")
TAG: Final = "-_"
# After the prefix, what no version-1 payload begins with ("-" there always starts an
# uppercase hex escape or the tag): a raw id's JSON text, and a minted id.
VALUE_LEAD: Final = "-j"
MINTED_LEAD: Final = "-n"
# The JSON text of a raw id that is not a string: a number or a boolean (null: minted).
_JSON_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false")


class JsonText(str):
    """A raw id that is not a JSON string: its JSON text (``123``, ``true``), which a document
    holds as it is, without quotes."""

    __slots__ = ()


# byte value -> its spelling in a payload: a str.translate table for the id's UTF-8 bytes read
# as Latin-1 (one C call per id)
_SPELLING: Final[dict[int, str]] = {
    b: chr(b) if (chr(b).isascii() and (chr(b).isalnum() or b == ord("_"))) else f"-{b:02X}"
    for b in range(256)
}


def has_shape(value: str, profile: Profile = "safe") -> bool:
    """Whether a client of ``profile`` accepts ``value`` as it is (``safe``: ``[A-Za-z0-9_-]+``,
    ``call``: ``call_[A-Za-z0-9_-]+``); encoded ids have their profile's shape too."""
    return _PASSES[profile].fullmatch(value) is not None


def passes(raw: str, profile: Profile = "safe") -> bool:
    """Whether ``raw`` reaches a client of ``profile`` unchanged."""
    return has_shape(raw, profile) and _RESERVED.match(raw) is None


def is_strict_safe(raw: str) -> bool:
    """Whether ``raw`` is accepted by strict APIs (``^[A-Za-z0-9_-]+$``)."""
    return has_shape(raw, "safe")


def encode(raw: str, profile: Profile = "safe", occurrence: int = 1) -> str:
    """Return the client id for the upstream id ``raw`` under ``profile``.

    ``occurrence`` k >= 2 gives the occurrence-tagged id of the k-th tool call that carries
    ``raw`` (always escaped, even when ``raw`` would pass unchanged).
    """
    if occurrence == 1:
        return encoder(profile)(raw)
    return _tagged(PREFIXES[profile] + _payload(raw), occurrence)


@functools.cache
def encoder(profile: Profile) -> Callable[[str], str]:
    """``encode(raw, profile)`` as a function of ``raw`` alone, for a caller that encodes many
    ids under one profile: its cache is keyed by the id itself, so no key tuple is made,
    hashed and kept for each id (and traced by the garbage collector)."""

    @memo()  # pure; a stream's calls each encode their id, every turn again
    def encode_untagged(raw: str) -> str:
        return _untagged(raw, profile)

    return encode_untagged


def encode_value(text: str, profile: Profile = "safe", occurrence: int = 1) -> str:
    """The client id of a raw id that is not a string, given as its JSON ``text`` (a number or
    a boolean, spelled as the upstream spelled it); ``occurrence`` as in ``encode``.
    ValueError for any other text."""
    if _JSON_SCALAR.fullmatch(text) is None:
        raise ValueError(f"not the JSON text of a number or a boolean: {text!r}")
    return _tagged(f"{PREFIXES[profile]}{VALUE_LEAD}{_payload(text)}", occurrence)


def mint(profile: Profile = "safe", occurrence: int = 1) -> str:
    """The client id of the ``occurrence``-th call with no id (missing, or null) that a
    conversation gives one to."""
    return _tagged(PREFIXES[profile] + MINTED_LEAD, occurrence)


def _tagged(client_id: str, occurrence: int) -> str:
    """``client_id`` as the ``occurrence``-th (an occurrence tag from the second on)."""
    if occurrence < 1:
        raise ValueError(f"occurrence must be 1 or more, not {occurrence}")
    return client_id if occurrence == 1 else f"{client_id}{TAG}{occurrence}"


def _untagged(raw: str, profile: Profile) -> str:
    """``encode`` of the first occurrence: ``raw`` itself when it passes, else escaped."""
    return raw if passes(raw, profile) else PREFIXES[profile] + _payload(raw)


def _payload(raw: str) -> str:
    return raw.encode("utf-8", "surrogatepass").decode("latin-1").translate(_SPELLING)


def profile_of(client_id: str) -> Profile | None:
    """The profile whose prefix ``client_id`` carries, if any."""
    for profile, prefix in PREFIXES.items():
        if client_id.startswith(prefix):
            return profile
    return None


@memo()  # pure; a history restores each id again every turn
def decode(client_id: str) -> str:
    """Return the raw id inside ``client_id`` (tagged or not): a ``JsonText`` for a raw id
    that was not a string (``encode_value``); a minted id, and anything not made by encode,
    comes back as is.

    Total: never raises, for any string.
    """
    return parse(client_id)[0]


def occurrence(client_id: str) -> int:
    """The occurrence an encoded id stands for: k for a tagged id, else 1 (at once for an id
    that does not spell the tag)."""
    return parse(client_id)[1] if TAG in client_id else 1


@memo()  # pure
def parse(client_id: str) -> tuple[str, int]:
    """``(raw id, occurrence)`` of ``client_id``; ``(client_id, 1)`` for anything that
    encode did not make. Never raises."""
    unchanged = (client_id, 1)
    profile = profile_of(client_id)
    if profile is None:
        return unchanged
    payload = client_id[len(PREFIXES[profile]) :]
    if payload.startswith((VALUE_LEAD, MINTED_LEAD)):
        return _parse_addition(client_id, payload)
    count = "1"
    if (tagged := _TAGGED.fullmatch(payload)) is not None:
        payload, count = tagged.group(1), tagged.group(2)
    elif _PAYLOAD.fullmatch(payload) is None:
        return unchanged
    raw = _unescaped(payload)
    if raw is None:
        return unchanged
    if count == "1":
        return (raw, 1) if encode(raw, profile) == client_id else unchanged
    # Canonical: the payload escapes raw exactly as encode does (no int() of the digits:
    # any length of count is fine and never raises).
    if _payload(raw) != payload:
        return unchanged
    return raw, _count(count)


def _parse_addition(client_id: str, payload: str) -> tuple[str, int]:
    """``parse`` of a payload that begins with ``VALUE_LEAD`` or ``MINTED_LEAD``."""
    unchanged = (client_id, 1)
    lead, payload = payload[:2], payload[2:]
    count = "1"
    if (tagged := _TAGGED.fullmatch(payload)) is not None:
        payload, count = tagged.group(1), tagged.group(2)
    if lead == MINTED_LEAD:
        return (client_id, _count(count)) if payload == "" else unchanged
    if _PAYLOAD.fullmatch(payload) is None:
        return unchanged
    spelled = _unescaped(payload)
    if spelled is None or _JSON_SCALAR.fullmatch(spelled) is None or _payload(spelled) != payload:
        return unchanged
    return JsonText(spelled), _count(count)


def _unescaped(payload: str) -> str | None:
    """The string a canonical payload spells (its bytes as UTF-8), or None."""
    head, *escaped = payload.split("-")
    data = bytearray(head.encode("ascii"))
    for part in escaped:
        data += bytes.fromhex(part[:2])
        data += part[2:].encode("ascii")
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def _count(digits: str) -> int:
    """``int(digits)``, also past Python's default limit on digits converted at once."""
    value = 0
    for at in range(0, len(digits), 1000):
        part = digits[at : at + 1000]
        value = value * 10 ** len(part) + int(part)
    return value
