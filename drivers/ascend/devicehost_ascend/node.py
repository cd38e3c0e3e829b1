"""One configured node: its NPUs, how their health is read, and how they are handed out.

``open_node`` decides how the node is seen: through DCMI when a library is usable and
reaches a chip (real or simulated, the same code), else (or with ``useDcmi: false``)
through the ``/dev/davinciN`` nodes with the chip type from config, else not at all
(``DriverUnavailable`` with the reason). The driver's hooks are thin calls into the
``AscendNode`` it returns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from devicehost import (
    Device,
    DriverUnavailable,
    Health,
    RequestRefused,
    ResourceSpec,
    UnknownDevice,
)
from devicehost_ascend import devfs, inventory
from devicehost_ascend.allocation import JOINED_ENVS, device_edits, resource_edits
from devicehost_ascend.attributes import AttributeReader
from devicehost_ascend.config import RETIRED_KEYS, AscendConfig
from devicehost_ascend.dcmi import Dcmi, DcmiError
from devicehost_ascend.fault_codes import FaultTable
from devicehost_ascend.health import HEALTHY, ChipHealth, DcmiHealth, FaultHub
from devicehost_ascend.inventory import Inventory, NpuDevice
from devicehost_ascend.labels import node_labels
from devicehost_ascend.topology import RULE, choose, ring_size, spans_rings

log = logging.getLogger(__name__)

HCCS_FAMILY = "Ascend910"


class HccsViolation(RequestRefused):
    """An Allocate that breaks the HCCS ring rule while ``hccsStrict`` is on."""


def fault_table(config: AscendConfig) -> FaultTable:
    """The shipped table with the operator's classes; ``ignoredErrorCodes`` are
    ``NotHandleFault``."""
    overrides = dict(config.fault_codes)
    overrides.update(dict.fromkeys(config.ignored_error_codes, "NotHandleFault"))
    return FaultTable(overrides)


def hccs_ring_size(config: AscendConfig, found: Inventory) -> int:
    """Chips per HCCS ring: ``hccsGroupSize`` when set, else from DCMI's chip names (no
    names, as without DCMI: no rings, since a 910B would be refused wrongly)."""
    if config.hccs_group_size is not None:
        return config.hccs_group_size
    names = [n for n in found.chip_names.values() if inventory.chip_family(n) == HCCS_FAMILY]
    return ring_size(names)


class AscendNode:
    """The node's devices per resource, their health now, and their allocations."""

    def __init__(
        self,
        *,
        config: AscendConfig,
        root: Path,
        found: Inventory,
        notes: list[str],
        dcmi: Dcmi | None = None,
    ) -> None:
        self.config = config
        self.root = root
        self.inventory = found
        self.notes = notes
        self.dcmi = dcmi
        self.faults = FaultHub(dcmi) if dcmi is not None else None
        self.health = (
            DcmiHealth(dcmi, fault_table(config), self.faults.severities)
            if dcmi is not None and self.faults is not None
            else None
        )
        self.resources = tuple(found.devices)
        self.ring_size = hccs_ring_size(config, found)
        self.attributes = AttributeReader(root, self.ring_size)
        self._last: dict[str, ChipHealth] = {}
        self._lock = threading.Lock()

    # -- devices ---------------------------------------------------------------------------

    def _current(self) -> Inventory:
        """The devices now: fixed when DCMI found them, re-read from /dev in fallback mode."""
        if self.dcmi is not None:
            return self.inventory
        found = devfs.discover(self.root, self.config)
        self.inventory = found
        return found

    def _health_of(self, devices: Sequence[NpuDevice]) -> dict[str, ChipHealth]:
        if self.health is None:
            return {d.id: HEALTHY for d in devices}  # present under /dev: all we can know
        chips = self.health.check_all(d.chip for d in devices if d.chip is not None)
        return {d.id: chips[d.chip] if d.chip is not None else HEALTHY for d in devices}

    def enumerate(self, resource: str) -> list[Device]:
        found = self._current()
        devices = found.devices.get(resource, [])
        states = self._health_of(devices)
        self._log_changes(states)
        return [
            Device(
                id=d.id,
                health=states[d.id].health,
                numa_nodes=d.numa_nodes,
                edits=device_edits(d, self.config),
                attributes=self.attributes.of(d, found),
            )
            for d in devices
        ]

    def specs(self) -> list[ResourceSpec]:
        """Each resource with what every container of it gets (checked under root now)."""
        return [
            ResourceSpec(
                name=name,
                edits=resource_edits(
                    self.inventory.devices[name][0].family, self.config, self.root
                ),
                joined_envs=JOINED_ENVS,
            )
            for name in self.resources
        ]

    def snapshot(self, resource: str) -> dict[str, Health]:
        """What the watch compares between polls."""
        devices = self._current().devices.get(resource, [])
        return {i: s.health for i, s in self._health_of(devices).items()}

    def _log_changes(self, states: dict[str, ChipHealth]) -> None:
        with self._lock:
            for device_id, state in states.items():
                before = self._last.get(device_id)
                self._last[device_id] = state
                if before is not None and before.health != state.health:
                    level = logging.INFO if state.health == Health.HEALTHY else logging.WARNING
                    reason = f": {state.reason}" if state.reason else ""
                    log.log(level, "%s is %s%s", device_id, state.health, reason)

    def device(self, resource: str, device_id: str) -> NpuDevice:
        found = self._current().find(resource, device_id)
        if found is None:
            raise UnknownDevice(resource, device_id)
        return found

    # -- kubelet requests ---------------------------------------------------------------------

    def _ring_positions(self, resource: str, ids: Sequence[str]) -> dict[str, int] | None:
        """Physical IDs of ``ids`` when the HCCS ring rule applies to them, else None."""
        if self.ring_size == 0:
            return None
        devices = {d.id: d for d in self._current().devices.get(resource, [])}
        if not all(i in devices for i in ids):
            return None
        chips = [devices[i] for i in ids]
        if any(d.virtual or d.family != HCCS_FAMILY or d.phys_id is None for d in chips):
            return None
        return {d.id: d.phys_id for d in chips if d.phys_id is not None}

    def check_allocation(self, resource: str, device_ids: Sequence[str]) -> None:
        """With ``hccsStrict``, refuse a request of at most one ring's chips that spans
        rings (``HccsViolation``); anything else passes. Unknown IDs raise."""
        for device_id in device_ids:
            self.device(resource, device_id)
        if not self.config.hccs_strict or len(device_ids) > self.ring_size:
            return
        positions = self._ring_positions(resource, device_ids)
        if positions is None or not spans_rings(positions.values(), self.ring_size):
            return
        rings = sorted({p // self.ring_size for p in positions.values()})
        raise HccsViolation(
            f"{RULE}; {', '.join(device_ids)} lie in rings "
            f"{', '.join(str(r) for r in rings)} (hccsStrict: true refuses this)"
        )

    def preferred(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str] | None:
        """HCCS rings for whole first-generation Ascend 910 chips on an 8-chip server; None
        (the host's NUMA packing) for every other resource and server."""
        if len(set(must_include)) > size:
            return None
        positions = self._ring_positions(resource, list(available) + list(must_include))
        if positions is None:
            return None
        chosen = choose(available, must_include, size, positions, self.ring_size)
        return chosen if len(chosen) == size else None

    # -- labels ------------------------------------------------------------------------------

    def labels(self) -> dict[str, str]:
        """Node feature labels in the project's shared vocabulary (see the README)."""
        return node_labels(self.inventory, self.root, self.ring_size)

    # -- watching ------------------------------------------------------------------------------

    def watch(
        self,
        resource: str,
        notify: Callable[[], None],
        stop: threading.Event,
        enumerated: Callable[[], Sequence[Device]],
    ) -> None:
        """Notify on every pushed fault event, and whenever a poll's health differs from
        what the host was last told (``enumerated()``): compared with the previous poll
        instead, a fault an enumeration caught that cleared within one poll would stay
        Unhealthy at the kubelet until the next safety scan."""
        if self.faults is not None:
            self.faults.add(notify)
        try:
            while not stop.wait(self.config.health_poll_seconds):
                told = {d.id: d.health for d in enumerated()}
                if self.snapshot(resource) != told:
                    notify()
        finally:
            if self.faults is not None:
                self.faults.remove(notify)

    def close(self) -> None:
        if self.dcmi is not None:
            self.dcmi.close()


def _dcmi_notes(dcmi: Dcmi, found: Inventory, faults: FaultHub, poll: float) -> list[str]:
    count = len({d.phys_id for d in found.all()})
    if faults.subscribed:
        how = f"fault events pushed, health also polled every {poll:g} s"
    else:
        why = faults.problem or "not offered by this DCMI"
        how = f"no fault-event subscription ({why}); health polled every {poll:g} s"
    return [f"{count} NPU chips through {dcmi.description}; {how}", *found.notes]


def _setting_notes(config: AscendConfig, node: AscendNode) -> list[str]:
    notes = [f"{key}: ignored; {RETIRED_KEYS[key]}" for key in config.retired]
    if node.ring_size:
        strict = "refused" if config.hccs_strict else "allowed (hccsStrict: false)"
        notes.append(
            f"HCCS rings of {node.ring_size} chips: preferred allocations keep jobs of up to "
            f"{node.ring_size} chips in one ring; an Allocate spanning rings is {strict}"
        )
    return notes


def open_node(
    config: AscendConfig, root: Path, dcmi: Dcmi | None, dcmi_problem: str = ""
) -> AscendNode:
    """The node as DCMI sees it, else as /dev shows it; ``DriverUnavailable`` otherwise.

    ``dcmi`` is None when no library was loaded (``dcmi_problem`` says why) or when
    ``useDcmi`` is false. A library that loads but reaches no chip is closed, and /dev
    serves instead.
    """
    if dcmi is not None:
        try:
            found = inventory.discover(dcmi, root)
        except DcmiError as exc:  # loaded, but the NPU driver stack below it is not answering
            dcmi.close()
            return _from_dev(
                config, root, f"no usable DCMI library ({dcmi.description}: {exc})", loaded=True
            )
        if not found.devices:  # no card listed, or every chip failed its queries
            dcmi.close()
            detail = "; ".join(found.notes) or "it lists no card with a chip"
            why = f"no usable DCMI library ({dcmi.description} reaches no chip: {detail})"
            return _from_dev(config, root, why, loaded=True)
        node = AscendNode(config=config, root=root, found=found, notes=[], dcmi=dcmi)
        assert node.faults is not None
        node.faults.start()
        node.notes = _dcmi_notes(dcmi, found, node.faults, config.health_poll_seconds)
        node.notes += _setting_notes(config, node)
        return node
    if not config.use_dcmi:
        return _from_dev(config, root, "DCMI not used (useDcmi: false)", loaded=False)
    return _from_dev(config, root, f"no usable DCMI library ({dcmi_problem})", loaded=False)


def _from_dev(config: AscendConfig, root: Path, why: str, *, loaded: bool) -> AscendNode:
    """The fallback: the ``/dev/davinciN`` nodes typed ``fallbackChipType``, or
    ``DriverUnavailable``. ``why`` says why DCMI is not used; ``loaded``: a library loaded
    but reached no chip, so the reasons also name the keys that choose the fallback."""
    chips, vnpus = devfs.chip_nodes(root), devfs.vnpu_nodes(root)
    if not chips and not vnpus:
        keys = " to fall back to (fallbackChipType, useDcmi: false)" if loaded else ""
        raise DriverUnavailable(f"no Ascend NPU here: {why}, and no /dev/davinciN{keys}")
    if not config.fallback_chip_type:
        keys = (
            "; with useDcmi: false as well, DCMI is not even loaded (for a pod that cannot "
            "reach the chips through it, such as an unprivileged one)"
            if loaded
            else ""
        )
        raise DriverUnavailable(
            f"found {len(chips)} /dev/davinciN nodes but {why}; without DCMI the chip type "
            f"is unknown: set fallbackChipType (e.g. Ascend910) to serve them{keys}"
        )
    found = devfs.discover(root, config)
    numa = (
        "NUMA nodes from fallbackNumaNodes"
        if config.fallback_numa_nodes
        else "no NUMA information (set fallbackNumaNodes)"
    )
    notes = [
        f"{why}: serving /dev/davinciN as {config.fallback_chip_type} (fallbackChipType); "
        f"health is only the nodes' presence; {numa}",
        *found.notes,
    ]
    node = AscendNode(config=config, root=root, found=found, notes=notes)
    node.notes += _setting_notes(config, node)
    return node
