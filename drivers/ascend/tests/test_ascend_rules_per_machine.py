"""Issue 13's Ascend rules (items 5-7) on each published machine the simulation builds:
Atlas 800 (model 9000, eight 910 in two HCCS rings), Atlas 800T A2 (eight 910B, full mesh)
and Atlas 800 (model 3000, four Atlas 300I Duo cards of two 310P)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ascend_helpers import open_simulated
from devicehost_ascend.dcmi_sim import (
    MINOR,
    PUBLISHED_NODES,
    SIMULATED_ALARM_CODE,
    SIMULATED_FAULT_CODE,
    SimulatedDcmi,
)
from devicehost_ascend.node import AscendNode, HccsViolation

from devicehost import Health, Mount
from devicehost.edits.compose import compose
from devicehost.testing import FakeRoot

FAMILY = {
    "atlas-800-9000": "Ascend910",
    "atlas-800t-a2": "Ascend910",
    "atlas-800-3000": "Ascend310P",
}
UNLISTED = 0x12345678  # in no class of Huawei's table


def _open(fake_root: FakeRoot, machine: str, **config: object) -> tuple[SimulatedDcmi, AscendNode]:
    sim = SimulatedDcmi.published(machine)
    assert sim is not None
    return sim, open_simulated(fake_root, sim, **config)


def _health(node: AscendNode, machine: str, chip: int) -> Health:
    family = FAMILY[machine]
    devices = {d.id: d.health for d in node.enumerate(f"huawei.com/{family}")}
    return devices[f"{family}-{chip}"]


# -- item 5: health classed as Huawei's plugin classes it ---------------------------------------

Fault = Callable[[SimulatedDcmi], None]
RULES: list[tuple[str, Fault, Health]] = [
    (
        "a NotHandleFault alarm of the table keeps the chip",
        lambda s: s.inject_fault(3, code=SIMULATED_ALARM_CODE, severity=MINOR),
        Health.HEALTHY,
    ),
    ("a health level without a code keeps the chip", lambda s: s.raise_alarm(3), Health.HEALTHY),
    (
        "a RestartBusiness code of the table takes the chip",
        lambda s: s.inject_fault(3, code=SIMULATED_FAULT_CODE),
        Health.UNHEALTHY,
    ),
    (
        "an unlisted code pushed as minor keeps the chip",
        lambda s: s.inject_fault(3, code=UNLISTED, severity=MINOR),
        Health.HEALTHY,
    ),
    (
        "an unlisted code seen only by polling takes the chip",
        lambda s: s.inject_fault(3, code=UNLISTED, severity=MINOR, event=False),
        Health.UNHEALTHY,
    ),
    ("a dropped card (-8012) takes the chip", lambda s: s.drop(3), Health.UNHEALTHY),
]


@pytest.mark.parametrize("machine", PUBLISHED_NODES)
@pytest.mark.parametrize(("rule", "fault", "expected"), RULES, ids=[r[0] for r in RULES])
def test_fault_class_decides_health(
    fake_root: FakeRoot, machine: str, rule: str, fault: Fault, expected: Health
) -> None:
    """One DCMI condition on chip 3; the chip's health follows the reference plugin's class
    for it (before, any code, and any health value but 0, made the chip Unhealthy)."""
    sim, node = _open(fake_root, machine)
    fault(sim)
    assert _health(node, machine, 3) is expected, rule


@pytest.mark.parametrize("machine", PUBLISHED_NODES)
def test_operators_table_entry_overrides_the_shipped_class(
    fake_root: FakeRoot, machine: str
) -> None:
    """faultCodes in config: the shipped RestartBusiness code declared NotHandleFault keeps
    the chip on every machine."""
    sim, node = _open(
        fake_root, machine, faultCodes={"NotHandleFault": [f"0x{SIMULATED_FAULT_CODE:X}"]}
    )
    sim.inject_fault(3)
    assert _health(node, machine, 3) is Health.HEALTHY


# -- item 6: HCCS rings by product --------------------------------------------------------------


def test_atlas_800_9000_keeps_a_small_job_in_one_ring(fake_root: FakeRoot) -> None:
    """Two HCCS rings (0-3, 4-7): with chips 0 and 1 busy, 2 chips come from ring 0's two
    free chips (published order for 2: a ring with 2 free first), 4 from ring 1, and a
    strict node refuses 3+4 naming the rule."""
    _, node = _open(fake_root, "atlas-800-9000", hccsStrict=True)
    free = [f"Ascend910-{i}" for i in range(2, 8)]
    assert sorted(node.preferred("huawei.com/Ascend910", free, [], 2) or []) == [
        "Ascend910-2",
        "Ascend910-3",
    ]
    assert sorted(node.preferred("huawei.com/Ascend910", free, [], 4) or []) == [
        f"Ascend910-{i}" for i in range(4, 8)
    ]
    with pytest.raises(HccsViolation, match="must stay within one HCCS ring"):
        node.check_allocation("huawei.com/Ascend910", ["Ascend910-3", "Ascend910-4"])


@pytest.mark.parametrize("machine", ["atlas-800t-a2", "atlas-800-3000"])
def test_machines_without_rings_leave_placement_to_the_host(
    fake_root: FakeRoot, machine: str
) -> None:
    """The 910B full mesh and the 310P server have no rings: no ring preference, and even a
    strict node accepts chips 3 and 4 together (a fixed group size of 4 would refuse)."""
    _, node = _open(fake_root, machine, hccsStrict=True)
    resource = f"huawei.com/{FAMILY[machine]}"
    ids = [f"{FAMILY[machine]}-{i}" for i in range(8)]
    assert node.ring_size == 0
    assert node.preferred(resource, ids, [], 2) is None
    node.check_allocation(resource, [ids[3], ids[4]])


# -- item 7: what CANN reads from the host ------------------------------------------------------


@pytest.mark.parametrize("machine", PUBLISHED_NODES)
def test_plain_runtime_mounts_what_cann_reads(fake_root: FakeRoot, machine: str) -> None:
    """useAscendRuntime false: the driver's version.info and /etc/ascend_install.info are
    mounted read-only once per container (the old driver mounted neither)."""
    _, node = _open(fake_root, machine, useAscendRuntime=False)
    resource = f"huawei.com/{FAMILY[machine]}"
    spec = next(s for s in node.specs() if s.name == resource)
    devices = {d.id: d for d in node.enumerate(resource)}
    edits = compose(spec, devices, list(devices)[:2])
    for path in ("/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info"):
        assert edits.mounts.count(Mount(host_path=path, container_path=path, read_only=True)) == 1
    assert edits.envs == {}
