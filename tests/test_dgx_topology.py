"""The simulated DGX H100 keeps the machine's PCIe grouping across drivers: each GPU and
the compute NIC behind the same PCIe switch (NVIDIA DGX H100/H200 User Guide, "Network
Ports") report one root complex, which is what a DRA claim matching
``resource.kubernetes.io/pcieRoot`` pairs them by."""

from __future__ import annotations

from devicehost_nvidia.simtree import build_tree
from devicehost_nvidia.simulated import dgx_h100_node
from devicehost_rdma.simulated import DGX_H100_COMPUTE, dgx_h100

from devicehost.sysfs import normalise_pci_address, pcie_root


def test_each_gpu_shares_its_root_complex_with_its_compute_nic_only(tmp_path):
    gpus = dgx_h100_node().gpus
    build_tree(tmp_path / "nvidia", dgx_h100_node())
    dgx_h100(tmp_path / "rdma")
    gpu_roots = [pcie_root(tmp_path / "nvidia", normalise_pci_address(gpu.bus_id)) for gpu in gpus]
    nic_roots = {
        gpu: pcie_root(tmp_path / "rdma", address)
        for _name, _ifname, address, _numa, gpu in DGX_H100_COMPUTE
    }
    assert [nic_roots[i] for i in range(len(gpus))] == gpu_roots
    assert len(set(gpu_roots)) == 8 and None not in gpu_roots
