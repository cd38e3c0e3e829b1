"""The RDMA driver: HCAs from sysfs, served as shared or exclusive pools, health from ports.

Each hook is a thin step over the modules beside it: ``discovery`` reads the node,
``pools`` selects, ``devices`` judges health and ``allocation`` declares the container
edits the host composes Allocate answers from, ``topology`` chooses, ``checks`` explains,
``labels`` describes, ``watch`` notices changes, ``simulated`` fakes the hardware.
Nothing read from the hardware is cached between calls: sysfs is cheap to read and always
the truth, so a recovered port or a vanished HCA shows at the very next call.

The driver implements no ``allocate`` hook: everything a container gets is a fixed
property of the devices, declared with them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Device, DriverUnavailable, HostPath, ResourceSpec, hookimpl
from devicehost_rdma import simulated as simulation
from devicehost_rdma.allocation import resource_spec
from devicehost_rdma.checks import startup_notes
from devicehost_rdma.config import RdmaConfig, parse_config
from devicehost_rdma.devices import is_slot_id, pool_devices
from devicehost_rdma.discovery import INFINIBAND_CLASS, dev_nodes, discover, netns_mode
from devicehost_rdma.hca import Hca
from devicehost_rdma.labels import node_labels
from devicehost_rdma.pools import members, used_ports
from devicehost_rdma.topology import locality, preferred
from devicehost_rdma.watch import PortWatch

log = logging.getLogger(__name__)

#: Every host path the driver may read, on any node (``devicehost mounts``).
HOST_PATHS = (
    HostPath(path="/sys/class/infiniband", purpose="RDMA devices, their ports and firmware"),
    HostPath(path="/sys/class/infiniband_verbs", purpose="which uverbsN belongs to which HCA"),
    HostPath(path="/sys/class/infiniband_mad", purpose="which umadN/issmN belong to which HCA"),
    HostPath(path="/sys/class/misc/rdma_cm", purpose="whether rdma_ucm provides rdma_cm"),
    HostPath(path="/sys/class/net", purpose="the HCAs' network interfaces"),
    HostPath(
        path="/sys/bus/pci/devices",
        purpose="PCI functions: IDs, driver, NUMA node, SR-IOV links, PCIe ancestry",
    ),
    HostPath(
        path="/sys/bus/auxiliary/devices",
        purpose="RDMA-enabled functions whose device is in a pod's network namespace",
    ),
    HostPath(path="/sys/devices", purpose="where the class and bus links above resolve"),
    HostPath(
        path="/sys/module/ib_core/parameters/netns_mode",
        purpose="the kernel's RDMA namespace mode (shared or exclusive)",
    ),
    HostPath(path="/dev/infiniband", purpose="the character devices containers are given"),
)


class RdmaDriver:
    """The ``rdma`` entry point: one instance per process, hooks called from threads."""

    def __init__(self) -> None:
        self.root = Path("/")
        self.config = RdmaConfig()
        self.simulated = False
        self.ports = PortWatch(self.root)
        self._configured_hcas: list[Hca] = []

    # -- start-up -----------------------------------------------------------------------

    @hookimpl
    def devicehost_simulate(self, root: Path, node: str) -> None:
        """Write the simulated machine ``node`` under ``root`` (``""``: eight HCAs on two
        NUMA nodes; ``dgx-h100``: a DGX H100's NICs; the Atlas servers, and any machine
        another driver publishes: nothing)."""
        if node not in simulation.NODES:
            # A machine another installed driver publishes: it has none of this driver's
            # hardware (hooks.md), as on a real node without an HCA.
            log.info("simulated node %r is not one the rdma driver knows; building none", node)
        elif simulation.build_node(root, node) is None:
            log.info("simulated node %r has no RDMA device; building none", node)

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        parsed = parse_config(config)
        self.root, self.config, self.simulated = root, parsed, simulated
        hcas = self._hcas()
        if not hcas:
            raise DriverUnavailable(
                f"no RDMA devices under /{INFINIBAND_CLASS} (no HCA here, "
                "or its kernel driver is not loaded)"
            )
        self.ports = PortWatch(root)
        # What start-up found, for its notes (reading every HCA again cost each start ~4 ms).
        self._configured_hcas = hcas
        for pool in parsed.pools:
            chosen = members(pool, hcas)
            log.info(
                "pool %s (%s%s): %d HCAs %s",
                pool.resource_name,
                pool.mode,
                f", {pool.slots} slots" if pool.shared else "",
                len(chosen),
                ", ".join(h.label for h in chosen) or "-",
            )

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        """Every pool, even one that selects nothing now: it then advertises an empty list,
        so the kubelet shows capacity 0 instead of a stale value, and HCAs that appear
        later (hot-plug, driver reload) are served without a restart."""
        nodes = dev_nodes(self.root)
        return [resource_spec(pool, nodes) for pool in self.config.pools]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return startup_notes(self.root, self.config, self._configured_hcas)

    @hookimpl
    def devicehost_labels(self) -> Mapping[str, str]:
        return node_labels(self._hcas(), netns_mode(self.root))

    @hookimpl
    def devicehost_host_paths(self) -> Sequence[HostPath]:
        return HOST_PATHS

    # -- devices ------------------------------------------------------------------------

    def _exclusive_netns(self) -> bool:
        return netns_mode(self.root) == "exclusive"

    def _hcas(self) -> list[Hca]:
        """Every HCA now; in exclusive namespace mode also those inside pods' namespaces."""
        return discover(self.root, include_away=self._exclusive_netns())

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        pool = self.config.pool(resource)
        self.ports.enumerating(resource)
        exclusive = self._exclusive_netns()
        hcas = discover(self.root, include_away=exclusive)
        return pool_devices(pool, hcas, dev_nodes(self.root), exclusive_netns=exclusive)

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        """Poll port state every ``pollIntervalSeconds``; notify while it differs from
        what the last enumeration of ``resource`` saw."""
        self.ports.run(resource, self.config.poll_interval, notify, stop)

    # -- kubelet requests ---------------------------------------------------------------

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str] | None:
        """Exclusive pools: pack onto one NUMA node and one PCIe switch. Shared slots are
        interchangeable, so the host's default serves them."""
        pool = self.config.pool(resource)
        if pool.shared:
            return None
        paths = {hca.key: locality(hca) for hca in members(pool, self._hcas())}
        return preferred(paths, available, must_include, size)

    @hookimpl
    def devicehost_simulate_health(self, resource: str, device_id: str, healthy: bool) -> bool:
        """Pull or plug the cable of the ports the pool uses on that HCA (for a shared
        slot: of every HCA in the pool, as only that makes a slot Unhealthy)."""
        if not self.simulated:
            return False
        pool = self.config.pool(resource)
        chosen = [hca for hca in members(pool, self._hcas()) if not hca.away]
        if pool.shared:
            targets = chosen if is_slot_id(device_id, pool) else []
        else:
            targets = [hca for hca in chosen if hca.key == device_id]
        for hca in targets:
            for port in used_ports(pool, hca):
                simulation.set_link(self.root, hca.name, up=healthy, port=port.number)
        return bool(targets)
