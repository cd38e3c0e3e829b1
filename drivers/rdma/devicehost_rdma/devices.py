"""A pool's device list for the kubelet: IDs, health from port state, NUMA nodes, edits.

- Exclusive pool: one device per HCA (or SR-IOV VF), ID = its PCI address
  (``0000:18:00.0``), as the SR-IOV network device plugin names its devices (the PCI
  address is the device ID, pkg/netdevice/pciNetDevice.go in
  k8snetworkplumbingwg/sriov-network-device-plugin) — what SR-IOV CNI and RDMA CNI expect
  as a device ID, and stable where kernel names are not (a re-created VF may come back
  as ``mlx5_12``). A device with no PCI function (rxe) keeps its RDMA device name.
  Healthy when a port the pool uses is ACTIVE and LinkUp. An *away* HCA (its RDMA device
  moved into a pod's network namespace, exclusive mode) stays listed and Healthy: it is
  in use, its ports are out of sight, and dropping it would shrink the node's capacity
  while the pod runs.
- Shared pool: ``slots`` devices ``slot-0`` … ``slot-<N-1>``, all alike: Healthy while any
  HCA of the pool is; their NUMA nodes are those of all the pool's HCAs. A pool with no
  HCA advertises no slot at all (capacity 0), not N unhealthy ones. In the kernel's
  exclusive namespace mode every slot is Unhealthy: an RDMA device lives in one network
  namespace, so it cannot be shared between pods (the reference plugin refuses to start
  in that mode: ``ValidateRdmaSystemMode`` in pkg/resources/resources_manager.go of
  Mellanox/k8s-rdma-shared-dev-plugin).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from devicehost import Device, DeviceAttributes, Health
from devicehost.sysfs import normalise_pci_address
from devicehost_rdma.allocation import exclusive_edits, shared_edits
from devicehost_rdma.config import Pool
from devicehost_rdma.discovery import DevNodes
from devicehost_rdma.hca import Hca
from devicehost_rdma.labels import product
from devicehost_rdma.pools import members, used_ports

log = logging.getLogger(__name__)

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
    """True when a port ``pool`` uses on ``hca`` is ACTIVE and LinkUp; an away HCA is
    in a pod's hands and counts as healthy."""
    return hca.away or any(port.up for port in used_ports(pool, hca))


def _numa(hcas: Sequence[Hca]) -> tuple[int, ...]:
    return tuple(sorted({h.numa_node for h in hcas if h.numa_node is not None}))


def pool_devices(
    pool: Pool, hcas: Sequence[Hca], nodes: DevNodes, *, exclusive_netns: bool = False
) -> list[Device]:
    """The full device list of ``pool`` given the node's HCAs now.

    ``exclusive_netns``: the kernel keeps each RDMA device in one network namespace.
    """
    chosen = members(pool, hcas)
    if not pool.shared:
        devices: dict[str, Device] = {}
        for hca in chosen:
            if hca.key in devices:
                # One PCI function, two RDMA devices (a RoCE LAG bond device beside its
                # port): the first keeps the ID; the other cannot be told apart by it.
                log.warning(
                    "%s shares PCI function %s with another HCA; not listed", hca.name, hca.key
                )
                continue
            devices[hca.key] = Device(
                id=hca.key,
                health=_health(hca_healthy(pool, hca)),
                numa_nodes=_numa([hca]),
                edits=exclusive_edits(pool, hca, nodes),
                attributes=hca_attributes(hca),
            )
        return list(devices.values())
    if not chosen:
        return []
    healthy = not exclusive_netns and any(hca_healthy(pool, hca) for hca in chosen)
    health, numa = _health(healthy), _numa(chosen)
    # One edits value for every slot: the host composes and caches it once.
    edits = shared_edits([hca for hca in chosen if not hca.away], nodes)
    products = {product(hca) for hca in chosen}
    attributes = DeviceAttributes(product=products.pop()[:64] if len(products) == 1 else "")
    return [
        Device(id=slot_id(i), health=health, numa_nodes=numa, edits=edits, attributes=attributes)
        for i in range(pool.slots)
    ]


def hca_attributes(hca: Hca) -> DeviceAttributes:
    """An HCA's product (its PCI vendor and device, as the ``product`` label names it), its
    PCI function's address and the PCIe root above it (the first directory of its
    ``/sys/devices`` path)."""
    root = hca.pci_path[0] if hca.pci_path and hca.pci_path[0].startswith("pci") else ""
    return DeviceAttributes(
        product=product(hca)[:64],
        pci_address=normalise_pci_address(hca.pci_address) if hca.pci_address else "",
        pcie_root=root[:64],
    )


def _health(healthy: bool) -> Health:
    return Health.HEALTHY if healthy else Health.UNHEALTHY
