"""A scripted driver that also labels the node and declares its host paths.

Its labels follow its devices (``count`` is the number of healthy devices), and both
hooks mix good entries with bad ones, so tests see the host keep one and drop the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from devicehost import HostPath, hookimpl
from testdrivers.scripted import Scripted


class Labelled(Scripted):
    @hookimpl
    def devicehost_labels(self) -> Mapping[str, Any]:
        healthy = sum(
            d.get("health") == "Healthy" for devices in self._devices().values() for d in devices
        )
        return {
            "present": "true",
            "count": str(healthy),
            "family": "910B",
            "Bad Key": "x",  # upper case and a space: dropped
            "firmware-version": "not allowed!",  # '!' and a space: dropped
            "memory-mib": 81920,  # not a string: dropped
        }

    @hookimpl
    def devicehost_host_paths(self) -> Sequence[Any]:
        return [
            HostPath(
                path="/sys/class/widget",
                purpose=f"widget health ({'configured' if self.dir.exists() else 'unconfigured'})",
            ),
            HostPath(path="/sys/class/widget/widget0", purpose="inside the one above"),
            HostPath(path="/opt/widget/lib", purpose="vendor library", at_real_path=True),
            "/etc/shadow",  # not a HostPath: dropped
        ]
