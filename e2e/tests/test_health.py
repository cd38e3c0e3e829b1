"""Health as the real kubelet sees it: an Unhealthy device leaves the Node's allocatable
and comes back when it recovers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_pod, device_resources, exec_in, pod, pod_manifest, wait_running

from conftest import devicehost_pods

# The cable of one exclusive-pool HCA (its PCI address, the device ID the kubelet sees)
# pulled or plugged at the hardware edge: the simulated sysfs port state, written inside
# devicehost's pod by the RDMA driver's own simulation helper. The pod's tree is the one
# whose lock file its host (PID 1) holds open.
SET_LINK = (
    "/opt/devicehost/bin/python -c 'import os, pathlib, sys; "
    "from devicehost_rdma.simulated import set_link; "
    'held = (os.readlink("/proc/1/fd/" + fd) for fd in os.listdir("/proc/1/fd")); '
    'tree = next(pathlib.Path(t).parent for t in held if t.endswith("/.owner.lock")) / "rdma"; '
    '(ibdev,) = os.listdir(tree / "sys/bus/pci/devices/{device}/infiniband"); '
    "sys.exit(0 if set_link(tree, ibdev, up={up}) else 1)'"
)
#: mlx5_0 on the simulated DGX H100.
FIRST_HCA = "0000:18:00.0"


@pytest.mark.nodes("dgx")
def test_hca_link_down_leaves_allocatable_and_comes_back(installed: Cluster) -> None:
    """A port of an exclusive HCA goes down: rdma/hca drops from 8 to 7 on the Node; the
    link comes back: 8 again. The shared pool does not move."""
    pod = devicehost_pods(installed)["dgx"]["metadata"]["name"]
    shared = device_resources(installed, "dgx")["rdma/hca_shared"]
    exec_in(installed, "devicehost", pod, SET_LINK.format(device=FIRST_HCA, up=False))
    try:
        wait_for(lambda: device_resources(installed, "dgx")["rdma/hca"] == "7", 90, "7 HCAs")
        assert device_resources(installed, "dgx")["rdma/hca_shared"] == shared
    finally:
        exec_in(installed, "devicehost", pod, SET_LINK.format(device=FIRST_HCA, up=True))
    wait_for(lambda: device_resources(installed, "dgx")["rdma/hca"] == "8", 90, "8 HCAs again")


def allocated_health(cluster: Cluster, ns: str, name: str, resource: str) -> dict[str, str]:
    """Device ID -> health of ``resource`` in the pod's first container's
    ``allocatedResourcesStatus`` (KEP-4680, on by default since Kubernetes 1.36)."""
    (container,) = pod(cluster, ns, name)["status"]["containerStatuses"]
    return {
        device["resourceID"]: device.get("health", "")
        for status in container.get("allocatedResourcesStatus", [])
        if status["name"] == resource
        for device in status.get("resources", [])
    }


@pytest.mark.nodes("dgx")
def test_a_running_pods_hca_turns_unhealthy_and_back_in_its_status(
    installed: Cluster, ns: str
) -> None:
    """A pod holding an exclusive HCA: its container status shows that HCA Healthy; its
    link goes down: Unhealthy; up again: Healthy, without the pod restarting."""
    create_pod(installed, ns, pod_manifest("hca", {"rdma/hca": "1"}))
    wait_running(installed, ns, "hca")
    health_follows_the_link(installed, ns, "hca", "rdma/hca", lambda device: device)


def health_follows_the_link(
    cluster: Cluster, ns: str, name: str, status: str, pci_of: Callable[[str], str]
) -> None:
    """The pod's one device under ``status`` in its container's allocatedResourcesStatus:
    Healthy; its link down (``pci_of`` gives its PCI address from the status's resource
    ID): Unhealthy; up again: Healthy, the pod never restarted."""
    health = wait_for(
        lambda: allocated_health(cluster, ns, name, status) or None,
        60,
        "the HCA in the container's allocatedResourcesStatus",
    )
    ((device, first),) = health.items()
    assert first == "Healthy", health
    devicehost = devicehost_pods(cluster)["dgx"]["metadata"]["name"]
    pci = pci_of(device)
    exec_in(cluster, "devicehost", devicehost, SET_LINK.format(device=pci, up=False))
    try:
        wait_for(
            lambda: allocated_health(cluster, ns, name, status) == {device: "Unhealthy"},
            90,
            f"{device} Unhealthy in the pod's status",
        )
    finally:
        exec_in(cluster, "devicehost", devicehost, SET_LINK.format(device=pci, up=True))
    wait_for(
        lambda: allocated_health(cluster, ns, name, status) == {device: "Healthy"},
        90,
        f"{device} Healthy again in the pod's status",
    )
    (container,) = pod(cluster, ns, name)["status"]["containerStatuses"]
    assert container["restartCount"] == 0, container
