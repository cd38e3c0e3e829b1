"""Uninstall with `kubectl delete -k` leaves nothing of devicehost on any node. Runs last
(file order): every other scenario needs devicehost installed."""

from __future__ import annotations

from harness.cluster import Cluster, wait_for

from conftest import OVERLAY

FEATURES = "/etc/kubernetes/node-feature-discovery/features.d"
SIMULATION = "/var/lib/devicehost-simulation"


def leftovers(cluster: Cluster, node: str) -> list[str]:
    """devicehost's files on the node: sockets beside kubelet.sock, CDI specs of its
    vendor, its NFD feature file, simulated trees (components/simulation)."""
    sockets = cluster.in_node(node, ["ls", "-A", "/var/lib/kubelet/device-plugins"]).split()
    found = [
        f"device-plugins/{s}"
        for s in sockets
        if s not in ("kubelet.sock", "kubelet_internal_checkpoint")
    ]
    found += [f"cdi/{f}" for f in cluster.in_node(node, ["ls", "-A", "/var/run/cdi"]).split()]
    found += [f"features.d/{f}" for f in cluster.in_node(node, ["ls", "-A", FEATURES]).split()]
    trees = cluster.in_node(node, ["sh", "-c", f"ls -A {SIMULATION} 2>/dev/null; true"])
    found += [f"simulation/{t}" for t in trees.split()]
    return found


def test_delete_k_leaves_none_of_devicehosts_files_on_any_node(
    installed: Cluster,
) -> None:
    """Every devicehost pod gone, and on each node nothing it wrote is left: no socket,
    CDI spec, label file or simulated tree."""
    before = {n.name: leftovers(installed, n.name) for n in installed.nodes}
    assert any(before.values()), "devicehost left nothing to clean up before uninstall"
    installed.kubectl("delete", "-k", str(OVERLAY), "--wait=true", "--timeout=180s")
    for node in installed.nodes:
        wait_for(lambda n=node.name: leftovers(installed, n) == [], 60, f"{node.name} clean")
