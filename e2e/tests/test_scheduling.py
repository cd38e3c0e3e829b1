"""The scheduler places each pod on the node with its hardware."""

from __future__ import annotations

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_pod, pod, pod_manifest, scheduling_failure, wait_running


@pytest.mark.nodes("dgx", "atlas")
def test_gpu_pod_goes_to_dgx_and_ascend_pod_to_atlas(installed: Cluster, ns: str) -> None:
    """No node selector: the resources alone decide where each pod runs."""
    create_pod(installed, ns, pod_manifest("gpu", {"nvidia.com/gpu": "1"}))
    create_pod(installed, ns, pod_manifest("npu", {"huawei.com/Ascend910": "1"}))
    assert wait_running(installed, ns, "gpu")["spec"]["nodeName"] == "dgx"
    assert wait_running(installed, ns, "npu")["spec"]["nodeName"] == "atlas"


@pytest.mark.nodes("dgx", "atlas")
def test_pod_asking_for_gpu_and_npu_stays_pending(installed: Cluster, ns: str) -> None:
    """No node has both, so the scheduler says so and the pod stays Pending."""
    limits = {"nvidia.com/gpu": "1", "huawei.com/Ascend910": "1"}
    create_pod(installed, ns, pod_manifest("both", limits))
    message = wait_for(lambda: scheduling_failure(installed, ns, "both"), 60, "FailedScheduling")
    assert "Insufficient" in message, message
    assert pod(installed, ns, "both")["status"]["phase"] == "Pending"
