"""Drivers that try to take the whole host down, for the isolation tests (issue 11).

Each one builds on ``Scripted`` (see scripted.py), so it has a resource the kubelet sees
and a control tree, and then does the one thing a careless or hostile driver could do:

- ``SegfaultInAllocate``: reads address 0 through ctypes inside allocate (a vendor
  library's null pointer), which kills its process with SIGSEGV.
- ``ExitInEnumerate``: ``os._exit(3)`` inside enumerate, with no clean-up at all.
- ``SystemExitInConfigure``: raises ``SystemExit`` from configure.
- ``BlockingGenerator``: enumerate returns a generator that yields one device, then blocks
  forever (nobody can interrupt a thread stuck in a vendor call).
- ``RaisingGenerator``: enumerate returns a generator that raises after one device.
- ``OverridingChecks``: its devices and resource are subclasses that switch their own
  checks off: IDs climbing with ``../``, with NUL, empty or 300 characters long, and a
  resource whose socket name climbs out of the plugin directory. (A bare ``..`` is a
  legal ID, no path: tests/test_security.py shows paths built from it are refused.)
- ``BareSpec`` / ``IntResources``: resources answers one ``ResourceSpec`` (not a list) or
  an int.

``hanging_import.py`` is the last one: it blocks forever while being imported.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Allocation, Device, ResourceSpec, hookimpl
from testdrivers.scripted import Scripted, device_from


class SegfaultInAllocate(Scripted):
    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        self._enter("devicehost_allocate", resource=resource, device_ids=list(device_ids))
        ctypes.string_at(0)  # SIGSEGV: the process dies here
        raise AssertionError("unreachable")


class ExitInEnumerate(Scripted):
    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self._enter("devicehost_enumerate", resource=resource)
        os._exit(3)


class SystemExitInConfigure(Scripted):
    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config=config, root=root)
        raise SystemExit("configure gives up")


class BlockingGenerator(Scripted):
    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Iterator[Device]:
        self._enter("devicehost_enumerate", resource=resource)

        def devices() -> Iterator[Device]:
            yield Device(id="blocked-0")
            threading.Event().wait()  # a vendor call that never returns

        return devices()


class RaisingGenerator(Scripted):
    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Iterator[Device]:
        self._enter("devicehost_enumerate", resource=resource)

        def devices() -> Iterator[Device]:
            yield Device(id="raised-0")
            raise RuntimeError("generator failed midway")

        return devices()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UncheckedDevice(Device):
    """A ``Device`` that says it has no problem, whatever its ID."""

    def problem(self) -> str | None:
        return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EscapingSpec(ResourceSpec):
    """A ``ResourceSpec`` that skips its name check and names a socket two levels up."""

    def __post_init__(self) -> None:
        pass

    @property
    def socket_name(self) -> str:
        return "../../escaped.sock"


#: The IDs ``OverridingChecks`` reports besides its valid ``ok-0``; each must be dropped.
UNCHECKED_IDS = ("../../etc", "nul\x00id", "", "x" * 300)
#: The resource name ``OverridingChecks`` reports besides its valid one; it must be refused.
ESCAPING_RESOURCE = "../../escaped"


class OverridingChecks(Scripted):
    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [*super().devicehost_resources(), EscapingSpec(name=ESCAPING_RESOURCE)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        valid = [device_from(d) for d in self._devices().get(resource, [])]
        return [*valid, *(UncheckedDevice(id=i) for i in UNCHECKED_IDS)]


class BareSpec(Scripted):
    @hookimpl
    def devicehost_resources(self) -> Any:
        return ResourceSpec(name="test.example/bare")


class IntResources(Scripted):
    @hookimpl
    def devicehost_resources(self) -> Any:
        return 7


#: What ``LongStderrLine`` writes before it exits: 1.2 MB without a newline, then a
#: ``\r`` progress bar (issue 24, reproduction 1).
LONG_LINE_BYTES = 1_200_000


class LongStderrLine(Scripted):
    """Writes one 1.2 MB stderr line with no newline and a ``\\r`` progress bar while it
    is configured, then exits with code 5 at its first enumerate."""

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config=config, root=root)
        os.write(2, b"x" * LONG_LINE_BYTES)
        for percent in range(0, 101, 5):
            os.write(2, f"\rprogress {percent}%".encode())

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Any]:
        self._enter("devicehost_enumerate", resource=resource)
        os._exit(5)


#: How many lines ``Chatty`` writes to stderr (issue 24, reproduction 12).
CHATTY_LINES = 30_000


class Chatty(Scripted):
    """Writes ``CHATTY_LINES`` stderr lines as fast as it can when configured, and serves
    its devices as a good driver would."""

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path) -> None:
        super().devicehost_configure(config=config, root=root)
        line = b"INFO chatty: a line the vendor library prints far too often\n"
        for _ in range(CHATTY_LINES // 100):
            os.write(2, line * 100)
