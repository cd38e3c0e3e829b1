"""A driver whose notes list every hook call it received, in order; its configure is slow,
so a call that overtook it would show. Its one device's ID tells which enumeration made
it: ``o-<the last configure's mark>-<calls so far>``."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Device, ResourceSpec, hookimpl


class Ordered:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.mark = ""

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        time.sleep(0.2)
        self.mark = config.get("mark", "")
        self.calls.append(f"configure({self.mark})")

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        self.calls.append("resources")
        return [ResourceSpec(name="test.example/ordered")]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        self.calls.append("enumerate")
        return [Device(id=f"o-{self.mark}-{len(self.calls)}")]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        self.calls.append("notes")
        return [",".join(self.calls)]
