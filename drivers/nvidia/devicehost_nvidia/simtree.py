"""Lay out a simulated node's files under ``root``: what a real NVIDIA node shows.

- ``/sys/bus/pci/devices/<address>`` → ``/sys/devices/pci…/<bridge>/<address>`` with
  ``vendor`` 0x10de, ``numa_node`` and the ``nvidia`` driver link, one per GPU;
- ``/dev/nvidiaN``, ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``;
- for MIG, ``/proc/driver/nvidia/capabilities/gpuN/mig/giG[/ciC]/access`` naming the
  ``/dev/nvidia-caps/nvidia-capM`` node of each GPU and compute instance.

Additive: what already exists is left alone, so a test can lay out part of a node by hand
(other NUMA nodes, a missing ``/dev/nvidia-uvm-tools``) and let this fill in the rest.
"""

from __future__ import annotations

from pathlib import Path

from devicehost.sysfs import normalise_pci_address
from devicehost.testing import FakeRoot
from devicehost_nvidia.simulated import SimNode

NVIDIA_PCI_VENDOR = "0x10de"
CAPS_PROC = "/proc/driver/nvidia/capabilities"


def _add_file(fake: FakeRoot, rel: str, text: str) -> None:
    if not fake.at(rel).exists():
        fake.write(rel, text)


def _add_node(fake: FakeRoot, rel: str) -> None:
    if not fake.at(rel).exists():
        fake.char_device(rel)


def _capability(fake: FakeRoot, rel: str, minor: int) -> None:
    _add_file(fake, rel, f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1")
    _add_node(fake, f"/dev/nvidia-caps/nvidia-cap{minor}")


def build_tree(root: Path, node: SimNode) -> None:
    """Write the sysfs, /dev and /proc entries of ``node`` under ``root`` (additively)."""
    fake = FakeRoot(root)
    for gpu in node.gpus:
        address = normalise_pci_address(gpu.bus_id)
        link = fake.at(f"/sys/bus/pci/devices/{address}")
        if not (link.exists() or link.is_symlink()):
            complex_ = f"{gpu.numa_node * 0x20 % 0x100:02x}"
            bridge = f"0000:{complex_}:{1 + gpu.pcie_switch % 0x1F:02x}.0"
            fake.pci_device(
                address,
                vendor=NVIDIA_PCI_VENDOR,
                device=gpu.pci_device_id,
                numa_node=gpu.numa_node,
                driver="nvidia",
                device_class="0x030200",
                bus=f"pci0000:{complex_}/{bridge}",
            )
        _add_node(fake, f"/dev/nvidia{gpu.minor}")
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        _add_node(fake, f"/dev/{name}")
    _capability(fake, f"{CAPS_PROC}/mig/config", 1)
    _capability(fake, f"{CAPS_PROC}/mig/monitor", 2)
    minor = 3
    for gpu in node.gpus:
        for mig in gpu.mig_devices():
            gi = f"{CAPS_PROC}/gpu{gpu.minor}/mig/gi{mig.gpu_instance}"
            _capability(fake, f"{gi}/access", minor)
            _capability(fake, f"{gi}/ci{mig.compute_instance}/access", minor + 1)
            minor += 2
