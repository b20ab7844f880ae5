"""Wire format v1: encode and decode one tool-call id (standard library only).

The contract is ``shared/reference/wire-format-v1.md``: a raw id that a client
would not accept is turned into ``prefix + payload``, where the payload spells
the id's UTF-8 bytes with ``A-Za-z0-9_`` as themselves and every other byte as
``-XX`` (uppercase hex). The raw id travels inside the client id, so decoding
needs no state. This format is persistent: never change it, add a version.
"""

from __future__ import annotations

import functools
import re
from typing import Final, Literal

Profile = Literal["safe", "call"]
PROFILES: Final[tuple[Profile, ...]] = ("safe", "call")

PREFIXES: Final[dict[Profile, str]] = {"safe": "tid1_", "call": "call_tid1_"}

_RESERVED = re.compile(r"(?:call_)?tid[0-9]+_")
_PASSES: Final[dict[Profile, re.Pattern[str]]] = {
    "safe": re.compile(r"[A-Za-z0-9_-]+"),
    "call": re.compile(r"call_[A-Za-z0-9_-]+"),
}
_PAYLOAD = re.compile(r"(?:[A-Za-z0-9_]|-[0-9A-F]{2})*")

# byte value -> its spelling in a payload
_SPELLING: Final[tuple[str, ...]] = tuple(
    chr(b) if (chr(b).isascii() and (chr(b).isalnum() or b == ord("_"))) else f"-{b:02X}"
    for b in range(256)
)


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


@functools.lru_cache(maxsize=65536)  # pure; ids recur in every turn of a conversation
def encode(raw: str, profile: Profile = "safe") -> str:
    """Return the client id for the upstream id ``raw`` under ``profile``."""
    if passes(raw, profile):
        return raw
    data = raw.encode("utf-8", "surrogatepass")
    return PREFIXES[profile] + "".join([_SPELLING[b] for b in data])


def profile_of(client_id: str) -> Profile | None:
    """The profile whose prefix ``client_id`` carries, if any."""
    if client_id.startswith("tid1_"):
        return "safe"
    if client_id.startswith("call_tid1_"):
        return "call"
    return None


@functools.lru_cache(maxsize=65536)
def decode(client_id: str) -> str:
    """Return the raw id inside ``client_id``; anything not made by encode comes back as is.

    Total: never raises, for any string.
    """
    profile = profile_of(client_id)
    if profile is None:
        return client_id
    payload = client_id[len(PREFIXES[profile]) :]
    if _PAYLOAD.fullmatch(payload) is None:
        return client_id
    head, *escaped = payload.split("-")
    data = bytearray(head.encode("ascii"))
    for part in escaped:
        data += bytes.fromhex(part[:2])
        data += part[2:].encode("ascii")
    try:
        raw = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return client_id
    if encode(raw, profile) != client_id:
        return client_id
    return raw
