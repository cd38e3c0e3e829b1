"""The ``Dcmi`` interface over Huawei's ``libdcmi.so``, bound with ctypes.

Declarations follow ``dcmi_interface_api.h`` (DCMI API reference). Only the calls and
structures the driver needs are declared; each structure keeps the header's full layout so
DCMI never writes past what we allocate. Every call holds one lock: DCMI documents some
interfaces as not thread-safe, and the driver calls from several threads.

The library lives on the host; ``load_dcmi`` looks for it under ``root`` (``/host`` in the
DaemonSet). Its own dependencies (``libdrvdsmi_host.so`` and friends) must be on the
loader's path, e.g. ``LD_LIBRARY_PATH=/host/usr/local/Ascend/driver/lib64/driver``.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from ctypes import (
    POINTER,
    c_char,
    c_float,
    c_int,
    c_ubyte,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
)
from pathlib import Path
from typing import Any

from devicehost_ascend.dcmi import DcmiError, FaultCallback, FaultEvent, VirtualDevice

log = logging.getLogger(__name__)

#: Where DCMI is installed, most common first (relative to the host's ``/``).
LIBRARY_PATHS = (
    "/usr/local/dcmi/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/common/libdcmi.so",
)

MAX_CARD_NUM = 64
MAX_CHIP_NAME_LEN = 32
MAX_ERROR_CODES = 128
VDEV_RES_NAME_LEN = 16
VDEV_FOR_RESERVE = 32
SOC_SPLIT_MAX = 32
MAIN_CMD_VDEV_MNG = 52  # enum dcmi_main_cmd
VMNG_SUB_CMD_GET_VDEV_RESOURCE = 0  # DCMI_VDEV_MNG_SUB_CMD
VMNG_SUB_CMD_GET_TOTAL_RESOURCE = 1
DMS_FAULT_EVENT = 0  # enum dcmi_event_type
ALL_DEVICES = -1  # card_id and device_id of a subscription to every chip


# -- structures (field order and types as in dcmi_interface_api.h) -------------------------


class ChipInfo(ctypes.Structure):
    """``struct dcmi_chip_info``."""

    _fields_ = [
        ("chip_type", c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_name", c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_ver", c_ubyte * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", c_uint),
    ]


class PcieInfoAll(ctypes.Structure):
    """``struct dcmi_pcie_info_all`` (64 bytes)."""

    _fields_ = [
        ("venderid", c_uint),
        ("subvenderid", c_uint),
        ("deviceid", c_uint),
        ("subdeviceid", c_uint),
        ("domain", c_int),
        ("bdf_busid", c_uint),
        ("bdf_deviceid", c_uint),
        ("bdf_funcid", c_uint),
        ("reserve", c_ubyte * 32),
    ]


class PcieInfo(ctypes.Structure):
    """``struct dcmi_pcie_info`` (older libraries; no PCI domain, so domain 0)."""

    _fields_ = [
        ("deviceid", c_uint),
        ("venderid", c_uint),
        ("subvenderid", c_uint),
        ("subdeviceid", c_uint),
        ("bdf_deviceid", c_uint),
        ("bdf_busid", c_uint),
        ("bdf_funcid", c_uint),
    ]


class BaseResource(ctypes.Structure):
    """``struct dcmi_base_resource``."""

    _fields_ = [
        ("token", c_ulonglong),
        ("token_max", c_ulonglong),
        ("task_timeout", c_ulonglong),
        ("vfg_id", c_uint),
        ("vip_mode", c_ubyte),
        ("reserved", c_ubyte * (VDEV_FOR_RESERVE - 1)),
    ]


class ComputingResource(ctypes.Structure):
    """``struct dcmi_computing_resource`` (96 bytes in every header version)."""

    _fields_ = [
        ("aic", c_float),
        ("aiv", c_float),
        ("dsa", c_ushort),
        ("rtsq", c_ushort),
        ("acsq", c_ushort),
        ("cdqm", c_ushort),
        ("c_core", c_ushort),
        ("ffts", c_ushort),
        ("sdma", c_ushort),
        ("pcie_dma", c_ushort),
        ("memory_size", c_ulonglong),
        ("event_id", c_uint),
        ("notify_id", c_uint),
        ("stream_id", c_uint),
        ("model_id", c_uint),
        ("topic_schedule_aicpu", c_ushort),
        ("host_ctrl_cpu", c_ushort),
        ("host_aicpu", c_ushort),
        ("device_aicpu", c_ushort),
        ("topic_ctrl_cpu_slot", c_ushort),
        ("vdev_aicore_utilization", c_uint),
        ("vdev_memory_total", c_ulonglong),
        ("vdev_memory_free", c_ulonglong),
        ("reserved", c_ubyte * (VDEV_FOR_RESERVE - 20)),
    ]


class MediaResource(ctypes.Structure):
    """``struct dcmi_media_resource``."""

    _fields_ = [
        ("jpegd", c_float),
        ("jpege", c_float),
        ("vpc", c_float),
        ("vdec", c_float),
        ("pngd", c_float),
        ("venc", c_float),
        ("reserved", c_ubyte * VDEV_FOR_RESERVE),
    ]


class SocTotalResource(ctypes.Structure):
    """``struct dcmi_soc_total_resource``: which vNPUs a chip has."""

    _fields_ = [
        ("vdev_num", c_uint),
        ("vdev_id", c_uint * SOC_SPLIT_MAX),
        ("vfg_num", c_uint),
        ("vfg_bitmap", c_uint),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    ]


class VdevQueryInfo(ctypes.Structure):
    """``struct dcmi_vdev_query_info``."""

    _fields_ = [
        ("name", c_char * VDEV_RES_NAME_LEN),
        ("status", c_uint),
        ("is_container_used", c_uint),
        ("vfid", c_uint),
        ("vfg_id", c_uint),
        ("container_id", c_ulonglong),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    ]


class VdevQuery(ctypes.Structure):
    """``struct dcmi_vdev_query_stru``: ``vdev_id`` in, ``query_info`` out."""

    _fields_ = [("vdev_id", c_uint), ("query_info", VdevQueryInfo)]


class HbmInfo(ctypes.Structure):
    """``struct dcmi_hbm_info``; ``memory_size`` in MB."""

    _fields_ = [
        ("memory_size", c_ulonglong),
        ("freq", c_uint),
        ("memory_usage", c_ulonglong),
        ("temp", c_int),
        ("bandwith_util_rate", c_uint),
    ]


class MemoryInfo(ctypes.Structure):
    """``struct dcmi_get_memory_info_stru`` (96 bytes); ``memory_size`` in MB."""

    _fields_ = [
        ("memory_size", c_ulonglong),
        ("memory_available", c_ulonglong),
        ("freq", c_uint),
        ("hugepagesize", c_ulong),
        ("hugepages_total", c_ulong),
        ("hugepages_free", c_ulong),
        ("utiliza", c_uint),
        ("reserve", c_ubyte * 60),
    ]


class EventFilter(ctypes.Structure):
    """``struct dcmi_event_filter``; all zero means every event."""

    _fields_ = [
        ("filter_flag", c_ulonglong),
        ("event_id", c_uint),
        ("severity", c_ubyte),
        ("node_type", c_ubyte),
        ("resv", c_ubyte * 32),
    ]


class DmsFaultEvent(ctypes.Structure):
    """``struct dcmi_dms_fault_event``."""

    _fields_ = [
        ("event_id", c_uint),
        ("deviceid", c_ushort),
        ("node_type", c_ubyte),
        ("node_id", c_ubyte),
        ("sub_node_type", c_ubyte),
        ("sub_node_id", c_ubyte),
        ("severity", c_ubyte),
        ("assertion", c_ubyte),
        ("event_serial_num", c_int),
        ("notify_serial_num", c_int),
        ("alarm_raised_time", c_ulonglong),
        ("event_name", c_char * 256),
        ("additional_info", c_char * 32),
        ("os_id", c_ubyte),
        ("resv_1", c_ubyte * 1),
        ("node_type_ex", c_ushort),
        ("sub_node_type_ex", c_ushort),
        ("resv_2", c_ubyte * 2),
        ("resv", c_ubyte * 24),
    ]


class EventBody(ctypes.Union):
    _fields_ = [("dms_event", DmsFaultEvent)]


class Event(ctypes.Structure):
    """``struct dcmi_event``."""

    _fields_ = [("type", c_int), ("event_t", EventBody)]


EVENT_CALLBACK = ctypes.CFUNCTYPE(None, POINTER(Event))

#: Callbacks handed to DCMI must outlive every call DCMI may make: never collected.
_KEPT_CALLBACKS: list[Any] = []

# name → argtypes; every call returns an int, DCMI's return code (0 is success).
_SIGNATURES: dict[str, list[Any]] = {
    "dcmi_init": [],
    "dcmi_get_card_list": [POINTER(c_int), POINTER(c_int), c_int],
    "dcmi_get_card_num_list": [POINTER(c_int), POINTER(c_int), c_int],
    "dcmi_get_device_num_in_card": [c_int, POINTER(c_int)],
    "dcmi_get_device_logic_id": [POINTER(c_int), c_int, c_int],
    "dcmi_get_device_phyid_from_logicid": [c_uint, POINTER(c_uint)],
    "dcmi_get_device_chip_info": [c_int, c_int, POINTER(ChipInfo)],
    "dcmi_get_device_pcie_info_v2": [c_int, c_int, POINTER(PcieInfoAll)],
    "dcmi_get_device_pcie_info": [c_int, c_int, POINTER(PcieInfo)],
    "dcmi_get_device_health": [c_int, c_int, POINTER(c_uint)],
    "dcmi_get_device_hbm_info": [c_int, c_int, POINTER(HbmInfo)],
    "dcmi_get_device_memory_info_v3": [c_int, c_int, POINTER(MemoryInfo)],
    "dcmi_get_device_errorcode_v2": [c_int, c_int, POINTER(c_int), POINTER(c_uint), c_uint],
    "dcmi_get_device_info": [c_int, c_int, c_int, c_uint, c_void_p, POINTER(c_uint)],
    "dcmi_subscribe_fault_event": [c_int, c_int, EventFilter, EVENT_CALLBACK],
}
_REQUIRED = (
    "dcmi_init",
    "dcmi_get_device_num_in_card",
    "dcmi_get_device_logic_id",
    "dcmi_get_device_phyid_from_logicid",
    "dcmi_get_device_chip_info",
    "dcmi_get_device_health",
)


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()


class CtypesDcmi:
    """``libdcmi.so`` behind the ``Dcmi`` interface. Construction loads and initialises it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lib = ctypes.CDLL(str(path))
        self._lock = threading.Lock()
        self._functions: dict[str, Any] = {}
        for name, argtypes in _SIGNATURES.items():
            function = getattr(self._lib, name, None)
            if function is None:
                continue
            function.restype = c_int
            function.argtypes = argtypes
            self._functions[name] = function
        missing = [n for n in _REQUIRED if n not in self._functions]
        if not {"dcmi_get_card_list", "dcmi_get_card_num_list"} & set(self._functions):
            missing.append("dcmi_get_card_list")
        if missing:
            raise OSError(f"DCMI symbols missing: {', '.join(missing)}")
        self._call("dcmi_init")

    @property
    def description(self) -> str:
        return f"libdcmi.so at {self.path}"

    def _has(self, name: str) -> bool:
        return name in self._functions

    def _call(self, name: str, *args: Any) -> None:
        function = self._functions.get(name)
        if function is None:
            raise DcmiError(name, None, "not available (library closed or symbol missing)")
        with self._lock:
            code = int(function(*args))
        if code != 0:
            raise DcmiError(name, code)

    def card_ids(self) -> list[int]:
        count, ids = c_int(0), (c_int * MAX_CARD_NUM)()
        name = "dcmi_get_card_list" if self._has("dcmi_get_card_list") else "dcmi_get_card_num_list"
        self._call(name, ctypes.byref(count), ids, MAX_CARD_NUM)
        if not 0 <= count.value <= MAX_CARD_NUM:
            raise DcmiError(name, None, f"implausible card count {count.value}")
        return [ids[i] for i in range(count.value) if ids[i] >= 0]

    def chip_count(self, card: int) -> int:
        count = c_int(0)
        self._call("dcmi_get_device_num_in_card", card, ctypes.byref(count))
        return max(count.value, 0)

    def logic_id(self, card: int, chip: int) -> int:
        logic = c_int(-1)
        self._call("dcmi_get_device_logic_id", ctypes.byref(logic), card, chip)
        return logic.value

    def physical_id(self, logic_id: int) -> int:
        phys = c_uint(0)
        self._call("dcmi_get_device_phyid_from_logicid", logic_id, ctypes.byref(phys))
        return phys.value

    def chip_name(self, card: int, chip: int) -> str:
        info = ChipInfo()
        self._call("dcmi_get_device_chip_info", card, chip, ctypes.byref(info))
        return _text(bytes(info.chip_name))

    def pci_address(self, card: int, chip: int) -> str:
        info: PcieInfoAll | PcieInfo
        if self._has("dcmi_get_device_pcie_info_v2"):
            info = PcieInfoAll()
            self._call("dcmi_get_device_pcie_info_v2", card, chip, ctypes.byref(info))
            domain = int(info.domain)
        elif self._has("dcmi_get_device_pcie_info"):
            info, domain = PcieInfo(), 0
            self._call("dcmi_get_device_pcie_info", card, chip, ctypes.byref(info))
        else:
            raise DcmiError("dcmi_get_device_pcie_info_v2", None, "not in this libdcmi.so")
        return f"{domain:04x}:{info.bdf_busid:02x}:{info.bdf_deviceid:02x}.{info.bdf_funcid:x}"

    def memory_mib(self, card: int, chip: int, *, hbm: bool) -> int:
        if hbm:
            info: HbmInfo | MemoryInfo = HbmInfo()
            self._call("dcmi_get_device_hbm_info", card, chip, ctypes.byref(info))
        else:
            info = MemoryInfo()
            self._call("dcmi_get_device_memory_info_v3", card, chip, ctypes.byref(info))
        return int(info.memory_size)

    def health(self, card: int, chip: int) -> int:
        health = c_uint(0)
        self._call("dcmi_get_device_health", card, chip, ctypes.byref(health))
        return health.value

    def error_codes(self, card: int, chip: int) -> list[int]:
        if not self._has("dcmi_get_device_errorcode_v2"):
            return []
        count, codes = c_int(0), (c_uint * MAX_ERROR_CODES)()
        self._call(
            "dcmi_get_device_errorcode_v2", card, chip, ctypes.byref(count), codes, MAX_ERROR_CODES
        )
        return [codes[i] for i in range(min(max(count.value, 0), MAX_ERROR_CODES)) if codes[i]]

    def _device_info(self, card: int, chip: int, sub_cmd: int, buffer: ctypes.Structure) -> None:
        size = c_uint(ctypes.sizeof(buffer))
        self._call(
            "dcmi_get_device_info",
            card,
            chip,
            MAIN_CMD_VDEV_MNG,
            sub_cmd,
            ctypes.cast(ctypes.byref(buffer), c_void_p),
            ctypes.byref(size),
        )

    def virtual_devices(self, card: int, chip: int) -> list[VirtualDevice]:
        if not self._has("dcmi_get_device_info"):
            return []
        total = SocTotalResource()
        self._device_info(card, chip, VMNG_SUB_CMD_GET_TOTAL_RESOURCE, total)
        found = []
        for index in range(min(total.vdev_num, SOC_SPLIT_MAX)):
            query = VdevQuery(vdev_id=total.vdev_id[index])
            self._device_info(card, chip, VMNG_SUB_CMD_GET_VDEV_RESOURCE, query)
            info = query.query_info
            found.append(
                VirtualDevice(
                    vdev_id=int(total.vdev_id[index]),
                    template=_text(bytes(info.name)),
                    aicore=float(info.computing.aic),
                )
            )
        return found

    def subscribe_faults(self, callback: FaultCallback) -> bool:
        if not self._has("dcmi_subscribe_fault_event"):
            return False

        def on_event(event: Any) -> None:
            # DCMI's thread: any exception here would be lost in C, so log it.
            try:
                body = event.contents
                if body.type != DMS_FAULT_EVENT:
                    return
                fault = body.event_t.dms_event
                callback(
                    FaultEvent(
                        logic_id=int(fault.deviceid),
                        event_id=int(fault.event_id),
                        severity=int(fault.severity),
                        assertion=int(fault.assertion),
                        name=_text(bytes(fault.event_name)),
                    )
                )
            except Exception:
                log.exception("DCMI fault-event callback failed")

        handler = EVENT_CALLBACK(on_event)
        _KEPT_CALLBACKS.append(handler)
        self._call("dcmi_subscribe_fault_event", ALL_DEVICES, ALL_DEVICES, EventFilter(), handler)
        return True

    def close(self) -> None:
        # DCMI has no shutdown call, and unloading would strand a subscribed callback.
        self._functions.clear()


def library_candidates(root: Path, configured: str) -> list[Path]:
    """The paths to try under ``root``: the configured one alone, or the usual ones."""
    paths = (configured,) if configured else LIBRARY_PATHS
    return [root / p.lstrip("/") for p in paths]


def load_dcmi(root: Path, configured: str = "") -> tuple[CtypesDcmi | None, str]:
    """Load and initialise DCMI; ``(library, "")`` or ``(None, why not)``."""
    problems = []
    for path in library_candidates(root, configured):
        if not path.exists():
            continue
        try:
            return CtypesDcmi(path), ""
        except OSError as exc:
            problems.append(f"{path} cannot be loaded: {exc}")
        except DcmiError as exc:
            problems.append(f"{path}: {exc}")
    if problems:
        return None, "; ".join(problems)
    where = ", ".join((configured,) if configured else LIBRARY_PATHS)
    return None, f"no libdcmi.so at {where}" + ("" if root == Path("/") else f" under {root}")
