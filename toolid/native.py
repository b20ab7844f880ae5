"""The optional native accelerator, ``toolid._native`` (C, in toolid/_native.c).

It is built with toolid when a C compiler is there (``setup.py``; ``scripts/proxy`` and
``scripts/test`` build it into ``.venv``) and holds four pure primitives over bytes, each the
twin of a Python path that stays the reference:

- ``id_spans(document, table)``: the ids at the table's positions in a document, each with its
  value and the span of its literal (what ``positions.find_ids`` finds in the parsed document),
  reading only what the table needs; None for a document it does not vouch for
  (``toolid.prune``, ``toolid.locate``);
- ``event_ids(data, words, limit, table)``: a piece of an LF stream framed as
  ``sse.EventFramer.feed_marked`` frames it: the ids of the one-line events holding a marker
  word, as one list in event order, and the marked events it did not read; None for a piece
  holding a CR (``toolid.sse_events``);
- ``first_marker(data, words)``: where the first of a set of marker words starts, or -1
  (``toolid.markers.Markers.in_``);
- ``splice(document, edits)``: sorted, non-overlapping edits into a document
  (``toolid.body.apply``).

They call no Python code, change no object they did not make, keep no state between calls
and raise TypeError or ValueError for arguments of the wrong type or shape; the tests run
both ways and compare.

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
