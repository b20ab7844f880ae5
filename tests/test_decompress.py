"""``toolid.decompress`` uses whichever zstd module the running Python has, and without one
reports zstd as an encoding it cannot decode (what StreamRewriter's callers expect).

Decoding with ``zstandard`` (mitmproxy < 12.3) runs for real in tests/e2e/test_e2e_versions.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

from mitmproxy.net import encoding

from toolid import decompress


def test_zstd_from_this_python() -> None:
    decoder = decompress.for_encoding("zstd")
    assert decoder is not None
    data = b"data: one\n\n" * 50
    frames = encoding.encode(data[:300], "zstd") + encoding.encode(data[300:], "zstd")
    out = b"".join(decoder.decompress(frames[i : i + 7]) for i in range(0, len(frames), 7))
    assert out + decoder.flush() == data


WITHOUT_ZSTD = """
import re
import subprocess
import sys
for name in ("compression.zstd", "backports.zstd", "zstandard"):
    sys.modules[name] = None  # importing it raises ImportError, as where it is not installed
from toolid import decompress
from toolid.body import Direction, Policy
from toolid.positions import Api
from toolid.stream import StreamRewriter
try:
    StreamRewriter(Api.CHAT, Policy(Direction.ENCODE, "safe"), content_encoding="zstd")
except ValueError as exc:
    print("refused:", exc)
print("gzip:", decompress.for_encoding("gzip") is not None)
"""


def test_without_a_zstd_module() -> None:
    """A Python with no zstd module (toolid imported there): a zstd stream is refused with
    a message that says why; the other encodings are unaffected."""
    ran = subprocess.run(
        [sys.executable, "-c", WITHOUT_ZSTD], capture_output=True, text=True, check=True
    )
    refused, gzip_line = ran.stdout.splitlines()
    assert re.fullmatch(r"refused: .*content-encoding 'zstd'.*no zstd module.*", refused)
    assert gzip_line == "gzip: True"
