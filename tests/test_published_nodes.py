"""The published machines the bundled drivers simulate, selected by ``--node`` on the real
command line (`devicehost devices`, `demo`, `run --simulate`): each driver builds its part
of the machine, and a machine mixing vendors (the DGX H100: GPUs and NICs side by side) is
served by both drivers at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicehost.testing import KubeletStandIn
from support import reap, terminate

BUNDLED = "nvidia,ascend,rdma"

#: resource -> (devices, NUMA nodes they sit on) on each machine, all bundled drivers on.
MACHINES = {
    "dgx-h100": {
        "nvidia.com/gpu": (8, [[0]] * 4 + [[1]] * 4),
        "rdma/hca": (8, [[0]] * 4 + [[1]] * 4),
        "rdma/hca_shared": (100, [[0, 1]] * 100),
    },
    "atlas-800-9000": {"huawei.com/Ascend910": (8, [[0]] * 4 + [[1]] * 4)},
    "atlas-800t-a2": {"huawei.com/Ascend910": (8, [[0]] * 4 + [[1]] * 4)},
    "atlas-800-3000": {"huawei.com/Ascend310P": (8, [[0]] * 4 + [[1]] * 4)},
}


def devicehost(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEHOST_")}
    return subprocess.run(
        [sys.executable, "-m", "devicehost.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("node", sorted(MACHINES))
def test_devices_simulate_node_builds_that_machine(node: str) -> None:
    """`devicehost devices --simulate --node NAME`: exactly the machine's resources, each
    with its device count and NUMA placement; drivers without hardware there add none."""
    result = devicehost("devices", "--simulate", "--node", node, "--drivers", BUNDLED, "--json")
    assert result.returncode == 0, result.stderr
    resources = json.loads(result.stdout)["resources"]
    seen = {
        name: (len(r["devices"]), [d["numa"] for d in r["devices"]])
        for name, r in resources.items()
    }
    assert seen == MACHINES[node]
    assert {d["health"] for r in resources.values() for d in r["devices"]} == {"Healthy"}


def test_drivers_without_hardware_on_the_machine_are_unavailable() -> None:
    """On the DGX H100 the Ascend driver is unavailable, on an Atlas server the NVIDIA and
    RDMA drivers are, each with its reason."""
    rows = {}
    for node in ("dgx-h100", "atlas-800t-a2"):
        result = devicehost("drivers", "--simulate", "--node", node, "--drivers", BUNDLED, "--json")
        assert result.returncode == 0, result.stderr
        bundled = [r for r in json.loads(result.stdout) if r["name"] in BUNDLED.split(",")]
        rows[node] = {r["name"]: r["status"] for r in bundled}
    assert rows["dgx-h100"] == {"nvidia": "active", "rdma": "active", "ascend": "unavailable"}
    assert rows["atlas-800t-a2"] == {
        "nvidia": "unavailable",
        "rdma": "unavailable",
        "ascend": "active",
    }


def test_a_machine_another_driver_publishes_costs_the_bundled_drivers_nothing() -> None:
    """`--node template-box`, the template driver's own machine (published through
    devicehost.nodes): every bundled driver builds nothing there and is unavailable, none
    restarting; the template serves its widgets."""
    drivers = BUNDLED + ",template"
    result = devicehost(
        "drivers", "--simulate", "--node", "template-box", "--drivers", drivers, "--json"
    )
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    for name in BUNDLED.split(","):
        assert rows[name]["status"] == "unavailable", rows[name]
        assert rows[name]["restarts"] == 0, rows[name]
    assert rows["template"]["status"] == "active"


@pytest.mark.parametrize("node", ["", *sorted(MACHINES), "template-box"])
def test_every_published_machine_starts_every_installed_driver_cleanly(node: str) -> None:
    """`devicehost drivers --simulate --node NAME` for each machine a driver publishes, every
    installed driver on: none is restarting or crash-looping (a driver without hardware
    on the machine is unavailable, as on a real node)."""
    node_args = ["--node", node] if node else []
    result = devicehost(
        "drivers", "--simulate", *node_args, "--drivers", BUNDLED + ",template", "--json"
    )
    assert result.returncode == 0, result.stderr
    for row in json.loads(result.stdout):
        assert row["status"] in ("active", "unavailable"), row
        assert row["restarts"] == 0, row


def test_demo_node_tours_the_named_machine() -> None:
    """`devicehost demo --node dgx-h100` registers the GPUs and the NICs of that machine."""
    result = devicehost("demo", "--node", "dgx-h100", "--drivers", BUNDLED)
    assert result.returncode == 0, result.stderr
    assert "simulated node dgx-h100" in result.stdout
    for line in (
        "nvidia.com/gpu                   8 devices, 8 healthy",
        "rdma/hca                         8 devices, 8 healthy",
    ):
        assert line in result.stdout, result.stdout


def test_run_simulate_node_serves_the_machine_to_the_kubelet(
    tmp_path: Path, plugin_dir: Path, kubelet: KubeletStandIn
) -> None:
    """`devicehost run --simulate --node dgx-h100` in its own process: the kubelet gets the
    eight GPUs and the eight compute NICs (by PCI address) of the DGX H100."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVICEHOST_")}
    command = [sys.executable, "-m", "devicehost.cli", "run", "--simulate", "--node", "dgx-h100"]
    command += ["--drivers", BUNDLED, "--plugin-dir", str(plugin_dir), "--metrics-address", ""]
    command += ["--pod-resources-socket", "", "--root", str(tmp_path)]
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        gpus = kubelet.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=60)
        nics = kubelet.wait_devices("rdma/hca", lambda d: len(d) == 8, timeout=60)
        assert all(i.startswith("GPU-") for i in gpus)
        assert sorted(nics)[0] == "0000:18:00.0"
        terminate(process, timeout=30)
    finally:
        reap(process)
