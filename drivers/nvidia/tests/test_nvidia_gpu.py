"""Real-GPU checks: the driver on the real NVML of an NVIDIA node.

Marked ``gpu``: skipped unless pytest runs with ``--run-gpu`` (``make gpu-check``), and
skipped with the reason where NVML finds no GPU. On a GPU node they check what the
simulated NVML cannot: real UUIDs and PCI bus IDs against ``nvidia-smi`` and sysfs, an
allocation through the kubelet stand-in, and a wait on a real NVML event set.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from devicehost_nvidia import NvidiaDriver
from devicehost_nvidia.nvml import NvmlError

from devicehost.sysfs import read_attr
from devicehost.testing import check_driver

pytestmark = pytest.mark.gpu

ROOT = Path("/")
GPU = "nvidia.com/gpu"
_SMI_LINE = re.compile(r"^GPU (\d+): .* \(UUID: (GPU-[0-9a-f-]+)\)$")


@pytest.fixture(scope="module")
def real_gpus() -> Iterator[int]:
    """The number of GPUs real NVML finds; skips the module where it finds none."""
    from devicehost_nvidia.nvml_real import PynvmlLibrary

    library = PynvmlLibrary()
    try:
        library.init()
    except NvmlError as exc:
        pytest.skip(f"NVML finds no NVIDIA GPU on this node: {exc}")
    try:
        count = library.device_count()
        if count == 0:
            pytest.skip("NVML loads but finds no NVIDIA GPU on this node")
        yield count
    finally:
        library.shutdown()


@pytest.fixture
def real_driver(real_gpus: int, tmp_path: Path) -> Iterator[NvidiaDriver]:
    """The driver on real NVML, whole GPUs, handed over by env and device nodes."""
    driver = NvidiaDriver()
    driver.devicehost_configure(
        config={"deviceListStrategy": ["envvar", "device-nodes"]},
        root=ROOT,
        simulated=False,
    )
    yield driver
    driver.devicehost_shutdown()


def _nvidia_smi_gpus() -> dict[int, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not installed on this node")
    output = subprocess.run(
        [smi, "-L"], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return {
        int(m.group(1)): m.group(2)
        for m in (_SMI_LINE.match(line.strip()) for line in output.splitlines())
        if m
    }


def test_conformance_on_real_nvml(real_gpus: int, tmp_path: Path) -> None:
    """The battery passes on real hardware: one device per GPU, each allocating alone."""
    report = check_driver("nvidia", ROOT, config={})
    assert report.devices == {GPU: real_gpus}


def test_uuids_match_nvidia_smi(real_driver: NvidiaDriver) -> None:
    """The advertised IDs are the UUIDs ``nvidia-smi -L`` lists, index for index."""
    expected = _nvidia_smi_gpus()
    units = real_driver.inventory.units(GPU)
    assert {u.gpu.index: u.uuid for u in units} == expected
    assert [d.id for d in real_driver.devicehost_enumerate(resource=GPU)] == [u.id for u in units]


def test_pci_ids_and_numa_match_sysfs(real_driver: NvidiaDriver) -> None:
    """Each GPU's NVML PCI bus ID is an NVIDIA function in sysfs, with the NUMA node reported."""
    for gpu in real_driver.inventory.gpus():
        function = ROOT / "sys/bus/pci/devices" / gpu.bus_id
        assert function.exists(), f"GPU {gpu.index}: {function} is missing"
        assert read_attr(function / "vendor") == "0x10de"
        numa = read_attr(function / "numa_node")
        assert gpu.numa_node == (int(numa) if numa and int(numa) >= 0 else None)


def test_allocation_through_the_kubelet(real_gpus: int, tmp_path: Path, kubelet, run_host) -> None:
    """A real GPU registers, streams Healthy, and allocates with env, its node and, where the
    NVIDIA Container Toolkit's spec exists, its CDI name; the driver writes no CDI spec."""
    has_spec = any((ROOT / d / "nvidia.yaml").exists() for d in ("etc/cdi", "var/run/cdi"))
    strategies = ["envvar", "device-nodes"] + (["cdi"] if has_spec else [])
    config = {"nvidia": {"deviceListStrategy": strategies}}
    run_host(enabled_drivers=("nvidia",), root=ROOT, drivers=config)
    kubelet.wait_registered(GPU)
    devices = kubelet.wait_devices(GPU, lambda d: len(d) == real_gpus)
    healthy = [i for i, d in devices.items() if d.health == "Healthy"]
    assert healthy, "no GPU is Healthy"
    response = kubelet.allocate(GPU, [[healthy[0]]])[0]
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == healthy[0]
    if has_spec:
        assert [c.name for c in response.cdi_devices] == [f"nvidia.com/gpu={healthy[0]}"]
    paths = [d.host_path for d in response.devices]
    assert "/dev/nvidiactl" in paths and any(re.fullmatch(r"/dev/nvidia\d+", p) for p in paths)
    assert not (ROOT / "var/run/cdi/devicehost-nvidia.com-gpu.json").exists()


def test_event_set_wait_on_real_nvml(real_driver: NvidiaDriver) -> None:
    """The real event set is created, registered, and a short wait ends without error."""
    assert not any("event" in note for note in real_driver.devicehost_notes()), (
        real_driver.devicehost_notes()
    )
    assert real_driver.monitor is not None and real_driver.monitor.listening
    assert real_driver.monitor.pump(threading.Event(), wait_ms=200) is True
