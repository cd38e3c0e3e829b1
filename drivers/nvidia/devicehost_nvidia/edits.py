"""What a container needs for each unit, and for every container of a resource, as data.

The host composes each Allocate answer from these (no driver call): the resource's edits
once, then each device's, with ``NVIDIA_VISIBLE_DEVICES`` joined (comma-separated,
de-duplicated, in request order), so time-sliced replicas of one GPU name it once.

- ``envvar``: each unit contributes its ``NVIDIA_VISIBLE_DEVICES`` value (UUID, or index;
  ``<gpu>:<mig>`` for a MIG device), read by the NVIDIA container runtime. Without
  ``envvar`` the resource sets ``void``, so an image that says ``all`` cannot reach every GPU
  through a node whose default runtime is the NVIDIA one (k8s-device-plugin does the same).
- ``cdi``: each unit names its device in the NVIDIA Container Toolkit's own spec,
  ``nvidia.com/gpu=<uuid>`` (or ``=<index>``) — only a name that spec defines (``toolkit.py``).
- ``device-nodes``: each unit's ``/dev/nvidiaN`` (a MIG device: its GPU's node and the
  ``/dev/nvidia-caps`` nodes of its GPU and compute instance, minors read from
  ``/proc/driver/nvidia/capabilities``); the resource's shared ``/dev/nvidiactl``,
  ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools`` and, where present, ``/dev/nvidia-modeset``.
  Host paths are under the driver root (``/run/nvidia/driver`` for a driver container).
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from devicehost import ContainerEdits, DeviceNode
from devicehost.sysfs import read_attr
from devicehost_nvidia.config import DeviceListStrategy, NvidiaConfig
from devicehost_nvidia.inventory import Unit
from devicehost_nvidia.toolkit import ToolkitSpec

log = logging.getLogger(__name__)

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CONTROL_NODE = "/dev/nvidiactl"
#: Shared nodes: control, UVM (created when nvidia-uvm loads), modeset (optional module).
SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
OPTIONAL_NODES = ("/dev/nvidia-modeset",)
CAPS_PROC = "proc/driver/nvidia/capabilities"
_MINOR_RE = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)


def host_node(config: NvidiaConfig, path: str) -> str:
    """A device node's host path: under the driver root."""
    return posixpath.normpath(posixpath.join(config.driver_root, path.lstrip("/")))


def _exists(root: Path, host_path: str) -> bool:
    return (root / host_path.lstrip("/")).exists()


def _node(config: NvidiaConfig, path: str) -> DeviceNode:
    return DeviceNode(host_path=host_node(config, path), container_path=path)


def shared_nodes(root: Path, config: NvidiaConfig) -> tuple[list[DeviceNode], list[str]]:
    """The shared nodes present under ``root``, and the required ones that are missing."""
    nodes, missing = [], []
    for path in SHARED_NODES + OPTIONAL_NODES:
        if _exists(root, host_node(config, path)):
            nodes.append(_node(config, path))
        elif path in SHARED_NODES:
            missing.append(host_node(config, path))
    return nodes, missing


def resource_edits(root: Path, config: NvidiaConfig) -> ContainerEdits:
    """What every container of an NVIDIA resource gets once."""
    envs = {} if config.uses(DeviceListStrategy.ENVVAR) else {VISIBLE_DEVICES: "void"}
    nodes: list[DeviceNode] = []
    if config.uses(DeviceListStrategy.DEVICE_NODES):
        nodes = shared_nodes(root, config)[0]
    return ContainerEdits(envs=envs, devices=tuple(nodes))


def _capability_minor(root: Path, rel: str) -> int | None:
    match = _MINOR_RE.search(read_attr(root / CAPS_PROC / rel) or "")
    return int(match.group(1)) if match else None


def unit_nodes(root: Path, config: NvidiaConfig, unit: Unit) -> tuple[list[DeviceNode], str | None]:
    """The unit's own device nodes, and why one is missing (None when all are there)."""
    gpu = unit.gpu
    if gpu.minor is None:
        return [], None
    nodes = [_node(config, f"/dev/nvidia{gpu.minor}")]
    if unit.mig is None:
        return nodes, None
    gi = f"gpu{gpu.minor}/mig/gi{unit.mig.gpu_instance}"
    for rel in (f"{gi}/access", f"{gi}/ci{unit.mig.compute_instance}/access"):
        minor = _capability_minor(root, rel)
        if minor is None:
            return nodes, f"no MIG capability file /{CAPS_PROC}/{rel}"
        nodes.append(_node(config, f"/dev/nvidia-caps/nvidia-cap{minor}"))
    return nodes, None


def cdi_name(unit: Unit, spec: ToolkitSpec) -> str | None:
    """The toolkit spec's name for ``unit``: by UUID, else by index."""
    mig = unit.mig
    index_name = str(unit.gpu.index) if mig is None else f"{unit.gpu.index}:{mig.index}"
    return spec.qualified(unit.uuid) or spec.qualified(index_name)


def unit_edits(
    root: Path, config: NvidiaConfig, unit: Unit, spec: ToolkitSpec
) -> tuple[ContainerEdits, str | None]:
    """One unit's edits under the configured strategies, and why the unit cannot be handed
    over as configured (None when it can)."""
    envs = {VISIBLE_DEVICES: unit.runtime_name} if config.uses(DeviceListStrategy.ENVVAR) else {}
    cdi: tuple[str, ...] = ()
    problem = None
    if config.uses(DeviceListStrategy.CDI):
        name = cdi_name(unit, spec)
        if name is None:
            problem = (
                f"the NVIDIA Container Toolkit's CDI spec defines no nvidia.com/gpu={unit.uuid}"
            )
        else:
            cdi = (name,)
    nodes: list[DeviceNode] = []
    if config.uses(DeviceListStrategy.DEVICE_NODES):
        nodes, missing = unit_nodes(root, config, unit)
        problem = problem or missing
    return ContainerEdits(envs=envs, devices=tuple(nodes), cdi_devices=cdi), problem
