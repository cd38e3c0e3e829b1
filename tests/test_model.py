"""The values drivers return, and what makes one unusable."""

from __future__ import annotations

import pytest

from devicehost import Allocation, Device, DeviceNode, Health, Mount, ResourceSpec


@pytest.mark.parametrize(
    ("device_id", "problem"),
    [
        ("x" * 63, None),
        ("x" * 64, "longer than 63 characters"),
        ("a/b", "contains '/'"),
        ("a\x00b", "contains '/', NUL"),
        ("", "not a non-empty string"),
    ],
)
def test_device_id_rules(device_id, problem):
    """IDs of at most 63 printable characters without '/' are accepted, others explained."""
    found = Device(id=device_id).problem()
    assert (found is None) if problem is None else (problem in found)


def test_health_must_be_kubelet_spelling():
    """Only 'Healthy' and 'Unhealthy' are legal health values."""
    assert Device(id="a", health="Healthy").problem() is None
    assert "expected Healthy or Unhealthy" in Device(id="a", health="healthy").problem()
    assert Device(id="a", health=Health.UNHEALTHY).healthy is False


@pytest.mark.parametrize(
    "name", ["nvidia.com/gpu", "huawei.com/Ascend910-4c", "rdma/hca_shared_devices_a"]
)
def test_valid_resource_names(name):
    """Extended resource names of the field are accepted."""
    assert ResourceSpec(name=name).name == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("gpu", "is not of the form 'domain/name'"),
        ("kubernetes.io/gpu", "reserved kubernetes.io domain"),
        ("Vendor.com/gpu", "is not of the form"),
    ],
)
def test_invalid_resource_names(name, message):
    """Names without a domain, or in kubernetes.io, are refused with the reason."""
    with pytest.raises(ValueError, match=message):
        ResourceSpec(name=name)


def test_socket_name_is_a_safe_file_name():
    """A resource's socket name has no '/' and is unique per resource name."""
    assert ResourceSpec(name="nvidia.com/gpu").socket_name == "devicehost-nvidia.com_gpu.sock"


@pytest.mark.parametrize(
    "path", ["relative/dev", "/dev/../etc/shadow", "/dev/x\x00", "/dev//x", "/dev/./x"]
)
def test_paths_outside_what_was_declared_are_refused(path):
    """Relative paths, '..', '.', '//' and NUL never reach the kubelet as mounts or nodes."""
    with pytest.raises(ValueError):
        DeviceNode(host_path=path)
    with pytest.raises(ValueError):
        Mount(host_path=path, container_path="/x")


def test_device_node_defaults():
    """A device node is mapped to the same path with 'rw' unless told otherwise."""
    node = DeviceNode(host_path="/dev/nvidia0")
    assert (node.container_path, node.permissions) == ("/dev/nvidia0", "rw")
    with pytest.raises(ValueError, match="subset of 'rwm'"):
        DeviceNode(host_path="/dev/x", permissions="rwx")


def test_allocation_checks_cdi_names_and_merges():
    """CDI names must be fully qualified; merged() adds another allocation's items."""
    with pytest.raises(ValueError, match=r"vendor\.com/class=name"):
        Allocation(cdi_devices=("gpu0",))
    merged = Allocation(envs={"A": "1"}, cdi_devices=("nvidia.com/gpu=GPU-1",)).merged(
        Allocation(envs={"B": "2"}, mounts=(Mount(host_path="/a", container_path="/b"),))
    )
    assert merged.envs == {"A": "1", "B": "2"}
    assert merged.cdi_devices == ("nvidia.com/gpu=GPU-1",)
    assert len(merged.mounts) == 1
