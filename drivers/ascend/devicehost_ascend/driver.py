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

from devicehost import Allocation, Device, ResourceSpec, hookimpl
from devicehost_ascend.config import AscendConfig, parse_config
from devicehost_ascend.dcmi import Dcmi
from devicehost_ascend.dcmi_ctypes import load_dcmi
from devicehost_ascend.dcmi_sim import SimulatedDcmi
from devicehost_ascend.node import AscendNode, open_node


class AscendDriver:
    """Huawei Ascend NPUs: whole chips and pre-created vNPUs, one resource per kind."""

    def __init__(self) -> None:
        self._node: AscendNode | None = None
        self.simulation: SimulatedDcmi | None = None
        self._simulation_root: Path | None = None

    @property
    def node(self) -> AscendNode:
        if self._node is None:
            raise RuntimeError("the ascend driver is not configured yet")
        return self._node

    # -- start-up ----------------------------------------------------------------------------

    def _simulate(self, root: Path, preset: str) -> SimulatedDcmi:
        """The simulated DCMI for ``preset``, its tree under ``root`` (rebuilt on change)."""
        current = self.simulation
        if current is None or current.label != preset or self._simulation_root != root:
            if current is not None and self._simulation_root == root:
                current.remove_tree(root)
            current = SimulatedDcmi.preset(preset)
            current.build_tree(root)
            self.simulation, self._simulation_root = current, root
        return current

    @hookimpl
    def devicehost_simulate(self, root: Path) -> None:
        """Build the default simulated node (an 8-chip Ascend 910 server) under root."""
        self._simulate(root, AscendConfig().simulated_node)

    @hookimpl
    def devicehost_configure(self, config: Mapping[str, Any], root: Path, simulated: bool) -> None:
        settings = parse_config(config)
        if self._node is not None:
            self._node.close()
            self._node = None
        dcmi: Dcmi | None
        if simulated:
            simulation = self._simulate(root, settings.simulated_node)
            dcmi, problem = (simulation if settings.use_dcmi else None), ""
        elif settings.use_dcmi:
            dcmi, problem = load_dcmi(root, settings.dcmi_library)
        else:  # never loaded: the /dev fallback, typed by fallbackChipType
            dcmi, problem = None, ""
        self._node = open_node(settings, root, dcmi, problem)

    @hookimpl
    def devicehost_resources(self) -> Sequence[ResourceSpec]:
        return [ResourceSpec(name=name) for name in self.node.resources]

    @hookimpl
    def devicehost_notes(self) -> Sequence[str]:
        return list(self.node.notes)

    # -- devices -----------------------------------------------------------------------------

    @hookimpl
    def devicehost_enumerate(self, resource: str) -> Sequence[Device]:
        return self.node.enumerate(resource)

    @hookimpl
    def devicehost_watch(
        self, resource: str, notify: Callable[[], None], stop: threading.Event
    ) -> None:
        self.node.watch(resource, notify, stop)

    # -- kubelet requests ----------------------------------------------------------------------

    @hookimpl
    def devicehost_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> Sequence[str] | None:
        return self.node.preferred(resource, available, must_include, size)

    @hookimpl
    def devicehost_allocate(self, resource: str, device_ids: Sequence[str]) -> Allocation:
        return self.node.allocate(resource, device_ids)

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
