"""What a container needs for its HCAs, declared as container edits the host composes.

The host answers Allocate from these without calling the driver (and writes its CDI
specs from them); the driver only describes:

- per **resource** (every container of the pool, once): ``/dev/infiniband/rdma_cm``,
  the connection manager librdmacm needs whatever HCAs the container gets;
- per **exclusive device** (one HCA or VF): its own character devices (``uverbsN``, then
  one ``umadN`` and one ``issmN`` per port), its name in ``RDMA_DEVICES`` and its PCI
  address in ``PCIDEVICE_<RESOURCE>``;
- per **shared slot**: every HCA of the pool, whatever its link state — health decides
  what ListAndWatch advertises, never what a container gets (a container started while
  one link was down would otherwise miss that HCA for good). The reference shared plugin
  hands every pool member's device specs to every container the same way
  (``Allocate`` and ``getDevicesSpec`` in pkg/resources/server.go of
  Mellanox/k8s-rdma-shared-dev-plugin).

Both env variables are *joined*: the host joins the devices' values with commas,
de-duplicated, in request order.

A node missing from a visible ``<root>/dev/infiniband`` is never given (see
``discovery.DevNodes``): the runtime would fail the container's start on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from devicehost import ContainerEdits, DeviceNode, ResourceSpec, natural_key
from devicehost_rdma.config import Pool
from devicehost_rdma.discovery import DEV_DIR, RDMA_CM, DevNodes
from devicehost_rdma.hca import Hca

#: Comma-separated RDMA device names the container was given (for NCCL_IB_HCA, UCX_NET_DEVICES…).
RDMA_DEVICES_ENV = "RDMA_DEVICES"
PERMISSIONS = "rw"


def pcidevice_env(resource: str) -> str:
    """``rdma/ib_vf`` → ``PCIDEVICE_RDMA_IB_VF``: the variable the SR-IOV network device
    plugin sets to the PCI addresses a container got. Its rule (``GetEnvs`` in
    pkg/resources/pool_stub.go of k8snetworkplumbingwg/sriov-network-device-plugin):
    ``PCIDEVICE_<prefix>_<name>``, dots replaced by underscores, upper-cased; the value is
    the addresses joined with commas, in request order."""
    prefix, _, name = resource.partition("/")
    return f"PCIDEVICE_{prefix}_{name}".replace(".", "_").upper()


def device_node(name: str) -> DeviceNode:
    """``/dev/infiniband/<name>``, the same path inside the container, read-write."""
    return DeviceNode(host_path=f"{DEV_DIR}/{name}", permissions=PERMISSIONS)


def hca_nodes(hca: Hca, nodes: DevNodes) -> tuple[DeviceNode, ...]:
    """The character devices of one HCA (uverbs, then umad, then issm) that are present."""
    return tuple(device_node(name) for name in hca.char_devices if nodes.present(name))


def resource_spec(pool: Pool, nodes: DevNodes) -> ResourceSpec:
    """The pool's resource: ``rdma_cm`` for every container (when the node has it), and
    the env variables its devices contribute to."""
    edits = ContainerEdits(devices=(device_node(RDMA_CM),) if nodes.rdma_cm else ())
    joined = [RDMA_DEVICES_ENV]
    if not pool.shared:
        joined.append(pcidevice_env(pool.resource_name))
    return ResourceSpec(name=pool.resource_name, edits=edits, joined_envs=tuple(joined))


def exclusive_edits(pool: Pool, hca: Hca, nodes: DevNodes) -> ContainerEdits:
    """One exclusive device's edits. An away HCA (its RDMA device is in a pod's network
    namespace) has no name or character devices to give; it keeps its PCI address."""
    envs = {}
    if hca.name:
        envs[RDMA_DEVICES_ENV] = hca.name
    if hca.pci_address:
        envs[pcidevice_env(pool.resource_name)] = hca.pci_address
    return ContainerEdits(envs=envs, devices=hca_nodes(hca, nodes))


def shared_edits(hcas: Sequence[Hca], nodes: DevNodes) -> ContainerEdits:
    """What any slot of a shared pool gives: every HCA of the pool, in natural order."""
    given = sorted({h.name: h for h in hcas if h.name}.values(), key=lambda h: natural_key(h.name))
    return ContainerEdits(
        envs={RDMA_DEVICES_ENV: ",".join(h.name for h in given)} if given else {},
        devices=tuple(node for hca in given for node in hca_nodes(hca, nodes)),
    )
