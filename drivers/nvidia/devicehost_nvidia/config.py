"""The driver's config section (``drivers.nvidia`` in the HostConfig), parsed strictly.

Every key is camelCase as in the HostConfig; an unknown key or a bad value raises
``ValueError`` naming the key path and what was expected, which the host reports as a
config error at start-up. The README's table lists the same keys and defaults.
"""

from __future__ import annotations

import enum
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from devicehost.model import resource_name_problem
from devicehost_nvidia.toolkit import DEFAULT_SPEC_DIRS

GPU_RESOURCE = "nvidia.com/gpu"
#: Xids an application causes (illegal address, MMU fault, …): they say nothing about the GPU.
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
DEFAULT_QUIET_PERIOD_SECONDS = 30.0
#: Under simulation (demo, ``run --simulate``) a recovery is shown in seconds, not half a minute.
SIMULATED_QUIET_PERIOD_SECONDS = 3.0
MAX_REPLICAS = 1000
MAX_SIMULATED_GPUS = 16


class MigStrategy(enum.StrEnum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class DeviceIdStrategy(enum.StrEnum):
    UUID = "uuid"
    INDEX = "index"


class DeviceListStrategy(enum.StrEnum):
    ENVVAR = "envvar"
    CDI = "cdi"
    DEVICE_NODES = "device-nodes"


class ReplicaAllocation(enum.StrEnum):
    DISTRIBUTED = "distributed"
    PACKED = "packed"


@dataclass(frozen=True, slots=True)
class SharedResource:
    """Time-slicing of one resource: ``replicas`` IDs per device, optionally renamed."""

    name: str
    replicas: int
    rename: str | None = None


@dataclass(frozen=True, kw_only=True)
class TimeSlicing:
    resources: tuple[SharedResource, ...] = ()
    rename_by_default: bool = False
    replica_allocation: ReplicaAllocation = ReplicaAllocation.DISTRIBUTED

    def sharing(self, name: str) -> SharedResource | None:
        return next((r for r in self.resources if r.name == name), None)

    def advertised_name(self, name: str) -> str:
        """The resource name a base resource is served under (renamed when shared)."""
        shared = self.sharing(name)
        if shared is None:
            return name
        if shared.rename:
            return shared.rename
        return f"{name}.shared" if self.rename_by_default else name


@dataclass(frozen=True, kw_only=True)
class Simulation:
    """The simulated node (used only under simulation)."""

    gpus: int = 8
    numa_nodes: int = 2
    mig: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class NvidiaConfig:
    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    mig_strategy: MigStrategy = MigStrategy.NONE
    device_list_strategy: tuple[DeviceListStrategy, ...] = (DeviceListStrategy.ENVVAR,)
    cdi_spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    driver_root: str = "/"
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS
    remap_pending_unhealthy: bool = False
    quiet_period_seconds: float | None = None
    time_slicing: TimeSlicing = field(default_factory=TimeSlicing)
    simulation: Simulation = field(default_factory=Simulation)

    def quiet_period(self, simulated: bool) -> float:
        if self.quiet_period_seconds is not None:
            return self.quiet_period_seconds
        return SIMULATED_QUIET_PERIOD_SECONDS if simulated else DEFAULT_QUIET_PERIOD_SECONDS

    def uses(self, strategy: DeviceListStrategy) -> bool:
        return strategy in self.device_list_strategy


# -- small strict parsers -----------------------------------------------------------------


def _choice(key: str, value: Any, kind: type[enum.StrEnum]) -> Any:
    choices = [str(c) for c in kind]
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
    return kind(value)


def _integer(key: str, value: Any, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        limit = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ValueError(f"{key}: expected an integer {limit}, got {value!r}")
    return value


def _boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return value


def _mapping(key: str, value: Any, known: tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{key}: expected a mapping, got {value!r}")
    for name in value:
        if name not in known:
            prefix = f"{key}." if key else ""
            raise ValueError(f"{prefix}{name}: unknown key; known keys: {', '.join(known)}")
    return value


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"{key}: expected a list, got {value!r}")
    return list(value)


def _resource_name(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a resource name, got {value!r}")
    problem = resource_name_problem(value)
    if problem:
        raise ValueError(f"{key}: {problem}")
    return value


# -- sections -------------------------------------------------------------------------------


def _device_list_strategy(value: Any) -> tuple[DeviceListStrategy, ...]:
    key = "deviceListStrategy"
    items = [value] if isinstance(value, str) else _list(key, value)
    if not items:
        raise ValueError(f"{key}: expected at least one of envvar, cdi, device-nodes")
    chosen = [_choice(f"{key}[{i}]", item, DeviceListStrategy) for i, item in enumerate(items)]
    return tuple(dict.fromkeys(chosen))


def _ignored_xids(value: Any) -> frozenset[int]:
    items = _list("ignoredXids", value)
    return frozenset(_integer(f"ignoredXids[{i}]", x, 0) for i, x in enumerate(items))


def _quiet_period(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"quietPeriodSeconds: expected a number of seconds >= 0, got {value!r}")
    return float(value)


def _absolute(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\x00" in value:
        raise ValueError(f"{key}: expected an absolute path, got {value!r}")
    return posixpath.normpath(value)


def _cdi_spec_dirs(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else _list("cdiSpecDirs", value)
    return tuple(_absolute(f"cdiSpecDirs[{i}]", item) for i, item in enumerate(items))


def _time_slicing(value: Any) -> TimeSlicing:
    key = "timeSlicing"
    section = _mapping(key, value, ("resources", "renameByDefault", "replicaAllocation"))
    resources: list[SharedResource] = []
    for i, item in enumerate(_list(f"{key}.resources", section.get("resources", []))):
        where = f"{key}.resources[{i}]"
        entry = _mapping(where, item, ("name", "replicas", "rename"))
        if "name" not in entry or "replicas" not in entry:
            raise ValueError(f"{where}: expected 'name' and 'replicas'")
        name = _resource_name(f"{where}.name", entry["name"])
        if not name.startswith("nvidia.com/"):
            raise ValueError(f"{where}.name: expected an nvidia.com/ resource, got {name!r}")
        if any(r.name == name for r in resources):
            raise ValueError(f"{where}.name: {name!r} is listed twice")
        replicas = _integer(f"{where}.replicas", entry["replicas"], 2, MAX_REPLICAS)
        rename = entry.get("rename")
        if rename is not None:
            rename = _resource_name(f"{where}.rename", rename)
        resources.append(SharedResource(name, replicas, rename))
    return TimeSlicing(
        resources=tuple(resources),
        rename_by_default=_boolean(f"{key}.renameByDefault", section.get("renameByDefault", False)),
        replica_allocation=_choice(
            f"{key}.replicaAllocation",
            section.get("replicaAllocation", "distributed"),
            ReplicaAllocation,
        ),
    )


def _simulation(value: Any) -> Simulation:
    key = "simulation"
    section = _mapping(key, value, ("gpus", "numaNodes", "mig"))
    gpus = _integer(f"{key}.gpus", section.get("gpus", 8), 0, MAX_SIMULATED_GPUS)
    numa = _integer(f"{key}.numaNodes", section.get("numaNodes", 2), 1, 8)
    raw_mig = section.get("mig") or {}
    if not isinstance(raw_mig, Mapping):
        raise ValueError(f"{key}.mig: expected a mapping of GPU index to MIG profiles")
    mig: dict[int, tuple[str, ...]] = {}
    for raw_index, profiles in raw_mig.items():
        where = f"{key}.mig.{raw_index}"
        try:
            index = int(raw_index)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a GPU index as the key") from None
        _integer(where, index, 0, gpus - 1)
        names = _list(where, profiles)
        if not 1 <= len(names) <= 7:
            raise ValueError(f"{where}: expected 1 to 7 MIG profiles, got {len(names)}")
        from devicehost_nvidia.simulated import sim_mig_profile  # simulation only

        for name in names:
            try:
                sim_mig_profile(str(name))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        mig[index] = tuple(str(n) for n in names)
    return Simulation(gpus=gpus, numa_nodes=numa, mig=mig)


KEYS = (
    "deviceIdStrategy",
    "migStrategy",
    "deviceListStrategy",
    "cdiSpecDirs",
    "driverRoot",
    "ignoredXids",
    "remapPendingUnhealthy",
    "quietPeriodSeconds",
    "timeSlicing",
    "simulation",
)


def parse_config(config: Mapping[str, Any]) -> NvidiaConfig:
    """Validate the ``drivers.nvidia`` mapping; raise ValueError naming the bad key."""
    if isinstance(config, Mapping) and "cdiSpecDir" in config:
        raise ValueError(
            "cdiSpecDir: this driver no longer writes a CDI spec (the host writes specs under "
            "its own vendor, and nvidia.com/gpu belongs to the NVIDIA Container Toolkit); "
            "name the directories holding the toolkit's spec with cdiSpecDirs"
        )
    section = _mapping("", config, KEYS)
    values: dict[str, Any] = {}
    if "deviceIdStrategy" in section:
        values["device_id_strategy"] = _choice(
            "deviceIdStrategy", section["deviceIdStrategy"], DeviceIdStrategy
        )
    if "migStrategy" in section:
        values["mig_strategy"] = _choice("migStrategy", section["migStrategy"], MigStrategy)
    if "deviceListStrategy" in section:
        values["device_list_strategy"] = _device_list_strategy(section["deviceListStrategy"])
    if "cdiSpecDirs" in section:
        values["cdi_spec_dirs"] = _cdi_spec_dirs(section["cdiSpecDirs"])
    if "driverRoot" in section:
        values["driver_root"] = _absolute("driverRoot", section["driverRoot"])
    if "ignoredXids" in section:
        values["ignored_xids"] = _ignored_xids(section["ignoredXids"])
    if "remapPendingUnhealthy" in section:
        values["remap_pending_unhealthy"] = _boolean(
            "remapPendingUnhealthy", section["remapPendingUnhealthy"]
        )
    if section.get("quietPeriodSeconds") is not None:
        values["quiet_period_seconds"] = _quiet_period(section["quietPeriodSeconds"])
    if "timeSlicing" in section:
        values["time_slicing"] = _time_slicing(section["timeSlicing"])
    if "simulation" in section:
        values["simulation"] = _simulation(section["simulation"])
    return NvidiaConfig(**values)
