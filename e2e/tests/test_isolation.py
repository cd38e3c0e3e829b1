"""One driver's worker dying inside the real pod costs only that driver's resources."""

from __future__ import annotations

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import device_resources

from conftest import devicehost_pods

# The worker's command line names its driver (python -m devicehost.drivers.worker ... --name
# nvidia ...). Found and killed with the shell's builtins: the image has no procps.
KILL_WORKER = r"""
for d in /proc/[0-9]*; do
  cmd="$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)"
  case "$cmd" in
    *devicehost.drivers.worker*"--name nvidia "*) kill -9 "${d#/proc/}"; echo "${d#/proc/}";;
  esac
done
"""


@pytest.mark.nodes("dgx")
def test_killed_gpu_worker_is_restarted_and_rdma_never_moves(installed: Cluster) -> None:
    """SIGKILL to the NVIDIA driver's worker: the supervisor restarts it (the log says so),
    the GPUs are allocatable again, and the RDMA pools stay as they were all along."""
    pod = devicehost_pods(installed)["dgx"]["metadata"]["name"]
    rdma = {k: v for k, v in device_resources(installed, "dgx").items() if k.startswith("rdma/")}
    killed = installed.kubectl(
        "-n", "devicehost", "exec", pod, "--", "/bin/sh", "-c", KILL_WORKER
    ).stdout.split()
    assert killed, "no nvidia worker found in the pod"

    def restarted() -> bool:
        log = installed.kubectl("-n", "devicehost", "logs", pod).stdout
        return "driver 'nvidia'" in log and "starting its worker again" in log

    wait_for(restarted, 90, "the nvidia worker restarted")
    wait_for(lambda: device_resources(installed, "dgx").get("nvidia.com/gpu") == "8", 90, "GPUs")
    now = device_resources(installed, "dgx")
    assert {k: v for k, v in now.items() if k.startswith("rdma/")} == rdma
