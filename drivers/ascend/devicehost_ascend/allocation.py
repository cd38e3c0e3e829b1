"""What a container needs for its NPUs, as container edits the host composes Allocates from.

Each device declares its own part (``device_edits``); each resource what every container
of it gets once (``resource_edits``). ``ASCEND_VISIBLE_DEVICES`` is joined by the host
across a container's devices, in request order. Two ways of handing NPUs over:

- Ascend Docker Runtime (``useAscendRuntime: true``, the default): only envs. The runtime
  reads ``ASCEND_VISIBLE_DEVICES`` (physical IDs, or vNPU IDs with
  ``ASCEND_RUNTIME_OPTIONS=VIRTUAL``) and mounts the nodes and the driver itself; on
  Ascend 310B it also needs ``ASCEND_ALLOW_LINK=True`` (the reference plugin's
  ``SetAscendRuntimeEnv``, mind-cluster component/ascend-device-plugin/pkg/common/common.go).
- Plain runtime (``useAscendRuntime: false``): each device's node (a vNPU's host
  ``/dev/vdavinciN`` as ``/dev/davinciN``), the shared nodes present under root, and
  read-only mounts of the driver files CANN needs, present under root. On Ascend 310B the
  manager node is ``/dev/davinci_manager_docker`` when the host has it, seen as
  ``/dev/davinci_manager``, plus the 310B's media nodes (the reference's
  ``getDavinciManagerPath`` and ``set310BDefaultDevices``, same file).

The host writes CDI specs from the same edits, so a CDI-enabled runtime gets them too.
"""

from __future__ import annotations

from pathlib import Path

from devicehost import ContainerEdits, DeviceNode, Mount
from devicehost_ascend.config import AscendConfig
from devicehost_ascend.inventory import NpuDevice

VISIBLE_ENV = "ASCEND_VISIBLE_DEVICES"
OPTIONS_ENV = "ASCEND_RUNTIME_OPTIONS"
ALLOW_LINK_ENV = "ASCEND_ALLOW_LINK"
JOINED_ENVS = (VISIBLE_ENV,)

MANAGER_NODE = "/dev/davinci_manager"
MANAGER_NODE_310B = "/dev/davinci_manager_docker"
#: The 310B's extra nodes, each passed when present (the reference's
#: ``set310BDefaultDevices``).
NODES_310B = (
    "/dev/pngd",
    "/dev/venc",
    "/dev/upgrade",
    "/dev/sys",
    "/dev/svm0",
    "/dev/vdec",
    "/dev/vpc",
    "/dev/ts_aisle",
    "/dev/log_drv",
    "/dev/acodec",
    "/dev/ai",
    "/dev/ao",
    "/dev/vo",
    "/dev/hdmi",
)


def _present(root: Path, path: str) -> bool:
    return (root / path.lstrip("/")).exists()


def device_edits(device: NpuDevice, config: AscendConfig) -> ContainerEdits:
    """What one chip or vNPU adds to a container."""
    if not config.use_ascend_runtime:
        node = DeviceNode(
            host_path=device.host_node, container_path=device.container_node, permissions="rw"
        )
        return ContainerEdits(devices=(node,))
    envs = {VISIBLE_ENV: str(device.visible_id)}
    if device.virtual:
        envs[OPTIONS_ENV] = "VIRTUAL"
    return ContainerEdits(envs=envs)


def _shared_nodes(family: str, config: AscendConfig, root: Path) -> tuple[DeviceNode, ...]:
    nodes = []
    for path in config.shared_device_nodes:
        host_path = path
        if path == MANAGER_NODE and family == "Ascend310B" and _present(root, MANAGER_NODE_310B):
            host_path = MANAGER_NODE_310B
        if _present(root, host_path):
            nodes.append(DeviceNode(host_path=host_path, container_path=path, permissions="rw"))
    if family == "Ascend310B":
        nodes.extend(DeviceNode(host_path=p) for p in NODES_310B if _present(root, p))
    return tuple(nodes)


def resource_edits(family: str, config: AscendConfig, root: Path) -> ContainerEdits:
    """What every container of a resource of ``family`` gets once (presence checked now)."""
    if config.use_ascend_runtime:
        if family == "Ascend310B":
            return ContainerEdits(envs={ALLOW_LINK_ENV: "True"})
        return ContainerEdits()
    mounts = tuple(
        Mount(host_path=p, container_path=p, read_only=True)
        for p in config.driver_mounts
        if _present(root, p)
    )
    return ContainerEdits(devices=_shared_nodes(family, config, root), mounts=mounts)
