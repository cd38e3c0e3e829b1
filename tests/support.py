"""Helpers shared by the host's tests (a module of its own: several test directories have a
conftest.py, so tests never import from ``conftest``)."""

from __future__ import annotations

import time
from collections.abc import Callable

SCRIPTED = "testdrivers.scripted:Scripted"


def eventually(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    """Wait until ``predicate()`` is true (for state that settles just after an event)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(0.01)
