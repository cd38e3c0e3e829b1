"""What the driver advertises: resources, device IDs, and what each ID stands for.

A *unit* is one physical thing a container can be given: a whole GPU or one MIG device.
The MIG strategy decides which units exist and under which base resource
(``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``); time-slicing then advertises each
unit ``replicas`` times as ``<unit id>::<k>``, possibly under a new name. Every ID maps
back to its unit, so allocation always reaches the physical device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devicehost_nvidia.config import (
    GPU_RESOURCE,
    DeviceIdStrategy,
    MigStrategy,
    NvidiaConfig,
    SharedResource,
)
from devicehost_nvidia.discovery import Discovery, Gpu, MigDevice

#: Between a unit's ID and its replica number: ``GPU-…::3``.
REPLICA_SEPARATOR = "::"


def safe_id(text: str) -> str:
    """A UUID usable as a device ID and CDI name: old-style MIG UUIDs contain '/'."""
    return text.replace("/", ":")


@dataclass(frozen=True, kw_only=True, eq=False)
class Unit:
    """A whole GPU or one MIG device. ``runtime_name`` is what NVIDIA_VISIBLE_DEVICES says."""

    id: str
    uuid: str
    runtime_name: str
    gpu: Gpu
    mig: MigDevice | None = None

    @property
    def cdi_name(self) -> str:
        return safe_id(self.uuid)


@dataclass(frozen=True, kw_only=True, eq=False)
class Advertised:
    """One advertised device ID: a unit, or replica ``replica`` of it."""

    id: str
    unit: Unit
    replica: int | None = None


@dataclass
class Inventory:
    resources: dict[str, list[Advertised]] = field(default_factory=dict)
    shared: dict[str, SharedResource] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _by_id: dict[str, dict[str, Advertised]] = field(default_factory=dict)

    def add(self, resource: str, devices: list[Advertised]) -> None:
        self.resources[resource] = devices
        self._by_id[resource] = {d.id: d for d in devices}

    def device(self, resource: str, device_id: str) -> Advertised | None:
        return self._by_id.get(resource, {}).get(device_id)

    def units(self, resource: str | None = None) -> list[Unit]:
        """Distinct units, in advertising order (of one resource, or of all)."""
        names = [resource] if resource else list(self.resources)
        seen: dict[int, Unit] = {}
        for name in names:
            for device in self.resources.get(name, []):
                seen.setdefault(id(device.unit), device.unit)
        return list(seen.values())

    def gpus(self, resource: str | None = None) -> list[Gpu]:
        seen: dict[int, Gpu] = {}
        for unit in self.units(resource):
            seen.setdefault(id(unit.gpu), unit.gpu)
        return list(seen.values())


def _gpu_unit(gpu: Gpu, ids: DeviceIdStrategy) -> Unit:
    name = gpu.uuid if ids is DeviceIdStrategy.UUID else str(gpu.index)
    return Unit(id=safe_id(name), uuid=gpu.uuid, runtime_name=name, gpu=gpu)


def _mig_unit(mig: MigDevice, ids: DeviceIdStrategy) -> Unit:
    name = mig.uuid if ids is DeviceIdStrategy.UUID else f"{mig.gpu.index}:{mig.index}"
    return Unit(id=safe_id(name), uuid=mig.uuid, runtime_name=name, gpu=mig.gpu, mig=mig)


def _single(found: Discovery, ids: DeviceIdStrategy, notes: list[str]) -> list[Unit]:
    """All GPUs MIG-enabled with one profile → their MIG devices; no MIG → whole GPUs."""
    enabled = [g for g in found.gpus if g.mig_enabled]
    if not enabled:
        if found.gpus:
            notes.append(
                "migStrategy single: no GPU has MIG enabled; advertising whole GPUs "
                f"as {GPU_RESOURCE}"
            )
        return [_gpu_unit(g, ids) for g in found.gpus]
    disabled = [str(g.index) for g in found.gpus if not g.mig_enabled]
    profiles = sorted({str(m.profile) for m in found.migs})
    empty = [str(g.index) for g in enabled if not found.migs_of(g)]
    problem = None
    if disabled:
        problem = f"GPUs {', '.join(disabled)} have MIG disabled"
    elif empty:
        problem = f"GPUs {', '.join(empty)} have MIG enabled but no MIG devices"
    elif len(profiles) > 1:
        problem = f"the MIG devices have several profiles ({', '.join(profiles)})"
    if problem:
        notes.append(
            f"migStrategy single needs every GPU MIG-enabled with one profile, but "
            f"{problem}: advertising nothing; use migStrategy mixed for such a node"
        )
        return []
    return [_mig_unit(m, ids) for m in found.migs]


def _base_resources(
    found: Discovery, config: NvidiaConfig, notes: list[str]
) -> dict[str, list[Unit]]:
    ids = config.device_id_strategy
    if config.mig_strategy is MigStrategy.NONE:
        return {GPU_RESOURCE: [_gpu_unit(g, ids) for g in found.gpus]}
    if config.mig_strategy is MigStrategy.SINGLE:
        return {GPU_RESOURCE: _single(found, ids, notes)}
    bases: dict[str, list[Unit]] = {
        GPU_RESOURCE: [_gpu_unit(g, ids) for g in found.gpus if not g.mig_enabled]
    }
    for gpu in found.gpus:
        if gpu.mig_enabled and not found.migs_of(gpu):
            notes.append(
                f"GPU {gpu.index} ({gpu.uuid}) has MIG enabled but no MIG devices: "
                "nothing of it is advertised"
            )
    by_profile = sorted(found.migs, key=lambda m: m.profile.sort_key())
    partial = sorted({str(m.profile) for m in by_profile if not m.profile.whole_instance})
    if partial:
        notes.append(
            f"migStrategy mixed: MIG devices of profiles {', '.join(partial)} use part of "
            "their GPU instance; like NVIDIA's device plugin, none of them is advertised"
        )
    for mig in by_profile:
        if mig.profile.whole_instance:
            bases.setdefault(mig.profile.resource, []).append(_mig_unit(mig, ids))
    return bases


def build_inventory(
    found: Discovery, config: NvidiaConfig, fixed: frozenset[str] | None = None
) -> Inventory:
    """Resources and device IDs for the discovered hardware under ``config``. ``fixed``:
    the resources already registered (after start-up only those are served; a MIG profile
    that appears later is named in a note)."""
    inventory = Inventory()
    bases = _base_resources(found, config, inventory.notes)
    slicing = config.time_slicing
    for entry in slicing.resources:
        if not bases.get(entry.name):
            inventory.notes.append(
                f"timeSlicing: resource {entry.name!r} matches nothing on this node"
            )
    for base, units in bases.items():
        if not units and fixed is None:
            continue
        name = slicing.advertised_name(base)
        if fixed is not None and name not in fixed:
            inventory.notes.append(
                f"{name}: a MIG profile created after start-up; devicehost advertises it "
                "after a restart"
            )
            continue
        if name in inventory.resources:
            inventory.notes.append(
                f"timeSlicing: {base!r} would be advertised as {name!r}, "
                "which is already taken; not advertised"
            )
            continue
        shared = slicing.sharing(base)
        if shared is None:
            inventory.add(name, [Advertised(id=u.id, unit=u) for u in units])
            continue
        inventory.shared[name] = shared
        inventory.add(
            name,
            [
                Advertised(id=f"{u.id}{REPLICA_SEPARATOR}{k}", unit=u, replica=k)
                for u in units
                for k in range(shared.replicas)
            ],
        )
    return inventory
