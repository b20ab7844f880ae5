"""Problem: what toolid reports it could not do, one type for every kind.

- **Rewriting** (``Rewritten.problems``): a body, an event or a message that passed as it
  came, with a short code and toolid's words (``message``); no position, id or API. Its
  ``line()`` is its message.
- **Pairing** (``toolid.pairing``, ``check_pairing``): a call or result of a request's
  history that does not pair, at a position (``path``) and with its ``id``, in the words its
  API answers it with (``api``, ``verbatim``). Its codes are ``toolid.pairing.CODES``.
- **Repair** (``Repaired.refused``): why a history was not repaired.
"""

from __future__ import annotations

import json
import re
from typing import Final, NamedTuple

from toolid.apis import RECORDS
from toolid.apis.record import Api

# The codes of what rewriting and repairing report (pairing's are ``toolid.pairing.CODES``).

#: A document that could not be rewritten safely (not valid JSON, its ids not located
#: unambiguously, ...): it passed unchanged.
UNREWRITABLE: Final = "unrewritable"
#: An error toolid did not foresee, caught: the body or message passed unchanged, or the
#: rest of the stream passes as it comes.
UNEXPECTED_ERROR: Final = "unexpected-error"
#: An event, frame or array element larger than ``max_event_bytes``: forwarded unchanged (in
#: an eventstream, with the rest of the stream).
EVENT_TOO_LARGE: Final = "event-too-large"
#: The body ended inside an eventstream frame or an array element: its bytes passed as they
#: were.
STREAM_ENDED_INSIDE: Final = "stream-ended-inside"
#: A stream the server compressed that could not be decompressed: the rest passed as it came.
COMPRESSED_CORRUPT: Final = "compressed-corrupt"
#: An eventstream frame that does not check (a CRC, a length): the rest passed as it came.
FRAME_CORRUPT: Final = "frame-corrupt"
#: An InvokeModel chunk whose ``bytes`` member is not one plain base64 string: passed unchanged.
CHUNK_UNREADABLE: Final = "chunk-unreadable"
#: A history toolid cannot repair with certainty (``Repaired.refused``): it passed as it is.
UNREPAIRABLE: Final = "unrepairable"

_PLAIN: Final = re.compile(r"[^\s\"'\\\x00-\x1f\x7f-\x9f\ud800-\udfff]+")


class Problem(NamedTuple):
    """One problem: its code, the text that says what (``message``), and, for a problem at an
    id position (pairing), that position (a concrete JSON path), the id, and the API whose
    words the message is (``verbatim``: the API's own; else toolid's)."""

    code: str
    message: str
    path: str = ""
    id: str = ""
    api: Api | None = None
    verbatim: bool = False

    def line(self) -> str:
        """One line naming it: a problem at a position names it, its id and what the API says
        (``orphan-result call_zzz at messages[3].tool_call_id: OpenAI Chat answers "..."``);
        any other is its message."""
        if not self.path:
            return self.message
        return f"{self.code} {show(self.id)} at {self.path}: {self.said()}"

    def said(self) -> str:
        """``Anthropic Messages answers "..."`` (the API's words), or ``Anthropic Messages: ...``
        (toolid's words), named by the API's title; without an API, the message."""
        if self.api is None:
            return self.message
        name = RECORDS[self.api].title
        return f'{name} answers "{self.message}"' if self.verbatim else f"{name}: {self.message}"

    def record(self) -> dict[str, str]:
        """As plain data (``flow.metadata``, ``--json``): the fields, the API ("" for none),
        the line."""
        return {
            "code": self.code,
            "path": self.path,
            "id": self.id,
            "message": self.message,
            "api": "" if self.api is None else self.api.value,
            "line": self.line(),
        }


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
