"""The RDMA driver: HCAs from sysfs, served as shared or exclusive pools, health from ports.

Each hook is a thin step over the modules beside it: ``discovery`` reads the node,
``pools`` selects, ``devices`` judges health, ``topology`` chooses, ``allocation`` and
``cdi_spec`` answer the kubelet, ``checks`` explains, ``watch`` notices changes,
``simulated`` fakes the hardware. Nothing read from the hardware is cached between calls:
sysfs is cheap to read and always the truth, so a recovered port or a vanished HCA shows
at the very next call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import (
    Allocation,
    Device,
    DriverUnavailable,
    ResourceSpec,
    UnknownDevice,
    hookimpl,
)
from devicehost_rdma import simulated as simulation
from devicehost_rdma.allocation import build_allocation
from devicehost_rdma.cdi_spec import CdiSpec
from devicehost_rdma.checks import startup_notes
from devicehost_rdma.config import Pool, RdmaConfig, parse_config
from devicehost_rdma.devices import healthy_members, is_slot_id, pool_devices
from devicehost_rdma.discovery import INFINIBAND_CLASS, dev_nodes, discover
from devicehost_rdma.hca import Hca
from devicehost_rdma.pools import members, used_ports
from devicehost_rdma.topology import locality, preferred
from devicehost_rdma.watch import PortWatch

log = logging.getLogger(__name__)


class RdmaDriver:
    """The ``rdma`` entry point: one instance per process, hooks called from threads."""

    def __init__(self) -> None:
        self.root = Path("/")
        self.config = RdmaConfig()
        self.simulated = False
        self.cdi: CdiSpec | None = None
        self.ports = PortWatch(self.root)

    # -- start-up -----------------------------------------------------------------------

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        """Write the default simulated node (eight HCAs, two NUMA nodes) under ``root``."""
        simulation.build_default_node(root)

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        parsed = parse_config(config)
        hcas = discover(root)
        if not hcas:
            raise DriverUnavailable(
                f"no RDMA devices under /{INFINIBAND_CLASS} (no HCA here, "
                "or its kernel driver is not loaded)"
            )
        self.root, self.config, self.simulated = root, parsed, simulated
        self.ports = PortWatch(root)
        self.cdi = None
        if parsed.cdi.enabled:
            self.cdi = CdiSpec(root / parsed.cdi.dir.lstrip("/"), parsed.cdi.kind)
            self.cdi.update(hcas, dev_nodes(root))
        for pool in parsed.pools:
            chosen = members(pool, hcas)
            log.info(
                "pool %s (%s%s): %d HCAs %s",
                pool.resource_name,
                pool.mode,
                f", {pool.slots} slots" if pool.shared else "",
                len(chosen),
                ", ".join(h.name for h in chosen) or "-",
            )

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        """Every pool, even one that selects nothing now: it then advertises an empty list,
        so the kubelet shows capacity 0 instead of a stale value, and HCAs that appear
        later (hot-plug, driver reload) are served without a restart."""
        return [ResourceSpec(name=pool.resource_name) for pool in self.config.pools]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return startup_notes(self.root, self.config, discover(self.root))

    # -- devices ------------------------------------------------------------------------

    def _hcas(self) -> list[Hca]:
        hcas = discover(self.root)
        if self.cdi is not None:
            self.cdi.update(hcas, dev_nodes(self.root))
        return hcas

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        pool = self.config.pool(resource)
        self.ports.enumerating(resource)
        return pool_devices(pool, self._hcas())

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
        paths = {hca.name: locality(hca) for hca in members(pool, discover(self.root))}
        return preferred(paths, available, must_include, size)

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        pool = self.config.pool(resource)
        given = self._given(pool, resource, device_ids)
        return build_allocation(given, dev_nodes(self.root), self.config.cdi)

    def _given(self, pool: Pool, resource: str, device_ids: Sequence[str]) -> list[Hca]:
        """The HCAs behind ``device_ids``; a shared slot stands for every healthy HCA of
        the pool (every HCA, if a link dropped since the kubelet checked)."""
        if pool.shared:
            hcas = discover(self.root)
            chosen = members(pool, hcas)
            for device_id in device_ids:
                if not chosen or not is_slot_id(device_id, pool):
                    raise UnknownDevice(resource, device_id)
            return healthy_members(pool, hcas) or chosen
        # Only the named HCAs need reading: allocation stays cheap on a large node.
        by_name = {hca.name: hca for hca in members(pool, discover(self.root, device_ids))}
        for device_id in device_ids:
            if device_id not in by_name:
                raise UnknownDevice(resource, device_id)
        return [by_name[device_id] for device_id in device_ids]

    @hookimpl
    def devicehost_simulate_health(self, resource: str, device_id: str, healthy: bool) -> bool:
        """Pull or plug the cable of the ports the pool uses on that HCA (for a shared
        slot: of every HCA in the pool, as only that makes a slot Unhealthy)."""
        if not self.simulated:
            return False
        pool = self.config.pool(resource)
        chosen = members(pool, discover(self.root))
        if pool.shared:
            targets = chosen if is_slot_id(device_id, pool) else []
        else:
            targets = [hca for hca in chosen if hca.name == device_id]
        for hca in targets:
            for port in used_ports(pool, hca):
                simulation.set_link(self.root, hca.name, up=healthy, port=port.number)
        return bool(targets)
