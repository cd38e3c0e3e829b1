"""devicehost outlives the kubelet's restarts and its own pod's."""

from __future__ import annotations

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_pod, environment, pod, pod_manifest, wait_running

from conftest import devicehost_pods, wait_devicehost_ready


@pytest.mark.nodes("dgx")
def test_kubelet_restart_keeps_pods_and_serves_new_ones(installed: Cluster, ns: str) -> None:
    """The kubelet killed and started again: devicehost registers again (a new pod gets a
    GPU), and the pod that ran before is the same container, never restarted."""
    create_pod(installed, ns, pod_manifest("before", {"nvidia.com/gpu": "1"}))
    before = wait_running(installed, ns, "before")["status"]["containerStatuses"][0]
    sockets_before = installed.in_node("dgx", ["ls", "/var/lib/kubelet/device-plugins"])
    installed.stop_kubelet("dgx")
    installed.start_kubelet("dgx")
    wait_for(lambda: installed.node_ready("dgx"), 120, "dgx Ready again")
    create_pod(installed, ns, pod_manifest("after", {"nvidia.com/gpu": "1"}, node="dgx"))
    wait_running(installed, ns, "after")
    assert environment(installed, ns, "after")["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    now = pod(installed, ns, "before")["status"]["containerStatuses"][0]
    assert now["containerID"] == before["containerID"] and now["restartCount"] == 0
    assert "kubelet.sock" in sockets_before


@pytest.mark.nodes("dgx")
def test_deleted_devicehost_pod_is_replaced_and_serves(installed: Cluster, ns: str) -> None:
    """The DaemonSet's pod on the DGX deleted: a new one becomes Ready and a GPU pod runs."""
    old = devicehost_pods(installed)["dgx"]["metadata"]
    installed.kubectl("-n", "devicehost", "delete", "pod", old["name"], "--wait=true")
    wait_for(
        lambda: (
            devicehost_pods(installed).get("dgx", {}).get("metadata", {}).get("uid")
            not in (None, old["uid"])
        ),
        120,
        "a new devicehost pod on dgx",
    )
    wait_devicehost_ready(installed, ["dgx"])
    create_pod(installed, ns, pod_manifest("gpu", {"nvidia.com/gpu": "1"}, node="dgx"))
    wait_running(installed, ns, "gpu")
