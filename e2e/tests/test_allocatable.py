"""Each node's allocatable is exactly its own machine's resources."""

from __future__ import annotations

import json

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import device_resources

from conftest import devicehost_pods


@pytest.mark.nodes("dgx")
def test_dgx_node_shows_its_gpus_and_rdma_pools(installed: Cluster) -> None:
    """The simulated DGX H100: 8 GPUs, 8 exclusive HCAs, 100 shared RDMA slots, no NPU."""
    expected = {"nvidia.com/gpu": "8", "rdma/hca": "8", "rdma/hca_shared": "100"}
    wait_for(lambda: device_resources(installed, "dgx") == expected, 60, "DGX allocatable")


@pytest.mark.nodes("atlas")
def test_atlas_node_shows_its_npus_only(installed: Cluster) -> None:
    """The simulated Atlas 800 (model 9000): 8 Ascend 910 chips, nothing else."""
    expected = {"huawei.com/Ascend910": "8"}
    wait_for(lambda: device_resources(installed, "atlas") == expected, 60, "Atlas allocatable")


@pytest.mark.nodes("plain")
def test_plain_node_serves_nothing_and_says_why(installed: Cluster) -> None:
    """The node without accelerators: no device resource, devicehost's pod Ready, and its
    log names each driver as unavailable with a reason."""
    assert device_resources(installed, "plain") == {}
    pod = devicehost_pods(installed)["plain"]
    log = installed.kubectl("-n", "devicehost", "logs", pod["metadata"]["name"]).stdout
    messages = [json.loads(line)["message"] for line in log.splitlines() if line.startswith("{")]
    for driver in ("nvidia", "ascend", "rdma"):
        said = [m for m in messages if m.startswith(f"driver {driver} (")]
        assert any("unavailable — " in m for m in said), said or messages
    assert "serving 0 resources: none" in messages, messages


@pytest.mark.nodes("dgx")
def test_node_feature_labels_are_where_nfd_reads_them(installed: Cluster) -> None:
    """The drivers' labels are in NFD's local feature file on the node, in NFD's format."""
    path = "/etc/kubernetes/node-feature-discovery/features.d/devicehost"
    text = wait_for(lambda: installed.in_node("dgx", ["cat", path], check=False), 60, path)
    labels = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert any(k.startswith("devicehost.feature.node.kubernetes.io/nvidia") for k in labels), text
    assert not any("ascend" in k for k in labels), text
