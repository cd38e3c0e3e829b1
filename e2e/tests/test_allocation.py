"""What a container gets from an allocation, as the runtime gave it."""

from __future__ import annotations

import pytest
from harness.cluster import Cluster
from harness.pods import create_pod, environment, exec_in, pod_manifest, wait_running


def char_devices(installed: Cluster, ns: str, pod: str, pattern: str) -> list[str]:
    """Paths matching pattern in the container that are character devices."""
    script = f'for f in {pattern}; do [ -c "$f" ] && echo "$f"; done; true'
    return exec_in(installed, ns, pod, script).split()


@pytest.mark.nodes("dgx")
def test_pod_with_two_gpus_has_them_in_its_environment(installed: Cluster, ns: str) -> None:
    """nvidia.com/gpu: 2 -> NVIDIA_VISIBLE_DEVICES names two distinct GPU UUIDs."""
    create_pod(installed, ns, pod_manifest("gpu2", {"nvidia.com/gpu": "2"}))
    wait_running(installed, ns, "gpu2")
    visible = environment(installed, ns, "gpu2")["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(visible)) == 2 and all(v.startswith("GPU-") for v in visible), visible


@pytest.mark.nodes("atlas")
def test_ascend_pod_gets_davinci_character_devices(installed: Cluster, ns: str) -> None:
    """huawei.com/Ascend910: 2, on a node without Ascend Docker Runtime (the tier's config:
    useAscendRuntime false) -> /dev/davinciN per chip and the shared management nodes,
    character devices, and the driver's libraries mounted read-only."""
    create_pod(installed, ns, pod_manifest("npu", {"huawei.com/Ascend910": "2"}))
    wait_running(installed, ns, "npu")
    davinci = char_devices(installed, ns, "npu", "/dev/davinci[0-9]*")
    assert len(davinci) == 2, davinci
    shared = char_devices(installed, ns, "npu", "/dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc")
    assert shared == ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"], shared
    mounted = exec_in(installed, ns, "npu", "grep ' /usr/local/Ascend/driver/lib64 ' /proc/mounts")
    assert " ro," in mounted, mounted
    assert "ASCEND_VISIBLE_DEVICES" not in environment(installed, ns, "npu")


@pytest.mark.nodes("dgx")
def test_exclusive_rdma_pod_gets_infiniband_character_devices(installed: Cluster, ns: str) -> None:
    """rdma/hca: 1 -> its uverbs node and rdma_cm in /dev/infiniband, character devices."""
    create_pod(installed, ns, pod_manifest("hca", {"rdma/hca": "1"}))
    wait_running(installed, ns, "hca")
    nodes = char_devices(installed, ns, "hca", "/dev/infiniband/*")
    assert "/dev/infiniband/rdma_cm" in nodes, nodes
    assert len([n for n in nodes if "uverbs" in n]) == 1, nodes


@pytest.mark.nodes("dgx")
def test_shared_rdma_pod_gets_infiniband_character_devices(installed: Cluster, ns: str) -> None:
    """rdma/hca_shared: 1 -> the shared pool's uverbs nodes, character devices."""
    create_pod(installed, ns, pod_manifest("shared", {"rdma/hca_shared": "1"}))
    wait_running(installed, ns, "shared")
    nodes = char_devices(installed, ns, "shared", "/dev/infiniband/*")
    assert any("uverbs" in n for n in nodes), nodes
