"""The host's checks on a snapshot's plain data (validation.py), case by case."""

from __future__ import annotations

import pytest

from devicehost.drivers.validation import devices_from_plain
from devicehost.model import NO_ATTRIBUTES, ContainerEdits, DeviceAttributes, DeviceNode

SHARED = {
    "envs": {"RDMA_DEVICES": "mlx5_0"},
    "devices": [{"host_path": "/dev/infiniband/uverbs0", "permissions": "rw"}],
}


def slot(index: int, edits: object) -> dict[str, object]:
    return {"id": f"slot-{index}", "health": "Healthy", "numa_nodes": [0], "edits": edits}


def test_devices_that_share_edits_are_each_checked_and_keep_them():
    """A shared pool's devices carry the same edits: every device gets them, a bad copy
    among them is dropped with its reason, and an edit that differs is not confused with
    the shared one."""
    other = {**SHARED, "envs": {"RDMA_DEVICES": "mlx5_1"}}
    bad = {**SHARED, "devices": [{"host_path": "../escape"}]}
    data = [slot(0, SHARED), slot(1, dict(SHARED)), slot(2, bad), slot(3, other)]
    devices, problems = devices_from_plain("rdma", data)
    assert [d.id for d in devices] == ["slot-0", "slot-1", "slot-3"]
    expected = ContainerEdits(
        envs={"RDMA_DEVICES": "mlx5_0"},
        devices=(DeviceNode(host_path="/dev/infiniband/uverbs0"),),
    )
    assert devices[0].edits == devices[1].edits == expected
    assert devices[2].edits.envs == {"RDMA_DEVICES": "mlx5_1"}
    assert len(problems) == 1 and "'slot-2'" in problems[0]


def test_attributes_that_keep_the_rules_cross_unchanged():
    """A device's attributes arrive as the driver gave them."""
    data = [
        {"id": "gpu0", "health": "Healthy", "attributes": {"product": "H100", "memory_bytes": 8}}
    ]
    (device,), problems = devices_from_plain("nvidia", data)
    assert device.attributes == DeviceAttributes(product="H100", memory_bytes=8)
    assert problems == []


def test_an_attribute_the_api_would_refuse_costs_the_attributes_not_the_device():
    """A string over 64 characters, a malformed PCI address, negative memory, a wrong
    type or an unknown name: the device is kept without attributes, and the problem names
    the device and the attribute."""
    bad = [
        {"product": "x" * 65},
        {"pci_address": "0000:3B:00.0"},
        {"memory_bytes": -1},
        {"chip_type": 7},
        {"colour": "red"},
        "not a mapping",
    ]
    data = [{"id": f"d{i}", "health": "Healthy", "attributes": a} for i, a in enumerate(bad)]
    devices, problems = devices_from_plain("acme", data)
    assert [d.id for d in devices] == [f"d{i}" for i in range(len(bad))]
    assert all(d.attributes == NO_ATTRIBUTES for d in devices)
    assert len(problems) == len(bad)
    for index, (problem, name) in enumerate(
        zip(
            problems,
            ["product", "pci_address", "memory_bytes", "chip_type", "colour", "attributes"],
            strict=True,
        )
    ):
        assert problem.startswith(f"device 'd{index}': ") and name in problem, problem


def test_a_scan_logs_attributes_left_out_and_keeps_serving_the_device(
    install, run_host, kubelet, caplog
):
    """Through a real host: a device whose attributes break a rule is listed to the
    kubelet, and the log says the attributes were left out, naming driver and device."""
    import logging

    caplog.set_level(logging.ERROR, logger="devicehost")
    install("devicehost-attrs", drivers={"attrs": "testdrivers.attributed:Attributed"})
    run_host(enabled_drivers=("attrs",))
    devices = kubelet.wait_devices("example.com/attr", lambda d: len(d) == 2)
    assert sorted(devices) == ["bad", "good"]
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        "driver 'attrs'" in m and "device 'bad'" in m and "its attributes left out" in m
        for m in lines
    ), lines


# -- field caps (docs/reliability.md, Limits) -------------------------------------------------

FIELD_CAPS = [
    ("env name", {"envs": {"E" * 257: "1"}}, "over the limit of 256"),
    (
        "env value",
        {"envs": {"E": "v" * 65_537}},
        "env 'E''s value is 65537 bytes, over the limit of 65536",
    ),
    ("annotation key", {"annotations": {"a" * 318: "1"}}, "over the limit of 317"),
    ("annotation value", {"annotations": {"a": "v" * 65_537}}, "over the limit of 65536"),
    (
        "mount path",
        {"mounts": [{"host_path": "/" + "m" * 4095, "container_path": "/m"}]},
        "mount host path",
    ),
    (
        "device path",
        {"devices": [{"host_path": "/dev/x", "container_path": "/" + "d" * 4095}]},
        "device node container path",
    ),
    ("CDI name", {"cdi_devices": ["vendor.example/class=" + "n" * 500]}, "over the limit of 512"),
]


@pytest.mark.parametrize(("field", "edits", "message"), FIELD_CAPS, ids=[c[0] for c in FIELD_CAPS])
def test_a_field_over_its_cap_drops_the_device_naming_field_and_limit(field, edits, message):
    """The device is dropped with its reason (the scan logs it with the driver's and the
    resource's names, as for any dropped device); the driver's other devices stay."""
    data = [slot(0, edits), slot(1, SHARED)]
    devices, problems = devices_from_plain("rdma", data)
    assert [d.id for d in devices] == ["slot-1"]
    (problem,) = problems
    assert "'slot-0'" in problem, problem
    assert message in problem and "docs/reliability.md, Limits" in problem, problem


@pytest.mark.parametrize(
    "edits",
    [
        {"envs": {"E" * 256: "v" * 65_536}},
        {"annotations": {"a" * 317: "v" * 65_536}},
        {"mounts": [{"host_path": "/" + "m" * 4094, "container_path": "/m"}]},
        {"cdi_devices": ["vendor.example/class=" + "n" * 491]},
    ],
)
def test_a_field_at_its_cap_is_kept(edits):
    devices, problems = devices_from_plain("rdma", [slot(0, edits)])
    assert problems == [] and [d.id for d in devices] == ["slot-0"]
