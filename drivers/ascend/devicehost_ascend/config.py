"""The driver's config section (``drivers.ascend`` in the HostConfig), parsed strictly.

Every key is declared once in ``_PARSERS``; an unknown key or a bad value raises
``ValueError`` naming the key, which the host reports as a config error at start-up.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Chip families the driver knows; each is the name part of a ``huawei.com/...`` resource.
FAMILIES = ("Ascend910", "Ascend310P", "Ascend310", "Ascend310B")

#: ``simulatedNode`` presets: the default when the host names no simulated machine.
SIMULATED_NODES = ("ascend910x8", "ascend910x8-vnpu", "ascend310px4", "mixed")

#: Fault classes an operator may put codes in (``faultCodes``), named as the reference
#: plugin names them (mind-cluster ``component/ascend-device-plugin/pkg/common/fault_code.go``).
FAULT_CLASSES = (
    "NotHandleFault",
    "SubHealthFault",
    "RestartRequest",
    "RestartBusiness",
    "FreeRestartNPU",
    "RestartNPU",
    "PreSeparateNPU",
    "SeparateNPU",
)

DEFAULT_SHARED_NODES = (
    "/dev/davinci_manager",
    "/dev/devmm_svm",
    "/dev/hisi_hdc",
    "/dev/dvpp_cmdlist",
)
# What Ascend Docker Runtime mounts (mind-cluster component/ascend-docker-runtime/build/
# scripts/base.list) plus the two files CANN reads to check the driver it runs on
# (version.info, ascend_install.info), as Huawei's CANN container instructions mount them.
DEFAULT_DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/include",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
)
#: Keys that no longer do anything, with why (accepted so old configs still start).
RETIRED_KEYS = {
    "useCdi": "the host writes CDI specs from the driver's container edits (host config cdi:)",
    "cdiDir": "the host writes CDI specs from the driver's container edits (host config cdi:)",
}


@dataclass(frozen=True, kw_only=True)
class AscendConfig:
    """The effective settings; attribute names are the snake_case of the config keys."""

    #: False: DCMI is never loaded; the chips are the /dev/davinciN nodes (fallback mode).
    use_dcmi: bool = True
    dcmi_library: str = ""
    health_poll_seconds: float = 5.0
    ignored_error_codes: frozenset[int] = frozenset()
    #: code → fault class name, the operator's additions to the shipped table.
    fault_codes: Mapping[int, str] = field(default_factory=dict)
    use_ascend_runtime: bool = True
    shared_device_nodes: tuple[str, ...] = DEFAULT_SHARED_NODES
    driver_mounts: tuple[str, ...] = DEFAULT_DRIVER_MOUNTS
    #: Chips per HCCS ring for preferred allocation; None: from the chips' names.
    hccs_group_size: int | None = None
    #: True: refuse an Allocate of 4 or fewer Ascend 910 chips that spans HCCS rings.
    hccs_strict: bool = False
    fallback_chip_type: str = ""
    #: physical chip ID → NUMA node, for the no-DCMI fallback.
    fallback_numa_nodes: Mapping[int, int] = field(default_factory=dict)
    #: cores of every fallback vNPU (an int), or per vNPU ID (a mapping); None: not served.
    fallback_vnpu_cores: int | Mapping[int, int] | None = None
    simulated_node: str = "ascend910x8"
    #: Retired keys present in the section, for a note.
    retired: tuple[str, ...] = ()


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return float(value)


def _non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _code(value: Any) -> int:
    """An error code: an integer or a string such as ``"0x80E01801"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        try:
            number = int(value, 0)
        except ValueError:
            pass
        else:
            if number >= 0:
                return number
    raise ValueError(f"expected error codes as integers or '0x...' strings, got {value!r}")


def _codes(value: Any) -> frozenset[int]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"expected a list of error codes, got {value!r}")
    return frozenset(_code(v) for v in value)


def _fault_codes(value: Any) -> dict[int, str]:
    """``{class: [codes]}`` → ``{code: class}``; a code may be listed under one class only."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"expected a mapping of fault class ({', '.join(FAULT_CLASSES)}) to codes, "
            f"got {value!r}"
        )
    result: dict[int, str] = {}
    for name, codes in value.items():
        if name not in FAULT_CLASSES:
            raise ValueError(
                f"unknown fault class {name!r}; the classes are: {', '.join(FAULT_CLASSES)}"
            )
        for code in _codes(codes):
            if code in result and result[code] != name:
                raise ValueError(f"code 0x{code:08X} is listed under {result[code]} and {name}")
            result[code] = name
    return result


def _group_size(value: Any) -> int | None:
    if value == "auto":
        return None
    return _non_negative_int(value)


def _absolute_paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of absolute paths, got {value!r}")
    for path in value:
        if not path.startswith("/") or posixpath.normpath(path) != path:
            raise ValueError(f"expected absolute, normalised paths, got {path!r}")
    return tuple(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _choice(choices: tuple[str, ...], allow_empty: bool = False) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if (value == "" and allow_empty) or value in choices:
            return str(value)
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")

    return parse


def _small_int(value: Any) -> int:
    """A non-negative int given as YAML int or digit string (YAML mapping keys)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return _non_negative_int(value)


def _id_list(value: Any) -> list[int]:
    """``"0-3"``, ``"0,2,4-5"``, ``[0, 1]`` or a single int → physical IDs."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [_non_negative_int(value)]
    if isinstance(value, list | tuple):
        return [_small_int(v) for v in value]
    if not isinstance(value, str):
        raise ValueError(f"expected IDs such as '0-3' or [0, 1], got {value!r}")
    ids: list[int] = []
    for part in (p.strip() for p in value.split(",") if p.strip()):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"expected IDs such as '0-3' or [0, 1], got {value!r}")
        ids.extend(range(int(first), int(last if dash else first) + 1))
    return ids


def _numa_nodes(value: Any) -> dict[int, int]:
    """``{numa node: physical IDs}`` → ``{physical ID: numa node}``."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping of NUMA node to physical IDs, got {value!r}")
    result: dict[int, int] = {}
    for node, ids in value.items():
        for chip in _id_list(ids):
            if chip in result:
                raise ValueError(f"physical ID {chip} is listed under two NUMA nodes")
            result[chip] = _small_int(node)
    return result


def _vnpu_cores(value: Any) -> int | dict[int, int] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        cores = {_small_int(k): _non_negative_int(v) for k, v in value.items()}
        if not all(cores.values()):
            raise ValueError(f"expected positive core counts, got {value!r}")
        return cores
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"expected a positive core count or a mapping of vNPU ID to cores, got {value!r}"
        )
    return value


_PARSERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "useDcmi": ("use_dcmi", _boolean),
    "dcmiLibrary": ("dcmi_library", _text),
    "healthPollSeconds": ("health_poll_seconds", _seconds),
    "ignoredErrorCodes": ("ignored_error_codes", _codes),
    "useAscendRuntime": ("use_ascend_runtime", _boolean),
    "sharedDeviceNodes": ("shared_device_nodes", _absolute_paths),
    "driverMounts": ("driver_mounts", _absolute_paths),
    "faultCodes": ("fault_codes", _fault_codes),
    "hccsGroupSize": ("hccs_group_size", _group_size),
    "hccsStrict": ("hccs_strict", _boolean),
    "fallbackChipType": ("fallback_chip_type", _choice(FAMILIES, allow_empty=True)),
    "fallbackNumaNodes": ("fallback_numa_nodes", _numa_nodes),
    "fallbackVnpuCores": ("fallback_vnpu_cores", _vnpu_cores),
    "simulatedNode": ("simulated_node", _choice(SIMULATED_NODES)),
}

KEYS: tuple[str, ...] = tuple(_PARSERS)


def parse_config(section: Mapping[str, Any]) -> AscendConfig:
    """Validate ``section``; raise ``ValueError("<key>: <problem>")`` on the first bad key."""
    values: dict[str, Any] = {}
    retired: list[str] = []
    for key, raw in section.items():
        if key in RETIRED_KEYS:
            retired.append(key)
            continue
        if key not in _PARSERS:
            raise ValueError(f"{key}: unknown key; the keys are: {', '.join(KEYS)}")
        attr, parse = _PARSERS[key]
        try:
            values[attr] = parse(raw)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    config = AscendConfig(**values, retired=tuple(retired))
    if not config.use_dcmi and not config.fallback_chip_type:
        raise ValueError(
            "useDcmi: false needs fallbackChipType (without DCMI the chip type is unknown, "
            "and serving chips under a guessed type could put pods on the wrong hardware)"
        )
    return config
