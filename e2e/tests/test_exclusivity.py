"""A device is given to one pod at a time."""

from __future__ import annotations

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_pod, pod, pod_manifest, scheduling_failure, wait_running


@pytest.mark.nodes("dgx")
def test_pod_beyond_what_is_left_waits_then_runs(installed: Cluster, ns: str) -> None:
    """Six GPUs taken, a pod asking for four stays Pending with the scheduler's reason, and
    runs once the first pod is deleted."""
    create_pod(installed, ns, pod_manifest("first", {"nvidia.com/gpu": "6"}))
    wait_running(installed, ns, "first")
    create_pod(installed, ns, pod_manifest("second", {"nvidia.com/gpu": "4"}))
    message = wait_for(lambda: scheduling_failure(installed, ns, "second"), 60, "FailedScheduling")
    assert "Insufficient nvidia.com/gpu" in message, message
    assert pod(installed, ns, "second")["status"]["phase"] == "Pending"
    installed.kubectl("-n", ns, "delete", "pod", "first", "--wait=true")
    assert wait_running(installed, ns, "second", timeout=240)["spec"]["nodeName"] == "dgx"
