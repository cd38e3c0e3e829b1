"""Hostile files and answers on the node, with the host inside the pod's memory limit.

The kubelet's device-manager checkpoint and its PodResources answers are read for pod
identity on spans (docs/reliability.md, "Files on the node the host reads"). Each case
below plants one hostile input the way a buggy or hostile neighbour could, then times a
good driver's Allocates (each starts a pod-identity lookup, tracing on) against the same
host with ordinary inputs, with every process of the host inside a 256 MiB memory cgroup
(v1), as in the DaemonSet: is anything OOM-killed, what is the peak, does Allocate move.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import (
    NoMemoryCgroup,
    Workspace,
    allocate_latencies,
    cgroup_figures,
    devicehost_command,
    in_cgroup,
    median_of,
    memory_cgroup,
    running,
    socket_of,
    summary,
    verdict,
    wait_resources,
)
from bench.receiver import receiver_process
from bench.scale_driver import RESOURCE as SCALE_RESOURCE
from devicehost.testing import KubeletStandIn
from devicehost.testing.checkpoint import CHECKPOINT_FILE as CHECKPOINT
from devicehost.testing.podresources import PodResourcesStandIn

#: A case plants its input in the plugin directory and the PodResources stand-in; what it
#: returns is called when the case ends (a rewriting thread stopped).
Setup = Callable[[Path, PodResourcesStandIn], Callable[[], None]]


def _nothing() -> None:
    return None


def _entry(n: int) -> dict[str, Any]:
    """One container's entry as the kubelet writes it (its answer left small)."""
    return {
        "PodUID": str(uuid.UUID(int=n)),
        "ContainerName": "main",
        "ResourceName": "example.com/other",
        "DeviceIDs": {"0": [f"other-{n}"]},
        "AllocResp": "CgA=",
    }


def _checkpoint_of_size(size: int) -> bytes:
    """A checkpoint of ordinary entries, about ``size`` bytes."""
    one = len(json.dumps(_entry(0))) + 2
    entries = [_entry(n) for n in range(size // one)]
    return json.dumps({"Data": {"PodDeviceEntries": entries}, "Checksum": 0}).encode()


def _scale_pods(pods: PodResourcesStandIn) -> None:
    """Every case: PodResources names the pods holding the scale driver's devices, so
    each Allocate's lookup finds its pod and then reads the checkpoint for its UID."""
    for n in range(8):
        pods.assign("default", f"pod-{n}", "main", SCALE_RESOURCE, [f"dev-{n}"])


def ordinary(plugin_dir: Path, pods: PodResourcesStandIn) -> Callable[[], None]:
    (plugin_dir / CHECKPOINT).write_bytes(_checkpoint_of_size(8 * 1024))
    _scale_pods(pods)
    return _nothing


def symlink_to_dev_zero(plugin_dir: Path, pods: PodResourcesStandIn) -> Callable[[], None]:
    os.symlink("/dev/zero", plugin_dir / CHECKPOINT)
    _scale_pods(pods)
    return _nothing


def fifo(plugin_dir: Path, pods: PodResourcesStandIn) -> Callable[[], None]:
    os.mkfifo(plugin_dir / CHECKPOINT)
    _scale_pods(pods)
    return _nothing


def empty_entries(plugin_dir: Path, pods: PodResourcesStandIn) -> Callable[[], None]:
    """15.9 MiB of ``{}`` entries: JSON of tiny objects parses to ~25x its size."""
    count = int(15.9 * 2**20) // 3
    body = b'{"Data":{"PodDeviceEntries":[' + b"{}," * count + b'{}]},"Checksum":0}'
    (plugin_dir / CHECKPOINT).write_bytes(body)
    _scale_pods(pods)
    return _nothing


def rewritten(plugin_dir: Path, pods: PodResourcesStandIn) -> Callable[[], None]:
    """A ~13 MiB checkpoint replaced every 100 ms, as a busy kubelet rewrites its own."""
    body = _checkpoint_of_size(13 * 2**20)
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.wait(0.1):
            temporary = plugin_dir / ".checkpoint.tmp"
            temporary.write_bytes(body)
            os.replace(temporary, plugin_dir / CHECKPOINT)

    (plugin_dir / CHECKPOINT).write_bytes(body)
    _scale_pods(pods)
    thread = threading.Thread(target=rewrite, daemon=True)
    thread.start()

    def end() -> None:
        stop.set()
        thread.join()

    return end


def large_pod_resources(plugin_dir: Path, pods: PodResourcesStandIn) -> Callable[[], None]:
    """A PodResources List answer of ~2 MB: 45 000 pods, one container each."""
    (plugin_dir / CHECKPOINT).write_bytes(_checkpoint_of_size(8 * 1024))
    for n in range(45_000):
        pods.assign("busy", f"pod-{n}", "main", "example.com/other", [f"other-{n}"])
    _scale_pods(pods)
    return _nothing


CASES: dict[str, Setup] = {
    "ordinary": ordinary,
    "checkpoint_symlink_to_dev_zero": symlink_to_dev_zero,
    "checkpoint_fifo": fifo,
    "checkpoint_15_9_mib_of_empty_entries": empty_entries,
    "checkpoint_13_mib_rewritten_every_100_ms": rewritten,
    "pod_resources_answer_2_mb": large_pod_resources,
}


def _one_case(ws: Workspace, name: str, setup: Setup, endpoint: str, count: int) -> dict:
    """``name`` is short: it is in socket paths, which unix limits to 107 bytes."""
    plugin_dir = ws.plugin_dir(f"hostile-{name}")
    pod_resources = ws.path / f"pod-resources-{name}.sock"
    config = ws.config("drivers:\n  scale:\n    devices: 8\n")
    command = devicehost_command(
        plugin_dir, "--drivers", "scale", "--config", str(config),
        "--pod-resources-socket", str(pod_resources),
    )  # fmt: skip
    with (
        memory_cgroup(f"dh-bench-hostile-{os.getpid()}-{name}") as cgroup,
        PodResourcesStandIn(pod_resources) as pods,
        KubeletStandIn(plugin_dir, start=True) as kubelet,
    ):
        joined = in_cgroup(cgroup, command)
        end = setup(plugin_dir, pods)
        try:
            env = ws.env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
            with running(joined, env) as host:
                wait_resources(kubelet, 1)
                latencies = allocate_latencies(socket_of(kubelet, SCALE_RESOURCE), ["dev-1"], count)
                time.sleep(1.0)  # the last lookups finish
                alive = host.poll() is None
                figures = cgroup_figures(cgroup)
        finally:
            end()
        calls = pods.calls
    return {
        **summary(latencies),
        "host_alive": alive,
        "cgroup": figures,
        "pod_resources_list_calls": calls,
    }


def hostile_files(ws: Workspace, count: int, rounds: int) -> dict[str, Any]:
    """Each hostile case against the ordinary one, each host in a memory cgroup of its own;
    ``rounds`` rounds of every case in turn, so drift hits all alike (medians reported)."""
    what = (
        "devicehost (scale driver, 8 devices, tracing on, pod identity from a PodResources "
        "stand-in and the plugin directory's checkpoint) inside a 256 MiB memory cgroup (v1); "
        f"{count} Allocates of one device with each hostile input planted; {rounds} rounds "
        "of every case in turn, medians"
    )
    try:
        with memory_cgroup(f"dh-bench-probe-{os.getpid()}"):
            pass
    except NoMemoryCgroup as exc:
        return {"what": what, "skipped": str(exc), "goals": {}}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    with receiver_process() as receiver:
        for round_ in range(rounds):
            for index, (name, setup) in enumerate(CASES.items()):
                case = _one_case(ws, f"{index}-{round_}", setup, receiver.endpoint, count)
                runs[name].append(case)
    results = {
        name: {
            "p50_ms": median_of(r, "p50_ms"),
            "p99_ms": median_of(r, "p99_ms"),
            "peak_mib": max(x["cgroup"]["max_usage_mib"] for x in r),
            "oom_kills": sum(x["cgroup"]["oom_kills"] for x in r),
            "host_alive": all(x["host_alive"] for x in r),
            "runs": r,
        }
        for name, r in runs.items()
    }
    base = results["ordinary"]["p50_ms"]
    for figures in results.values():
        figures["p50_vs_ordinary"] = round(figures["p50_ms"] / base, 3)
    survived = all(r["host_alive"] and r["oom_kills"] == 0 for r in results.values())
    worst = max(r["p50_vs_ordinary"] for r in results.values())
    return {
        "what": what,
        "goal": "never OOM-killed, never stopped; Allocate p50 (median of the rounds) with "
        "any hostile input at most 1.2x the ordinary one's",
        "results": results,
        "goals": {
            "never_oom_killed_or_stopped": {"value": survived, "met": survived},
            "worst_p50_vs_ordinary": verdict(worst, 1.2),
        },
    }
