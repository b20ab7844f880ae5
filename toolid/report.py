"""Plain records and one-line summaries of what toolid did to a flow (for logs and UIs)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from toolid.body import Change

_VERBS = {"restored": "restored", "encoded": "encoded", "kept": "kept (strict host)"}
_OBSERVED = {
    "restored": "would restore",
    "encoded": "would encode",
    "kept": "would keep (strict host)",
}
_EXAMPLES = 2
_PLAIN: Final = re.compile(r"[^\s\"'\\\x00-\x1f\x7f-\x9f\ud800-\udfff]+")


def show(value: str) -> str:
    """``value`` for a one-line display: as is when plain, else as a JSON string literal
    (so empty ids, spaces, control characters and lone surrogates print safely)."""
    if _PLAIN.fullmatch(value):
        return value
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return json.dumps(value)
    return text


def as_record(change: Change) -> dict[str, str]:
    """A JSON-serialisable record of one change (stored in ``flow.metadata``)."""
    return {
        "path": change.path,
        "raw": change.raw,
        "client": change.client,
        "action": change.action,
    }


def summary(records: Iterable[Mapping[str, Any]], observe: bool = False) -> str:
    """``2 encoded (functions.get_weather:0 -> tid1_functions-2Eget_weather-3A0)``, etc.

    Counts id positions per action; shows the first few distinct ids of each.
    """
    by_action: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_action.setdefault(record["action"], []).append(record)
    words = _OBSERVED if observe else _VERBS
    parts = []
    for action in ("restored", "encoded", "kept"):
        found = by_action.get(action)
        if not found:
            continue
        pairs = list(dict.fromkeys(_pair(record) for record in found))
        shown = ", ".join(pairs[:_EXAMPLES]) + (", ..." if len(pairs) > _EXAMPLES else "")
        verb = words[action]
        counted = f"{verb} {len(found)}" if observe else f"{len(found)} {verb}"
        parts.append(f"{counted} ({shown})")
    return "; ".join(parts)


def _pair(record: Mapping[str, Any]) -> str:
    raw, client = show(record["raw"]), show(record["client"])
    if record["action"] == "encoded":
        return f"{raw} -> {client}"
    return f"{client} -> {raw}"
