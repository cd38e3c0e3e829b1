"""The fault suite: kubelet restarts at random moments, ``kill -9`` of the process, and
drivers that raise, hang or answer garbage — all over real sockets, drivers found through
real entry points.

The long loops (200 kubelet restarts) are marked ``slow`` and run with ``make soak``;
``make test`` runs the same loops with 20 restarts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import random
import resource as rlimits
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from devicehost._proto.deviceplugin.v1beta1 import api_pb2 as pb
from devicehost.drivers.discovery import DriverStatus
from devicehost.drivers.process import WORKER_THREADS
from devicehost.testing import HostThread, KubeletStandIn, write_distribution
from support import SCRIPTED, eventually, reap, run_scripted, terminate
from support import scripted as scripted_control
from testdrivers.faulty import MALFORMED_EXTRAS

CLOSING = "test.example/closing"

#: Every test here ends with the stop check (tests/conftest.py, run_host).
pytestmark = pytest.mark.faults

RES = "test.example/dev"
SOCKET = "devicehost-test.example_dev.sock"
PACED = "testdrivers.faulty:Paced"
IDS = {"dev-0", "dev-1", "dev-2", "dev-3"}

#: What a kubelet may see from a plugin while it restarts: the call was cut by the restart.
CUT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def os_threads() -> int:
    """Every thread of the process, gRPC core's own included."""
    return len(os.listdir("/proc/self/task"))


class Loop:
    """Runs ``step()`` over and over in a thread until stopped; tallies what happened.

    ``step`` returns a label for a good outcome; an exception the loop is told to expect
    is tallied by name, anything else is kept in ``unexpected`` for the test to show.
    """

    def __init__(
        self, name: str, step: Callable[[], str], expected: Callable[[BaseException], str | None]
    ):
        self.step = step
        self.expected = expected
        self.outcomes: Counter[str] = Counter()
        self.unexpected: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.outcomes[self.step()] += 1
            except Exception as exc:
                label = self.expected(exc)
                if label is None:
                    self.unexpected.append(exc)
                else:
                    self.outcomes[label] += 1
                time.sleep(0.001)

    def __enter__(self) -> Loop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self._thread.name} did not stop"


def as_kubelet(kubelet: KubeletStandIn, resource: str, method: str, request, timeout=10.0):
    """Call ``method`` on the stand-in's own channel to the plugin, from any thread: the call
    is made inside the stand-in's loop (see test_stand_in_calls_from_any_thread)."""

    async def call():
        return await getattr(kubelet._stub(resource), method)(request, timeout=timeout)

    return kubelet._run(call(), None)


def allocate_as_kubelet(
    kubelet: KubeletStandIn, resource: str, containers: list[list[str]]
) -> pb.AllocateResponse:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
    )
    return as_kubelet(kubelet, resource, "Allocate", request)


def cut_by_restart(exc: BaseException) -> str | None:
    """A kubelet-side failure caused by the restart itself (never a host refusal)."""
    if isinstance(exc, grpc.RpcError) and exc.code() in CUT:
        return exc.code().name
    if isinstance(exc, LookupError | grpc.aio.UsageError):
        return "not registered at that moment"
    if isinstance(exc, concurrent.futures.CancelledError):
        return "cancelled: the kubelet closed its channel"
    return None


# -- kubelet restarts ------------------------------------------------------------------------


def restart_loop(
    install, host_config, kubelet, restarts: int, seed: int, inotify: bool = True
) -> dict[str, object]:
    """Restart the kubelet ``restarts`` times at random moments while one thread allocates
    in a loop and another flips a device's health in a loop; check re-registration, the
    device list, and that no descriptor or thread is left behind. Returns the figures."""
    rng = random.Random(seed)
    install("devicehost-alpha", drivers={"alpha": PACED})
    section = {
        "resources": {RES: 4},
        # Slow enough that a restart often lands mid-Allocate or mid-enumeration.
        "delay": {"devicehost_allocate": 0.003, "devicehost_enumerate": 0.002},
    }
    thread = HostThread(host_config, enabled_drivers=("alpha",), drivers={"alpha": section})
    thread.host.face.use_inotify = inotify
    thread.start()
    try:
        driver = scripted_control(thread, RES)
        kubelet.wait_registered(RES)
        kubelet.wait_devices(RES, lambda d: set(d) == IDS)
        state = {"registrations": kubelet.registration_count(RES)}

        def counts() -> tuple[int, int, int]:
            """Descriptors, threads, OS threads (the driver's own run in its worker)."""
            return open_fds(), threading.active_count(), os_threads()

        def allocate() -> str:
            response = allocate_as_kubelet(kubelet, RES, [["dev-0"], ["dev-1", "dev-2"]])
            envs = [c.envs["SCRIPTED_DEVICES"] for c in response.container_responses]
            assert envs == ["dev-0", "dev-1,dev-2"], envs
            return "allocated"

        flips = {"healthy": True}

        def flip() -> str:
            flips["healthy"] = not flips["healthy"]
            driver.set_health(RES, "dev-3", flips["healthy"])
            time.sleep(0.002)
            return "flipped"

        def restart_once() -> None:
            time.sleep(rng.uniform(0.0, 0.02))
            count = kubelet.registration_count(RES)
            kubelet.restart()  # forgets every plugin before it returns
            # A registration accepted after the restart, and the list on its new stream.
            kubelet.wait_registered(RES, count=count + 1, timeout=30)
            kubelet.wait_devices(RES, lambda d: set(d) == IDS, timeout=30)

        # Warm up: lazily created pools, channels and threads belong to the baseline.
        with Loop("allocate", allocate, cut_by_restart), Loop("flip", flip, lambda e: None):
            for _ in range(2):
                restart_once()
        kubelet.wait_devices(RES, lambda d: set(d) == IDS)
        time.sleep(0.3)
        before = counts()
        state["registrations"] = kubelet.registration_count(RES)

        started = time.monotonic()
        with (
            Loop("allocate", allocate, cut_by_restart) as allocating,
            Loop("flip", flip, lambda e: None) as flipping,
        ):
            for _ in range(restarts):
                restart_once()
        elapsed = time.monotonic() - started

        assert not allocating.unexpected, allocating.unexpected[:3]
        assert not flipping.unexpected, flipping.unexpected[:3]
        assert allocating.outcomes["allocated"] > 0
        # At least one registration per restart (each one checked above). A second one for
        # the same restart is the race pinned by test_late_kubelet_gets_one_registration.
        time.sleep(0.3)
        extra = kubelet.registration_count(RES) - state["registrations"] - restarts
        assert extra >= 0
        # The list converges to the driver's truth once the flipping stops.
        truth = driver.health(RES)
        kubelet.wait_devices(RES, lambda d: {i: x.health for i, x in d.items()} == truth)

        # No leak: descriptors and threads come back to the warmed-up baseline.
        with contextlib.suppress(TimeoutError):
            eventually(lambda: (c := counts())[0] <= before[0] + 2 and c[1] <= before[1], 5)
        after = counts()
        assert after[0] <= before[0] + 2, f"file descriptors {before[0]} -> {after[0]}"
        assert after[1] <= before[1], f"threads {before[1]} -> {after[1]}"
        # gRPC core sizes its own pool with load; a leak would grow with the restart count.
        assert after[2] <= before[2] + 4, f"OS threads {before[2]} -> {after[2]}"
        return {
            "restarts": restarts,
            "extra_registrations": extra,
            "seconds": round(elapsed, 1),
            "fds": (before[0], after[0]),
            "threads": (before[1], after[1]),
            "os_threads": (before[2], after[2]),
            "allocations": dict(allocating.outcomes),
            "flips": flipping.outcomes["flipped"],
        }
    finally:
        thread.stop()


def test_kubelet_restarted_20_times_mid_allocate_and_mid_stream(install, host_config, kubelet):
    """20 kubelet restarts at random moments, during a loop of Allocates and a loop of health
    flips: every restart gives a new registration and the device list again, Allocate never
    fails but by the cut itself, and no descriptor or thread leaks."""
    figures = restart_loop(install, host_config, kubelet, restarts=20, seed=8)
    print(f"\nrestart loop: {figures}")


@pytest.mark.slow
def test_kubelet_restarted_200_times_mid_allocate_and_mid_stream(install, host_config, kubelet):
    """The same as the 20-restart test, 200 times: re-registration every time, no leak."""
    figures = restart_loop(install, host_config, kubelet, restarts=200, seed=200)
    print(f"\nrestart loop: {figures}")


@pytest.mark.slow
def test_kubelet_restarted_50_times_without_inotify(install, host_config, kubelet):
    """Where inotify is unavailable, the polling fallback re-registers after each of 50
    restarts at random moments, and nothing leaks either."""
    figures = restart_loop(install, host_config, kubelet, restarts=50, seed=50, inotify=False)
    print(f"\nrestart loop (polling): {figures}")


# -- kill -9 ---------------------------------------------------------------------------------


def devicehost_run(tmp_path: Path, plugin_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """`devicehost run` in its own process, serving the scripted driver 'alpha' (3 devices)."""
    with log.open("ab") as stderr:
        return run_scripted(tmp_path, plugin_dir, RES, 3, stderr)


def test_kill_9_then_restart_cleans_stale_socket_and_reregisters(tmp_path, plugin_dir, kubelet):
    """After `kill -9` the socket is left behind, dead; a new `devicehost run` removes it,
    serves a fresh one, registers again, and the kubelet sees the same device IDs."""
    log = tmp_path / "devicehost.log"
    path = plugin_dir / SOCKET
    first = devicehost_run(tmp_path, plugin_dir, log)
    second = None
    try:
        kubelet.wait_registered(RES, timeout=30)
        before = kubelet.wait_devices(RES, lambda d: len(d) == 3)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
        # The stale socket is still there and nobody answers on it.
        assert path.is_socket()
        with socket.socket(socket.AF_UNIX) as probe, pytest.raises(ConnectionRefusedError):
            probe.connect(str(path))

        second = devicehost_run(tmp_path, plugin_dir, log)
        kubelet.wait_registered(RES, count=2, timeout=30)
        after = kubelet.wait_devices(RES, lambda d: len(d) == 3)
        assert sorted(after) == sorted(before) == ["dev-0", "dev-1", "dev-2"]
        assert {d.health for d in after.values()} == {"Healthy"}
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(path))  # the fresh socket answers
        assert kubelet.allocate(RES, [["dev-2"]])[0].envs == {"SCRIPTED_DEVICES": "dev-2"}
        terminate(second, timeout=10)
        assert not path.exists()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


# -- faulty drivers --------------------------------------------------------------------------

GOOD, RAISING, HANGING, MALFORMED = (
    "test.example/good",
    "test.example/raising",
    "test.example/hanging",
    "test.example/malformed",
)
#: What a refusal caused by a misbehaving driver may be; never UNKNOWN, never a dropped call.
DRIVER_FAULT_CODES = {
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT,
}


@pytest.fixture
def zoo(install, run_host, kubelet):
    """One host with a good driver beside four bad ones (raising after start, hanging,
    malformed, raising everywhere from configure on)."""
    install("devicehost-good", drivers={"good": SCRIPTED})
    install("devicehost-raising", drivers={"raising": "testdrivers.faulty:Faulty"})
    install("devicehost-hanging", drivers={"hanging": SCRIPTED})
    install("devicehost-malformed", drivers={"malformed": "testdrivers.faulty:Malformed"})
    install("devicehost-everywhere", drivers={"everywhere": "testdrivers.faulty:RaisingEverywhere"})
    runtime_hooks = [
        "devicehost_allocate",
        "devicehost_preferred_allocation",
        "devicehost_pre_start",
        "devicehost_watch",
        "devicehost_shutdown",
    ]
    host = run_host(
        enabled_drivers=("good", "raising", "hanging", "malformed", "everywhere"),
        hook_timeout=0.3,
        drivers={
            "good": {"resources": {GOOD: 4}, "prefix": "g"},
            "raising": {"resources": {RAISING: 2}, "prefix": "r", "raise": runtime_hooks},
            "hanging": {"resources": {HANGING: 2}, "prefix": "h", "hang": ["devicehost_allocate"]},
            "malformed": {"resources": {MALFORMED: 2}},
            "everywhere": {},
        },
    )
    for resource in (GOOD, RAISING, HANGING, MALFORMED):
        kubelet.wait_registered(resource)
    kubelet.wait_devices(GOOD, lambda d: len(d) == 4)
    return host


def plugin_of(host: HostThread, resource: str):
    return scripted_control(host, resource)


def errors(host: HostThread, driver: str, hook: str) -> float:
    metrics = host.host.telemetry.metrics
    return host.call(lambda: metrics.driver_errors.value(driver=driver, hook=hook))


def test_bad_drivers_are_reported_and_isolated_while_a_good_one_serves(zoo, kubelet, caplog):
    """With drivers that raise in every hook, hang in enumerate and allocate, and answer
    garbage all in one host — and a thread hammering them — the good driver's Allocates and
    health flips keep working, and each fault is reported: driver status, a log line naming
    the driver, and devicehost_driver_errors_total{driver,hook}."""
    caplog.set_level(logging.INFO, logger="devicehost")
    host = zoo
    good = plugin_of(host, GOOD)

    # The malformed driver's valid devices are served; every invalid one is dropped.
    assert sorted(kubelet.wait_devices(MALFORMED, lambda d: len(d) == 2)) == ["mal-0", "mal-1"]

    calls = itertools.cycle(
        itertools.product([RAISING, HANGING, MALFORMED], ["allocate", "preferred", "pre_start"])
    )

    def hammer() -> str:
        resource, kind = next(calls)
        prefix = {RAISING: "r", HANGING: "h", MALFORMED: "mal"}[resource]
        ids = [f"{prefix}-0", f"{prefix}-1"]
        if kind == "allocate":
            allocate_as_kubelet(kubelet, resource, [ids[:1]])
        elif kind == "preferred":
            container = pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=ids, allocation_size=1
            )
            request = pb.PreferredAllocationRequest(container_requests=[container])
            answer = as_kubelet(kubelet, resource, "GetPreferredAllocation", request)
            assert len(answer.container_responses[0].deviceIDs) == 1
        elif resource != HANGING:
            request = pb.PreStartContainerRequest(devices_ids=ids[:1])
            as_kubelet(kubelet, resource, "PreStartContainer", request)
        return f"{resource} {kind} ok"

    def refusal(exc: BaseException) -> str | None:
        if isinstance(exc, grpc.RpcError) and exc.code() in DRIVER_FAULT_CODES:
            return exc.code().name
        return None

    with Loop("hammer", hammer, refusal) as hammering:
        for round_ in range(12):
            if round_ == 4:  # now enumeration fails too: raises in one, hangs in the other
                plugin_of(host, RAISING).misbehave(raising=["devicehost_enumerate"])
                plugin_of(host, HANGING).misbehave(hanging=["devicehost_enumerate"])
                plugin_of(host, RAISING).changed(RAISING)
                plugin_of(host, HANGING).changed(HANGING)
            device = f"g-{round_ % 4}"
            response = kubelet.allocate(GOOD, [[device]])
            assert response.container_responses[0].envs == {"SCRIPTED_DEVICES": device}
            good.set_health(GOOD, device, False)
            kubelet.wait_health(GOOD, device, "Unhealthy")
            with pytest.raises(grpc.RpcError) as refused:
                kubelet.allocate(GOOD, [[device]])
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            good.set_health(GOOD, device, True)
            kubelet.wait_health(GOOD, device, "Healthy")
        # Every bad (resource, call) pair has been tried at least twice meanwhile.
        eventually(lambda: hammering.outcomes.total() + len(hammering.unexpected) >= 18, 30)
    assert not hammering.unexpected, hammering.unexpected[:3]
    assert {"INTERNAL", "DEADLINE_EXCEEDED"} <= set(hammering.outcomes)

    # Failing enumerations: the faulty drivers' devices are reported Unhealthy.
    for resource in (RAISING, HANGING):
        kubelet.wait_devices(resource, lambda d: {x.health for x in d.values()} == {"Unhealthy"})
    assert {x.health for x in kubelet.devices(GOOD).values()} == {"Healthy"}

    # Driver status: the one raising from configure on is down (and retried), the hook named.
    infos = {i.name: i for i in host.host.plugins.infos}
    assert infos["everywhere"].status in (DriverStatus.RESTARTING, DriverStatus.CRASH_LOOPING)
    assert "hook devicehost_configure" in infos["everywhere"].reason
    assert {infos[n].status for n in ("good", "raising", "hanging", "malformed")} == {
        DriverStatus.ACTIVE
    }
    assert all(r.driver.name != "everywhere" for r in host.host.resources.values())

    # Metrics: each failing hook is counted against its own driver only.
    for driver, hook in [
        ("raising", "devicehost_allocate"),
        ("raising", "devicehost_pre_start"),
        ("raising", "devicehost_preferred_allocation"),
        ("raising", "devicehost_watch"),
        ("raising", "devicehost_enumerate"),
        ("hanging", "devicehost_allocate"),
        ("hanging", "devicehost_enumerate"),
        ("malformed", "devicehost_allocate"),
        ("malformed", "devicehost_preferred_allocation"),
    ]:
        assert errors(host, driver, hook) > 0, (driver, hook)
    assert all(
        errors(host, "good", hook) == 0 for hook in ("devicehost_allocate", "devicehost_enumerate")
    )

    # Log lines name the driver: every malformed device dropped, each fault logged.
    messages = [r.getMessage() for r in caplog.get_records("setup") + caplog.records]
    dropped = [m for m in messages if "driver 'malformed'" in m and "device dropped" in m]
    assert len(dropped) == len(MALFORMED_EXTRAS)
    for needle in (
        "driver 'raising', hook devicehost_allocate: RuntimeError: scripted failure",
        "driver 'raising', hook devicehost_watch: RuntimeError: scripted watch failure",
        "driver 'hanging', hook devicehost_allocate: did not return within 0.3 s",
        "driver 'hanging', hook devicehost_enumerate: did not return within 0.3 s",
        "driver 'everywhere', hook devicehost_configure: RuntimeError: raising everywhere",
    ):
        assert any(needle in m for m in messages), needle


@pytest.mark.parametrize(
    "restarts", [3, pytest.param(50, marks=pytest.mark.slow, id="50-soak")], ids=str
)
def test_bad_drivers_through_kubelet_restarts(zoo, kubelet, restarts):
    """Kubelet restarts while the bad drivers raise, hang (their worker threads all stuck)
    and answer garbage: every resource, bad ones included, registers again each time, and
    the good one allocates after every restart."""
    host = zoo
    for resource, hooks in ((RAISING, "raising"), (HANGING, "hanging")):
        plugin_of(host, resource).misbehave(**{hooks: ["devicehost_enumerate"]})
        plugin_of(host, resource).changed(resource)

    def hammer() -> str:
        for resource, device in ((RAISING, "r-0"), (HANGING, "h-0"), (MALFORMED, "mal-0")):
            with contextlib.suppress(grpc.RpcError):
                allocate_as_kubelet(kubelet, resource, [[device]])
        return "round"

    def tolerated(exc: BaseException) -> str | None:
        return cut_by_restart(exc)

    resources = (GOOD, RAISING, HANGING, MALFORMED)
    with Loop("hammer", hammer, tolerated) as hammering:
        for _ in range(restarts):
            counts = {r: kubelet.registration_count(r) for r in resources}
            kubelet.restart()
            for resource in resources:
                kubelet.wait_registered(resource, count=counts[resource] + 1, timeout=30)
            kubelet.wait_devices(GOOD, lambda d: len(d) == 4)
            response = kubelet.allocate(GOOD, [["g-1"]])
            assert response[0].envs == {"SCRIPTED_DEVICES": "g-1"}
    assert not hammering.unexpected, hammering.unexpected[:3]
    for resource in (RAISING, HANGING):
        kubelet.wait_devices(resource, lambda d: {x.health for x in d.values()} == {"Unhealthy"})


def test_hung_driver_recovers_when_its_vendor_call_returns(install, run_host, kubelet):
    """A driver hung in enumerate and allocate is Unhealthy and refused with
    DEADLINE_EXCEEDED; once its calls return, its devices are Healthy and allocate again."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(
        enabled_drivers=("alpha",),
        hook_timeout=0.3,
        drivers={"alpha": {"resources": {RES: 2}}},
    )
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    driver = plugin_of(host, RES)
    driver.misbehave(hanging=["devicehost_enumerate", "devicehost_allocate"])
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(RES, [["dev-0"]])
    assert refused.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    driver.changed(RES)
    kubelet.wait_devices(RES, lambda d: {x.health for x in d.values()} == {"Unhealthy"})
    driver.release()  # the vendor library answers again
    driver.changed(RES)
    kubelet.wait_devices(RES, lambda d: {x.health for x in d.values()} == {"Healthy"})
    assert kubelet.allocate(RES, [["dev-1"]])


# -- faults the fault suite found, each fixed in the host and kept as a regression test ------


def test_preferred_allocation_answer_that_is_not_a_list_falls_back_to_default(
    install, run_host, kubelet
):
    """A preferred_allocation answer that is not a list of IDs (here the int 7) is logged and
    replaced by the host's default, as for any other invalid answer: never INTERNAL."""
    install("devicehost-malformed", drivers={"malformed": "testdrivers.faulty:Malformed"})
    host = run_host(
        enabled_drivers=("malformed",), drivers={"malformed": {"resources": {MALFORMED: 4}}}
    )
    kubelet.wait_devices(MALFORMED, lambda d: len(d) == 4)
    plugin_of(host, MALFORMED).misbehave(preference=7)
    chosen = kubelet.preferred_allocation(MALFORMED, ["mal-0", "mal-1", "mal-2", "mal-3"], [], 2)
    assert chosen == ["mal-0", "mal-2"]


def test_allocate_answer_of_wrong_type_is_logged_naming_the_driver(
    install, run_host, kubelet, caplog
):
    """An allocate hook returning a dict instead of an Allocation leaves a log line naming the
    driver and the hook (as an exception from the hook does), besides the INTERNAL status."""
    caplog.set_level(logging.ERROR, logger="devicehost")
    install("devicehost-malformed", drivers={"malformed": "testdrivers.faulty:Malformed"})
    run_host(enabled_drivers=("malformed",), drivers={"malformed": {"resources": {MALFORMED: 2}}})
    kubelet.wait_devices(MALFORMED, lambda d: len(d) == 2)
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate(MALFORMED, [["mal-0"]])
    assert refused.value.code() == grpc.StatusCode.INTERNAL
    assert any(
        "driver 'malformed', hook devicehost_allocate: returned an invalid Allocation"
        in r.getMessage()
        for r in caplog.records
    )


def test_enumeration_with_invalid_devices_counts_as_a_driver_error(install, run_host, kubelet):
    """An enumeration that returns invalid devices (dropped) increments
    devicehost_driver_errors_total{driver,hook="devicehost_enumerate"}, so the documented
    alert on that metric fires for a driver whose devices silently disappear."""
    install("devicehost-malformed", drivers={"malformed": "testdrivers.faulty:Malformed"})
    host = run_host(
        enabled_drivers=("malformed",), drivers={"malformed": {"resources": {MALFORMED: 2}}}
    )
    kubelet.wait_devices(MALFORMED, lambda d: len(d) == 2)
    assert errors(host, "malformed", "devicehost_enumerate") > 0


def test_stand_in_calls_from_any_thread(install, run_host, kubelet):
    """The kit's kubelet stand-in answers allocate() called from a worker thread, as driver
    authors' concurrency tests do (the fault suite works around it with as_kubelet())."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {RES: 1}}})
    kubelet.wait_registered(RES)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        response = pool.submit(kubelet.allocate, RES, [["dev-0"]]).result(10)
    assert response


def test_late_kubelet_gets_one_registration(install, host_config, plugin_dir):
    """A kubelet that appears after the first registration attempts (as after every kubelet
    restart) is registered with exactly once, even when a retry reaches it before the
    directory watcher reports its socket (made certain here by polling once a second)."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    thread = HostThread(
        host_config,
        enabled_drivers=("alpha",),
        initial_backoff=0.02,
        max_backoff=0.05,
        drivers={"alpha": {"resources": {RES: 2}}},
    )
    thread.host.face.use_inotify = False
    thread.host.face.watcher.poll_interval = 1.0
    with thread:
        time.sleep(0.2)  # a few attempts fail: nobody listens yet
        with KubeletStandIn(plugin_dir, start=True) as kubelet:
            kubelet.wait_registered(RES)
            time.sleep(1.5)  # the watcher has polled and seen the new kubelet.sock
            assert kubelet.registration_count(RES) == 1


def test_worker_with_every_call_thread_stuck_is_restarted(install, run_host, kubelet):
    """When every call thread of a driver's worker is stuck in a hung allocate, the worker
    has stopped answering: it is killed and started again, shutdown is not waited for, and
    the driver's devices come back Healthy."""
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    host = run_host(
        enabled_drivers=("alpha",),
        hook_timeout=0.2,
        drivers={"alpha": {"resources": {RES: 2}, "hang": ["devicehost_allocate"]}},
    )
    kubelet.wait_registered(RES)
    handle = host.host.drivers["alpha"]
    first_pid = handle.process.pid
    for _ in range(WORKER_THREADS):
        with pytest.raises(grpc.RpcError) as refused:
            kubelet.allocate(RES, [["dev-0"]])
        assert refused.value.code() in (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.FAILED_PRECONDITION,  # already down and Unhealthy
        )
    eventually(lambda: handle.info.restarts >= 1 and handle.up, timeout=15)
    assert handle.process.pid != first_pid
    kubelet.wait_devices(RES, lambda d: {x.health for x in d.values()} == {"Healthy"})


def test_socket_deleted_right_after_it_is_served_is_served_again(
    install, run_host, kubelet, monkeypatch
):
    """When the kubelet's clean-up deletes our fresh socket just after we bound it (a race
    seen in the suite: a planted symlink and a kubelet restart at once), the host notices
    and serves again. The deletion is injected right after the host's chmod of the socket,
    the last step of serving, to make the race certain."""
    import devicehost.kubelet.deviceplugin.runner as runner

    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {RES: 2}}})
    kubelet.wait_registered(RES)
    path = kubelet.plugin_dir / SOCKET
    armed = threading.Event()
    real_chmod = os.chmod

    def chmod_then_lose_it(target, mode, *args, **kwargs):
        real_chmod(target, mode, *args, **kwargs)
        if armed.is_set() and Path(target) == path:
            armed.clear()
            os.unlink(target)  # the kubelet's clean-up lands right here

    monkeypatch.setattr(runner.os, "chmod", chmod_then_lose_it)
    armed.set()
    kubelet.restart()
    kubelet.wait_registered(RES, count=2)
    # A fixed host notices at once (the deletion is an event); 6 s covers its 5 s safety poll.
    eventually(lambda: path.exists() and stat.S_ISSOCK(os.lstat(path).st_mode), timeout=6)
    kubelet.wait_devices(RES, lambda d: len(d) == 2)


def test_a_runner_that_fails_is_logged_and_its_resource_served_again(
    install, run_host, kubelet, monkeypatch, caplog
):
    """A resource's runner ends only when stopped. One that fails (a host bug: a file where
    the plugin directory was once killed every runner silently) is logged naming the
    resource and counted in devicehost_task_restarts_total, and the resource is served and
    registered again. The failure is injected once into the runner's registration loop."""
    import devicehost.kubelet.deviceplugin.runner as runner

    caplog.set_level(logging.ERROR, logger="devicehost")
    install("devicehost-alpha", drivers={"alpha": SCRIPTED})
    real = runner.ResourceRunner._keep_registered
    failures = []

    async def fail_once(self, changed, own):
        if not failures:
            failures.append(self.name)
            raise RuntimeError("injected runner failure")
        return await real(self, changed, own)

    monkeypatch.setattr(runner.ResourceRunner, "_keep_registered", fail_once)
    host = run_host(enabled_drivers=("alpha",), drivers={"alpha": {"resources": {RES: 2}}})
    kubelet.wait_registered(RES)
    kubelet.wait_devices(RES, lambda d: len(d) == 2)
    assert failures == [RES]
    assert any(
        f"resource {RES!r}: serving it failed (RuntimeError: injected runner failure)"
        in r.getMessage()
        for r in caplog.records
    )
    metrics = host.host.telemetry.metrics
    assert host.call(lambda: metrics.task_restarts.value(task=f"resource-{RES}")) == 1
    assert kubelet.allocate(RES, [["dev-1"]])


# -- every long-running host task is supervised (issue 24) -----------------------------------

#: (module, class, method, task name) of each long-running host task: where the fault is
#: injected, and the name its supervision logs and counts it under.
HOST_TASKS = [
    ("devicehost.drivers.supervisor", "DriverHandle", "supervise", "driver-"),
    ("devicehost.drivers.process", "DriverLog", "read", "stderr-"),
    ("devicehost.drivers.scan", "Scanner", "run", "scan-"),
    ("devicehost.node.labels", "NodeLabels", "run", "node-labels"),
    ("devicehost.edits.cdi", "CdiWriter", "retry_failed", "cdi-retry"),
    (
        "devicehost.kubelet.deviceplugin.face",
        "DevicePluginFace",
        "_count_kubelet_restarts",
        "kubelet-restarts",
    ),
    (
        "devicehost.kubelet.deviceplugin.plugin_dir_lock",
        "PluginDirLock",
        "keep_locked",
        "plugin-dir-lock",
    ),
    (
        "devicehost.kubelet.deviceplugin.face",
        "DevicePluginFace",
        "_watch_when_registered",
        "watch-start",
    ),
    (
        "devicehost.kubelet.deviceplugin.restart_watch",
        "DirectoryWatcher",
        "_events",
        "plugin-dir-events",
    ),
    (
        "devicehost.kubelet.deviceplugin.restart_watch",
        "DirectoryWatcher",
        "_tick",
        "plugin-dir-watch",
    ),
    ("devicehost.telemetry.status_server", "StatusServer", "_beat", "loop-heartbeat"),
]


class InjectedFault(Exception):
    """The exception a test raises inside a host task."""


def fail_once(monkeypatch: pytest.MonkeyPatch, module: str, cls: str, method: str) -> None:
    """The first call of ``cls.method`` (a coroutine) raises ``InjectedFault``; every
    later one runs the real method."""
    import importlib

    owner = getattr(importlib.import_module(module), cls)
    real = getattr(owner, method)
    raised: list[bool] = []

    async def once(self, *args, **kwargs):
        if not raised:
            raised.append(True)
            raise InjectedFault(f"injected into {cls}.{method}")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, once)


@pytest.mark.parametrize(
    ("module", "cls", "method", "task"), HOST_TASKS, ids=[t[3].rstrip("-") for t in HOST_TASKS]
)
def test_an_exception_in_any_host_task_is_logged_counted_and_the_task_restarted(
    install, run_host, kubelet, caplog, tmp_path, monkeypatch, module, cls, method, task
):
    """An exception injected into one long-running host task is logged naming the task
    with its traceback, counted in devicehost_task_restarts_total{task}, and the task
    runs again; both drivers' resources register, stream a health flip and allocate."""
    caplog.set_level(logging.INFO, logger="devicehost")
    fail_once(monkeypatch, module, cls, method)
    install("devicehost-good", drivers={"good": "testdrivers.labelled:Labelled"})
    install("devicehost-other", drivers={"other": SCRIPTED})
    host = run_host(
        enabled_drivers=("good", "other"),
        drivers={
            "good": {"resources": {"test.example/good": 2}, "prefix": "g"},
            "other": {"resources": {"test.example/other": 2}, "prefix": "o"},
        },
        metrics_address="127.0.0.1:0",
        feature_file=tmp_path / "features.d" / "devicehost.txt",
        cdi_enabled=True,
        cdi_dir=tmp_path / "cdi",
        cdi_drivers=("other",),
    )

    def failure():
        return next((r for r in caplog.records if f"host task '{task}" in r.getMessage()), None)

    eventually(lambda: failure() is not None, timeout=20)
    record = failure()
    assert "InjectedFault: injected into" in record.getMessage()
    assert record.exc_info is not None  # the traceback, the first time
    name = record.getMessage().split("'")[1]
    metrics = host.host.telemetry.metrics
    eventually(lambda: host.call(lambda: metrics.task_restarts.value(task=name)) == 1)
    for resource, prefix in (("test.example/good", "g"), ("test.example/other", "o")):
        kubelet.wait_registered(resource)
        control = scripted_control(host, resource)
        control.set_health(resource, f"{prefix}-0", False)
        kubelet.wait_health(resource, f"{prefix}-0", "Unhealthy")
        control.set_health(resource, f"{prefix}-0", True)
        kubelet.wait_health(resource, f"{prefix}-0", "Healthy")
        assert kubelet.allocate(resource, [[f"{prefix}-1"]])
    if task == "watch-start":  # a one-shot task: done its job, the watch runs
        eventually(lambda: host.host.face.watcher.mode != "stopped")
    else:
        running = host.call(
            lambda: [t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()]
        )
        assert running, f"{name} is not running again"


# -- the descriptor budget -------------------------------------------------------------------


def _worker_pids(host_pid: int, name: str) -> set[int]:
    """Pids of processes named ``name`` (a worker's ``dh-<driver>``) below ``host_pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() != name:
                continue
            pid = int(entry.name)
            while pid > 1:
                stat_fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                pid = int(stat_fields[1])
                if pid == host_pid:
                    found.add(int(entry.name))
                    break
    return found


def test_a_driver_declaring_more_resources_than_descriptors_allow_leaves_the_reserve(
    tmp_path, plugin_dir, kubelet
):
    """Under a 160-descriptor limit (soft and hard), a driver declaring 40 resources gets
    only those the budget allows (each refused one logged naming the limit), the good
    driver beside it registers and allocates, and a kill -9 of the good driver's worker is
    still recovered: the reserve kept for restarts was not eaten by resources."""
    site = tmp_path / "site"
    write_distribution(site, "devicehost-good", {"devicehost.drivers": {"good": SCRIPTED}})
    write_distribution(site, "devicehost-many", {"devicehost.drivers": {"many": PACED}})
    many = ", ".join(f"'test.example/many{i}': 1" for i in range(40))
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: devicehost/v1\nkind: HostConfig\ndrivers:\n"
        "  good:\n    resources: {'test.example/good': 2}\n    prefix: g\n"
        # Its resources answer comes late, so the good driver has claimed its own by then.
        f"  many:\n    resources: {{{many}}}\n    prefix: m\n"
        "    delay: {devicehost_resources: 3.0}\n"
    )
    log = tmp_path / "devicehost.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.path.dirname(__file__)])}
    limit = (160, 160)
    command = [
        *("python", "-m", "devicehost.cli", "run", "--config", str(config)),
        *("--plugin-dir", str(plugin_dir), "--metrics-address", "", "--root", str(tmp_path)),
        *("--pod-resources-socket", "", "--drivers", "good,many"),
    ]
    command[0] = sys.executable
    with log.open("w") as out:
        host = subprocess.Popen(
            command,
            env=env,
            stderr=out,
            preexec_fn=lambda: rlimits.setrlimit(rlimits.RLIMIT_NOFILE, limit),
        )
    try:
        kubelet.wait_registered("test.example/good", timeout=30)
        eventually(
            lambda: "descriptors are open of this process's limit of 160" in log.read_text(), 60
        )
        served = [r for r in kubelet.registered() if r.startswith("test.example/many")]
        assert len(served) < 40
        assert kubelet.allocate("test.example/good", [["g-0"]])[0].envs == {
            "SCRIPTED_DEVICES": "g-0"
        }
        eventually(lambda: len(_worker_pids(host.pid, "dh-good")) == 1, 30)
        (old,) = _worker_pids(host.pid, "dh-good")
        os.kill(old, signal.SIGKILL)
        eventually(lambda: _worker_pids(host.pid, "dh-good") - {old}, 60)
        kubelet.wait_devices(
            "test.example/good", lambda d: {x.health for x in d.values()} == {"Healthy"}, timeout=60
        )
        assert kubelet.allocate("test.example/good", [["g-1"]])[0].envs == {
            "SCRIPTED_DEVICES": "g-1"
        }
        terminate(host, timeout=60)
    finally:
        reap(host)


def test_a_worker_that_closes_its_own_channel_is_restarted_and_serves_again(
    install, run_host, kubelet, tmp_path
):
    """A driver closes every descriptor of its worker, the channel to the host included,
    while the zygote is healthy: the worker is called down (its devices Unhealthy) and
    started again with back-off, and its devices are served again; the stop check follows."""
    install("devicehost-closing", drivers={"closing": "testdrivers.channel_closing:ChannelClosing"})
    flag = tmp_path / "close"
    host = run_host(
        enabled_drivers=("closing",), drivers={"closing": {"closeFile": str(flag)}},
        scan_interval=0.2,
    )  # fmt: skip
    kubelet.wait_devices(CLOSING, lambda d: len(d) == 2)
    handle = host.host.drivers["closing"]
    first = handle.process.pid
    flag.touch()
    eventually(lambda: handle.info.restarts >= 1, timeout=15)
    assert "closed its channel" in handle.info.reason or "exited" in handle.info.reason, (
        handle.info.reason
    )
    eventually(lambda: handle.up and handle.process.pid != first, timeout=15)
    kubelet.wait_devices(CLOSING, lambda d: {x.health for x in d.values()} == {"Healthy"})
