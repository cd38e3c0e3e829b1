"""Every bundled driver's Allocate answer, composed by the host from the declared edits.

Each driver runs on its simulated node in its own worker process and is served to the
kubelet stand-in over real sockets. For one device, two devices and every healthy device of
each resource, the answer the kubelet receives is checked against the rules, worked out
here from what the driver declared (the devices and the resource in the host's snapshot):
a joined variable is the devices' values joined with commas, de-duplicated, in request
order; any other variable is the value the devices declared; no device node or mount is
given twice; and the resource's own edits are in every container exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from devicehost import ContainerEdits
from devicehost.drivers.ownership import Claim as Resource
from devicehost.testing import HostThread, KubeletStandIn
from support import eventually
from testdrivers.declaring import JOINED, write_devices

DRIVERS = ["nvidia", "ascend", "rdma", "template"]
#: Shared RDMA pools advertise many slots of the same devices; "every device" takes this
#: many of them, which already names each member many times over.
EVERY_LIMIT = 64


def expected_env(resource: Resource, ids: Sequence[str]) -> dict[str, str]:
    """The env a container must get, from the declared edits alone."""
    spec, devices = resource.spec, resource.state.devices
    env = dict(spec.edits.envs)
    for name in spec.joined_envs:
        values: list[str] = []
        for device_id in ids:
            value = devices[device_id].edits.envs.get(name)
            for part in value.split(",") if value else []:
                if part not in values:
                    values.append(part)
        if values:
            env[name] = ",".join(values)
    for device_id in ids:
        for name, value in devices[device_id].edits.envs.items():
            if name not in spec.joined_envs:
                env[name] = value
    return env


def declared_paths(edits: ContainerEdits) -> tuple[set[str], set[str]]:
    return {d.host_path for d in edits.devices}, {m.container_path for m in edits.mounts}


def check_answer(resource: Resource, ids: Sequence[str], answer: ContainerEdits) -> None:
    nodes = [d.host_path for d in answer.devices]
    mounts = [m.container_path for m in answer.mounts]
    assert len(nodes) == len(set(nodes)), f"a device node is given twice: {nodes}"
    assert len(mounts) == len(set(mounts)), f"a mount is given twice: {mounts}"
    assert answer.envs == expected_env(resource, ids)
    want_nodes, want_mounts = declared_paths(resource.spec.edits)
    for device_id in ids:
        device_nodes, device_mounts = declared_paths(resource.state.devices[device_id].edits)
        want_nodes |= device_nodes
        want_mounts |= device_mounts
    assert set(nodes) == want_nodes
    assert set(mounts) == want_mounts


def healthy_ids(resource: Resource) -> list[str]:
    return [i for i, d in resource.state.devices.items() if d.healthy]


@pytest.mark.parametrize("driver", DRIVERS)
def test_one_two_and_every_device_compose_by_the_rules(run_host, kubelet, driver):
    host: HostThread = run_host(simulate=True, enabled_drivers=(driver,))
    assert host.host.resources, f"{driver} serves nothing on its simulated node"
    for name, resource in host.host.resources.items():
        kubelet.wait_registered(name)
        ids = healthy_ids(resource)
        assert len(ids) >= 2, f"{name}: the simulated node has fewer than two healthy devices"
        for request in (ids[:1], ids[:2], ids[:EVERY_LIMIT]):
            answer = kubelet.allocate(name, [request])
            assert len(answer) == 1
            check_answer(resource, request, answer[0])


@pytest.mark.parametrize("driver", DRIVERS)
def test_resource_edits_go_to_every_container_once(run_host, kubelet, driver):
    """Two containers in one Allocate each get the resource's edits, and only their own
    devices' edits."""
    host: HostThread = run_host(simulate=True, enabled_drivers=(driver,))
    for name, resource in host.host.resources.items():
        kubelet.wait_registered(name)
        ids = healthy_ids(resource)
        first, second = [ids[0]], [ids[-1]]
        answers = kubelet.allocate(name, [first, second])
        for request, answer in zip((first, second), answers, strict=True):
            check_answer(resource, request, answer)


def test_a_drivers_allocate_answer_is_merged_with_the_composed_edits(
    install, run_host, kubelet: KubeletStandIn
):
    """Without CDI, a driver that implements allocate gets its answer merged into the
    composed one: the declared edits and its own additions are both there."""
    install(
        "devicehost-declaring",
        drivers={"declaring": "testdrivers.declaring:DeclaringWithAllocate"},
    )
    host = run_host(enabled_drivers=("declaring",), drivers={"declaring": {}})
    resource_name = "test.example/declared"
    kubelet.wait_registered(resource_name)
    eventually(lambda: len(host.host.resources[resource_name].state.devices) == 4)
    resource = host.host.resources[resource_name]
    (answer,) = kubelet.allocate(resource_name, [["dev-1", "dev-2"]])
    assert answer.envs[JOINED] == "dev-1,dev-2"
    assert answer.envs["DECLARED_AT_ALLOCATE"] == "dev-1,dev-2"
    nodes = {d.host_path for d in answer.devices}
    composed, _ = declared_paths(resource.spec.edits)
    assert composed | {"/dev/declared1", "/dev/declared2", "/dev/declared-session"} == nodes


def test_a_device_whose_edits_change_is_answered_with_its_new_edits(
    install, run_host, kubelet: KubeletStandIn, tmp_path
):
    """A one-device answer is composed once per snapshot: when only a device's edits change
    (no health or membership change), the next Allocate of it carries the new edits."""
    install("devicehost-declaring", drivers={"declaring": "testdrivers.declaring:Declaring"})
    devices = tmp_path / "devices.json"
    write_devices(devices, [{"id": "dev-0", "index": 0}, {"id": "dev-1", "index": 1}])
    run_host(enabled_drivers=("declaring",), drivers={"declaring": {"devicesFile": str(devices)}})
    resource = "test.example/declared"
    kubelet.wait_devices(resource, lambda d: len(d) == 2)

    def nodes() -> set[str]:
        return {d.host_path for d in kubelet.allocate(resource, [["dev-1"]])[0].devices}

    assert "/dev/declared1" in nodes()
    write_devices(
        devices, [{"id": "dev-0", "index": 0}, {"id": "dev-1", "index": 1, "node": "/dev/moved"}]
    )
    eventually(lambda: "/dev/moved" in nodes())
    assert "/dev/declared1" not in nodes()
