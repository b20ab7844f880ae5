"""Templates: documents whose id literals are placeholders, filled in when sent.

The stand-in renders its answers with every tool-call id a placeholder string literal
(``"@@CALL0@@"``). The bytes sent replace each placeholder by the JSON literal of the raw
id; the bytes a client should receive through the proxy replace it by ``"<client id>"``.
Every other byte is the same in both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

PLACEHOLDER = re.compile(rb'"@@(CALL|ITEM|SRV)(\d+)@@"')


def call_ph(i: int) -> str:
    """The placeholder of the i-th call's id."""
    return f"@@CALL{i}@@"


def item_ph(i: int) -> str:
    """The placeholder of the i-th Responses item's id."""
    return f"@@ITEM{i}@@"


def srv_ph(i: int) -> str:
    """The placeholder of the i-th Anthropic server tool's id."""
    return f"@@SRV{i}@@"


def json_literal(value: str, ensure_ascii: bool = False) -> bytes:
    """The JSON string literal of ``value``, as a server would write it."""
    if not ensure_ascii:
        try:
            return json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: only the escaped form is valid JSON
            pass
    return json.dumps(value, ensure_ascii=True).encode("ascii")


def _substitute(
    template: bytes, placeholders: dict[str, str], literal: Callable[[str], bytes]
) -> bytes:
    def sub(m: re.Match[bytes]) -> bytes:
        return literal(placeholders[f"@@{m.group(1).decode()}{m.group(2).decode()}@@"])

    return PLACEHOLDER.sub(sub, template)


def fill(template: bytes, placeholders: dict[str, str], ensure_ascii: bool = False) -> bytes:
    """``template`` as sent: every placeholder replaced by the raw id's JSON literal."""
    return _substitute(template, placeholders, lambda raw: json_literal(raw, ensure_ascii))


def client_bytes(
    template: bytes, placeholders: dict[str, str], client_id: Callable[[str], str]
) -> bytes:
    """``template`` with every placeholder replaced by the literal ``"client_id(raw)"``."""
    return _substitute(
        template,
        placeholders,
        lambda raw: b'"' + client_id(raw).encode("utf-8", "surrogatepass") + b'"',
    )
