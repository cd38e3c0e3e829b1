"""A driver that closes its worker's channel to the host while the zygote is healthy: on
the first enumeration after the file ``closeFile`` appears it removes the file and closes
every descriptor but stdin, stdout and stderr, as a vendor library that daemonizes does
(``os.closerange``). Resource ``test.example/closing``: two devices, ``c-0`` and ``c-1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Device, ResourceSpec, hookimpl

RESOURCE = "test.example/closing"


class ChannelClosing:
    def __init__(self) -> None:
        self.flag = Path()

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any]) -> None:
        self.flag = Path(config["closeFile"])

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=RESOURCE)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        if self.flag.exists():
            self.flag.unlink()
            os.closerange(3, 65_536)
        return [Device(id=f"c-{n}") for n in range(2)]
