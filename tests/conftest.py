"""Suite-wide options: ``--long`` runs the long variants of the robustness tests.

Without it (CI), the fuzz tests run a few dozen to a few hundred examples each, the load
test holds its load for about 10 s and the slowest fault tests are skipped. With it:

- hypothesis loads the ``long`` profile (``max_examples=5000``; the fuzz tests scale their
  own budgets from it, see ``tests/fuzz/budget.py``);
- tests marked ``@pytest.mark.long`` run (they are skipped otherwise);
- the ``long_run`` fixture is True (the load test then runs for ``TOOLID_LOAD_SECONDS``,
  default 60 s);
- the per-test timeout goes from 120 s to 1800 s, unless ``--timeout`` is given.

Without ``--long`` hypothesis keeps its default profile, so the existing property tests
run exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

LONG_TIMEOUT = 1800

settings.register_profile(
    "long",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="toolid: run the long variants (more fuzz examples, longer load, big faults)",
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its settings
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long: a slow variant, run only with --long")
    if config.getoption("--long"):
        settings.load_profile("long")
        if getattr(config.option, "timeout", None) is None:
            config.option.timeout = LONG_TIMEOUT  # instead of the ini's 120 s


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long variant: run with --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    """Whether the suite runs with ``--long``."""
    return bool(request.config.getoption("--long"))


@pytest.fixture(params=["native", "orjson", "python"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test with each of toolid's backends: its accelerators as installed ("native":
    the native parser when it is built, orjson when it is installed), without the native
    parser ("orjson": what a machine without a C compiler gets, orjson as installed), and as
    pure standard-library Python ("python")."""
    from tests.test_jsonparse import stdlib_only  # noqa: PLC0415 - a test module's helper
    from toolid import native  # noqa: PLC0415 - imported once a test asks

    if request.param == "native":
        yield request.param
    elif request.param == "orjson":
        saved, native.extension = native.extension, None
        try:
            yield request.param
        finally:
            native.extension = saved
    else:
        with stdlib_only():
            yield request.param
