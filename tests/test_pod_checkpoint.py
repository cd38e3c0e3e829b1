"""Pod UIDs from the kubelet's device-manager checkpoint, read as the kubelet writes it
(kubernetes pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from devicehost.kubelet.deviceplugin.checkpoint import CHECKPOINT_FILE, DeviceCheckpoint
from devicehost.model import Device
from devicehost.testing.checkpoint import CheckpointWriter

GPU = "nvidia.com/gpu"


def write(path: Path, entries: list[dict]) -> None:
    """A checkpoint shaped as a 1.37 kubelet writes it, BootID and AllocResp included."""
    document = {
        "Data": {"PodDeviceEntries": entries, "RegisteredDevices": {GPU: ["GPU-0", "GPU-1"]}},
        "Checksum": 2731185839,
        "BootID": "5e0a6c1e-4b7a-4a8e-9f7d-2b1c3d4e5f60",
    }
    temporary = path.with_name(".tmp")
    temporary.write_text(json.dumps(document))
    os.replace(temporary, path)


def entry(uid: str, container: str, ids: dict[str, list[str]], resource: str = GPU) -> dict:
    return {
        "PodUID": uid,
        "ContainerName": container,
        "ResourceName": resource,
        "DeviceIDs": ids,
        "AllocResp": "CiQKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSCkdQVS0w",
    }


def test_the_pod_holding_the_devices_is_found_across_numa_nodes(tmp_path: Path) -> None:
    """A container's devices spread over NUMA nodes (keys "0", "1"; "-1" without
    topology) are one set: the pod whose container holds them all is named."""
    path = tmp_path / CHECKPOINT_FILE
    write(path, [entry("uid-a", "main", {"0": ["GPU-0"], "1": ["GPU-1"], "-1": ["GPU-7"]})])
    assert DeviceCheckpoint(path).pod_uid(GPU, "main", ["GPU-1", "GPU-0"]) == "uid-a"


def test_another_container_or_resource_gives_no_uid(tmp_path: Path) -> None:
    """An entry counts only for its own container and resource."""
    path = tmp_path / CHECKPOINT_FILE
    write(path, [entry("uid-a", "main", {"0": ["GPU-0"]})])
    checkpoint = DeviceCheckpoint(path)
    assert checkpoint.pod_uid(GPU, "sidecar", ["GPU-0"]) is None
    assert checkpoint.pod_uid("rdma/hca", "main", ["GPU-0"]) is None


def test_two_pods_claiming_the_devices_give_no_uid(tmp_path: Path) -> None:
    """A stale entry beside the new one (two pods, same container name, same devices):
    no UID rather than a guess."""
    path = tmp_path / CHECKPOINT_FILE
    write(path, [entry("old", "main", {"0": ["GPU-0"]}), entry("new", "main", {"0": ["GPU-0"]})])
    assert DeviceCheckpoint(path).pod_uid(GPU, "main", ["GPU-0"]) is None


def test_a_rewritten_checkpoint_is_read_again(tmp_path: Path) -> None:
    """The kubelet replaces the file after each allocation: the next lookup sees it."""
    path = tmp_path / CHECKPOINT_FILE
    write(path, [])
    checkpoint = DeviceCheckpoint(path)
    assert checkpoint.pod_uid(GPU, "main", ["GPU-0"]) is None
    write(path, [entry("uid-b", "main", {"0": ["GPU-0"]})])
    assert checkpoint.pod_uid(GPU, "main", ["GPU-0"]) == "uid-b"


def test_a_missing_or_foreign_file_gives_no_uid(tmp_path: Path) -> None:
    """No file, a file that is not JSON, or JSON of another shape: no UID, no exception."""
    path = tmp_path / CHECKPOINT_FILE
    assert DeviceCheckpoint(path).pod_uid(GPU, "main", ["GPU-0"]) is None
    for text in ("{not json", '{"Data": []}', '{"Data": {"PodDeviceEntries": [7, null]}}'):
        path.write_text(text)
        assert DeviceCheckpoint(path).pod_uid(GPU, "main", ["GPU-0"]) is None


def test_the_stand_in_writes_what_the_reader_reads(tmp_path: Path) -> None:
    """The kit's writer lays an entry out as the kubelet does (IDs by NUMA node, -1
    without topology, the answer in base64), which the reader finds, until the pod is
    forgotten."""
    writer = CheckpointWriter(tmp_path)
    devices = {"GPU-0": Device(id="GPU-0", numa_nodes=(1,)), "GPU-9": Device(id="GPU-9")}
    writer.allocated("uid-a", "main", GPU, devices, ["GPU-0", "GPU-9"], b"\x0a\x00", {GPU: []})
    document = json.loads((tmp_path / CHECKPOINT_FILE).read_text())
    (written,) = document["Data"]["PodDeviceEntries"]
    assert written["DeviceIDs"] == {"1": ["GPU-0"], "-1": ["GPU-9"]}
    assert written["AllocResp"] == "CgA="
    assert DeviceCheckpoint(tmp_path / CHECKPOINT_FILE).pod_uid(GPU, "main", ["GPU-9"]) == "uid-a"
    writer.forget("uid-a", {GPU: []})
    assert DeviceCheckpoint(tmp_path / CHECKPOINT_FILE).pod_uid(GPU, "main", ["GPU-9"]) is None


# -- the file as untrusted input: whatever lies at its path costs only the UID ------------


def uid_within(checkpoint: DeviceCheckpoint, seconds: float = 10.0) -> str | None:
    """``pod_uid`` run in a thread: a read that blocks or never ends fails the test
    instead of hanging it."""
    import threading

    result: list[str | None] = []
    reader = threading.Thread(
        target=lambda: result.append(checkpoint.pod_uid(GPU, "main", ["GPU-0"])), daemon=True
    )
    reader.start()
    reader.join(seconds)
    assert result, "reading the checkpoint did not return"
    return result[0]


def test_a_symlink_to_an_endless_device_is_not_followed(tmp_path: Path, caplog) -> None:
    """A checkpoint that is a symlink to /dev/zero is refused at open (read without end
    otherwise), with one log line however often it is asked."""
    path = tmp_path / CHECKPOINT_FILE
    path.symlink_to("/dev/zero")
    checkpoint = DeviceCheckpoint(path)
    assert uid_within(checkpoint) is None
    assert uid_within(checkpoint) is None
    refusals = [r for r in caplog.records if "not read" in r.getMessage()]
    assert len(refusals) == 1 and "following a link" in refusals[0].getMessage()


def test_a_fifo_neither_blocks_nor_is_read(tmp_path: Path) -> None:
    """A FIFO at the checkpoint's path (whose plain open blocks for good) is opened
    without blocking and refused: not a regular file."""
    path = tmp_path / CHECKPOINT_FILE
    os.mkfifo(path)
    assert uid_within(DeviceCheckpoint(path)) is None


def test_a_file_over_the_bound_is_not_parsed(tmp_path: Path) -> None:
    """A checkpoint over MAX_CHECKPOINT_BYTES of tiny entries (parsed, ~25 times its size)
    is refused after reading one byte past the bound, even with the container's entry
    first in it."""
    from devicehost.kubelet.deviceplugin.checkpoint import MAX_CHECKPOINT_BYTES

    path = tmp_path / CHECKPOINT_FILE
    first = json.dumps(entry("uid-a", "main", {"0": ["GPU-0"]})).encode()
    padding = b",{}" * (MAX_CHECKPOINT_BYTES // 3 + 1)
    path.write_bytes(b'{"Data":{"PodDeviceEntries":[' + first + padding + b"]}}")
    assert uid_within(DeviceCheckpoint(path)) is None


def test_deep_nesting_and_bytes_that_are_not_text_cost_only_the_uid(tmp_path: Path) -> None:
    """JSON nested 100 000 deep (a RecursionError in the parser) and bytes that are not
    UTF-8 each give no UID, and raise nothing."""
    path = tmp_path / CHECKPOINT_FILE
    checkpoint = DeviceCheckpoint(path)
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert uid_within(checkpoint) is None
    path.write_bytes(b'{"Data": "\xff\xfe"}')
    assert uid_within(checkpoint) is None


def test_a_good_file_is_read_again_after_a_refused_one(tmp_path: Path) -> None:
    """Once the kubelet writes its checkpoint over whatever lay there (a FIFO), the UID is
    found again."""
    path = tmp_path / CHECKPOINT_FILE
    os.mkfifo(path)
    checkpoint = DeviceCheckpoint(path)
    assert uid_within(checkpoint) is None
    write(path, [entry("uid-a", "main", {"0": ["GPU-0"]})])
    assert uid_within(checkpoint) == "uid-a"
