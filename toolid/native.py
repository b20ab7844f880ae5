"""The optional native accelerator, ``toolid._native`` (C, in toolid/_native.c).

It is built with toolid when a C compiler is there (``setup.py``; ``scripts/proxy`` and
``scripts/test`` build it into ``.venv``) and does, faster, what the pure-Python path does:

- ``parse``: a document, keeping only what the table reads, with the span of each id
  literal (``toolid.prune``);
- ``walk``: a parsed document, for the table's positions (``toolid.positions.find_ids``);
- ``restore`` and ``encode``: the whole plan of a request's restore or of a response's or
  event's encode, fused with the walk (``toolid.body``; it calls back into Python for what
  the codec decides, and answers ``toolid.occurrence.CallIds`` on that object's own state,
  calling ``CallIds.define`` whenever an occurrence tag is needed);
- ``sse_feed``: the framing and encoding of the next piece of an event stream whose line
  endings are LF (``toolid.stream``), handing any event it does not vouch for to the Python
  path;
- ``Feeder``: the function of a stream's pieces (``toolid.stream.stream_function``), giving
  the pieces on the native lane to ``sse_feed`` with no Python frame;
- ``first_marker``: where the first of a set of marker words starts
  (``toolid.markers.Markers.in_``);
- ``encode_id``: the plain client id of one raw id (``toolid.codec.encode``, which stays the
  standard-library reference);
- ``records``: change records as the addon stores them (``toolid.report.as_records``);
- ``splice``: edits into a document (``toolid.body.apply``).

Each gives exactly what the Python code gives, or None for anything it does not vouch for,
and the Python code decides; the tests run both ways and compare.

Without it (no compiler, another Python's build, or ``TOOLID_NATIVE=off`` in the
environment) ``extension`` is None and everything runs as pure Python.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("TOOLID_NATIVE") == "off":
        return None
    try:
        return importlib.import_module("toolid._native")
    except ImportError:  # optional: not built here, or built for another Python
        return None


extension = _load()

MAX_MARKERS = 64  # the most marker words one native search takes


def accelerated() -> bool:
    """Whether the native accelerator is in use (now: tests may switch it off)."""
    return extension is not None
