"""The values drivers hand to the host. Drivers never import protobuf.

Every class is a frozen, keyword-only dataclass, so a driver's answer cannot change after
the host has checked it. Construction validates what can be checked locally (ID length,
absolute and normalised paths, permissions); the host checks the rest (uniqueness, known
IDs) when it receives the value.
"""

from __future__ import annotations

import enum
import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_DEVICE_ID_LENGTH = 63
_RESOURCE_NAME_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_CDI_NAME_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*=[A-Za-z0-9_.:\-]+$"
)


class Health(enum.StrEnum):
    """Device health as the kubelet spells it. A snapshot: it may go either way."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


def device_id_problem(device_id: object) -> str | None:
    """Why ``device_id`` cannot be sent to the kubelet, or None when it can."""
    if not isinstance(device_id, str) or not device_id:
        return f"device ID {device_id!r} is not a non-empty string"
    if len(device_id) > MAX_DEVICE_ID_LENGTH:
        return f"device ID {device_id!r} is longer than {MAX_DEVICE_ID_LENGTH} characters"
    if "/" in device_id or "\x00" in device_id or not device_id.isprintable():
        return f"device ID {device_id!r} contains '/', NUL or a non-printable character"
    return None


def resource_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid extended resource name, or None when it is."""
    if not _RESOURCE_NAME_RE.match(name) or len(name) > 253:
        return f"resource name {name!r} is not of the form 'domain/name'"
    domain = name.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return f"resource name {name!r} is in the reserved kubernetes.io domain"
    return None


def _check_host_path(kind: str, path: str) -> None:
    """Refuse paths that could point outside what the driver meant to declare."""
    if not isinstance(path, str) or "\x00" in path:
        raise ValueError(f"{kind} {path!r} is not a string without NUL bytes")
    if not path.startswith("/"):
        raise ValueError(f"{kind} {path!r} is not an absolute path")
    if ".." in path.split("/") or posixpath.normpath(path) != path.rstrip("/") or "//" in path:
        raise ValueError(f"{kind} {path!r} is not a normalised path (no '..', '//' or '.')")


@dataclass(frozen=True, kw_only=True, slots=True)
class Mount:
    """A host path bind-mounted into the container."""

    container_path: str
    host_path: str
    read_only: bool = True

    def __post_init__(self) -> None:
        _check_host_path("mount host path", self.host_path)
        _check_host_path("mount container path", self.container_path)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceNode:
    """A host device node made available in the container.

    ``permissions`` is the cgroup access, a subset of ``rwm``; the default ``rw`` lets the
    container read and write the node but not create device nodes (``m``)."""

    host_path: str
    container_path: str = ""
    permissions: str = "rw"

    def __post_init__(self) -> None:
        if not self.container_path:
            object.__setattr__(self, "container_path", self.host_path)
        _check_host_path("device node host path", self.host_path)
        _check_host_path("device node container path", self.container_path)
        if not self.permissions or set(self.permissions) - set("rwm"):
            raise ValueError(f"device permissions {self.permissions!r} are not a subset of 'rwm'")


@dataclass(frozen=True, kw_only=True, slots=True)
class ContainerEdits:
    """What a container needs: envs, mounts, device nodes, annotations, CDI device names.

    Shaped like CDI's ``containerEdits``. A driver declares them per device
    (``Device.edits``) and per resource (``ResourceSpec.edits``, given to every container
    of the resource); the host composes each container's answer from them, without calling
    the driver. ``Allocation`` is the same type under the name the ``allocate`` hook uses.
    """

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for kind, mapping in (("env", self.envs), ("annotation", self.annotations)):
            for key, value in mapping.items():
                if not isinstance(key, str) or not isinstance(value, str) or "\x00" in key + value:
                    raise ValueError(f"{kind} {key!r}={value!r} is not a string pair without NUL")
        object.__setattr__(self, "envs", dict(self.envs))
        object.__setattr__(self, "annotations", dict(self.annotations))
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "devices", tuple(self.devices))
        # Only our own types carry checked paths: a look-alike would skip the path rules.
        for kind, items, cls in (
            ("mount", self.mounts, Mount),
            ("device", self.devices, DeviceNode),
        ):
            for item in items:
                if type(item) is not cls:
                    raise ValueError(
                        f"{kind} {item!r} is a {type(item).__name__}, expected "
                        f"devicehost.{cls.__name__}"
                    )
        object.__setattr__(self, "cdi_devices", tuple(self.cdi_devices))
        for name in self.cdi_devices:
            if not _CDI_NAME_RE.match(name):
                raise ValueError(f"CDI device name {name!r} is not 'vendor.com/class=name'")

    def __hash__(self) -> int:
        return hash(
            (
                tuple(self.envs.items()),
                self.mounts,
                self.devices,
                tuple(self.annotations.items()),
                self.cdi_devices,
            )
        )

    def __bool__(self) -> bool:
        return bool(
            self.envs or self.mounts or self.devices or self.annotations or self.cdi_devices
        )

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """These edits plus ``other``'s items, ``other`` winning on a shared key (no checks;
        the host's composition checks clashes)."""
        return ContainerEdits(
            envs={**self.envs, **other.envs},
            mounts=self.mounts + other.mounts,
            devices=self.devices + other.devices,
            annotations={**self.annotations, **other.annotations},
            cdi_devices=self.cdi_devices + other.cdi_devices,
        )


#: The ``allocate`` hook's answer: the same type as ``ContainerEdits``.
Allocation = ContainerEdits
NO_EDITS = ContainerEdits()


@dataclass(frozen=True, kw_only=True, slots=True)
class ResourceSpec:
    """One extended resource a driver serves: one socket, one registration.

    ``edits`` go to every container that gets any device of the resource (shared device
    nodes such as ``/dev/nvidiactl``). ``joined_envs`` names the env variables that
    several devices contribute to: their values are joined with commas, de-duplicated, in
    request order (``NVIDIA_VISIBLE_DEVICES``). ``indexed_envs`` names the variables each
    device sets once for a numbered copy: a container gets ``NAME0``, ``NAME1``, … in the
    order it asked for its devices (Intel QAT's ``QAT0``…), and never ``NAME`` itself. Any
    other variable set by two devices must agree, or the Allocate is refused as a clash.
    """

    name: str
    edits: ContainerEdits = NO_EDITS
    joined_envs: tuple[str, ...] = ()
    indexed_envs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problem = resource_name_problem(self.name)
        if problem:
            raise ValueError(problem)
        if type(self.joined_envs) is not tuple:
            object.__setattr__(self, "joined_envs", tuple(self.joined_envs))
        if type(self.indexed_envs) is not tuple:
            object.__setattr__(self, "indexed_envs", tuple(self.indexed_envs))
        problem = _indexed_problem(self)
        if problem:
            raise ValueError(f"resource {self.name!r}: {problem}")

    @property
    def socket_name(self) -> str:
        """The socket's file name in the device-plugin directory: unique per resource."""
        return "devicehost-" + re.sub(r"[^A-Za-z0-9_.-]", "_", self.name) + ".sock"


def _indexed_problem(spec: ResourceSpec) -> str | None:
    """Why ``spec``'s indexed env cannot be composed, or None: each name is a variable only
    devices set, and neither joined nor set by the resource for every container."""
    for name in spec.indexed_envs:
        if not isinstance(name, str) or not name:
            return f"indexed_envs must be env variable names, got {name!r}"
        if name in spec.joined_envs:
            return f"env {name!r} is both joined and indexed"
        if name in spec.edits.envs:
            return f"its own edits set the indexed env {name!r}, which only devices may set"
    return None


#: The longest attribute string: DRA's limit for a string or version attribute.
MAX_ATTRIBUTE_LENGTH = 64
_PCI_ADDRESS_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_ATTRIBUTE_STRINGS = (
    "product",
    "model",
    "chip_type",
    "mig_profile",
    "interconnect_group",
    "driver_version",
    "pci_address",
    "pcie_root",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceAttributes:
    """What a driver knows of one device beyond its ID, health and NUMA nodes, as plain
    facts in no API's vocabulary; an empty string or None means not known.

    The device-plugin face ignores them (the kubelet has nowhere to put them); the DRA face
    publishes them in ResourceSlices, where claims select devices by them (docs/dra.md has
    the names each becomes). Strings are at most 64 printable characters.
    """

    #: the product's name as its vendor reports it (``NVIDIA H100 80GB HBM3``)
    product: str = ""
    #: a finer model name, where the product name does not say it
    model: str = ""
    #: the chip's type (``910B3``)
    chip_type: str = ""
    #: a partition's profile (``1g.10gb``)
    mig_profile: str = ""
    #: the group of devices joined by a fast interconnect (an NVLink domain, an HCCS ring)
    interconnect_group: str = ""
    #: the vendor driver's version as it reports it (published only where it is SemVer)
    driver_version: str = ""
    #: the PCI function's address, ``dddd:bb:dd.f`` in lower case
    pci_address: str = ""
    #: the PCIe root the function sits under (``pci0000:15``)
    pcie_root: str = ""
    #: the device's own memory, in bytes
    memory_bytes: int | None = None

    def problem(self) -> str | None:
        """Why these attributes cannot be published, or None when they can."""
        for name in _ATTRIBUTE_STRINGS:
            value = getattr(self, name)
            if type(value) is not str:
                return f"attribute {name} is {type(value).__name__}, expected a string"
            if len(value) > MAX_ATTRIBUTE_LENGTH or not value.isprintable():
                return (
                    f"attribute {name} {value[:80]!r} is not a string of at most "
                    f"{MAX_ATTRIBUTE_LENGTH} printable characters"
                )
        if self.pci_address and not _PCI_ADDRESS_RE.match(self.pci_address):
            return f"attribute pci_address {self.pci_address!r} is not dddd:bb:dd.f in lower case"
        memory = self.memory_bytes
        if memory is not None and (type(memory) is not int or not 0 <= memory < 1 << 63):
            return f"attribute memory_bytes {memory!r:.40} is not a whole number of bytes >= 0"
        return None


NO_ATTRIBUTES = DeviceAttributes()


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """One schedulable unit: an ID (at most 63 characters), its health, its NUMA nodes, the
    container edits it needs (its device nodes, its share of an env variable, …), and what
    else the driver knows of it (``attributes``, optional)."""

    id: str
    health: Health = Health.HEALTHY
    numa_nodes: tuple[int, ...] = ()
    edits: ContainerEdits = NO_EDITS
    attributes: DeviceAttributes = NO_ATTRIBUTES

    def __post_init__(self) -> None:
        # Not validated here: the host checks each device at enumeration and drops only the
        # bad one (with a log line naming the driver), instead of failing the whole list.
        if type(self.numa_nodes) is not tuple:
            object.__setattr__(self, "numa_nodes", tuple(self.numa_nodes))

    @property
    def healthy(self) -> bool:
        return self.health == Health.HEALTHY

    def problem(self) -> str | None:
        """Why the kubelet cannot be sent this device, or None when it can."""
        id_problem = device_id_problem(self.id)
        if id_problem:
            return id_problem
        if self.health not in _LEGAL_HEALTH:
            return f"device {self.id!r} has health {self.health!r}; expected Healthy or Unhealthy"
        for node in self.numa_nodes:
            if type(node) is not int or node < 0:
                return (
                    f"device {self.id!r} has NUMA nodes {self.numa_nodes!r}; expected integers >= 0"
                )
        return None


_LEGAL_HEALTH = frozenset(Health)


@dataclass(frozen=True, kw_only=True, slots=True)
class HostPath:
    """A host path a driver reads, so the deployment can mount exactly that and no more.

    ``path`` is the path on the host (``/sys/class/infiniband``, ``/dev/davinci0`` style
    paths may be given as their directory). ``at_real_path`` asks for the path to be
    mounted at the same path inside the pod, for vendor libraries that expect it
    (``/usr/local/Ascend/driver``); otherwise it is read under the host root (``/host``).
    ``purpose`` says why, for ``devicehost mounts`` and the docs.
    """

    path: str
    purpose: str = ""
    at_real_path: bool = False

    def __post_init__(self) -> None:
        _check_host_path("host path", self.path)


#: A PCI address (``0000:3b:00.0``, NVML's ``00000000:3B:00.0``, or with ``-`` for ``:`` as
#: in a device ID), whose parts are hex; otherwise a run of decimal digits.
_NUMBERS = re.compile(
    r"(?<![0-9A-Za-z])(?:(?P<domain>[0-9a-fA-F]{4,8})[:-])?(?P<bus>[0-9a-fA-F]{2})[:-]"
    r"(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])(?![0-9A-Za-z])|(?P<digits>\d+)"
)


@functools.lru_cache(maxsize=1 << 16)  # device IDs are few and stable; keys are reused
def natural_key(device_id: str) -> tuple[object, ...]:
    """Sort key that puts ``gpu-2`` before ``gpu-10``, and PCI addresses in bus order
    (``0000:33:00.0`` before ``0000:4d:00.0``: their parts are hex, not decimal).

    The key alternates text and a tuple of numbers, so any two keys compare."""
    key: list[object] = []
    end = 0
    for match in _NUMBERS.finditer(device_id):
        key.append(device_id[end : match.start()])
        digits = match["digits"]
        if digits is not None:
            key.append((int(digits),))
        else:
            parts = (match["domain"] or "0", match["bus"], match["slot"], match["function"])
            key.append(tuple(int(part, 16) for part in parts))
        end = match.end()
    key.append(device_id[end:])
    return tuple(key)
