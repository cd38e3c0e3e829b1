"""Health as the real kubelet sees it: an Unhealthy device leaves the Node's allocatable
and comes back when it recovers."""

from __future__ import annotations

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import device_resources, exec_in

from conftest import devicehost_pods

# The cable of one exclusive-pool HCA (mlx5_0, 0000:18:00.0 on the simulated DGX H100)
# pulled or plugged at the hardware edge: the simulated sysfs port state, written inside
# devicehost's pod by the RDMA driver's own simulation helper.
SET_LINK = (
    "/opt/devicehost/bin/python -c 'import glob, pathlib, sys; "
    "from devicehost_rdma.simulated import set_link; "
    'root = pathlib.Path(glob.glob("/dev/shm/devicehost-sim-*/rdma")[0]); '
    'sys.exit(0 if set_link(root, "mlx5_0", up={up}) else 1)\''
)


@pytest.mark.nodes("dgx")
def test_hca_link_down_leaves_allocatable_and_comes_back(installed: Cluster) -> None:
    """A port of an exclusive HCA goes down: rdma/hca drops from 8 to 7 on the Node; the
    link comes back: 8 again. The shared pool does not move."""
    pod = devicehost_pods(installed)["dgx"]["metadata"]["name"]
    shared = device_resources(installed, "dgx")["rdma/hca_shared"]
    exec_in(installed, "devicehost", pod, SET_LINK.format(up=False))
    try:
        wait_for(lambda: device_resources(installed, "dgx")["rdma/hca"] == "7", 90, "7 HCAs")
        assert device_resources(installed, "dgx")["rdma/hca_shared"] == shared
    finally:
        exec_in(installed, "devicehost", pod, SET_LINK.format(up=True))
    wait_for(lambda: device_resources(installed, "dgx")["rdma/hca"] == "8", 90, "8 HCAs again")
