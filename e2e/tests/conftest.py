"""The e2e tier's fixtures: one cluster for the whole run (three nodes, or only the DGX node
with DEVICEHOST_E2E_NODES=1), devicehost installed on it with `kubectl apply -k` of the e2e
overlay, and a namespace per test, deleted after it so each test starts with free devices.

Run through `make e2e`, which builds the components and images first (docs/e2e.md).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(E2E))

from harness.cluster import (  # noqa: E402
    ATLAS,
    DGX,
    PLAIN,
    Binaries,
    Cluster,
    read_versions,
    running,
    wait_for,
)

REPO = E2E.parent
# DEVICEHOST_E2E_OVERLAY installs another overlay instead: how each scenario was seen
# failing against a deliberately broken manifest (docs/e2e.md).
OVERLAY = Path(os.environ.get("DEVICEHOST_E2E_OVERLAY") or E2E / "manifests")
#: The devicehost image as the base's kustomization names it (deploy/base, images).
IMAGE = "docker.io/library/devicehost:0.1.0"
CACHE = Path(
    os.environ.get("DEVICEHOST_E2E_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "devicehost-e2e"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "nodes(*names): needs these nodes (skipped without)")
    config.addinivalue_line("markers", "bench: a measurement, run by make bench-e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    present = {n.name for n in cluster_nodes()}
    for item in items:
        marker = item.get_closest_marker("nodes")
        if marker and not set(marker.args) <= present:
            missing = ", ".join(sorted(set(marker.args) - present))
            item.add_marker(pytest.mark.skip(reason=f"needs node(s) {missing}: run all three"))


def cluster_nodes() -> list:
    return [DGX] if os.environ.get("DEVICEHOST_E2E_NODES") == "1" else [DGX, ATLAS, PLAIN]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The running cluster; torn down (every process, mount and namespace) after the run.
    Its logs stay in the state directory printed at the start (docs/e2e.md)."""
    images = Path(os.environ.get("DEVICEHOST_E2E_IMAGES", CACHE / "images"))
    bins = Binaries.from_cache(CACHE, read_versions(E2E / "versions.env"))
    state = Path(tempfile.mkdtemp(prefix="devicehost-e2e-"))
    print(f"\ne2e state and logs: {state}", file=sys.stderr)
    with running(state, cluster_nodes(), bins, images) as c:
        yield c


def devicehost_pods(cluster: Cluster) -> dict[str, dict]:
    """The DaemonSet's pods, by node."""
    pods = cluster.get("-n", "devicehost", "pods", "-l", "app.kubernetes.io/name=devicehost")
    return {p["spec"].get("nodeName", ""): p for p in pods["items"]}


def pod_ready(p: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])
    )


def wait_devicehost_ready(cluster: Cluster, nodes: list[str], timeout: float = 240) -> dict:
    def ready() -> dict | None:
        pods = devicehost_pods(cluster)
        ok = all(n in pods and pod_ready(pods[n]) for n in nodes)
        return pods if ok else None

    return wait_for(ready, timeout, f"devicehost Ready on {', '.join(nodes)}", every=1)


#: Asked in devicehost's container: exits 0 once /readyz answers 200.
READYZ = (
    'python3 -c "import urllib.request; '
    "urllib.request.urlopen('http://127.0.0.1:9400/readyz', timeout=2)\""
)


def serving_everything(cluster: Cluster, node: str) -> bool:
    """Whether the node's devicehost answers /readyz with 200 now. A new pod that took the
    device-plugin directory over in a surge rollout registers its resources within a
    second of the old pod's stop, but its Ready condition is the kubelet's probe of up to
    10 s before."""
    pod = devicehost_pods(cluster)[node]["metadata"]["name"]
    argv = ["-n", "devicehost", "exec", pod, "--", "/bin/sh", "-c", READYZ]
    return cluster.kubectl(*argv, check=False).returncode == 0


def wait_rolled_out(cluster: Cluster) -> dict:
    """Wait until the DaemonSet's rollout is done and every node's new devicehost pod is
    Ready and serving every resource; the pods, by node."""
    cluster.kubectl(
        "-n", "devicehost", "rollout", "status", "daemonset/devicehost", "--timeout=300s"
    )
    pods = wait_devicehost_ready(cluster, [n.name for n in cluster.nodes])
    for node in cluster.nodes:
        wait_for(
            lambda node=node: serving_everything(cluster, node.name),
            60,
            f"devicehost on {node.name} serving every resource (/readyz)",
        )
    return pods


def rollout(cluster: Cluster, overlay: Path) -> None:
    """Apply ``overlay`` over the running install and wait until it is rolled out (a
    module that switches the install switches it back)."""
    cluster.kubectl("apply", "-k", str(overlay))
    wait_rolled_out(cluster)


@pytest.fixture(scope="session")
def installed(cluster: Cluster) -> Cluster:
    """devicehost installed as docs/operating.md tells a user: `kubectl apply -k`."""
    cluster.kubectl("apply", "-k", str(OVERLAY))
    wait_devicehost_ready(cluster, [n.name for n in cluster.nodes])
    return cluster


@pytest.fixture
def ns(installed: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, deleted (with its pods) after it."""
    name = "t-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:50].strip("-")
    installed.kubectl("create", "namespace", name)
    yield name
    installed.kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s", check=False)
