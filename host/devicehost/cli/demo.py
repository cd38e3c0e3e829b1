"""``devicehost demo``: a simulated node, a kubelet stand-in, and a narrated tour.

Everything is real but the hardware: the host runs as ``devicehost run --simulate`` does,
every installed driver builds its simulated node, the kubelet stand-in speaks the real
protocol over real unix sockets, a PodResources stand-in tells which demo pod got which
device, spans go through the real OpenTelemetry SDK and OTLP exporter (to an in-process
receiver, or to ``--otlp-endpoint``), and metrics are scraped over HTTP. No root, no
hardware, a few seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from devicehost.config.host_config import HostConfig, redact_url
from devicehost.errors import DriverError
from devicehost.telemetry import tracing
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn
from devicehost.testing.otlp import OtlpReceiver, attributes
from devicehost.testing.podresources import PodResourcesStandIn
from devicehost.testing.serve import describe

METRICS_SHOWN = (
    "devicehost_devices",
    "devicehost_allocations_total",
    "devicehost_registrations_total",
    "devicehost_kubelet_restarts_total",
)


def list_nodes() -> None:
    """Print the machines ``--node`` names, one line each, and who publishes a contributed
    one."""
    from devicehost.simulation.machines import machines

    print("machines `devicehost demo --node NAME` (and `run --simulate --node NAME`) build:")
    for machine in machines():
        source = "" if machine.distribution == "devicehost" else f" [{machine.distribution}]"
        print(f"  {machine.name:<16} {machine.description}{source}")
    print("  (no --node)      each driver's own default node")


def _step(title: str) -> None:
    print(f"\n== {title}", flush=True)


class Tour:
    """The demo's steps, each printing what the kubelet stand-in saw."""

    def __init__(
        self, host: HostThread, kubelet: KubeletStandIn, pods: PodResourcesStandIn
    ) -> None:
        self.host = host
        self.kubelet = kubelet
        self.pods = pods
        self.resources = host.host.resources

    def drivers(self) -> None:
        assert self.host.host.plugins is not None
        for info in self.host.host.plugins.infos:
            reason = f"  {info.reason}" if info.reason else ""
            print(f"  {info.name:<10} {info.status:<12} {info.distribution} {info.version}{reason}")
            for note in info.notes:
                print(f"  {'':<10} note: {note}")

    def registration(self, started: float) -> None:
        for name in self.resources:
            request = self.kubelet.wait_registered(name)
            print(
                f"  {name:<32} endpoint {request.endpoint}  pre-start "
                f"{request.options.pre_start_required}"
            )
        print(
            f"  all {len(self.resources)} registered "
            f"{(time.perf_counter() - started) * 1000:.0f} ms after start"
        )

    def devices(self) -> None:
        for name in self.resources:
            devices = self.kubelet.wait_devices(name, lambda d: bool(d))
            healthy = sum(d.health == "Healthy" for d in devices.values())
            ids = ", ".join(list(devices)[:3]) + (", ..." if len(devices) > 3 else "")
            print(f"  {name:<32} {len(devices)} devices, {healthy} healthy: {ids}")

    def allocations(self) -> None:
        for number, name in enumerate(self.resources):
            healthy = [i for i, d in self.kubelet.devices(name).items() if d.health == "Healthy"]
            if not healthy:
                print(f"  {name}: no healthy device to allocate")
                continue
            chosen = self.kubelet.preferred_allocation(name, healthy, size=1)
            # The kubelet records the assignment (its checkpoint has the pod's UID);
            # PodResources then reports it.
            self.pods.assign("demo", f"pod-{number}", "main", name, chosen)
            started = time.perf_counter()
            (container,) = self.kubelet.allocate(
                name, [chosen], pod_uid=_demo_uid(number), container_names=["main"]
            )
            if self.kubelet.options(name).pre_start_required:
                self.kubelet.pre_start(name, chosen)
            ms = (time.perf_counter() - started) * 1000
            edits = "\n      ".join(describe(container))
            print(f"  {name} <- {chosen[0]} for demo/pod-{number} in {ms:.1f} ms:\n      {edits}")

    def health_flip(self) -> None:
        for name, resource in self.resources.items():
            if not resource.driver.implements("devicehost_simulate_health"):
                continue
            device = next((d for d in resource.state.devices.values() if d.healthy), None)
            if device is None:
                continue
            for healthy, word in ((False, "Unhealthy"), (True, "Healthy")):
                started = time.perf_counter()
                self.host.run(
                    resource.driver.acall(
                        "devicehost_simulate_health",
                        10.0,
                        resource=name,
                        device_id=device.id,
                        healthy=healthy,
                    )
                )
                self.kubelet.wait_health(name, device.id, word, timeout=30)
                ms = (time.perf_counter() - started) * 1000
                print(
                    f"  {name} {device.id}: simulated hardware says {word.lower()} -> "
                    f"kubelet sees {word} after {ms:.0f} ms"
                )
            return
        print("  (no installed driver can simulate a health change)")

    def kubelet_restart(self) -> None:
        counts = {name: self.kubelet.registration_count(name) for name in self.resources}
        counted = {name: self.counted(name) for name in self.resources}
        started = time.perf_counter()
        self.kubelet.restart()
        for name in self.resources:
            self.kubelet.wait_registered(name, count=counts[name] + 1, timeout=30)
            self._wait_counted(name, counted[name] + 1)
        ms = (time.perf_counter() - started) * 1000
        print(f"  all {len(self.resources)} resources re-registered {ms:.0f} ms after the restart")

    def counted(self, resource: str) -> float:
        """Registrations of ``resource`` the host has counted as accepted (its metric)."""
        registrations = self.host.host.telemetry.metrics.registrations
        return float(self.host.call(lambda: registrations.value(resource=resource, result="ok")))

    def _wait_counted(self, resource: str, count: float, timeout: float = 30.0) -> None:
        """Until the host has counted ``count`` accepted registrations of ``resource``: the
        stand-in counts one as it accepts it, the host once the answer is back, so the
        metrics shown next could otherwise miss the last one."""
        deadline = time.monotonic() + timeout
        while self.counted(resource) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the host never counted registration #{count:g} of {resource}")
            time.sleep(0.01)

    def metrics(self) -> None:
        server = self.host.host.status_server
        if server is None:
            print("  (metrics off)")
            return
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            lines = response.read().decode().splitlines()
        print(f"  scraped {url} (also /healthz and /readyz); a few samples:")
        for line in lines:
            if line.startswith(METRICS_SHOWN) and not line.endswith(" 0"):
                print(f"    {line}")


def _demo_uid(number: int) -> str:
    """A fixed UID for demo pod ``number``, shaped as the API server makes them."""
    return f"00000000-0000-4000-8000-{number:012d}"


def _print_spans(receiver: OtlpReceiver | None, endpoint: str) -> None:
    if receiver is None:
        print(f"  spans exported to {redact_url(endpoint)} (OTLP); look for service 'devicehost'")
        return
    time.sleep(0.3)  # one more export batch
    names = Counter(span.name for span in receiver.spans)
    print(
        f"  {sum(names.values())} spans received by an in-process OTLP receiver "
        "(use --otlp-endpoint to send them to Jaeger):"
    )
    for name, count in sorted(names.items()):
        print(f"    {count:>3} x {name}")
    for span in receiver.named("devicehost/PodIdentity")[:3]:
        attrs = attributes(span)
        namespace, pod = attrs[tracing.NAMESPACE], attrs[tracing.POD_NAME]
        uid = attrs.get(tracing.POD_UID, "unknown")
        print(
            f"    pod identity: {namespace}/{pod} (uid {uid}) "
            f"container {attrs[tracing.CONTAINER]} got "
            f"{', '.join(attrs['devicehost.device_ids.requested'])}"
        )


@contextlib.contextmanager
def _receiver(config: HostConfig) -> Iterator[OtlpReceiver | None]:
    if config.otlp_endpoint:
        yield None
        return
    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "100")
    with OtlpReceiver() as receiver:
        yield receiver


def run_demo(config: HostConfig, keep_running: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dh-demo-"))
    plugin_dir = workdir / "plugins"
    # Drivers simulate in trees of their own; ``root`` only has to be somewhere harmless.
    root = workdir / "root"
    with (
        _receiver(config) as receiver,
        PodResourcesStandIn(workdir / "pod-resources" / "kubelet.sock") as pods,
    ):
        config = dataclasses.replace(
            config,
            plugin_dir=plugin_dir,
            root=root,
            simulate=True,
            pod_resources_socket=pods.socket,
            initial_backoff=0.05,
            max_backoff=1.0,
            metrics_address="127.0.0.1:0",
            node_name=config.node_name or "demo-node",
            otlp_endpoint=receiver.endpoint if receiver else config.otlp_endpoint,
        )
        node = config.simulate_node  # checked against the known machines by the command
        print(
            f"devicehost demo: simulated node {node or '(each driver default)'}, kubelet "
            f"stand-in in {plugin_dir}"
        )
        kubelet = KubeletStandIn(plugin_dir, start=True)
        host = HostThread(config)
        try:
            started = time.perf_counter()
            try:
                host.start()
            except DriverError as exc:
                print(f"devicehost demo: a driver failed to start: {exc}")
                return 1
            tour = Tour(host, kubelet, pods)
            _step("Drivers")
            tour.drivers()
            if not tour.resources:
                print("\nNo driver reported any resource; install a driver package.")
                return 1
            _step("Registration with the kubelet")
            tour.registration(started)
            _step("Devices the kubelet sees (ListAndWatch)")
            tour.devices()
            _step("One allocation per resource (GetPreferredAllocation, then Allocate)")
            tour.allocations()
            _step("A health change streamed through ListAndWatch, and the recovery")
            tour.health_flip()
            _step("Kubelet restart: every socket deleted, kubelet.sock re-created")
            tour.kubelet_restart()
            _step("Metrics")
            tour.metrics()
            if keep_running:
                print(f"\nServing; sockets in {plugin_dir}. Ctrl-C to stop.")
                while True:
                    time.sleep(3600)
            host.stop()  # flushes the last spans
            _step("Traces")
            _print_spans(receiver, config.otlp_endpoint)
            _step("Done")
            print("  stopped: streams ended, sockets removed, drivers shut down")
            return 0
        except KeyboardInterrupt:
            return 0
        finally:
            host.stop()
            kubelet.close()
            shutil.rmtree(workdir, ignore_errors=True)
