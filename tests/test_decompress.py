"""``toolid.decompress`` uses whichever zstd module the running Python has, and without one
reports zstd as an encoding it cannot decode (what StreamRewriter's callers expect).

Decoding with ``zstandard`` (mitmproxy < 12.3) runs for real in tests/e2e/test_e2e_versions.py.
"""

from __future__ import annotations

import sys

import pytest
from mitmproxy.net import encoding

from toolid import decompress
from toolid.body import Direction, Policy
from toolid.positions import Api
from toolid.stream import StreamRewriter


def test_zstd_from_this_python() -> None:
    decoder = decompress.for_encoding("zstd")
    assert decoder is not None
    data = b"data: one\n\n" * 50
    frames = encoding.encode(data[:300], "zstd") + encoding.encode(data[300:], "zstd")
    out = b"".join(decoder.decompress(frames[i : i + 7]) for i in range(0, len(frames), 7))
    assert out + decoder.flush() == data


def test_without_a_zstd_module(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("compression.zstd", "backports.zstd", "zstandard"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    assert decompress._zstd_frame_factory() is None
    monkeypatch.setattr(decompress, "_new_zstd_frame", None)
    with pytest.raises(ValueError, match=r"content-encoding 'zstd'.*no zstd module"):
        StreamRewriter(Api.CHAT, Policy(Direction.ENCODE, "safe"), content_encoding="zstd")
    assert decompress.for_encoding("gzip") is not None  # the others are unaffected
