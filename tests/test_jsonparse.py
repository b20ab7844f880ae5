"""The JSON parser (toolid/jsonparse.py): orjson when installed, the standard library
otherwise, with the same result for every input; what orjson refuses goes to the stdlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolid import jsonparse
from toolid import native as toolid_native


@contextmanager
def stdlib_only(*, native: bool = False) -> Iterator[None]:
    """Parse as a machine without orjson does (and, unless ``native``, without toolid's native
    accelerator, toolid/prune.py: the pure-Python path)."""
    saved, jsonparse.orjson = jsonparse.orjson, None
    saved_native = toolid_native.extension
    if not native:
        toolid_native.extension = None
    try:
        yield
    finally:
        jsonparse.orjson = saved
        toolid_native.extension = saved_native


def both(document: bytes) -> tuple[Any, Any]:
    """(result with the accelerator, result without), each a value or ("error", type)."""
    results = []
    for accelerated in (True, False):
        try:
            if accelerated:
                results.append(jsonparse.loads(document))
            else:
                with stdlib_only():
                    results.append(jsonparse.loads(document))
        except (ValueError, RecursionError) as exc:
            results.append(("error", type(exc).__name__, str(exc)))
    return results[0], results[1]


def test_the_accelerator_is_installed_in_the_dev_venv() -> None:
    assert jsonparse.accelerated(), "the dev extra installs orjson: the suite tests both ways"
    with stdlib_only():
        assert not jsonparse.accelerated()


def test_the_environment_can_turn_the_accelerator_off() -> None:
    probe = "from toolid import jsonparse; print(jsonparse.accelerated())"
    env = {**os.environ, "TOOLID_JSON": "stdlib"}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False"]


@pytest.mark.parametrize(
    "document",
    [
        b"NaN",
        b"[NaN, Infinity, -Infinity]",
        b"[1e400, -1e400]",
        b'"\\ud800"',
        b'"\xed\xa0\x80"',  # a raw surrogate, read with surrogatepass
        b'\xef\xbb\xbf{"a": 1}',
        b"[" * 3000 + b"]" * 3000,
        b'{"a": 1, "a": 2}',
        b'{"a": 1.50, "b": -0.0, "c": 1E2}',
        b"not json",
        b'{"a": "\x00"}',
        b"",
    ],
)
def test_same_result_as_the_standard_library(document: bytes) -> None:
    accelerated, stdlib = both(document)
    assert accelerated == stdlib
    try:
        expected: Any = json.loads(document, parse_constant=str)
    except (ValueError, RecursionError) as exc:
        expected = ("error", type(exc).__name__, str(exc))
    assert stdlib == expected


def test_huge_integers_are_floats_with_the_accelerator() -> None:
    """The one difference, harmless: toolid reads strings, never numbers."""
    accelerated, stdlib = both(b'[123456789012345678901234567890, "id"]')
    assert accelerated == [1.2345678901234568e29, "id"]
    assert stdlib == [123456789012345678901234567890, "id"]


@pytest.mark.parametrize(
    "number", [b"-9223372036854775809", b"-9223372036854775808", b"18446744073709551615", b"1" * 30]
)
def test_huge_integers_read_alike_when_orjson_refuses_the_document(number: bytes) -> None:
    """With orjson on, a document orjson refuses (a lone surrogate) reads its numbers as orjson
    would: the proof of a rewrite compares two parses that different parsers may have made
    (found by fuzzing: restoring a raw id with a lone surrogate beside a 65-bit integer)."""
    refused = b'[%s, "\\ud800"]' % number
    assert jsonparse.loads(refused)[0] == jsonparse.loads(b"[%s]" % number)[0]
    assert type(jsonparse.loads(refused)[0]) is type(jsonparse.loads(b"[%s]" % number)[0])


int64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | int64 | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
)


@given(json_values, st.booleans())
def test_property_same_values(value: Any, ascii_only: bool) -> None:
    try:
        document = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    except (ValueError, OverflowError):
        return
    accelerated, stdlib = both(document)
    assert accelerated == stdlib


def huge_as_float(value: Any) -> Any:
    """``value`` with integers beyond 64 bits as floats (what orjson reads)."""
    if isinstance(value, list):
        return [huge_as_float(item) for item in value]
    if isinstance(value, dict):
        return {key: huge_as_float(item) for key, item in value.items()}
    if type(value) is int and not -(2**63) <= value < 2**64:
        return float(value)
    return value


@given(st.one_of(st.binary(max_size=200), st.from_regex(rb"\A\[-?[0-9]{1,40}\]\Z")))
def test_property_any_bytes(document: bytes) -> None:
    accelerated, stdlib = both(document)
    assert accelerated == huge_as_float(stdlib)
