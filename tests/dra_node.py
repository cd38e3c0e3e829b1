"""A started host serving one resource through DRA, and the node around it: the kubelet's
plugin watcher and DRA calls played by a real gRPC client, the API server by
``apiserver.ApiServer`` reached through the host's real client (lightkube).

The fixtures ``api_server`` and ``dra_node`` are registered in conftest.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from apiserver import ApiServer

from devicehost._proto.dra.v1 import api_pb2 as dra
from devicehost._proto.dra.v1 import api_pb2_grpc as dra_grpc
from devicehost._proto.pluginregistration.v1 import api_pb2 as reg
from devicehost._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from devicehost.testing.hostthread import HostThread
from support import SCRIPTED

DRA_RESOURCE = "test.example/gpu"
PLUGIN_RESOURCE = "test.example/nic"
DRIVER = "alpha.devicehost.io"
NODE = "node-1"
UID = "0b5a7d52-4c1e-4b8e-9d6c-6f1f6d3f8a01"


class DraNode:
    """A started host serving the scripted driver 'alpha' with one resource through DRA
    and one as a device plugin, and the kubelet's DRA side of the node."""

    def __init__(self, host: HostThread, api: ApiServer, kubelet_dir: Path, cdi_dir: Path):
        self.thread = host
        self.host = host.host
        self.api = api
        self.kubelet_dir = kubelet_dir
        self.cdi_dir = cdi_dir

    def add_claim(
        self, name: str, uid: str, devices: list[str], pod: tuple[str, str] | None = None
    ) -> None:
        """An allocated ResourceClaim on the API server, its devices from this pool, reserved
        for ``pod`` (name, UID) when given."""
        results = [
            {"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in devices
        ]
        self.api.claims["default", name] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "default", "name": name, "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
        if pod is not None:
            reserved = [{"resource": "pods", "name": pod[0], "uid": pod[1]}]
            self.api.claims["default", name]["status"]["reservedFor"] = reserved

    @property
    def registration_socket(self) -> Path:
        return self.kubelet_dir / "plugins_registry" / f"{DRIVER}-reg.sock"

    def call(self, socket: Path, stub: Any, method: str, request: Any, metadata: Any = ()) -> Any:
        async def ask() -> Any:
            async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
                call = getattr(stub(channel), method)
                return await call(request, timeout=10, metadata=metadata or None)

        return asyncio.run(ask())

    def register(self) -> reg.PluginInfo:
        """What the plugin watcher does on a new registration socket."""
        info = self.call(
            self.registration_socket, reg_grpc.RegistrationStub, "GetInfo", reg.InfoRequest()
        )
        self.call(
            self.registration_socket,
            reg_grpc.RegistrationStub,
            "NotifyRegistrationStatus",
            reg.RegistrationStatus(plugin_registered=True),
        )
        return info

    def prepare(
        self, name: str, uid: str, metadata: tuple[tuple[str, str], ...] = ()
    ) -> dra.NodePrepareResourcesResponse:
        endpoint = Path(self.register().endpoint)
        request = dra.NodePrepareResourcesRequest(
            claims=[dra.Claim(namespace="default", name=name, uid=uid)]
        )
        return self.call(
            endpoint, dra_grpc.DRAPluginStub, "NodePrepareResources", request, metadata
        )


@pytest.fixture
def api_server() -> Iterator[ApiServer]:
    with ApiServer() as api:
        api.add_node(NODE)
        yield api


@pytest.fixture
def dra_node(install, host_config, kubelet, plugin_dir, api_server):
    """``dra_node(**overrides)``: a started host, DRA for ``DRA_RESOURCE``."""
    started: list[HostThread] = []

    def start(target: str = SCRIPTED, **overrides: Any) -> DraNode:
        install("devicehost-alpha", drivers={"alpha": target})
        kubelet_dir, cdi_dir = plugin_dir / "k", plugin_dir / "cdi"
        cdi_dir.mkdir()
        settings = {
            "enabledDrivers": ["alpha"],
            "drivers": {"alpha": {"resources": {DRA_RESOURCE: 3, PLUGIN_RESOURCE: 2}}},
            "resources": {DRA_RESOURCE: {"api": "dra"}},
            "nodeName": NODE,
            "dra": {
                "kubeletDir": str(kubelet_dir),
                "kubeconfig": str(api_server.write_kubeconfig(plugin_dir / "kubeconfig")),
            },
            "cdi": {"dir": str(cdi_dir)},
            **overrides,
        }
        thread = HostThread(host_config, **settings)
        assert thread.host.dra is not None
        started.append(thread)
        thread.start()
        return DraNode(thread, api_server, kubelet_dir, cdi_dir)

    yield start
    for thread in started:
        thread.stop()
