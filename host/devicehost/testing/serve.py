"""``serve_driver()``: serve one installed driver to the kubelet stand-in, outside pytest,
and print what the kubelet saw — its registration, its devices and an Allocate answer.

What ``python -m devicehost.testing serve NAME`` runs. Everything is as under a real
kubelet but the kubelet itself: a real host (``HostThread``) serves the driver in its own
worker on real unix sockets, and the stand-in registers it and calls it as the kubelet does.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import grpc

from devicehost.config.host_config import HostConfig
from devicehost.errors import ConfigError, DriverError
from devicehost.model import ContainerEdits, Device
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn

#: How long a change may take to arrive under --keep-running before the wait starts again.
WATCH_SECONDS = 3600.0


def describe(edits: ContainerEdits) -> list[str]:
    """One line per item of a container's answer, as a person reads it."""
    lines = [f"env {k}={v}" for k, v in sorted(edits.envs.items())]
    lines += [f"device {d.host_path}->{d.container_path} ({d.permissions})" for d in edits.devices]
    lines += [
        f"mount {m.host_path}->{m.container_path}{' ro' if m.read_only else ''}"
        for m in edits.mounts
    ]
    lines += [f"cdi {name}" for name in edits.cdi_devices]
    lines += [f"annotation {k}={v}" for k, v in sorted(edits.annotations.items())]
    return lines or ["(nothing)"]


def _device_lines(devices: Mapping[str, Device]) -> list[str]:
    healthy = sum(d.healthy for d in devices.values())
    lines = [f"devices ({len(devices)}, {healthy} healthy):"]
    for device in devices.values():
        numa = ",".join(map(str, device.numa_nodes)) or "-"
        lines.append(f"  {device.id:<32} {device.health:<10} numa {numa}")
    return lines


def serve_driver(
    name: str,
    *,
    config: Mapping[str, Any] | None = None,
    simulated: bool = True,
    node: str = "",
    root: Path | str | None = None,
    allocate: Sequence[str] | None = None,
    keep_running: bool = False,
    timeout: float = 30.0,
    out: TextIO | None = None,
) -> int:
    """Serve the installed driver ``name`` to a kubelet stand-in and print its registration,
    devices and one Allocate answer (of ``allocate``, or of its first healthy device).

    ``config`` is the driver's own section (``drivers.<name>``). With ``simulated`` (the
    default) the driver builds its simulated hardware first (``node``: a machine of
    ``devicehost demo --list-nodes``); otherwise it reads the tree under ``root``. With
    ``keep_running`` it then serves until Ctrl-C, printing each new device list. Returns 0
    when every resource registered and its Allocate was answered, else 1.
    """
    stream = out or sys.stdout

    def say(line: str = "") -> None:
        print(line, file=stream, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="dh-standin-"))
    plugin_dir = workdir / "plugins"
    kubelet = KubeletStandIn(plugin_dir, start=True)
    base = HostConfig(
        plugin_dir=plugin_dir,
        root=Path(root) if root is not None else workdir / "root",
        pod_resources_socket=None,
        metrics_address="",
        initial_backoff=0.05,
        max_backoff=1.0,
    )
    overrides = {
        "enabledDrivers": [name],
        "simulate": simulated,
        "simulateNode": node,
        "drivers": {name: dict(config or {})},
    }
    host: HostThread | None = None
    try:
        if node:
            from devicehost.simulation.machines import check_node

            check_node(node, "serve_driver")
        host = HostThread(base, **overrides)
        try:
            host.start(timeout)
        except DriverError as exc:
            say(f"driver {name}: failed to start: {exc}")
            return 1
        assert host.host.plugins is not None
        info = next(i for i in host.host.plugins.infos if i.name == name)
        say(f"driver {name}: {info.status} ({info.distribution} {info.version})")
        if info.reason:
            say(f"  reason: {info.reason}")
        for note in info.notes:
            say(f"  note: {note}")
        if simulated:
            say(f"  simulated tree: {host.simulated_root(name).path}")
        say(f"  kubelet stand-in: {kubelet.socket_path}")
        resources = [r for r, res in host.host.resources.items() if res.driver.name == name]
        if not resources:
            say("no resources: the driver serves nothing on this node")
            return 1
        # A multi-resource driver's IDs each belong to one resource: each resource is asked
        # for the requested IDs it has; an ID no resource has is still asked (and refused).
        known = host.call(
            lambda: {i for r in resources for i in host.host.resources[r].state.devices}
        )
        ok = all(
            [_show(kubelet, resource, allocate, timeout, say, known) for resource in resources]
        )
        if keep_running:
            _follow(kubelet, resources, say)
        return 0 if ok else 1
    except ConfigError as exc:
        say(f"config error: {exc}")
        return 2
    except TimeoutError as exc:
        say(str(exc))
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if host is not None:
            host.stop()
        kubelet.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _show(
    kubelet: KubeletStandIn,
    resource: str,
    allocate: Sequence[str] | None,
    timeout: float,
    say: Any,
    known: Collection[str] = (),
) -> bool:
    """Print one resource's registration, first device list and an Allocate answer: of
    the asked IDs this resource has, or of all of them when no resource of the driver
    (``known``) has any, or of its first healthy device when none was asked."""
    say(resource)
    registration = kubelet.wait_registered(resource, timeout)
    options = registration.options
    say(
        f"  registered: endpoint {registration.endpoint}, version {registration.version}, "
        f"pre-start {options.pre_start_required}, preferred allocation "
        f"{options.get_preferred_allocation_available}"
    )
    kubelet.wait_until(lambda: kubelet.lists(resource) or None, timeout, f"{resource}'s list")
    devices = kubelet.devices(resource)
    for line in _device_lines(devices):
        say(f"  {line}")
    asked = list(allocate or [])
    mine = [i for i in asked if i in devices]
    if asked and not mine and any(i in known for i in asked):
        say(f"  Allocate: none of {', '.join(asked)} is a device of this resource; skipped")
        return True
    ids = mine or asked or [i for i, d in devices.items() if d.healthy][:1]
    if not ids:
        say("  Allocate: no healthy device to allocate")
        return True
    try:
        (container,) = kubelet.allocate(resource, [ids], timeout=timeout)
    except grpc.RpcError as exc:
        say(f"  Allocate {ids}: refused, {exc.code().name}: {exc.details()}")
        return False
    say(f"  Allocate {ids}:")
    for line in describe(container):
        say(f"    {line}")
    return True


def _follow(kubelet: KubeletStandIn, resources: list[str], say: Any) -> None:
    """Serve until interrupted, printing each resource's new device list as it arrives."""
    say("serving; Ctrl-C to stop")
    seen = {r: len(kubelet.lists(r)) for r in resources}
    while True:
        try:
            changed = kubelet.wait_until(
                lambda: [r for r in resources if len(kubelet.lists(r)) != seen[r]] or None,
                WATCH_SECONDS,
                "a new device list",
            )
        except TimeoutError:
            continue
        for resource in changed:
            seen[resource] = len(kubelet.lists(resource))
            say(resource)
            for line in _device_lines(kubelet.devices(resource)):
                say(f"  {line}")
