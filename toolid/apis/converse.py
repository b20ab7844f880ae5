"""AWS Bedrock Converse and ConverseStream (and CountTokens, whose input holds a Converse
request).

From botocore's service model, data/bedrock-runtime/2023-09-30/service-2.json (botocore
1.44.8): a ContentBlock's ``toolUse`` is a ToolUseBlock and its ``toolResult`` a
ToolResultBlock, each with a ``toolUseId`` (shape ToolUseId). Blocks are unions: the member
names the kind, there is no ``type`` to filter on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

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
    some_message,
    under,
)

# Positions inside one content block (relative to the block).
_BLOCK: tuple[Entry, ...] = (
    ("[].toolUse.toolUseId", DEFINES, "call"),
    ("[].toolResult.toolUseId", REFERS, "call"),
)
_TOOL_BLOCKS: Final = frozenset({"toolUse", "toolResult"})
_ID_RULE: Final = "toolUseId must be 1 to 64 characters of [a-zA-Z0-9_.:-]"


def _request(document: Mapping[str, Any]) -> bool:
    def tool_blocks(message: dict[str, Any]) -> bool:
        content = message.get("content")
        return isinstance(content, list) and any(
            isinstance(block, dict) and not _TOOL_BLOCKS.isdisjoint(block) for block in content
        )

    return some_message(document, tool_blocks)


def _answer(document: Mapping[str, Any]) -> bool:
    output = document.get("output")
    return (isinstance(output, dict) and isinstance(output.get("message"), dict)) or isinstance(
        document.get("contentBlockIndex"), int
    )  # a Converse response, a ConverseStream event


def _user_block(block: Any) -> dict[str, Any]:
    """A toolResult's content block as a user's block: text, image and document blocks as
    they are, anything else (a json block) as text."""
    if isinstance(block, dict) and ({"text", "image", "document"} & block.keys()):
        return block
    inner = block.get("json", block) if isinstance(block, dict) else block
    return {"text": json.dumps(inner, ensure_ascii=False)}


RECORD: Final = ApiRecord(
    api=Api.CONVERSE,
    title="AWS Bedrock Converse",
    # Bedrock Runtime's requestUri: Converse, ConverseStream, CountTokens under /model/{modelId}/
    routes=(Route(re.compile(r"/model/[^/]+/(?:converse|converse-stream|count-tokens)/?$")),),
    request_shape=_request,
    answer_shape=_answer,
    # ConverseRequest.messages[] (Message.content[]), and CountTokens'
    # CountTokensInput.converse (ConverseTokensRequest.messages[]); ConverseResponse.output
    # (ConverseOutput.message); a ConverseStream event is one eventstream frame, ``:event-type``
    # contentBlockStart, whose payload is a ContentBlockStartEvent: ``start``
    # (ContentBlockStart: toolUse is a ToolUseBlockStart, toolResult a ToolResultBlockStart)
    # and ``contentBlockIndex``.
    positions={
        Doc.REQUEST: (
            *under("messages[].content", _BLOCK),
            *under("input.converse.messages[].content", _BLOCK),
        ),
        Doc.RESPONSE: under("output.message.content", _BLOCK),
        Doc.EVENT: (
            ("start.toolUse.toolUseId", DEFINES, "call"),
            ("start.toolResult.toolUseId", REFERS, "call"),
        ),
    },
    event_call_number="contentBlockIndex",
    # Bedrock answers a broken pairing with a ValidationException (TOOL_USE_RESULT_MISMATCH in
    # its model errors); the orphan and missing texts are its words (public reports), the
    # others toolid's.
    history=History(
        results=frozenset({("call", "toolUseId")}),
        calls=frozenset({("call", "toolUseId")}),
        closes=frozenset({"assistant"}),
        next_only=True,
        texts={
            ORPHAN: "The number of toolResult blocks at {element}.content exceeds the number "
            "of toolUse blocks of previous turn.",
            MISSING: "Expected toolResult blocks at {next_element}.content for the following "
            "Ids: {id}",
            MISPLACED: "the toolResult block {id} at {element}.content is not in the message "
            "right after its toolUse block (Bedrock answers: Expected toolResult blocks at "
            "messages.N.content for the following Ids)",
            EMPTY: _ID_RULE,
            DUPLICATE: "two toolUse blocks carry one toolUseId {id}",
            COMPOSITE: _ID_RULE,
        },
        guesses=frozenset({MISPLACED, EMPTY, DUPLICATE, COMPOSITE}),
    ),
    # Each ConverseStream event is the payload of one eventstream frame.
    framings=frozenset({"eventstream"}),
    elements=(Element("output.message.content", Doc.RESPONSE, needs=_TOOL_BLOCKS),),
    # Bedrock Runtime: /model/{modelId}/converse, .../invoke, ... (InvokeModel carries another
    # API's body, but the path names the model all the same)
    model_routes=(
        re.compile(
            r"/model/(?P<model>[^/]+)/(?:converse|converse-stream|invoke|"
            r"invoke-with-response-stream|count-tokens)/?$"
        ),
    ),
    ids_required=frozenset({"call"}),
    repairs=Repairs(
        result=lambda call_id, _call, text: {
            "toolResult": {"toolUseId": call_id, "content": [{"text": text}], "status": "error"}
        },
        as_text=lambda block, note: [
            {"text": note},
            *map(_user_block, (block.get("toolResult") or {}).get("content") or []),
        ],
        blocks="content",
        user={"role": "user"},
    ),
)
