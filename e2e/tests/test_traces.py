"""A pod's start in the tier's Jaeger: the kubelet's spans and devicehost's, found by the
pod's UID through Jaeger's query API."""

from __future__ import annotations

import json
import sys
import urllib.parse

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_pod, pod_manifest, wait_running

QUERY = "http://127.0.0.1:16686/api/traces"


def traces(cluster: Cluster, service: str, tags: dict[str, str]) -> list[dict]:
    """Jaeger's traces of service with those span tags (the query API, in the control
    plane's namespace, where Jaeger listens)."""
    params = {"service": service, "tags": json.dumps(tags), "lookback": "1h", "limit": "50"}
    url = f"{QUERY}?{urllib.parse.urlencode(params)}"
    script = (
        "import sys, urllib.request; "
        f"sys.stdout.write(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
    )
    done = cluster.in_control_plane([sys.executable, "-c", script])
    if done.returncode:
        raise RuntimeError(done.stderr)
    return list(json.loads(done.stdout).get("data") or [])


def span_names(found: list[dict]) -> set[str]:
    return {s["operationName"] for t in found for s in t["spans"]}


@pytest.fixture
def gpu_pod_uid(installed: Cluster, ns: str) -> str:
    create_pod(installed, ns, pod_manifest("traced", {"nvidia.com/gpu": "1"}, node="dgx"))
    return str(wait_running(installed, ns, "traced")["metadata"]["uid"])


@pytest.mark.nodes("dgx")
def test_kubelet_pod_start_spans_found_by_pod_uid(installed: Cluster, gpu_pod_uid: str) -> None:
    """The kubelet (KubeletTracing, every span sampled) exports syncPod for the pod."""
    found = wait_for(
        lambda: traces(installed, "kubelet", {"k8s.pod.uid": gpu_pod_uid}), 90, "kubelet spans"
    )
    assert "syncPod" in span_names(found), span_names(found)
    # What the search found, kept with the logs (docs/observability.md quotes one).
    spans = sorted(
        (
            {"operation": sp["operationName"], "duration_us": sp["duration"]}
            for t in found
            for sp in t["spans"]
        ),
        key=lambda sp: -sp["duration_us"],
    )
    (installed.logs / "jaeger-pod-start.json").write_text(json.dumps(spans, indent=1))


@pytest.mark.nodes("dgx")
def test_devicehost_allocate_span_found_by_pod_uid(installed: Cluster, gpu_pod_uid: str) -> None:
    """devicehost's Allocate span for the pod carries its UID, so one search finds it."""
    found = wait_for(
        lambda: traces(installed, "devicehost", {"k8s.pod.uid": gpu_pod_uid}), 45, "spans"
    )
    assert any("Allocate" in name for name in span_names(found)), span_names(found)
