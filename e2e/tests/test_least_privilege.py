"""The running pod has exactly what the manifests give it, and still finds its hardware."""

from __future__ import annotations

import json

import pytest
from harness.cluster import Cluster
from harness.pods import device_resources

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


@pytest.mark.nodes("dgx")
def test_pod_runs_with_exactly_the_manifests_mounts_and_security(installed: Cluster) -> None:
    """Mounts and security context as rendered; in the container: no capability, no new
    privileges, seccomp filtering, a read-only root; the drivers still serve the node."""
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
    assert {v["name"] for v in got["volumes"]} == {v["name"] for v in want["volumes"]}
    status = installed.kubectl(
        "-n",
        "devicehost",
        "exec",
        pod["metadata"]["name"],
        "--",
        "/bin/sh",
        "-c",
        "cat /proc/1/status; touch /probe 2>&1 || true",
    ).stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert int(fields["CapEff"].strip(), 16) == 0, status
    assert int(fields["CapPrm"].strip(), 16) == 0, status
    assert fields["NoNewPrivs"].strip() == "1", status
    assert fields["Seccomp"].strip() == "2", status
    assert "Read-only file system" in status, status
    assert device_resources(installed, "dgx").get("nvidia.com/gpu") == "8"


@pytest.mark.nodes("dgx")
def test_devicehost_is_pid_1_of_its_container(installed: Cluster) -> None:
    """No shared process namespace: the host is the container's first process."""
    pod = devicehost_pods(installed)["dgx"]
    assert not pod["spec"].get("shareProcessNamespace", False)
    cmdline = installed.kubectl(
        "-n",
        "devicehost",
        "exec",
        pod["metadata"]["name"],
        "--",
        "/bin/sh",
        "-c",
        "tr '\\0' ' ' < /proc/1/cmdline",
    ).stdout
    assert "devicehost run" in cmdline, cmdline
