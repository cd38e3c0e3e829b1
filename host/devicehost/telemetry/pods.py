"""Who a workload is, as telemetry needs it, and the lookup telemetry is handed.

Telemetry never reaches into the kubelet side: the host hands it a ``PodLookup`` (the
PodResources client) so the arrows between folders point one way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PodIdentity:
    """The workload container that was given some devices; ``uid`` "" when unknown."""

    pod: str
    namespace: str
    container: str
    uid: str = ""


class PodLookup(Protocol):
    """Finds the container that holds some devices (the kubelet's PodResources API)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def timeout(self) -> float:
        """Seconds ``resolve`` keeps looking."""

    async def lookup(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        """One quick look; None when not found."""

    async def resolve(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        """Look, retrying for ``timeout`` seconds while the kubelet has not recorded the
        allocation yet."""

    async def close(self) -> None: ...


class NoPodLookup:
    """The lookup to use when PodResources is off: finds nobody."""

    enabled = False
    timeout = 0.0

    async def lookup(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        return None

    async def resolve(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        return None

    async def close(self) -> None:
        return None
