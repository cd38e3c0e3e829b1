"""Workers are forked by one zygote (drivers/zygote.py): in `devicehost run` it is forked
from the host before gRPC is imported; elsewhere it is a fresh interpreter; a zygote that
dies is replaced, and its drivers come back."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from devicehost.drivers.discovery import DriverStatus
from devicehost.testing import KubeletStandIn, write_distribution
from support import SCRIPTED, eventually, modules_after, reap, terminate

PROBES = ("probe-a", "probe-b")


def zygote_of(worker: int) -> int:
    """The zygote a worker came from: the parent of its keeper."""
    return parent_of(parent_of(worker))


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def name_of(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def safe_parent(pid: int) -> int | None:
    try:
        return parent_of(pid)
    except OSError:  # it ended while we looked
        return None


def test_devicehost_run_forks_every_worker_from_one_zygote_without_grpc(
    tmp_path, plugin_dir, kubelet: KubeletStandIn
):
    """Two drivers' workers come from one zygote, a child of the host: each worker is the
    child of its own keeper (its subreaper, see reliability.md), a child of the zygote;
    each is named for ps and top; and none of gRPC, OpenTelemetry, the metadata reader or
    the Prometheus client is loaded in them."""
    site = tmp_path / "site"
    for name in PROBES:
        write_distribution(
            site, f"devicehost-{name}", {"devicehost.drivers": {name: "testdrivers.probe:Probe"}}
        )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).parent)])}
    command = [
        *(sys.executable, "-m", "devicehost.cli", "run", "--drivers", ",".join(PROBES)),
        *("--plugin-dir", str(plugin_dir), "--root", str(tmp_path)),
        *("--metrics-address", "", "--pod-resources-socket", ""),
    ]
    log = tmp_path / "devicehost.log"
    with log.open("wb") as stderr:
        host = subprocess.Popen(command, env=env, stderr=stderr)
    try:
        for name in PROBES:
            kubelet.wait_registered(f"test.example/{name}", timeout=30)
        eventually(lambda: "serving 2 resources" in log.read_text(), timeout=30)
        text = log.read_text()
        parents = set(map(int, re.findall(r"driver probe-.: parent pid: (\d+)", text)))
        loaded = re.findall(r"driver probe-.: host-only modules loaded: (.*)", text)
        assert loaded == ["[]", "[]"], text
        assert len(parents) == 2, text  # one keeper per worker
        assert {name_of(keeper) for keeper in parents} == {"dh-keeper"}
        [zygote] = {parent_of(keeper) for keeper in parents}
        assert zygote != host.pid
        assert parent_of(zygote) == host.pid
        # A fork keeps the host's command line: the name is what tells them apart in ps/top.
        assert name_of(zygote) == "dh-zygote"
        workers = [
            int(p) for p in os.listdir("/proc") if p.isdigit() and safe_parent(int(p)) in parents
        ]
        assert sorted(name_of(pid) for pid in workers) == ["dh-probe-a", "dh-probe-b"]
        terminate(host, timeout=10)
        eventually(lambda: not Path(f"/proc/{zygote}").exists(), timeout=5)
    finally:
        reap(host)


def test_a_killed_zygote_is_replaced_and_its_drivers_come_back(install, run_host, kubelet):
    """SIGKILL to the zygote takes its workers with it; the supervisors start them again
    from a fresh zygote and the resources are served again."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(
        enabled_drivers=("alpha",), drivers={"alpha": {"resources": {"test.example/a": 2}}}
    )
    kubelet.wait_devices("test.example/a", lambda d: len(d) == 2)
    handle = host.host.drivers["alpha"]
    first_zygote, first_worker = host.host.running.zygote.pid, handle.process.pid
    assert first_zygote is not None and zygote_of(first_worker) == first_zygote

    os.kill(first_zygote, signal.SIGKILL)
    eventually(lambda: handle.process.pid != first_worker, timeout=20)
    eventually(lambda: handle.info.status is DriverStatus.ACTIVE, timeout=20)
    assert host.host.running.zygote.pid not in (None, first_zygote)
    assert zygote_of(handle.process.pid) == host.host.running.zygote.pid
    kubelet.wait_devices(
        "test.example/a", lambda d: all(x.health == "Healthy" for x in d.values()), timeout=20
    )
    assert kubelet.allocate("test.example/a", [["dev-0"]])


def test_a_process_with_threads_or_grpc_never_forks_its_zygote():
    """Zygote.fork from a process that runs threads or has imported gRPC (this one: the
    test process) does not fork it: the zygote starts later as a fresh interpreter."""
    import threading

    from devicehost.drivers.zygote import Zygote

    assert threading.active_count() > 1 or "grpc" in sys.modules
    zygote = Zygote.fork()
    assert zygote.pid is None  # nothing forked; the first start spawns one


def test_a_worker_that_exits_at_once_has_its_exit_reported(tmp_path):
    """A worker that ends before the host has even read that it was started (its start and
    its exit arrive together) still has its exit reported: nothing waits on it forever."""
    import asyncio
    import socket
    import time

    from devicehost.drivers.zygote import Zygote

    async def scenario() -> int:
        zygote = Zygote()
        ours, theirs = socket.socketpair()
        err_read, err_write = os.pipe()
        argv = ["--group", "devicehost.drivers", "--name", "gone", "--log-level", "error"]
        argv += ["--entry-point", "no_such_module_anywhere:Driver"]  # fails, and exits
        try:
            starting = asyncio.ensure_future(
                zygote.start(argv, dict(os.environ), (theirs.fileno(), err_write))
            )
            await asyncio.sleep(0)  # the request is sent
            time.sleep(1.0)  # the loop is busy: "spawned" and "exited" queue up together
            child = await asyncio.wait_for(starting, 10)
            return await asyncio.wait_for(child.exit, 10)
        finally:
            await zygote.close()
            for end in (ours, theirs):
                end.close()
            os.close(err_read)
            os.close(err_write)

    assert asyncio.run(scenario()) == 0


def probe_site(tmp_path: Path) -> dict[str, str]:
    """Two probe drivers installed in a site directory: the environment that finds them."""
    site = tmp_path / "site"
    for name in PROBES:
        write_distribution(
            site, f"devicehost-{name}", {"devicehost.drivers": {name: "testdrivers.probe:Probe"}}
        )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).parent)])}


def test_devicehost_run_takes_over_workers_the_zygote_started_at_its_fork(
    tmp_path, plugin_dir, kubelet: KubeletStandIn
):
    """`devicehost run` forks the zygote with a plan: the zygote lists the drivers and
    starts their workers before the host asks, and the host takes each over (and the
    listing: it does not read the metadata again)."""
    command = [
        *(sys.executable, "-m", "devicehost.cli", "run", "--drivers", ",".join(PROBES)),
        *("--plugin-dir", str(plugin_dir), "--root", str(tmp_path), "--log-level", "debug"),
        *("--metrics-address", "", "--pod-resources-socket", ""),
    ]
    log = tmp_path / "devicehost.log"
    with log.open("wb") as stderr:
        host = subprocess.Popen(command, env=probe_site(tmp_path), stderr=stderr)
    try:
        for name in PROBES:
            kubelet.wait_registered(f"test.example/{name}", timeout=30)
        text = log.read_text()
        assert "as the zygote listed them at its fork" in text, text
        taken = re.findall(r"driver '(probe-.)': worker \(pid (\d+)\) started by the zygote", text)
        assert sorted(name for name, _ in taken) == list(PROBES), text
        zygotes = {zygote_of(int(pid)) for _, pid in taken}
        assert len(zygotes) == 1 and parent_of(zygotes.pop()) == host.pid
        terminate(host, timeout=10)
    finally:
        reap(host)


PRESTART_SCENARIO = """
import asyncio, logging, os, sys
from devicehost.config.host_config import HostConfig
from devicehost.drivers.early import start_workers
from devicehost.drivers.plan import plan_workers
from devicehost.drivers.zygote import Zygote

logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(message)s")
host = HostConfig(enabled_drivers=("probe-a",), log_level="info")
# The zygote plans with another installation's view: both probes, probe-a at another level.
def prestart():
    plan = plan_workers(HostConfig(log_level="info"), None)
    def altered():
        planned, listing = plan()
        for worker in planned:
            if worker.name == "probe-a":
                worker.argv[worker.argv.index("--log-level") + 1] = "debug"
        return planned, listing
    return altered

async def main():
    zygote = Zygote.fork(prestart)
    early = await start_workers(host, zygote)
    worker = early.workers["probe-a"]
    await worker.start(10)
    print("probe-a answers", await worker.call("devicehost_resources", 10))
    print("probe-a pid", worker.pid)
    def kept():  # the workers below the zygote's keepers
        from devicehost.system.reaping import children
        return [str(w.pid) for k in children(zygote.pid) for w in children(k.pid)]
    for _ in range(500):  # the killed workers are reaped by the zygote
        if kept() == [str(worker.pid)]:
            break
        await asyncio.sleep(0.01)
    print("zygote children", kept())
    await early.stop(1)
    await zygote.close()

asyncio.run(main())
"""


def test_a_prestarted_worker_the_host_does_not_list_is_stopped_and_replaced(tmp_path):
    """A worker the zygote started for a driver the host does not start (not enabled), or
    with other arguments than the host's (another installation), is stopped; the host
    starts its own, which answers."""
    done = subprocess.run(
        [sys.executable, "-c", PRESTART_SCENARIO],
        env=probe_site(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    replaced = re.search(
        r"'probe-a': the worker the zygote started \(pid (\d+)\) is for another", out
    )
    unwanted = re.search(r"'probe-b': worker \(pid (\d+)\) not wanted; stopped", out)
    assert replaced and unwanted, out
    assert "probe-a answers [{'name': 'test.example/probe-a'" in out
    own = re.search(r"probe-a pid (\d+)", out).group(1)  # type: ignore[union-attr]
    assert own != replaced.group(1)
    assert f"zygote children ['{own}']" in out  # both stopped while the zygote runs on


def test_what_devicehost_run_imports_before_it_forks_its_zygote_is_small():
    """The command line, the zygote and the simulated tree (all `devicehost run` needs
    before its fork) bring in neither asyncio, gRPC, pluggy, the model nor the metadata
    reader: each would delay the fork, and so every worker's start."""
    loaded, _ = modules_after(
        "import devicehost.cli.main, devicehost.drivers.zygote, devicehost.simulation.trees, "
        "devicehost.kubelet.deviceplugin.plugin_dir"
    )
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"asyncio", "grpc", "pluggy", "importlib_metadata"}
    assert "devicehost.model" not in loaded
