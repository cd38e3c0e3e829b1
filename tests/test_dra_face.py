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
from devicehost.testing import OtlpReceiver
from devicehost.testing.otlp import attributes
from support import eventually, scripted


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


PRE_START = "testdrivers.scripted:ScriptedWithPreStart"
POD_UID = "5c0c8d9e-1f7e-4b9a-8a53-1e2f3a4b5c6d"


def test_prepare_calls_allocate_then_pre_start_and_keeps_allocate_s_edits(dra_node):
    """As for a device plugin: the driver's allocate hook, then its pre_start, and the
    allocate answer's edits are in the claim's CDI spec."""
    node = dra_node(PRE_START)
    eventually(node.registration_socket.exists)
    node.add_claim("gpus", UID, [device_name(DRA_RESOURCE, "dev-1")])
    assert node.prepare("gpus", UID).claims[UID].error == ""
    calls = [(h, k) for h, k in scripted(node.thread, DRA_RESOURCE).calls if k.get("device_ids")]
    assert calls == [
        ("devicehost_allocate", {"resource": DRA_RESOURCE, "device_ids": ["dev-1"]}),
        ("devicehost_pre_start", {"resource": DRA_RESOURCE, "device_ids": ["dev-1"]}),
    ]
    (spec,) = [json.loads(p.read_text()) for p in node.cdi_dir.glob("*.json")]
    assert "SCRIPTED_DEVICES=dev-1" in spec["containerEdits"]["env"]
    assert {"hostPath": "/dev/scripted/dev-1", "path": "/dev/scripted/dev-1"} in [
        {k: d[k] for k in ("hostPath", "path") if k in d}
        for d in spec["containerEdits"]["deviceNodes"]
    ]


def test_a_failing_allocate_hook_fails_the_claim_naming_driver_and_resource(dra_node):
    node = dra_node()
    eventually(node.registration_socket.exists)
    scripted(node.thread, DRA_RESOURCE).misbehave(raising=["devicehost_allocate"])
    node.add_claim("gpus", UID, [device_name(DRA_RESOURCE, "dev-1")])
    error = node.prepare("gpus", UID).claims[UID].error
    assert error.startswith(f"driver 'alpha', resource {DRA_RESOURCE!r}: ")
    assert "scripted failure" in error
    assert list(node.cdi_dir.glob("*.json")) == []


def test_the_prepare_span_carries_the_claim_its_devices_and_its_pod(dra_node):
    """A child of the kubelet's span (its traceparent), with the keys the kubelet's own
    spans carry for the pod, and the driver's allocate hook as its child."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    with OtlpReceiver() as receiver:
        node = dra_node(tracing={"otlpEndpoint": receiver.endpoint})
        eventually(node.registration_socket.exists)
        device = device_name(DRA_RESOURCE, "dev-1")
        node.add_claim("gpus", UID, [device], pod=("trainer-0", POD_UID))
        parent = (("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01"),)
        assert node.prepare("gpus", UID, parent).claims[UID].error == ""
        span = receiver.wait_for_span("v1.DRAPlugin/NodePrepareResources", timeout=60)
        hook = receiver.wait_for_span("devicehost_allocate", timeout=60)
    got = attributes(span)
    assert span.trace_id.hex() == trace_id
    assert got["k8s.pod.uid"] == POD_UID and got["k8s.pod.name"] == "trainer-0"
    assert got["k8s.namespace.name"] == "default"
    assert got["devicehost.dra.claim.uid"] == UID
    assert got["devicehost.dra.claim.name"] == "gpus"
    assert got["devicehost.dra.driver.name"] == DRIVER
    assert got["devicehost.dra.devices"] == [device]
    assert hook.parent_span_id == span.span_id
