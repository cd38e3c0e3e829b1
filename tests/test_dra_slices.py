"""ResourceSlices from device snapshots: names, attributes, splitting, health, generations."""

from __future__ import annotations

import os
import re

import kubernetes_validate
import pytest

from devicehost.kubelet.dra.attributes import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    RESOURCE,
    DeviceFacts,
    attributes_and_capacity,
    facts_from_snapshot,
    is_semver,
    pcie_root,
)
from devicehost.kubelet.dra.naming import device_name, driver_name
from devicehost.kubelet.dra.slices import (
    MAX_DEVICES,
    MAX_DEVICES_WITH_TAINTS,
    PoolDevice,
    Unhealthy,
    build_pool,
)
from devicehost.model import Device, DeviceAttributes, Health

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DRIVER = "nvidia.devicehost.io"


def facts(numa_node: int | None = None, **attributes: object) -> DeviceFacts:
    return DeviceFacts(attributes=DeviceAttributes(**attributes), numa_node=numa_node)  # type: ignore[arg-type]


def entry(device_id: str, resource: str = "nvidia.com/gpu", **kwargs: object) -> PoolDevice:
    health = kwargs.pop("health", Health.HEALTHY)
    device = Device(id=device_id, health=health, numa_nodes=(0,))  # type: ignore[arg-type]
    return PoolDevice(resource=resource, device=device, facts=facts(**kwargs))  # type: ignore[arg-type]


def devices_of(pool) -> list[dict]:
    return [d for s in pool.slices for d in s["spec"]["devices"]]


def test_driver_name_is_the_driver_under_devicehost_io():
    """A devicehost driver's DRA name is <driver>.devicehost.io, lower-cased to a DNS name."""
    assert driver_name("nvidia") == "nvidia.devicehost.io"
    assert driver_name("My_Driver") == "my-driver.devicehost.io"


def test_driver_name_override_is_used_and_checked():
    """An operator's override replaces the derived name; an invalid one is an error naming it."""
    assert driver_name("nvidia", {"nvidia": "gpu.example.com"}) == "gpu.example.com"
    with pytest.raises(ValueError, match=r"driver 'nvidia': configured DRA driver name 'GPU_X'"):
        driver_name("nvidia", {"nvidia": "GPU_X"})


@pytest.mark.parametrize(
    "device_id",
    [
        "GPU-bb5243c5-b0f8-5ceb-9598-77f90e126e71",
        "0000:18:00.0",
        "slot-7",
        "MIG-" + "f" * 59,
        "__",
    ],
)
def test_device_names_are_dns_labels(device_id):
    """Every device ID, whatever its characters or length, becomes a valid DNS label."""
    assert DNS_LABEL.match(device_name("rdma/hca_shared", device_id))


def test_a_device_id_that_is_a_label_keeps_its_name():
    """An ID already fit for a label is kept readable, with no hash: hca-shared-slot-7."""
    assert device_name("rdma/hca-shared", "slot-7") == "hca-shared-slot-7"


def test_ids_that_read_alike_get_different_names():
    """IDs differing only in case or punctuation do not share a DRA name."""
    names = {device_name("x.com/gpu", i) for i in ("GPU-a", "gpu-a", "gpu.a", "gpu:a")}
    assert len(names) == 4


def test_snapshot_gives_the_numa_node_only_when_there_is_one():
    """A device on one NUMA node publishes it; one spanning two nodes publishes none."""
    assert facts_from_snapshot(Device(id="a", numa_nodes=(1,))).numa_node == 1
    assert facts_from_snapshot(Device(id="a", numa_nodes=(0, 1))).numa_node is None


def test_snapshot_gives_the_attributes_the_driver_declared():
    """A device's declared attributes become its facts, and so its slice attributes."""
    given = DeviceAttributes(
        product="NVIDIA H100 80GB HBM3",
        pci_address="0000:1b:00.0",
        pcie_root="pci0000:15",
        memory_bytes=80 * 1024**3,
    )
    attributes, capacity, notes = attributes_and_capacity(
        facts_from_snapshot(Device(id="a", numa_nodes=(0,), attributes=given))
    )
    assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attributes["resource.kubernetes.io/pciBusID"] == {"string": "0000:1b:00.0"}
    assert attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:15"}
    assert attributes["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert capacity["memory"] == {"value": str(80 * 1024**3)}
    assert notes == []


def test_attributes_and_capacity_use_the_api_spelling():
    """Each known fact becomes its attribute (standard names for PCI, NUMA); memory a capacity."""
    given = facts(
        product="NVIDIA H100 80GB HBM3",
        mig_profile="1g.10gb",
        chip_type="910B",
        interconnect_group="nvswitch-0",
        driver_version="550.54.15",
        pci_address="0000:18:00.0",
        pcie_root="pci0000:15",
        numa_node=0,
        memory_bytes=85899345920,
    )
    attributes, capacity, notes = attributes_and_capacity(given)
    assert attributes == {
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "chipType": {"string": "910B"},
        "migProfile": {"string": "1g.10gb"},
        "interconnectGroup": {"string": "nvswitch-0"},
        "driverVersion": {"version": "550.54.15"},
        PCI_BUS_ID: {"string": "0000:18:00.0"},
        PCIE_ROOT: {"string": "pci0000:15"},
        NUMA_NODE: {"int": 0},
    }
    assert capacity == {"memory": {"value": "85899345920"}}
    assert notes == []


@pytest.mark.parametrize("version", ["535.104.05", "23.0.rc3", "1.2", "v1.2.3"])
def test_a_driver_version_that_is_not_semver_is_left_out(version):
    """A non-SemVer version would make the API refuse the slice: it is left out, with a note."""
    attributes, _, notes = attributes_and_capacity(facts(driver_version=version))
    assert "driverVersion" not in attributes
    assert notes == [f"driverVersion {version!r} is not SemVer 2.0.0"]


def test_semver_accepts_prerelease_and_build():
    """SemVer 2.0.0 prerelease and build parts are versions."""
    assert is_semver("24.1.0-rc.3+build.7")


def test_a_string_over_64_characters_is_left_out():
    """String attributes over the API's 64 characters are left out with a note."""
    attributes, _, notes = attributes_and_capacity(facts(product="x" * 65))
    assert attributes == {} and len(notes) == 1


def test_pcie_root_is_read_from_the_sysfs_link(tmp_path):
    """The root complex is the first directory under /sys/devices of the function's path."""
    real = tmp_path / "sys/devices/pci0000:15/0000:15:01.0/0000:18:00.0"
    real.mkdir(parents=True)
    links = tmp_path / "sys/bus/pci/devices"
    links.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:15/0000:15:01.0/0000:18:00.0", links / "0000:18:00.0")
    assert pcie_root(tmp_path, "0000:18:00.0") == "pci0000:15"
    assert pcie_root(tmp_path, "0000:19:00.0") is None


def test_pool_is_one_slice_per_128_devices():
    """300 devices become three slices of 128, 128 and 44, each counting three in its pool."""
    pool = build_pool(DRIVER, "node-1", [entry(f"gpu{i}") for i in range(300)])
    assert [len(s["spec"]["devices"]) for s in pool.slices] == [MAX_DEVICES, MAX_DEVICES, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in pool.slices} == {3}
    assert len({s["metadata"]["name"] for s in pool.slices}) == 3


def test_slices_pass_the_kubernetes_schema():
    """Built slices validate against the resource.k8s.io/v1 ResourceSlice schema (strict)."""
    pool = build_pool(
        DRIVER,
        "node-1",
        [entry("GPU-1", product="H100", numa_node=0, memory_bytes=1 << 30), entry("GPU-2")],
        unhealthy=Unhealthy.TAINT,
    )
    for document in pool.slices:
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def test_pool_spans_the_driver_s_resources_with_one_name_each():
    """Devices of two resources of one driver share its pool, each name mapping back."""
    pool = build_pool(
        "rdma.devicehost.io",
        "node-1",
        [entry("0000:18:00.0", resource="rdma/hca"), entry("slot-0", resource="rdma/hca_shared")],
    )
    assert {s["spec"]["pool"]["name"] for s in pool.slices} == {"node-1"}
    assert sorted(pool.devices.values()) == [
        ("rdma/hca", "0000:18:00.0"),
        ("rdma/hca_shared", "slot-0"),
    ]


def test_each_device_names_its_resource_for_a_device_class_to_select():
    """``devicehost.io/resource`` tells the devices of one driver's resources apart: what a
    DeviceClass with ``extendedResourceName`` selects on."""
    pool = build_pool(
        "rdma.devicehost.io",
        "node-1",
        [entry("0000:18:00.0", resource="rdma/hca"), entry("slot-0", resource="rdma/hca_shared")],
    )
    assert sorted(d["attributes"][RESOURCE]["string"] for d in devices_of(pool)) == [
        "rdma/hca",
        "rdma/hca_shared",
    ]


def test_a_resource_name_over_64_characters_is_left_out_with_a_note():
    long = "example.com/" + "g" * 60
    pool = build_pool(DRIVER, "node-1", [entry("gpu0", resource=long)])
    (device,) = devices_of(pool)
    assert RESOURCE not in device.get("attributes", {})
    (note,) = pool.notes
    assert "gpu0" in note and "longer than 64 characters" in note


def test_unhealthy_devices_are_withdrawn_by_default():
    """An Unhealthy device is not published, so no new claim can get it."""
    pool = build_pool(DRIVER, "n", [entry("a"), entry("b", health=Health.UNHEALTHY)])
    assert [d["name"] for d in devices_of(pool)] == [device_name("nvidia.com/gpu", "a")]


def test_unhealthy_devices_are_tainted_in_taint_mode_and_slices_shrink_to_64():
    """In taint mode an Unhealthy device is listed with a NoSchedule taint; 64 devices a slice."""
    entries = [
        entry(f"g{i}", health=Health.UNHEALTHY if i == 0 else Health.HEALTHY) for i in range(100)
    ]
    pool = build_pool(DRIVER, "n", entries, unhealthy=Unhealthy.TAINT)
    tainted = [d for d in devices_of(pool) if "taints" in d]
    assert [t["taints"][0]["effect"] for t in tainted] == ["NoSchedule"]
    assert [len(s["spec"]["devices"]) for s in pool.slices] == [MAX_DEVICES_WITH_TAINTS, 36]


def test_generation_is_kept_when_nothing_changed_and_bumped_when_health_did():
    """Rebuilding the same devices keeps the generation; a health change bumps it."""
    first = build_pool(DRIVER, "n", [entry("a"), entry("b")])
    same = build_pool(DRIVER, "n", [entry("a"), entry("b")], previous=first)
    changed = build_pool(
        DRIVER, "n", [entry("a"), entry("b", health=Health.UNHEALTHY)], previous=same
    )
    assert (first.generation, same.generation, changed.generation) == (1, 1, 2)
    assert {s["spec"]["pool"]["generation"] for s in changed.slices} == {2}


def test_an_empty_pool_is_one_empty_slice():
    """A driver with no device publishes one empty slice: the pool is known to be empty."""
    pool = build_pool(DRIVER, "n", [])
    assert [s["spec"]["devices"] for s in pool.slices] == [[]]


def test_slices_read_back_unchanged_through_the_chosen_client():
    """lightkube (the DRA face's client) parses every slice into its resource.k8s.io/v1
    model and writes it back unchanged: what it would send is what was built."""
    from lightkube.codecs import from_dict

    entries = [
        entry("GPU-1", product="H100", numa_node=0, memory_bytes=1 << 30, driver_version="1.2.3"),
        entry("GPU-2", health=Health.UNHEALTHY),
    ]
    for document in build_pool(DRIVER, "node-1", entries, unhealthy=Unhealthy.TAINT).slices:
        model = from_dict(document)
        assert type(model).__name__ == "ResourceSlice"
        assert model.to_dict() == document
