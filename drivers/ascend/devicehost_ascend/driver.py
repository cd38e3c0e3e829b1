"""The devicehost hooks of the Ascend driver: thin calls into the configured ``AscendNode``.

Real hardware is reached through ``libdcmi.so`` (``dcmi_ctypes``); under ``devicehost demo``
and ``run --simulate`` the simulated DCMI (``dcmi_sim``) takes its place, with a fake
``/dev`` and sysfs tree built under root, and everything above the DCMI interface runs the
same code. With ``useDcmi: false`` no DCMI is used, real or simulated: the chips are the
``/dev/davinciN`` nodes under root.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devicehost import Allocation, Device, DriverUnavailable, HostPath, ResourceSpec, hookimpl
from devicehost_ascend.config import SIMULATED_NODES, parse_config
from devicehost_ascend.dcmi import Dcmi
from devicehost_ascend.dcmi_ctypes import load_dcmi
from devicehost_ascend.dcmi_sim import PUBLISHED_NODES, SimulatedDcmi
from devicehost_ascend.node import AscendNode, open_node

#: Every host path the driver may read or hand to a container, on any node.
HOST_PATHS = (
    HostPath(path="/dev", purpose="/dev/davinciN, /dev/vdavinciN and the shared NPU nodes"),
    HostPath(path="/sys/bus/pci/devices", purpose="each chip's PCI device, for its NUMA node"),
    HostPath(path="/sys/devices", purpose="where the PCI device links point (numa_node)"),
    HostPath(
        path="/usr/local/dcmi",
        purpose="libdcmi.so, loaded from its install directory",
        at_real_path=True,
    ),
    HostPath(
        path="/usr/local/Ascend/driver",
        purpose="DCMI's dependencies and version.info; mounted into containers without "
        "Ascend Docker Runtime",
        at_real_path=True,
    ),
    HostPath(path="/usr/local/Ascend/firmware/version.info", purpose="firmware version label"),
    HostPath(path="/usr/local/bin/npu-smi", purpose="mounted into containers (plain runtime)"),
    HostPath(path="/etc/ascend_install.info", purpose="mounted into containers (plain runtime)"),
)


_PRESETS = frozenset(SIMULATED_NODES)


class AscendDriver:
    """Huawei Ascend NPUs: whole chips and pre-created vNPUs, one resource per kind."""

    def __init__(self) -> None:
        self._node: AscendNode | None = None
        self.simulation: SimulatedDcmi | None = None
        self._simulation_root: Path | None = None
        #: The published machine simulated, when it has no Ascend NPU (e.g. dgx-h100).
        self._simulated_without_npus = ""

    @property
    def node(self) -> AscendNode:
        if self._node is None:
            raise RuntimeError("the ascend driver is not configured yet")
        return self._node

    # -- start-up ----------------------------------------------------------------------------

    def _simulate(self, root: Path, name: str) -> SimulatedDcmi | None:
        """The simulated DCMI of the machine or preset ``name``, its tree under ``root``
        (rebuilt on change); None for a published machine without Ascend NPUs."""
        current = self.simulation
        if current is not None and current.label == name and self._simulation_root == root:
            return current
        if current is not None and self._simulation_root == root:
            current.remove_tree(root)
        built = SimulatedDcmi.published(name) if name not in _PRESETS else None
        if built is None and name in _PRESETS:
            built = SimulatedDcmi.preset(name)
        self.simulation, self._simulation_root = built, root
        self._simulated_without_npus = "" if built is not None else name
        if built is not None:
            built.build_tree(root)
        return built

    @hookimpl
    def devicehost_simulate(self, root: Path, config: Mapping[str, Any], node: str) -> None:
        """Build the machine ``node`` (``atlas-800-9000``, ``atlas-800t-a2``,
        ``atlas-800-3000``), or with ``node=""`` the ``simulatedNode`` preset, under root.
        Any other machine has no Ascend NPU: nothing is built."""
        self._simulate(root, node or parse_config(config).simulated_node)

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        settings = parse_config(config)
        if self._node is not None:
            self._node.close()
            self._node = None
        dcmi: Dcmi | None
        if simulated:
            if self._simulated_without_npus and self._simulation_root == root:
                raise DriverUnavailable(
                    f"no Ascend NPU here: the simulated machine "
                    f"{self._simulated_without_npus!r} has none"
                )
            # A published machine built by simulate stays; otherwise the preset in config.
            chosen = self.simulation.label if self.simulation is not None else ""
            name = chosen if chosen in PUBLISHED_NODES else settings.simulated_node
            simulation = self._simulate(root, name)
            dcmi, problem = (simulation if settings.use_dcmi else None), ""
        elif settings.use_dcmi:
            dcmi, problem = load_dcmi(root, settings.dcmi_library)
        else:  # never loaded: the /dev fallback, typed by fallbackChipType
            dcmi, problem = None, ""
        self._node = open_node(settings, root, dcmi, problem)

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return self.node.specs()

    @hookimpl
    def devicehost_labels(self) -> Mapping[str, str]:
        return self.node.labels()

    @hookimpl
    def devicehost_host_paths(self) -> Sequence[HostPath]:
        return HOST_PATHS

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return list(self.node.notes)

    # -- devices -----------------------------------------------------------------------------

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return self.node.enumerate(resource)

    @hookimpl
    def devicehost_watch(
        self,
        resource: str,
        notify: Callable[[], None],
        stop: threading.Event,
        enumerated: Callable[[], Sequence[Device]],
    ) -> None:
        self.node.watch(resource, notify, stop, enumerated)

    # -- kubelet requests ----------------------------------------------------------------------

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str] | None:
        return self.node.preferred(resource, available, must_include, size)

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        """Nothing to add (the host composes the answer from the devices' edits): only the
        ``hccsStrict`` check runs here, refusing a request that spans HCCS rings."""
        self.node.check_allocation(resource, device_ids)
        return Allocation()

    @hookimpl
    def devicehost_simulate_health(
        self, resource: str, device_id: str, healthy: bool
    ) -> bool | None:
        """Fault or repair the simulated chip behind ``device_id`` (a vNPU's parent chip)."""
        node = self._node
        if node is None or self.simulation is None or node.dcmi is not self.simulation:
            return None
        device = node.inventory.find(resource, device_id)
        if device is None or device.phys_id is None:
            return False
        if healthy:
            self.simulation.recover(device.phys_id)
        else:
            self.simulation.inject_fault(device.phys_id)
        return True

    @hookimpl
    def devicehost_shutdown(self) -> None:
        if self._node is not None:
            self._node.close()
