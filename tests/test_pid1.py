"""devicehost as PID 1 of a PID namespace, as its image runs it (deploy/Dockerfile: the host
is the container's first process): its helpers must not take "my parent is PID 1" for "the
host died", and it does PID 1's duties — it reaps what is re-parented to it and stops on
SIGTERM. Each test runs the real ``devicehost run --simulate`` under
``unshare --pid --fork --mount-proc`` (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devicehost.system.reaping import Proc, children
from devicehost.testing import KubeletStandIn, OtlpReceiver, write_distribution
from support import eventually

NODE = "dgx-h100"
GPU = "nvidia.com/gpu"  # eight GPUs on the simulated DGX H100
FORKING = "test.example/forking"
ALLOCATE = "v1beta1.DevicePlugin/Allocate"
TESTS = Path(__file__).parent


def _why_no_pid_namespace() -> str:
    """Empty when ``unshare --pid --fork --mount-proc`` works here; else why not."""
    tool = shutil.which("unshare")
    if tool is None:
        return "util-linux's unshare is not installed"
    if os.geteuid() != 0:
        return "making a PID namespace needs root (CI runs these as root)"
    probe = subprocess.run(
        [tool, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"unshare --pid --fork --mount-proc fails here: {probe.stderr.strip()}"
    return ""


WHY_NOT = _why_no_pid_namespace()
pytestmark = pytest.mark.skipif(bool(WHY_NOT), reason=f"no PID namespace for the host: {WHY_NOT}")


class NamespacedHost:
    """``devicehost run --simulate`` as PID 1 of a fresh PID namespace. ``unshare`` (outside)
    waits for it and exits with its exit code; ``--kill-child`` takes the namespace down
    if the test ends first."""

    def __init__(
        self,
        tmp_path: Path,
        plugin_dir: Path,
        drivers: str = "nvidia",
        config: str = "",
        extra: tuple[str, ...] = (),
    ) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir(exist_ok=True)
        site = tmp_path / "site"
        write_distribution(
            site, "devicehost-forking", {"devicehost.drivers": {"forking": FORKING_DRIVER}}
        )
        config_file = tmp_path / "config.yaml"
        config_file.write_text(f"apiVersion: devicehost/v1\nkind: HostConfig\n{config}")
        self.log = tmp_path / "devicehost.log"
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(site), str(TESTS)]),
            "TMPDIR": str(self.tmp),
        }
        self.command = [
            *("unshare", "--pid", "--fork", "--mount-proc", "--kill-child"),
            *(sys.executable, "-m", "devicehost.cli", "run", "--config", str(config_file)),
            *("--simulate", "--node", NODE, "--drivers", drivers),
            *("--plugin-dir", str(plugin_dir), "--root", str(tmp_path)),
            *("--metrics-address", "", "--pod-resources-socket", ""),
            *extra,
        ]
        self.outer: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None

    def __enter__(self) -> NamespacedHost:
        with self.log.open("wb") as stderr:
            self.outer = subprocess.Popen(self.command, env=self.env, stderr=stderr)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.outer is not None
        if self.outer.poll() is None:
            self.outer.kill()  # --kill-child: the host, and with it the namespace
            self.outer.wait(timeout=30)

    @property
    def pid(self) -> int:
        """The host's pid as seen from outside (PID 1 inside)."""
        assert self.outer is not None
        outer = self.outer
        if self._pid is None:
            eventually(lambda: children(outer.pid) or outer.poll() is not None, timeout=30)
            found = children(outer.pid)
            assert found, f"unshare exited ({outer.returncode}): {self.text()}"
            self._pid = found[0].pid
        return self._pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def inside(self) -> list[Proc]:
        """Every process of the host's PID namespace, the host included."""
        namespace = os.readlink(f"/proc/{self.pid}/ns/pid")
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") != namespace:
                    continue
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            name = stat[stat.find("(") + 1 : stat.rfind(")")]
            found.append(Proc(int(entry), fields[0], int(fields[2]), name))
        return found

    def named(self, name: str) -> list[Proc]:
        return [p for p in self.inside() if p.name == name and not p.zombie]

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum`` to the host; its exit code (through unshare)."""
        assert self.outer is not None
        os.kill(self.pid, signum)
        return self.outer.wait(timeout=30)


FORKING_DRIVER = "testdrivers.forking:Forking"


def forking_config(daemon: str, seconds: float = 0) -> str:
    return (
        "drivers:\n  forking:\n"
        f"    resources: {{'{FORKING}': 2}}\n    daemon: {daemon}\n    daemonSeconds: {seconds}\n"
    )


def namespace_pid(pid: int) -> int:
    """``pid``'s pid in its own (innermost) PID namespace."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError("no NSpid line")


def allocate_one_gpu(kubelet: KubeletStandIn) -> Any:
    devices = kubelet.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
    [answer] = kubelet.allocate(GPU, [[sorted(devices)[0]]])
    return answer


def test_the_host_as_pid_1_registers_and_allocates(tmp_path, plugin_dir, kubelet):
    """PID 1 of its namespace, the host starts its zygote and workers (whose parent check
    must not mistake a host that is PID 1 for a dead one), registers the simulated GPUs
    with the kubelet and answers Allocate with the GPU's device node."""
    with NamespacedHost(tmp_path, plugin_dir) as host:
        assert namespace_pid(host.pid) == 1
        kubelet.wait_registered(GPU, timeout=60)
        devices = kubelet.wait_devices(GPU, lambda d: len(d) == 8, timeout=60)
        gpu = sorted(devices)[0]
        [answer] = kubelet.allocate(GPU, [[gpu]])
        assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == gpu, answer
        assert "died" not in host.text(), host.text()


def test_the_host_as_pid_1_exports_spans(tmp_path, plugin_dir, kubelet):
    """With tracing on, the span exporter (a helper started by PID 1) stays up and the
    Allocate's span reaches a real OTLP receiver."""
    with OtlpReceiver() as receiver:
        extra = ("--otlp-endpoint", receiver.endpoint)
        with NamespacedHost(tmp_path, plugin_dir, extra=extra) as host:
            kubelet.wait_registered(GPU, timeout=60)
            allocate_one_gpu(kubelet)
            span = receiver.wait_for_span(ALLOCATE, timeout=60)
            assert span.name == ALLOCATE
            assert "dh-spans" in {p.name for p in host.inside()}, host.text()


def test_sigterm_to_pid_1_exits_0_and_leaves_no_socket(tmp_path, plugin_dir, kubelet):
    """SIGTERM to PID 1 (what ``kubectl delete pod`` sends; the kernel drops it unless
    PID 1 handles it) stops the host gracefully: exit 0, no plugin socket and no simulated
    tree left."""
    with NamespacedHost(tmp_path, plugin_dir) as host:
        kubelet.wait_registered(GPU, timeout=60)
        assert host.stop(signal.SIGTERM) == 0, host.text()
        assert sorted(p.name for p in plugin_dir.glob("*.sock")) == ["kubelet.sock"]
        assert list(host.tmp.glob("devicehost-sim-*")) == []


def test_sigint_to_pid_1_exits_0(tmp_path, plugin_dir, kubelet):
    """SIGINT to PID 1 stops it as SIGTERM does (exit 0, sockets removed)."""
    with NamespacedHost(tmp_path, plugin_dir) as host:
        kubelet.wait_registered(GPU, timeout=60)
        assert host.stop(signal.SIGINT) == 0, host.text()
        assert sorted(p.name for p in plugin_dir.glob("*.sock")) == ["kubelet.sock"]


def test_an_orphan_a_driver_leaves_is_reaped(tmp_path, plugin_dir, kubelet):
    """A daemon a driver started exits on its own: it is reaped, not left a zombie in the
    namespace."""
    config = forking_config("dh-test-brief", seconds=0.5)
    with NamespacedHost(tmp_path, plugin_dir, "forking", config) as host:
        kubelet.wait_registered(FORKING, timeout=60)
        eventually(lambda: not host.named("dh-test-brief"), timeout=30)
        eventually(lambda: not [p for p in host.inside() if p.zombie], timeout=30)


def test_what_a_killed_zygote_left_is_stopped_and_reaped_by_pid_1(tmp_path, plugin_dir, kubelet):
    """The zygote killed with SIGKILL: its keepers and workers die with it, and the daemon
    a driver started is re-parented to the host, which stops and reaps it; the driver comes
    back (a fresh zygote, a fresh daemon) and no zombie is left."""
    config = forking_config("dh-test-daemon")
    with NamespacedHost(tmp_path, plugin_dir, "forking", config) as host:
        kubelet.wait_registered(FORKING, timeout=60)
        eventually(lambda: host.named("dh-test-daemon"), timeout=30)
        [first] = host.named("dh-test-daemon")
        [zygote] = host.named("dh-zygote")
        inner = namespace_pid(zygote.pid)
        os.kill(zygote.pid, signal.SIGKILL)
        eventually(lambda: not Path(f"/proc/{first.pid}").exists(), timeout=30)
        eventually(lambda: [p.pid for p in host.named("dh-zygote")] not in ([], [zygote.pid]))
        eventually(lambda: len(host.named("dh-test-daemon")) == 1, timeout=30)
        kubelet.wait_devices(FORKING, lambda d: len(d) == 2, timeout=30)
        eventually(lambda: not [p for p in host.inside() if p.zombie], timeout=30)
        assert "stopped process" in host.text(), host.text()
        assert (
            f"the zygote (pid {inner}) that starts driver workers "
            "died (killed by SIGKILL)" in host.text()
        ), host.text()


def test_kill_9_of_pid_1_leaves_no_process(tmp_path, plugin_dir, kubelet):
    """``kill -9`` of the host as PID 1: Linux ends every process of its namespace, so no
    daemon a driver started outlives it (the guarantee in a container)."""
    config = forking_config("dh-test-daemon")
    with NamespacedHost(tmp_path, plugin_dir, "forking", config) as host:
        kubelet.wait_registered(FORKING, timeout=60)
        eventually(lambda: host.named("dh-test-daemon"), timeout=30)
        [daemon] = host.named("dh-test-daemon")
        host.stop(signal.SIGKILL)
        eventually(lambda: not Path(f"/proc/{daemon.pid}").exists(), timeout=30)
