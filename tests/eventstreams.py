"""Bedrock eventstream bodies as test fixtures: ConverseStream and InvokeModelWithResponseStream
answers built from the SSE fixtures' events (``tests/streams.py``), framed as AWS frames them
(botocore service-2.json: ConverseStreamOutput events, ResponseStream ``chunk`` PayloadParts;
headers ``:event-type``, ``:content-type``, ``:message-type``)."""

from __future__ import annotations

import base64
import json
from typing import Any

from botocore.eventstream import EventStreamBuffer

from tests import streams
from toolid.eventstream import frame


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def event_frame(kind: str, payload: bytes) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, payload)


def converse_frames(tool_id: str) -> list[bytes]:
    """A ConverseStream answer, one frame per event."""
    return [event_frame(e["event"], compact(e["data"])) for e in streams.converse_events(tool_id)]


def chunk_payload(event: Any, padding: str = "") -> bytes:
    data = base64.b64encode(compact(event)).decode()
    return compact({"bytes": data, "p": padding} if padding else {"bytes": data})


def invoke_frames(tool_id: str, padding: str = "") -> list[bytes]:
    """An InvokeModelWithResponseStream answer of a Claude model: one chunk per Messages event."""
    return [
        event_frame("chunk", chunk_payload(e["data"], padding))
        for e in streams.messages_events(tool_id)
        if "data" in e
    ]


def parsed(body: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """(headers, payload) of every frame of ``body``, as botocore reads them (CRCs checked)."""
    buffer = EventStreamBuffer()
    buffer.add_data(body)
    return [(message.headers, message.payload) for message in buffer]


def chunk_events(body: bytes) -> list[Any]:
    """The model events inside the chunk frames of ``body``, as boto3 users decode them."""
    return [
        json.loads(base64.b64decode(json.loads(payload)["bytes"]))
        for headers, payload in parsed(body)
        if headers.get(":event-type") == "chunk"
    ]
