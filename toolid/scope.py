"""Host patterns: which upstreams are rewritten at all, and which id rules each one has.

A pattern is ``*`` (every host), a host name with ``*`` wildcards (``*.example.com``
matches every subdomain of example.com, not example.com itself), an IP address, or any
of those with ``:port`` (``localhost:8000``; IPv6 as ``[::1]:8000``). Case-insensitive.
Several patterns may be given in one string, separated by commas. An assignment is
``PATTERN=NAME`` (``localhost:8000=mistral``), several likewise separated by commas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

_PATTERN: Final = re.compile(
    r"(?P<host>\[[0-9a-fA-F:.*]+\]|[A-Za-z0-9.*_-]+)(?::(?P<port>[0-9]{1,5}))?"
)


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One parsed pattern."""

    text: str
    host: re.Pattern[str]
    port: int | None

    def matches(self, host: str, port: int) -> bool:
        """Whether the upstream ``host``:``port`` is covered."""
        return (self.port is None or self.port == port) and self.host.fullmatch(
            host.strip("[]")
        ) is not None


def parse(values: Iterable[str]) -> tuple[HostPattern, ...]:
    """Parse option values into patterns; raise ValueError naming the first bad one."""
    patterns: list[HostPattern] = []
    for value in values:
        for part in value.split(","):
            if text := part.strip():
                patterns.append(_parse_one(text))
    return tuple(patterns)


def first(pairs: Iterable[tuple[HostPattern, str]], host: str, port: int) -> str | None:
    """The name of the first assignment whose pattern covers ``host``:``port``."""
    return next((name for pattern, name in pairs if pattern.matches(host, port)), None)


def _parse_one(text: str) -> HostPattern:
    match = _PATTERN.fullmatch(text)
    port = int(match["port"]) if match and match["port"] else None
    if match is None or (port is not None and not 0 < port < 65536):
        raise ValueError(
            f"invalid host pattern {text!r}: expected *, a host such as api.moonshot.ai or "
            "*.example.com, optionally with :port"
        )
    host = match["host"].strip("[]").lower()
    regex = ".*".join(re.escape(part) for part in host.split("*"))
    return HostPattern(text, re.compile(regex, re.IGNORECASE), port)


def allow_hosts(patterns: Iterable[HostPattern]) -> list[str] | None:
    """mitmproxy ``allow_hosts`` regexes (searched in ``host:port``) for exactly these patterns.

    None when a pattern covers every host: then nothing needs to be tunnelled untouched.
    """
    regexes = []
    for pattern in patterns:
        if pattern.host.pattern == ".*" and pattern.port is None:
            return None
        port = str(pattern.port) if pattern.port is not None else "[0-9]+"
        regexes.append(f"^(?:{pattern.host.pattern}):{port}$")
    return regexes


def covers(patterns: Iterable[HostPattern], host: str, port: int) -> bool:
    """Whether any pattern covers ``host``:``port``."""
    return any(pattern.matches(host, port) for pattern in patterns)
