"""Health from DCMI can go both ways, and watch wakes the host on every change."""

from __future__ import annotations

import threading

import pytest
from ascend_helpers import chip, open_simulated
from devicehost_ascend.dcmi_sim import (
    MAJOR,
    MINOR,
    SIMULATED_ALARM_CODE,
    SIMULATED_FAULT_CODE,
    SimulatedDcmi,
)
from devicehost_ascend.fault_codes import SHIPPED, FaultTable
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
    ("code", "errors", "severities", "expected", "reason"),
    [
        (0, [], {}, Health.HEALTHY, ""),
        (
            2,
            [0x80E01801],
            {},
            Health.UNHEALTHY,
            "RestartBusiness: DCMI health 2, fault codes 0x80E01801 RestartBusiness (table)",
        ),
        (
            1,
            [0x80E21007],
            {},
            Health.HEALTHY,
            "NotHandleFault: DCMI health 1, fault codes 0x80E21007 NotHandleFault (table)",
        ),
        (
            1,
            [0x81A3880C],
            {},
            Health.HEALTHY,
            "SubHealthFault: DCMI health 1, fault codes 0x81A3880C SubHealthFault (table)",
        ),
        (1, [], {}, Health.HEALTHY, "DCMI health 1 without a fault code: an alarm only"),
        (
            1,
            [0x10],
            {0x10: 1},
            Health.HEALTHY,
            "NotHandleFault: DCMI health 1, fault codes 0x00000010 NotHandleFault "
            "(not in the table, severity 1)",
        ),
        (
            2,
            [0x10],
            {0x10: 2},
            Health.UNHEALTHY,
            "SeparateNPU: DCMI health 2, fault codes 0x00000010 SeparateNPU "
            "(not in the table, severity 2)",
        ),
        (
            1,
            [0x10],
            {},
            Health.UNHEALTHY,
            "SeparateNPU: DCMI health 1, fault codes 0x00000010 SeparateNPU "
            "(not in the table, severity unknown)",
        ),
        (
            None,
            [],
            {},
            Health.UNHEALTHY,
            "RestartNPU: card dropped (DCMI -8012, device not ready); "
            "0x40F84E00 RestartNPU (table)",
        ),
    ],
)
def test_health_rule(
    code: int | None, errors: list[int], severities: dict[int, int], expected: Health, reason: str
) -> None:
    """Each code is classed by Huawei's shipped table, else by its event's severity; the
    chip is Healthy when the worst class is NotHandleFault or SubHealthFault; a health
    value alone is an alarm, a dropped card (None) is RestartNPU."""
    result = judge(code, errors, FaultTable(), severities)
    assert (result.health, result.reason) == (expected, reason)


def test_a_not_handled_alarm_keeps_the_chip(fake_root: FakeRoot) -> None:
    """A minor alarm whose code Huawei's table classes NotHandleFault leaves the chip
    Healthy (before, any code took the chip out of service)."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim)
    sim.inject_fault(4, code=SIMULATED_ALARM_CODE, severity=MINOR)
    assert health(node)["Ascend910-4"] == Health.HEALTHY


def test_a_health_value_without_a_code_keeps_the_chip(fake_root: FakeRoot) -> None:
    """DCMI health 1 with no fault code is an alarm level, not a fault: Healthy."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim)
    sim.raise_alarm(2)
    assert health(node)["Ascend910-2"] == Health.HEALTHY


def test_a_dropped_card_is_unhealthy_until_it_is_back(fake_root: FakeRoot) -> None:
    """A card that answers "not ready" (-8012) has dropped: Unhealthy; back: Healthy."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim)
    sim.drop(6)
    assert health(node)["Ascend910-6"] == Health.UNHEALTHY
    sim.recover(6)
    assert health(node)["Ascend910-6"] == Health.HEALTHY


def test_an_unlisted_code_is_judged_by_its_pushed_severity(fake_root: FakeRoot) -> None:
    """A code not in the table is judged by the severity its fault event carried: minor
    keeps the chip, major takes it; pushed events are what teach the driver a severity."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim)
    sim.inject_fault(0, code=0x12345678, severity=MINOR)
    sim.inject_fault(1, code=0x12345679, severity=MAJOR)
    states = health(node)
    assert (states["Ascend910-0"], states["Ascend910-1"]) == (Health.HEALTHY, Health.UNHEALTHY)


def test_an_unlisted_code_seen_only_by_polling_is_unhealthy(fake_root: FakeRoot) -> None:
    """Without an event the severity is unknown: the reference then separates the chip."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(fake_root, sim)
    sim.inject_fault(0, code=0x12345678, severity=MINOR, event=False)
    assert health(node)["Ascend910-0"] == Health.UNHEALTHY


def test_operators_extend_the_table_in_config(fake_root: FakeRoot) -> None:
    """faultCodes moves a code to another class: a shipped RestartBusiness code declared
    NotHandleFault keeps the chip, an unlisted code declared SeparateNPU takes it."""
    sim = SimulatedDcmi.preset("ascend910x8")
    node = open_simulated(
        fake_root,
        sim,
        faultCodes={"NotHandleFault": [f"0x{SIMULATED_FAULT_CODE:X}"], "SeparateNPU": [0x42]},
    )
    sim.inject_fault(3)
    sim.inject_fault(5, code=0x42, severity=MINOR)
    states = health(node)
    assert (states["Ascend910-3"], states["Ascend910-5"]) == (Health.HEALTHY, Health.UNHEALTHY)


def test_shipped_table_is_huaweis() -> None:
    """The table holds every code of the reference's faultCode.json lists, each once, with
    the more serious class for the one code shipped in two lists."""
    assert len(SHIPPED) == 802
    assert SHIPPED[0xA2301001] == "SeparateNPU"
    assert SHIPPED[0x80E01801] == "RestartBusiness"
    assert SHIPPED[0x40F84E00] == "RestartNPU"


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
    """Run the watch in a thread until it is waiting, as the host runs it: each notify
    re-enumerates, and ``enumerated()`` answers the last enumeration; returns (notified,
    stop, thread)."""
    notified, stop = threading.Event(), StopEvent()
    told = [node.enumerate(resource)]

    def notify() -> None:
        told[0] = node.enumerate(resource)
        notified.set()

    thread = threading.Thread(
        target=node.watch, args=(resource, notify, stop, lambda: told[0]), daemon=True
    )
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


def test_polling_reports_a_told_fault_that_cleared_between_polls(fake_root: FakeRoot) -> None:
    """The flip-and-revert: an enumeration told the kubelet chip 2 was faulty, and the
    fault cleared before the next poll. The poll compares with what was told, not with
    the previous poll, so it notifies and the host enumerates the chip Healthy again."""
    sim = SimulatedDcmi(SimulatedDcmi.preset("ascend910x8").cards, fault_events=False)
    node = open_simulated(fake_root, sim, healthPollSeconds=0.05)
    sim.inject_fault(2)
    told = node.enumerate(RESOURCE)
    sim.recover(2)
    assert any(d.health == Health.UNHEALTHY for d in told)
    notified, stop = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=node.watch, args=(RESOURCE, notified.set, stop, lambda: told), daemon=True
    )
    thread.start()
    try:
        assert notified.wait(10)
    finally:
        stop.set()
        thread.join(10)
