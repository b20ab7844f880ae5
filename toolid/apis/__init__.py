"""The APIs toolid knows, one record each, and how a request's API is recognised.

Each module beside this one is one API's record (``record.ApiRecord``): its routes, body
shapes, id positions, history rules, texts, framings. ``RECORDS`` lists them in the order
shapes are tried; every other module of the library reads them here and names no API's
members or JSON keys itself. Adding an API is a module with its ``RECORD``, a member of
``Api``, and a line in ``RECORDS`` (docs/positions.md walks through one).
"""

from __future__ import annotations

import re
from typing import Any, Final

from toolid.apis import chat, converse, gemini, messages, responses
from toolid.apis.record import Api, ApiRecord, Doc, Framing
from toolid.memo import memo

#: Every API's record, in the order their body shapes are tried.
RECORDS: Final[dict[Api, ApiRecord]] = {
    record.api: record
    for record in (chat.RECORD, responses.RECORD, messages.RECORD, converse.RECORD, gemini.RECORD)
}
assert set(RECORDS) == set(Api), "every Api has a record"


def api_from_path(path: str) -> Api | None:
    """The API named by a request path (query string allowed), or None."""
    return _api_of_route(path.split("?", 1)[0])


@memo(64 * 1024)  # an agent calls a handful of routes, again and again
def _api_of_route(path: str) -> Api | None:
    for each in RECORDS.values():
        for route in each.routes:
            if route.pattern.search(path) and not (route.veto and route.veto.search(path)):
                return each.api
    return None


def streamed_route(path: str) -> bool:
    """Whether a request path (query string allowed) asks for a streamed answer by its route
    alone, as Gemini's ``:streamGenerateContent`` does (SSE with ``?alt=sse``, else a JSON
    array written element by element), whatever the body says."""
    route = path.split("?", 1)[0]
    return any(
        pattern.search(route) for each in RECORDS.values() for pattern in each.streamed_routes
    )


def api_from_shape(document: Any, doc: Doc) -> Api | None:
    """Guess the API from a parsed body or event whose path said nothing: the first record
    (in ``RECORDS``'s order) whose request shape, or answer shape, it has."""
    if not isinstance(document, dict):
        return None
    request = doc is Doc.REQUEST or doc is Doc.HISTORY
    for each in RECORDS.values():
        if (each.request_shape if request else each.answer_shape)(document):
            return each.api
    return None


#: The request paths that name a model (``model`` group, ``vendor`` prefixed to it when the
#: path has one), every API's, each once, in the records' order.
MODEL_ROUTES: Final[tuple[re.Pattern[str], ...]] = tuple(
    dict.fromkeys(pattern for each in RECORDS.values() for pattern in each.model_routes)
)


def apis_framed_as(framing: Framing) -> frozenset[Api]:
    """The APIs whose streamed answers can be framed as ``framing``."""
    return frozenset(each.api for each in RECORDS.values() if framing in each.framings)


def untaken_model_rules() -> dict[str, frozenset[Api]]:
    """For each built-in model rule some API's requests do not take, those APIs."""
    untaken: dict[str, set[Api]] = {}
    for each in RECORDS.values():
        for rule in each.untaken_model_rules:
            untaken.setdefault(rule, set()).add(each.api)
    return {rule: frozenset(apis) for rule, apis in untaken.items()}
