"""Server-sent events: one frame per event (``event:`` line for a named event, ``data:``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from .replies import Event, dumps


@dataclass(frozen=True)
class Style:
    """How a server writes its frames: the line ending (``\\n``, ``\\r\\n`` or ``\\r``);
    ``extras``: comment lines (keep-alives) before every third event and a trailing space on
    data lines; ``multiline``: each JSON document pretty-printed over several data lines
    (JSON allows a newline between tokens; SSE joins the lines with ``\\n``)."""

    newline: str = "\n"
    extras: bool = False
    multiline: bool = False


PLAIN = Style()


def frame(event: Event, style: Style = PLAIN) -> bytes:
    """The bytes of one event, with its blank line."""
    nl, trail = style.newline, " " if style.extras else ""
    name, data = event
    if isinstance(data, str):
        lines = [data]
    elif style.multiline:
        lines = json.dumps(data, ensure_ascii=False, indent=1).split("\n")
    else:
        lines = [dumps(data)]
    head = f"event: {name}{nl}" if name else ""
    return (head + "".join(f"data: {line}{trail}{nl}" for line in lines) + nl).encode("utf-8")


def frames(events: Sequence[Event], style: Style = PLAIN) -> list[bytes]:
    """One frame per event (with ``extras``, a keep-alive comment before every third)."""
    out = [frame(event, style) for event in events]
    if style.extras:
        keep_alive = f": keep-alive{style.newline}{style.newline}".encode()
        out = [keep_alive + f if n % 3 == 1 else f for n, f in enumerate(out)]
    return out
