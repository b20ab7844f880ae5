"""A memo for pure functions of one string, bounded in bytes, not in entries.

``functools.lru_cache(maxsize=N)`` bounds how many results it keeps, not their size: filled
with the ids of long conversations, a few such caches held a hundred MiB per process, and far
more with long ids. ``memo(budget)`` keeps what it remembers under ``budget`` bytes (keys,
results and their share of the table, as ``sys.getsizeof`` counts them), and never remembers
a key longer than ``max_key`` characters (computing it again costs little next to its size).

It is two generations of dicts: a result is looked up in the young one (one dict lookup on a
hit, about the cost of ``lru_cache``'s C implementation plus one Python call); a result found
only in the old one is moved into the young one; when the young one has used half the budget,
it becomes the old one and the old one is dropped. So what was used since the last turnover
stays, the rest goes, and the two together never hold more than ``budget`` bytes: an LRU by
generations. Standard library only. Under threads the count may be off by an entry or two
(the dicts themselves stay consistent under the GIL).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Final

# bytes a remembered entry costs beyond its key and result: its slot and index in a dict,
# at the table's usual fill
ENTRY_OVERHEAD: Final = 64
MAX_KEY: Final = 256  # characters: a longer key is computed every time, never remembered
DEFAULT_BUDGET: Final = 2 * 1024 * 1024  # holds about 10,000 ordinary ids

type Memoized[Result] = Callable[[str], Result]


def footprint(value: object) -> int:
    """The bytes ``value`` takes, with the items of a tuple (one level deep)."""
    size = sys.getsizeof(value)
    if isinstance(value, tuple):
        size += sum(sys.getsizeof(item) for item in value)
    return size


def memo[Result](
    budget: int = DEFAULT_BUDGET, max_key: int = MAX_KEY
) -> Callable[[Memoized[Result]], Memoized[Result]]:
    """Remember the results of a pure function of one string in at most ``budget`` bytes;
    keys longer than ``max_key`` characters are never remembered. An exception is never
    remembered (the next call raises again)."""
    half = budget // 2
    getsizeof = sys.getsizeof

    def decorate(function: Memoized[Result]) -> Memoized[Result]:
        young: dict[str, Result] = {}
        old: dict[str, Result] = {}
        used = 0  # bytes in ``young``

        @functools.wraps(function)
        def memoized(key: str) -> Result:
            nonlocal young, old, used
            try:
                return young[key]
            except KeyError:
                pass
            if key in old:
                result = old[key]
            else:
                result = function(key)
                if len(key) > max_key:
                    return result
            if used >= half:  # the young generation is full: it becomes the old one
                old, young, used = young, {}, 0
            young[key] = result
            size = footprint(result) if type(result) is tuple else getsizeof(result)
            used += getsizeof(key) + size + ENTRY_OVERHEAD
            return result

        return memoized

    return decorate
