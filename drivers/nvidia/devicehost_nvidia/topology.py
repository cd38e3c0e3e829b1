"""How closely GPUs are joined: NVLink link counts, PCIe distance, NUMA nodes.

Read once from NVML at configure (it does not change while the node runs). NVLink comes
from each active link's remote PCI device: a GPU we know counts as a direct link; anything
else is an NVSwitch, and two GPUs on the same switches are joined through it. PCIe
distance is NVML's common-ancestor level (same switch < host bridge < NUMA node < system).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from devicehost.sysfs import normalise_pci_address
from devicehost_nvidia.discovery import Gpu
from devicehost_nvidia.nvml import (
    NVLINK_MAX_LINKS,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_SYSTEM,
    Nvml,
    NvmlError,
)


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


@dataclass
class Topology:
    """Pairwise facts keyed by GPU UUID."""

    links: dict[tuple[str, str], int] = field(default_factory=dict)
    levels: dict[tuple[str, str], int] = field(default_factory=dict)
    numa: dict[str, int | None] = field(default_factory=dict)
    #: Some GPU has an NVLink to something other than a GPU: an NVSwitch.
    switched: bool = False

    @property
    def interconnect(self) -> str:
        """How the GPUs reach each other: ``nvswitch``, ``nvlink`` (direct links only)
        or ``pcie``."""
        if self.switched:
            return "nvswitch"
        return "nvlink" if self.links else "pcie"

    def nvlinks(self, a: str, b: str) -> int:
        return self.links.get(_pair(a, b), 0)

    def level(self, a: str, b: str) -> int:
        if a == b:
            return TOPOLOGY_INTERNAL
        return self.levels.get(_pair(a, b), TOPOLOGY_SYSTEM)

    def rank(self, gpus: Iterable[str]) -> tuple[int, int, int]:
        """Sort key of a GPU set, best first: most NVLink links among them, then the
        closest PCIe paths, then the fewest NUMA nodes."""
        members = list(gpus)
        pairs = list(itertools.combinations(members, 2))
        links = sum(self.nvlinks(a, b) for a, b in pairs)
        distance = sum(self.level(a, b) for a, b in pairs)
        nodes = {self.numa.get(g) for g in members}
        return -links, distance, len(nodes)


def _remote_bus_ids(nvml: Nvml, gpu: Gpu) -> list[str]:
    """The remote PCI bus ID of each active NVLink of ``gpu``."""
    remotes: list[str] = []
    for link in range(NVLINK_MAX_LINKS):
        try:
            if nvml.device_nvlink_state(gpu.handle, link):
                remotes.append(
                    normalise_pci_address(nvml.device_nvlink_remote_pci_bus_id(gpu.handle, link))
                )
        except NvmlError as exc:
            if exc.code in (NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED):
                break  # past the GPU's last link, or no NVLink at all
            continue
    return remotes


def read_topology(nvml: Nvml, gpus: Sequence[Gpu]) -> Topology:
    """Ask NVML how ``gpus`` are joined; any query that fails counts as "far apart"."""
    topology = Topology(numa={g.uuid: g.numa_node for g in gpus})
    by_bus = {g.bus_id: g for g in gpus}
    direct: Counter[tuple[str, str]] = Counter()
    switches: dict[str, Counter[str]] = {}
    for gpu in gpus:
        switches[gpu.uuid] = Counter()
        for remote in _remote_bus_ids(nvml, gpu):
            peer = by_bus.get(remote)
            if peer is None:
                switches[gpu.uuid][remote] += 1
                topology.switched = True
            elif peer is not gpu:
                direct[(gpu.uuid, peer.uuid)] += 1
    for a, b in itertools.combinations(gpus, 2):
        key = _pair(a.uuid, b.uuid)
        through_switch = sum(
            min(count, switches[b.uuid][bus]) for bus, count in switches[a.uuid].items()
        )
        links = max(direct[(a.uuid, b.uuid)], direct[(b.uuid, a.uuid)]) + through_switch
        if links:
            topology.links[key] = links
        try:
            topology.levels[key] = nvml.device_topology_common_ancestor(a.handle, b.handle)
        except NvmlError:
            topology.levels[key] = TOPOLOGY_SYSTEM
    return topology
