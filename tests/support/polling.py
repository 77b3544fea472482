"""Polling with a deadline, never a sleep for a condition: the one loop the test harnesses share.

``wait_until`` (the harnesses' form) raises ``TimeoutError``; ``wait_for`` (the tests' form, the
description first) fails the test with an ``AssertionError`` ``timed out waiting for <what>``.
Both return the predicate's first truthy value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def _poll(predicate: Callable[[], Any], timeout: float, interval: float, error: Callable[[], Exception]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error()
        time.sleep(interval)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str = "condition", interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` passes."""
    return _poll(predicate, timeout, interval, lambda: TimeoutError(f"{what} not reached within {timeout}s"))


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
    """``wait_until`` for a test's assertion: a timeout is ``AssertionError("timed out waiting for <what>")``."""
    return _poll(predicate, timeout, interval, lambda: AssertionError(f"timed out waiting for {what}"))
