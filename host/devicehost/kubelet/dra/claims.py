"""Where a claim's allocation comes from: a narrow interface, and its reading.

The kubelet names a claim (namespace, name, UID); which devices it got is in the claim's
``status.allocation.devices.results`` on the API server (resource.k8s.io/v1
``DeviceRequestAllocationResult``: ``request``, ``driver``, ``pool``, ``device``). A
``ClaimSource`` fetches the claim object as the API returns it; ``allocation_of`` reads
this driver's share of it, so the API-server source and any other read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class ClaimProblem(Exception):
    """The claim cannot be prepared as asked (gone, recreated, not allocated)."""


class ClaimSource(Protocol):
    """Reads ResourceClaims, e.g. from the API server."""

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The ResourceClaim ``namespace/name`` as resource.k8s.io/v1 JSON; ``ClaimProblem``
        when it does not exist."""
        ...


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatedDevice:
    """One device of this driver's pool that the scheduler gave to one of a claim's requests."""

    request: str
    pool: str
    device: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimAllocation:
    """This driver's part of one allocated claim."""

    namespace: str
    name: str
    uid: str
    devices: tuple[AllocatedDevice, ...]


def _field(data: Any, key: str, where: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise ClaimProblem(f"{where} has no {key!r}")
    return data[key]


def allocation_of(claim: Mapping[str, Any], driver: str, uid: str) -> ClaimAllocation:
    """The devices of ``driver`` in ``claim``, once its UID is ``uid`` (the kubelet's)."""
    metadata = _field(claim, "metadata", "the claim")
    namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
    where = f"claim {namespace}/{name}"
    if metadata.get("uid") != uid:
        raise ClaimProblem(
            f"{where} has UID {metadata.get('uid')!r}, not {uid!r}: it was deleted and "
            "created again"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimProblem(f"{where} is not allocated")
    results = _field(_field(allocation, "devices", where), "results", where)
    devices = []
    for result in results or []:
        if _field(result, "driver", where) != driver:
            continue
        devices.append(
            AllocatedDevice(
                request=str(_field(result, "request", where)),
                pool=str(_field(result, "pool", where)),
                device=str(_field(result, "device", where)),
            )
        )
    return ClaimAllocation(namespace=namespace, name=name, uid=uid, devices=tuple(devices))
