"""``devicehost demo``: a simulated node, a kubelet stand-in, and a narrated tour.

Everything is real but the hardware: the host runs as ``devicehost run --simulate`` does,
every installed driver builds its simulated node, and the kubelet stand-in speaks the real
protocol over real unix sockets. No root, no hardware, a few seconds.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from devicehost.config import HostConfig
from devicehost.errors import DriverError
from devicehost.lifecycle import Resource
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn

log = logging.getLogger(__name__)


def _step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _describe(response: Any) -> str:
    parts = [f"env {k}={v}" for k, v in sorted(response.envs.items())]
    parts += [
        f"device {d.host_path}->{d.container_path} ({d.permissions})" for d in response.devices
    ]
    parts += [
        f"mount {m.host_path}->{m.container_path}{' ro' if m.read_only else ''}"
        for m in response.mounts
    ]
    parts += [f"cdi {c.name}" for c in response.cdi_devices]
    parts += [f"annotation {k}={v}" for k, v in sorted(response.annotations.items())]
    return "\n      ".join(parts) or "(nothing)"


def _health_flip(host: HostThread, kubelet: KubeletStandIn) -> None:
    for name, resource in host.host.resources.items():
        if not resource.driver.implements("devicehost_simulate_health"):
            continue
        device = next((d for d in resource.state.devices.values() if d.healthy), None)
        if device is None:
            continue
        for healthy, word in ((False, "Unhealthy"), (True, "Healthy")):
            started = time.perf_counter()
            resource.driver.call(
                "devicehost_simulate_health", resource=name, device_id=device.id, healthy=healthy
            )
            kubelet.wait_health(name, device.id, word, timeout=30)
            ms = (time.perf_counter() - started) * 1000
            print(
                f"  {name} {device.id}: simulated hardware says {word.lower()} -> kubelet "
                f"sees {word} after {ms:.0f} ms"
            )
        return
    print("  (no installed driver can simulate a health change)")


def _allocate_each(resources: dict[str, Resource], kubelet: KubeletStandIn) -> None:
    for name in resources:
        healthy = [i for i, d in kubelet.devices(name).items() if d.health == "Healthy"]
        if not healthy:
            print(f"  {name}: no healthy device to allocate")
            continue
        chosen = kubelet.preferred_allocation(name, healthy, size=1)
        started = time.perf_counter()
        response = kubelet.allocate(name, [chosen])
        ms = (time.perf_counter() - started) * 1000
        print(
            f"  {name} <- {chosen[0]} in {ms:.1f} ms:\n      "
            f"{_describe(response.container_responses[0])}"
        )


def run_demo(config: HostConfig, keep_running: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dh-demo-"))
    plugin_dir = workdir / "plugins"
    root = workdir / "root" if config.root == Path("/") else config.root
    config = dataclasses.replace(
        config,
        plugin_dir=plugin_dir,
        root=root,
        simulate=True,
        pod_resources_socket=None,
        initial_backoff=0.05,
        max_backoff=1.0,
    )
    print(f"devicehost demo: simulated node under {root}, kubelet stand-in in {plugin_dir}")
    kubelet = KubeletStandIn(plugin_dir, start=True)
    host = HostThread(config)
    try:
        started = time.perf_counter()
        try:
            host.start()
        except DriverError as exc:
            print(f"devicehost demo: a driver failed to start: {exc}")
            return 1
        resources = host.host.resources
        assert host.host.plugins is not None
        _step("Drivers")
        for info in host.host.plugins.infos:
            print(
                f"  {info.name:<10} {info.status:<12} {info.distribution} {info.version}"
                f"{'  ' + info.reason if info.reason else ''}"
            )
            for note in info.notes:
                print(f"  {'':<10} note: {note}")
        if not resources:
            print("\nNo driver reported any resource; install a driver package and try again.")
            return 1
        _step("Registration with the kubelet")
        for name in resources:
            request = kubelet.wait_registered(name)
            print(
                f"  {name:<32} endpoint {request.endpoint}  pre-start "
                f"{request.options.pre_start_required}"
            )
        print(
            f"  all {len(resources)} registered "
            f"{(time.perf_counter() - started) * 1000:.0f} ms after start"
        )
        _step("Devices the kubelet sees (ListAndWatch)")
        for name in resources:
            devices = kubelet.wait_devices(name, lambda d: bool(d))
            healthy = sum(d.health == "Healthy" for d in devices.values())
            ids = ", ".join(list(devices)[:4]) + (", ..." if len(devices) > 4 else "")
            print(f"  {name:<32} {len(devices)} devices, {healthy} healthy: {ids}")
        _step("One allocation per resource (GetPreferredAllocation, then Allocate)")
        _allocate_each(resources, kubelet)
        _step("A health change streamed through ListAndWatch, and the recovery")
        _health_flip(host, kubelet)
        _step("Kubelet restart: every socket deleted, kubelet.sock re-created")
        counts = {name: kubelet.registration_count(name) for name in resources}
        restarted = time.perf_counter()
        kubelet.restart()
        for name in resources:
            kubelet.wait_registered(name, count=counts[name] + 1, timeout=30)
        ms = (time.perf_counter() - restarted) * 1000
        print(f"  all {len(resources)} resources re-registered {ms:.0f} ms after the restart")
        if keep_running:
            print(f"\nServing; sockets in {plugin_dir}. Ctrl-C to stop.")
            while True:
                time.sleep(3600)
        _step("Done")
        print("  stopping: streams end, sockets removed, drivers shut down")
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        host.stop()
        kubelet.close()
        shutil.rmtree(workdir, ignore_errors=True)
