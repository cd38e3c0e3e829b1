"""Pod-start overhead of a devicehost resource, measured on the real cluster
(`make bench-e2e`; deselected from `make e2e`). Writes bench/results/e2e_pod_start.json.

Waves of 8 pods on the DGX node (it has 8 GPUs), alternating: 8 pods asking for
`nvidia.com/gpu: 1`, then 8 asking for nothing, until each side has WAVES x 8 pods. A pod's
start is from just before `kubectl create` of its wave to the moment a watch of the
namespace first reports its container running, so both sides include the same scheduling,
sandbox and runtime work and differ only by the device plugin's part (admission's Allocate
and the container edits it returns). Times come from this process's monotonic clock: the
pods' own timestamps have one-second resolution.
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
from harness.pods import pod_manifest

WAVES = 7
WAVE = 8
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
        "p99_ms": round(percentile(values, 0.99) * 1000, 1),
        "mean_ms": round(statistics.fmean(values) * 1000, 1),
        "n": len(values),
    }


@pytest.mark.bench
@pytest.mark.nodes("dgx")
def test_pod_start_with_and_without_a_device(installed: Cluster, ns: str) -> None:
    """Every pod of both sides starts; their start times go to the JSON result."""
    watch = Watch(installed, ns)
    started = time.monotonic()
    times: dict[str, list[float]] = {"gpu": [], "none": []}
    try:
        for wave in range(WAVES * 2):
            side = "gpu" if wave % 2 == 0 else "none"
            limits = {"nvidia.com/gpu": "1"} if side == "gpu" else {}
            names = [f"{side}-{wave}-{i}" for i in range(WAVE)]
            items = [pod_manifest(n, limits, node="dgx") for n in names]
            t0 = time.monotonic()
            installed.kubectl(
                "-n",
                ns,
                "create",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
            )
            wait_for(lambda names=names: all(n in watch.running for n in names), 300, "wave")
            times[side] += [watch.running[n] - t0 for n in names]
            installed.kubectl("-n", ns, "delete", "pods", "--all", "--wait=true")
    finally:
        watch.stop()
    gpu, none = summary(times["gpu"]), summary(times["none"])
    ratio = {k: round(gpu[k] / none[k], 3) for k in ("p50_ms", "p99_ms")}
    RESULT.write_text(
        json.dumps(
            {
                "benchmark": "e2e_pod_start",
                "command": "make bench-e2e",
                "date": time.strftime("%Y-%m-%d"),
                "what": f"{WAVES * WAVE} pods asking for nvidia.com/gpu: 1 against "
                f"{WAVES * WAVE} asking for nothing, in alternating waves of {WAVE} on the "
                "simulated DGX H100 node of the e2e cluster (real kubelet, containerd, runc); "
                "from kubectl create to the watch seeing the container running",
                "goal": "with-device p50 and p99 within 5 % of without",
                "results": {"with_device": gpu, "without": none, "ratio": ratio},
                "goals": {
                    f"{k}_ratio": {"value": v, "goal_at_most": 1.05, "met": v <= 1.05}
                    for k, v in ratio.items()
                },
                "seconds": round(time.monotonic() - started, 1),
            },
            indent=2,
        )
        + "\n"
    )
    assert len(times["gpu"]) == len(times["none"]) == WAVES * WAVE
