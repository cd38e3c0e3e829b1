"""DRA on the real cluster: the DGX node's GPUs and exclusive HCAs served through DRA
(e2e/manifests-dra, as docs/operating.md tells an operator), published as ResourceSlices,
allocated by the real scheduler to a claim with a CEL selector, prepared by devicehost and
applied by containerd from the claim's CDI spec.

The module switches the install to DRA, runs its scenarios, and switches it back (the
scenarios of later files use the device plugins).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import (
    create_pod,
    device_resources,
    environment,
    exec_in,
    pod,
    pod_manifest,
    wait_running,
)
from test_allocation import char_devices
from test_health import FIRST_HCA, SET_LINK, health_follows_the_link
from test_traces import span_names, traces

from conftest import (
    E2E,
    IMAGE,
    OVERLAY,
    devicehost_pods,
    rollout,
    wait_devicehost_ready,
    wait_rolled_out,
)

# DEVICEHOST_E2E_DRA_OVERLAY installs another one instead: how each scenario was seen
# failing against a deliberately broken manifest (docs/e2e.md).
DRA_OVERLAY = Path(os.environ.get("DEVICEHOST_E2E_DRA_OVERLAY") or E2E / "manifests-dra")
GPU_DRIVER = "nvidia.devicehost.io"
HCA_DRIVER = "rdma.devicehost.io"
NPU_DRIVER = "ascend.devicehost.io"
DRIVERS = (GPU_DRIVER, HCA_DRIVER, NPU_DRIVER)
#: What components/dra adds beyond the tier's install, removed again after the module.
DRA_OBJECTS = (
    "validatingadmissionpolicybinding/devicehost-dra-own-node-slices",
    "validatingadmissionpolicy/devicehost-dra-own-node-slices",
    "clusterrolebinding/devicehost-dra",
    "clusterrole/devicehost-dra",
    f"deviceclass/{GPU_DRIVER}",
    "deviceclass/ascend.devicehost.io",
    f"deviceclass/{HCA_DRIVER}",
    "deviceclass/gpu.nvidia.devicehost.io",
    "deviceclass/ascend910.ascend.devicehost.io",
    "deviceclass/hca.rdma.devicehost.io",
)
MEMORY_SELECTOR = f'device.capacity["{GPU_DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0'


def slices(cluster: Cluster, driver: str, node: str | None = "dgx") -> list[dict]:
    selector = f"spec.driver={driver}" + (f",spec.nodeName={node}" if node else "")
    items: list[dict] = cluster.get("resourceslices", "--field-selector", selector)["items"]
    return items


def devices(cluster: Cluster, driver: str) -> list[dict]:
    return [d for s in slices(cluster, driver) for d in s["spec"].get("devices", [])]


#: The label that moves a node to DRA, through the profile of e2e/manifests-dra.
TO_DRA = "devicehost.io/api=dra"


def label_nodes(cluster: Cluster, label: str) -> None:
    """``kubectl label`` every node (``key=value`` sets, ``key-`` removes)."""
    cluster.kubectl("label", "node", "--all", "--overwrite", label)


def restart_devicehost(cluster: Cluster, node: str) -> None:
    """Delete the node's devicehost pod and wait for the DaemonSet's new one to be Ready:
    how an operator has one node read its labels again."""
    old = devicehost_pods(cluster)[node]["metadata"]["name"]
    cluster.kubectl("-n", "devicehost", "delete", "pod", old, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: devicehost_pods(cluster).get(node, {}).get("metadata", {}).get("name") != old,
        60,
        f"a new devicehost pod on {node}",
    )
    wait_devicehost_ready(cluster, [node])


@pytest.fixture(scope="module")
def dra(installed: Cluster) -> Iterator[Cluster]:
    label_nodes(installed, TO_DRA)
    rollout(installed, DRA_OVERLAY)
    wait_for(lambda: len(devices(installed, GPU_DRIVER)) == 8, 60, "8 GPUs in ResourceSlices")
    # The new pod publishes its slices beside the old one (surge); the old pod's device
    # plugin goes once the new pod is ready, and the kubelet reports it at its next node
    # status update.
    wait_for(
        lambda: "nvidia.com/gpu" not in device_resources(installed, "dgx"),
        60,
        "nvidia.com/gpu no longer advertised through the device plugin",
    )
    # Kept with the run's logs: docs/dra.md shows it.
    selector = f"spec.nodeName=dgx,spec.driver={GPU_DRIVER}"
    published = installed.kubectl(
        "get", "resourceslices", "--field-selector", selector, "-o", "yaml"
    )
    (installed.logs / "resourceslices-dgx-nvidia.yaml").write_text(published.stdout)
    yield installed
    label_nodes(installed, TO_DRA.split("=")[0] + "-")
    rollout(installed, OVERLAY)
    installed.kubectl("delete", "--ignore-not-found", *DRA_OBJECTS)
    # Unregistered DRA drivers' slices are the kubelet's to delete, after its delay: what
    # an operator who switches back, or uninstalls, sees (docs/dra.md).
    wait_for(
        lambda: (
            not any(slices(installed, d, node=None) for d in (GPU_DRIVER, HCA_DRIVER, NPU_DRIVER))
        ),
        180,
        "the kubelet deleted the DRA drivers' ResourceSlices",
    )
    wait_for(
        lambda: device_resources(installed, "dgx").get("nvidia.com/gpu") == "8",
        120,
        "nvidia.com/gpu: 8 again through the device plugin",
    )


def claim_template(
    name: str, count: int, device_class: str = GPU_DRIVER, same: str | None = None
) -> dict:
    """A template asking for ``count`` devices of ``device_class`` (GPUs: by memory), all
    with one value of the attribute ``same`` when given."""
    exactly: dict = {"deviceClassName": device_class, "allocationMode": "ExactCount"}
    exactly["count"] = count
    if device_class == GPU_DRIVER:
        exactly["selectors"] = [{"cel": {"expression": MEMORY_SELECTOR}}]
    request = {NPU_DRIVER: "npus", HCA_DRIVER: "hcas"}.get(device_class, "gpus")
    devices: dict = {"requests": [{"name": request, "exactly": exactly}]}
    if same:
        devices["constraints"] = [{"requests": [request], "matchAttribute": same}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def claim_pod(name: str, template: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "work",
                    "image": "docker.io/library/busybox:e2e",
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", "sleep 3600"],
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
        },
    }


def claim_specs(cluster: Cluster) -> list[str]:
    """The per-claim CDI specs of the GPU driver on the DGX node."""
    listing = cluster.in_node("dgx", ["ls", "-A", "/var/run/cdi"]).split()
    return [f for f in listing if f.startswith(f"k8s.devicehost.io-dra.{GPU_DRIVER}_")]


@pytest.mark.nodes("dgx")
def test_resourceslices_list_the_dgx_gpus_with_their_attributes(dra: Cluster) -> None:
    """8 GPUs in the nvidia.devicehost.io pool of node dgx, each with its product, PCI bus
    ID, NUMA node and memory; and nvidia.com/gpu is no longer a device plugin's."""
    gpus = devices(dra, GPU_DRIVER)
    assert len(gpus) == 8
    for gpu in gpus:
        attributes = gpu["attributes"]
        assert attributes["productName"]["string"].startswith("NVIDIA H100"), gpu
        assert "resource.kubernetes.io/pciBusID" in attributes, gpu
        assert "resource.kubernetes.io/numaNode" in attributes, gpu
        assert int(gpu["capacity"]["memory"]["value"]) >= 64 * 2**30, gpu
    (owner,) = slices(dra, GPU_DRIVER)[0]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Node", "dgx")
    assert "nvidia.com/gpu" not in device_resources(dra, "dgx")


@pytest.mark.nodes("dgx")
def test_a_claim_for_two_gpus_by_memory_runs_with_their_environment(dra: Cluster, ns: str) -> None:
    """A ResourceClaimTemplate asking for 2 GPUs of at least 64 GiB: the scheduler allocates
    two, devicehost prepares the claim, containerd applies its CDI spec: the container has
    NVIDIA_VISIBLE_DEVICES with both GPUs and one marker per allocated device."""
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(claim_template("two", 2)))
    create_pod(dra, ns, claim_pod("gpus", "two"))
    wait_running(dra, ns, "gpus")
    env = environment(dra, ns, "gpus")
    visible = env["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(visible)) == 2 and all(v.startswith("GPU-") for v in visible), visible
    markers = [v for k, v in env.items() if k.startswith("DEVICEHOST_DRA_")]
    assert len(markers) == 2 and all(
        m.startswith(f"k8s.devicehost.io/dra.{GPU_DRIVER}=") for m in markers
    )
    (claim,) = dra.get("-n", ns, "resourceclaims")["items"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["driver"] for r in results} == {GPU_DRIVER} and len(results) == 2
    assert claim_specs(dra) == [
        f"k8s.devicehost.io-dra.{GPU_DRIVER}_{claim['metadata']['uid']}.json"
    ]


def extended_claim(cluster: Cluster, ns: str, name: str) -> dict:
    """The claim the scheduler made for the pod's extended resources (KEP-5004)."""
    status = pod(cluster, ns, name)["status"]["extendedResourceClaimStatus"]
    claim: dict = cluster.get("-n", ns, "resourceclaim", status["resourceClaimName"])
    return claim


def two_gpus_run(cluster: Cluster, ns: str) -> dict:
    """test_allocation's pod spec, ``nvidia.com/gpu: 2``, as pod gpu2: it runs with two GPU
    UUIDs in NVIDIA_VISIBLE_DEVICES. Its status."""
    create_pod(cluster, ns, pod_manifest("gpu2", {"nvidia.com/gpu": "2"}))
    wait_running(cluster, ns, "gpu2")
    visible = environment(cluster, ns, "gpu2")["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(visible)) == 2 and all(v.startswith("GPU-") for v in visible), visible
    status: dict = pod(cluster, ns, "gpu2")["status"]
    return status


@pytest.mark.nodes("dgx")
def test_a_pod_asking_for_nvidia_com_gpu_by_name_is_served_through_dra(
    dra: Cluster, ns: str
) -> None:
    """test_allocation's pod spec unchanged (``nvidia.com/gpu: 2``) on the DGX node that now
    serves its GPUs through DRA: the scheduler makes the pod a claim from the DeviceClass
    whose extendedResourceName is nvidia.com/gpu, devicehost prepares it, and the container
    has two GPUs in NVIDIA_VISIBLE_DEVICES, as through the device plugin."""
    two_gpus_run(dra, ns)
    results = extended_claim(dra, ns, "gpu2")["status"]["allocation"]["devices"]["results"]
    assert [r["driver"] for r in results] == [GPU_DRIVER] * 2, results


@pytest.mark.nodes("dgx")
def test_a_pod_asking_for_rdma_hca_by_name_gets_its_devices_through_dra(
    dra: Cluster, ns: str
) -> None:
    """``rdma/hca: 1``, the device-plugin pod spec, on the node serving HCAs through DRA:
    its uverbs node and rdma_cm are character devices in the container, from the claim's
    CDI spec."""
    create_pod(dra, ns, pod_manifest("hca", {"rdma/hca": "1"}))
    wait_running(dra, ns, "hca")
    nodes = char_devices(dra, ns, "hca", "/dev/infiniband/*")
    assert "/dev/infiniband/rdma_cm" in nodes, nodes
    assert len([n for n in nodes if "uverbs" in n]) == 1, nodes
    (result,) = extended_claim(dra, ns, "hca")["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == HCA_DRIVER, result


@pytest.mark.nodes("dgx")
def test_jaeger_finds_the_prepare_span_by_the_pod_uid_beside_the_kubelet_s(
    dra: Cluster, ns: str
) -> None:
    """devicehost's NodePrepareResources span carries the UID of the pod its claim is
    reserved for: one Jaeger search by that UID finds it and the kubelet's syncPod."""
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(claim_template("one", 1)))
    create_pod(dra, ns, claim_pod("traced", "one"))
    uid = str(wait_running(dra, ns, "traced")["metadata"]["uid"])
    tags = {"k8s.pod.uid": uid}
    found = wait_for(lambda: traces(dra, "devicehost", tags), 60, "devicehost's spans")
    assert "v1.DRAPlugin/NodePrepareResources" in span_names(found), span_names(found)
    kubelet = wait_for(lambda: traces(dra, "kubelet", tags), 90, "the kubelet's spans")
    assert "syncPod" in span_names(kubelet), span_names(kubelet)


@pytest.mark.nodes("dgx")
def test_deleting_the_pod_unprepares_the_claim_and_removes_its_spec(dra: Cluster, ns: str) -> None:
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(claim_template("one", 1)))
    create_pod(dra, ns, claim_pod("gpu", "one"))
    wait_running(dra, ns, "gpu")
    assert len(claim_specs(dra)) == 1
    dra.kubectl("-n", ns, "delete", "pod", "gpu", "--wait=true", "--timeout=60s")
    wait_for(lambda: claim_specs(dra) == [], 60, "the claim's CDI spec removed")


def tainted(cluster: Cluster, driver: str) -> list[str]:
    """The devices of ``driver`` on the DGX node that carry devicehost's Unhealthy taint."""
    return [
        d["name"]
        for d in devices(cluster, driver)
        if any(t.get("key") == "devicehost.io/unhealthy" for t in d.get("taints", []))
    ]


def schedule_state(cluster: Cluster, ns: str, name: str) -> str:
    """``Scheduled``, or the scheduler's reason it is not (``Unschedulable``), or ``""``."""
    conditions = pod(cluster, ns, name)["status"].get("conditions", [])
    for condition in conditions:
        if condition["type"] == "PodScheduled":
            return "Scheduled" if condition["status"] == "True" else condition.get("reason", "")
    return ""


def test_an_unhealthy_hca_is_tainted_and_allocated_to_no_new_claim(dra: Cluster, ns: str) -> None:
    """The link of exclusive HCA mlx5_0 goes down: its device in the rdma.devicehost.io
    slice gets the NoSchedule taint (a new pool generation), the others none, and a pod
    whose claim asks for every HCA cannot be scheduled; the link comes back: the taint
    goes and the scheduler allocates all of them."""
    devicehost = devicehost_pods(dra)["dgx"]["metadata"]["name"]
    count = len(devices(dra, HCA_DRIVER))
    generation = slices(dra, HCA_DRIVER)[0]["spec"]["pool"]["generation"]
    exec_in(dra, "devicehost", devicehost, SET_LINK.format(device=FIRST_HCA, up=False))
    try:
        wait_for(lambda: len(tainted(dra, HCA_DRIVER)) == 1, 60, "one HCA tainted")
        (taint,) = next(d for d in devices(dra, HCA_DRIVER) if d.get("taints"))["taints"]
        assert (taint["value"], taint["effect"]) == ("true", "NoSchedule"), taint
        assert slices(dra, HCA_DRIVER)[0]["spec"]["pool"]["generation"] > generation
        assert len(devices(dra, HCA_DRIVER)) == count
        every = claim_template("every", count, HCA_DRIVER)
        dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(every))
        create_pod(dra, ns, claim_pod("hcas", "every"))
        wait_for(lambda: schedule_state(dra, ns, "hcas") == "Unschedulable", 60, "not schedulable")
    finally:
        exec_in(dra, "devicehost", devicehost, SET_LINK.format(device=FIRST_HCA, up=True))
    wait_for(lambda: tainted(dra, HCA_DRIVER) == [], 60, "the taint gone")
    wait_for(lambda: schedule_state(dra, ns, "hcas") == "Scheduled", 120, "scheduled")
    (claim,) = dra.get("-n", ns, "resourceclaims")["items"]
    assert len(claim["status"]["allocation"]["devices"]["results"]) == count


@pytest.mark.nodes("dgx")
def test_a_dra_pods_hca_turns_unhealthy_and_back_in_its_status(dra: Cluster, ns: str) -> None:
    """A pod whose claim holds exclusive HCA mlx5_0 (selected by its PCI address): the
    kubelet, fed by devicehost's DRA health stream, shows it Healthy in the container's
    ``allocatedResourcesStatus`` (under ``claim:<claim>``, the device's CDI ID);
    its link goes down: Unhealthy; up again: Healthy, the pod never restarted."""
    template = claim_template("first-hca", 1, HCA_DRIVER)
    pci = f'device.attributes["resource.kubernetes.io"].pciBusID == "{FIRST_HCA}"'
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": pci}}
    ]
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(template))
    create_pod(dra, ns, claim_pod("hca", "first-hca"))
    wait_running(dra, ns, "hca")
    # The pod's claim (its container names no request of it); the one HCA is FIRST_HCA.
    health_follows_the_link(dra, ns, "hca", "claim:gpus", lambda _resource_id: FIRST_HCA)


@pytest.mark.nodes("dgx")
def test_devicehost_drivers_in_the_pod_shows_the_registered_dra_driver(dra: Cluster) -> None:
    pod = devicehost_pods(dra)["dgx"]["metadata"]["name"]
    rows = json.loads(exec_in(dra, "devicehost", pod, "devicehost drivers --json"))
    nvidia = next(r for r in rows if r["name"] == "nvidia")
    assert nvidia["dra"]["name"] == GPU_DRIVER
    assert nvidia["dra"]["registered"] is True
    assert nvidia["dra"]["resources"] == ["nvidia.com/gpu"]


#: Run in devicehost's pod on the DGX node, with its own token: apply a ResourceSlice of
#: another node, as a devicehost whose node was taken over might.
FOREIGN_SLICE = """
import asyncio
from devicehost.kubelet.dra.api import LightkubeApi
from devicehost.kubelet.dra.publisher import ApiProblem

async def main():
    api = LightkubeApi()
    slice = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "elsewhere-nvidia.devicehost.io-0"},
        "spec": {"driver": "nvidia.devicehost.io", "nodeName": "elsewhere",
                 "pool": {"name": "elsewhere", "generation": 1, "resourceSliceCount": 1},
                 "devices": []},
    }
    try:
        await api.apply_slice(slice)
        print("APPLIED")
    except ApiProblem as exc:
        print(exc)
    finally:
        await api.close()

asyncio.run(main())
"""


@pytest.mark.nodes("dgx")
def test_the_admission_policy_refuses_a_slice_of_another_node(dra: Cluster) -> None:
    """devicehost's own token may write its node's slices (the others show it) and no
    other node's: the policy of components/dra refuses it, naming both nodes."""
    pod = devicehost_pods(dra)["dgx"]["metadata"]["name"]
    answer = exec_in(dra, "devicehost", pod, f"python - <<'EOF'\n{FOREIGN_SLICE}\nEOF")
    if "APPLIED" in answer:  # no node's kubelet would ever delete it
        dra.kubectl("delete", "resourceslice", "elsewhere-nvidia.devicehost.io-0")
    assert "APPLIED" not in answer, answer
    assert "403" in answer and "devicehost-dra-own-node-slices" in answer, answer
    assert 'devicehost on node "dgx" may write only its own node' in answer, answer


#: The Atlas 800 9000's two HCCS rings of four chips (drivers/ascend: chips 0-3 and 4-7).
RINGS = ({"0", "1", "2", "3"}, {"4", "5", "6", "7"})


@pytest.mark.nodes("atlas")
def test_a_four_chip_claim_matching_the_interconnect_group_gets_one_hccs_ring(
    dra: Cluster, ns: str
) -> None:
    """One chip is taken first, so seven are free across both rings; a claim for four with
    matchAttribute on ascend.devicehost.io/interconnectGroup can only be the other ring."""
    first = claim_template("one", 1, NPU_DRIVER)
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(first))
    create_pod(dra, ns, claim_pod("first", "one"))
    wait_running(dra, ns, "first")
    (taken,) = environment(dra, ns, "first")["ASCEND_VISIBLE_DEVICES"].split(",")
    ring = claim_template("ring", 4, NPU_DRIVER, same=f"{NPU_DRIVER}/interconnectGroup")
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(ring))
    create_pod(dra, ns, claim_pod("ring", "ring"))
    wait_running(dra, ns, "ring")
    chips = set(environment(dra, ns, "ring")["ASCEND_VISIBLE_DEVICES"].split(","))
    other = next(r for r in RINGS if taken not in r)
    assert chips == other, (taken, chips)


def attribute(cluster: Cluster, driver: str, device: str, name: str) -> str:
    """A string attribute of one device in the driver's slices on the DGX node."""
    (found,) = [d for d in devices(cluster, driver) if d["name"] == device]
    value: str = found["attributes"][name]["string"]
    return value


@pytest.mark.nodes("dgx")
def test_a_claim_gets_the_gpu_next_to_its_hca_by_pcie_root(dra: Cluster, ns: str) -> None:
    """One claim, a GPU and an exclusive HCA, constrained to one
    ``resource.kubernetes.io/pcieRoot``, the HCA being mlx5_6 (0000:9a:00.0): the scheduler
    gives the GPU behind the same PCIe switch, 0000:9d:00.0 (GPU 4 of the DGX H100), and
    both reach the container (the GPU in NVIDIA_VISIBLE_DEVICES, the HCA's uverbs node)."""
    root = "resource.kubernetes.io/pcieRoot"
    nic = 'device.attributes["resource.kubernetes.io"].pciBusID == "0000:9a:00.0"'
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": GPU_DRIVER, "count": 1}},
        {
            "name": "hca",
            "exactly": {
                "deviceClassName": HCA_DRIVER,
                "count": 1,
                "selectors": [{"cel": {"expression": nic}}],
            },
        },
    ]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "pair"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": requests,
                    "constraints": [{"requests": ["gpu", "hca"], "matchAttribute": root}],
                }
            }
        },
    }
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(template))
    create_pod(dra, ns, claim_pod("pair", "pair"))
    wait_running(dra, ns, "pair")
    (claim,) = dra.get("-n", ns, "resourceclaims")["items"]
    got = {r["request"]: r for r in claim["status"]["allocation"]["devices"]["results"]}
    gpu, hca = got["gpu"], got["hca"]
    pci = "resource.kubernetes.io/pciBusID"
    assert attribute(dra, GPU_DRIVER, gpu["device"], pci) == "0000:9d:00.0", gpu
    assert attribute(dra, GPU_DRIVER, gpu["device"], root) == attribute(
        dra, HCA_DRIVER, hca["device"], root
    )
    assert len(environment(dra, ns, "pair")["NVIDIA_VISIBLE_DEVICES"].split(",")) == 1
    nodes = char_devices(dra, ns, "pair", "/dev/infiniband/*")
    assert len([n for n in nodes if "uverbs" in n]) == 1, nodes


@pytest.mark.nodes("dgx")
def test_a_node_moves_between_device_plugin_and_dra_by_its_label(dra: Cluster, ns: str) -> None:
    """The migration of docs/dra.md, both ways, with one pod spec (``nvidia.com/gpu: 2``):
    the label removed and the node's devicehost pod restarted, the Node advertises 8 GPUs
    again and the pod runs through the device plugin (no claim made for it); labelled and
    restarted again, the GPUs are in ResourceSlices and the same spec runs from a claim."""
    dra.kubectl("label", "node", "dgx", TO_DRA.split("=")[0] + "-")
    restart_devicehost(dra, "dgx")
    wait_for(
        lambda: device_resources(dra, "dgx").get("nvidia.com/gpu") == "8",
        120,
        "nvidia.com/gpu: 8 through the device plugin",
    )
    assert "extendedResourceClaimStatus" not in two_gpus_run(dra, ns)
    dra.kubectl("-n", ns, "delete", "pod", "gpu2", "--wait=true", "--timeout=60s")

    dra.kubectl("label", "node", "dgx", "--overwrite", TO_DRA)
    restart_devicehost(dra, "dgx")
    wait_for(lambda: len(devices(dra, GPU_DRIVER)) == 8, 120, "8 GPUs in ResourceSlices again")
    wait_for(
        lambda: "nvidia.com/gpu" not in device_resources(dra, "dgx"),
        120,
        "no GPU advertised by a device plugin",
    )
    assert "extendedResourceClaimStatus" in two_gpus_run(dra, ns)
    results = extended_claim(dra, ns, "gpu2")["status"]["allocation"]["devices"]["results"]
    assert [r["driver"] for r in results] == [GPU_DRIVER] * 2, results


#: The tag the rollover scenario rolls to: the same image under a new name, as a release
#: would bring (the tier has no registry; each node's containerd tags it).
ROLLED = "docker.io/library/devicehost:0.1.0-rolled"


def first_seen(log: str, *parts: str) -> str:
    """When the kubelet first logged a line with every one of ``parts``: its ``MMDD
    hh:mm:ss.micro`` prefix, which sorts in time within a year."""
    for line in log.splitlines():
        if all(part in line for part in parts):
            return line[1:21]
    raise AssertionError(f"the kubelet never logged {parts}")


def unprepared(log: str, claim_uid: str) -> list[str]:
    """The kubelet's lines for NodeUnprepareResources calls that unprepared the claim."""
    return [
        line
        for line in log.splitlines()
        if '"Done calling NodeUnprepareResources rpc"' in line
        and f'key:\\"{claim_uid}\\"' in line
        and line.endswith("err=null")
    ]


@pytest.mark.nodes("dgx")
def test_a_surge_rollout_keeps_a_held_claim_and_unprepares_it_once(dra: Cluster, ns: str) -> None:
    """The DaemonSet rolls to a new image tag while pod ``held`` holds a prepared GPU claim
    and pod ``arriving`` is being created: the new devicehost pod serves beside the old one
    (maxSurge: 1) on sockets named by its UID and is ready before the old one is stopped,
    both pods run, and when ``held`` goes its claim is unprepared exactly once, by the new
    pod."""
    dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(claim_template("one", 1)))
    create_pod(dra, ns, claim_pod("held", "one"))
    wait_running(dra, ns, "held")
    (claim,) = dra.get("-n", ns, "resourceclaims")["items"]
    old = {node: p["metadata"] for node, p in devicehost_pods(dra).items()}
    log_path = dra.logs / "dgx-kubelet.log"
    offset = log_path.stat().st_size
    for node in dra.nodes:
        dra.tag_image(node.name, IMAGE, ROLLED)
    dra.kubectl("-n", "devicehost", "set", "image", "daemonset/devicehost", f"devicehost={ROLLED}")
    create_pod(dra, ns, claim_pod("arriving", "one"))
    new = wait_rolled_out(dra)
    for node, p in new.items():
        assert p["metadata"]["uid"] != old[node]["uid"], f"{node} still runs its old pod"
        assert p["spec"]["containers"][0]["image"] == ROLLED
    with log_path.open() as log:
        log.seek(offset)
        rollout_log = log.read()
    new_ready = first_seen(
        rollout_log, 'probe="readiness" status="ready"', new["dgx"]["metadata"]["name"]
    )
    old_deleted = first_seen(rollout_log, "SyncLoop DELETE", old["dgx"]["name"])
    assert new_ready < old_deleted, "the old pod went before the new one was ready"
    wait_running(dra, ns, "arriving")
    held = pod(dra, ns, "held")
    assert held["status"]["phase"] == "Running"
    assert held["status"]["containerStatuses"][0]["restartCount"] == 0
    offset = log_path.stat().st_size
    dra.kubectl("-n", ns, "delete", "pod", "held", "--wait=true", "--timeout=60s")
    spec = f"k8s.devicehost.io-dra.{GPU_DRIVER}_{claim['metadata']['uid']}.json"
    wait_for(lambda: spec not in claim_specs(dra), 60, "the held claim's CDI spec removed")
    with log_path.open() as log:
        log.seek(offset)
        calls = unprepared(log.read(), claim["metadata"]["uid"])
    assert len(calls) == 1, calls
    assert f"dra-{new['dgx']['metadata']['uid']}.sock" in calls[0], calls[0]
