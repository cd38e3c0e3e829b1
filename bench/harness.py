"""What every benchmark needs: processes to run, a kubelet stand-in, clients, statistics."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.testing import KubeletStandIn, write_distribution

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
VENDOR_DRIVERS = ("nvidia", "ascend", "rdma")

#: Allocates before timing starts (channel set up, caches warm).
WARMUP = 200


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(samples_ms: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(samples_ms, 50), 4),
        "p99_ms": round(percentile(samples_ms, 99), 4),
        "max_ms": round(max(samples_ms), 4),
        "n": len(samples_ms),
    }


def median_of(runs: Sequence[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 4)


@dataclass
class Workspace:
    """A temp directory with a plugin dir, a fake root and a site dir for bench drivers."""

    path: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dh-bench-")))

    def __post_init__(self) -> None:
        # Simulated hardware trees go to memory (tmpfs), as sysfs is on a real node: on a
        # disk-backed /tmp, writing them costs hundreds of milliseconds of syscalls at every
        # start that no real node pays (the RDMA tree alone is ~900 files and links).
        shm = Path("/dev/shm")
        in_memory = shm.is_dir() and os.access(shm, os.W_OK)
        self.tmp = Path(tempfile.mkdtemp(prefix="dh-bench-tmp-", dir=shm if in_memory else None))
        self.site = self.path / "site"
        self.root = self.path / "root"
        self.root.mkdir()
        write_distribution(
            self.site,
            "devicehost-bench-scale",
            {
                "devicehost.drivers": {
                    "scale": "bench.scale_driver:ScaleDriver",
                    "hang": "bench.hang_driver:HangDriver",
                    "flood": "bench.flood_driver:FloodDriver",
                }
            },
        )

    def plugin_dir(self, name: str) -> Path:
        path = self.path / name
        path.mkdir(exist_ok=True)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        # Bytecode is cached as in the image (pip compiles it at install), so that start-up
        # is measured, not the compiler: the warm-up run writes the caches.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "DEVICEHOST_")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env["PYTHONPATH"] = os.pathsep.join([str(self.site), str(REPO)])
        env["TMPDIR"] = str(self.tmp)
        env.update(extra)
        return env

    def config(self, body: str) -> Path:
        path = self.path / f"config-{abs(hash(body))}.yaml"
        path.write_text("apiVersion: devicehost/v1\nkind: HostConfig\n" + body)
        return path

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def devicehost_command(plugin_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "devicehost.cli",
        "run",
        "--plugin-dir",
        str(plugin_dir),
        "--metrics-address",
        "",
        "--pod-resources-socket",
        "",
        "--log-level",
        "warning",
        *args,
    ]


def minimal_command(plugin_dir: Path, devices: int = 8, resource: str = "") -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.minimal_plugin",
        "--plugin-dir",
        str(plugin_dir),
        "--devices",
        str(devices),
        *(["--resource", resource] if resource else []),
    ]


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_resources(
    kubelet: KubeletStandIn, expected: int | None = None, timeout: float = 60.0, settle: float = 1.0
) -> list[str]:
    """Wait until ``expected`` resources registered (or, when None, until none new arrive
    for ``settle`` seconds after the first) and each has sent its device list."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    last_change = time.monotonic()
    while time.monotonic() < deadline:
        now = kubelet.registered()
        if now != seen:
            seen, last_change = now, time.monotonic()
        ready = seen and all(kubelet.devices(r) for r in seen)
        if ready and (
            len(seen) == expected
            if expected is not None
            else time.monotonic() - last_change > settle
        ):
            return seen
        time.sleep(0.002)
    raise TimeoutError(f"only {seen} registered within {timeout} s")


def healthy_device(kubelet: KubeletStandIn, resource: str) -> str:
    return next(i for i, d in kubelet.devices(resource).items() if d.health == "Healthy")


def socket_of(kubelet: KubeletStandIn, resource: str) -> Path:
    return kubelet.plugin_dir / kubelet.endpoints[resource].request.endpoint


def allocate_latencies(
    socket: Path, device_ids: list[str], count: int, warmup: int = WARMUP, pace: float = 0.0
) -> list[float]:
    """Sequential Allocate round trips of one container over a fresh channel, in ms;
    ``pace`` seconds apart (0: back to back)."""
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=device_ids)]
    )
    samples = []
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        allocate = pb_grpc.DevicePluginStub(channel).Allocate
        for _ in range(warmup):
            allocate(request)
        for _ in range(count):
            started = time.perf_counter()
            allocate(request)
            samples.append((time.perf_counter() - started) * 1000)
            if pace:
                time.sleep(pace)
    return samples


def call_latencies(call: Callable[[], Any], count: int, warmup: int = 20) -> list[float]:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for pid {pid}")


def pss_mib(pid: int) -> float:
    """Proportional set size: each shared page divided among the processes mapping it, so
    the sum over a process tree is the memory the tree itself occupies."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no Pss for pid {pid}")


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant alive now (the host and its driver workers)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return found


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` (a new thread inherits its creator's CPUs)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task), cpus)


@contextlib.contextmanager
def client_and_servers_apart(server_pids: Sequence[int]) -> Iterator[str]:
    """Run this process (the client, the kubelet stand-ins) on one CPU and each server's
    process tree on another while measuring; yields how, for the report.

    Left to the scheduler, where client and server land decides a round trip more than
    the server does: two identical minimal plugins measured side by side in one run were
    16 % apart at p50, pinned 1-8 % (docs/performance.md). Pinning gives every server the
    same placement. With one CPU nothing is pinned."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        yield "not pinned (one CPU)"
        return
    everything = set(cpus)
    _pin(os.getpid(), {cpus[0]})
    for pid in server_pids:
        for member in process_tree(pid):
            _pin(member, {cpus[1]})
    try:
        yield f"client and kubelet stand-ins on CPU {cpus[0]}, servers' processes on {cpus[1]}"
    finally:
        _pin(os.getpid(), everything)
        for pid in server_pids:
            for member in process_tree(pid):
                _pin(member, everything)


def tree_rss_mib(pid: int) -> dict[str, float]:
    """VmRSS of ``pid`` and of each descendant, and their sum (shared pages counted in
    each process, as ``ps`` and the kubelet's per-container figure do not: an upper bound)."""
    each = {}
    for member in process_tree(pid):
        with contextlib.suppress(OSError, RuntimeError):
            each[str(member)] = rss_mib(member)
    return {"total_mib": round(sum(each.values()), 1), "processes": len(each), **each}


def tree_pss_mib(pid: int) -> float:
    """PSS summed over ``pid`` and its descendants: the tree's memory, shared pages (the
    interpreter, libc, the model's modules) counted once across the processes."""
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, RuntimeError):
            total += pss_mib(member)
    return round(total, 1)


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and every live descendant, from /proc/<pid>/stat."""
    ticks = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_ms_by_process(pid: int) -> dict[str, float]:
    """CPU time so far (ms, every thread) of ``pid`` ("main") and each live descendant, by
    process name (``dh-zygote``, ``dh-<driver>``…), from the scheduler's nanosecond
    counters (/proc/<pid>/task/<tid>/schedstat): utime and stime count in 10 ms ticks,
    too coarse for a start-up."""
    found: dict[str, float] = {}
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            name = "main" if member == pid else Path(f"/proc/{member}/comm").read_text().strip()
            nanoseconds = sum(
                int((task / "schedstat").read_text().split()[0])
                for task in Path(f"/proc/{member}/task").iterdir()
            )
            found[name] = found.get(name, 0.0) + nanoseconds / 1e6
    return found


def verdict(value: float, limit: float) -> dict[str, Any]:
    """A figure beside its goal (``value <= limit``) and whether it is met."""
    return {"value": value, "goal_at_most": limit, "met": value <= limit}


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "grpcio": grpc.__version__,
    }


def write_result(name: str, result: dict[str, Any], directory: Path | None = None) -> Path:
    """``<directory>/<name>.json`` (default bench/results), with the machine and date."""
    directory = directory or RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    result = {
        "benchmark": name,
        "command": "make bench",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        **result,
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")
POD_MEMORY_LIMIT = 256 * 1024 * 1024  # the DaemonSet's memory limit (deploy/)


class NoMemoryCgroup(Exception):
    """cgroup v2, or not root: nothing to measure in."""


@contextlib.contextmanager
def memory_cgroup(name: str) -> Iterator[Path]:
    """A fresh v1 memory cgroup limited as the DaemonSet's pod is, removed afterwards."""
    cgroup = MEMORY_CGROUPS / name
    try:
        cgroup.mkdir()
    except OSError as exc:
        raise NoMemoryCgroup(f"cannot make a memory cgroup under {MEMORY_CGROUPS}: {exc}") from exc
    try:
        (cgroup / "memory.limit_in_bytes").write_text(str(POD_MEMORY_LIMIT))
        with contextlib.suppress(OSError):  # no swap accounting: the limit is RAM alone
            (cgroup / "memory.memsw.limit_in_bytes").write_text(str(POD_MEMORY_LIMIT))
        yield cgroup
    finally:
        with contextlib.suppress(OSError):
            cgroup.rmdir()


def in_cgroup(cgroup: Path, command: list[str]) -> list[str]:
    """``command`` joining ``cgroup`` before it execs, so every process of its tree is in."""
    return ["sh", "-c", f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"', "sh", *command]


def cgroup_figures(cgroup: Path) -> dict[str, Any]:
    """Peak memory, limit hits and OOM kills of ``cgroup`` so far."""
    control = dict(
        line.split() for line in (cgroup / "memory.oom_control").read_text().splitlines()
    )
    return {
        "max_usage_mib": round(int((cgroup / "memory.max_usage_in_bytes").read_text()) / 2**20, 1),
        "limit_hits": int((cgroup / "memory.failcnt").read_text()),
        "oom_kills": int(control.get("oom_kill", 0)),
    }
