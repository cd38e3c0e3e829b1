"""Everything a driver starts dies with its worker, and signals mean what the docs say.

A driver's hook double-forks a daemon (``testdrivers.forking``): it must not survive its
worker's restart or the host's exit (each worker's keeper is its subreaper; see
docs/reliability.md, "Containment"). SIGHUP during start-up is ignored with a log line,
and SIGTERM to the host's whole process group is a stop, not a crash of its helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devicehost.system.reaping import Proc
from devicehost.testing import write_distribution
from support import eventually

RES = "test.example/forking"
TESTS = Path(__file__).parent


def processes_named(name: str) -> list[Proc]:
    """Every live process on the machine named ``name`` (names are unique per test)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if stat[stat.find("(") + 1 : stat.rfind(")")] == name and fields[0] not in "ZX":
                found.append(Proc(int(entry), fields[0], int(fields[2]), name))
    return found


def catches(pid: int, signum: int) -> bool:
    """True once process ``pid`` has a handler for ``signum`` (its SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def unique_name(tmp_path: Path) -> str:
    return f"dh-d{abs(hash(tmp_path)) % 10**8:08d}"[:15]


def start_host(
    tmp_path: Path, plugin_dir: Path, daemon: str, new_session: bool = False
) -> subprocess.Popen[bytes]:
    """``devicehost run --simulate`` serving the forking driver, whose configure starts a
    daemon named ``daemon``; stderr in ``tmp_path / "devicehost.log"``."""
    site = tmp_path / "site"
    write_distribution(
        site,
        "devicehost-forking",
        {"devicehost.drivers": {"forking": "testdrivers.forking:Forking"}},
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\n"
        f"drivers:\n  forking:\n    resources: {{'{RES}': 2}}\n    daemon: {daemon}\n"
    )
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(TESTS)]),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    command = [
        *(sys.executable, "-m", "devicehost.cli", "run", "--config", str(config)),
        *("--simulate", "--drivers", "forking", "--plugin-dir", str(plugin_dir)),
        *("--root", str(tmp_path), "--metrics-address", "", "--pod-resources-socket", ""),
    ]
    with (tmp_path / "devicehost.log").open("wb") as stderr:
        return subprocess.Popen(command, env=env, stderr=stderr, start_new_session=new_session)


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "devicehost.log").read_text(errors="replace")


@pytest.fixture
def stop_after():
    running: list[subprocess.Popen[bytes]] = []
    yield running.append
    for process in running:  # SIGTERM: a host killed with SIGKILL leaves its daemons
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_a_daemon_a_driver_started_dies_with_its_worker(tmp_path, plugin_dir, kubelet, stop_after):
    """The worker killed with SIGKILL: the daemon its driver started dies too (its keeper
    stops it), the restarted worker starts a fresh one, and only that one runs."""
    daemon = unique_name(tmp_path)
    host = start_host(tmp_path, plugin_dir, daemon)
    stop_after(host)
    kubelet.wait_registered(RES, timeout=60)
    eventually(lambda: processes_named(daemon), timeout=30)
    [first] = processes_named(daemon)
    [worker] = processes_named("dh-forking")
    os.kill(worker.pid, signal.SIGKILL)
    eventually(lambda: not Path(f"/proc/{first.pid}").exists(), timeout=30)
    eventually(lambda: [p.pid for p in processes_named(daemon)] not in ([], [first.pid]))
    assert len(processes_named(daemon)) == 1


def test_no_daemon_a_driver_started_outlives_the_host(tmp_path, plugin_dir, kubelet, stop_after):
    """SIGTERM to the host: it exits 0 and the daemon its driver started is gone, though
    the daemon left its worker's session and process group at once."""
    daemon = unique_name(tmp_path)
    host = start_host(tmp_path, plugin_dir, daemon)
    stop_after(host)
    kubelet.wait_registered(RES, timeout=60)
    eventually(lambda: processes_named(daemon), timeout=30)
    [running] = processes_named(daemon)
    assert os.getsid(running.pid) != os.getsid(host.pid)
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=30) == 0, log_of(tmp_path)
    eventually(lambda: not processes_named(daemon), timeout=30)


def test_sigterm_to_the_whole_process_group_is_a_stop_not_a_crash(
    tmp_path, plugin_dir, kubelet, stop_after
):
    """SIGTERM to the host's process group (what `timeout` and a shell's job control send):
    exit 0, and no helper's or worker's death is logged as an error and no restart
    planned — the helpers lead groups of their own, and the host stops them itself."""
    host = start_host(tmp_path, plugin_dir, unique_name(tmp_path), new_session=True)
    stop_after(host)
    kubelet.wait_registered(RES, timeout=60)
    kubelet.wait_devices(RES, lambda d: len(d) == 2, timeout=30)
    os.killpg(host.pid, signal.SIGTERM)
    assert host.wait(timeout=30) == 0, log_of(tmp_path)
    text = log_of(tmp_path)
    for sign in ("ERROR", "died", "is down", "starting its worker again", "Traceback"):
        assert sign not in text, text


def test_sighup_during_start_up_is_ignored_with_a_log_line(
    tmp_path, plugin_dir, kubelet, stop_after
):
    """SIGHUP at each moment of start-up — as the interpreter starts, as the simulated
    tree appears, once registered — is ignored with a log line: the host serves on, a
    SIGTERM then stops it with exit 0 and no simulated tree is left."""
    host = start_host(tmp_path, plugin_dir, unique_name(tmp_path))
    stop_after(host)
    tmp = tmp_path / "tmp"
    sent = 0

    def hang_up() -> None:
        nonlocal sent
        if host.poll() is None:
            host.send_signal(signal.SIGHUP)
            sent += 1

    # From the moment its code takes SIGHUP (docs/operating.md: the interpreter's own
    # start, before any of devicehost runs and anything is made, has the kernel's default)
    # until the simulated tree exists, keep hanging up.
    # The tree appearing first is start-up too: a host that takes SIGHUP only later has
    # been hung up on by then.
    eventually(
        lambda: (
            catches(host.pid, signal.SIGHUP)
            or list(tmp.glob("devicehost-sim-*"))
            or host.poll() is not None
        ),
        timeout=30,
    )
    while not list(tmp.glob("devicehost-sim-*")) and host.poll() is None:
        hang_up()
        time.sleep(0.005)
    hang_up()
    assert host.poll() is None, log_of(tmp_path)
    kubelet.wait_registered(RES, timeout=60)
    hang_up()
    kubelet.wait_devices(RES, lambda d: len(d) == 2, timeout=30)
    assert host.poll() is None, log_of(tmp_path)
    eventually(lambda: "SIGHUP ignored" in log_of(tmp_path), timeout=30)
    host.send_signal(signal.SIGTERM)
    assert host.wait(timeout=30) == 0, log_of(tmp_path)
    assert list(tmp.glob("devicehost-sim-*")) == []
    assert sent >= 3
    assert "Traceback" not in log_of(tmp_path)
