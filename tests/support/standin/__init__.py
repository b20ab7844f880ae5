"""The stand-in upstream of the end-to-end tests and the bench: one renderer per API.

- ``replies``: what an answer says, whatever the API (:class:`Reply`, :class:`Call`).
- ``chat``, ``responses``, ``messages``, ``gemini``, ``code_assist``: one module per API;
  each renders a Reply as the API's buffered document (``buffered``) and streamed events
  (``stream``, plus the single-event builders the bench composes), recognises its path
  (``matches``), counts the tool results in a request (``count_tool_results``) and words an
  error (``error``). Gemini also streams by route (``asks_to_stream``), as SSE or a JSON
  array (``stream_framing``), and checks a history as Gemini does (``check``).
- ``apis``: the registry of those modules (``MODULES``), route recognition (``api_of``) and
  the hooks where an API differs from Chat's.
- ``sse``: SSE framing (line endings, keep-alives, multi-line data); ``jsonarray``: the JSON
  array Gemini streams without ``?alt=sse``; ``wire``: HTTP/1.1 framing; ``placeholders``:
  templates whose ids are filled in when sent.
- ``server``: the asyncio server and its :class:`Scenario` options (ids, reuse across
  turns, parallel calls, turns, strict checks, compression, framing, write splits, line
  endings, TLS, pauses); ``responders``: building blocks for fault injection.
- ``agent``: :class:`ReuseUpstream`, the server as one agent's upstream; ``strict``:
  :class:`StrictHost` and :class:`Gateway`, the destinations' id rules as checks.
- ``unusable_ids``: Chat tool calls with missing, null, numeric, empty or changing ids, and
  the check that every later request gives them back exactly.
- ``responses_ws`` (Responses over WebSocket) and ``bedrock`` (SigV4, eventstream) are their
  own servers over the same renderers.

Adding an API: write one module like ``chat.py`` with ``SUFFIX`` (or ``PATH``), ``SDK_ROOT``,
``matches``, ``count_tool_results``, ``error``, ``buffered`` and ``stream`` (and the hooks of
``apis`` where it differs from Chat), add its name to ``apis.API`` and ``apis.MODULES``; the
server, ``ReuseUpstream`` and the scenarios then speak it.
"""

from .agent import FINAL_TEXT, SAFE_ID, ReuseUpstream
from .apis import API, count_tool_results, host_check
from .placeholders import client_bytes
from .replies import MODEL, Call, Reply
from .responders import (
    abort,
    end_chunked,
    kimi_parts,
    sse_headers,
    write_body,
    write_head,
)
from .server import (
    CAP_MESSAGE,
    TOOL_ARGS,
    WEATHER_TEXT,
    Exchange,
    Responder,
    Scenario,
    ScenarioHandle,
    UpstreamServer,
)

__all__ = [
    "API",
    "CAP_MESSAGE",
    "FINAL_TEXT",
    "MODEL",
    "SAFE_ID",
    "TOOL_ARGS",
    "WEATHER_TEXT",
    "Call",
    "Exchange",
    "Reply",
    "Responder",
    "ReuseUpstream",
    "Scenario",
    "ScenarioHandle",
    "UpstreamServer",
    "abort",
    "client_bytes",
    "count_tool_results",
    "end_chunked",
    "host_check",
    "kimi_parts",
    "sse_headers",
    "write_body",
    "write_head",
]
