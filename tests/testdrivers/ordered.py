"""A driver whose notes list every hook call it received, in order; its configure is slow,
so a call that overtook it would show."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Device, ResourceSpec, hookimpl


class Ordered:
    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        time.sleep(0.2)
        self.calls.append(f"configure({config.get('mark', '')})")

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        self.calls.append("resources")
        return [ResourceSpec(name="test.example/ordered")]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [Device(id="o-0")]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        self.calls.append("notes")
        return [",".join(self.calls)]
