"""What a container gets for its units, in each configured way of handing GPUs over.

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<uuid,…>`` (or indexes), read by the NVIDIA
  container runtime hook. Without it the variable is ``void``, so an image that sets
  ``NVIDIA_VISIBLE_DEVICES=all`` cannot reach every GPU through a default NVIDIA runtime.
- ``cdi``: ``nvidia.com/gpu=<uuid>`` per unit, resolved by a CDI-enabled runtime from the
  spec this driver writes (``cdispec``).
- ``device-nodes``: ``/dev/nvidiaN`` of each GPU, ``/dev/nvidiactl`` and, where present,
  ``/dev/nvidia-uvm`` and ``/dev/nvidia-uvm-tools``; for MIG also the
  ``/dev/nvidia-caps/nvidia-capN`` nodes of the GPU and compute instance.

Replicas of one unit are the same device: every list is deduplicated by unit.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from devicehost import Allocation, DeviceNode
from devicehost.cdi import cdi_name
from devicehost.sysfs import read_attr
from devicehost_nvidia.config import DeviceListStrategy, NvidiaConfig
from devicehost_nvidia.inventory import Unit

log = logging.getLogger(__name__)

CDI_KIND = "nvidia.com/gpu"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CONTROL_NODE = "/dev/nvidiactl"
UVM_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
CAPS_PROC = "proc/driver/nvidia/capabilities"
_MINOR_RE = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)
_warned: set[str] = set()


def _exists(root: Path, host_path: str) -> bool:
    return (root / host_path.lstrip("/")).exists()


def control_nodes(root: Path) -> list[DeviceNode]:
    """Nodes every GPU container needs; the UVM ones only once the driver created them."""
    nodes = [DeviceNode(host_path=CONTROL_NODE)]
    nodes += [DeviceNode(host_path=p) for p in UVM_NODES if _exists(root, p)]
    return nodes


def _capability_minor(root: Path, rel: str) -> int | None:
    text = read_attr(root / CAPS_PROC / rel)
    match = _MINOR_RE.search(text or "")
    return int(match.group(1)) if match else None


def unit_nodes(root: Path, unit: Unit) -> list[DeviceNode]:
    """The GPU's own node, and for a MIG device its GPU- and compute-instance capabilities."""
    gpu = unit.gpu
    nodes = [DeviceNode(host_path=f"/dev/nvidia{gpu.minor}")] if gpu.minor is not None else []
    if unit.mig is not None and gpu.minor is not None:
        gi = f"gpu{gpu.minor}/mig/gi{unit.mig.gpu_instance}"
        for rel in (f"{gi}/access", f"{gi}/ci{unit.mig.compute_instance}/access"):
            minor = _capability_minor(root, rel)
            if minor is None:
                if rel not in _warned:
                    _warned.add(rel)
                    log.warning(
                        "MIG device %s: no capability file %s under %s; its device "
                        "node is not passed",
                        unit.uuid,
                        rel,
                        root / CAPS_PROC,
                    )
                continue
            nodes.append(DeviceNode(host_path=f"/dev/nvidia-caps/nvidia-cap{minor}"))
    return nodes


def distinct_units(units: Sequence[Unit]) -> list[Unit]:
    return list({id(u): u for u in units}.values())


def allocation_for(units: Sequence[Unit], config: NvidiaConfig, root: Path) -> Allocation:
    """The Allocation for ``units`` (deduplicated) under the configured strategies."""
    units = distinct_units(units)
    visible = ",".join(u.runtime_name for u in units)
    envs = {VISIBLE_DEVICES: visible if config.uses(DeviceListStrategy.ENVVAR) else "void"}
    cdi_devices: tuple[str, ...] = ()
    if config.uses(DeviceListStrategy.CDI):
        cdi_devices = tuple(cdi_name(CDI_KIND, u.cdi_name) for u in units)
    devices: list[DeviceNode] = []
    if config.uses(DeviceListStrategy.DEVICE_NODES):
        for node in [*(n for u in units for n in unit_nodes(root, u)), *control_nodes(root)]:
            if node not in devices:
                devices.append(node)
    return Allocation(envs=envs, devices=tuple(devices), cdi_devices=cdi_devices)
