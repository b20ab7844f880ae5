"""How many examples a fuzz test runs: a CI budget, or a long one under ``--long``.

``tests/conftest.py`` loads hypothesis' ``long`` profile when pytest runs with ``--long``;
these helpers read which profile is active (test modules are imported after that).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def long_run() -> bool:
    return settings.get_current_profile_name() == "long"


def examples(ci: int, long: int | None = None) -> int:
    """``ci`` examples, or ``long`` (default: the long profile's max_examples) with --long."""
    if not long_run():
        return ci
    return long if long is not None else settings.default.max_examples


def fuzz(ci: int, long: int | None = None) -> settings:
    """Settings for one fuzz test: its budget, no deadline, big inputs allowed."""
    return settings(
        max_examples=examples(ci, long),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )
