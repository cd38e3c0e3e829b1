"""The DRA face in a running host: resources configured ``api: dra`` are served through DRA
and never as device plugins, over real unix sockets, with drivers found through real entry
points.

A real gRPC client plays the kubelet's plugin watcher (GetInfo, NotifyRegistrationStatus on
the registration socket) and its DRA calls; the host's real API client (lightkube) reads
claims from and publishes ResourceSlices to an API server stand-in over HTTP
(``apiserver.ApiServer``).
"""

from __future__ import annotations

import json

from dra_node import DRA_RESOURCE, DRIVER, NODE, PLUGIN_RESOURCE, UID

from devicehost.kubelet.dra.naming import device_name
from support import eventually


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
    node.add_claim("gpus", UID, [device])
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
    node = dra_node(dra={"driverNames": {"alpha": "Alpha_GPU"}})
    kubelet.wait_registered(PLUGIN_RESOURCE)
    eventually(lambda: len(node.thread.call(node.host.not_ready)) == 1)
    (reason,) = node.thread.call(node.host.not_ready)
    assert "'Alpha_GPU' is not a lower-case DNS subdomain" in reason


def test_devicehost_drivers_shows_which_resources_go_through_dra(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    (row,) = [r for r in node.thread.call(node.host.driver_states) if r["name"] == "alpha"]
    assert sorted(row["resources"]) == [DRA_RESOURCE, PLUGIN_RESOURCE]
    eventually(lambda: "generation" in node.thread.call(node.host.dra.row, "alpha"))
    (row,) = [r for r in node.thread.call(node.host.driver_states) if r["name"] == "alpha"]
    assert row["dra"] == {
        "name": DRIVER,
        "resources": [DRA_RESOURCE],
        "registered": False,
        "generation": 1,
    }


def test_stopping_the_host_removes_the_dra_sockets(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    node.thread.stop()
    assert not node.registration_socket.exists()
    assert not (node.kubelet_dir / "plugins" / DRIVER / "dra.sock").exists()


def test_a_claim_the_api_server_does_not_have_fails_with_its_name(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    answer = node.prepare("gone", UID)
    assert answer.claims[UID].error == "claim default/gone does not exist"
