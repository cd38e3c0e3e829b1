"""The benchmarks. Each returns a JSON-ready dict with the figure, its goal and its baseline.

devicehost runs as ``devicehost run --simulate`` with the three vendor drivers on their
simulated hardware (or the bench's scale driver), in its own process, exactly as deployed;
the minimal grpcio plugin runs beside it in the same run. The kubelet stand-in and the
clients live in this process.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import grpc

from bench.harness import (
    VENDOR_DRIVERS,
    Workspace,
    allocate_latencies,
    call_latencies,
    devicehost_command,
    healthy_device,
    median_of,
    minimal_command,
    rss_mib,
    running,
    socket_of,
    summary,
    wait_resources,
)
from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.testing import KubeletStandIn, OtlpReceiver

SIMULATED = ("--simulate", "--drivers", ",".join(VENDOR_DRIVERS))
PREFERRED = "nvidia.com/gpu"


def _pick(resources: list[str]) -> str:
    return PREFERRED if PREFERRED in resources else resources[0]


def allocate_round_trip(ws: Workspace, runs: int, count: int, paced: int) -> dict[str, Any]:
    """Allocate of 1 device: minimal plugin vs devicehost with tracing off and on, both
    back to back (sustained load) and paced at 50 per second (bursts of pod starts)."""
    receiver = OtlpReceiver().start()
    setups = {
        "minimal_plugin": (minimal_command, {}),
        "devicehost_tracing_off": (lambda d: devicehost_command(d, *SIMULATED), {}),
        "devicehost_tracing_on": (
            lambda d: devicehost_command(d, *SIMULATED),
            {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
        ),
    }
    modes = {"back_to_back": (count, 0.0), "paced_50_per_s": (paced, 0.02)}
    targets: dict[str, tuple[Any, list[str]]] = {}
    with contextlib.ExitStack() as stack:
        for name, (command, extra) in setups.items():
            plugin_dir = ws.plugin_dir(f"rtt-{name}")
            kubelet = stack.enter_context(KubeletStandIn(plugin_dir, start=True))
            stack.enter_context(running(command(plugin_dir), ws.env(**extra)))
            resource = _pick(wait_resources(kubelet))
            targets[name] = (socket_of(kubelet, resource), [healthy_device(kubelet, resource)])
        results: dict[str, dict[str, list[dict[str, float]]]] = {
            mode: {name: [] for name in setups} for mode in modes
        }
        for _ in range(runs):  # interleaved, so drift on a busy machine hits all alike
            for mode, (calls, pace) in modes.items():
                for name, (socket, ids) in targets.items():
                    samples = allocate_latencies(socket, ids, calls, pace=pace)
                    results[mode][name].append(summary(samples))
                    time.sleep(0.5)  # a pause between setups, as between pod bursts
    receiver.stop()
    figures: dict[str, Any] = {}
    for mode, by_setup in results.items():
        table = {
            name: {"p50_ms": median_of(r, "p50_ms"), "p99_ms": median_of(r, "p99_ms"), "runs": r}
            for name, r in by_setup.items()
        }
        base, off, on = (table[n]["p99_ms"] for n in setups)
        figures[mode] = {
            "results": table,
            "p99_ratio_tracing_on_vs_minimal": round(on / base, 3),
            "p99_tracing_overhead_percent": round((on / off - 1) * 100, 1),
        }
    return {
        "what": f"Allocate round trip, 1 device, median of {runs} runs: {count} back-to-back "
        f"calls, and {paced} calls paced 20 ms apart; devicehost serves "
        f"{', '.join(VENDOR_DRIVERS)} on simulated hardware; tracing on exports "
        "OTLP/gRPC to an in-process receiver",
        "goal": "p99 with tracing on within 1.5x the minimal plugin's; tracing adds <= 10% p99",
        **figures,
        "spans_received": len(receiver.spans),
    }


def cold_start(ws: Workspace, runs: int) -> dict[str, Any]:
    """Process start → every resource registered with the kubelet."""
    samples: dict[str, list[float]] = {"minimal_plugin": [], "devicehost": []}
    expected: dict[str, int | None] = {"minimal_plugin": 1, "devicehost": None}
    commands = {
        "minimal_plugin": minimal_command,
        "devicehost": lambda d: devicehost_command(d, *SIMULATED),
    }
    for index in range(runs + 1):
        for name, command in commands.items():
            plugin_dir = ws.plugin_dir(f"cold-{name}-{index}")
            with KubeletStandIn(plugin_dir, start=True) as kubelet:
                started = time.perf_counter()
                with running(command(plugin_dir), ws.env()):
                    resources = wait_resources(kubelet, expected[name])
                    elapsed = max(kubelet.registered_at[r] for r in resources) - started
            expected[name] = len(resources)
            if index:  # the first run warms the page cache for both
                samples[name].append(round(elapsed * 1000, 1))
    return {
        "what": "process start to the last resource's RegisterRequest at the kubelet "
        f"stand-in; devicehost with {', '.join(VENDOR_DRIVERS)} simulated "
        f"({expected['devicehost']} resources); median of {runs} runs after a warm-up",
        "goal": "under 500 ms",
        "results": {
            name: {"median_ms": sorted(s)[len(s) // 2], "runs_ms": s} for name, s in samples.items()
        },
    }


def kubelet_restart(ws: Workspace, runs: int) -> dict[str, Any]:
    """kubelet.sock re-created → every resource re-registered."""
    results: dict[str, Any] = {}
    for name, command in (
        ("minimal_plugin", minimal_command),
        ("devicehost", lambda d: devicehost_command(d, *SIMULATED)),
    ):
        plugin_dir = ws.plugin_dir(f"restart-{name}")
        with (
            KubeletStandIn(plugin_dir, start=True) as kubelet,
            running(command(plugin_dir), ws.env()),
        ):
            resources = wait_resources(kubelet)
            samples = []
            for _ in range(runs):
                counts = {r: kubelet.registration_count(r) for r in resources}
                kubelet.restart()
                for r in resources:
                    kubelet.wait_registered(r, count=counts[r] + 1, timeout=30)
                latest = max(kubelet.registered_at[r] for r in resources)
                samples.append((latest - kubelet.serving_since) * 1000)
                time.sleep(0.05)
        results[name] = {**summary(samples), "resources": len(resources)}
    return {
        "what": "from the new kubelet.sock answering to the last resource's RegisterRequest, "
        f"{runs} kubelet restarts (every socket deleted first, as the kubelet does)",
        "goal": "under 100 ms",
        "results": results,
    }


def _flip_latencies(
    ws: Workspace, kubelet: KubeletStandIn, resource: str, count: int
) -> list[float]:
    """Touch the scale driver's trigger; time until the kubelet sees dev-0 flip."""
    trigger = ws.root / "trigger"
    trigger.touch()
    time.sleep(0.05)
    samples = []
    for index in range(count):
        target = "Unhealthy" if index % 2 == 0 else "Healthy"
        started = time.perf_counter()
        os.utime(trigger, ns=(time.time_ns(), time.time_ns()))
        kubelet.wait_health(resource, "dev-0", target, timeout=10)
        samples.append((time.perf_counter() - started) * 1000)
        time.sleep(0.02)
    return samples


def health_change(ws: Workspace, count: int) -> dict[str, Any]:
    """A driver's watch hook notices a change → the kubelet receives the new list."""
    plugin_dir = ws.plugin_dir("health")
    config = ws.config("drivers:\n  scale:\n    devices: 8\n")
    with (
        KubeletStandIn(plugin_dir, start=True) as kubelet,
        running(
            devicehost_command(
                plugin_dir, "--drivers", "scale", "--root", str(ws.root), "--config", str(config)
            ),
            ws.env(),
        ),
    ):
        resource = wait_resources(kubelet, 1)[0]
        samples = _flip_latencies(ws, kubelet, resource, count)
    return {
        "what": f"{count} health flips of one of 8 devices: from the change (a file the bench "
        "driver's watch hook polls every 1 ms) to the new ListAndWatch list at the "
        "kubelet stand-in",
        "goal": "under 100 ms",
        "results": {
            "devicehost": summary(samples),
            "minimal_plugin": "n/a: the minimal plugin has no health model",
        },
    }


def _scale_figures(socket: Any, ids: list[str], count: int) -> dict[str, Any]:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        preferred = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=8)
            ]
        )

        def first_list() -> None:
            stream = stub.ListAndWatch(pb.Empty())
            next(stream)
            stream.cancel()

        return {
            "list_to_new_stream": summary(call_latencies(first_list, count)),
            "get_preferred_allocation_8_of_all": summary(
                call_latencies(lambda: stub.GetPreferredAllocation(preferred), count)
            ),
            "allocate_8": summary(allocate_latencies(socket, ids[:8], count, 20)),
        }


def scale(ws: Workspace, devices: int, count: int) -> dict[str, Any]:
    """ListAndWatch, GetPreferredAllocation and Allocate with thousands of devices."""
    config = ws.config(f"drivers:\n  scale:\n    devices: {devices}\n")
    results: dict[str, Any] = {}
    for name, command in (
        ("minimal_plugin", lambda d: minimal_command(d, devices)),
        (
            "devicehost",
            lambda d: devicehost_command(
                d, "--drivers", "scale", "--root", str(ws.root), "--config", str(config)
            ),
        ),
    ):
        plugin_dir = ws.plugin_dir(f"scale-{name}")
        with (
            KubeletStandIn(plugin_dir, start=True) as kubelet,
            running(command(plugin_dir), ws.env()),
        ):
            resource = wait_resources(kubelet, 1)[0]
            ids = sorted(kubelet.devices(resource))
            figures = _scale_figures(socket_of(kubelet, resource), ids, count)
            if name == "devicehost":
                figures["list_after_health_change"] = summary(
                    _flip_latencies(ws, kubelet, resource, 20)
                )
            results[name] = figures
    return {
        "what": f"{devices} devices in one resource: a full ListAndWatch message, "
        f"GetPreferredAllocation of 8 over all of them, Allocate of 8 ({count} calls "
        "each; the health-change figure includes the driver's 1 ms poll and a full "
        "re-enumeration)",
        "goal": "each under 10 ms",
        "results": results,
    }


def memory(ws: Workspace, allocations: int) -> dict[str, Any]:
    """Resident memory after start and after many Allocates (three drivers, tracing on)."""
    receiver = OtlpReceiver().start()
    results: dict[str, Any] = {}
    for name, command, extra in (
        ("minimal_plugin", minimal_command, {}),
        (
            "devicehost",
            lambda d: devicehost_command(d, *SIMULATED),
            {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
        ),
    ):
        plugin_dir = ws.plugin_dir(f"memory-{name}")
        with (
            KubeletStandIn(plugin_dir, start=True) as kubelet,
            running(command(plugin_dir), ws.env(**extra)) as process,
        ):
            resource = _pick(wait_resources(kubelet))
            socket, ids = socket_of(kubelet, resource), [healthy_device(kubelet, resource)]
            time.sleep(1.0)
            after_start = rss_mib(process.pid)
            allocate_latencies(socket, ids, allocations // 2, warmup=0)
            halfway = rss_mib(process.pid)
            allocate_latencies(socket, ids, allocations - allocations // 2, warmup=0)
            time.sleep(6.0)  # let the span exporter drain its last batch
            after = rss_mib(process.pid)
        results[name] = {
            "after_start_mib": after_start,
            "halfway_mib": halfway,
            "after_allocations_mib": after,
            "allocations": allocations,
        }
    receiver.stop()
    return {
        "what": f"VmRSS after start (three drivers simulated, tracing on to an in-process "
        f"receiver), halfway and after {allocations} Allocates",
        "goal": "under 60 MiB; no growth beyond noise between halfway and the end",
        "results": results,
        "spans_received": len(receiver.spans),
    }
