"""Incremental decoding of a compressed response body (gzip, deflate, br, zstd)."""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Protocol, cast


class Decompressor(Protocol):
    """Fed compressed pieces, returns what they decode to."""

    def decompress(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


class _ZstdFrame(Protocol):
    """Decodes one zstd frame (``compression.zstd.ZstdDecompressor`` and look-alikes)."""

    eof: bool
    unused_data: bytes

    def decompress(self, data: bytes) -> bytes: ...


def _zstd_frame_factory() -> Callable[[], _ZstdFrame] | None:
    """Whichever zstd this Python has: ``compression.zstd`` (3.14+), ``backports.zstd``
    (mitmproxy >= 12.3 depends on it) or ``zstandard`` (mitmproxy < 12.3); None without."""
    for name in ("compression.zstd", "backports.zstd"):
        try:
            return cast(Callable[[], _ZstdFrame], importlib.import_module(name).ZstdDecompressor)
        except ImportError:
            pass
    try:
        import zstandard  # noqa: PLC0415
    except ImportError:
        return None
    return lambda: cast(_ZstdFrame, zstandard.ZstdDecompressor().decompressobj())


def _brotli_module() -> ModuleType | None:
    """``brotli`` (the Brotli package; mitmproxy depends on it); None without."""
    try:
        return importlib.import_module("brotli")
    except ImportError:
        return None


_new_zstd_frame = _zstd_frame_factory()
_brotli = _brotli_module()


class _Zlib:
    """gzip (one or several members), or deflate with or without its zlib header."""

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._inner: zlib._Decompress | None = None
        self._pending = b""

    def _start(self, data: bytes) -> zlib._Decompress:
        if self._gzip:
            return zlib.decompressobj(31)
        has_header = (data[0] & 0x0F) == 8 and int.from_bytes(data[:2]) % 31 == 0
        return zlib.decompressobj(15 if has_header else -15)

    def decompress(self, data: bytes) -> bytes:
        out: list[bytes] = []
        data = self._pending + data
        self._pending = b""
        while data:
            if self._inner is None:
                if not self._gzip and len(data) < 2:
                    self._pending = data  # need two bytes to tell zlib from raw deflate
                    break
                self._inner = self._start(data)
            out.append(self._inner.decompress(data))
            if not self._inner.eof:
                break
            data = self._inner.unused_data
            if data and not self._gzip:
                raise zlib.error("data after the end of the deflate stream")
            self._inner = None  # gzip: another member may follow
        return b"".join(out)

    def flush(self) -> bytes:
        if self._pending:
            raise zlib.error("deflate stream too short")
        if self._inner is None:
            return b""
        out = self._inner.flush()
        if not self._inner.eof:
            raise zlib.error("compressed stream ended early")
        return out


class _Brotli:
    def __init__(self, brotli: ModuleType) -> None:
        self._inner = brotli.Decompressor()

    def decompress(self, data: bytes) -> bytes:
        out: bytes = self._inner.process(data)
        return out

    def flush(self) -> bytes:
        if not self._inner.is_finished():
            raise ValueError("brotli stream ended early")
        return b""


class _Zstd:
    """zstd, including several concatenated frames."""

    def __init__(self, new_frame: Callable[[], _ZstdFrame]) -> None:
        self._new = new_frame
        self._inner = new_frame()
        self._mid_frame = False

    def decompress(self, data: bytes) -> bytes:
        out: list[bytes] = []
        while data:
            out.append(self._inner.decompress(data))
            self._mid_frame = not self._inner.eof
            if self._mid_frame:
                break
            data = self._inner.unused_data
            self._inner = self._new()
        return b"".join(out)

    def flush(self) -> bytes:
        if self._mid_frame:
            raise ValueError("zstd stream ended early")
        return b""


def for_encoding(content_encoding: str) -> Decompressor | None:
    """A decompressor for one Content-Encoding value; None for identity.

    Raises ValueError for an encoding toolid cannot decode (or a list of several).
    """
    name = content_encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return _Zlib(gzip=True)
    if name == "deflate":
        return _Zlib(gzip=False)
    if name == "br":
        if _brotli is None:
            raise ValueError(
                "cannot decode content-encoding 'br': this Python has no brotli module "
                "(the Brotli package, which mitmproxy brings)"
            )
        return _Brotli(_brotli)
    if name == "zstd":
        if _new_zstd_frame is None:
            raise ValueError(
                "cannot decode content-encoding 'zstd': this Python has no zstd module "
                "(compression.zstd, backports.zstd or zstandard)"
            )
        return _Zstd(_new_zstd_frame)
    raise ValueError(f"unsupported content-encoding {content_encoding!r}")
