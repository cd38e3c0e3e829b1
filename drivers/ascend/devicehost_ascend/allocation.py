"""What a container gets for its NPUs, in each of the three ways of handing them over.

- Ascend Docker Runtime (``useAscendRuntime: true``, the default): only envs. The runtime
  reads ``ASCEND_VISIBLE_DEVICES`` (physical IDs, or vNPU IDs with
  ``ASCEND_RUNTIME_OPTIONS=VIRTUAL``) and mounts the nodes and the driver itself.
- Plain runtime (``useAscendRuntime: false``): the device nodes (each vNPU's
  ``/dev/vdavinciN`` as ``/dev/davinciN``), the shared nodes present under root, and
  read-only mounts of the driver files present under root.
- CDI (``useCdi: true``): fully qualified CDI names; the spec this module writes (into
  the host directory ``cdiDir``, under root) carries the same nodes and mounts, for any
  CDI-enabled runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devicehost import Allocation, DeviceNode, Mount
from devicehost.cdi import cdi_name, write_spec
from devicehost_ascend.config import AscendConfig
from devicehost_ascend.inventory import NpuDevice

CDI_KIND = "huawei.com/npu"
VISIBLE_ENV = "ASCEND_VISIBLE_DEVICES"
OPTIONS_ENV = "ASCEND_RUNTIME_OPTIONS"


def _present(root: Path, path: str) -> bool:
    return (root / path.lstrip("/")).exists()


class Allocator:
    """Builds Allocations (and the CDI spec) for one configured node."""

    def __init__(self, config: AscendConfig, root: Path) -> None:
        self.config = config
        self.root = root

    def shared_nodes(self) -> tuple[DeviceNode, ...]:
        return tuple(
            DeviceNode(host_path=p, permissions="rw")
            for p in self.config.shared_device_nodes
            if _present(self.root, p)
        )

    def driver_mounts(self) -> tuple[Mount, ...]:
        return tuple(
            Mount(host_path=p, container_path=p, read_only=True)
            for p in self.config.driver_mounts
            if _present(self.root, p)
        )

    @staticmethod
    def own_nodes(devices: Sequence[NpuDevice]) -> tuple[DeviceNode, ...]:
        return tuple(
            DeviceNode(host_path=d.host_node, container_path=d.container_node, permissions="rw")
            for d in devices
        )

    def allocate(self, devices: Sequence[NpuDevice]) -> Allocation:
        ordered = sorted(devices, key=lambda d: d.visible_id)
        if self.config.use_cdi:
            return Allocation(cdi_devices=tuple(cdi_name(CDI_KIND, d.id) for d in ordered))
        if not self.config.use_ascend_runtime:
            return Allocation(
                devices=self.own_nodes(ordered) + self.shared_nodes(), mounts=self.driver_mounts()
            )
        envs = {VISIBLE_ENV: ",".join(str(d.visible_id) for d in ordered)}
        if any(d.virtual for d in ordered):
            envs[OPTIONS_ENV] = "VIRTUAL"
        return Allocation(envs=envs)

    def cdi_directory(self) -> Path:
        """Where the spec is written: the host directory ``cdiDir`` under root."""
        return self.root / self.config.cdi_dir.lstrip("/")

    def write_cdi_spec(self, devices: Sequence[NpuDevice]) -> Path | None:
        """Write (or refresh) the spec for ``devices`` when CDI is on; its path, or None."""
        if not self.config.use_cdi:
            return None
        common = Allocation(devices=self.shared_nodes(), mounts=self.driver_mounts())
        per_device = {
            d.id: Allocation(devices=self.own_nodes([d]))
            for d in sorted(devices, key=lambda d: d.id)
        }
        directory = self.cdi_directory()
        try:
            return write_spec(directory, CDI_KIND, per_device, common)
        except OSError as exc:
            raise RuntimeError(
                f"cannot write the CDI spec in {directory} "
                f"(cdiDir {self.config.cdi_dir} under root): {exc}"
            ) from exc
