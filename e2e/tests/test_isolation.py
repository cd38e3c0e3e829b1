"""One driver's worker dying inside the real pod costs only that driver's resources."""

from __future__ import annotations

import json
import re

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import device_resources, devicehost_tree, exec_in

from conftest import devicehost_pods

# What a resource belongs to, by its name's prefix (the DGX node serves these two drivers).
DRIVER_OF = {"nvidia.com/": "nvidia", "rdma/": "rdma"}


def driver_of(resource: str) -> str:
    return next(d for prefix, d in DRIVER_OF.items() if resource.startswith(prefix))


@pytest.mark.nodes("dgx")
def test_killed_worker_costs_only_its_drivers_resources(installed: Cluster) -> None:
    """SIGKILL to one driver's worker (the zygote's first child, whichever driver that is):
    the host reports that driver down and restarts it, its resources come back in full,
    and the other driver's never move."""
    pod = devicehost_pods(installed)["dgx"]["metadata"]["name"]
    before = device_resources(installed, "dgx")
    assert {driver_of(r) for r in before} == {"nvidia", "rdma"}, before
    _, _, workers = devicehost_tree(installed, "devicehost", pod)
    assert len(workers) == 2, workers
    exec_in(installed, "devicehost", pod, f"kill -9 {workers[0]}")

    def down_driver() -> str | None:
        for line in installed.kubectl("-n", "devicehost", "logs", pod).stdout.splitlines():
            if line.startswith("{"):
                m = re.match(r"driver '(\w+)' is down", json.loads(line)["message"])
                if m:
                    return m.group(1)
        return None

    victim = wait_for(down_driver, 60, "a driver reported down")
    survivors = {r: n for r, n in before.items() if driver_of(r) != victim}
    assert survivors, f"every resource belongs to {victim}"

    def recovered() -> bool:
        now = device_resources(installed, "dgx")
        assert {r: now.get(r) for r in survivors} == survivors, now
        return now == before

    # The Node's allocatable can lag the kill by a status update, so "back" alone could be
    # seen before it ever dropped: the restarted worker is what shows the recovery.
    def restarted() -> list[int] | None:
        now = devicehost_tree(installed, "devicehost", pod)[2]
        return now if workers[0] not in now and len(now) == 2 else None

    wait_for(restarted, 60, f"{victim}'s worker started again")
    wait_for(recovered, 120, f"{victim}'s resources back")
