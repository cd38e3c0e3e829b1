"""Test pods on the e2e cluster: busybox pods asking for devicehost's resources, and the
waits every scenario needs. A pod that the runtime fails to start fails its wait at once,
with the runtime's message, instead of running out the deadline."""

from __future__ import annotations

import json
from typing import Any

from harness.cluster import Cluster, wait_for

TEST_IMAGE = "docker.io/library/busybox:e2e"
START_FAILURES = {
    "CreateContainerError",
    "CreateContainerConfigError",
    "RunContainerError",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "StartError",
}


class PodFailed(AssertionError):
    """The pod can never run: the runtime or the kubelet refused it."""


def pod_manifest(
    name: str,
    limits: dict[str, str],
    node: str | None = None,
    command: str = "sleep 3600",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "work",
                "image": TEST_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", command],
                "resources": {"limits": limits} if limits else {},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_pod(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(manifest))


def create_all(cluster: Cluster, namespace: str, manifests: list[dict[str, Any]]) -> None:
    """Create every object in one request (a wave of pods starts together)."""
    items = {"apiVersion": "v1", "kind": "List", "items": manifests}
    cluster.kubectl("-n", namespace, "create", "-f", "-", input=json.dumps(items))


def pod(cluster: Cluster, namespace: str, name: str) -> Any:
    return cluster.get("-n", namespace, "pod", name)


def _running(cluster: Cluster, namespace: str, name: str) -> Any:
    p = pod(cluster, namespace, name)
    if p["status"].get("phase") == "Failed":
        raise PodFailed(f"pod {name} failed: {json.dumps(p['status'])[:2000]}")
    for status in p["status"].get("containerStatuses", []):
        waiting = status.get("state", {}).get("waiting")
        if waiting and waiting.get("reason") in START_FAILURES:
            raise PodFailed(f"pod {name}: {waiting['reason']}: {waiting.get('message', '')}")
        if "running" in status.get("state", {}):
            return p
    return None


def wait_running(cluster: Cluster, namespace: str, name: str, timeout: float = 180) -> Any:
    """The pod once its container runs; PodFailed at once if it never can."""
    deadline_what = f"pod {namespace}/{name} running"

    def check() -> Any:
        try:
            return _running(cluster, namespace, name)
        except PodFailed as e:
            raise _Stop(e) from e

    try:
        return wait_for(check, timeout, deadline_what)
    except _Stop as stop:
        raise stop.failure from None


class _Stop(BaseException):
    """Carries a PodFailed out of wait_for, which retries ordinary exceptions."""

    def __init__(self, failure: PodFailed) -> None:
        super().__init__(str(failure))
        self.failure = failure


def scheduling_failure(cluster: Cluster, namespace: str, name: str) -> str:
    """The scheduler's message for a pod it cannot place (its PodScheduled condition)."""
    for c in pod(cluster, namespace, name)["status"].get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message", ""))
    return ""


def exec_in(cluster: Cluster, namespace: str, name: str, command: str) -> str:
    return cluster.kubectl("-n", namespace, "exec", name, "--", "/bin/sh", "-c", command).stdout


def environment(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    out = exec_in(cluster, namespace, name, "env")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def allocatable(cluster: Cluster, node: str) -> dict[str, str]:
    return dict(cluster.get("node", node)["status"].get("allocatable", {}))


VENDOR_PREFIXES = ("nvidia.com/", "huawei.com/", "rdma/", "k8s.devicehost.io/")


def device_resources(cluster: Cluster, node: str) -> dict[str, str]:
    """The node's allocatable resources that devicehost's drivers serve, zeros dropped."""
    return {
        k: v
        for k, v in allocatable(cluster, node).items()
        if k.startswith(VENDOR_PREFIXES) and v != "0"
    }


# One line per process of the container: pid, parent pid, command line (the image has no
# procps; the shell's builtins and tr do). The listing shell itself is left out.
_PROCESSES = r"""
for d in /proc/[0-9]*; do
  p="${d#/proc/}"; [ "$p" = "$$" ] && continue
  ppid="$(sed -n 's/^PPid:[[:space:]]*//p' "$d/status" 2>/dev/null)"
  [ -n "$ppid" ] && echo "$p $ppid $(tr '\0' ' ' < "$d/cmdline")"
done; true
"""


def container_processes(cluster: Cluster, namespace: str, name: str) -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process the container's shell can see."""
    out = []
    for line in exec_in(cluster, namespace, name, _PROCESSES).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            out.append((int(parts[0]), int(parts[1]), parts[2].strip()))
    return out


def devicehost_tree(cluster: Cluster, namespace: str, name: str) -> tuple[int, int, list[int]]:
    """The host's pid, its zygote's, and the drivers' workers: each worker is the child of
    a keeper the zygote forked for it (docs/reliability.md, "Containment")."""
    procs = container_processes(cluster, namespace, name)
    ours = {pid for pid, _, cmd in procs if "devicehost run" in cmd}
    host = next(pid for pid, ppid, _ in procs if pid in ours and ppid not in ours)
    zygote = next(pid for pid, ppid, _ in procs if pid in ours and ppid == host)
    keepers = {pid for pid, ppid, _ in procs if pid in ours and ppid == zygote}
    return host, zygote, sorted(pid for pid, ppid, _ in procs if pid in ours and ppid in keepers)
