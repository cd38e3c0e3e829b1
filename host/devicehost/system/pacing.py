"""Background work on the event loop in short slices, each followed by a short pause.

Why a pause and not ``asyncio.sleep(0)``: one unary RPC through ``grpc.aio`` takes several
turns of the loop, and each turn that finds a slice of background work ready waits for it.
Measured (docs/reliability.md, "Limits"): with slices of 200 devices (3-5 ms) and a bare
yield between, a good driver's Allocate p99 was 6 ms in every stretch of a 10 000-device
check; with 0.5 ms slices and 0.5 ms pauses, the RPC's turns run in the pauses. The cost:
a large list takes about twice its CPU time in wall time to be checked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

#: The longest one slice of background work holds the event loop.
SLICE_SECONDS = 0.0005
#: The pause after a slice, in which the loop runs everything else that is ready.
PAUSE_SECONDS = 0.0005
#: Items handled between two looks at the clock (checking one device is ~15 µs).
CLOCK_EVERY = 8


async def pause() -> None:
    """Let the event loop run other work for ``PAUSE_SECONDS`` (a slice is over)."""
    await asyncio.sleep(PAUSE_SECONDS)


async def in_slices(items: Iterable[T], work: Callable[[T], object]) -> None:
    """``work(item)`` for every item, with a ``pause()`` every ``SLICE_SECONDS`` of it."""
    deadline = time.perf_counter() + SLICE_SECONDS
    for index, item in enumerate(items, 1):
        work(item)
        if index % CLOCK_EVERY == 0 and time.perf_counter() >= deadline:
            await pause()
            deadline = time.perf_counter() + SLICE_SECONDS
