"""The driver's config section (``drivers.rdma``), parsed strictly into frozen values.

Every problem raises ``ValueError`` naming the key path (``pools[1].selectors.vendors[0]:
…``) so the host can stop start-up with a message an operator can act on. Values are
normalised once here (``0x15B3`` → ``15b3``, ``ether`` → ``ethernet``) so matching code
compares plain strings.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from devicehost.model import resource_name_problem
from devicehost.sysfs import normalise_pci_address
from devicehost_rdma.discovery import hex_id

MAX_SLOTS = 1000
DEFAULT_SLOTS = 100
DEFAULT_POLL_SECONDS = 1.0
MAX_POLL_SECONDS = 60.0
#: PCI vendor ID of Mellanox (NVIDIA networking): what the default pools select.
MELLANOX_VENDOR = "15b3"

_LINK_TYPES = {
    "infiniband": "infiniband",
    "ib": "infiniband",
    "ethernet": "ethernet",
    "ether": "ethernet",
    "eth": "ethernet",
    "roce": "ethernet",
}
_FUNCTION_TYPES = ("pf", "vf")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class Mode(enum.StrEnum):
    """How a pool advertises its HCAs."""

    #: The pool's HCAs together, as ``slots`` interchangeable device IDs.
    SHARED = "shared"
    #: One device ID per HCA or SR-IOV virtual function.
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True, kw_only=True, slots=True)
class Selectors:
    """Which HCAs a pool takes: an HCA matches when every *given* selector matches (AND);
    within one selector, any listed value matches (OR). No selectors: every HCA."""

    vendors: tuple[str, ...] = ()
    device_ids: tuple[str, ...] = ()
    drivers: tuple[str, ...] = ()
    if_names: tuple[str, ...] = ()
    pf_names: tuple[str, ...] = ()
    link_types: tuple[str, ...] = ()
    pci_addresses: tuple[str, ...] = ()
    function_types: tuple[str, ...] = ()

    def given(self) -> list[tuple[str, tuple[str, ...]]]:
        """(config key, values) of every selector set, in the README's order."""
        pairs = [(key, getattr(self, attr)) for key, attr, _ in _SELECTOR_KEYS]
        return [(key, values) for key, values in pairs if values]


@dataclass(frozen=True, kw_only=True, slots=True)
class Pool:
    """One resource: a name, a mode, and the HCAs it selects."""

    resource_name: str
    mode: Mode
    slots: int = 0
    selectors: Selectors = field(default_factory=Selectors)

    @property
    def shared(self) -> bool:
        return self.mode is Mode.SHARED


#: Used when the config has no ``pools`` key: Mellanox InfiniBand HCAs (the compute
#: fabric, one per GPU) exclusive and topology-aware; Mellanox Ethernet/RoCE HCAs shared.
#: Split by link layer, so no HCA is handed out by both (only an HCA with ports of both
#: kinds could be, and a start-up note would name it). Both select vendor 15b3, as every
#: configuration published with k8s-rdma-shared-dev-plugin does
#: (deployment/k8s/base/configmap.yaml and README.md in Mellanox/k8s-rdma-shared-dev-plugin):
#: a node's other RDMA devices — an Intel E810 management NIC (irdma) on a GPU server —
#: must never be handed to workloads by default. A note names what no pool claims.
DEFAULT_POOLS: tuple[Pool, ...] = (
    Pool(
        resource_name="rdma/hca",
        mode=Mode.EXCLUSIVE,
        selectors=Selectors(vendors=(MELLANOX_VENDOR,), link_types=("infiniband",)),
    ),
    Pool(
        resource_name="rdma/hca_shared",
        mode=Mode.SHARED,
        slots=DEFAULT_SLOTS,
        selectors=Selectors(vendors=(MELLANOX_VENDOR,), link_types=("ethernet",)),
    ),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class RdmaConfig:
    """The parsed ``drivers.rdma`` section."""

    pools: tuple[Pool, ...] = DEFAULT_POOLS
    poll_interval: float = DEFAULT_POLL_SECONDS

    def pool(self, resource: str) -> Pool:
        for pool in self.pools:
            if pool.resource_name == resource:
                return pool
        raise LookupError(
            f"resource {resource!r} is not served by the rdma driver "
            f"(pools: {', '.join(p.resource_name for p in self.pools)})"
        )


# -- value parsers: each takes (key path, raw value) and raises ValueError naming the key --


def _fail(key: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"{key}: expected {expected}, got {value!r}")


def _mapping(key: str, value: Any, known: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(key, "a mapping", value)
    for name in value:
        if name not in known:
            where = f"{key}.{name}" if key else str(name)
            raise ValueError(f"{where}: unknown key; expected one of {', '.join(known)}")
    return value


def _string(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, "a non-empty string", value)
    return value.strip()


def _hex(key: str, value: Any) -> str:
    text = _string(key, value)
    parsed = hex_id(text)
    if parsed is None or len(parsed) > 4:
        raise _fail(key, "a hex ID such as 15b3 or 0x15b3", value)
    return parsed


def _link_type(key: str, value: Any) -> str:
    text = _string(key, value).lower()
    if text not in _LINK_TYPES:
        raise _fail(key, "one of InfiniBand, Ethernet (or ib, ether, eth, roce)", value)
    return _LINK_TYPES[text]


def _pci_address(key: str, value: Any) -> str:
    text = _string(key, value)
    try:
        address = normalise_pci_address(text)
    except ValueError:
        address = ""
    if not _PCI_ADDRESS.match(address):
        raise _fail(key, "a PCI address such as 0000:3b:00.0", value)
    return address


def _function_type(key: str, value: Any) -> str:
    text = _string(key, value).lower()
    if text not in _FUNCTION_TYPES:
        raise _fail(key, "one of pf, vf", value)
    return text


_SELECTOR_KEYS: tuple[tuple[str, str, Callable[[str, Any], str]], ...] = (
    ("vendors", "vendors", _hex),
    ("deviceIDs", "device_ids", _hex),
    ("drivers", "drivers", _string),
    ("ifNames", "if_names", _string),
    ("pfNames", "pf_names", _string),
    ("linkTypes", "link_types", _link_type),
    ("pciAddresses", "pci_addresses", _pci_address),
    ("functionTypes", "function_types", _function_type),
)


#: Every key the section accepts, by where it may appear (docs and tests iterate them).
TOP_KEYS = ("pools", "pollIntervalSeconds")
POOL_KEYS = ("resourceName", "mode", "slots", "selectors")
SELECTOR_KEYS = tuple(key for key, _, _ in _SELECTOR_KEYS)
#: Keys an earlier version accepted, with what replaced them: refused with that advice.
REMOVED_KEYS = {
    "cdi": "the driver no longer writes CDI specs: the host writes one per resource "
    "(the host config's `cdi:` section), under the project's own CDI vendor",
}


def _string_list(key: str, value: Any, item: Callable[[str, Any], str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise _fail(key, "a non-empty list", value)
    return tuple(dict.fromkeys(item(f"{key}[{i}]", v) for i, v in enumerate(value)))


def _selectors(key: str, value: Any) -> Selectors:
    raw = _mapping(key, value, SELECTOR_KEYS)
    values = {
        attr: _string_list(f"{key}.{name}", raw[name], item)
        for name, attr, item in _SELECTOR_KEYS
        if name in raw
    }
    return Selectors(**values)


def _pool(key: str, value: Any) -> Pool:
    raw = _mapping(key, value, POOL_KEYS)
    if "resourceName" not in raw:
        raise ValueError(f"{key}.resourceName: required (e.g. rdma/hca_shared_devices_a)")
    name = _string(f"{key}.resourceName", raw["resourceName"])
    problem = resource_name_problem(name)
    if problem:
        raise ValueError(f"{key}.resourceName: {problem}")
    mode_text = raw.get("mode")
    if mode_text not in tuple(Mode):
        raise _fail(f"{key}.mode", "one of shared, exclusive", mode_text)
    mode = Mode(mode_text)
    slots = 0
    if mode is Mode.SHARED:
        slots = raw.get("slots", DEFAULT_SLOTS)
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
            raise _fail(f"{key}.slots", f"an integer from 1 to {MAX_SLOTS}", slots)
    elif "slots" in raw:
        raise ValueError(
            f"{key}.slots: only a shared pool has slots; an exclusive pool "
            "advertises one device per HCA"
        )
    selectors = _selectors(f"{key}.selectors", raw.get("selectors", {}))
    return Pool(resource_name=name, mode=mode, slots=slots, selectors=selectors)


def _pools(value: Any) -> tuple[Pool, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise _fail("pools", "a list of pools", value)
    pools = tuple(_pool(f"pools[{i}]", v) for i, v in enumerate(value))
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        if pool.resource_name in seen:
            raise ValueError(
                f"pools[{i}].resourceName: {pool.resource_name!r} is used by "
                "an earlier pool; each pool needs its own resource name"
            )
        seen.add(pool.resource_name)
    return pools


def _poll_interval(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 < value <= MAX_POLL_SECONDS)
    ):
        raise _fail(
            "pollIntervalSeconds",
            f"a number of seconds above 0, at most {MAX_POLL_SECONDS:g}",
            value,
        )
    return float(value)


def parse_config(config: Mapping[str, Any]) -> RdmaConfig:
    """Validate ``drivers.rdma``; raise ValueError naming the first bad key."""
    if isinstance(config, Mapping):
        for key, advice in REMOVED_KEYS.items():
            if key in config:
                raise ValueError(f"{key}: removed; {advice}")
    raw = _mapping("", config, TOP_KEYS)
    return RdmaConfig(
        pools=_pools(raw["pools"]) if "pools" in raw else DEFAULT_POOLS,
        poll_interval=_poll_interval(raw.get("pollIntervalSeconds", DEFAULT_POLL_SECONDS)),
    )
