"""Health from DCMI can go both ways, and watch wakes the host on every change."""

from __future__ import annotations

import threading

import pytest
from ascend_helpers import chip, open_simulated
from devicehost_ascend.dcmi_sim import SIMULATED_FAULT_CODE, SimulatedDcmi
from devicehost_ascend.health import judge
from devicehost_ascend.node import AscendNode

from devicehost import Health
from devicehost.testing import FakeRoot

RESOURCE = "huawei.com/Ascend910"


def health(node: AscendNode, resource: str = RESOURCE) -> dict[str, Health]:
    return {d.id: d.health for d in node.enumerate(resource)}


def test_a_fault_makes_the_chip_unhealthy_and_recovery_heals_it(fake_root: FakeRoot) -> None:
    """A chip's fault shows Unhealthy; once DCMI reports it repaired it is Healthy again."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim)
    sim.inject_fault(3)
    assert health(node)["Ascend910-3"] == Health.UNHEALTHY
    assert sum(h == Health.HEALTHY for h in health(node).values()) == 7
    sim.recover(3)
    assert set(health(node).values()) == {Health.HEALTHY}


def test_vnpus_follow_their_parent_chip(fake_root: FakeRoot) -> None:
    """Every vNPU of a faulty chip is Unhealthy; vNPUs of other chips are not."""
    sim = SimulatedDcmi.preset("ascend910x8-vnpu")
    node = open_simulated(fake_root, sim)
    sim.inject_fault(7)
    assert set(health(node, "huawei.com/Ascend910-4c").values()) == {Health.UNHEALTHY}
    assert set(health(node, "huawei.com/Ascend910-8c").values()) == {Health.HEALTHY}


def test_ignored_error_codes_keep_the_chip_healthy(fake_root: FakeRoot) -> None:
    """An alarm raised only for codes in ignoredErrorCodes does not take the chip away."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim, ignoredErrorCodes=[f"0x{SIMULATED_FAULT_CODE:X}"])
    sim.inject_fault(1)
    assert health(node)["Ascend910-1"] == Health.HEALTHY
    sim.inject_fault(1, code=0x80CB8009)
    assert health(node)["Ascend910-1"] == Health.UNHEALTHY


def test_a_chip_dcmi_cannot_read_is_unhealthy(fake_root: FakeRoot) -> None:
    """A chip that stops answering DCMI (fell off the bus) is Unhealthy, not dropped."""
    sim = SimulatedDcmi([[chip(0)], [chip(1)]])
    node = open_simulated(fake_root, sim)
    sim.chip_by_phys(1).present = False
    assert health(node) == {"Ascend910-0": Health.HEALTHY, "Ascend910-1": Health.UNHEALTHY}
    sim.recover(1)
    assert health(node)["Ascend910-1"] == Health.HEALTHY


@pytest.mark.parametrize(
    ("code", "errors", "ignored", "expected", "reason"),
    [
        (0, [], set(), Health.HEALTHY, ""),
        (3, [0x80E01801], set(), Health.UNHEALTHY, "DCMI health 3, error codes 0x80E01801"),
        (1, [], set(), Health.UNHEALTHY, "DCMI health 1"),
        (0, [0x10], set(), Health.UNHEALTHY, "DCMI health 0, error codes 0x00000010"),
        (2, [0x10], {0x10}, Health.HEALTHY, "ignoring error codes 0x00000010"),
        (2, [0x10, 0x20], {0x10}, Health.UNHEALTHY, "DCMI health 2, error codes 0x00000020"),
    ],
)
def test_health_rule(
    code: int, errors: list[int], ignored: set[int], expected: Health, reason: str
) -> None:
    """Healthy: health 0 and no error code, or only ignored error codes; else Unhealthy."""
    result = judge(code, errors, frozenset(ignored))
    assert (result.health, result.reason) == (expected, reason)


class StopEvent(threading.Event):
    """The host's ``stop`` event; also tells the test once the watch waits on it, by which
    time the watch has read its first health snapshot."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.set()
        return super().wait(timeout)


def watching(
    node: AscendNode, resource: str = RESOURCE
) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """Run the watch in a thread until it is waiting; returns (notified, stop, thread)."""
    notified, stop = threading.Event(), StopEvent()
    thread = threading.Thread(target=node.watch, args=(resource, notified.set, stop), daemon=True)
    thread.start()
    assert stop.waited.wait(10)
    return notified, stop, thread


def test_pushed_fault_event_wakes_the_watch(fake_root: FakeRoot) -> None:
    """With a fault subscription the watch notifies on the event, long before any poll."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim, healthPollSeconds=3600)
    notified, stop, thread = watching(node)
    try:
        assert not notified.is_set()
        sim.inject_fault(5)
        assert notified.wait(10)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_polling_finds_changes_when_dcmi_pushes_nothing(fake_root: FakeRoot) -> None:
    """A DCMI without fault subscription is polled: a fault and its recovery both notify."""
    sim = SimulatedDcmi(SimulatedDcmi.preset("ascend910x8").cards, fault_events=False)
    node = open_simulated(fake_root, sim, healthPollSeconds=0.05)
    notified, stop, thread = watching(node)
    try:
        sim.inject_fault(2)
        assert notified.wait(10)
        notified.clear()
        sim.recover(2)
        assert notified.wait(10)
    finally:
        stop.set()
        thread.join(10)


def test_watch_returns_when_stopped(fake_root: FakeRoot) -> None:
    """Setting ``stop`` ends the watch even with an hour-long poll interval."""
    node = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"), healthPollSeconds=3600)
    _, stop, thread = watching(node)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def test_notes_say_whether_faults_are_pushed_or_polled(fake_root: FakeRoot) -> None:
    """The first note tells the operator how fast health changes arrive."""
    pushed = open_simulated(fake_root, SimulatedDcmi.preset("ascend910x8"))
    assert pushed.notes[0] == (
        "8 NPU chips through simulated DCMI (ascend910x8); fault events "
        "pushed, health also polled every 5 s"
    )
    sim = SimulatedDcmi(SimulatedDcmi.preset("ascend910x8").cards, fault_events=False)
    polled = open_simulated(fake_root, sim, healthPollSeconds=2)
    assert polled.notes[0] == (
        "8 NPU chips through simulated DCMI (custom); no fault-event "
        "subscription (not offered by this DCMI); health polled every 2 s"
    )


def test_refused_subscription_falls_back_to_polling_with_a_note(fake_root: FakeRoot) -> None:
    """DCMI allows one subscription per process; a second one is refused and noted."""
    sim = SimulatedDcmi.preset("ascend910x8")
    open_simulated(fake_root, sim)
    again = open_simulated(fake_root, sim)
    assert again.faults is not None and not again.faults.subscribed
    assert (
        "no fault-event subscription (dcmi_subscribe_fault_event returned -8002)" in again.notes[0]
    )
