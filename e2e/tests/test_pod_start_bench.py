"""Pod-start overhead of a devicehost resource, measured on the real cluster
(`make bench-e2e`; deselected from `make e2e`). Writes bench/results/e2e_pod_start.json.

Waves on the DGX node (it has 8 GPUs), each of 8 pods asking for `nvidia.com/gpu: 1` and 8
asking for nothing, created together in one interleaved list, so a slow moment of the
node hits both kinds alike; WAVES waves give each side at least 100 pods, so a p99 is not
one pod, and the whole run is repeated RUNS times to show the spread. A pod's start is
from just before `kubectl create` of its wave to the moment a watch of the namespace first
reports its container running, so both sides include the same scheduling, sandbox and
runtime work and differ only by the device plugin's part (admission's Allocate and the
container edits it returns). Times come from this process's monotonic clock: the pods'
own timestamps have one-second resolution.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest
from harness.cluster import Cluster, wait_for
from harness.pods import create_all, device_resources, pod_manifest

WAVES = 13
#: Pods of each kind in a wave (the DGX node's GPUs).
WAVE = 8
RUNS = 3
RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "e2e_pod_start.json"


class Watch:
    """When each pod of the namespace was first seen with a running container."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        argv = [
            *cluster.kubectl_argv(),
            *("-n", namespace, "get", "pods", "--watch", "-o", "json"),
            "--output-watch-events=false",
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.running: dict[str, float] = {}
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in self.proc.stdout:
            buffer += line
            try:
                pod, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                continue
            buffer = buffer.lstrip()[end:]
            statuses = pod.get("status", {}).get("containerStatuses", [])
            if any("running" in s.get("state", {}) for s in statuses):
                self.running.setdefault(pod["metadata"]["name"], time.monotonic())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 0.5) * 1000, 1),
        "p95_ms": round(percentile(values, 0.95) * 1000, 1),
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "mean_ms": round(statistics.fmean(values) * 1000, 1),
        "n": len(values),
    }


QUANTILES = ("p50_ms", "p95_ms", "p99_ms")


def one_run(cluster: Cluster, ns: str, run: int) -> dict[str, list[float]]:
    """WAVES mixed waves; each pod's start time in seconds, by kind."""
    watch = Watch(cluster, ns)
    times: dict[str, list[float]] = {"gpu": [], "none": []}
    try:
        for wave in range(WAVES):
            names = {kind: [f"{kind}-{run}-{wave}-{i}" for i in range(WAVE)] for kind in times}
            items = [
                pod_manifest(name, limits, node="dgx")
                for gpu, none in zip(names["gpu"], names["none"], strict=True)
                for name, limits in ((gpu, {"nvidia.com/gpu": "1"}), (none, {}))
            ]
            everyone = [item["metadata"]["name"] for item in items]
            t0 = time.monotonic()
            create_all(cluster, ns, items)
            wait_for(
                lambda everyone=everyone: all(n in watch.running for n in everyone), 300, "wave"
            )
            for kind in times:
                times[kind] += [watch.running[n] - t0 for n in names[kind]]
            cluster.kubectl("-n", ns, "delete", "pods", "--all", "--wait=true")
    finally:
        watch.stop()
    return times


@pytest.mark.bench
@pytest.mark.nodes("dgx")
def test_pod_start_with_and_without_a_device(installed: Cluster, ns: str) -> None:
    """Every pod of both sides starts in each run; their start times, each run's summary
    and ratios, and the spread of the ratios over the runs go to the JSON result."""
    # devicehost is Ready once its resources are registered, but the Node shows them only
    # at the kubelet's next status update: GPU pods created before that wait for the
    # scheduler's retry (about 2 s in one run), which is not a start's cost.
    wait_for(
        lambda: device_resources(installed, "dgx").get("nvidia.com/gpu") == str(WAVE),
        60,
        f"the Node advertising nvidia.com/gpu: {WAVE}",
    )
    started = time.monotonic()
    runs = []
    for run in range(RUNS):
        times = one_run(installed, ns, run)
        gpu, none = summary(times["gpu"]), summary(times["none"])
        runs.append(
            {
                "with_device": gpu,
                "without": none,
                "ratio": {k: round(gpu[k] / none[k], 3) for k in QUANTILES},
                "pods_ms": {
                    kind: [round(t * 1000, 1) for t in values] for kind, values in times.items()
                },
            }
        )
    spread = {
        k: {
            "min": min(r["ratio"][k] for r in runs),
            "median": statistics.median(r["ratio"][k] for r in runs),
            "max": max(r["ratio"][k] for r in runs),
        }
        for k in QUANTILES
    }
    RESULT.write_text(
        json.dumps(
            {
                "benchmark": "e2e_pod_start",
                "command": "make bench-e2e",
                "date": time.strftime("%Y-%m-%d"),
                "what": f"{RUNS} runs of {WAVES} waves, each wave {WAVE} pods asking for "
                f"nvidia.com/gpu: 1 and {WAVE} asking for nothing created together "
                f"(interleaved), {WAVES * WAVE} pods of each kind per run, on the simulated "
                "DGX H100 node of the e2e cluster (real kubelet, containerd, runc); from "
                "kubectl create to the watch seeing the container running",
                "goal": "with-device p50 and p99 within 5 % of without, in every run",
                "ratio_spread": spread,
                "goals": {
                    f"{k}_ratio": {
                        "worst": spread[k]["max"],
                        "goal_at_most": 1.05,
                        "met": spread[k]["max"] <= 1.05,
                    }
                    for k in ("p50_ms", "p99_ms")
                },
                "runs": runs,
                "seconds": round(time.monotonic() - started, 1),
            },
            indent=2,
        )
        + "\n"
    )
    assert all(len(r["pods_ms"]["gpu"]) == len(r["pods_ms"]["none"]) == WAVES * WAVE for r in runs)
