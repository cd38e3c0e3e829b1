"""The DevicePlugin service over real unix sockets, as the kubelet stand-in sees it."""

from __future__ import annotations

import logging
import os
import stat

import grpc
import pytest

from devicehost import Device, Health
from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from support import SCRIPTED
from support import scripted as scripted_control

RES = "test.example/dev"


@pytest.fixture
def scripted(install, run_host, kubelet):
    """Start a host serving the scripted driver 'alpha'; return a function to reach it."""

    def start(config=None, target=SCRIPTED, **overrides):
        install("devicehost-alpha", drivers={"alpha": target})
        section = {"resources": {RES: 4}, **(config or {})}
        host = run_host(enabled_drivers=("alpha",), drivers={"alpha": section}, **overrides)
        kubelet.wait_registered(RES)
        kubelet.wait_devices(RES, lambda d: len(d) == section["resources"].get(RES, 0))
        return host, scripted_control(host, RES)

    return start


def test_register_request_names_version_socket_resource_options(scripted, kubelet):
    """RegisterRequest carries v1beta1, our socket's file name, the resource and the options."""
    scripted()
    request = kubelet.wait_registered(RES)
    assert request.version == "v1beta1"
    assert request.endpoint == "devicehost-test.example_dev.sock"
    assert request.resource_name == RES
    assert request.options.get_preferred_allocation_available is True
    assert request.options.pre_start_required is False


def test_socket_is_private(scripted, kubelet):
    """Our socket is a unix socket with mode 0600."""
    scripted()
    mode = os.lstat(kubelet.plugin_dir / "devicehost-test.example_dev.sock").st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_list_and_watch_sends_full_list_with_topology(scripted, kubelet):
    """The first list has every device, Healthy, with its NUMA node."""
    scripted()
    devices = kubelet.devices(RES)
    assert sorted(devices) == ["dev-0", "dev-1", "dev-2", "dev-3"]
    assert {d.health for d in devices.values()} == {"Healthy"}
    assert devices["dev-1"].numa_nodes == (1,)


def test_health_flips_both_ways(scripted, kubelet):
    """A device turning Unhealthy and then Healthy again is streamed each time."""
    _host, driver = scripted()
    driver.set_health(RES, "dev-2", False)
    kubelet.wait_health(RES, "dev-2", "Unhealthy")
    driver.set_health(RES, "dev-2", True)
    kubelet.wait_health(RES, "dev-2", "Healthy")


def test_devices_appear_and_disappear(scripted, kubelet):
    """A removed device leaves the list and a new one joins it."""
    _host, driver = scripted()
    new = [Device(id="dev-0"), Device(id="dev-9")]
    driver.set_devices(RES, new)
    devices = kubelet.wait_devices(RES, lambda d: sorted(d) == ["dev-0", "dev-9"])
    assert "dev-3" not in devices


def test_concurrent_streams_all_receive_updates(scripted, kubelet):
    """A second ListAndWatch stream on the same socket receives the same change."""
    _host, driver = scripted()
    socket = kubelet.plugin_dir / "devicehost-test.example_dev.sock"
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
        assert {d.health for d in next(stream).devices} == {"Healthy"}
        driver.set_health(RES, "dev-1", False)
        update = {d.ID: d.health for d in next(stream).devices}
        stream.cancel()
    assert update["dev-1"] == "Unhealthy"
    kubelet.wait_health(RES, "dev-1", "Unhealthy")


def test_allocate_answers_each_container_in_order(scripted, kubelet):
    """Two container requests get two responses, each for its own devices, in order."""
    scripted()
    response = kubelet.allocate(RES, [["dev-1"], ["dev-2", "dev-3"]])
    envs = [dict(c.envs) for c in response]
    assert envs == [{"SCRIPTED_DEVICES": "dev-1"}, {"SCRIPTED_DEVICES": "dev-2,dev-3"}]
    second = response[1]
    assert [d.host_path for d in second.devices] == ["/dev/scripted/dev-2", "/dev/scripted/dev-3"]
    assert second.devices[0].permissions == "rw"
    assert [(m.host_path, m.container_path, m.read_only) for m in second.mounts] == [
        ("/opt/scripted/lib", "/usr/lib/scripted", True)
    ]


def test_allocate_unknown_id_is_invalid_argument(scripted, kubelet):
    """An unknown device ID is refused with INVALID_ARGUMENT naming the ID and resource."""
    scripted()
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-1", "nope-7"]])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == f"unknown device ID 'nope-7' for resource '{RES}'"


def test_same_device_in_two_containers_is_invalid_argument(scripted, kubelet):
    """One device named in two containers of one Allocate is refused, naming the device and
    both containers; the driver is not asked."""
    _, driver = scripted()
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-0", "dev-1"], ["dev-2", "dev-1"]])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == (
        f"resource '{RES}': device 'dev-1' is named in containers 0 and 1 of one Allocate"
    )
    assert not [c for c in driver.calls if c[0] == "devicehost_allocate"]


@pytest.mark.parametrize(
    ("must", "chosen"), [([], ["dev-0", "dev-2"]), (["gone-9"], ["dev-0", "dev-2"])]
)
def test_preferred_allocation_drops_ids_the_device_list_does_not_know(
    scripted, kubelet, must, chosen
):
    """A kubelet list older than our snapshot names a device we no longer have: the
    preference is made from the known devices (a failed preference would fail the pod)."""
    scripted()
    available = ["dev-0", "gone-9", "dev-1", "dev-2"]
    assert kubelet.preferred_allocation(RES, available, must, 2) == chosen


def test_preferred_allocation_with_too_few_known_ids_answers_no_preference(scripted, kubelet):
    """When too few known devices are left to choose from, the answer is an empty preference
    (the kubelet then picks from its own list), never an error."""
    scripted()
    assert kubelet.preferred_allocation(RES, ["dev-0", "gone-8", "gone-9"], [], 2) == []


def test_driver_choosing_a_preference_never_sees_unknown_ids(scripted, kubelet):
    """A driver's preferred_allocation hook is asked about known devices only."""
    scripted(target="testdrivers.scripted:ScriptedWithPreStart")
    chosen = kubelet.preferred_allocation(RES, ["dev-0", "dev-1", "dev-3", "gone-9"], [], 2)
    # The driver picks the last ones it is offered: offered 'gone-9', it would pick it.
    assert chosen == ["dev-3", "dev-1"]


def test_allocate_unhealthy_is_failed_precondition(scripted, kubelet):
    """An Unhealthy device is never handed out: FAILED_PRECONDITION, driver not called."""
    _host, driver = scripted()
    driver.set_health(RES, "dev-0", False)
    kubelet.wait_health(RES, "dev-0", "Unhealthy")
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-0"]])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert refused.value.details() == f"device 'dev-0' of resource '{RES}' is Unhealthy"
    assert not [c for c in driver.calls if c[0] == "devicehost_allocate"]


def test_allocate_driver_exception_is_internal_and_host_keeps_serving(scripted, kubelet):
    """A driver raising in allocate gives INTERNAL with its message; the stream stays up."""
    _host, driver = scripted({"raise": ["devicehost_allocate"]})
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-0"]])
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    assert refused.value.details() == (
        "driver 'alpha', hook devicehost_allocate: RuntimeError: scripted failure"
    )
    driver.set_health(RES, "dev-3", False)
    kubelet.wait_health(RES, "dev-3", "Unhealthy")


def test_allocate_driver_hang_is_deadline_exceeded(scripted, kubelet):
    """A driver hook that hangs past the hook timeout gives DEADLINE_EXCEEDED."""
    scripted({"hang": ["devicehost_allocate"]}, hook_timeout=0.3)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-0"]])
    assert refused.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "did not return within 0.3 s" in refused.value.details()


def test_invalid_device_ids_are_dropped_with_a_log_line(scripted, kubelet, caplog):
    """A 64-character ID and an ID with '/' are refused at enumeration, the rest served."""
    _host, driver = scripted()
    caplog.set_level(logging.ERROR, logger="devicehost")
    good, long_id = Device(id="dev-0"), Device(id="x" * 64)
    driver.set_devices(RES, [good, long_id, Device(id="a/b")])
    kubelet.wait_devices(RES, lambda d: list(d) == ["dev-0"])
    messages = [r.getMessage() for r in caplog.records]
    assert any("driver 'alpha'" in m and "longer than 63" in m for m in messages)
    assert any("driver 'alpha'" in m and "'a/b'" in m for m in messages)


def test_bad_health_and_duplicates_are_dropped(scripted, kubelet):
    """A device with an illegal health string or a repeated ID is dropped; the rest stay."""
    _host, driver = scripted()
    devices = [Device(id="dev-0"), Device(id="dev-0"), Device(id="dev-5", health="Broken")]
    driver.set_devices(RES, devices)
    listed = kubelet.wait_devices(RES, lambda d: list(d) == ["dev-0"])
    assert listed["dev-0"].health == Health.HEALTHY


def test_preferred_allocation_default_packs_numa(scripted, kubelet):
    """Without a driver hook, the host packs onto one NUMA node, must-include first."""
    scripted()
    chosen = kubelet.preferred_allocation(
        RES, ["dev-0", "dev-1", "dev-2", "dev-3"], must_include=["dev-3"], size=2
    )
    assert chosen == ["dev-3", "dev-1"]


@pytest.mark.parametrize(
    ("available", "must", "size"),
    [(["dev-0"], [], 2), (["dev-0", "dev-1"], ["dev-2"], 1), (["dev-0"], [], 0)],
)
def test_preferred_allocation_impossible_is_invalid_argument(
    scripted, kubelet, available, must, size
):
    """Asking for more than available, or must-include outside available, is refused."""
    scripted()
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.preferred_allocation(RES, available, must, size)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_driver_preferred_allocation_and_pre_start_are_used(scripted, kubelet):
    """A driver with those hooks gets pre_start_required and its own choice is returned."""
    _, driver = scripted(target="testdrivers.scripted:ScriptedWithPreStart")
    assert kubelet.options(RES).pre_start_required is True
    chosen = kubelet.preferred_allocation(RES, ["dev-0", "dev-1", "dev-2"], ["dev-0"], 2)
    assert chosen == ["dev-0", "dev-2"]
    kubelet.pre_start(RES, ["dev-1"])
    assert ("devicehost_pre_start", {"resource": RES, "device_ids": ["dev-1"]}) in driver.calls
