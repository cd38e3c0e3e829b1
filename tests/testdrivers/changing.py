"""A driver whose resource list changes while it runs, as a QAT node's does when a PF's
services are reconfigured (``qat.intel.com/cy`` becomes ``qat.intel.com/dc``) or VFs are
created by a provisioning step after devicehost started.

Config (``drivers.<name>``):
  resourcesFile: PATH   a JSON list of resource names, read at every ``resources`` call;
                        while the file is missing the driver raises ``DriverUnavailable``
                        ("no VFs yet")
  signal: true          a thread of the driver's own watches the file and calls
                        ``devicehost.resources_changed()`` when it changes
Each resource has two devices, ``<last part of its name>-0`` and ``-1``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import devicehost
from devicehost import Device, DriverUnavailable, ResourceSpec, hookimpl

POLL_SECONDS = 0.05


class Changing:
    def __init__(self) -> None:
        self.file = Path()
        self._stop = threading.Event()

    def _read(self) -> str | None:
        try:
            return self.file.read_text()
        except FileNotFoundError:
            return None

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        self.file = Path(config["resourcesFile"])
        if config.get("signal"):
            threading.Thread(target=self._signal, daemon=True).start()

    def _signal(self) -> None:
        seen = self._read()
        while not self._stop.wait(POLL_SECONDS):
            now = self._read()
            if now != seen:
                seen = now
                devicehost.resources_changed()

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        text = self._read()
        if text is None:
            raise DriverUnavailable(f"no VFs yet ({self.file} is missing)")
        return [ResourceSpec(name=name) for name in json.loads(text)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        short = resource.rsplit("/", 1)[-1]
        return [Device(id=f"{short}-{n}") for n in range(2)]

    @hookimpl
    def devicehost_shutdown(self) -> None:
        self._stop.set()
