"""Plain records and one-line summaries of what toolid did to a flow (for logs and UIs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any, Final

from toolid import codec
from toolid.body import Change
from toolid.problem import show

__all__ = ["add_why", "as_record", "as_records", "ordinal", "show", "summary", "use_of"]

_VERBS = {
    "restored": "restored",
    "encoded": "encoded",
    "kept": "kept (strict host)",
    "mapped": "mapped",
    "minted": "minted",
    "cleared": "cleared (a later chunk's other id)",
}
_OBSERVED = {
    "restored": "would restore",
    "encoded": "would encode",
    "kept": "would keep (strict host)",
    "mapped": "would map",
    "minted": "would mint",
    "cleared": "would clear (a later chunk's other id)",
}
_EXAMPLES = 2


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``12th``, ``21st``, ..."""
    if number % 100 in (11, 12, 13):
        return f"{number}th"
    return f"{number}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(number % 10, 'th') }"


def use_of(client_id: str) -> str | None:
    """``3rd use of functions.Glob:0`` for an occurrence-tagged client id, else None."""
    if codec.TAG not in client_id:  # no tag: not worth decoding
        return None
    raw, occurrence = codec.parse(client_id)
    return f"{ordinal(occurrence)} use of {show(raw)}" if occurrence > 1 else None


def as_record(change: Change) -> dict[str, Any]:
    """A JSON-serialisable record of one change (stored in ``flow.metadata``); a tagged
    client id's record says which use of the raw id it is (``occurrence``)."""
    record: dict[str, Any] = {
        "path": change.path,
        "raw": change.raw,
        "client": change.client,
        "action": change.action,
    }
    if (occurrence := codec.occurrence(change.client)) > 1:
        record["occurrence"] = occurrence
    if change.action == "mapped":
        record["sent"] = change.sent
    if change.rules:
        record["rules"] = change.rules
    return record


def as_records(changes: Iterable[Change]) -> list[dict[str, Any]]:
    """``as_record`` of each change (a plain restore or encode, by far the most common, built
    inline: a history restores a thousand ids per request)."""
    tag = codec.TAG
    return [
        {"path": path, "raw": raw, "client": client, "action": action}
        if not rules and tag not in client and action != "mapped"
        else as_record(Change(path, raw, client, action, sent, rules))
        for path, raw, client, action, sent, rules in changes
    ]


def add_why(records: Iterable[dict[str, Any]], why: str) -> None:
    """Say in each record made under a rule set (``"rules"``) why that rule set applied
    (``"why": "model mistralai/devstral-medium-2507"``); nothing for an empty ``why``."""
    if why:
        for record in records:
            if "rules" in record:
                record["why"] = why


def summary(records: Iterable[Mapping[str, Any]], observe: bool = False) -> str:
    """``2 encoded (functions.get_weather:0 -> tid1_functions-2Eget_weather-3A0)``,
    ``1 mapped (toolu_01AbC -> aB3dE5fG7 for mistral)``, ``1 mapped (toolu_01AbC ->
    aB3dE5fG7 for mistral (model mistralai/devstral-medium-2507))``, etc.

    Counts id positions per action; shows the first few distinct ids of each.
    """
    records = records if isinstance(records, list) else list(records)
    actions = list(map(_action, records))  # at C speed: a history has a thousand records
    present = set(actions)
    words = _OBSERVED if observe else _VERBS
    parts = []
    for action in _ACTIONS:
        if action not in present:
            continue
        alone = len(present) == 1  # every record is of this action (one side's, mostly)
        count = len(actions) if alone else actions.count(action)
        distinct = _distinct(records, None if alone else actions, action)
        shown = [_pair(record) for record in distinct[:_EXAMPLES]]
        if len(distinct) > _EXAMPLES:
            shown.append("...")
        verb = words[action]
        counted = f"{verb} {count}" if observe else f"{count} {verb}"
        parts.append(f"{counted} ({', '.join(shown)})")
    return "; ".join(parts)


# the actions, in the order a summary names them
_ACTIONS: Final = ("restored", "encoded", "minted", "cleared", "kept", "mapped")
_action = itemgetter("action")
_GIVEN: Final = ("minted", "cleared")  # a call's id given where it had none usable


def _distinct(
    records: list[Mapping[str, Any]], actions: list[str] | None, action: str
) -> list[Mapping[str, Any]]:
    """The first records of ``action`` (each record's action in ``actions``; None: all are
    of it) that differ in what a summary shows of them, one more than it shows if there are.
    A side's records of one action are mostly together: the search starts at the first."""
    distinct: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for at in range(0 if actions is None else actions.index(action), len(records)):
        if actions is None or actions[at] == action:
            record = records[at]
            get = record.get  # what the summary text shows of it: records equal in it once
            identity = (record["raw"], record["client"], get("sent"), get("rules"), get("why"))
            distinct.setdefault(identity, record)
            if len(distinct) > _EXAMPLES:
                break
    return list(distinct.values())


def _pair(record: Mapping[str, Any]) -> str:
    action = record["action"]
    # An encoded id is the codec's, of [A-Za-z0-9_-]: shown as it is.
    raw, client = show(record["raw"]), record["client"]
    if action != "encoded":
        client = show(client)
    if action == "mapped":
        why = f" ({record['why']})" if record.get("why") else ""  # made printable already
        return f"{client} -> {show(record.get('sent', ''))} for {record.get('rules', '?')}{why}"
    if action in _GIVEN:  # raw: the JSON text a call held instead of an id ("": none)
        return f"{raw if record['raw'] else '(no id)'} -> {client if client != '""' else 'null'}"
    pair = f"{raw} -> {client}" if action == "encoded" else f"{client} -> {raw}"
    tagged = use_of(record["client"])  # None at once for an id without a tag
    return f"{pair}, {tagged}" if tagged else pair
