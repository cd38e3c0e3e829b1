"""The baseline: a minimal grpcio device plugin, no host, no drivers, no checks.

It serves ``N`` static devices on one socket, registers once per kubelet.sock it sees
(polling every 10 ms — the simplest restart handling that works), answers Allocate with
one env var, and GetPreferredAllocation with the first IDs. It is what devicehost is
measured against: the cost of Python and grpcio alone.

    python -m bench.minimal_plugin --plugin-dir DIR [--devices N] [--resource NAME]

``--resource`` (default ``bench.example/minimal``) names its resource, and its socket after
it, so several can run side by side as one vendor plugin per resource does today.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc

RESOURCE = "bench.example/minimal"
SOCKET = "minimal.sock"


class Minimal(pb_grpc.DevicePluginServicer):
    def __init__(self, count: int) -> None:
        self.devices = pb.ListAndWatchResponse(
            devices=[pb.Device(ID=f"dev-{i}", health="Healthy") for i in range(count)]
        )

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    async def ListAndWatch(self, request: Any, context: Any) -> Any:
        yield self.devices
        await asyncio.Event().wait()

    async def Allocate(self, request: Any, context: Any) -> Any:
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(envs={"MINIMAL_DEVICES": ",".join(c.devices_ids)})
                for c in request.container_requests
            ]
        )

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(
                    deviceIDs=list(c.available_deviceIDs)[: c.allocation_size]
                )
                for c in request.container_requests
            ]
        )


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns


def socket_name(resource: str) -> str:
    return SOCKET if resource == RESOURCE else resource.replace("/", "_") + ".sock"


async def main(plugin_dir: Path, count: int, resource: str = RESOURCE) -> None:
    socket, kubelet = plugin_dir / socket_name(resource), plugin_dir / "kubelet.sock"
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    registered: tuple[int, int] | None = None
    server: grpc.aio.Server | None = None
    while not stop.is_set():
        if server is None or not socket.exists():
            if server is not None:
                await server.stop(None)
            with contextlib.suppress(FileNotFoundError):
                socket.unlink()
            server = grpc.aio.server()
            pb_grpc.add_DevicePluginServicer_to_server(Minimal(count), server)
            server.add_insecure_port(f"unix:{socket}")
            await server.start()
            registered = None
        now = _identity(kubelet)
        if now is not None and now != registered:
            try:
                async with grpc.aio.insecure_channel(f"unix://{kubelet}") as channel:
                    await pb_grpc.RegistrationStub(channel).Register(
                        pb.RegisterRequest(
                            version="v1beta1",
                            endpoint=socket.name,
                            resource_name=resource,
                            options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
                        ),
                        timeout=5,
                    )
                registered = now
            except grpc.aio.AioRpcError:
                pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.01)
    if server is not None:
        await server.stop(None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plugin-dir", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--resource", default=RESOURCE)
    args = parser.parse_args()
    asyncio.run(main(args.plugin_dir, args.devices, args.resource))
