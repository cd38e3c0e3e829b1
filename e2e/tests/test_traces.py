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


@pytest.mark.nodes("dgx")
def test_devicehost_trace_draws_the_pods_start_in_time_order(
    installed: Cluster, ns: str, gpu_pod_uid: str
) -> None:
    """`devicehost trace POD -n NS`, as a user runs it against Jaeger's query endpoint:
    the waterfall holds devicehost's Allocate (at the pod's admission), the kubelet's
    syncPod and its CreateContainer and StartContainer of the pod, each row starting no
    earlier than the one above; the text and the PNG are kept with the logs
    (docs/observability.md shows them)."""
    picture = installed.logs / "pod-start.png"
    command = [sys.executable, "-m", "devicehost.cli", "trace", "traced", "-n", ns]
    command += ["--jaeger", QUERY.removesuffix("/api/traces"), "--png", str(picture)]

    def drawn() -> str | None:
        done = installed.in_control_plane(command)
        whole = "Allocate" in done.stdout and "StartContainer" in done.stdout
        return done.stdout if done.returncode == 0 and whole else None

    out = wait_for(drawn, 90, "devicehost trace with the kubelet's and devicehost's spans")
    (installed.logs / "pod-start.txt").write_text(out)
    rows = [row for row in out.splitlines()[2:] if row.endswith("|")]  # not "wrote …"

    def first(operation: str) -> int:
        return next(i for i, row in enumerate(rows) if operation in row)

    def start_ms(row: str) -> float:
        value, unit = row.split()[:2]
        return float(value) * (1000 if unit == "s" else 1)

    starts = [start_ms(row) for row in rows]
    assert starts == sorted(starts), out
    assert first("DevicePlugin/Allocate") < first("CreateContainer") < first("StartContainer")
    assert "syncPod" in out and gpu_pod_uid in out.splitlines()[0], out
    assert picture.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.nodes("dgx")
def test_five_pods_started_at_once_each_have_their_devicehost_span(
    installed: Cluster, ns: str
) -> None:
    """Five GPU pods created together on the busy node: Jaeger finds devicehost's Allocate
    trace of each by that pod's own UID (each lookup resolved on its own, within the
    lookup window)."""
    names = [f"burst-{index}" for index in range(5)]
    for name in names:
        create_pod(installed, ns, pod_manifest(name, {"nvidia.com/gpu": "1"}, node="dgx"))
    uids = {name: wait_running(installed, ns, name)["metadata"]["uid"] for name in names}
    for name, uid in uids.items():
        found = wait_for(
            lambda uid=uid: traces(installed, "devicehost", {"k8s.pod.uid": uid}),
            60,
            f"devicehost's span of {name} by its UID",
        )
        assert any("Allocate" in operation for operation in span_names(found)), name
