"""Wire format v1: encode and decode one tool-call id (standard library only).

The contract is ``docs/wire-format.md``: a raw id that a client
would not accept is turned into ``prefix + payload``, where the payload spells
the id's UTF-8 bytes with ``A-Za-z0-9_`` as themselves and every other byte as
``-XX`` (uppercase hex). The raw id travels inside the client id, so decoding
needs no state. This format is persistent: never change it, add a version.

Occurrence tags (same contract): the k-th tool call (k >= 2) of a conversation that carries
an already-used raw id gets ``prefix + payload + "-_" + k``, which decodes to the same raw id.
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
    if occurrence < 1:
        raise ValueError(f"occurrence must be 1 or more, not {occurrence}")
    return f"{PREFIXES[profile]}{_payload(raw)}{TAG}{occurrence}"


@functools.cache
def encoder(profile: Profile) -> Callable[[str], str]:
    """``encode(raw, profile)`` as a function of ``raw`` alone, for a caller that encodes many
    ids under one profile: its cache is keyed by the id itself, so no key tuple is made,
    hashed and kept for each id (and traced by the garbage collector)."""

    @memo()  # pure; a stream's calls each encode their id, every turn again
    def encode_untagged(raw: str) -> str:
        return _untagged(raw, profile)

    return encode_untagged


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
    """Return the raw id inside ``client_id`` (tagged or not); anything not made by encode
    comes back as is.

    Total: never raises, for any string.
    """
    return parse(client_id)[0]


def occurrence(client_id: str) -> int:
    """The occurrence an encoded id stands for: k for a tagged id, else 1."""
    return parse(client_id)[1]


@memo()  # pure
def parse(client_id: str) -> tuple[str, int]:
    """``(raw id, occurrence)`` of ``client_id``; ``(client_id, 1)`` for anything that
    encode did not make. Never raises."""
    unchanged = (client_id, 1)
    profile = profile_of(client_id)
    if profile is None:
        return unchanged
    payload = client_id[len(PREFIXES[profile]) :]
    count = "1"
    if (tagged := _TAGGED.fullmatch(payload)) is not None:
        payload, count = tagged.group(1), tagged.group(2)
    elif _PAYLOAD.fullmatch(payload) is None:
        return unchanged
    head, *escaped = payload.split("-")
    data = bytearray(head.encode("ascii"))
    for part in escaped:
        data += bytes.fromhex(part[:2])
        data += part[2:].encode("ascii")
    try:
        raw = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return unchanged
    if count == "1":
        return (raw, 1) if encode(raw, profile) == client_id else unchanged
    # Canonical: the payload escapes raw exactly as encode does (no int() of the digits:
    # any length of count is fine and never raises).
    if _payload(raw) != payload:
        return unchanged
    return raw, _count(count)


def _count(digits: str) -> int:
    """``int(digits)``, also past Python's default limit on digits converted at once."""
    value = 0
    for at in range(0, len(digits), 1000):
        part = digits[at : at + 1000]
        value = value * 10 ** len(part) + int(part)
    return value
