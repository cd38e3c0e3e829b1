"""Health that can recover: critical events, application Xids, the quiet period, soundness,
lost GPUs, MIG-scoped events, and the watch hook that carries it all to the host."""

import threading
import time

from devicehost_nvidia import SimNode, default_node, sim_gpu
from devicehost_nvidia.health import Condition, HealthTracker
from devicehost_nvidia.simulated import sim_uuid
from nvidia_helpers import MakeDriver, composed

from devicehost import Health

GPU = "nvidia.com/gpu"
NEVER = {"quietPeriodSeconds": 3600}


def _pump(driver) -> bool:
    """Read what the event set holds (one event per pump), as the watch hook would."""
    return driver.monitor.pump(threading.Event(), wait_ms=10)


def _health(driver, resource: str = GPU) -> dict[str, Health]:
    return {d.id: d.health for d in driver.devicehost_enumerate(resource=resource)}


def _unhealthy(driver, resource: str = GPU) -> set[str]:
    return {i for i, h in _health(driver, resource).items() if h is Health.UNHEALTHY}


def _wait_for(predicate, timeout: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the condition"
        time.sleep(0.02)


# -- the tracker, with a clock the test turns ---------------------------------------------


SOUND = Condition(None, 0, False)
UNSOUND = Condition("lost", 0, False)
WHOLE = (None, None)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_mark_clears_only_after_quiet_period_and_when_sound() -> None:
    """A mark stays through the quiet period, then clears only if the GPU is sound."""
    clock = _Clock()
    tracker = HealthTracker(30.0, clock)
    tracker.record("GPU-a", WHOLE, "Xid 94")
    clock.now += 29
    assert not tracker.recheck(lambda uuid: SOUND)
    clock.now += 1
    assert not tracker.recheck(lambda uuid: UNSOUND)
    assert tracker.marked("GPU-a") == "Xid 94"
    assert tracker.recheck(lambda uuid: SOUND)
    assert tracker.marked("GPU-a") is None


def test_new_event_restarts_the_quiet_period() -> None:
    """A second critical event during the quiet period pushes recovery out again."""
    clock = _Clock()
    tracker = HealthTracker(30.0, clock)
    tracker.record("GPU-a", WHOLE, "Xid 94")
    clock.now += 20
    tracker.record("GPU-a", WHOLE, "Xid 32")
    clock.now += 20
    assert not tracker.recheck(lambda uuid: SOUND)
    assert tracker.marked("GPU-a") == "Xid 32"


def test_instance_marks_reach_their_mig_device_and_the_whole_gpu() -> None:
    """A GPU-instance mark marks that MIG device and the whole GPU, not sibling instances."""
    tracker = HealthTracker(30.0)
    tracker.record("GPU-a", (2, None), "Xid 94")
    assert tracker.marked("GPU-a", 2, 0) == "Xid 94"
    assert tracker.marked("GPU-a", 1, 0) is None
    assert tracker.marked("GPU-a") == "Xid 94"
    tracker.record("GPU-a", WHOLE, "Xid 79")
    assert tracker.marked("GPU-a", 1, 0) == "Xid 79"


# -- the driver on the simulated NVML -------------------------------------------------------


def test_critical_xid_marks_that_gpu_unhealthy(make_driver: MakeDriver) -> None:
    """An Xid not caused by applications turns exactly its GPU Unhealthy."""
    driver = make_driver(NEVER)
    driver.simulator.xid(2, 94)
    _pump(driver)
    assert _unhealthy(driver) == {sim_uuid(2)}


def test_application_xids_leave_health_alone(make_driver: MakeDriver) -> None:
    """Xids 13, 31, 43, 45, 68 and 109 (application faults) change nothing by default."""
    driver = make_driver(NEVER)
    for xid in (13, 31, 43, 45, 68, 109):
        driver.simulator.xid(0, xid)
        _pump(driver)
    assert _unhealthy(driver) == set()


def test_ignored_xids_are_configurable(make_driver: MakeDriver) -> None:
    """``ignoredXids`` replaces the default list: 94 ignored, 13 now counts."""
    driver = make_driver({**NEVER, "ignoredXids": [94]})
    driver.simulator.xid(0, 94)
    driver.simulator.xid(1, 13)
    _pump(driver)
    _pump(driver)
    assert _unhealthy(driver) == {sim_uuid(1)}


def test_double_bit_ecc_event_marks_the_gpu(make_driver: MakeDriver) -> None:
    """A double-bit ECC event makes its GPU Unhealthy."""
    driver = make_driver(NEVER)
    driver.simulator.double_bit_ecc(5)
    _pump(driver)
    assert _unhealthy(driver) == {sim_uuid(5)}


def test_gpu_recovers_after_the_quiet_period(make_driver: MakeDriver) -> None:
    """With no new event for the quiet period and NVML answering, the GPU is Healthy again."""
    driver = make_driver({"quietPeriodSeconds": 0.2})
    driver.simulator.xid(1, 94)
    _pump(driver)
    assert _unhealthy(driver) == {sim_uuid(1)}
    _wait_for(lambda: not _unhealthy(driver))


def test_unsound_gpu_stays_unhealthy_until_reset(make_driver: MakeDriver) -> None:
    """A GPU with a pending row remap stays Unhealthy past the quiet period; a reset ends it."""
    driver = make_driver({"quietPeriodSeconds": 0})
    driver.simulator.fault(3)
    _pump(driver)
    assert _unhealthy(driver) == {sim_uuid(3)}
    driver.simulator.reset(3)
    _pump(driver)
    assert _unhealthy(driver) == set()


def test_lost_gpu_is_unhealthy_never_a_crash(make_driver: MakeDriver) -> None:
    """GPU_IS_LOST: that GPU is Unhealthy, the rest enumerate and allocate, the event set's
    failure is reported (pump returns False) instead of raising."""
    driver = make_driver({"quietPeriodSeconds": 0})
    driver.simulator.lose(4)
    assert _pump(driver) is True  # the Xid 79 event
    assert _pump(driver) is False  # then NVML's wait fails while the GPU is off the bus
    assert _unhealthy(driver) == {sim_uuid(4)}
    allocation = composed(driver, GPU, [sim_uuid(5)])
    assert allocation.envs["NVIDIA_VISIBLE_DEVICES"] == sim_uuid(5)
    driver.simulator.reset(4)
    assert _pump(driver) is True
    assert _unhealthy(driver) == set()


def test_replicas_follow_their_gpus_health(make_driver: MakeDriver) -> None:
    """A faulty GPU takes all its replicas out, and only those."""
    config = {**NEVER, "timeSlicing": {"resources": [{"name": GPU, "replicas": 3}]}}
    driver = make_driver(config)
    driver.simulator.xid(6, 94)
    _pump(driver)
    assert _unhealthy(driver) == {f"{sim_uuid(6)}::{k}" for k in range(3)}


def test_mig_event_scoped_to_one_gpu_instance(make_driver: MakeDriver) -> None:
    """An Xid for one GPU instance marks that MIG device only; a GPU-wide one marks all."""
    node = default_node(gpus=2, mig={0: ["1g.10gb", "1g.10gb", "1g.10gb"]})
    driver = make_driver({**NEVER, "migStrategy": "mixed"}, node=node)
    migs = node.gpus[0].mig_devices()
    driver.simulator.xid(0, 94, gpu_instance=migs[1].gpu_instance)
    _pump(driver)
    assert _unhealthy(driver, "nvidia.com/mig-1g.10gb") == {migs[1].uuid}
    driver.simulator.xid(0, 94)
    _pump(driver)
    assert _unhealthy(driver, "nvidia.com/mig-1g.10gb") == {m.uuid for m in migs}
    assert _unhealthy(driver) == set()  # GPU 1, not MIG-enabled, is untouched


def test_simulate_health_faults_and_repairs(make_driver: MakeDriver) -> None:
    """The simulate_health hook drives the simulated hardware both ways."""
    driver = make_driver({"quietPeriodSeconds": 0})
    assert driver.devicehost_simulate_health(resource=GPU, device_id=sim_uuid(1), healthy=False)
    _pump(driver)
    assert _unhealthy(driver) == {sim_uuid(1)}
    driver.devicehost_simulate_health(resource=GPU, device_id=sim_uuid(1), healthy=True)
    _pump(driver)
    assert _unhealthy(driver) == set()


def test_watch_notifies_on_event_and_recovery_and_honours_stop(make_driver: MakeDriver) -> None:
    """The watch hook calls notify() when an event arrives and again on recovery, and
    returns soon after stop is set."""
    driver = make_driver({"quietPeriodSeconds": 0.1})
    calls: list[int] = []
    changed = threading.Condition()

    def notify() -> None:
        with changed:
            calls.append(1)
            changed.notify_all()

    stop = threading.Event()
    thread = threading.Thread(
        target=driver.devicehost_watch, kwargs={"resource": GPU, "notify": notify, "stop": stop}
    )
    thread.start()
    try:
        driver.simulator.xid(0, 94)
        with changed:
            assert changed.wait_for(lambda: len(calls) >= 2, timeout=5)
        assert _unhealthy(driver) == set()
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_gpu_without_events_is_noted_and_still_checked(make_driver: MakeDriver) -> None:
    """A GPU that reports no Xid events is named in a note; NVML queries still catch its
    faults (a failed row remap) on each enumeration."""
    node = SimNode(gpus=[sim_gpu(0), sim_gpu(1, events_supported=False)])
    driver = make_driver(NEVER, node=node)
    assert any(
        n.startswith(f"GPU 1 ({sim_uuid(1)}) reports no Xid events")
        for n in driver.devicehost_notes()
    )
    driver.simulator.remap_failure(1)
    assert _unhealthy(driver) == {sim_uuid(1)}
