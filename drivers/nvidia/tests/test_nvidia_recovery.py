"""Health that recovers only when it should (NVIDIA's Xid catalog, the recovery-action
field, row remapping), on the default node and on the simulated DGX H100."""

import threading

import pytest
from devicehost_nvidia import default_node
from devicehost_nvidia.nvml import (
    GPU_RECOVERY_ACTION_DRAIN_P2P,
    GPU_RECOVERY_ACTION_NONE,
)
from devicehost_nvidia.simulated import dgx_h100_node, sim_uuid
from devicehost_nvidia.xids import RESOLUTIONS, Resolution
from nvidia_helpers import MakeDriver

from devicehost import Health

GPU = "nvidia.com/gpu"
QUICK = {"quietPeriodSeconds": 0}


def _pump_all(driver) -> None:
    """Read the events delivered so far, as the watch hook would (one per pump)."""
    for _ in range(4):
        driver.monitor.pump(threading.Event(), wait_ms=10)


def _unhealthy(driver) -> set[str]:
    return {d.id for d in driver.devicehost_enumerate(resource=GPU) if d.health is Health.UNHEALTHY}


@pytest.mark.parametrize("xid", [48, 74, 79, 95, 119, 120])
def test_catalog_says_reset_or_reboot(xid: int) -> None:
    """The Xids the issue names resolve by a GPU reset or a node reboot in the catalog table."""
    assert RESOLUTIONS[xid] in (Resolution.GPU_RESET, Resolution.NODE_REBOOT)


@pytest.mark.parametrize("xid", [48, 74, 95, 119, 120])
def test_reset_class_xid_stays_unhealthy_until_a_reset_is_observed(
    make_driver: MakeDriver, xid: int
) -> None:
    """Even with no quiet period and a sound GPU, a reset-class Xid keeps the GPU Unhealthy;
    a GPU reset (its NVML energy counter starting again) brings it back."""
    driver = make_driver(QUICK)
    driver.simulator.xid(2, xid)
    _pump_all(driver)
    for _ in range(3):
        assert _unhealthy(driver) == {sim_uuid(2)}
    driver.simulator.reset(2)
    assert _unhealthy(driver) == set()


def test_application_class_xids_change_nothing(make_driver: MakeDriver) -> None:
    """Xids 13, 31, 43, 45, 68, 109 are ignored, as the reference plugin ignores them."""
    driver = make_driver(QUICK)
    for xid in (13, 31, 43, 45, 68, 109):
        driver.simulator.xid(1, xid)
    _pump_all(driver)
    assert _unhealthy(driver) == set()


def test_fallen_off_the_bus_returns_only_when_it_answers_again(make_driver: MakeDriver) -> None:
    """Xid 79 (node reboot class): Unhealthy while lost and after; back once NVML answers for
    it again (a reset or reboot happened)."""
    driver = make_driver(QUICK)
    driver.simulator.lose(5)
    _pump_all(driver)
    assert _unhealthy(driver) == {sim_uuid(5)}
    driver.simulator.reset(5)
    assert _unhealthy(driver) == set()


def test_pending_remap_is_not_a_fault_by_default(make_driver: MakeDriver) -> None:
    """A double-bit ECC event that leaves a row remap pending holds the GPU until a reset;
    the pending remap alone (no event) does not make a GPU Unhealthy."""
    driver = make_driver(QUICK)
    driver.simulator.double_bit_ecc(3)  # event delivered, but not pumped: only the remap
    assert _unhealthy(driver) == set()


def test_pending_remap_is_a_fault_when_configured(make_driver: MakeDriver) -> None:
    """remapPendingUnhealthy: true restores the strict reading."""
    driver = make_driver({**QUICK, "remapPendingUnhealthy": True})
    driver.simulator.double_bit_ecc(3)
    assert _unhealthy(driver) == {sim_uuid(3)}


def test_failed_remap_is_a_fault(make_driver: MakeDriver) -> None:
    """A failed row remap makes the GPU Unhealthy whatever the events say."""
    driver = make_driver(QUICK)
    driver.simulator.remap_failure(6)  # its Xid 64 is not read: NVML's answer alone
    assert _unhealthy(driver) == {sim_uuid(6)}


def _dgx(make_driver: MakeDriver, config=None):
    return make_driver({**QUICK, **(config or {})}, node=dgx_h100_node())


def test_recovery_action_decides_where_offered(make_driver: MakeDriver) -> None:
    """On a driver with the recovery-action field, the field decides: DRAIN_P2P with no event
    at all makes the GPU Unhealthy, NONE brings it back."""
    driver = _dgx(make_driver)
    ids = [d.id for d in driver.devicehost_enumerate(resource=GPU)]
    driver.simulator.set_recovery_action(4, GPU_RECOVERY_ACTION_DRAIN_P2P)
    assert _unhealthy(driver) == {ids[4]}
    driver.simulator.set_recovery_action(4, GPU_RECOVERY_ACTION_NONE)
    assert _unhealthy(driver) == set()


def test_recovery_action_none_releases_a_reset_class_xid(make_driver: MakeDriver) -> None:
    """Where the field is offered, a reset-class Xid is not held by the table: once the field
    reads NONE (and the quiet period passed) the GPU is Healthy, reset or not."""
    driver = _dgx(make_driver)
    ids = [d.id for d in driver.devicehost_enumerate(resource=GPU)]
    driver.simulator.fault(1)  # Xid 48; the field says GPU_RESET
    _pump_all(driver)
    assert _unhealthy(driver) == {ids[1]}
    driver.simulator.set_recovery_action(1, GPU_RECOVERY_ACTION_NONE)
    assert _unhealthy(driver) == set()


def test_default_node_has_no_recovery_field_and_still_recovers_on_reset(
    make_driver: MakeDriver,
) -> None:
    """The default node's driver lacks the field: fault then reset is observed by the energy
    counter and the GPU returns."""
    driver = make_driver(QUICK, node=default_node(gpus=2))
    driver.simulator.fault(0)
    _pump_all(driver)
    assert _unhealthy(driver) == {sim_uuid(0)}
    driver.simulator.reset(0)
    assert _unhealthy(driver) == set()
