"""A JSON array written element by element: Gemini's ``:streamGenerateContent`` without
``?alt=sse``. Each element pretty-printed, ``,`` and a line break between them, as Gemini writes
it (``[{\\n  "candidates": ...\\n}\\n,\\r\\n{\\n ...\\n}\\n]``)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .replies import Event

SEPARATOR = b"\n,\r\n"


def frames(events: Sequence[Event]) -> list[bytes]:
    """One piece per element (the first opens the array), and the closing bracket."""
    elements = [json.dumps(data, ensure_ascii=False, indent=2).encode() for _, data in events]
    pieces = [(b"[" if n == 0 else SEPARATOR) + e for n, e in enumerate(elements)]
    return [*pieces, b"\n]"] if pieces else [b"[]"]
