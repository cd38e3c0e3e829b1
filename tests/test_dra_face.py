"""The DRA face in a running host: resources configured ``api: dra`` are served through DRA
and never as device plugins, over real unix sockets, with drivers found through real entry
points.

A real gRPC client plays the kubelet's plugin watcher (GetInfo, NotifyRegistrationStatus on
the registration socket) and its DRA calls; claims come through the ``ClaimSource``
interface from a dict of ResourceClaim documents (``test_dra_prepare.DictClaims``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from test_dra_prepare import DictClaims

from devicehost._proto.dra.v1 import api_pb2 as dra
from devicehost._proto.dra.v1 import api_pb2_grpc as dra_grpc
from devicehost._proto.pluginregistration.v1 import api_pb2 as reg
from devicehost._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from devicehost.kubelet.dra.naming import device_name
from devicehost.testing.hostthread import HostThread
from support import SCRIPTED, eventually

DRA_RESOURCE = "test.example/gpu"
PLUGIN_RESOURCE = "test.example/nic"
DRIVER = "alpha.devicehost.io"
NODE = "node-1"
UID = "0b5a7d52-4c1e-4b8e-9d6c-6f1f6d3f8a01"


class DraNode:
    """A started host serving the scripted driver 'alpha' with one resource through DRA
    and one as a device plugin, and the kubelet's DRA side of the node."""

    def __init__(self, host: HostThread, claims: DictClaims, kubelet_dir: Path, cdi_dir: Path):
        self.thread = host
        self.host = host.host
        self.claims = claims
        self.kubelet_dir = kubelet_dir
        self.cdi_dir = cdi_dir

    @property
    def registration_socket(self) -> Path:
        return self.kubelet_dir / "plugins_registry" / f"{DRIVER}-reg.sock"

    def call(self, socket: Path, stub: Any, method: str, request: Any) -> Any:
        async def ask() -> Any:
            async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
                return await getattr(stub(channel), method)(request, timeout=10)

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

    def prepare(self, name: str, uid: str) -> dra.NodePrepareResourcesResponse:
        endpoint = Path(self.register().endpoint)
        request = dra.NodePrepareResourcesRequest(
            claims=[dra.Claim(namespace="default", name=name, uid=uid)]
        )
        return self.call(endpoint, dra_grpc.DRAPluginStub, "NodePrepareResources", request)


@pytest.fixture
def dra_node(install, host_config, kubelet, plugin_dir):
    """``dra_node(**overrides)``: a started host, DRA for ``DRA_RESOURCE``."""
    started: list[HostThread] = []

    def start(**overrides: Any) -> DraNode:
        install("devicehost-alpha", drivers={"alpha": SCRIPTED})
        kubelet_dir, cdi_dir = plugin_dir / "k", plugin_dir / "cdi"
        cdi_dir.mkdir()
        settings = {
            "enabledDrivers": ["alpha"],
            "drivers": {"alpha": {"resources": {DRA_RESOURCE: 3, PLUGIN_RESOURCE: 2}}},
            "resources": {DRA_RESOURCE: {"api": "dra"}},
            "nodeName": NODE,
            "dra": {"kubeletDir": str(kubelet_dir)},
            "cdi": {"dir": str(cdi_dir)},
            **overrides,
        }
        thread = HostThread(host_config, **settings)
        claims = DictClaims()
        assert thread.host.dra is not None
        thread.host.dra.claims = claims
        started.append(thread)
        thread.start()
        return DraNode(thread, claims, kubelet_dir, cdi_dir)

    yield start
    for thread in started:
        thread.stop()


def test_a_dra_resource_gets_a_registration_socket_naming_its_dra_socket(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    info = node.register()
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert info.endpoint == str(node.kubelet_dir / "plugins" / DRIVER / "dra.sock")


def test_a_dra_resource_is_never_also_a_device_plugin(dra_node, kubelet):
    """The device-plugin resource of the same driver registers; the DRA one does not."""
    node = dra_node()
    kubelet.wait_registered(PLUGIN_RESOURCE)
    eventually(node.registration_socket.exists)
    assert DRA_RESOURCE not in {r.resource_name for r in kubelet.registrations_raw}
    assert not any(DRA_RESOURCE.replace("/", "_") in p.name for p in kubelet.plugin_dir.iterdir())


def test_a_claim_on_the_dra_resource_is_prepared_from_the_driver_s_snapshot(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    device = device_name(DRA_RESOURCE, "dev-1")
    node.claims.add("gpus", UID, [device], driver=DRIVER)  # pool: the node, NODE
    answer = node.prepare("gpus", UID)
    entry = answer.claims[UID]
    assert entry.error == ""
    assert [d.device_name for d in entry.devices] == [device]
    assert entry.devices[0].pool_name == NODE
    specs = [json.loads(p.read_text()) for p in node.cdi_dir.glob("*.json")]
    assert [s["kind"] for s in specs] == [f"k8s.devicehost.io/dra.{DRIVER}"]


def test_readiness_waits_for_the_plugin_watcher_to_register_the_dra_driver(dra_node, kubelet):
    node = dra_node()
    kubelet.wait_registered(PLUGIN_RESOURCE)
    eventually(node.registration_socket.exists)
    waiting = [f"DRA driver {DRIVER} is not registered with the kubelet"]
    eventually(lambda: node.thread.call(node.host.not_ready) == waiting)
    node.register()
    eventually(lambda: node.thread.call(node.host.not_ready) == [])


def test_without_a_node_name_the_dra_resource_is_refused_and_the_rest_served(dra_node, kubelet):
    node = dra_node(nodeName="")
    kubelet.wait_registered(PLUGIN_RESOURCE)
    eventually(lambda: len(node.thread.call(node.host.not_ready)) == 1)
    (reason,) = node.thread.call(node.host.not_ready)
    assert reason.startswith(f"resource {DRA_RESOURCE!r}: DRA names its pool after the node")
    assert not node.registration_socket.exists()


def test_a_dra_driver_name_that_is_no_dns_subdomain_is_refused_by_name(dra_node, kubelet):
    node = dra_node(dra={"kubeletDir": "/unused", "driverNames": {"alpha": "Alpha_GPU"}})
    kubelet.wait_registered(PLUGIN_RESOURCE)
    eventually(lambda: len(node.thread.call(node.host.not_ready)) == 1)
    (reason,) = node.thread.call(node.host.not_ready)
    assert "'Alpha_GPU' is not a lower-case DNS subdomain" in reason


def test_devicehost_drivers_shows_which_resources_go_through_dra(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    (row,) = [r for r in node.thread.call(node.host.driver_states) if r["name"] == "alpha"]
    assert sorted(row["resources"]) == [DRA_RESOURCE, PLUGIN_RESOURCE]
    assert row["dra"] == {"name": DRIVER, "resources": [DRA_RESOURCE], "registered": False}


def test_stopping_the_host_removes_the_dra_sockets(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    node.thread.stop()
    assert not node.registration_socket.exists()
    assert not (node.kubelet_dir / "plugins" / DRIVER / "dra.sock").exists()
