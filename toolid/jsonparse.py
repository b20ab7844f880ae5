"""Parse a JSON document: with orjson when it is installed, else with the standard library.

orjson (the optional ``toolid[fast]`` extra) parses two to three times faster, and the parse is
most of what rewriting a large body costs. Both give the same strings, objects and arrays, which
is all toolid reads (ids, ``type`` members, the shape). What orjson refuses and the standard
library reads (NaN and Infinity, floats out of range, lone surrogates, a byte order mark, very
deep nesting, raw surrogate bytes) goes to the standard library; errors always come from the
standard library. One difference remains:
orjson reads integers beyond 64 bits as floats, and so, with orjson on, does the standard
library when it reads what orjson refused (so that two parses always compare alike, whichever
parser took each: a rewritten body is proved by comparing its parse with the original's).
``TOOLID_JSON=stdlib`` in the environment turns orjson off (to compare, or to rule it out).
"""

from __future__ import annotations

import importlib
import json
import os
from types import ModuleType
from typing import Any, Final


def _orjson() -> ModuleType | None:
    try:
        return importlib.import_module("orjson")
    except ImportError:  # optional: the standard library does everything, a little slower
        return None


orjson = None if os.environ.get("TOOLID_JSON") == "stdlib" else _orjson()


def accelerated() -> bool:
    """Whether documents are parsed with orjson (now: tests may switch it off)."""
    return orjson is not None


def loads(document: bytes | str) -> Any:
    """The parsed ``document``; NaN, Infinity and -Infinity parse to their names (strings).

    Raises ValueError (or RecursionError) as ``json.loads`` does.
    """
    return loads_checked(document)[0]


def loads_checked(document: bytes | str) -> tuple[Any, bool]:
    """``loads``, and whether orjson read it: then the bytes are strict UTF-8, so they hold no
    raw surrogate bytes (which only the standard library reads)."""
    if orjson is not None:
        try:
            return orjson.loads(document), True
        except orjson.JSONDecodeError:
            pass  # maybe something only the standard library reads: let it decide
        return json.loads(document, parse_constant=str, parse_int=_int_as_orjson_reads), False
    return json.loads(document, parse_constant=str), False


_INT_RANGE: Final = range(-(2**63), 2**64)  # the integers orjson reads as int


def _int_as_orjson_reads(digits: str) -> int | float:
    number = int(digits)
    return number if number in _INT_RANGE else float(digits)
