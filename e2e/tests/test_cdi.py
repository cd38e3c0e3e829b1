"""CDI mode on the real cluster: devicehost writes its specs to the node's /var/run/cdi and
answers Allocate with CDI device names only; containerd resolves them and the container
gets the device nodes the spec names (docs/cdi.md).

The module switches the install to CDI mode (e2e/manifests-cdi: the tier's overlay plus
components/cdi), runs its scenario, and switches it back.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_pod, pod, pod_manifest, wait_running
from test_allocation import char_devices

from conftest import E2E, OVERLAY, rollout
from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb

# DEVICEHOST_E2E_CDI_OVERLAY installs another one instead: how the scenario was seen
# failing against a deliberately broken manifest (docs/e2e.md).
CDI_OVERLAY = Path(os.environ.get("DEVICEHOST_E2E_CDI_OVERLAY") or E2E / "manifests-cdi")
CDI_DIR = "/var/run/cdi"
HCA_SPEC = "k8s.devicehost.io-rdma_hca.json"
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


def devicehost_specs(cluster: Cluster, node: str = "dgx") -> list[str]:
    listing = cluster.in_node(node, ["ls", "-A", CDI_DIR]).split()
    return [f for f in listing if f.startswith("k8s.devicehost.io-")]


@pytest.fixture(scope="module")
def cdi(installed: Cluster) -> Iterator[Cluster]:
    rollout(installed, CDI_OVERLAY)
    yield installed
    rollout(installed, OVERLAY)
    wait_for(lambda: not devicehost_specs(installed), 60, "the host removed its CDI specs")


def allocate_answer(
    cluster: Cluster, node: str, pod_uid: str, resource: str
) -> pb.ContainerAllocateResponse:
    """The answer the kubelet got for one container, as its device-manager checkpoint keeps
    it (AllocResp: the ContainerAllocateResponse, protobuf in base64)."""
    entries = json.loads(cluster.in_node(node, ["cat", CHECKPOINT]))["Data"]["PodDeviceEntries"]
    (entry,) = [e for e in entries if e["PodUID"] == pod_uid and e["ResourceName"] == resource]
    return pb.ContainerAllocateResponse.FromString(base64.b64decode(entry["AllocResp"]))


@pytest.mark.nodes("dgx")
def test_containerd_gives_an_hca_pod_the_device_nodes_of_devicehosts_spec(
    cdi: Cluster, ns: str
) -> None:
    """rdma/hca: 1 in CDI mode: the answer names one k8s.devicehost.io/rdma_hca device and no
    device node; in the container are exactly the spec's device nodes for it (its uverbs
    node) and the resource's own (rdma_cm), as character devices."""
    create_pod(cdi, ns, pod_manifest("hca", {"rdma/hca": "1"}))
    wait_running(cdi, ns, "hca")
    uid = pod(cdi, ns, "hca")["metadata"]["uid"]
    answer = allocate_answer(cdi, "dgx", uid, "rdma/hca")
    (name,) = [d.name for d in answer.cdi_devices]
    kind, device = name.split("=")
    assert kind == "k8s.devicehost.io/rdma_hca" and not answer.devices, answer
    spec = json.loads(cdi.in_node("dgx", ["cat", f"{CDI_DIR}/{HCA_SPEC}"]))
    (entry,) = [d for d in spec["devices"] if d["name"] == device]
    named = [n["path"] for n in entry["containerEdits"]["deviceNodes"]]
    named += [n["path"] for n in spec.get("containerEdits", {}).get("deviceNodes", [])]
    assert sorted(char_devices(cdi, ns, "hca", "/dev/infiniband/*")) == sorted(named), spec
    assert "/dev/infiniband/rdma_cm" in named and any("uverbs" in n for n in named), named
