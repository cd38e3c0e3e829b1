"""The running pod has exactly what the manifests give it, and still finds its hardware."""

from __future__ import annotations

import json

import pytest
from harness.cluster import Cluster
from harness.pods import device_resources, devicehost_tree, exec_in

from conftest import OVERLAY, devicehost_pods


def rendered_daemonset(cluster: Cluster) -> dict:
    out = cluster.kubectl("kustomize", str(OVERLAY)).stdout
    for doc in out.split("\n---\n"):
        if "kind: DaemonSet" in doc:
            converted = cluster.kubectl(
                "create", "--dry-run=client", "-o", "json", "-f", "-", input=doc
            ).stdout
            return json.loads(converted)
    raise AssertionError("the overlay renders no DaemonSet")


#: linux/capability.h numbers of the capabilities a devicehost overlay may add.
CAPABILITY_BITS = {"SYS_ADMIN": 21, "MKNOD": 27}


def capability_mask(names: list[str]) -> int:
    """The /proc/PID/status capability mask of ``names``."""
    return sum(1 << CAPABILITY_BITS[n] for n in names)


@pytest.mark.nodes("dgx")
def test_pod_runs_with_exactly_the_manifests_mounts_and_security(installed: Cluster) -> None:
    """Mounts and security context as rendered; in the container: no capability but those
    the manifests add (the tier's simulated device nodes need MKNOD), no new privileges,
    seccomp filtering, a read-only root; the drivers still serve the node."""
    want = rendered_daemonset(installed)["spec"]["template"]["spec"]
    pod = devicehost_pods(installed)["dgx"]
    got = pod["spec"]
    container, wanted = got["containers"][0], want["containers"][0]
    assert container["securityContext"] == wanted["securityContext"]
    assert got["securityContext"] == want["securityContext"]
    mounts = {
        (m["name"], m["mountPath"], m.get("readOnly", False)) for m in container["volumeMounts"]
    }
    assert mounts == {
        (m["name"], m["mountPath"], m.get("readOnly", False)) for m in wanted["volumeMounts"]
    }
    assert {v["name"]: v.get("hostPath") for v in got["volumes"]} == {
        v["name"]: v.get("hostPath") for v in want["volumes"]
    }
    added = capability_mask(wanted["securityContext"].get("capabilities", {}).get("add", []))
    name = pod["metadata"]["name"]
    host, zygote, workers = devicehost_tree(installed, "devicehost", name)
    for pid in (host, zygote, *workers):
        status = exec_in(installed, "devicehost", name, f"cat /proc/{pid}/status")
        fields = {k: v.strip() for k, v in (ln.split(":", 1) for ln in status.splitlines())}
        assert int(fields["CapEff"], 16) == int(fields["CapPrm"], 16) == added, status
        assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", status
    write = exec_in(installed, "devicehost", name, "touch /probe 2>&1; true")
    assert "Read-only file system" in write, write
    assert device_resources(installed, "dgx").get("nvidia.com/gpu") == "8"


@pytest.mark.nodes("dgx")
def test_devicehost_is_pid_1_of_its_container(installed: Cluster) -> None:
    """No shared process namespace: the host is the container's first process, and serves."""
    pod = devicehost_pods(installed)["dgx"]
    assert not pod["spec"].get("shareProcessNamespace", False)
    host, _, _ = devicehost_tree(installed, "devicehost", pod["metadata"]["name"])
    assert host == 1
    assert device_resources(installed, "dgx").get("nvidia.com/gpu") == "8"
