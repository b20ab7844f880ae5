"""Google's generateContent, streamGenerateContent and countTokens: the Gemini API, Vertex AI,
and Code Assist (gemini-cli's Google login).

A Content's parts are unions: the member names the kind. From python-genai's types.py
(google-genai 3.3.0): ``Part.function_call`` (FunctionCall: ``id``, "Optional. The unique id
of the function call. If populated, the client to execute the function_call and return the
response with the matching id.") and ``Part.function_response`` (FunctionResponse: ``id``,
"Optional. The id of the function call this response is for. Populated by the client to
match the corresponding function call id."); on the wire camelCase, as in Google's REST
reference (ai.google.dev/api/caching#FunctionCall). A part's ``thoughtSignature`` sits beside
``functionCall``: it is no position, so its bytes never change.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from toolid.apis.chat import JOINED
from toolid.apis.record import (
    COMPOSITE,
    DEFINES,
    DUPLICATE,
    EMPTY,
    MISPLACED,
    MISSING,
    ORPHAN,
    REFERS,
    Api,
    ApiRecord,
    Doc,
    Element,
    Entry,
    History,
    Repairs,
    Route,
    holds_list,
    under,
)

# python-genai models.py: '{model}:generateContent', '{model}:streamGenerateContent?alt=sse',
# '{model}:countTokens': the Gemini API's /v1beta/models/M and /v1beta/tunedModels/M, Vertex
# AI's .../publishers/google/models/M and .../endpoints/E; Code Assist's /v1internal:method
# (gemini-cli code_assist/server.ts).
_ROUTE: Final = r"(?:/(?:models|tunedModels|endpoints)/[^/]+|/v1internal)"
# Positions inside one Content (relative to the content).
_CONTENT: tuple[Entry, ...] = (
    ("parts[].functionCall.id", DEFINES, "call"),
    ("parts[].functionResponse.id", REFERS, "call"),
)
# A GenerateContentRequest's history (``contents``), and a GenerateContentResponse's calls:
# ``candidates[].content`` (Candidate.content; a candidate's ``index`` numbers it).
_REQUEST: Final = under("contents[].", _CONTENT)
_RESPONSE: Final[tuple[Entry, ...]] = (
    ("candidates[].content.parts[].functionCall.id", DEFINES, "call"),
)
# Code Assist wraps the request as ``request`` and the response as ``response`` (gemini-cli
# packages/core/src/code_assist/converter.ts: CAGenerateContentRequest,
# CaGenerateContentResponse); countTokens may wrap one as ``generateContentRequest``.
_ENVELOPES: Final = ("request", "response", "generateContentRequest")
_COUNT: Final = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)


def _request(document: Mapping[str, Any]) -> bool:
    return holds_list(document, "contents", _ENVELOPES)


def _answer(document: Mapping[str, Any]) -> bool:
    return holds_list(document, "candidates", _ENVELOPES)


RECORD: Final = ApiRecord(
    api=Api.GEMINI,
    title="Google Gemini",
    routes=(
        Route(re.compile(_ROUTE + r":(?:generateContent|streamGenerateContent|countTokens)$")),
    ),
    streamed_routes=(re.compile(_ROUTE + r":streamGenerateContent$"),),
    request_shape=_request,
    answer_shape=_answer,
    # A streamed chunk is a whole GenerateContentResponse.
    positions={
        Doc.REQUEST: (
            *_REQUEST,
            *under("request.", _REQUEST),
            *under("generateContentRequest.", _REQUEST),
        ),
        Doc.RESPONSE: (*_RESPONSE, *under("response.", _RESPONSE)),
        Doc.EVENT: (*_RESPONSE, *under("response.", _RESPONSE)),
    },
    # A functionCall part is a whole call, and a stream sends each in a chunk of its own,
    # parts numbered from 0 again in every chunk (no index): every definition is a call of
    # its own, so two calls with one raw id get two client ids.
    calls_by_mention=True,
    # Gemini pairs the functionResponse parts of a user turn with the functionCall parts of
    # the model turn before it by their number and order, and answers a request whose counts
    # differ with ``_COUNT`` (gemini-cli issues #4504, #13292, #16132: the 400 every
    # gemini-cli user met when parallel calls were merged). Relays in front of Gemini's Code
    # Assist backends also check the ids pairwise ("functionResponse.id ... does not match
    # functionCall.id", router-for-me/CLIProxyAPI#5199). The other texts are toolid's.
    history=History(
        results=frozenset({("call", "id")}),
        calls=frozenset({("call", "id")}),
        closes=frozenset({"model"}),
        next_only=True,
        texts={
            ORPHAN: "a functionResponse part answers id {id}, which no functionCall part of "
            "the model turn before it has: Gemini pairs them by number and order, relays by "
            'id ("functionResponse.id ... does not match functionCall.id")',
            MISSING: _COUNT,
            MISPLACED: _COUNT,
            EMPTY: "the id is empty: only its position pairs it with its call",
            DUPLICATE: "two functionCall parts carry one id {id}: a client that keys calls by "
            f'id (gemini-cli) runs one and answers one, and Gemini answers "{_COUNT}"',
            COMPOSITE: JOINED.format(rule="ids are compared as they are, byte for byte"),
        },
        guesses=frozenset({ORPHAN, EMPTY, DUPLICATE, COMPOSITE}),
    ),
    # SSE with ?alt=sse; without it a JSON array written element by element
    framings=frozenset({"sse", "json-array"}),
    # a Content: a turn, or a candidate's
    elements=(Element("contents", Doc.REQUEST, needs=frozenset({"parts"})),),
    # Vertex AI's .../publishers/google/models/M:method; the Gemini API's /models/M:method
    model_routes=(
        re.compile(r"/publishers/(?P<vendor>[^/]+)/models/(?P<model>[^/:]+)"),
        re.compile(r"/models/(?P<model>[^/:]+):[A-Za-z]+$"),
    ),
    repairs=Repairs(
        result=lambda call_id, call, text: {
            "functionResponse": {
                "id": call_id,
                "name": call.get("name", ""),
                "response": {"error": text},
            }
        },
        as_text=lambda part, note: [
            {
                "text": f"{note}\n"
                + json.dumps(
                    (part.get("functionResponse") or {}).get("response"), ensure_ascii=False
                )
            }
        ],
        blocks="parts",
        user={"role": "user"},
    ),
)
