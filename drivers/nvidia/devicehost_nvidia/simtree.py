"""Lay out a simulated node's files under ``root``: what a real NVIDIA node shows.

- ``/sys/bus/pci/devices/<address>`` → ``/sys/devices/pci…/<bridge>/<address>`` with
  ``vendor`` 0x10de, ``numa_node`` and the ``nvidia`` driver link, one per GPU;
- ``/dev/nvidiaN``, ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools`` and,
  when the node has it, ``/dev/nvidia-modeset`` (all under the driver root);
- for MIG, ``/proc/driver/nvidia/capabilities/gpuN/mig/giG[/ciC]/access`` naming the
  ``/dev/nvidia-caps/nvidia-capM`` node of each GPU and compute instance;
- the NVIDIA Container Toolkit's CDI spec, ``/var/run/cdi/nvidia.yaml``, shaped as
  ``nvidia-ctk cdi generate`` writes it (nvidia-container-toolkit
  ``cmd/nvidia-ctk/cdi/generate/generate_test.go`` shows the layout): kind
  ``nvidia.com/gpu``, every GPU by index and UUID, every MIG device as ``<gpu>:<mig>`` and by
  UUID, ``all``, and common edits with the control nodes, the driver's libraries and the
  ``nvidia-cdi-hook`` hooks.

Additive: what already exists is left alone, so a test can lay out part of a node by hand
(other NUMA nodes, a missing ``/dev/nvidia-uvm-tools``) and let this fill in the rest.
"""

from __future__ import annotations

from pathlib import Path

from devicehost.sysfs import normalise_pci_address
from devicehost.testing import FakeRoot
from devicehost_nvidia.simulated import SimNode

TOOLKIT_SPEC = "/var/run/cdi/nvidia.yaml"

NVIDIA_PCI_VENDOR = "0x10de"
CAPS_PROC = "/proc/driver/nvidia/capabilities"


def _add_file(fake: FakeRoot, rel: str, text: str) -> None:
    if not fake.at(rel).exists():
        fake.write(rel, text)


def _add_node(fake: FakeRoot, rel: str) -> None:
    if not fake.at(rel).exists():
        fake.char_device(rel)


def _capability(fake: FakeRoot, rel: str, minor: int, prefix: str) -> None:
    _add_file(fake, rel, f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1")
    _add_node(fake, f"{prefix}/dev/nvidia-caps/nvidia-cap{minor}")


def _cdi_device(name: str, nodes: list[str], driver_root: str) -> list[str]:
    lines = [f'    - name: "{name}"', "      containerEdits:", "        deviceNodes:"]
    for path in nodes:
        lines += [f"            - path: {path}", f"              hostPath: {driver_root}{path}"]
    return lines


def toolkit_spec(node: SimNode, driver_root: str = "") -> str:
    """The text of the toolkit's spec for ``node`` (``driver_root`` "" for ``/``)."""
    lines = ["---", "cdiVersion: 0.5.0", "kind: nvidia.com/gpu", "devices:"]
    every: list[str] = []
    for gpu in node.gpus:
        own = [f"/dev/nvidia{gpu.minor}"]
        every += own
        for name in (str(gpu.index), gpu.uuid):
            lines += _cdi_device(name, own, driver_root)
        for slot, mig in enumerate(gpu.mig_devices()):
            for name in (f"{gpu.index}:{slot}", mig.uuid):
                lines += _cdi_device(name, own, driver_root)
    lines += _cdi_device("all", every, driver_root)
    version = node.driver_version
    lib = "/lib/x86_64-linux-gnu"
    lines += [
        "containerEdits:",
        "    env:",
        f"        - NVIDIA_CTK_LIBCUDA_DIR={lib}",
        "        - NVIDIA_VISIBLE_DEVICES=void",
        "    deviceNodes:",
    ]
    for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        lines += [f"        - path: {path}", f"          hostPath: {driver_root}{path}"]
    lines += ["    hooks:"]
    for args in (
        ["create-symlinks", "--link", f"libcuda.so.1::{lib}/libcuda.so"],
        ["update-ldcache", "--folder", lib],
    ):
        lines += [
            "        - hookName: createContainer",
            "          path: /usr/bin/nvidia-cdi-hook",
            "          args:",
            "            - nvidia-cdi-hook",
            *[f"            - {a}" for a in args],
        ]
    lines += ["    mounts:"]
    for library in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        path = f"{lib}/{library}.{version}"
        lines += [
            f"        - hostPath: {driver_root}{path}",
            f"          containerPath: {path}",
            "          options: [ro, nosuid, nodev, rbind, rprivate]",
        ]
    lines += [
        f"        - hostPath: {driver_root}/usr/bin/nvidia-smi",
        "          containerPath: /usr/bin/nvidia-smi",
        "          options: [ro, nosuid, nodev, rbind, rprivate]",
    ]
    return "\n".join(lines) + "\n"


def build_tree(root: Path, node: SimNode, driver_root: str = "/") -> None:
    """Write the sysfs, /dev and /proc entries of ``node`` under ``root`` (additively);
    device nodes and libraries under ``driver_root`` (a driver container's root)."""
    if not node.gpus:
        return  # a machine without NVIDIA GPUs has none of their files
    fake = FakeRoot(root)
    prefix = "" if driver_root == "/" else driver_root.rstrip("/")
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
                bus=gpu.pcie_bus or f"pci0000:{complex_}/{bridge}",
            )
        _add_node(fake, f"{prefix}/dev/nvidia{gpu.minor}")
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        _add_node(fake, f"{prefix}/dev/{name}")
    if node.modeset:
        _add_node(fake, f"{prefix}/dev/nvidia-modeset")
    if node.gpus:
        library = f"{prefix}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{node.driver_version}"
        _add_file(fake, library, "")
        _add_file(fake, f"{prefix}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "")
    if node.toolkit_cdi_spec and node.gpus:
        _add_file(fake, TOOLKIT_SPEC, toolkit_spec(node, prefix))
    _capability(fake, f"{CAPS_PROC}/mig/config", 1, prefix)
    _capability(fake, f"{CAPS_PROC}/mig/monitor", 2, prefix)
    minor = 3
    for gpu in node.gpus:
        for mig in gpu.mig_devices():
            gi = f"{CAPS_PROC}/gpu{gpu.minor}/mig/gi{mig.gpu_instance}"
            _capability(fake, f"{gi}/access", minor, prefix)
            _capability(fake, f"{gi}/ci{mig.compute_instance}/access", minor + 1, prefix)
            minor += 2
