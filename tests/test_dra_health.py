"""Device health to the kubelet over the DRA health service, as the kubelet reads it: a
real gRPC stream on the DRA driver's socket of a running host, and the service alone for
its resend timing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from dra_node import DRA_RESOURCE, NODE
from test_dra_prepare import Node

from devicehost._proto.dra_health.v1 import api_pb2 as pb
from devicehost._proto.dra_health.v1 import api_pb2_grpc as pb_grpc
from devicehost._proto.dra_health.v1alpha1 import api_pb2 as alpha_pb
from devicehost._proto.dra_health.v1alpha1 import api_pb2_grpc as alpha_grpc
from devicehost.kubelet.dra.health import Changes, HealthServicer
from devicehost.kubelet.dra.naming import device_name
from devicehost.model import Device, Health
from support import eventually, scripted


def health_of(answer: pb.NodeWatchResourcesResponse) -> dict[str, int]:
    return {d.device.device_name: d.health for d in answer.devices}


def test_the_driver_advertises_the_health_service_in_both_versions(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    versions = list(node.register().supported_versions)
    assert "v1.DRAResourceHealth" in versions
    assert "v1alpha1.DRAResourceHealth" in versions


def test_a_kubelet_before_1_37_reads_health_over_v1alpha1(dra_node):
    """The alpha service streams the same pool, a health change included, to a client that
    knows only ``v1alpha1.DRAResourceHealth``."""
    node = dra_node()
    eventually(node.registration_socket.exists)
    endpoint = Path(node.register().endpoint)
    control = scripted(node.thread, DRA_RESOURCE)
    sick = device_name(DRA_RESOURCE, "dev-1")

    async def watch() -> list[alpha_pb.NodeWatchResourcesResponse]:
        seen = []
        async with grpc.aio.insecure_channel(f"unix:{endpoint}") as channel:
            stream = alpha_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                alpha_pb.NodeWatchResourcesRequest(), timeout=60
            )
            async for answer in stream:
                seen.append(answer)
                if len(seen) == 1:
                    await asyncio.to_thread(control.set_health, DRA_RESOURCE, "dev-1", False)
                elif {d.device.device_name: d.health for d in answer.devices}[sick] == (
                    alpha_pb.UNHEALTHY
                ):
                    stream.cancel()
                    return seen
        return seen

    seen = asyncio.run(watch())
    assert {d.health for d in seen[0].devices} == {alpha_pb.HEALTHY}
    (last,) = [d for d in seen[-1].devices if d.health == alpha_pb.UNHEALTHY]
    assert (last.device.pool_name, last.device.device_name) == (NODE, sick)
    assert last.message == f"{DRA_RESOURCE} dev-1 is Unhealthy"


def test_the_stream_sends_every_device_and_each_health_change(dra_node):
    """The whole pool at once, Healthy; a device turning Unhealthy is sent at once with a
    message, the others still listed."""
    node = dra_node()
    eventually(node.registration_socket.exists)
    endpoint = Path(node.register().endpoint)
    control = scripted(node.thread, DRA_RESOURCE)
    names = {i: device_name(DRA_RESOURCE, f"dev-{i}") for i in range(3)}

    async def watch() -> list[pb.NodeWatchResourcesResponse]:
        seen = []
        async with grpc.aio.insecure_channel(f"unix:{endpoint}") as channel:
            stream = pb_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                pb.NodeWatchResourcesRequest(), timeout=60
            )
            async for answer in stream:
                seen.append(answer)
                if len(seen) == 1:
                    await asyncio.to_thread(control.set_health, DRA_RESOURCE, "dev-2", False)
                elif health_of(answer)[names[2]] == pb.UNHEALTHY:
                    stream.cancel()
                    return seen
        return seen

    seen = asyncio.run(watch())
    first, last = seen[0], seen[-1]
    assert health_of(first) == {n: pb.HEALTHY for n in names.values()}
    assert {d.device.pool_name for d in first.devices} == {NODE}
    assert health_of(last) == {names[0]: pb.HEALTHY, names[1]: pb.HEALTHY, names[2]: pb.UNHEALTHY}
    (sick,) = [d for d in last.devices if d.health == pb.UNHEALTHY]
    assert sick.message == f"{DRA_RESOURCE} dev-2 is Unhealthy"
    assert sick.last_updated_time > 0


def test_an_unchanged_pool_is_sent_again_before_the_kubelet_would_mark_it_unknown(
    plugin_dir: Path,
):
    """Nothing changes, yet answers keep coming, every ``resend`` seconds."""
    node = Node(plugin_dir)
    node.devices["GPU-1"] = Device(id="GPU-1", health=Health.UNHEALTHY)
    servicer = HealthServicer(node.view, Changes(), resend=0.01)

    async def three() -> list[pb.NodeWatchResourcesResponse]:
        answers = []
        async for answer in servicer.NodeWatchResources(pb.NodeWatchResourcesRequest(), None):  # type: ignore[arg-type]
            answers.append(answer)
            if len(answers) == 3:
                return answers
        return answers

    answers = asyncio.run(three())
    assert len(answers) == 3
    assert all(health_of(a) == health_of(answers[0]) for a in answers)
    assert sorted(health_of(answers[0]).values()) == [pb.HEALTHY, pb.HEALTHY, pb.UNHEALTHY]
