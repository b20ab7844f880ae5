"""The optional native accelerator, ``toolid._native`` (C, in toolid/_native.c).

It is built with toolid when a C compiler is there (``setup.py``; ``scripts/proxy`` and
``scripts/test`` build it into ``.venv``) and does three things the pure-Python path also
does, faster: it parses a document keeping only what the table reads, with the span of each
id literal (``toolid.prune``); it walks a parsed document for the table's positions
(``toolid.positions.find_ids``); it splices edits into a document (``toolid.body.apply``).
Each gives exactly what the Python code gives, or None for anything it does not vouch for,
and the Python code decides; the tests run both ways.

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


def accelerated() -> bool:
    """Whether the native accelerator is in use (now: tests may switch it off)."""
    return extension is not None
