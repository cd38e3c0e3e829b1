"""Network namespaces and renames (issue 13, items 8 and 12), on the simulated DGX H100.

In the kernel's exclusive RDMA namespace mode (``netns_mode`` N), RDMA CNI moves a
device into the pod's namespace: the host's sysfs stops showing it under
/sys/class/infiniband while its PCI function (and the auxiliary device its RDMA driver
binds) stays.
"""

from __future__ import annotations

import grpc
import pytest
from devicehost_rdma.simulated import (
    dgx_h100,
    move_to_pod_netns,
    rename_ibdev,
    set_link,
    sriov_hca,
)
from rdma_helpers import configured, exclusive_pool, health, listed, shared_pool

from devicehost.testing import FakeRoot, KubeletStandIn

HCA = "rdma/hca"
SHARED = "rdma/hca_shared"
MLX5_0, MLX5_4 = "0000:18:00.0", "0000:4f:00.0"


def test_device_inside_a_pods_namespace_stays_listed(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Item 8: a compute NIC moved into a pod's namespace stays in ListAndWatch, Healthy,
    under the same ID; capacity stays 8 while the pod runs."""
    dgx_h100(fake_root, netns_mode="N")
    run_host(enabled_drivers=("rdma",), drivers={"rdma": {"pollIntervalSeconds": 0.1}})
    kubelet.wait_devices(HCA, lambda d: len(d) == 8, timeout=30)
    move_to_pod_netns(fake_root, "mlx5_4")
    # A second change, made after the move, that ListAndWatch must show: once it has,
    # the move was enumerated too.
    set_link(fake_root.path, "mlx5_0", up=False)
    devices = kubelet.wait_health(HCA, MLX5_0, "Unhealthy", timeout=30)
    assert len(devices) == 8
    assert devices[MLX5_4].health == "Healthy"


def test_away_device_keeps_its_pool_and_address(fake_root: FakeRoot) -> None:
    """Item 8: the away device is found from its PCI function alone — link layer from
    its PCI class, address kept in PCIDEVICE — and no device node is promised for it."""
    dgx_h100(fake_root, netns_mode="N")
    move_to_pod_netns(fake_root, "mlx5_4")
    driver = configured(fake_root)
    away = listed(driver, HCA)[MLX5_4]
    assert str(away.health) == "Healthy"
    assert away.edits.envs == {"PCIDEVICE_RDMA_HCA": MLX5_4}
    assert away.edits.devices == ()


def test_shared_namespace_mode_does_not_invent_away_devices(fake_root: FakeRoot) -> None:
    """In shared mode an RDMA device missing from sysfs is gone (unplugged, driver
    unloaded): it leaves the list as before."""
    dgx_h100(fake_root, netns_mode="Y")
    move_to_pod_netns(fake_root, "mlx5_4")
    assert MLX5_4 not in listed(configured(fake_root), HCA)


def test_a_renamed_vf_keeps_its_id(fake_root: FakeRoot) -> None:
    """Item 8: VFs re-created come back under new kernel names; the ID (PCI address)
    stays, and only the RDMA_DEVICES value follows the new name."""
    dgx_h100(fake_root, vfs_per_compute_nic=1)
    driver = configured(fake_root, {"pools": [exclusive_pool("rdma/vf", functionTypes=["vf"])]})
    before = listed(driver, "rdma/vf")
    assert before["0000:18:00.1"].edits.envs["RDMA_DEVICES"] == "mlx5_12"
    rename_ibdev(fake_root, "mlx5_12", "mlx5_40")
    after = listed(driver, "rdma/vf")
    assert sorted(after) == sorted(before)
    assert after["0000:18:00.1"].edits.envs["RDMA_DEVICES"] == "mlx5_40"


def test_shared_slots_are_unhealthy_in_exclusive_mode(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Item 12: with netns_mode N a shared pool's slots are advertised Unhealthy, and
    the kubelet's Allocate of one is refused, instead of 100 Healthy slots that give a
    pod RDMA devices it cannot see."""
    dgx_h100(fake_root, netns_mode="N")
    run_host(enabled_drivers=("rdma",))
    devices = kubelet.wait_devices(SHARED, lambda d: len(d) == 100, timeout=30)
    assert {d.health for d in devices.values()} == {"Unhealthy"}
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(SHARED, [["slot-0"]])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_switching_to_shared_mode_makes_slots_healthy(fake_root: FakeRoot) -> None:
    """The mode is read at each enumeration: `rdma system set netns shared` heals them."""
    dgx_h100(fake_root, netns_mode="N")
    driver = configured(fake_root, {"pools": [shared_pool(SHARED, slots=2)]})
    assert set(health(driver, SHARED).values()) == {"Unhealthy"}
    fake_root.write("/sys/module/ib_core/parameters/netns_mode", "Y")
    assert set(health(driver, SHARED).values()) == {"Healthy"}


def test_a_vf_pool_lists_vfs_already_inside_pods_at_start(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Issue 24, item 13: a node with 8 VFs of one PF in exclusive namespace mode, 2 of them
    (RDMA device and netdev) already inside pods when devicehost starts. A VF pool selected
    by its PF's interface (pfNames, as the SR-IOV network device plugin selects VFs) lists
    all 8 from PCI, Healthy; the 2 away keep their PCI address and get no device node."""
    names = sriov_hca(fake_root, vfs=8, netns_mode="N")
    for name in names[1:3]:
        move_to_pod_netns(fake_root, name)
    pool = exclusive_pool("rdma/vf", functionTypes=["vf"], pfNames=["ens3f0"])
    run_host(enabled_drivers=("rdma",), drivers={"rdma": {"pools": [pool]}})
    devices = kubelet.wait_devices("rdma/vf", lambda d: len(d) == 8, timeout=30)
    assert {d.health for d in devices.values()} == {"Healthy"}
    away = [f"0000:60:00.{fn}" for fn in (2, 3)]  # the first two VFs (sriov_hca's layout)
    for address in away:
        edits = kubelet.allocate("rdma/vf", [[address]])[0]
        assert edits.envs["PCIDEVICE_RDMA_VF"] == address
        assert not [d for d in edits.devices if "uverbs" in d.host_path]


@pytest.mark.parametrize("auxiliary_bus", [True, False], ids=["auxiliary-bus", "no-auxiliary-bus"])
@pytest.mark.parametrize(
    "selectors",
    [
        # The SR-IOV network device plugin's usual VF selectors: vendor, VF device ID and
        # kernel driver, no interface names.
        {"vendors": ["15b3"], "deviceIDs": ["1018"], "drivers": ["mlx5_core"]},
        {"functionTypes": ["vf"], "pfNames": ["ens3f0"]},
    ],
    ids=["vendor-device-driver", "pfNames"],
)
def test_a_vf_pool_keeps_every_vf_inside_pods_across_a_restart(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host, selectors: dict, auxiliary_bus: bool
) -> None:
    """Issue 37, item 1: 8 VFs in exclusive namespace mode, 2 of them (RDMA device and
    netdev) inside pods. A VF's PCI function never leaves the host, so a pool lists all 8,
    Healthy, whatever its selectors, before and after devicehost restarts; also on a
    kernel without the auxiliary bus (before 5.11), where nothing but the PF's virtfn
    links shows the two."""
    names = sriov_hca(fake_root, vfs=8, netns_mode="N")
    if not auxiliary_bus:
        for entry in sorted(fake_root.at("/sys/bus/auxiliary/devices").iterdir()):
            fake_root.remove(f"/sys/bus/auxiliary/devices/{entry.name}")
    pool = exclusive_pool("rdma/vf", **selectors)
    settings = {"enabled_drivers": ("rdma",), "drivers": {"rdma": {"pools": [pool]}}}
    host = run_host(**settings)
    kubelet.wait_devices("rdma/vf", lambda d: len(d) == 8, timeout=30)
    for name in names[1:3]:
        move_to_pod_netns(fake_root, name)
    host.stop()
    run_host(**settings)
    kubelet.wait_registered("rdma/vf", count=2, timeout=30)  # the new host's own list
    devices = kubelet.wait_devices("rdma/vf", lambda d: len(d) > 0, timeout=30)
    assert sorted(devices) == [f"0000:60:{fn // 8:02x}.{fn % 8}" for fn in range(2, 10)]
    assert {d.health for d in devices.values()} == {"Healthy"}
