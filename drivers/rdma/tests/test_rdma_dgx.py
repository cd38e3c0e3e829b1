"""The simulated DGX H100 (issue 13, items 9, 10, 11, 13, 14): the rules on a published layout.

The node's NICs are those of the NVIDIA DGX H100/H200 User Guide ("Network Ports"):
eight single-port ConnectX-7 InfiniBand compute NICs, two dual-port ConnectX-7 storage
NICs on Ethernet, and (as the issue describes the node) an Intel E810 management NIC.
"""

from __future__ import annotations

import pytest
from devicehost_rdma import simulated as simulation
from devicehost_rdma.driver import HOST_PATHS, RdmaDriver
from devicehost_rdma.simulated import DGX_H100_COMPUTE, dgx_h100, set_link
from rdma_helpers import composed, configured, exclusive_pool, listed

from devicehost import Health
from devicehost.drivers.discovery import DriverStatus
from devicehost.testing import FakeRoot, KubeletStandIn

HCA = "rdma/hca"
SHARED = "rdma/hca_shared"
COMPUTE = [address for _, _, address, _, _ in DGX_H100_COMPUTE]


def dgx_host(run_host):  # type: ignore[no-untyped-def]
    return run_host(enabled_drivers=("rdma",), simulate=True, simulate_node="dgx-h100")


def test_dgx_node_serves_the_eight_compute_nics_by_pci_address(
    kubelet: KubeletStandIn, run_host
) -> None:
    """Item 13: `--simulate --node dgx-h100` lists the eight compute NICs at the user
    guide's PCI addresses, each on its CPU's NUMA node, and a pair is chosen from one."""
    dgx_host(run_host)
    listed_ = kubelet.wait_devices(HCA, lambda d: len(d) == 8, timeout=30)
    assert sorted(listed_) == COMPUTE
    assert sorted(kubelet.preferred_allocation(HCA, COMPUTE, size=4)) == COMPUTE[:4]


def test_default_pools_never_take_the_e810_and_a_note_names_it(
    kubelet: KubeletStandIn, run_host
) -> None:
    """Item 10: the shared slot gives the four Mellanox storage ports and not the E810's
    irdma devices, which a note names as claimed by no pool."""
    host = dgx_host(run_host)
    kubelet.wait_devices(SHARED, lambda d: len(d) == 100, timeout=30)
    response = kubelet.allocate(SHARED, [["slot-0"]])[0]
    assert dict(response.envs) == {"RDMA_DEVICES": "mlx5_1,mlx5_2,mlx5_7,mlx5_8"}
    [info] = [i for i in host.host.plugins.infos if i.name == "rdma"]
    assert info.notes == [
        "RDMA devices no pool claims, served to no pod: irdma0 (0000:08:00.0) "
        "[8086:159b, ice], irdma1 (0000:08:00.1) [8086:159b, ice]; add a pool whose "
        "selectors match them if workloads should get them"
    ]


def test_storage_slot_gives_every_port_while_one_link_is_down(fake_root: FakeRoot) -> None:
    """Item 9: with storage port mlx5_2's cable pulled, the shared slots stay Healthy and a
    slot still gives all four storage ports' nodes (the old answer left mlx5_2 out, and the
    container missed it for good); health decides only what ListAndWatch shows."""
    dgx_h100(fake_root)
    driver = configured(fake_root)
    set_link(fake_root.path, "mlx5_2", up=False)
    assert {d.health for d in listed(driver, SHARED).values()} == {Health.HEALTHY}
    edits = composed(driver, SHARED, ["slot-7"])
    assert edits.envs == {"RDMA_DEVICES": "mlx5_1,mlx5_2,mlx5_7,mlx5_8"}
    uverbs = [d.host_path for d in edits.devices if "uverbs" in d.host_path]
    assert len(uverbs) == 4


def test_vf_pool_gives_pcidevice_as_the_sriov_plugin_does(
    fake_root: FakeRoot, kubelet: KubeletStandIn, run_host
) -> None:
    """Item 11: an exclusive pool of VFs advertises PCI addresses, and a container given
    two VFs gets PCIDEVICE_RDMA_IB_VF with both addresses, comma-separated, in request
    order — the SR-IOV network device plugin's variable — beside each VF's own nodes."""
    dgx_h100(fake_root, vfs_per_compute_nic=2)
    run_host(
        enabled_drivers=("rdma",),
        drivers={"rdma": {"pools": [exclusive_pool("rdma/ib_vf", functionTypes=["vf"])]}},
    )
    devices = kubelet.wait_devices("rdma/ib_vf", lambda d: len(d) == 16, timeout=30)
    assert {"0000:18:00.1", "0000:18:00.2", "0000:dc:00.2"} <= set(devices)
    response = kubelet.allocate("rdma/ib_vf", [["0000:40:00.2", "0000:18:00.1"]])
    envs = dict(response[0].envs)
    assert envs["PCIDEVICE_RDMA_IB_VF"] == "0000:40:00.2,0000:18:00.1"
    assert envs["RDMA_DEVICES"] == "mlx5_15,mlx5_12"


@pytest.mark.parametrize("node", ["atlas-800-9000", "atlas-800t-a2", "atlas-800-3000"])
def test_atlas_nodes_have_no_rdma_device_and_say_so(run_host, node: str) -> None:
    """Item 13: on an Atlas server (its RoCE ports belong to the NPUs) the driver builds
    nothing and is listed unavailable with the reason, instead of failing."""
    host = run_host(enabled_drivers=("rdma",), simulate=True, simulate_node=node)
    [info] = [i for i in host.host.plugins.infos if i.name == "rdma"]
    assert info.status is DriverStatus.UNAVAILABLE
    assert "no RDMA devices under /sys/class/infiniband" in info.reason


def test_unknown_node_name_is_refused_naming_the_known_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Asked of the simulation itself, a misspelt node name is an error that lists the
    names this driver knows (the host refuses a name no installed driver publishes)."""
    with pytest.raises(ValueError, match=r"unknown simulated node 'dgx-h10'.*'dgx-h100'"):
        simulation.build_node(tmp_path, "dgx-h10")


def test_a_machine_the_driver_does_not_know_gets_no_rdma_device(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The simulate hook builds nothing for a machine another driver publishes (hooks.md:
    nothing without your hardware), instead of failing the driver's start."""
    RdmaDriver().devicehost_simulate(root=tmp_path, node="template-box")
    assert not (tmp_path / "sys").exists()


def test_labels_describe_the_dgx_nics(fake_root: FakeRoot) -> None:
    """Item 14: present, count (all 14 RDMA devices), product and firmware of the most
    common card, vendor, per link layer counts, and the namespace mode."""
    dgx_h100(fake_root)
    assert configured(fake_root).devicehost_labels() == {
        "present": "true",
        "count": "14",
        "product": "ConnectX-7",
        "vendor": "15b3",
        "firmware-version": "28.39.1002",
        "infiniband.count": "8",
        "ethernet.count": "6",
        "link-layer": "mixed",
        "netns-mode": "shared",
    }


def test_host_paths_cover_what_the_driver_reads_without_configure() -> None:
    """Item 14: host_paths answers before configure and names every tree read."""
    paths = {p.path for p in RdmaDriver().devicehost_host_paths()}
    assert paths == {p.path for p in HOST_PATHS}
    assert {
        "/sys/class/infiniband",
        "/sys/class/infiniband_verbs",
        "/sys/class/infiniband_mad",
        "/sys/bus/pci/devices",
        "/sys/bus/auxiliary/devices",
        "/sys/module/ib_core/parameters/netns_mode",
        "/sys/class/net",
        "/dev/infiniband",
    } <= paths
    assert not any(p.at_real_path for p in HOST_PATHS)


def test_dgx_topology_pairs_each_nic_with_its_numa_node(fake_root: FakeRoot) -> None:
    """Each compute NIC reports its CPU's NUMA node (GPUs 0-3 on CPU 0, 4-7 on CPU 1)."""
    dgx_h100(fake_root)
    numa = {i: d.numa_nodes for i, d in listed(configured(fake_root), HCA).items()}
    assert numa == {address: (cpu,) for _, _, address, cpu, _ in DGX_H100_COMPUTE}
