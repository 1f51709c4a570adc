"""A resource a failed test leaves open is blamed on that test, not on a later one.

A test that fails keeps its frames alive (through ``sys.last_value`` and a reference
cycle of its traceback), so a subprocess, pipe or socket it held is only freed at the
next garbage collection, in whichever test happens to run then: its ``ResourceWarning``
(an error here, ``filterwarnings = error``) fails that innocent test. These hooks free a
failed test's frames and collect before its teardown, so the warning is reported as
an error at the teardown of the test that leaked. Imported by ``tests/conftest.py``;
a plugin of its own (``-p tests.leaks``) so a test can run pytest with it.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Generator

import pytest

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Before the teardown's check for unraisable exceptions (pytest's, run last)."""
    if item.stash.get(_FAILED, False):
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()
