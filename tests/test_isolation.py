"""The isolation suite (issue 11, "Must show"): drivers that segfault, ``os._exit``, raise
``SystemExit``, hang at import, hand back generators that block or raise, forge their own
checks or answer nonsense from ``resources`` — each one beside a good driver in one host.

In every case, over real sockets against the kubelet stand-in, the good driver's resource
registers, streams a health flip and allocates; the bad driver is reported with its cause
(its status and reason, and a log line naming it); and ``devicehost run`` with all of them
installed exits 0 on SIGTERM within 2 s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from devicehost import Device
from devicehost.drivers.discovery import DriverStatus
from devicehost.drivers.protocol import MAX_MESSAGE_BYTES, PART_BYTES, to_plain
from devicehost.testing import HostThread, KubeletStandIn, write_distribution
from support import SCRIPTED, UNHURRIED_SECONDS, ScriptedControl, eventually, reap, terminate
from support import scripted as scripted_control
from testdrivers.wrecking import ESCAPING_RESOURCE, UNCHECKED_IDS

#: Every test here ends with the stop check (tests/conftest.py, run_host).
pytestmark = pytest.mark.faults

GOOD = "test.example/good"
BAD = "test.example/bad"
DOWN = (DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING)
#: Short enough that a hung driver is noticed within a test, long enough for a loaded CI
#: machine to start a few worker interpreters at once.
TIMEOUTS = {"hook_timeout": 0.5, "driverStartTimeoutSeconds": 3.0}


def good_driver_serves(host: HostThread, kubelet: KubeletStandIn) -> None:
    """The good driver's resource is registered, streams a health flip both ways and
    allocates."""
    kubelet.wait_registered(GOOD)
    kubelet.wait_devices(GOOD, lambda d: set(d) == {"g-0", "g-1"})
    good = scripted_control(host, GOOD)
    good.set_health(GOOD, "g-0", False)
    kubelet.wait_health(GOOD, "g-0", "Unhealthy")
    good.set_health(GOOD, "g-0", True)
    kubelet.wait_health(GOOD, "g-0", "Healthy")
    response = kubelet.allocate(GOOD, [["g-1"]])
    assert response[0].envs == {"SCRIPTED_DEVICES": "g-1"}


def beside_good(install, run_host, target: str, **overrides) -> HostThread:
    """A host serving the good scripted driver and the driver ``bad`` (``target``)."""
    install("devicehost-good", drivers={"good": SCRIPTED})
    install("devicehost-bad", drivers={"bad": target})
    return run_host(
        enabled_drivers=("good", "bad"),
        drivers={
            "good": {"resources": {GOOD: 2}, "prefix": "g"},
            "bad": {"resources": {BAD: 2}, "prefix": "b"},
        },
        **{**TIMEOUTS, **overrides},
    )


def logged(caplog: pytest.LogCaptureFixture, *needles: str) -> bool:
    """True when one log line holds every needle."""
    return any(all(n in r.getMessage() for n in needles) for r in caplog.records)


@pytest.mark.parametrize(
    ("target", "cause"),
    [
        pytest.param("testdrivers.wrecking:ExitInEnumerate", "exited with code 3", id="os._exit"),
        pytest.param(
            "testdrivers.wrecking:SystemExitInConfigure",
            "hook devicehost_configure: SystemExit: configure gives up",
            id="SystemExit-in-configure",
        ),
        pytest.param(
            "testdrivers.hanging_import:Driver",
            "did not finish importing within 3 s",
            id="hangs-at-import",
        ),
        pytest.param(
            "testdrivers.wrecking:BareSpec",
            "returned dict, expected a list of ResourceSpec",
            id="bare-ResourceSpec",
        ),
        pytest.param(
            "testdrivers.wrecking:IntResources",
            "returned int, expected a list of ResourceSpec",
            id="int-from-resources",
        ),
    ],
)
def test_a_driver_that_never_comes_up_is_reported_and_the_good_one_serves(
    install, run_host, kubelet, caplog, target, cause
):
    """The bad driver is down (restarting or crash-looping) with its cause in its reason and
    in a log line naming it; the good driver registers, streams and allocates meanwhile."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, target)
    good_driver_serves(host, kubelet)
    info = next(i for i in host.host.plugins.infos if i.name == "bad")
    eventually(lambda: info.status in DOWN and cause in info.reason, timeout=15)
    assert logged(caplog, "driver 'bad'", cause)
    if BAD in kubelet.registered():  # served before the failure: nothing to grant
        assert "Healthy" not in kubelet.health(BAD).values()
    good_driver_serves(host, kubelet)  # still, after the bad driver's restarts


@pytest.mark.parametrize(
    ("target", "cause"),
    [
        pytest.param(
            "testdrivers.wrecking:BlockingGenerator",
            "hook devicehost_enumerate: did not return within 0.5 s",
            id="blocking-generator",
        ),
        pytest.param(
            "testdrivers.wrecking:RaisingGenerator",
            "hook devicehost_enumerate: RuntimeError: generator failed midway",
            id="raising-generator",
        ),
    ],
)
def test_a_generator_from_enumerate_that_blocks_or_raises_fails_only_that_driver(
    install, run_host, kubelet, caplog, target, cause
):
    """A generator is consumed in the driver's worker, never on the host's loop: one that
    blocks or raises midway is a failed enumeration of that driver alone — logged with its
    cause, counted in devicehost_driver_errors_total, and none of its devices granted —
    while the good driver registers, streams and allocates."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, target)
    eventually(lambda: logged(caplog, "driver 'bad'", cause), timeout=15)
    good_driver_serves(host, kubelet)
    metrics = host.host.telemetry.metrics
    errors = host.call(
        lambda: metrics.driver_errors.value(driver="bad", hook="devicehost_enumerate")
    )
    assert errors > 0
    assert "Healthy" not in kubelet.health(BAD).values()
    errors_logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [m for m in errors_logged if "driver 'good'" in m]


def test_a_segfault_in_allocate_restarts_only_that_driver(install, run_host, kubelet, caplog):
    """A null read in a vendor library during Allocate kills the driver's worker with
    SIGSEGV: that Allocate is refused, the crash is logged naming the driver and the signal,
    the worker is started again, and the good driver never notices."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.wrecking:SegfaultInAllocate")
    kubelet.wait_devices(BAD, lambda d: len(d) == 2)
    handle = host.host.drivers["bad"]
    first_pid = handle.process.pid
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(BAD, [["b-0"]])
    assert refused.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE)
    eventually(lambda: logged(caplog, "driver 'bad' is down", "killed by SIGSEGV"))
    good_driver_serves(host, kubelet)
    eventually(lambda: handle.info.restarts >= 1 and handle.up, timeout=15)
    assert handle.process.pid != first_pid
    kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Healthy"})


def test_devices_and_resources_that_switch_off_their_checks_are_refused(
    install, run_host, kubelet, caplog, plugin_dir
):
    """Subclasses of Device and ResourceSpec that override their own checks gain nothing:
    the host rebuilds them into its own types, drops each bad ID and refuses the resource
    whose socket would leave the plugin directory, naming the driver; the driver's valid
    device and resource are served."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.wrecking:OverridingChecks")
    assert set(kubelet.wait_devices(BAD, lambda d: len(d) == 2)) == {"b-0", "b-1"}
    good_driver_serves(host, kubelet)
    dropped = [
        r.getMessage()
        for r in caplog.records
        if "driver 'bad'" in r.getMessage() and "device dropped" in r.getMessage()
    ]
    for device_id in UNCHECKED_IDS:
        assert any(repr(device_id)[:40] in m for m in dropped), device_id
    assert logged(caplog, "driver 'bad'", repr(ESCAPING_RESOURCE), "resource refused")
    assert ESCAPING_RESOURCE not in host.host.resources
    assert set(kubelet.registered()) == {GOOD, BAD}
    for directory in (plugin_dir, plugin_dir.parent, plugin_dir.parent.parent):
        assert not (directory / "escaped.sock").exists()
    assert {p.name for p in plugin_dir.iterdir()} == {
        "kubelet.sock",
        "devicehost-test.example_good.sock",
        "devicehost-test.example_bad.sock",
    }


# -- the real process, every bad driver at once ----------------------------------------------

BAD_DRIVERS = {
    "segv": "testdrivers.wrecking:SegfaultInAllocate",
    "exit": "testdrivers.wrecking:ExitInEnumerate",
    "sysexit": "testdrivers.wrecking:SystemExitInConfigure",
    "importhang": "testdrivers.hanging_import:Driver",
    "blockgen": "testdrivers.wrecking:BlockingGenerator",
    "raisegen": "testdrivers.wrecking:RaisingGenerator",
    "forged": "testdrivers.wrecking:OverridingChecks",
    "bare": "testdrivers.wrecking:BareSpec",
    "int": "testdrivers.wrecking:IntResources",
}


CAUSES = {
    "segv": "killed by SIGSEGV",
    "exit": "exited with code 3",
    "sysexit": "SystemExit: configure gives up",
    "importhang": "did not finish importing within 5 s",
    "blockgen": "did not return within 0.5 s",
    "raisegen": "RuntimeError: generator failed midway",
    "forged": "resource refused",
    "bare": "returned dict, expected a list of ResourceSpec",
    "int": "returned int, expected a list of ResourceSpec",
}


def every_bad_driver(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A site with the good driver and every bad one installed; their config file and the
    environment that finds them."""
    site = tmp_path / "site"
    write_distribution(site, "devicehost-good", {"devicehost.drivers": {"good": SCRIPTED}})
    for name, target in BAD_DRIVERS.items():
        write_distribution(site, f"devicehost-{name}", {"devicehost.drivers": {name: target}})
    sections = "".join(
        f"  {name}:\n    resources: {{'test.example/{name}': 2}}\n    prefix: {name}\n"
        for name in BAD_DRIVERS
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\nhookTimeoutSeconds: 0.5\n"
        "driverStartTimeoutSeconds: 5.0\n"
        f"drivers:\n  good:\n    resources: {{'{GOOD}': 2}}\n    prefix: g\n{sections}"
    )
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(tests)])}
    env.pop("DEVICEHOST_CONFIG", None)
    return config, env


def test_devicehost_drivers_lists_every_bad_driver_with_its_state(tmp_path):
    """`devicehost drivers --json`, the operator's diagnosis, still works with every bad
    driver installed: the good one is active with its resource, and each bad one that
    cannot start is shown down with its cause. It exits 1 naming them (an image build
    that ends with it fails)."""
    config, env = every_bad_driver(tmp_path)
    names = ",".join(["good", *BAD_DRIVERS])
    command = [sys.executable, "-m", "devicehost.cli", "drivers", "--json", "--simulate"]
    command += ["--config", str(config), "--drivers", names]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "could not be started: " in result.stderr
    shown = {d["name"]: d for d in json.loads(result.stdout)}
    assert shown["good"]["status"] == "active"
    assert shown["good"]["resources"] == [GOOD]
    for name in ("exit", "sysexit", "importhang", "bare", "int"):
        assert shown[name]["status"] in ("restarting", "crash-looping"), shown[name]
        assert CAUSES[name] in shown[name]["reason"], shown[name]


def test_devicehost_run_with_every_bad_driver_serves_the_good_one_and_stops_on_sigterm(
    tmp_path, plugin_dir, kubelet
):
    """`devicehost run --simulate` with all the bad drivers installed beside the good one:
    the good resource registers, streams a health flip and allocates while the others crash,
    hang and restart; the log names each bad driver with its cause; SIGTERM ends the
    process with status 0 within 2 s, leaving no socket and no simulated tree behind."""
    config, env = every_bad_driver(tmp_path)
    command = [
        *(sys.executable, "-m", "devicehost.cli", "run", "--simulate"),
        *("--config", str(config), "--plugin-dir", str(plugin_dir)),
        *("--metrics-address", "", "--pod-resources-socket", ""),
        *("--drivers", ",".join(["good", *BAD_DRIVERS])),
    ]
    log = tmp_path / "devicehost.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, env=env, stderr=stderr)
    try:
        kubelet.wait_registered(GOOD, timeout=30)
        kubelet.wait_devices(GOOD, lambda d: set(d) == {"g-0", "g-1"})
        found = re.search(r"simulating hardware \(.*\) under (\S+)", log.read_text())
        assert found, log.read_text()
        sim_root = Path(found.group(1))
        good = ScriptedControl(sim_root / "good", "good")
        good.set_health(GOOD, "g-0", False)
        kubelet.wait_health(GOOD, "g-0", "Unhealthy")
        kubelet.wait_devices("test.example/segv", lambda d: len(d) == 2)
        with pytest.raises(grpc.RpcError):
            kubelet.allocate("test.example/segv", [["segv-0"]])
        good.set_health(GOOD, "g-0", True)
        kubelet.wait_health(GOOD, "g-0", "Healthy")
        assert kubelet.allocate(GOOD, [["g-1"]])[0].envs == {"SCRIPTED_DEVICES": "g-1"}

        def every_cause_logged() -> bool:
            lines = log.read_text().splitlines()
            return all(
                any(f"driver '{name}'" in line and cause in line for line in lines)
                for name, cause in CAUSES.items()
            )

        eventually(every_cause_logged, timeout=20)
        assert process.poll() is None
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=UNHURRIED_SECONDS) == 0  # how fast: make bench's stop_time
        print(f"\nSIGTERM to exit: {time.monotonic() - sent:.2f} s")
        assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]
        assert not sim_root.exists()
    except BaseException:
        print(log.read_text())  # what the host said, shown with the failure
        raise
    finally:
        reap(process)


# -- supervision that never ends: stderr, liveness, node files (issue 24) --------------------


def test_a_megabyte_stderr_line_without_newline_does_not_end_supervision(
    install, run_host, kubelet, caplog
):
    """A worker that writes 1.2 MB to stderr with no newline, then a ``\\r`` progress bar,
    then exits: the exit is noticed and the worker restarted (supervision goes on); the
    long line is logged cut to the line cap, each ``\\r`` step as a line of its own; the
    good driver serves throughout."""
    from devicehost.drivers.process import MAX_STDERR_LINE

    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.wrecking:LongStderrLine")
    handle = host.host.drivers["bad"]
    eventually(lambda: handle.info.restarts >= 1, timeout=20)
    assert logged(caplog, "driver 'bad' is down", "exited with code 5")
    assert logged(caplog, "driver 'bad': progress 100%")
    long_lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("driver 'bad': xxx")
    ]
    assert long_lines
    assert all(len(m) <= MAX_STDERR_LINE + len("driver 'bad': ") for m in long_lines)
    good_driver_serves(host, kubelet)


def test_a_chatty_driver_is_logged_at_a_bounded_rate(install, run_host, kubelet, caplog):
    """A driver that floods stderr (30 000 lines at once) gets at most the log rate: the
    rest is summed up in one warning naming the driver and the cap, never re-logged line by
    line; its own devices and the good driver's serve."""
    from devicehost.drivers.process import STDERR_LINES_PER_SECOND
    from testdrivers.wrecking import CHATTY_LINES

    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.wrecking:Chatty")
    kubelet.wait_registered(BAD)
    eventually(lambda: logged(caplog, "driver 'bad'", "lines of its output not logged"))
    assert logged(caplog, f"over {STDERR_LINES_PER_SECOND} lines/s")
    relogged = [r for r in caplog.records if "chatty: a line" in r.getMessage()]
    assert len(relogged) < CHATTY_LINES // 10
    good_driver_serves(host, kubelet)
    kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Healthy"})


def test_a_frozen_worker_is_killed_and_restarted_its_devices_unhealthy_meanwhile(
    install, run_host, kubelet, caplog
):
    """``kill -STOP`` of a worker: its missed heartbeat (one each second, or the one a
    timed-out scan makes at once) gets it killed with the one heartbeat message,
    its devices turn Unhealthy, a fresh worker starts and they are Healthy again; the good
    driver serves throughout."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.scripted:Scripted")
    kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Healthy"})
    handle = host.host.drivers["bad"]
    frozen = handle.process.pid
    os.kill(frozen, signal.SIGSTOP)
    try:
        kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Unhealthy"})
        eventually(lambda: logged(caplog, "driver 'bad'", "did not answer a heartbeat"))
        eventually(lambda: handle.up and handle.process.pid != frozen, timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGKILL)
    kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Healthy"})
    good_driver_serves(host, kubelet)


def test_a_worker_killed_while_the_zygote_is_frozen_is_noticed_and_both_restart(
    install, run_host, kubelet, caplog
):
    """With the zygote frozen (``kill -STOP``), ``kill -9`` of a worker is noticed by the
    end of its channel (the zygote cannot report it): its devices turn Unhealthy; the
    frozen zygote misses its heartbeat and is killed; every driver starts again from a
    fresh zygote and both resources serve again."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.scripted:Scripted")
    kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Healthy"})
    zygote = host.host.running.zygote.pid
    handle = host.host.drivers["bad"]
    worker = handle.process.pid
    os.kill(zygote, signal.SIGSTOP)
    try:
        os.kill(worker, signal.SIGKILL)
        kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Unhealthy"})
        eventually(lambda: logged(caplog, "driver 'bad' is down", "closed its channel"))
        eventually(lambda: logged(caplog, f"the zygote (pid {zygote}) did not answer"))
        eventually(lambda: host.host.running.zygote.pid not in (None, zygote), timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zygote, signal.SIGKILL)
    kubelet.wait_devices(BAD, lambda d: {x.health for x in d.values()} == {"Healthy"})
    good_driver_serves(host, kubelet)


def test_an_unwritable_feature_file_directory_never_stops_supervision_and_heals(
    install, run_host, kubelet, caplog, tmp_path
):
    """The feature file's directory cannot be made (a file is in its way): the write
    failure is logged, counted and shown in the driver's state, but the labelling driver
    comes up, and a ``kill -9`` of its worker is restarted; once the directory can be made
    the file is written by the retry, with no device change."""
    caplog.set_level(logging.INFO, logger="devicehost")
    blocker = tmp_path / "features"
    blocker.write_text("not a directory")
    feature_file = blocker / "features.d" / "devicehost.txt"
    host = beside_good(
        install, run_host, "testdrivers.labelled:Labelled", feature_file=feature_file
    )
    handle = host.host.drivers["bad"]
    eventually(lambda: handle.info.status is DriverStatus.ACTIVE)
    eventually(lambda: logged(caplog, "cannot write the node feature file", str(feature_file)))
    metrics = host.host.telemetry.metrics
    assert host.call(lambda: metrics.node_file_errors.value(file="devicehost.txt")) > 0
    states = {row["name"]: row for row in host.call(host.host.driver_states)}
    assert "cannot write the node feature file" in states["bad"]["nodeFileErrors"][0]
    first = handle.process.pid
    os.kill(first, signal.SIGKILL)
    eventually(lambda: handle.up and handle.process.pid != first, timeout=20)
    good_driver_serves(host, kubelet)
    blocker.unlink()  # the disk heals
    eventually(lambda: feature_file.exists(), timeout=30)
    assert f"{'devicehost.feature.node.kubernetes.io'}/bad.present=true" in feature_file.read_text()
    eventually(lambda: not host.call(host.host.driver_states)[1]["nodeFileErrors"])


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_devicehost_drivers_shows_the_running_daemon_and_sigterm_ends_a_frozen_tree(
    tmp_path, plugin_dir, kubelet
):
    """While `devicehost run` serves the plugin directory, `devicehost drivers --json`
    shows that daemon's live state (source "daemon"), a hook hung past its timeout shown
    as hung; with the zygote and a worker frozen (``kill -STOP``), SIGTERM still ends the
    host with status 0 within 2 s, leaving no socket and none of its processes."""
    site = tmp_path / "site"
    write_distribution(site, "devicehost-good", {"devicehost.drivers": {"good": SCRIPTED}})
    write_distribution(site, "devicehost-bad", {"devicehost.drivers": {"bad": SCRIPTED}})
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\nhookTimeoutSeconds: 0.5\n"
        f"drivers:\n  good:\n    resources: {{'{GOOD}': 2}}\n    prefix: g\n"
        f"  bad:\n    resources: {{'{BAD}': 2}}\n    prefix: b\n"
        "    hang: [devicehost_allocate]\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).parent)])}
    env.pop("DEVICEHOST_CONFIG", None)
    flags = [
        *("--config", str(config), "--plugin-dir", str(plugin_dir), "--simulate"),
        *("--metrics-address", f"127.0.0.1:{free_port()}", "--drivers", "good,bad"),
    ]
    cli = [sys.executable, "-m", "devicehost.cli"]
    log = tmp_path / "devicehost.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [*cli, "run", *flags, "--pod-resources-socket", ""], env=env, stderr=stderr
        )
    tree: list[int] = []
    try:
        kubelet.wait_registered(GOOD, timeout=30)
        kubelet.wait_registered(BAD, timeout=30)
        with pytest.raises(grpc.RpcError):
            kubelet.allocate(BAD, [["b-0"]])  # hangs in the driver past its timeout

        def shown() -> dict[str, dict]:
            result = subprocess.run(
                [*cli, "drivers", "--json", *flags], env=env, capture_output=True, timeout=60
            )
            assert result.returncode == 0, result.stderr
            return {row["name"]: row for row in json.loads(result.stdout)}

        rows = shown()
        assert {row["source"] for row in rows.values()} == {"daemon"}
        assert rows["good"]["status"] == "active"
        assert rows["good"]["resources"] == [GOOD]
        assert rows["bad"]["hung"] == ["devicehost_allocate"]
        zygote = next(p for p in children_of(process.pid) if p != process.pid)
        tree = [process.pid, zygote, *children_of(zygote)]
        os.kill(zygote, signal.SIGSTOP)
        worker = next(p for p in children_of(zygote))
        os.kill(worker, signal.SIGSTOP)
        sent = time.monotonic()
        terminate(process, timeout=2.0)
        print(f"\nSIGTERM to exit, zygote and a worker frozen: {time.monotonic() - sent:.2f} s")
        assert sorted(p.name for p in plugin_dir.iterdir()) == ["kubelet.sock"]
        eventually(lambda: not [p for p in tree if Path(f"/proc/{p}").exists()])
    except BaseException:
        print(log.read_text())
        raise
    finally:
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap(process)


def test_devicehost_drivers_without_a_daemon_shows_a_hung_enumerate_as_hung(tmp_path):
    """With no daemon on the plugin directory, `devicehost drivers --json` probes the
    drivers itself (source "probe"); a driver whose enumerate hangs is shown with that
    hook as hung, the good one without."""
    site = tmp_path / "site"
    write_distribution(site, "devicehost-good", {"devicehost.drivers": {"good": SCRIPTED}})
    write_distribution(site, "devicehost-bad", {"devicehost.drivers": {"bad": SCRIPTED}})
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\nhookTimeoutSeconds: 0.5\n"
        f"drivers:\n  good:\n    resources: {{'{GOOD}': 2}}\n    prefix: g\n"
        f"  bad:\n    resources: {{'{BAD}': 2}}\n    prefix: b\n"
        "    hang: [devicehost_enumerate]\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).parent)])}
    env.pop("DEVICEHOST_CONFIG", None)
    command = [sys.executable, "-m", "devicehost.cli", "drivers", "--json", "--simulate"]
    command += ["--config", str(config), "--drivers", "good,bad"]
    command += ["--plugin-dir", str(tmp_path / "plugins")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    shown = {d["name"]: d for d in json.loads(result.stdout)}
    assert {d["source"] for d in shown.values()} == {"probe"}
    assert shown["bad"]["hung"] == ["devicehost_enumerate"]
    assert shown["good"]["hung"] == []


# -- bounds ----------------------------------------------------------------------------------


def test_an_allocate_answer_over_the_kubelets_receive_limit_is_refused_naming_its_size(
    install, run_host, kubelet, caplog
):
    """A driver whose Allocate answer would be over the kubelet's 4 MiB receive limit (two
    containers of 300 environment values of 8 KiB each: each under the channel's limit) is
    refused with RESOURCE_EXHAUSTED naming the resource and the size, and the refusal is
    logged; the good driver serves meanwhile."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.faulty:Echo")
    kubelet.wait_devices(BAD, lambda d: len(d) == 2)
    scripted_control(host, BAD).answer({"envs": {f"BIG_{i}": "x" * 8192 for i in range(300)}})
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(BAD, [["b-0"], ["b-1"]])
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = refused.value.details()
    assert repr(BAD) in details and "4194304-byte receive limit" in details, details
    size = re.search(r"the Allocate answer is (\d+) bytes", details)
    assert size is not None and int(size.group(1)) > 4 * 1024 * 1024, details
    assert logged(caplog, repr(BAD), f"is {size.group(1)} bytes")
    good_driver_serves(host, kubelet)


def test_an_answer_over_the_channel_limit_is_refused_naming_the_driver_and_limit(
    install, run_host, kubelet, caplog
):
    """An allocate answer over the channel's 4 MiB message limit is refused in the worker
    (never decoded by the host): INTERNAL naming the driver and the limit; the worker is not
    restarted, and the good driver serves meanwhile."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.faulty:Echo")
    kubelet.wait_devices(BAD, lambda d: len(d) == 2)
    pid = host.host.drivers["bad"].process.pid
    scripted_control(host, BAD).answer({"envs": {f"BIG_{i}": "x" * 8192 for i in range(600)}})
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(BAD, [["b-0"]])
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    details = refused.value.details()
    assert "driver 'bad'" in details and f"{MAX_MESSAGE_BYTES}-byte message limit" in details
    good_driver_serves(host, kubelet)
    assert host.host.drivers["bad"].process.pid == pid


def test_an_enumeration_over_the_device_limit_is_refused_and_the_last_good_list_stays(
    install, run_host, kubelet, caplog
):
    """A driver that goes from 2 devices to 8 under limits.devicesPerResource 5 has the new
    list refused whole, logged naming the driver and the limit; the kubelet keeps the last
    good list (2 devices, Healthy), and the good driver serves meanwhile."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, SCRIPTED, max_devices_per_resource=5)
    kubelet.wait_devices(BAD, lambda d: set(d) == {"b-0", "b-1"})
    bad = scripted_control(host, BAD)
    bad.set_devices(BAD, [Device(id=f"b-{i}") for i in range(8)])
    eventually(
        lambda: logged(caplog, "driver 'bad'", "8 devices, over the limit of 5 per resource"),
        timeout=15,
    )
    assert logged(caplog, repr(BAD), "last good list", "stays in force")
    good_driver_serves(host, kubelet)
    assert kubelet.health(BAD) == {"b-0": "Healthy", "b-1": "Healthy"}


def test_an_enumeration_over_the_channel_limit_keeps_the_last_good_list(
    install, run_host, kubelet, caplog
):
    """An enumeration whose answer is over the channel's 4 MiB limit (40 000 devices with
    long IDs) is refused in the worker, logged naming the driver and the limit; the last
    good list stays, and the good driver serves meanwhile."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(
        install, run_host, SCRIPTED, max_devices_per_resource=100_000, hook_timeout=30.0
    )
    kubelet.wait_devices(BAD, lambda d: set(d) == {"b-0", "b-1"})
    many = [Device(id=f"b-{i:0>60}") for i in range(40_000)]
    scripted_control(host, BAD).set_devices(BAD, many)
    eventually(
        lambda: logged(caplog, "driver 'bad'", f"{MAX_MESSAGE_BYTES}-byte message limit"),
        timeout=30,
    )
    good_driver_serves(host, kubelet)
    assert kubelet.health(BAD) == {"b-0": "Healthy", "b-1": "Healthy"}


def test_resources_past_the_per_driver_limit_are_refused_naming_the_limit(
    install, run_host, kubelet, caplog
):
    """A driver declaring 5 resources under limits.resourcesPerDriver 3 has the first 3
    served and the rest refused, logged naming the driver and the limit; the good driver
    serves."""
    caplog.set_level(logging.INFO, logger="devicehost")
    install("devicehost-good", drivers={"good": SCRIPTED})
    install("devicehost-bad", drivers={"bad": SCRIPTED})
    names = [f"test.example/bad{i}" for i in range(5)]
    host = run_host(
        enabled_drivers=("good", "bad"),
        drivers={
            "good": {"resources": {GOOD: 2}, "prefix": "g"},
            "bad": {"resources": dict.fromkeys(names, 1), "prefix": "b"},
        },
        max_resources_per_driver=3,
        **TIMEOUTS,
    )
    good_driver_serves(host, kubelet)
    eventually(lambda: set(names[:3]) <= set(kubelet.registered()))
    assert logged(caplog, "driver 'bad'", "5 resources, over the limit of 3 per driver")
    assert not set(names[3:]) & set(host.host.resources)


# -- ownership -------------------------------------------------------------------------------

SHARED = "test.example/shared"


@pytest.mark.parametrize("late", ["one", "two"])
def test_a_resource_two_drivers_declare_is_served_by_neither_in_either_start_order(
    install, run_host, kubelet, caplog, plugin_dir, late
):
    """Drivers 'one' and 'two' both declare test.example/shared, and the driver ``late``
    answers resources a second after the other (so it claims second): in both orders the
    name is served by neither, withdrawn from whichever served it first, logged naming
    both drivers and noted in each one's status; each driver's own resource serves."""
    caplog.set_level(logging.INFO, logger="devicehost")
    for name in ("one", "two"):
        install(f"devicehost-{name}", drivers={name: "testdrivers.faulty:Paced"})
    sections = {
        name: {
            "resources": {SHARED: 1, f"test.example/{name}": 1},
            "prefix": name,
            "delay": {"devicehost_resources": 1.0} if name == late else {},
        }
        for name in ("one", "two")
    }
    host = run_host(enabled_drivers=("one", "two"), drivers=sections)
    eventually(
        lambda: logged(caplog, f"resource {SHARED!r} is declared by drivers 'one' and 'two'"),
        timeout=30,
    )
    eventually(lambda: SHARED not in host.host.resources)
    eventually(lambda: not (plugin_dir / "devicehost-test.example_shared.sock").exists())
    for name in ("one", "two"):
        own = f"test.example/{name}"
        kubelet.wait_registered(own)
        assert kubelet.allocate(own, [[f"{name}-0"]])[0].envs == {"SCRIPTED_DEVICES": f"{name}-0"}
        info = host.host.drivers[name].info
        assert any(SHARED in n and "'one' and 'two'" in n for n in info.notes), info.notes


# -- the container-edit policy ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        pytest.param({"envs": {"LD_PRELOAD": "/x.so"}}, "env 'LD_PRELOAD' is one", id="LD_PRELOAD"),
        pytest.param({"envs": {"PATH": "/evil"}}, "env 'PATH' is one", id="PATH"),
        pytest.param({"envs": {"": "v"}}, "env name '' does not match", id="empty-name"),
        pytest.param({"envs": {"A=B": "v"}}, "env name 'A=B' does not match", id="equals"),
        pytest.param({"envs": {"A\nB": "v"}}, "does not match", id="newline"),
        pytest.param(
            {"mounts": [{"host_path": "/tmp/x", "container_path": "/etc/ld.so.preload"}]},
            "mount container path '/etc/ld.so.preload' is over /etc/ld.so.preload",
            id="ld.so.preload",
        ),
        pytest.param(
            {"devices": [{"host_path": "/dev/mem"}]},
            "device node container path '/dev/mem' is over /dev/mem",
            id="dev-mem",
        ),
        pytest.param(
            {
                "mounts": [
                    {"host_path": "/tmp/x", "container_path": "/proc/sys", "read_only": False}
                ]
            },
            "mount container path '/proc/sys' is over /proc",
            id="proc",
        ),
    ],
)
def test_container_edits_against_the_policy_are_refused_naming_the_driver(
    install, run_host, kubelet, caplog, answer, problem
):
    """An allocate answer with a loader or shell variable, an invalid env name, or a path
    over a sensitive place is refused with INTERNAL naming the driver and the rule broken
    (nothing reaches the container); the good driver serves meanwhile."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, "testdrivers.faulty:Echo")
    kubelet.wait_devices(BAD, lambda d: len(d) == 2)
    scripted_control(host, BAD).answer(answer)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(BAD, [["b-0"]])
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    assert "driver 'bad'" in refused.value.details()
    assert problem in refused.value.details(), refused.value.details()
    good_driver_serves(host, kubelet)


def test_an_exception_the_operator_allows_for_a_driver_is_granted_to_it_only(
    install, run_host, kubelet
):
    """containerEdits.allow lists LD_LIBRARY_PATH and /etc/ld.so.conf.d for the bad driver:
    its allocate answer with them is granted; the same answer from another driver, not
    listed, is refused."""
    answer = {
        "envs": {"LD_LIBRARY_PATH": "/usr/local/vendor/lib"},
        "mounts": [{"host_path": "/tmp/v.conf", "container_path": "/etc/ld.so.conf.d/v.conf"}],
    }
    install("devicehost-allowed", drivers={"allowed": "testdrivers.faulty:Echo"})
    install("devicehost-other", drivers={"other": "testdrivers.faulty:Echo"})
    host = run_host(
        enabled_drivers=("allowed", "other"),
        drivers={
            "allowed": {"resources": {GOOD: 1}, "prefix": "g"},
            "other": {"resources": {BAD: 1}, "prefix": "b"},
        },
        edits_allowed={"allowed": ("LD_LIBRARY_PATH", "/etc/ld.so.conf.d")},
    )
    kubelet.wait_devices(GOOD, lambda d: len(d) == 1)
    kubelet.wait_devices(BAD, lambda d: len(d) == 1)
    scripted_control(host, GOOD).answer(answer)
    scripted_control(host, BAD).answer(answer)
    granted = kubelet.allocate(GOOD, [["g-0"]])[0]
    assert granted.envs["LD_LIBRARY_PATH"] == "/usr/local/vendor/lib"
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(BAD, [["b-0"]])
    assert "env 'LD_LIBRARY_PATH' is one" in refused.value.details()


def test_a_device_whose_edits_break_the_policy_is_dropped(install, run_host, kubelet, caplog):
    """A device declaring LD_PRELOAD in its own edits is dropped at enumeration, logged
    naming the driver and the rule; the driver's other device and the good driver serve."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = beside_good(install, run_host, SCRIPTED)
    kubelet.wait_devices(BAD, lambda d: len(d) == 2)
    scripted_control(host, BAD).set_devices(
        BAD,
        [
            {"id": "b-0", "health": "Healthy", "edits": {"envs": {"LD_PRELOAD": "/x.so"}}},
            {"id": "b-1", "health": "Healthy", "edits": {"envs": {"VENDOR_DEVICE": "1"}}},
        ],
    )
    kubelet.wait_devices(BAD, lambda d: set(d) == {"b-1"})
    assert logged(caplog, "driver 'bad'", "env 'LD_PRELOAD' is one", "device dropped")
    good_driver_serves(host, kubelet)


def test_a_long_enumeration_sent_in_parts_arrives_whole(install, run_host, kubelet):
    """An enumeration several times PART_BYTES long (4 000 devices with 60-character IDs)
    crosses the channel in parts and reaches the kubelet whole, in the driver's order; the
    good driver serves meanwhile."""
    host = beside_good(install, run_host, SCRIPTED, hook_timeout=30.0)
    kubelet.wait_devices(BAD, lambda d: len(d) == 2)
    many = [Device(id=f"b-{i:0>60}") for i in range(4_000)]
    assert len(json.dumps([to_plain(d) for d in many])) > 3 * PART_BYTES
    scripted_control(host, BAD).set_devices(BAD, many)
    listed = kubelet.wait_devices(BAD, lambda d: len(d) == 4_000, timeout=30)
    assert set(listed) == {d.id for d in many}
    assert list(host.host.resources[BAD].state.devices) == [d.id for d in many]
    good_driver_serves(host, kubelet)
