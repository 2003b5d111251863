"""Two guards over every test.

- **No gevent in the test process.** Importing locust monkey-patches the interpreter (sockets, threads,
  ``subprocess``); a test process that imported it would run every later test of its worker on gevent. Tests
  that need locust run it in a child process; a test that patched this process fails.
- **No quiet skip of what CI installed.** A test marked ``needs("chromium")`` (or ``kubectl``,
  ``transformers-serve``, ``compiled-reader``: the C extension ``pip install`` builds) skips with the reason where that tool is missing, but when ``LLMLOAD_TEST_REQUIRE``
  names the tool (``.ci/run`` sets it to what it installed), the skip is a failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator

import pytest

#: what .ci/run installs, as the ``needs`` marker names it
KNOWN_NEEDS = ("chromium", "compiled-reader", "kubectl", "transformers-serve")
REQUIRE_ENV = "LLMLOAD_TEST_REQUIRE"


def required() -> set[str]:
    """The tools ``LLMLOAD_TEST_REQUIRE`` names (spaces or commas between them)."""
    return set(os.environ.get(REQUIRE_ENV, "").replace(",", " ").split())


def patched_by_gevent() -> list[str]:
    """The standard-library modules gevent has monkey-patched in this process."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None:
        return []
    return sorted(name for name in ("socket", "thread", "threading", "subprocess", "select", "ssl", "time")
                  if monkey.is_module_patched(name))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    before = patched_by_gevent()
    try:
        return (yield)
    finally:
        after = patched_by_gevent()
        if after and not before:
            pytest.fail(f"this test monkey-patched the test process with gevent ({', '.join(after)}): import "
                        "locust only in a child process", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, None, object]:
    report = yield
    if report.skipped:
        marker = item.get_closest_marker("needs")
        missing = sorted(set(marker.args) & required()) if marker else []
        if missing:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            report.outcome = "failed"
            report.longrepr = (f"skipped, but {REQUIRE_ENV} says {', '.join(missing)} is installed here: "
                               f"{reason}")
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("needs")
        unknown = set(marker.args) - set(KNOWN_NEEDS) if marker else set()
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: needs({', '.join(sorted(unknown))}): not one of {KNOWN_NEEDS}")
