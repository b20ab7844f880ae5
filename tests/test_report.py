"""toolid.report: the records and one-line summaries of what toolid changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from toolid import encode, report
from toolid.body import Change
from toolid.codec import mint

ACTIONS = ("restored", "encoded", "minted", "cleared", "kept", "mapped")
# What a summary calls each action, done and (observe mode) not done.
VERBS = {
    "restored": "restored",
    "encoded": "encoded",
    "kept": "kept (strict host)",
    "mapped": "mapped",
    "minted": "minted",
    "cleared": "cleared (a later chunk's other id)",
}
OBSERVED = {
    "restored": "would restore",
    "encoded": "would encode",
    "kept": "would keep (strict host)",
    "mapped": "would map",
    "minted": "would mint",
    "cleared": "would clear (a later chunk's other id)",
}


def reference_pair(record: Mapping[str, Any]) -> str:
    """How a summary shows one record: ``raw -> client`` encoded (the client id as it is),
    ``client -> raw`` restored or kept, ``client -> sent for rules (why)`` mapped (``?``: no
    rule set named); a tagged client id says which use of its raw id it is. A call given an
    id (minted, cleared): what it held (``(no id)``: nothing) ``->`` what it holds now."""
    raw, client, action = record["raw"], record["client"], record["action"]
    if action in ("minted", "cleared"):
        return f"{report.show(raw) if raw else '(no id)'} -> {client or 'null'}"
    if action == "mapped":
        why = f" ({record['why']})" if record.get("why") else ""
        rules = record.get("rules", "?")
        return f"{report.show(client)} -> {report.show(record['sent'])} for {rules}{why}"
    pair = f"{report.show(raw)} -> {client}"
    if action != "encoded":
        pair = f"{report.show(client)} -> {report.show(raw)}"
    use = report.use_of(client)
    return f"{pair}, {use}" if use else pair


def reference_summary(records: list[Mapping[str, Any]], observe: bool) -> str:
    """The summary as its docstring says it: per action, in the order above, the count, then
    the first two records that differ in what is shown, ``...`` when there are more."""
    words = OBSERVED if observe else VERBS
    parts = []
    for action in ACTIONS:
        of_action = [record for record in records if record["action"] == action]
        if not of_action:
            continue
        distinct: dict[tuple[Any, ...], Mapping[str, Any]] = {}
        for record in of_action:
            key = tuple(record.get(name) for name in ("raw", "client", "sent", "rules", "why"))
            distinct.setdefault(key, record)
        shown = ", ".join(reference_pair(record) for record in list(distinct.values())[:2])
        shown += ", ..." if len(distinct) > 2 else ""
        count = len(of_action)
        counted = f"{words[action]} {count}" if observe else f"{count} {words[action]}"
        parts.append(f"{counted} ({shown})")
    return "; ".join(parts)


def _client(raw: str, action: str, tag: int) -> str:
    """The client id a change of ``action`` gives ``raw`` (the ``tag``-th of its kind)."""
    if action == "minted":
        return mint("safe", tag)
    if action == "cleared":
        return ""
    return raw if action == "kept" else encode(raw, "safe", tag)


_IDS = st.sampled_from(["functions.get_weather:0", "toolu_01", "a b", "", "call_1"])
_CHANGES = st.builds(
    lambda raw, action, tag, rules: Change(
        f"messages[{tag}].id",
        "null" if action == "minted" and raw == "a b" else raw,
        _client(raw, action, tag),
        action,
        "aB3dE5fG7" if action == "mapped" else "",
        rules if action in ("mapped", "kept") else "",
    ),
    _IDS,
    st.sampled_from(ACTIONS),
    st.integers(1, 3),
    st.sampled_from(["", "mistral"]),
)


@given(st.lists(_CHANGES, max_size=12), st.booleans(), st.sampled_from(["", "model m"]))
def test_summary_is_the_reference_summary(changes, observe, why):
    records = report.as_records(changes)
    report.add_why(records, why)
    assert report.summary(records, observe) == reference_summary(records, observe)
    assert report.summary(iter(records), observe) == reference_summary(records, observe)


def test_a_summary_names_each_action_once_in_order():
    records = report.as_records(
        [
            Change("a", "x:1", encode("x:1"), "encoded"),
            Change("b", "y", "y", "restored"),
            Change("c", "x:2", encode("x:2"), "encoded"),
            Change("d", "x:3", encode("x:3"), "encoded"),
            Change("e", "x:1", encode("x:1"), "encoded"),
        ]
    )
    assert report.summary(records) == (
        "1 restored (y -> y); 4 encoded (x:1 -> tid1_x-3A1, x:2 -> tid1_x-3A2, ...)"
    )
    assert report.summary(records, observe=True).startswith("would restore 1 (y -> y); ")


def test_a_summary_shows_tags_strict_hosts_and_maps():
    records = report.as_records(
        [
            Change("a", "toolu_01AbC", "toolu_01AbC", "mapped", "aB3dE5fG7", "mistral"),
            Change("b", "functions.Glob:0", encode("functions.Glob:0", "safe", 2), "encoded"),
            Change("c", "a b", "a b", "kept", "", "mistral"),
        ]
    )
    report.add_why(records, "model mistralai/devstral-medium-2507")
    shown = (
        "(functions.Glob:0 -> tid1_functions-2EGlob-3A0-_2, 2nd use of functions.Glob:0); "
        '{kept} ("a b" -> "a b"); '
        "{mapped} (toolu_01AbC -> aB3dE5fG7 for mistral (model mistralai/devstral-medium-2507))"
    )
    assert report.summary(records) == "1 encoded " + shown.format(
        kept="1 kept (strict host)", mapped="1 mapped"
    )
    assert report.summary(records, observe=True) == "would encode 1 " + shown.format(
        kept="would keep (strict host) 1", mapped="would map 1"
    )


@given(st.text(max_size=40), st.sampled_from(["safe", "call"]), st.integers(1, 5))
def test_an_encoded_id_is_shown_as_it_is(raw, profile, occurrence):
    """What a summary relies on to show an encoded id without checking it."""
    client = encode(raw, profile, occurrence)
    assert report.show(client) == client
