"""NodePrepareResources of devicehost against a Go floor, through the same real kubelet
(`make bench-e2e`; deselected from `make e2e`). Writes bench/results/e2e_dra_prepare.json.

The floor is bench/dra-floor: a minimal DRA driver on the Kubernetes project's own helper
(k8s.io/dynamic-resource-allocation/kubeletplugin), doing the work a prepare must do as
devicehost does it (a CDI spec per claim and a checkpoint, each written atomically). Both
serve the DGX node at once; each wave creates 8 pods with a claim for one of devicehost's
GPUs and 8 with a claim for one of the floor's devices, interleaved, so a slow moment of
the node hits both alike. Each call's time is the kubelet's own: the interval between its
"Calling NodePrepareResources rpc" and "Done calling NodePrepareResources rpc" log lines
(dra_plugin.go at --vmodule=dra_plugin=4, microsecond timestamps), paired by driver and
claim UID. The kubelet's histogram of the same calls starts at 0.1 s, too coarse here.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_all
from test_dra import GPU_DRIVER, claim_pod, claim_template, dra  # noqa: F401 (fixture)
from test_pod_start_bench import Watch, percentile

FLOOR_DRIVER = "floor.bench.devicehost.io"
WAVES = 13
WAVE = 8
RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "e2e_dra_prepare.json"
#: The claim's UID: in the request as ``uid:"…"``, in the response as the key of its entry
#: (the endpoint before them names the plugin pod's UID, not the claim's).
CLAIM = re.compile(
    r'(?:uid|key):\\"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\\"'
)
LINE = re.compile(
    r'^I\d{4} (\d\d):(\d\d):(\d\d\.\d{6}) .*"(Calling|Done calling) NodePrepareResources rpc"'
    r'.*driverName="([^"]+)"'
)


def floor_objects(ns: str) -> list[dict]:
    """The floor's service account and its rights (what kubeletplugin's helper calls),
    its DeviceClass, and its pod on the DGX node with the kubelet's plugin directories."""
    host = {
        "plugins": "/var/lib/kubelet/plugins",
        "registry": "/var/lib/kubelet/plugins_registry",
        "cdi": "/var/run/cdi",
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "dra-floor"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "dra-floor"},
            "rules": [
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceclaims"],
                    "verbs": ["get"],
                },
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "dra-floor"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "dra-floor",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "dra-floor", "namespace": ns}],
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": FLOOR_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{FLOOR_DRIVER}"'}}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "dra-floor"},
            "spec": {
                "nodeName": "dgx",
                "serviceAccountName": "dra-floor",
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": "floor",
                        "image": "docker.io/library/dra-floor:e2e",
                        "imagePullPolicy": "Never",
                        "env": [
                            {
                                "name": "NODE_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                            },
                            {
                                "name": "POD_UID",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
                            },
                            # No kube-proxy in the tier: the API server's own address, as
                            # e2e/manifests-dra/api-server.yaml gives devicehost.
                            {"name": "KUBERNETES_SERVICE_HOST", "value": "10.200.0.1"},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
                        ],
                        "volumeMounts": [
                            {"name": name, "mountPath": path} for name, path in host.items()
                        ],
                    }
                ],
                "volumes": [
                    {"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
                    for name, path in host.items()
                ],
            },
        },
    ]


def prepare_times(log: str) -> dict[str, list[float]]:
    """Seconds of each NodePrepareResources call, by driver, from the kubelet's log."""
    started: dict[tuple[str, str], float] = {}
    times: dict[str, list[float]] = {}
    for line in log.splitlines():
        match = LINE.match(line)
        claim = CLAIM.search(line) if match else None
        if match is None or claim is None:
            continue
        hours, minutes, seconds, what, driver = match.groups()
        at = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        key = (driver, claim.group(1))
        if what == "Calling":
            started[key] = at
        elif key in started:
            times.setdefault(driver, []).append((at - started.pop(key)) % 86400)
    return times


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 0.5) * 1000, 3),
        "p99_ms": round(percentile(values, 0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(values) * 1000, 3),
        "n": len(values),
    }


def write_result(times: dict[str, list[float]], seconds: float) -> tuple[dict, dict]:
    """The JSON result from each driver's call times; both drivers' summaries."""
    devicehost, floor = summary(times[GPU_DRIVER]), summary(times[FLOOR_DRIVER])
    ratio = {k: round(devicehost[k] / floor[k], 3) for k in ("p50_ms", "p99_ms")}
    RESULT.write_text(
        json.dumps(
            {
                "benchmark": "e2e_dra_prepare",
                "command": "make bench-e2e",
                "date": time.strftime("%Y-%m-%d"),
                "what": f"{WAVES} waves of {WAVE} pods with a claim for one devicehost GPU "
                f"and {WAVE} with a claim for one device of a Go floor driver "
                "(bench/dra-floor, k8s.io/dynamic-resource-allocation kubeletplugin), "
                "interleaved, on the simulated DGX H100 node of the e2e cluster; each "
                "NodePrepareResources call timed by the real kubelet's own log lines "
                "around it",
                "goal": "devicehost p50 and p99 <= 1.5x the Go floor's",
                "devicehost": devicehost,
                "go_floor": floor,
                "ratio": ratio,
                "goals": {
                    f"{k}_ratio": {"value": v, "goal_at_most": 1.5, "met": v <= 1.5}
                    for k, v in ratio.items()
                },
                "calls_ms": {
                    "devicehost": [round(t * 1000, 3) for t in times[GPU_DRIVER]],
                    "go_floor": [round(t * 1000, 3) for t in times[FLOOR_DRIVER]],
                },
                "seconds": round(seconds, 1),
            },
            indent=2,
        )
        + "\n"
    )
    return devicehost, floor


@pytest.mark.bench
@pytest.mark.nodes("dgx")
def test_node_prepare_against_the_go_floor(dra: Cluster, ns: str) -> None:  # noqa: F811
    """Every pod of both drivers runs; each driver's NodePrepareResources times, as the
    kubelet saw them, and their ratio go to the JSON result."""
    objects = floor_objects(ns)
    create_all(dra, ns, objects)
    try:
        wait_for(
            lambda: (
                len(
                    dra.get("resourceslices", "--field-selector", f"spec.driver={FLOOR_DRIVER}")[
                        "items"
                    ]
                )
                == 1
            ),
            120,
            "the floor's ResourceSlice",
        )
        templates = [claim_template("dh", 1), claim_template("floor", 1, FLOOR_DRIVER)]
        for template in templates:
            dra.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(template))
        log_path = dra.logs / "dgx-kubelet.log"
        offset = log_path.stat().st_size
        started = time.monotonic()
        watch = Watch(dra, ns)
        try:
            for wave in range(WAVES):
                names = [f"{kind}-{wave}-{i}" for i in range(WAVE) for kind in ("dh", "floor")]
                items = [claim_pod(name, name.split("-")[0]) for name in names]
                create_all(dra, ns, items)
                wait_for(lambda names=names: all(n in watch.running for n in names), 300, "wave")
                dra.kubectl("-n", ns, "delete", "pods", *names, "--wait=true")
        finally:
            watch.stop()
        with log_path.open() as log:
            log.seek(offset)
            times = prepare_times(log.read())
    finally:
        floor_log = dra.kubectl("-n", ns, "logs", "dra-floor", check=False)
        (dra.logs / "dra-floor.log").write_text(floor_log.stdout + floor_log.stderr)
        dra.kubectl(
            "delete",
            "--ignore-not-found",
            "clusterrolebinding/dra-floor",
            "clusterrole/dra-floor",
            f"deviceclass/{FLOOR_DRIVER}",
        )
    devicehost, floor = write_result(times, time.monotonic() - started)
    assert devicehost["n"] >= WAVES * WAVE and floor["n"] >= WAVES * WAVE
