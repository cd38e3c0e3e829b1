"""Time-slicing: N replica IDs per GPU, renaming, replica placement, and mapping back."""

from collections import Counter

import pytest
from devicehost_nvidia import default_node
from devicehost_nvidia.simulated import sim_uuid
from nvidia_helpers import MakeDriver, composed


def _shared(replicas: int = 4, **options: object) -> dict[str, object]:
    return {
        "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}], **options}
    }


def test_replicas_advertise_n_ids_per_gpu(make_driver: MakeDriver) -> None:
    """replicas: 4 on 8 GPUs advertises 32 IDs "<uuid>::<k>", each at most 63 characters."""
    driver = make_driver(_shared())
    ids = [d.id for d in driver.devicehost_enumerate(resource="nvidia.com/gpu")]
    assert len(ids) == 32
    assert ids[:4] == [f"{sim_uuid(0)}::{k}" for k in range(4)]
    assert max(len(i) for i in ids) <= 63


def test_replicas_keep_the_gpus_numa_node(make_driver: MakeDriver) -> None:
    """Every replica reports its physical GPU's NUMA node."""
    devices = make_driver(_shared()).devicehost_enumerate(resource="nvidia.com/gpu")
    assert {d.numa_nodes for d in devices if d.id.startswith(sim_uuid(7))} == {(1,)}


@pytest.mark.parametrize(
    ("options", "entry", "name"),
    [
        ({}, {}, "nvidia.com/gpu"),
        ({"renameByDefault": True}, {}, "nvidia.com/gpu.shared"),
        ({}, {"rename": "example.com/shared-gpu"}, "example.com/shared-gpu"),
    ],
)
def test_shared_resource_name(make_driver: MakeDriver, options, entry, name) -> None:
    """Replicas keep the name, take ".shared" by default when asked, or an explicit rename."""
    config = {
        "timeSlicing": {
            "resources": [{"name": "nvidia.com/gpu", "replicas": 2, **entry}],
            **options,
        }
    }
    assert [r.name for r in make_driver(config).devicehost_resources()] == [name]


def test_unmatched_shared_resource_is_noted(make_driver: MakeDriver) -> None:
    """A time-slicing entry for a resource this node lacks is reported, not an error."""
    config = {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}
    notes = make_driver(config).devicehost_notes()
    assert any("'nvidia.com/mig-1g.10gb' matches nothing on this node" in n for n in notes)


def test_replica_allocation_maps_back_to_distinct_gpus(make_driver: MakeDriver) -> None:
    """Replicas of one GPU name it once; replicas of two GPUs name both, in request order."""
    driver = make_driver(_shared())
    ids = [f"{sim_uuid(3)}::0", f"{sim_uuid(3)}::2", f"{sim_uuid(1)}::1"]
    allocation = composed(driver, "nvidia.com/gpu", ids)
    assert allocation.envs == {"NVIDIA_VISIBLE_DEVICES": f"{sim_uuid(3)},{sim_uuid(1)}"}


def test_replica_past_the_count_is_not_advertised(make_driver: MakeDriver) -> None:
    """Replica IDs stop at the configured count (the host refuses any other ID)."""
    ids = {d.id for d in make_driver(_shared()).devicehost_enumerate(resource="nvidia.com/gpu")}
    assert f"{sim_uuid(0)}::3" in ids and f"{sim_uuid(0)}::4" not in ids


def _gpus(ids: list[str]) -> Counter[str]:
    return Counter(i.split("::")[0] for i in ids)


def test_distributed_spreads_a_request_over_gpus(make_driver: MakeDriver) -> None:
    """Distributed (the default): 3 replicas come from 3 different GPUs."""
    driver = make_driver(_shared(), node=default_node(gpus=4))
    available = [d.id for d in driver.devicehost_enumerate(resource="nvidia.com/gpu")]
    chosen = driver.devicehost_preferred_allocation(
        resource="nvidia.com/gpu", available=available, must_include=[], size=3
    )
    assert len(chosen) == 3 and len(_gpus(chosen)) == 3


def test_distributed_prefers_the_least_used_gpu(make_driver: MakeDriver) -> None:
    """With GPU 0 half used, a one-replica request goes to a GPU with all replicas free."""
    driver = make_driver(_shared(), node=default_node(gpus=2))
    available = [f"{sim_uuid(0)}::2", f"{sim_uuid(0)}::3"] + [
        f"{sim_uuid(1)}::{k}" for k in range(4)
    ]
    chosen = driver.devicehost_preferred_allocation(
        resource="nvidia.com/gpu", available=available, must_include=[], size=1
    )
    assert _gpus(chosen) == {sim_uuid(1): 1}


def test_packed_fills_the_most_used_gpu_first(make_driver: MakeDriver) -> None:
    """Packed: replicas come from the GPU already in use, then from one GPU at a time."""
    driver = make_driver(_shared(replicaAllocation="packed"), node=default_node(gpus=3))
    available = [f"{sim_uuid(1)}::3"] + [f"{sim_uuid(g)}::{k}" for g in (0, 2) for k in range(4)]
    chosen = driver.devicehost_preferred_allocation(
        resource="nvidia.com/gpu", available=available, must_include=[], size=3
    )
    assert chosen[0] == f"{sim_uuid(1)}::3"
    assert _gpus(chosen) == {sim_uuid(1): 1, sim_uuid(0): 2}


def test_replica_preference_keeps_must_include(make_driver: MakeDriver) -> None:
    """must_include is always in the answer, and distributed avoids its GPU for the rest."""
    driver = make_driver(_shared(), node=default_node(gpus=2))
    available = [d.id for d in driver.devicehost_enumerate(resource="nvidia.com/gpu")]
    must = [f"{sim_uuid(1)}::2"]
    chosen = driver.devicehost_preferred_allocation(
        resource="nvidia.com/gpu", available=available, must_include=must, size=2
    )
    assert chosen[0] == must[0] and _gpus(chosen) == {sim_uuid(0): 1, sim_uuid(1): 1}
