"""ResourceSlices published and kept current through the real API client (lightkube) over
HTTP, against the API server stand-in (``apiserver.ApiServer``); in a running host, a
device's health change reaches the slice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from apiserver import ApiServer
from dra_node import DRA_RESOURCE, DRIVER, NODE

from devicehost.kubelet.dra.api import LightkubeApi, MissingClient
from devicehost.kubelet.dra.attributes import facts_from_snapshot
from devicehost.kubelet.dra.naming import device_name
from devicehost.kubelet.dra.publisher import SlicePublisher
from devicehost.kubelet.dra.slices import PoolDevice, slice_name
from devicehost.model import Device, DeviceAttributes, Health
from support import eventually, scripted

RESOURCE = "example.com/gpu"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    with ApiServer() as server:
        server.add_node(NODE)
        yield server


def gpu(index: int, health: Health = Health.HEALTHY, product: str = "") -> Device:
    return Device(id=f"GPU-{index}", health=health, attributes=DeviceAttributes(product=product))


class Pool:
    """The devices a publisher reads, changed by the test."""

    def __init__(self, *devices: Device) -> None:
        self.devices = list(devices)

    def entries(self) -> list[PoolDevice]:
        return [
            PoolDevice(resource=RESOURCE, device=d, facts=facts_from_snapshot(d))
            for d in self.devices
        ]


def publish(
    api: ApiServer,
    tmp_path: Path,
    pool: Pool,
    body: Callable[[SlicePublisher], Awaitable[None]],
    errors: list[str] | None = None,
) -> None:
    """Run a publisher on ``pool`` while ``body`` runs."""

    async def main() -> None:
        client = LightkubeApi(api.write_kubeconfig(tmp_path / "kubeconfig"))
        publisher = SlicePublisher(
            client,
            DRIVER,
            NODE,
            pool.entries,
            on_error=(errors.append if errors is not None else lambda name: None),
            first_retry=0.01,
            max_retry=0.05,
        )
        task = asyncio.create_task(publisher.run())
        try:
            await body(publisher)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    asyncio.run(main())


async def until(predicate: Callable[[], object], timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def devices_of(api: ApiServer) -> list[str]:
    return sorted(d["name"] for s in api.slices.values() for d in s["spec"]["devices"])


def generation(api: ApiServer) -> int:
    (only,) = {s["spec"]["pool"]["generation"] for s in api.slices.values()}
    return int(only)


def test_the_pool_is_published_owned_by_the_node(api, tmp_path):
    node_uid = api.nodes[NODE]["metadata"]["uid"]

    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: api.slices)

    publish(api, tmp_path, Pool(gpu(0), gpu(1)), body)
    (document,) = api.slices.values()
    assert document["metadata"]["name"] == slice_name(NODE, DRIVER, 0)
    assert document["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
    ]
    assert document["spec"]["nodeName"] == NODE
    assert devices_of(api) == sorted(device_name(RESOURCE, f"GPU-{i}") for i in (0, 1))
    (apply,) = api.calls("PATCH")
    assert apply.query["fieldManager"] == ["devicehost"]
    assert apply.query["force"] == ["true"]


def test_a_device_turning_unhealthy_leaves_the_slice_in_a_new_generation(api, tmp_path):
    pool = Pool(gpu(0), gpu(1))

    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: len(devices_of(api)) == 2)
        pool.devices[1] = gpu(1, Health.UNHEALTHY)
        publisher.changed()
        await until(lambda: len(devices_of(api)) == 1)

    publish(api, tmp_path, pool, body)
    assert devices_of(api) == [device_name(RESOURCE, "GPU-0")]
    assert generation(api) == 2


def test_an_attribute_change_alone_is_published(api, tmp_path):
    pool = Pool(gpu(0, product="H100"))

    def product() -> str | None:
        devices = [d for s in api.slices.values() for d in s["spec"]["devices"]]
        return devices[0]["attributes"]["productName"]["string"] if devices else None

    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: product() == "H100")
        pool.devices[0] = gpu(0, product="H200")
        publisher.changed()
        await until(lambda: product() == "H200")

    publish(api, tmp_path, pool, body)
    assert generation(api) == 2


def test_an_unchanged_pool_is_not_applied_again(api, tmp_path):
    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: api.slices)
        publisher.changed()
        await asyncio.sleep(0.2)  # a wrong publisher would apply again in this time

    publish(api, tmp_path, Pool(gpu(0)), body)
    assert len(api.calls("PATCH")) == 1


def test_a_registration_applies_every_slice_again(api, tmp_path):
    """The kubelet may have deleted them while the driver was unregistered."""

    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: api.slices)
        api.slices.clear()
        publisher.republish()
        await until(lambda: api.slices)

    publish(api, tmp_path, Pool(gpu(0)), body)
    assert len(api.calls("PATCH")) == 2
    assert generation(api) == 1


def test_a_restart_continues_the_generation_and_deletes_slices_it_no_longer_has(api, tmp_path):
    """An earlier run left two slices at generation 7: the new pool is generation 8, in
    one slice, and the second slice is deleted."""
    left = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 7, "resourceSliceCount": 2},
            "devices": [],
        },
    }
    for index in (0, 1):
        name = slice_name(NODE, DRIVER, index)
        api.slices[name] = {**left, "metadata": {"name": name}}
    other = slice_name(NODE, "other.example.com", 0)
    api.slices[other] = {
        **left,
        "metadata": {"name": other},
        "spec": {**left["spec"], "driver": "other.example.com"},
    }

    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: slice_name(NODE, DRIVER, 1) not in api.slices)

    publish(api, tmp_path, Pool(gpu(0)), body)
    assert sorted(api.slices) == sorted([slice_name(NODE, DRIVER, 0), other])
    assert api.slices[slice_name(NODE, DRIVER, 0)]["spec"]["pool"]["generation"] == 8


def test_api_errors_are_retried_reported_and_the_latest_pool_published(api, tmp_path):
    pool = Pool(gpu(0), gpu(1))
    errors: list[str] = []
    api.fail(3, 503, "etcdserver: request timed out")

    async def body(publisher: SlicePublisher) -> None:
        await until(lambda: errors)
        assert publisher.last_error is not None
        assert "503" in publisher.last_error
        assert "etcdserver: request timed out" in publisher.last_error
        pool.devices.pop()  # a change while failing: the next attempt publishes it
        await until(lambda: publisher.published is not None)
        assert publisher.last_error is None

    publish(api, tmp_path, pool, body, errors)
    assert errors == [DRIVER] * 3
    assert devices_of(api) == [device_name(RESOURCE, "GPU-0")]


def test_a_kubeconfig_that_cannot_be_read_is_a_clear_error(tmp_path):
    with pytest.raises(MissingClient, match="cannot load the API server's configuration from"):
        LightkubeApi(tmp_path / "missing")


# -- in a running host ---------------------------------------------------------------------


def taints_of(api: ApiServer, name: str) -> list[dict] | None:
    """The taints of device ``name`` in the stored slices (None: not listed)."""
    for document in api.slices.values():
        for device in document["spec"]["devices"]:
            if device["name"] == name:
                return list(device.get("taints", []))
    return None


def test_an_unhealthy_device_in_a_running_host_is_tainted_by_default(dra_node):
    """dra.unhealthy's default: listed with a NoSchedule taint, untainted once Healthy."""
    node = dra_node()
    api = node.api
    name = device_name(DRA_RESOURCE, "dev-2")
    api.wait_for(lambda: taints_of(api, name) == [])
    control = scripted(node.thread, DRA_RESOURCE)
    control.set_health(DRA_RESOURCE, "dev-2", False)
    taint = {"key": "devicehost.io/unhealthy", "value": "true", "effect": "NoSchedule"}
    api.wait_for(lambda: taints_of(api, name) == [taint])
    assert generation(api) == 2
    control.set_health(DRA_RESOURCE, "dev-2", True)
    api.wait_for(lambda: taints_of(api, name) == [])
    assert generation(api) == 3


def test_withdraw_leaves_an_unhealthy_device_out_of_the_slice(dra_node):
    node = dra_node(dra_unhealthy="withdraw")
    api = node.api
    name = device_name(DRA_RESOURCE, "dev-2")
    api.wait_for(lambda: name in devices_of(api))
    scripted(node.thread, DRA_RESOURCE).set_health(DRA_RESOURCE, "dev-2", False)
    api.wait_for(lambda: name not in devices_of(api))
    assert generation(api) == 2


def test_an_api_server_that_refuses_is_counted_and_shown(dra_node):
    node = dra_node()
    api = node.api
    api.wait_for(lambda: api.slices)
    api.fail(1000, 403, 'resourceslices.resource.k8s.io "x" is forbidden')
    api.slices.clear()
    node.thread.call(lambda: node.host.dra.drivers["alpha"].publisher.republish())
    eventually(lambda: "publishError" in node.thread.call(node.host.dra.row, "alpha"))
    row = node.thread.call(node.host.dra.row, "alpha")
    assert "403 Forbidden" in row["publishError"]
    metrics = node.host.telemetry.metrics
    assert metrics.slice_publish_errors.value(driver=DRIVER) >= 1
