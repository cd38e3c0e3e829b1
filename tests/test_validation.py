"""The host's checks on a snapshot's plain data (validation.py), case by case."""

from __future__ import annotations

from devicehost.drivers.validation import devices_from_plain
from devicehost.model import ContainerEdits, DeviceNode

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
