"""What a container gets for its HCAs: device nodes, the RDMA_DEVICES env, or CDI names.

Default (CDI off), for HCAs ``mlx5_0`` and ``mlx5_1``::

    envs    RDMA_DEVICES=mlx5_0,mlx5_1
    devices /dev/infiniband/uverbs0, umad0, issm0, uverbs1, umad1, issm1, rdma_cm  (rw)

With CDI on, the device nodes move into the driver's CDI spec and the response names
``<kind>=mlx5_0``, ``<kind>=mlx5_1`` instead (the spec's common edits carry rdma_cm), so a
CDI-enabled runtime injects exactly the same nodes.

A node missing from a visible ``<root>/dev/infiniband`` is never given (see
``discovery.DevNodes``): the runtime would fail the container's start on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from devicehost import Allocation, DeviceNode, natural_key
from devicehost.cdi import cdi_name
from devicehost_rdma.config import CdiSettings
from devicehost_rdma.discovery import DEV_DIR, RDMA_CM, DevNodes
from devicehost_rdma.hca import Hca

#: Comma-separated RDMA device names the container was given (for NCCL_IB_HCA, UCX_NET_DEVICES…).
RDMA_DEVICES_ENV = "RDMA_DEVICES"
PERMISSIONS = "rw"


def device_node(name: str) -> DeviceNode:
    """``/dev/infiniband/<name>``, the same path inside the container, read-write."""
    return DeviceNode(host_path=f"{DEV_DIR}/{name}", permissions=PERMISSIONS)


def hca_nodes(hca: Hca, nodes: DevNodes) -> tuple[DeviceNode, ...]:
    """The character devices of one HCA (uverbs, then umad, then issm) that are present."""
    return tuple(device_node(name) for name in hca.char_devices if nodes.present(name))


def build_allocation(
    hcas: Sequence[Hca], nodes: DevNodes, cdi: CdiSettings | None = None
) -> Allocation:
    """The answer for a container given ``hcas`` (deduplicated, in natural order); only
    the character devices ``nodes`` says are present."""
    given = sorted({h.name: h for h in hcas}.values(), key=lambda h: natural_key(h.name))
    envs = {RDMA_DEVICES_ENV: ",".join(h.name for h in given)}
    if cdi is not None and cdi.enabled:
        # The spec lists only HCAs with a node present (CDI refuses an empty device).
        names = tuple(cdi_name(cdi.kind, h.name) for h in given if hca_nodes(h, nodes))
        return Allocation(envs=envs, cdi_devices=names)
    devices = [node for hca in given for node in hca_nodes(hca, nodes)]
    if nodes.rdma_cm:
        devices.append(device_node(RDMA_CM))
    return Allocation(envs=envs, devices=tuple(devices))
