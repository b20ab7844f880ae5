"""What one answer says, whatever the API: its tool calls, its text, its model and usage.

The API modules (``chat``, ``responses``, ``messages``) render a :class:`Reply` as that API's
buffered document or SSE events; the ids in it are whatever the caller puts there (raw ids,
or the placeholders ``server`` fills in later).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MODEL = "moonshotai/Kimi-K2-Instruct"
CREATED = 1760000000

# An SSE event: (event name or None, data); data is a JSON value or a raw ``data:`` text
# such as ``[DONE]``.
type Event = tuple[str | None, Any]


def dumps(obj: Any) -> str:
    """Compact JSON with raw UTF-8, as vLLM (pydantic) and most hosts write it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def thirds(text: str) -> tuple[str, ...]:
    """``text`` in three stream fragments (fewer when it is shorter than three)."""
    a, b = len(text) // 3, 2 * len(text) // 3
    return tuple(p for p in (text[:a], text[a:b], text[b:]) if p)


def words(text: str) -> tuple[str, ...]:
    """``text`` in word fragments, each but the first with its leading space."""
    return tuple(w if n == 0 else " " + w for n, w in enumerate(text.split(" ")))


@dataclass(frozen=True)
class Call:
    """One tool call: ``id`` (Chat ``tool_calls[].id``, Responses ``call_id``, Messages
    ``tool_use.id``), ``item_id`` (the Responses item's own id), the tool's ``name``, its
    ``arguments`` (a JSON text) and the ``fragments`` a stream sends them in."""

    id: str
    item_id: str
    name: str
    arguments: str
    fragments: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.fragments:
            object.__setattr__(self, "fragments", thirds(self.arguments))
        assert "".join(self.fragments) == self.arguments


@dataclass(frozen=True)
class Reply:
    """One answer: ``calls`` (parallel tool calls, in order) and ``text`` (the final answer
    when there are no calls, else what the model writes before them), streamed in
    ``fragments``. ``usage`` is (input, output) tokens. ``server_tool_ids``: Anthropic server
    tools used before the calls (see ``messages``)."""

    calls: Sequence[Call] = ()
    text: str = ""
    fragments: tuple[str, ...] = ()
    model: str = MODEL
    usage: tuple[int, int] = (61, 23)
    server_tool_ids: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not self.fragments:
            object.__setattr__(self, "fragments", thirds(self.text))
        assert "".join(self.fragments) == self.text


def dict_items(value: Any) -> list[tuple[int, dict[str, Any]]]:
    """The (index, element) pairs of the objects in a JSON array (nothing for a non-array)."""
    return (
        [(i, v) for i, v in enumerate(value) if isinstance(v, dict)]
        if isinstance(value, list)
        else []
    )
