"""A pool's device list for the kubelet: IDs, health from port state, NUMA nodes.

- Exclusive pool: one device per HCA (or SR-IOV VF), ID = the RDMA device name
  (``mlx5_0``). Healthy when a port the pool uses is ACTIVE and LinkUp.
- Shared pool: ``slots`` devices ``slot-0`` … ``slot-<N-1>``, all alike: Healthy while any
  HCA of the pool is; their NUMA nodes are those of all the pool's HCAs. A pool with no
  HCA advertises no slot at all (capacity 0), not N unhealthy ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from devicehost import Device, Health
from devicehost_rdma.config import Pool
from devicehost_rdma.hca import Hca
from devicehost_rdma.pools import members, used_ports

SLOT_PREFIX = "slot-"


def slot_id(index: int) -> str:
    return f"{SLOT_PREFIX}{index}"


def is_slot_id(device_id: str, pool: Pool) -> bool:
    """True for ``slot-<n>`` with ``n`` below the pool's slots, spelled as advertised."""
    number = device_id.removeprefix(SLOT_PREFIX)
    return (
        device_id.startswith(SLOT_PREFIX)
        and number.isdigit()
        and slot_id(int(number)) == device_id
        and int(number) < pool.slots
    )


def hca_healthy(pool: Pool, hca: Hca) -> bool:
    """True when a port ``pool`` uses on ``hca`` is ACTIVE and LinkUp."""
    return any(port.up for port in used_ports(pool, hca))


def healthy_members(pool: Pool, hcas: Sequence[Hca]) -> list[Hca]:
    return [hca for hca in members(pool, hcas) if hca_healthy(pool, hca)]


def _numa(hcas: Sequence[Hca]) -> tuple[int, ...]:
    return tuple(sorted({h.numa_node for h in hcas if h.numa_node is not None}))


def pool_devices(pool: Pool, hcas: Sequence[Hca]) -> list[Device]:
    """The full device list of ``pool`` given the node's HCAs now."""
    chosen = members(pool, hcas)
    if not pool.shared:
        return [
            Device(id=hca.name, health=_health(hca_healthy(pool, hca)), numa_nodes=_numa([hca]))
            for hca in chosen
        ]
    if not chosen:
        return []
    health = _health(any(hca_healthy(pool, hca) for hca in chosen))
    numa = _numa(chosen)
    return [Device(id=slot_id(i), health=health, numa_nodes=numa) for i in range(pool.slots)]


def _health(healthy: bool) -> Health:
    return Health.HEALTHY if healthy else Health.UNHEALTHY
