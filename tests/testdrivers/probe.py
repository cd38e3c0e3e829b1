"""A driver that reports, as notes, what its worker process holds: which of the host's
heavy libraries are loaded in it, and which process forked it."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from devicehost import Device, ResourceSpec, hookimpl

#: What stays in the host: a worker that holds one of these paid for it at start-up.
HOST_ONLY = frozenset({"grpc", "opentelemetry", "importlib_metadata", "prometheus_client"})


class Probe:
    def __init__(self) -> None:
        self.resource = f"test.example/{os.environ['DEVICEHOST_DRIVER_NAME']}"

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=self.resource)]

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return [Device(id="p-0")]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        loaded = sorted({name.split(".")[0] for name in sys.modules} & HOST_ONLY)
        return [f"host-only modules loaded: {loaded}", f"parent pid: {os.getppid()}"]
